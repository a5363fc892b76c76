/* cmd_tokenize.c — `kiln tokenize` and `kiln detokenize`: the tokenizer from the command line.
 *
 *   kiln tokenize DIR (--text STR | --text-file F) [--special] [--json]
 *   kiln detokenize DIR --ids 1,2,3 [--skip-special]
 * DIR is a model directory with tokenizer.json (or the file itself). Without --special no
 * special tokens are added by the post-processor (added tokens written in the text are still
 * matched, as in HF). Exit status: 0 ok, 1 runtime error, 2 usage error.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "cli/cli.h"
#include "tokenizer/tokenizer.h"

#define MAX_TEXT_FILE ((size_t)1 << 30)

static void tok_usage(FILE *f) {
    fprintf(f, "usage: kiln tokenize [DIR] (--text STR | --text-file F) [--special] [--json]\n"
               "  Encodes text with DIR/tokenizer.json (DIR may also be the tokenizer.json file;\n"
               "  default: the bundled model). Prints the ids space-separated, or with --json\n"
               "  {\"ids\": [...], \"tokens\": [...]}. --special applies the post-processor (e.g. BOS).\n");
}

static void detok_usage(FILE *f) {
    fprintf(f, "usage: kiln detokenize [DIR] --ids 1,2,3 [--skip-special]\n"
               "  Decodes token ids with DIR/tokenizer.json and prints the text followed by a newline.\n"
               "  --skip-special drops special tokens (e.g. <|im_end|>).\n");
}

int cmd_tokenize(int argc, char **argv) {
    const char *dir = NULL, *text = NULL, *text_file = NULL;
    int special = 0, json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { tok_usage(stdout); return 0; }
        else if (!strcmp(a, "--special")) special = 1;
        else if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--text") || !strcmp(a, "--text-file")) {
            if (i + 1 >= argc) { fprintf(stderr, "kiln tokenize: %s needs a value\n", a); return 2; }
            if (!strcmp(a, "--text")) text = argv[++i];
            else text_file = argv[++i];
        } else if (a[0] == '-' && a[1]) { fprintf(stderr, "kiln tokenize: unknown flag '%s'\n", a); return 2; }
        else if (!dir) dir = a;
        else { fprintf(stderr, "kiln tokenize: unexpected argument '%s'\n", a); return 2; }
    }
    if (!!text == !!text_file) {
        fprintf(stderr, "kiln tokenize: give exactly one of --text or --text-file\n");
        return 2;
    }
    if (!dir) dir = cli_default_model();
    err_t e = {0};
    size_t len = text ? strlen(text) : 0;
    char *buf = NULL;
    if (text_file && !(buf = file_read(text_file, MAX_TEXT_FILE, &len, &e))) {
        fprintf(stderr, "kiln tokenize: --text-file: %s\n", e.msg);
        return 1;
    }
    tokenizer_t *t = tokenizer_load(dir, &e);
    if (!t) {
        fprintf(stderr, "kiln tokenize: %s\n", e.msg);
        free(buf);
        return 1;
    }
    int32_t *ids = NULL;
    int n = 0, rc = 1;
    if (tokenizer_encode(t, buf ? buf : text, len, special, &ids, &n, &e)) {
        fprintf(stderr, "kiln tokenize: %s%s\n", text_file ? "--text-file: " : "--text: ", e.msg);
        goto out;
    }
    if (json) {
        json_t *o = json_object(), *ja = json_array(), *jt = json_array();
        for (int i = 0; i < n; i++) {
            const char *tok = tokenizer_id_to_token(t, ids[i]);
            json_array_append_new(ja, json_integer(ids[i]));
            json_array_append_new(jt, tok ? json_string(tok) : json_null());
        }
        json_object_set_new(o, "ids", ja);
        json_object_set_new(o, "tokens", jt);
        char *s = json_dumps(o, JSON_PRESERVE_ORDER);
        json_decref(o);
        if (!s) { fprintf(stderr, "kiln tokenize: out of memory\n"); goto out; }
        puts(s);
        free(s);
    } else {
        for (int i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        printf("\n");
    }
    rc = 0;
out:
    free(ids);
    free(buf);
    tokenizer_free(t);
    return rc;
}

int cmd_detokenize(int argc, char **argv) {
    const char *dir = NULL, *ids_s = NULL;
    int skip = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { detok_usage(stdout); return 0; }
        else if (!strcmp(a, "--skip-special")) skip = 1;
        else if (!strcmp(a, "--ids")) {
            if (i + 1 >= argc) { fprintf(stderr, "kiln detokenize: --ids needs a value\n"); return 2; }
            ids_s = argv[++i];
        } else if (a[0] == '-' && a[1]) { fprintf(stderr, "kiln detokenize: unknown flag '%s'\n", a); return 2; }
        else if (!dir) dir = a;
        else { fprintf(stderr, "kiln detokenize: unexpected argument '%s'\n", a); return 2; }
    }
    if (!ids_s) { fprintf(stderr, "kiln detokenize: --ids is required\n"); return 2; }
    int *v, n;
    if (cli_parse_ids("detokenize", "--ids", ids_s, &v, &n)) return 2;
    if (!dir) dir = cli_default_model();
    err_t e = {0};
    tokenizer_t *t = tokenizer_load(dir, &e);
    if (!t) { fprintf(stderr, "kiln detokenize: %s\n", e.msg); free(v); return 1; }
    int32_t *ids = malloc(sizeof *ids * (n ? n : 1));
    char *s = NULL;
    if (ids) {
        for (int i = 0; i < n; i++) ids[i] = (int32_t)v[i];
        s = tokenizer_decode(t, ids, n, skip, &e);
    } else {
        err_set(&e, "out of memory");
    }
    int rc = 1;
    if (!s) fprintf(stderr, "kiln detokenize: --ids: %s\n", e.msg);
    else {
        fwrite(s, 1, strlen(s), stdout);
        fputc('\n', stdout);
        rc = 0;
    }
    free(s);
    free(ids);
    free(v);
    tokenizer_free(t);
    return rc;
}
