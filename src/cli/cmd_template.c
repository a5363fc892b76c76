/* cmd_template.c — `kiln template`: render a model's chat template from the command line.
 *
 *   kiln template DIR --chat-json F [--out O] [--name NAME]
 * F holds {"messages": ..., "tools": ..., "add_generation_prompt": ..., other template
 * kwargs}; the rendered prompt bytes go to O (stdout without --out), with no newline added,
 * so the output can be compared byte for byte with transformers' apply_chat_template.
 * Exit status: 0 ok, 1 when loading or rendering fails (the template's own message, e.g.
 * from raise_exception, is printed), 2 usage error.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "chat/chat_template.h"
#include "cli/cli.h"

#define MAX_CHAT_JSON ((size_t)256 << 20)

static void usage(FILE *f) {
    fprintf(f, "usage: kiln template DIR --chat-json F [--out O] [--name NAME]\n"
               "  Renders DIR's chat template (chat_template.jinja or tokenizer_config.json) with the\n"
               "  JSON object in F: {\"messages\": [...], \"tools\": [...], \"add_generation_prompt\": bool,\n"
               "  ...other template variables}. Writes the prompt to O (default stdout), without a\n"
               "  trailing newline. --name picks a named template (e.g. tool_use) from a list-valued\n"
               "  chat_template. F may be - for stdin.\n");
}

static char *read_stdin(size_t max, size_t *len) {
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n - 1, stdin);
        n += got;
        if (got == 0) break;
        if (n + 1 == cap) {
            if (cap > max) { free(buf); return NULL; }
            char *nb = realloc(buf, cap * 2);
            if (!nb) { free(buf); return NULL; }
            buf = nb;
            cap *= 2;
        }
    }
    if (buf) buf[n] = 0;
    *len = n;
    return buf;
}

int cmd_template(int argc, char **argv) {
    const char *dir = NULL, *chat_json = NULL, *out_path = NULL, *name = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        if (!strcmp(a, "--chat-json") || !strcmp(a, "--out") || !strcmp(a, "--name")) {
            if (i + 1 >= argc) { fprintf(stderr, "kiln template: %s needs a value\n", a); return 2; }
            const char *v = argv[++i];
            if (!strcmp(a, "--chat-json")) chat_json = v;
            else if (!strcmp(a, "--out")) out_path = v;
            else name = v;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "kiln template: unknown flag '%s'\n", a);
            usage(stderr);
            return 2;
        } else if (!dir) dir = a;
        else { fprintf(stderr, "kiln template: unexpected argument '%s'\n", a); return 2; }
    }
    if (!dir || !chat_json) {
        fprintf(stderr, "kiln template: %s\n", !dir ? "missing model directory" : "missing --chat-json F");
        usage(stderr);
        return 2;
    }
    err_t e = {{0}};
    int rc = 1;
    char *text = NULL, *out = NULL;
    json_t *input = NULL;
    chat_template_t *ct = NULL;
    size_t len = 0;
    if (!strcmp(chat_json, "-")) {
        text = read_stdin(MAX_CHAT_JSON, &len);
        if (!text) { fprintf(stderr, "kiln template: cannot read stdin\n"); goto done; }
    } else if (!(text = file_read(chat_json, MAX_CHAT_JSON, &len, &e))) {
        fprintf(stderr, "kiln template: --chat-json: %s\n", e.msg);
        goto done;
    }
    json_error_t je;
    input = json_loadb(text, len, JSON_ALLOW_NUL, &je);
    if (!input) {
        fprintf(stderr, "kiln template: %s: line %d, column %d: %s\n", chat_json, je.line, je.column, je.text);
        goto done;
    }
    ct = chat_template_load_named(dir, name, &e);
    if (!ct) { fprintf(stderr, "kiln template: %s\n", e.msg); goto done; }
    size_t n = 0;
    if (chat_template_render(ct, input, &out, &n, &e)) { fprintf(stderr, "kiln template: %s\n", e.msg); goto done; }
    if (out_path) {
        if (file_write_atomic(out_path, out, n, &e)) { fprintf(stderr, "kiln template: --out: %s\n", e.msg); goto done; }
    } else if (fwrite(out, 1, n, stdout) != n || fflush(stdout)) {
        fprintf(stderr, "kiln template: writing stdout failed\n");
        goto done;
    }
    rc = 0;
done:
    free(text);
    free(out);
    json_decref(input);
    chat_template_free(ct);
    return rc;
}
