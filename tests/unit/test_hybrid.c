/* test_hybrid.c — hybrid and sliding-window models on ragged batches, and recurrent-state
 * snapshots.
 *
 * For every hybrid fixture: several sequences share steps in random mixes of prefill chunks
 * and decode rows at different positions; every token's logits must be bitwise those of the
 * same sequence run alone in one step. Chunked prefill with chunks of 1, 5, 16 and all at
 * once must agree bitwise too (attention reads the same K/V). Gemma inputs are longer than
 * the window.
 *
 * Qwen3.5's gated delta rule runs whole aligned chunks of DELTA_CHUNK (64) positions in the
 * chunk-parallel form and the rest token by token, so where a step ends picks the summation
 * order. Its sequences are longer (up to 150 tokens: two whole chunks and a tail), and its
 * schedules obey the engine's rule (engine.c, delta_align): a step never ends inside a whole
 * aligned chunk — "chunks of 1" takes a chunk's 64 tokens in one step and goes 1 by 1 in the
 * tail — which is what the engine guarantees and what makes the promise bitwise. Each row
 * still starts and ends at positions that differ from the other rows', in every mix. The raw
 * schedules that break the rule (chunks of 1 and 5 everywhere: per token throughout) are run
 * too: they must agree with the chunk-parallel run within the parity tolerance (1e-4 of the
 * largest logit), not bitwise.
 *
 * Snapshots: save a sequence's recurrent state after a prefix, continue, then restore the
 * snapshot (into the same sequence after truncating its KV, and into a fresh sequence that
 * shares nothing) and continue with the same tokens: bitwise the same logits. A row that
 * does not start where its state stands is refused with an error naming the row. */
#include "../common/test_util.h"
#include "model/model.h"

#define NSEQ 5
#define MAXLEN 160

static model_t *load(const char *name, const char *backend) {
    char dir[256];
    snprintf(dir, sizeof dir, "tests/fixtures/models/%s", name);
    err_t e = {0};
    model_opts_t o = {backend, 2};
    model_t *m = model_load(dir, &o, &e);
    if (!m) fail_msg("%s", e.msg);
    if (model_init_kv(m, 2 * NSEQ * (MAXLEN / 4 + 1) + 4, 4, DT_F32, &e)) fail_msg("%s", e.msg);
    return m;
}

typedef int (*sched_fn)(int step, int s, int remaining, uint64_t *rng);

/* The engine's cut rule for hybrid rows (engine.c, delta_align, for a prompt): a step of k
 * tokens from `done` may not end inside a whole aligned chunk of the sequence's len tokens;
 * it ends at the chunk's start instead, or, starting there, takes the whole chunk. */
static int align_step(int done, int k, int len) {
    const int C = DELTA_CHUNK;
    int end = done + k, c0 = end / C * C;
    if (end == len || end % C == 0 || c0 + C > len || c0 < done) return k;
    return c0 > done ? c0 - done : C;
}
static int g_align; /* apply align_step in run() */

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
            if (g_align) k = align_step(done[s], k, len[s]);
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
            continue;
        }
        batch_t b = {nr, T, tok, pos, rs, sp, li, T};
        if (model_forward(m, &b, out, &e)) fail_msg("%s", e.msg);
        for (int t = 0; t < T; t++) memcpy(logits[owner[t]] + (size_t)opos[t] * V, out + (size_t)t * V, sizeof(float) * V);
    }
    for (int s = 0; s < NSEQ; s++) {
        if (done[s] != len[s]) fail_msg("sequence %d: fed %d of %d tokens", s, done[s], len[s]);
        model_seq_release(m, &seqs[s]);
        kv_seq_free(&seqs[s], &m->kv);
    }
    assert_int_equal(m->kv.n_free, m->kv.n_blocks);
    if (m->rec) assert_int_equal(rec_in_use(m->rec), 0);
    free(out);
}

static int alone_all(int step, int s, int rem, uint64_t *r) { return step == s ? rem : 0; }
static int chunk1(int step, int s, int rem, uint64_t *r) { return 1; }
static int chunk5(int step, int s, int rem, uint64_t *r) { return 5; }
static int chunk16(int step, int s, int rem, uint64_t *r) { return 16; }
static int random_mix(int step, int s, int rem, uint64_t *r) {
    *r = *r * 6364136223846793005ull + 1442695040888963407ull;
    int c = (int)((*r >> 33) % 8);
    return c < 2 ? 0 : (c < 5 ? 1 : (int)((*r >> 40) % 9) + 1);
}

static void make_tokens(int V, int32_t toks[NSEQ][MAXLEN]) {
    uint64_t seed = 42;
    for (int s = 0; s < NSEQ; s++)
        for (int i = 0; i < MAXLEN; i++) toks[s][i] = (int32_t)((tu_rand(&seed) + 1.0f) * 0.5f * (V - 1));
}

static void check_ragged(const char *name, const char *backend) {
    model_t *m = load(name, backend);
    int V = m->cfg.vocab_size;
    int32_t toks[NSEQ][MAXLEN];
    int len[NSEQ] = {40, 7, 23, 1, 33}, hyb = m->rec != NULL;
    if (hyb) { /* whole chunks of 64 and tails, starting and ending apart */
        int hl[NSEQ] = {150, 7, 70, 1, 129};
        memcpy(len, hl, sizeof len);
    }
    make_tokens(V, toks);
    float *ref[NSEQ], *got[NSEQ];
    for (int s = 0; s < NSEQ; s++) {
        ref[s] = calloc((size_t)MAXLEN * V, sizeof(float));
        got[s] = calloc((size_t)MAXLEN * V, sizeof(float));
    }
    g_align = 0;
    run(m, toks, len, ref, alone_all, 0);
    if (hyb) {
        /* schedules that split whole chunks: token by token there, so within tolerance only */
        sched_fn raw[] = {chunk1, chunk5};
        for (int k = 0; k < 2; k++) {
            run(m, toks, len, got, raw[k], 2000 + k);
            double worst = 0;
            for (int s = 0; s < NSEQ; s++) {
                double err = tu_rel_err(got[s], ref[s], (size_t)len[s] * V);
                if (err > worst) worst = err;
            }
            printf("# %-22s %-7s unaligned chunks of %d (token by token) vs chunk-parallel: rel err %.3g\n", name, backend, k ? 5 : 1, worst);
            assert_true(worst < 1e-4);
        }
        g_align = 1;
    }
    sched_fn scheds[] = {chunk1, chunk5, chunk16, random_mix, random_mix, random_mix};
    const char *names[] = {"chunks of 1", "chunks of 5", "chunks of 16", "random mix 1", "random mix 2", "random mix 3"};
    for (int k = 0; k < 6; k++) {
        run(m, toks, len, got, scheds[k], 1000 + k);
        for (int s = 0; s < NSEQ; s++)
            if (memcmp(got[s], ref[s], sizeof(float) * len[s] * V) != 0) {
                int p = 0;
                while (p < len[s] && !memcmp(got[s] + (size_t)p * V, ref[s] + (size_t)p * V, sizeof(float) * V)) p++;
                fail_msg("%s (%s): %s: sequence %d differs from running alone from position %d", name, backend, names[k], s, p);
            }
    }
    printf("# %-22s %-7s 6 schedules%s bitwise equal to each sequence alone\n", name, backend, hyb ? " (cut at chunk boundaries)" : "");
    g_align = 0;
    for (int s = 0; s < NSEQ; s++) { free(ref[s]); free(got[s]); }
    model_free(m);
}

static void test_ragged_qwen35(void **st) {
    check_ragged("qwen3_5-tiny", "cpu");
    check_ragged("qwen3_5-tiny-mlx-q4", "cpu");
    check_ragged("qwen3_5_moe-tiny", "cpu");
    check_ragged("qwen3_next-tiny", "cpu");
    check_ragged("qwen3_5-tiny", "cpu-ref");
}
static void test_ragged_gemma(void **st) {
    check_ragged("gemma3-tiny", "cpu");
    check_ragged("gemma4-tiny-ple", "cpu");
    check_ragged("gemma4-tiny-moe", "cpu");
}

/* Feeds toks[p0, p1) to seq in one row; logits of every token into out (may be NULL). */
static void feed(model_t *m, kv_seq_t *s, const int32_t *toks, int p0, int p1, float *out) {
    err_t e = {0};
    int n = p1 - p0;
    int32_t pos[MAXLEN], li[MAXLEN], rs[2] = {0, n};
    for (int i = 0; i < n; i++) { pos[i] = p0 + i; li[i] = i; }
    assert_int_equal(kv_seq_reserve(s, &m->kv, p1, &e), 0);
    float *tmp = malloc(sizeof(float) * n * m->cfg.vocab_size);
    batch_t b = {1, n, toks + p0, pos, rs, &s, li, n};
    if (model_forward(m, &b, tmp, &e)) fail_msg("%s", e.msg);
    if (out) memcpy(out, tmp, sizeof(float) * n * m->cfg.vocab_size);
    free(tmp);
}

static void check_snapshot(const char *name) {
    model_t *m = load(name, "cpu");
    int V = m->cfg.vocab_size, P = 17, N = 31;
    int32_t toks[NSEQ][MAXLEN];
    make_tokens(V, toks);
    size_t nb = model_state_bytes(m);
    assert_true(nb > 16);
    unsigned char *snap = malloc(nb + 1);
    float *want = malloc(sizeof(float) * (N - P) * V), *got = malloc(sizeof(float) * (N - P) * V);
    err_t e = {0};
    kv_seq_t a, c;
    kv_seq_init(&a);
    kv_seq_init(&c);
    /* no state yet: save refuses */
    assert_int_not_equal(model_state_save(m, &a, snap, &e), 0);
    feed(m, &a, toks[0], 0, 5, NULL);
    feed(m, &a, toks[0], 5, P, NULL);
    assert_int_equal(model_state_tokens(m, &a), P);
    /* saved at an odd offset in the buffer: the snapshot must not need alignment */
    if (model_state_save(m, &a, snap + 1, &e)) fail_msg("%s", e.msg);
    feed(m, &a, toks[0], P, N, want);
    /* a row that skips ahead of its state is refused, naming the row */
    {
        int32_t pos = N + 3, li = 0, rs[2] = {0, 1};
        kv_seq_t *sp = &a;
        assert_int_equal(kv_seq_reserve(&a, &m->kv, N + 4, &e), 0);
        batch_t b = {1, 1, toks[0], &pos, rs, &sp, &li, 1};
        float *tmp = malloc(sizeof(float) * V);
        assert_int_not_equal(model_forward(m, &b, tmp, &e), 0);
        assert_non_null(strstr(e.msg, "row 0"));
        free(tmp);
    }
    /* restore into the same sequence after truncating its KV */
    if (model_state_restore(m, &a, snap + 1, &e)) fail_msg("%s", e.msg);
    kv_seq_truncate(&a, &m->kv, model_state_tokens(m, &a));
    feed(m, &a, toks[0], P, N, got);
    assert_memory_equal(got, want, sizeof(float) * (N - P) * V);
    /* restore into another sequence whose state has moved on with other tokens: its
     * attention KV up to P is the same prefix, the state past P is overwritten */
    feed(m, &c, toks[0], 0, 5, NULL); /* the prefix cut as for a: the same K/V bits (a cut */
    feed(m, &c, toks[0], 5, P, NULL); /* inside a whole delta chunk changes the arithmetic) */
    feed(m, &c, toks[1], P, P + 3, NULL);
    assert_int_equal(model_state_tokens(m, &c), P + 3);
    if (model_state_restore(m, &c, snap + 1, &e)) fail_msg("%s", e.msg);
    assert_int_equal(model_state_tokens(m, &c), P);
    kv_seq_truncate(&c, &m->kv, P);
    feed(m, &c, toks[0], P, N, got);
    assert_memory_equal(got, want, sizeof(float) * (N - P) * V);
    /* a corrupted snapshot is refused */
    snap[1] ^= 0xff;
    assert_int_not_equal(model_state_restore(m, &c, snap + 1, &e), 0);
    assert_non_null(strstr(e.msg, "not a snapshot"));
    printf("# %-22s snapshot at %d, restore + continue to %d: bitwise equal\n", name, P, N);
    model_seq_release(m, &a);
    model_seq_release(m, &c);
    kv_seq_free(&a, &m->kv);
    kv_seq_free(&c, &m->kv);
    free(snap); free(want); free(got);
    model_free(m);
}

static void test_snapshot(void **st) {
    check_snapshot("qwen3_5-tiny");
    check_snapshot("qwen3_5_moe-tiny");
    check_snapshot("qwen3_next-tiny");
    /* models without recurrent layers have nothing to snapshot */
    model_t *m = load("gemma3-tiny", "cpu");
    assert_int_equal(model_state_bytes(m), 0);
    model_free(m);
}

/* Bad hybrid configs fail with an error naming the field. */
static void bad_config(const char *json, const char *want) {
    json_error_t je;
    json_t *root = json_loads(json, 0, &je);
    assert_non_null(root);
    model_config_t c;
    err_t e = {0};
    int rc = config_from_json(&c, root, NULL, "config.json", NULL, &e);
    if (rc == 0 || !strstr(e.msg, want)) fail_msg("config %s: expected an error naming '%s', got rc %d '%s'", json, want, rc, e.msg);
    config_free(&c);
    json_decref(root);
}

#define BASE "\"hidden_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 32, \"intermediate_size\": 8"
static void test_bad_config(void **st) {
    bad_config("{\"model_type\": \"qwen3_5_text\", " BASE ", \"layer_types\": [\"linear_attention\"]}", "layer_types");
    bad_config("{\"model_type\": \"qwen3_5_text\", " BASE ", \"layer_types\": [\"linear_attention\", \"mamba\"]}", "layer_types[1]");
    bad_config("{\"model_type\": \"qwen3_5_text\", " BASE ", \"linear_num_key_heads\": 3, \"linear_num_value_heads\": 4}", "linear_num_value_heads");
    bad_config("{\"model_type\": \"qwen3_5_moe_text\", " BASE ", \"num_experts\": 4, \"num_experts_per_tok\": 5, \"moe_intermediate_size\": 8}", "MoE");
    bad_config("{\"model_type\": \"gemma4_text\", " BASE ", \"per_layer_config\": {\"7\": {\"head_dim\": 32}}}", "per_layer_config");
    bad_config("{\"model_type\": \"gemma4_text\", " BASE ", \"per_layer_config\": {\"1\": {\"num_key_value_heads\": 3}}}", "layer 1");
    bad_config("{\"model_type\": \"gemma3_text\", " BASE ", \"hidden_activation\": \"relu\"}", "hidden activation");
    bad_config("{\"model_type\": \"gemma4_text\", " BASE ", \"rope_parameters\": {\"full_attention\": {\"rope_type\": \"weird\"}}}", "rope type");
#define MOE ", \"num_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 8"
    bad_config("{\"model_type\": \"qwen3_next\", " BASE MOE ", \"decoder_sparse_step\": 0}", "decoder_sparse_step");
    bad_config("{\"model_type\": \"qwen3_next\", " BASE MOE ", \"mlp_only_layers\": [0, 2]}", "mlp_only_layers[1]");
    bad_config("{\"model_type\": \"qwen3_next\", " BASE MOE ", \"mlp_only_layers\": 1}", "mlp_only_layers");
    bad_config("{\"model_type\": \"qwen3_next\", " BASE MOE ", \"norm_topk_prob\": \"yes\"}", "norm_topk_prob");
    bad_config("{\"model_type\": \"qwen3_6\", " BASE "}", "qwen3_6");
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_ragged_qwen35), cmocka_unit_test(test_ragged_gemma),
                                       cmocka_unit_test(test_snapshot), cmocka_unit_test(test_bad_config)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
