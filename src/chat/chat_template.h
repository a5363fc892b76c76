/* chat_template.h — a model's chat template, rendered as transformers' apply_chat_template.
 *
 * Loading reads the model directory the way transformers does: `chat_template.jinja` if
 * present, else `chat_template` in tokenizer_config.json (a string, or a list of
 * {name, template} of which "default" is used unless a name is asked for), plus the special
 * tokens (bos_token, eos_token, unk_token, pad_token, ... as strings or {content: ...}).
 *
 * Rendering takes {"messages": [...], "tools": [...], "add_generation_prompt": bool,
 * ...other template kwargs such as enable_thinking}. As in transformers, the special tokens
 * are template variables that the input may override, `tools` and `documents` are None
 * when absent, and `continue_final_message: true` cuts the output right after the final
 * message's content (and is not passed to the template).
 *
 * A chat_template_t is immutable after loading; any number of threads may render with it.
 */
#ifndef KILN_CHAT_TEMPLATE_H
#define KILN_CHAT_TEMPLATE_H

#include <jansson.h>
#include <stddef.h>
#include "base/err.h"

typedef struct chat_template chat_template_t;

/* model_dir: reads tokenizer_config.json (chat_template, bos_token, eos_token) and/or chat_template.jinja. */
chat_template_t *chat_template_load(const char *model_dir, err_t *e);
/* Like chat_template_load, picking a named template ("tool_use", ...) from a list-valued
 * chat_template; name NULL means "default". */
chat_template_t *chat_template_load_named(const char *model_dir, const char *name, err_t *e);
/* From a template string directly (bos/eos may be NULL). */
chat_template_t *chat_template_from_string(const char *source, const char *bos, const char *eos, err_t *e);
void chat_template_free(chat_template_t *ct);
/* input: {"messages":..., "tools":..., "add_generation_prompt":..., other kwargs}. *out malloc'd, NUL-terminated. */
int chat_template_render(const chat_template_t *ct, const json_t *input, char **out, size_t *out_len, err_t *e);

/* The template text, and the names of the templates a list-valued chat_template offers
 * (a JSON array of strings, owned by ct; empty when the config had a single template). */
const char *chat_template_source(const chat_template_t *ct);
const json_t *chat_template_names(const chat_template_t *ct);
const char *chat_template_bos(const chat_template_t *ct);
const char *chat_template_eos(const chat_template_t *ct);

#endif
