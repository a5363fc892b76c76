/* cmd_bench.c — `kiln bench MODEL_DIR --prompt-tokens 512 --gen-tokens 128`: prefill and
 * batch-1 decode throughput on a deterministic pseudo-random prompt. Decode also reports
 * the weight bytes read per token and the bandwidth that implies, for roofline ratios. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli/cli.h"
#include "cli/model_args.h"
#include "engine/sampler.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void usage(FILE *f) {
    fprintf(f, "usage: kiln bench [MODEL_DIR] [--prompt-tokens N] [--gen-tokens M] [--runs R] [--json] [options]\n"
               "  Prefill tokens/s over an N-token prompt (one step) and batch-1 greedy decode\n"
               "  tokens/s over M tokens; the best of R runs (default 1).\n%s",
            model_args_help());
}

int cmd_bench(int argc, char **argv) {
    const char *dir = NULL;
    long np = 512, ng = 128, runs = 1;
    int json = 0;
    model_args_t ma;
    model_args_defaults(&ma);
    ma.kv_dtype = DT_F16;
    for (int i = 1; i < argc; i++) {
        int r = model_args_parse(&ma, "bench", argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) { usage(stdout); return 0; }
        if (!strcmp(f, "--json")) { json = 1; continue; }
        if (f[0] == '-') {
            if (i + 1 >= argc) { fprintf(stderr, "kiln bench: %s needs a value\n", f); return 2; }
            const char *v = argv[++i];
            int bad;
            if (!strcmp(f, "--prompt-tokens")) bad = cli_parse_int("bench", f, v, 1, 1 << 20, &np);
            else if (!strcmp(f, "--gen-tokens")) bad = cli_parse_int("bench", f, v, 0, 1 << 20, &ng);
            else if (!strcmp(f, "--runs")) bad = cli_parse_int("bench", f, v, 1, 100, &runs);
            else { fprintf(stderr, "kiln bench: unknown flag '%s'\n", f); return 2; }
            if (bad) return 2;
        } else if (!dir) dir = f;
        else { fprintf(stderr, "kiln bench: unexpected argument '%s'\n", f); return 2; }
    }
    if (!dir) dir = cli_default_model();
    model_t *m = model_args_load(&ma, "bench", dir, (int)(np + ng + 1), 1);
    if (!m) return 1;
    int V = m->cfg.vocab_size, T = (int)np, rc = 1;
    int32_t *tok = malloc(sizeof(int32_t) * (np + ng + 1)), *pos = malloc(sizeof(int32_t) * np);
    float *logits = malloc(sizeof(float) * V);
    for (int i = 0; i < T; i++) { tok[i] = (int32_t)(rng_uniform(1234, (uint64_t)i) * V); pos[i] = i; }
    double best_pf = 1e30, best_dc = 1e30;
    err_t e = {0};
    kv_seq_t seq;
    kv_seq_t *seqp = &seq;
    for (int run = 0; run < runs; run++) {
        kv_seq_init(&seq);
        if (kv_seq_reserve(&seq, &m->kv, (int)(np + ng + 1), &e)) goto fail;
        int32_t rs[2] = {0, T}, li = T - 1;
        batch_t b = {1, T, tok, pos, rs, &seqp, &li, 1};
        double t0 = now_s();
        if (model_forward(m, &b, logits, &e)) goto fail;
        double t1 = now_s();
        for (int g = 0; g < ng; g++) {
            int32_t best = 0;
            for (int v = 1; v < V; v++) if (logits[v] > logits[best]) best = v;
            tok[T + g] = best;
            int32_t p = T + g, rs1[2] = {0, 1}, l0 = 0;
            batch_t d = {1, 1, &tok[T + g], &p, rs1, &seqp, &l0, 1};
            if (model_forward(m, &d, logits, &e)) goto fail;
        }
        double t2 = now_s();
        if (t1 - t0 < best_pf) best_pf = t1 - t0;
        if (ng && t2 - t1 < best_dc) best_dc = t2 - t1;
        kv_seq_free(&seq, &m->kv);
    }
    {
        double pf = T / best_pf, dc = ng ? ng / best_dc : 0;
        double gbs = dc * (double)m->weight_bytes / 1e9;
        if (json)
            printf("{\"model\": \"%s\", \"backend\": \"%s\", \"simd\": \"%s\", \"threads\": %d, \"prompt_tokens\": %ld, "
                   "\"gen_tokens\": %ld, \"prefill_tok_s\": %.2f, \"decode_tok_s\": %.2f, \"weight_bytes\": %zu, "
                   "\"decode_weight_gb_s\": %.2f, \"params\": %lld}\n",
                   dir, ma.backend, backend_simd_name(m->be), m->be->n_threads, np, ng, pf, dc, m->weight_bytes, gbs,
                   (long long)m->n_params);
        else {
            printf("model %s (%s, %s kernels, %d threads)\n", dir, ma.backend, backend_simd_name(m->be), m->be->n_threads);
            printf("prefill: %ld tokens in %.3f s = %.1f tok/s\n", np, best_pf, pf);
            if (ng) printf("decode:  %ld tokens in %.3f s = %.2f tok/s (%.1f MB weights/token -> %.2f GB/s)\n", ng, best_dc, dc,
                           m->weight_bytes / 1e6, gbs);
        }
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "kiln bench: %s\n", e.msg);
    kv_seq_free(&seq, &m->kv);
done:
    free(tok); free(pos); free(logits);
    model_free(m);
    return rc;
}
