/* cmd_logits.c — `kiln logits MODEL_DIR --ids 1,2,3 --out FILE.npy`: one forward over the
 * ids with an f32 KV cache (unless --kv-dtype), logits at every position as float32 [T, vocab]. This is the
 * command parity tests compare against transformers' reference logits. The file is
 * written atomically: on any error no output file exists. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/npy.h"
#include "cli/cli.h"
#include "cli/model_args.h"

static void usage(FILE *f) {
    fprintf(f, "usage: kiln logits MODEL_DIR --ids 1,2,3 --out FILE.npy [--chunk N] [options]\n"
               "  One forward over the token ids; writes the logits at every position as a\n"
               "  float32 [T, vocab] .npy. Runs with an f32 KV cache unless --kv-dtype says otherwise.\n"
               "  --chunk N               prefill N tokens per step (default: all at once)\n%s",
            model_args_help());
}

int cmd_logits(int argc, char **argv) {
    const char *dir = NULL, *out = NULL, *ids_s = NULL;
    long chunk = 0;
    model_args_t ma;
    model_args_defaults(&ma);
    ma.kv_dtype = DT_F32; /* the parity contract's cache; an explicit --kv-dtype overrides it */
    for (int i = 1; i < argc; i++) {
        int r = model_args_parse(&ma, "logits", argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { usage(stdout); return 0; }
        if ((!strcmp(argv[i], "--ids") || !strcmp(argv[i], "--out") || !strcmp(argv[i], "--chunk")) && i + 1 >= argc) {
            fprintf(stderr, "kiln logits: %s needs a value\n", argv[i]);
            return 2;
        }
        if (!strcmp(argv[i], "--ids")) ids_s = argv[++i];
        else if (!strcmp(argv[i], "--out")) out = argv[++i];
        else if (!strcmp(argv[i], "--chunk")) { if (cli_parse_int("logits", "--chunk", argv[++i], 1, 1 << 20, &chunk)) return 2; }
        else if (argv[i][0] == '-') { fprintf(stderr, "kiln logits: unknown flag '%s'\n", argv[i]); return 2; }
        else if (!dir) dir = argv[i];
        else { fprintf(stderr, "kiln logits: unexpected argument '%s'\n", argv[i]); return 2; }
    }
    if (!dir) dir = cli_default_model();
    if (!ids_s || !out) { fprintf(stderr, "kiln logits: --ids and --out are required\n"); return 2; }
    int *ids, n;
    if (cli_parse_ids("logits", "--ids", ids_s, &ids, &n)) return 2;
    model_t *m = model_args_load(&ma, "logits", dir, n, 1);
    if (!m) { free(ids); return 1; }
    int rc = 1, V = m->cfg.vocab_size;
    for (int i = 0; i < n; i++)
        if (ids[i] >= V) {
            fprintf(stderr, "kiln logits: --ids: token %d (item %d) is outside the vocabulary (0..%d)\n", ids[i], i + 1, V - 1);
            free(ids);
            model_free(m);
            return 2;
        }
    float *logits = malloc(sizeof(float) * (size_t)n * V);
    int32_t *pos = malloc(sizeof(int32_t) * n), *li = malloc(sizeof(int32_t) * n), *tok = malloc(sizeof(int32_t) * n);
    kv_seq_t seq;
    kv_seq_init(&seq);
    kv_seq_t *seqp = &seq;
    err_t e = {0};
    if (kv_seq_reserve(&seq, &m->kv, n, &e)) goto fail;
    if (chunk <= 0) chunk = n;
    for (int s = 0; s < n; s += (int)chunk) {
        int len = n - s < chunk ? n - s : (int)chunk;
        for (int i = 0; i < len; i++) { pos[i] = s + i; li[i] = i; tok[i] = ids[s + i]; }
        int32_t rs[2] = {0, len};
        batch_t b = {1, len, tok, pos, rs, &seqp, li, len};
        if (model_forward(m, &b, logits + (size_t)s * V, &e)) goto fail;
    }
    if (npy_write_f32(out, logits, (size_t)n, (size_t)V, &e)) goto fail;
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "kiln logits: %s\n", e.msg);
done:
    kv_seq_free(&seq, &m->kv);
    free(logits); free(pos); free(li); free(tok); free(ids);
    model_free(m);
    return rc;
}
