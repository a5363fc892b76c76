/* test_parity_hybrid.c — kiln against transformers on the hybrid and sliding-window fixtures
 * (Qwen3.5 dense, MLX 4-bit and MoE; Gemma 3; Gemma 4 with PLE/KV sharing and with MoE).
 *
 * As test_parity_dense.c: one forward over input_ids must give logits within 1e-4 of the
 * reference relative to max |logit|, on the SIMD path and on the scalar reference backend;
 * greedy decoding one token per step (recurrent state and KV cache carried) must give the
 * reference tokens up to the first near-tie (margin < 1e-3). The gemma inputs (40 tokens)
 * are longer than their sliding window (8), so windowed attention is exercised.
 *
 * The fixture references come from a model cast to bf16 in memory (transformers' RoPE
 * and embedding-scale buffers rounded): checked with buffer_dtype bf16. Where transformers'
 * from_pretrained loads the checkpoint (tests/fixtures/from_pretrained/), its logits are
 * checked with the default f32 buffers.
 *
 * qwen3_next-tiny is made here (tools/check/make_qwen3_next_fixture.py, on the GPU machine):
 * Qwen3-Next's fused in_proj_qkvz / in_proj_ba with dk != dv and two value heads per key
 * head, a dense mlp_only_layers layer among sparse ones, norm weights randomized. */
#include "../common/test_util.h"
#include "base/npy.h"
#include "model/model.h"

#define NFIX 7
static const char *fixtures[NFIX] = {"qwen3_5-tiny", "qwen3_5-tiny-mlx-q4", "qwen3_5_moe-tiny",
                                     "gemma3-tiny", "gemma4-tiny-ple", "gemma4-tiny-moe", "qwen3_next-tiny"};
/* The buffer dtype each fixture's reference was made with: the shared fixtures cast the model
 * to bf16 in memory; qwen3_next-tiny (tools/check/make_qwen3_next_fixture.py, not in the
 * shared set) is from_pretrained's view, f32 buffers. */
static dtype_t fixture_buffers(const char *name) { return strcmp(name, "qwen3_next-tiny") ? DT_BF16 : DT_F32; }

static model_t *load(const char *name, const char *backend, dtype_t buffers) {
    char dir[256];
    snprintf(dir, sizeof dir, "tests/fixtures/models/%s", name);
    err_t e = {0};
    model_opts_t o = {backend, 2, buffers};
    model_t *m = model_load(dir, &o, &e);
    if (!m) fail_msg("%s: %s", name, e.msg);
    if (model_init_kv(m, 16, 16, DT_F32, &e)) fail_msg("%s: %s", name, e.msg);
    return m;
}

static void check_logits_against(const char *name, const char *backend, dtype_t buffers, const char *npy) {
    char path[256];
    snprintf(path, sizeof path, "tests/fixtures/models/%s/reference/reference.json", name);
    json_t *ref = tu_load_json(path);
    int n;
    int32_t *ids = tu_int_array(json_object_get(ref, "input_ids"), &n);
    float *want;
    size_t rows, cols;
    err_t e = {0};
    if (npy_read_f32(npy, &want, &rows, &cols, &e)) fail_msg("%s", e.msg);
    model_t *m = load(name, backend, buffers);
    assert_int_equal(rows, n);
    assert_int_equal(cols, m->cfg.vocab_size);
    float *got = malloc(sizeof(float) * rows * cols);
    int32_t *pos = malloc(sizeof(int32_t) * n), *li = malloc(sizeof(int32_t) * n);
    for (int i = 0; i < n; i++) { pos[i] = i; li[i] = i; }
    kv_seq_t s;
    kv_seq_init(&s);
    kv_seq_t *sp = &s;
    assert_int_equal(kv_seq_reserve(&s, &m->kv, n, &e), 0);
    int32_t rs[2] = {0, n};
    batch_t b = {1, n, ids, pos, rs, &sp, li, n};
    if (model_forward(m, &b, got, &e)) fail_msg("%s: %s", name, e.msg);
    double err = tu_rel_err(got, want, rows * cols);
    /* the worst position, to point at the step that is wrong */
    double worst = 0;
    int wp = 0;
    for (int p = 0; p < n; p++) {
        double ep = tu_rel_err(got + (size_t)p * cols, want + (size_t)p * cols, cols);
        if (ep > worst) { worst = ep; wp = p; }
    }
    printf("# %-24s %-8s buffers %-4s logits rel err %.3g (worst position %d: %.3g) vs %s\n", name, backend, dtype_name(buffers), err, wp,
           worst, npy);
    assert_true(err < 1e-4);
    model_seq_release(m, &s);
    kv_seq_free(&s, &m->kv);
    free(got); free(pos); free(li); free(want); free(ids);
    model_free(m);
    json_decref(ref);
}

static void check_logits(const char *name, const char *backend) {
    char npy[256];
    snprintf(npy, sizeof npy, "tests/fixtures/models/%s/reference/logits.npy", name);
    check_logits_against(name, backend, fixture_buffers(name), npy);
}

static void check_greedy(const char *name) {
    char path[256];
    snprintf(path, sizeof path, "tests/fixtures/models/%s/reference/reference.json", name);
    json_t *ref = tu_load_json(path);
    int n, ng;
    int32_t *prompt = tu_int_array(json_object_get(ref, "greedy_prompt"), &n);
    int32_t *want = tu_int_array(json_object_get(ref, "greedy_tokens"), &ng);
    json_t *margins = json_object_get(ref, "greedy_margins");
    assert_int_equal((int)json_array_size(margins), ng);
    model_t *m = load(name, "cpu", fixture_buffers(name));
    int V = m->cfg.vocab_size;
    float *logits = malloc(sizeof(float) * V);
    int32_t *toks = malloc(sizeof(int32_t) * (n + ng)), *pos = malloc(sizeof(int32_t) * (n + ng));
    for (int i = 0; i < n; i++) { toks[i] = prompt[i]; pos[i] = i; }
    kv_seq_t s;
    kv_seq_init(&s);
    kv_seq_t *sp = &s;
    err_t e = {0};
    int cur = n, start = 0, compared = 0;
    for (int g = 0; g < ng; g++) {
        assert_int_equal(kv_seq_reserve(&s, &m->kv, cur, &e), 0);
        int32_t rs[2] = {0, cur - start}, li = cur - start - 1;
        for (int i = start; i < cur; i++) pos[i] = i;
        batch_t b = {1, cur - start, toks + start, pos + start, rs, &sp, &li, 1};
        if (model_forward(m, &b, logits, &e)) fail_msg("%s: %s", name, e.msg);
        int32_t best = 0;
        for (int v = 1; v < V; v++) if (logits[v] > logits[best]) best = v;
        if (json_real_value(json_array_get(margins, g)) < 1e-3) break; /* near-tie: either token is right */
        if (best != want[g]) fail_msg("%s: greedy step %d: got %d, want %d", name, g, best, want[g]);
        compared++;
        toks[cur] = best;
        start = cur;
        cur++;
    }
    printf("# %-24s greedy: %d/%d tokens compared and equal\n", name, compared, ng);
    assert_true(compared > 0);
    model_seq_release(m, &s);
    kv_seq_free(&s, &m->kv);
    free(logits); free(toks); free(pos); free(prompt); free(want);
    model_free(m);
    json_decref(ref);
}

static void test_logits_simd(void **st) { for (int i = 0; i < NFIX; i++) check_logits(fixtures[i], "cpu"); }
static void test_logits_ref(void **st) { for (int i = 0; i < NFIX; i++) check_logits(fixtures[i], "cpu-ref"); }
static void test_greedy(void **st) { for (int i = 0; i < NFIX; i++) check_greedy(fixtures[i]); }
/* Default loading (f32 buffers) equals transformers' from_pretrained where it loads. */
static void test_logits_from_pretrained(void **st) {
    int checked = 0;
    for (int i = 0; i < NFIX; i++) {
        char npy[256];
        snprintf(npy, sizeof npy, "tests/fixtures/from_pretrained/%s.npy", fixtures[i]);
        FILE *f = fopen(npy, "rb");
        if (!f) continue; /* transformers could not load it (MLX quantization) */
        fclose(f);
        check_logits_against(fixtures[i], "cpu", DT_F32, npy);
        checked++;
    }
    assert_true(checked >= 4);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logits_simd),
        cmocka_unit_test(test_logits_ref),
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_logits_from_pretrained),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
