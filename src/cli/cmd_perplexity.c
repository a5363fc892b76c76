/* cmd_perplexity.c — `kiln perplexity MODEL --text-file F`: perplexity of a text, with the
 * protocol tools/train-default/EVAL.md fixes so it compares with PyTorch: tokenize the
 * whole file (no special tokens), cut it into consecutive non-overlapping windows of N
 * tokens (the last one partial), evaluate each window from scratch, and report
 * exp(total NLL / predicted tokens), where every token but each window's first is
 * predicted. Log-softmax is done in double so the sum over ~10^5 tokens stays exact. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "base/file.h"
#include "cli/cli.h"
#include "cli/model_args.h"
#include "tokenizer/tokenizer.h"

static void usage(FILE *f) {
    fprintf(f, "usage: kiln perplexity [MODEL_DIR] --text-file F [--context N] [--max-windows W] [--json] [options]\n"
               "  Perplexity over F in non-overlapping windows of N tokens (default: 512, or the\n"
               "  model's context if smaller), each evaluated from scratch.\n%s",
            model_args_help());
}

int cmd_perplexity(int argc, char **argv) {
    const char *dir = NULL, *file = NULL;
    long ctx = 512, max_windows = 0;
    int json = 0;
    model_args_t ma;
    model_args_defaults(&ma);
    for (int i = 1; i < argc; i++) {
        int r = model_args_parse(&ma, "perplexity", argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) { usage(stdout); return 0; }
        if (!strcmp(f, "--json")) { json = 1; continue; }
        if (f[0] == '-') {
            if (i + 1 >= argc) { fprintf(stderr, "kiln perplexity: %s needs a value\n", f); return 2; }
            const char *v = argv[++i];
            int bad = 0;
            if (!strcmp(f, "--text-file")) file = v;
            else if (!strcmp(f, "--context")) bad = cli_parse_int("perplexity", f, v, 2, 1 << 20, &ctx);
            else if (!strcmp(f, "--max-windows")) bad = cli_parse_int("perplexity", f, v, 0, 1 << 30, &max_windows);
            else { fprintf(stderr, "kiln perplexity: unknown flag '%s'\n", f); return 2; }
            if (bad) return 2;
        } else if (!dir) dir = f;
        else { fprintf(stderr, "kiln perplexity: unexpected argument '%s'\n", f); return 2; }
    }
    if (!dir) dir = cli_default_model();
    if (!file) { fprintf(stderr, "kiln perplexity: --text-file is required\n"); return 2; }
    err_t e = {0};
    size_t len;
    char *text = file_read(file, (size_t)1 << 30, &len, &e);
    if (!text) { fprintf(stderr, "kiln perplexity: %s\n", e.msg); return 1; }
    tokenizer_t *tok = tokenizer_load(dir, &e);
    if (!tok) { fprintf(stderr, "kiln perplexity: %s\n", e.msg); free(text); return 1; }
    int32_t *ids;
    int n;
    if (tokenizer_encode(tok, text, len, 0, &ids, &n, &e)) {
        fprintf(stderr, "kiln perplexity: %s: %s\n", file, e.msg);
        free(text); tokenizer_free(tok);
        return 1;
    }
    free(text);
    model_t *m = model_args_load(&ma, "perplexity", dir, (int)ctx, 1);
    if (!m) { free(ids); tokenizer_free(tok); return 1; }
    if (ctx > m->cfg.max_pos) ctx = m->cfg.max_pos;
    int V = m->cfg.vocab_size, rc = 1;
    float *logits = malloc(sizeof(float) * ctx * V);
    int32_t *pos = malloc(sizeof(int32_t) * ctx), *li = malloc(sizeof(int32_t) * ctx);
    for (int i = 0; i < ctx; i++) { pos[i] = i; li[i] = i; }
    double nll = 0;
    long count = 0, windows = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int s = 0; s < n; s += (int)ctx) {
        if (max_windows && windows == max_windows) break;
        int w = n - s < ctx ? n - s : (int)ctx;
        kv_seq_t seq;
        kv_seq_init(&seq);
        kv_seq_t *sp = &seq;
        int32_t rs[2] = {0, w};
        batch_t b = {1, w, ids + s, pos, rs, &sp, li, w};
        if (kv_seq_reserve(&seq, &m->kv, w, &e) || model_forward(m, &b, logits, &e)) {
            fprintf(stderr, "kiln perplexity: window %ld: %s\n", windows, e.msg);
            kv_seq_free(&seq, &m->kv);
            goto done;
        }
        kv_seq_free(&seq, &m->kv);
        for (int t = 0; t + 1 < w; t++) {
            const float *lg = logits + (size_t)t * V;
            double mx = lg[0], sum = 0;
            for (int v = 1; v < V; v++) if (lg[v] > mx) mx = lg[v];
            for (int v = 0; v < V; v++) sum += exp((double)lg[v] - mx);
            nll += mx + log(sum) - lg[ids[s + t + 1]];
            count++;
        }
        windows++;
        if (isatty(2) && !json) fprintf(stderr, "\rwindow %ld/%d, ppl so far %.4f", windows, (n + (int)ctx - 1) / (int)ctx, exp(nll / count));
    }
    if (isatty(2) && !json) fprintf(stderr, "\n");
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
    if (count == 0) { fprintf(stderr, "kiln perplexity: %s has fewer than 2 tokens\n", file); goto done; }
    if (json)
        printf("{\"perplexity\": %.6f, \"tokens\": %d, \"predicted\": %ld, \"windows\": %ld, \"context\": %ld, \"seconds\": %.2f}\n",
               exp(nll / count), n, count, windows, ctx, secs);
    else
        printf("perplexity %.4f over %ld predicted tokens (%d tokens, %ld windows of %ld) in %.1f s\n", exp(nll / count), count, n,
               windows, ctx, secs);
    rc = 0;
done:
    free(logits); free(pos); free(li); free(ids);
    tokenizer_free(tok);
    model_free(m);
    return rc;
}
