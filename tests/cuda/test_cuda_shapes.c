/* test_cuda_shapes.c — the CUDA backend against the CPU backend at real model shapes.
 *
 * The fixtures of test_cuda_parity are tiny (head_dim 16-32, a few hundred columns), so the
 * kernel choices that real checkpoints take — the tensor-core decode attention and its cluster
 * splits, the batch-1 GEMVs, the 64-token qmma / 128-token wgmma tiles and their slices, the
 * prefill dequantization past them, CUDA graphs over growing contexts — are tested kernel by
 * kernel (test_cuda_kernels), not as a model. Session 32's graph crash (a decode passing 128
 * positions) lived exactly there. Here 2-layer checkpoints with the shapes of qwen3-0.6b (bf16
 * and MLX 4-bit) and llama-3.2-1b (MLX 8-bit), written by synth_write, run on "cuda" (graphs
 * on, f16 cache) and on "cpu" (f16 cache), the same token ids — and the same for llama-3-8b (MLX q4),
 * Qwen3.5-0.8B (bf16 and q4: gated DeltaNet layers and a gated full-attention layer, head_dim
 * 256) and Gemma 3 1B (q4: sliding layers with a 512-token window and a global one):
 *  - prompts of 1, 7, 63, 64, 65, 100, 128, 129, 192, 193, 256 and 300 tokens in one step
 *    (each a fresh sequence; logits of every 7th token and the last);
 *  - one sequence decoding from a 16-token prompt through position 400 (gemma3: 600), a token a step;
 *  - mixed steps: a prefill chunk, a second chunk of a longer prompt and two decode rows at
 *    different contexts in one batch.
 * Every step's logits within 1e-2 of the CPU's, relative to the step's largest |logit| — the
 * issue's bound for the bf16 activation path (docs/cuda.md, Numerics). KILN_TEST_SHAPES_ONLY=N:
 * the N-th checkpoint alone (0..6). */
#include <unistd.h>
#include "cuda_test.h"
#include "ct_synth.h"
#include "model/model.h"

#define SH_TOL 1e-2
#define SH_END 640 /* room for a decode run's positions (each checkpoint its own end) */
#define SH_MAXP 300

static double worst;

static model_t *load(const char *dir, const char *backend) {
    err_t e = {0};
    model_opts_t o = {backend, 0};
    model_t *m = model_load(dir, &o, &e);
    if (!m) { CHECK(0, "load %s on %s: %s", dir, backend, e.msg); return NULL; }
    if (model_init_kv(m, 256, 16, DT_F16, &e)) { CHECK(0, "%s on %s: %s", dir, backend, e.msg); model_free(m); return NULL; }
    return m;
}

/* One batch on both models: b names the cuda model's sequences (s0[i]); the cpu model runs the
 * same batch on its own (s1[i]). The logits compared. */
static int step_both(model_t *const *m, const batch_t *b, kv_seq_t *s0, kv_seq_t *s1, const char *what, float *g, float *c) {
    err_t e = {0};
    for (int k = 0; k < 2; k++) {
        batch_t bk = *b;
        kv_seq_t *sp[8];
        for (int r = 0; r < b->n_rows; r++) sp[r] = k ? s1 + (b->seq[r] - s0) : b->seq[r];
        bk.seq = sp;
        for (int r = 0; r < b->n_rows; r++) {
            const int end = b->pos[b->row_start[r + 1] - 1] + 1;
            if (kv_seq_reserve(sp[r], &m[k]->kv, end, &e)) { CHECK(0, "%s: reserve: %s", what, e.msg); return -1; }
        }
        if (model_forward(m[k], &bk, k ? c : g, &e)) { CHECK(0, "%s on %s: %s", what, k ? "cpu" : "cuda", e.msg); return -1; }
    }
    const double err = ct_rel_err(g, c, (size_t)b->n_logits * m[0]->cfg.vocab_size);
    if (err > worst) worst = err;
    CHECK(err < SH_TOL, "%s: logits rel err %.3g against the cpu (tol %g)", what, err, SH_TOL);
    return 0;
}

static void check_checkpoint(const char *preset, dtype_t dt, int bits, int layers, int end) {
    char dir[] = "/tmp/kiln-test-shapes-XXXXXX", why[1200];
    char name[64];
    snprintf(name, sizeof name, "%s %s", preset, bits == 4 ? "q4" : bits == 8 ? "q8" : dtype_name(dt));
    printf("# %s, %d layers: synth, then cuda and cpu\n", name, layers);
    model_t *m[2] = {NULL, NULL};
    float *g = NULL, *c = NULL;
    int32_t *tok = NULL, *pos = NULL, *li = NULL;
    kv_seq_t s[2][4];
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 4; i++) kv_seq_init(&s[k][i]);
    if (ct_synth_tmp(dir, preset, dt, bits, layers, 9, why, sizeof why)) { CHECK(0, "%s: %s", name, why); goto out; }
    if (!(m[0] = load(dir, "cuda")) || !(m[1] = load(dir, "cpu"))) goto out;
    const int V = m[0]->cfg.vocab_size;
    g = malloc(sizeof(float) * 64 * V);
    c = malloc(sizeof(float) * 64 * V);
    tok = malloc(sizeof(int32_t) * 4 * SH_END);
    pos = malloc(sizeof(int32_t) * 4 * SH_END);
    li = malloc(sizeof(int32_t) * 4 * SH_END);
    uint64_t seed = 3;
    for (int i = 0; i < 4 * SH_END; i++) tok[i] = (int32_t)((ct_rand(&seed) + 1.0f) * 0.5f * (V - 1));
    int32_t bt[64]; /* a mixed step's ids, row after row */
    worst = 0;

    /* prompts in one step, fresh sequences */
    const int P[] = {1, 7, 63, 64, 65, 100, 128, 129, 192, 193, 256, SH_MAXP};
    for (size_t pi = 0; pi < sizeof P / sizeof P[0]; pi++) {
        int n = P[pi], nl = 0;
        for (int i = 0; i < n; i++) {
            pos[i] = i;
            if (i % 7 == 0 || i == n - 1) li[nl++] = i;
        }
        int32_t rs[2] = {0, n};
        kv_seq_t *sp = &s[0][0];
        batch_t b = {1, n, tok, pos, rs, &sp, li, nl};
        char what[160];
        snprintf(what, sizeof what, "%s prompt of %d", name, n);
        if (step_both(m, &b, s[0], s[1], what, g, c)) goto out;
        for (int k = 0; k < 2; k++) {
            model_seq_release(m[k], &s[k][0]);
            kv_seq_free(&s[k][0], &m[k]->kv);
        }
    }
    printf("# %-18s prompts of 1..%d tokens: worst rel err %.3g (tol %g)\n", name, SH_MAXP, worst, SH_TOL);

    /* a 16-token prompt, then a token a step through end (the decode attention's 1 -> 2 -> 4 splits;
     * gemma3's 512-token window) */
    worst = 0;
    for (int p = 0; p < end; p = p ? p + 1 : 16) {
        const int n = p ? 1 : 16;
        for (int i = 0; i < n; i++) pos[i] = p + i;
        int32_t rs[2] = {0, n}, l1 = n - 1;
        kv_seq_t *sp = &s[0][0];
        batch_t b = {1, n, tok + p, pos, rs, &sp, &l1, 1};
        char what[160];
        snprintf(what, sizeof what, "%s decode at position %d", name, p + n - 1);
        if (step_both(m, &b, s[0], s[1], what, g, c)) goto out;
    }
    printf("# %-18s decode 16..%d, a token a step: worst rel err %.3g\n", name, end - 1, worst);

    /* mixed steps: rows 1-3 first get contexts of 140, 30 and 260 tokens; then each step has row 0's
     * next prompt chunk (40 tokens), row 1 and row 3 one decode token, row 2 a 9-token chunk */
    worst = 0;
    const int ctx[4] = {0, 140, 30, 260}; /* (row 0 starts fresh: the decode run's sequence, freed below) */
    for (int k = 0; k < 2; k++) {
        model_seq_release(m[k], &s[k][0]);
        kv_seq_free(&s[k][0], &m[k]->kv);
    }
    for (int r = 1; r < 4; r++) {
        for (int i = 0; i < ctx[r]; i++) pos[i] = i;
        int32_t rs[2] = {0, ctx[r]}, l1 = ctx[r] - 1;
        kv_seq_t *sp = &s[0][r];
        batch_t b = {1, ctx[r], tok + r * SH_END, pos, rs, &sp, &l1, 1};
        if (step_both(m, &b, s[0], s[1], "mixed: a row's context", g, c)) goto out;
    }
    int at[4] = {0, 140, 30, 260};
    for (int st = 0; st < 4; st++) {
        const int len[4] = {40, 1, 9, 1};
        int32_t rs[5] = {0}, T = 0;
        kv_seq_t *sp[4];
        for (int r = 0; r < 4; r++) {
            for (int i = 0; i < len[r]; i++, T++) {
                bt[T] = tok[r * SH_END + at[r] + i];
                pos[T] = at[r] + i;
                li[T] = T;
            }
            rs[r + 1] = T;
            sp[r] = &s[0][r];
            at[r] += len[r];
        }
        batch_t b = {4, T, bt, pos, rs, sp, li, T};
        char what[160];
        snprintf(what, sizeof what, "%s mixed step %d (chunks of 40 and 9, two decode rows)", name, st);
        if (step_both(m, &b, s[0], s[1], what, g, c)) goto out;
    }
    printf("# %-18s mixed steps (prefill chunks and decode rows, 51 tokens): worst rel err %.3g\n", name, worst);
out:
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 4; i++)
            if (m[k]) {
                model_seq_release(m[k], &s[k][i]);
                kv_seq_free(&s[k][i], &m[k]->kv);
            }
    model_free(m[0]);
    model_free(m[1]);
    free(g); free(c); free(tok); free(pos); free(li);
    ct_rm_tree(dir);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *only = getenv("KILN_TEST_SHAPES_ONLY");
    /* layers: 2, or enough to reach a hybrid's first full-attention layer (qwen3.5: every 4th) and
     * gemma3's first global one (every 6th); gemma3 decodes past its 512-token window */
    const struct { const char *preset; dtype_t dt; int bits, layers, end; } ck[] = {
        {"qwen3-0.6b", DT_BF16, 0, 2, 400}, {"qwen3-0.6b", DT_BF16, 4, 2, 400}, {"llama-3.2-1b", DT_BF16, 8, 2, 400},
        {"llama-3-8b", DT_BF16, 4, 2, 400}, {"qwen3.5-0.8b", DT_BF16, 0, 4, 400}, {"qwen3.5-0.8b", DT_BF16, 4, 4, 400},
        {"gemma3-1b", DT_BF16, 4, 6, 600}};
    for (int i = 0; i < (int)(sizeof ck / sizeof ck[0]); i++)
        if (!only || atoi(only) == i) check_checkpoint(ck[i].preset, ck[i].dt, ck[i].bits, ck[i].layers, ck[i].end);
    return ct_done("test_cuda_shapes");
}
