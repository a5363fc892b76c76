/* jinja.h — a Jinja2 interpreter for chat templates.
 *
 * The goal is narrow and strict: render the chat templates that Hugging Face models ship
 * exactly as transformers does, byte for byte. transformers renders them with jinja2 in an
 * ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[
 * loopcontrols, generation tag]), a JSON `tojson` filter without HTML escaping, and the
 * globals raise_exception() and strftime_now(). This module reproduces that environment:
 * Python semantics for values (truthiness, repr of lists and dicts, int vs float division,
 * str methods), jinja2's whitespace rules, its scoping, and its default Undefined.
 *
 * A template is parsed once (jinja_parse) into an immutable tree that many threads may
 * render at the same time; each render (jinja_render) owns all of its memory in one arena
 * that is freed when it returns. Hostile templates are bounded by jinja_limits_t: memory,
 * output size, loop iterations and recursion depth all fail with a clean error.
 *
 * Errors name the place: "line 3, column 7: TemplateSyntaxError: ..." for parse errors, and
 * "line 19, column 12: TemplateError: <message>" for raise_exception() and other runtime
 * errors (the class name follows Python's: TypeError, UndefinedError, SecurityError, ...).
 */
#ifndef KILN_JINJA_H
#define KILN_JINJA_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include "base/err.h"

typedef struct jinja_template jinja_template_t;

typedef struct jinja_limits {
    size_t max_memory;      /* bytes a single render may allocate (values, strings, output) */
    size_t max_output;      /* bytes of rendered text */
    uint64_t max_steps;     /* loop iterations + macro calls + filter element visits */
    int max_depth;          /* nesting of macro calls / evaluation recursion */
} jinja_limits_t;

/* The defaults: 256 MiB memory, 32 MiB output, 10M steps, depth 200. */
#define JINJA_DEFAULT_MAX_MEMORY ((size_t)256 << 20)
#define JINJA_DEFAULT_MAX_OUTPUT ((size_t)32 << 20)
#define JINJA_DEFAULT_MAX_STEPS 10000000ull
#define JINJA_DEFAULT_MAX_DEPTH 200
/* Nesting depth the parser accepts (expressions and blocks), so that evaluation of any
 * accepted tree fits comfortably on a thread stack. */
#define JINJA_MAX_PARSE_DEPTH 200
/* Largest template source accepted (real chat templates are under 100 KB); parsing may
 * take up to 256 bytes of memory per source byte. */
#define JINJA_MAX_SOURCE ((size_t)1 << 20)

void jinja_limits_default(jinja_limits_t *lim);

/* Options that change semantics. The defaults are transformers' environment. */
typedef struct jinja_options {
    int allow_mutation;     /* 0 (default): ImmutableSandbox — list.append etc. raise SecurityError */
} jinja_options_t;

/* Parses source (len bytes, UTF-8). Returns NULL and fills e on a syntax error. */
jinja_template_t *jinja_parse(const char *source, size_t len, err_t *e);
void jinja_free(jinja_template_t *t);

/* Renders with the variables of the JSON object `vars` (each key becomes a template
 * variable). `opts` and `lim` may be NULL for the defaults. *out is malloc'd and
 * NUL-terminated; *out_len excludes the NUL. */
int jinja_render(const jinja_template_t *t, const json_t *vars, const jinja_options_t *opts,
                 const jinja_limits_t *lim, char **out, size_t *out_len, err_t *e);

#endif
