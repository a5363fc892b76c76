/* test_ragged.c — ragged batches are exact.
 *
 * Several sequences of different lengths share steps in random mixes of prefill chunks
 * and single-token decode rows; every token's logits must be bitwise the logits of the
 * same sequence run alone in one step. Chunked prefill with chunks of 1, 3, 16 and all at
 * once must agree bitwise too. Run on a dense, a quantized and a qwen3 fixture, with the
 * f32 KV cache and with a bf16 one (chunking still may not change a bit: each token
 * reads the same rounded K/V whichever step wrote it), and with the int8 one (q8: each row's
 * codes and scale depend on that row alone), in 4- and 16-position blocks (16: K transposed
 * per block, the int8 decode tiles' own path). The fixtures have 4- and 8-bit weights only, so
 * `kiln synth`'s tiny qwen3 at 3 and 6 bits (written to a temp folder) covers the 2/3/5/6-bit
 * kernels' integer paths end to end. */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <stdlib.h>
#include "../common/test_util.h"
#include "load/synth_presets.h"
#include "model/model.h"

#define NSEQ 5
#define MAXLEN 40

static int g_bs = 4;

static model_t *load(const char *name, dtype_t kv) {
    char dir[256];
    snprintf(dir, sizeof dir, name[0] == '/' ? "%s" : "tests/fixtures/models/%s", name); /* a path, or a fixture */
    err_t e = {0};
    model_opts_t o = {"cpu", 2};
    model_t *m = model_load(dir, &o, &e);
    if (!m) fail_msg("%s", e.msg);
    if (model_init_kv(m, NSEQ * (MAXLEN / g_bs + 1) + 4, g_bs, kv, &e)) fail_msg("%s", e.msg); /* small blocks: many boundaries */
    return m;
}

/* Runs all sequences under a schedule; sched(step, seq, remaining) says how many tokens
 * the sequence feeds in that step. logits[s] gets [len[s], V]. */
typedef int (*sched_fn)(int step, int s, int remaining, uint64_t *rng);

static void run(model_t *m, int32_t toks[NSEQ][MAXLEN], const int *len, float **logits, sched_fn sched, uint64_t seed) {
    int V = m->cfg.vocab_size, done[NSEQ] = {0};
    kv_seq_t seqs[NSEQ];
    for (int s = 0; s < NSEQ; s++) kv_seq_init(&seqs[s]);
    int32_t tok[NSEQ * MAXLEN], pos[NSEQ * MAXLEN], li[NSEQ * MAXLEN], rs[NSEQ + 1];
    kv_seq_t *sp[NSEQ];
    int owner[NSEQ * MAXLEN], opos[NSEQ * MAXLEN];
    float *out = malloc(sizeof(float) * NSEQ * MAXLEN * V);
    err_t e = {0};
    uint64_t rng = seed;
    for (int step = 0; step < 1000; step++) {
        int nr = 0, T = 0;
        rs[0] = 0;
        for (int s = 0; s < NSEQ; s++) {
            int rem = len[s] - done[s];
            if (!rem) continue;
            int k = sched(step, s, rem, &rng);
            if (k <= 0) continue;
            if (k > rem) k = rem;
            assert_int_equal(kv_seq_reserve(&seqs[s], &m->kv, done[s] + k, &e), 0);
            for (int i = 0; i < k; i++) {
                tok[T] = toks[s][done[s] + i];
                pos[T] = done[s] + i;
                li[T] = T;
                owner[T] = s;
                opos[T] = done[s] + i;
                T++;
            }
            sp[nr] = &seqs[s];
            rs[++nr] = T;
            done[s] += k;
        }
        if (!nr) {
            int all = 1;
            for (int s = 0; s < NSEQ; s++) all &= done[s] == len[s];
            if (all) break;
            continue; /* every row skipped this step */
        }
        batch_t b = {nr, T, tok, pos, rs, sp, li, T};
        if (model_forward(m, &b, out, &e)) fail_msg("%s", e.msg);
        for (int t = 0; t < T; t++) memcpy(logits[owner[t]] + (size_t)opos[t] * V, out + (size_t)t * V, sizeof(float) * V);
    }
    for (int s = 0; s < NSEQ; s++) {
        if (done[s] != len[s]) fail_msg("sequence %d: fed %d of %d tokens", s, done[s], len[s]);
        kv_seq_free(&seqs[s], &m->kv);
    }
    assert_int_equal(m->kv.n_free, m->kv.n_blocks); /* every block back in the pool */
    free(out);
}

static int alone_all(int step, int s, int rem, uint64_t *r) { return step == s ? rem : 0; }
static int chunk1(int step, int s, int rem, uint64_t *r) { return 1; }
static int chunk3(int step, int s, int rem, uint64_t *r) { return 3; }
static int chunk16(int step, int s, int rem, uint64_t *r) { return 16; }
static int random_mix(int step, int s, int rem, uint64_t *r) {
    *r = *r * 6364136223846793005ull + 1442695040888963407ull;
    int c = (int)((*r >> 33) % 8);
    return c < 2 ? 0 : (c < 5 ? 1 : (int)((*r >> 40) % 9) + 1); /* skip, decode-like, or a chunk */
}

static void check(const char *name, dtype_t kv) {
    model_t *m = load(name, kv);
    int V = m->cfg.vocab_size;
    int32_t toks[NSEQ][MAXLEN];
    int len[NSEQ] = {40, 7, 23, 1, 33};
    uint64_t seed = 42;
    for (int s = 0; s < NSEQ; s++)
        for (int i = 0; i < MAXLEN; i++) toks[s][i] = (int32_t)((tu_rand(&seed) + 1.0f) * 0.5f * (V - 1));
    float *ref[NSEQ], *got[NSEQ];
    for (int s = 0; s < NSEQ; s++) {
        ref[s] = calloc((size_t)MAXLEN * V, sizeof(float));
        got[s] = calloc((size_t)MAXLEN * V, sizeof(float));
    }
    run(m, toks, len, ref, alone_all, 0);
    sched_fn scheds[] = {chunk1, chunk3, chunk16, random_mix, random_mix, random_mix};
    const char *names[] = {"chunks of 1", "chunks of 3", "chunks of 16", "random mix 1", "random mix 2", "random mix 3"};
    for (int k = 0; k < 6; k++) {
        run(m, toks, len, got, scheds[k], 1000 + k);
        for (int s = 0; s < NSEQ; s++)
            if (memcmp(got[s], ref[s], sizeof(float) * len[s] * V) != 0)
                fail_msg("%s (kv %s, block %d): %s: sequence %d differs from running alone", name, kv_dtype_name(kv), g_bs, names[k], s);
    }
    printf("# %s kv %s block %d: 6 schedules bitwise equal to each sequence alone\n", name, kv_dtype_name(kv), g_bs);
    for (int s = 0; s < NSEQ; s++) { free(ref[s]); free(got[s]); }
    model_free(m);
}

static void test_llama(void **st) { check("llama-tiny", DT_F32); check("llama-tiny", DT_BF16); }
static void test_quant(void **st) { check("llama-tiny-mlx-q4", DT_F32); check("qwen3-tiny-mlx-mixed", DT_F16); }
static void test_kv_q8(void **st) {
    check("qwen3-tiny", DT_I8);
    g_bs = 16;
    check("qwen3-tiny", DT_I8);
    check("llama-tiny-mlx-q4", DT_I8);
    g_bs = 4;
}
static void test_qwen3(void **st) { check("qwen3-tiny", DT_F32); check("llama-tiny-rope-llama3", DT_F32); }

static int rm_cb(const char *p, const struct stat *sb, int f, struct FTW *w) {
    (void)sb, (void)f, (void)w;
    return remove(p);
}
static char g_tmp[64]; /* the synthesized checkpoint, removed by the teardown even when a check fails */
static int rm_tmp(void **st) {
    (void)st;
    if (g_tmp[0]) nftw(g_tmp, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    g_tmp[0] = 0;
    return 0;
}
static void test_lowbits(void **st) {
    const int bits[] = {3, 6};
    for (int i = 0; i < 2; i++) {
        char *dir = strcpy(g_tmp, "/tmp/kiln-test-ragged-XXXXXX");
        assert_non_null(mkdtemp(dir));
        synth_opts_t o = {0};
        o.preset = synth_preset_find("tiny", "qwen3");
        assert_non_null(o.preset);
        o.dtype = DT_BF16, o.bits = bits[i], o.group_size = 32, o.seed = 11, o.out = dir, o.force = 1;
        err_t e = {0};
        if (synth_write(&o, &e)) fail_msg("synth_write: %s", e.msg);
        check(dir, DT_F32);
        rm_tmp(NULL);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_llama), cmocka_unit_test(test_quant), cmocka_unit_test(test_qwen3),
                                       cmocka_unit_test(test_kv_q8), cmocka_unit_test_teardown(test_lowbits, rm_tmp)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
