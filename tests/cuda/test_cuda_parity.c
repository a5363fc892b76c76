/* test_cuda_parity.c — the CUDA backend against transformers on every fixture.
 *
 * For each checkpoint in tests/fixtures/models (see test_parity_dense.c and
 * test_parity_hybrid.c for the CPU twins) — dense llama/qwen3, the Qwen3.5 hybrids (gated
 * DeltaNet: conv1d + gated delta rule on the device, MoE routing on the host with the expert
 * matmuls on the device) and Gemma 3/4 (sliding windows shorter than the input, PLE, KV
 * sharing, MoE):
 *  - "cuda-f32" (f32 activations, every matmul in f32): one forward over input_ids gives
 *    logits within 1e-4 of the reference, relative to max |logit|;
 *  - "cuda" with KILN_CUDA_GEMM_MIN_T=1 (every matmul through cuBLASLt, under the precision
 *    policy: llama/qwen3 multiply x rounded once to bf16, the other architectures x split into
 *    bf16 hi + lo; MLX weights past qmma's 64 tokens dequantized to f16 (KILN_CUDA_QDEQ=tf32:
 *    TF32), f16 weights in TF32): within 1e-2; again with the split forced everywhere
 *    (KILN_CUDA_ACT=split, and KILN_CUDA_FA=split for the tensor-core attention: the exact
 *    path on the dense fixtures too): within 1e-2; the MLX fixtures with qmma off
 *    (KILN_CUDA_QMMA=0: the dequantizing prefill path, bf16 / TF32) under both: within 1e-2; one rounding forced everywhere
 *    (KILN_CUDA_ACT=bf16, then with KILN_CUDA_FA=single) is run too and its errors printed,
 *    not checked;
 *  - greedy decoding with the KV cache on each (batch-1 decode: GEMV and split-K attention
 *    paths) gives the reference tokens up to the first step whose reference margin
 *    (top-1 minus top-2 logit) is below 0.05; below 1e-3 for "cuda-f32" with an f32 cache,
 *    the same bar as the CPU's test_parity_dense. */
#include <jansson.h>
#include "cuda_test.h"
#include "base/npy.h"
#include "model/model.h"

#define DEFAULT_MODEL "kiln-tiny"
static const char *fixtures[] = {"llama-tiny", "llama-tiny-mlx-q4", "llama-tiny-mlx-q8", "llama-tiny-rope-llama3",
                                 "qwen3-tiny", "qwen3-tiny-mlx-mixed", DEFAULT_MODEL,
                                 "qwen3_5-tiny", "qwen3_5-tiny-mlx-q4", "qwen3_5_moe-tiny", "qwen3_next-tiny",
                                 "gemma3-tiny", "gemma4-tiny-ple", "gemma4-tiny-moe"};
#define N_FIX (sizeof fixtures / sizeof fixtures[0])

/* Where each model and its references live, and the buffer convention the reference was
 * made with: the fixtures from a model cast to bf16 in memory (RoPE table rounded),
 * kiln-tiny and tests/fixtures/from_pretrained/ with transformers' default f32 buffers
 * (see tests/parity/test_parity_dense.c). */
static void model_dir(const char *name, char *dir, size_t n) {
    if (!strcmp(name, DEFAULT_MODEL)) snprintf(dir, n, "models/kiln-tiny");
    else snprintf(dir, n, "tests/fixtures/models/%s", name);
}
static void ref_path(const char *name, const char *file, char *out, size_t n) {
    if (!strcmp(name, DEFAULT_MODEL))
        snprintf(out, n, "tools/train-default/reference/kiln-tiny%s", !strcmp(file, "reference.json") ? ".json" : ".logits.npy");
    else snprintf(out, n, "tests/fixtures/models/%s/reference/%s", name, file);
}
static dtype_t fixture_buffers(const char *name) { return strcmp(name, DEFAULT_MODEL) ? DT_BF16 : DT_F32; }

static int32_t *int_array(json_t *a, int *n) {
    *n = (int)json_array_size(a);
    int32_t *v = malloc(sizeof(int32_t) * (*n + 1));
    for (int i = 0; i < *n; i++) v[i] = (int32_t)json_integer_value(json_array_get(a, i));
    return v;
}

static model_t *load(const char *name, const char *backend, dtype_t kvdt, dtype_t buffers) {
    char dir[256];
    model_dir(name, dir, sizeof dir);
    err_t e = {0};
    model_opts_t o = {backend, 1, buffers};
    model_t *m = model_load(dir, &o, &e);
    if (!m) { CHECK(0, "%s on %s: %s", name, backend, e.msg); return NULL; }
    if (model_init_kv(m, 16, 16, kvdt, &e)) { CHECK(0, "%s: %s", name, e.msg); model_free(m); return NULL; }
    return m;
}

static dtype_t logits_kv = DT_F32; /* the cache of the logits checks */
static const char *only_mlx; /* non-NULL: the MLX fixtures only (names containing "mlx"), qmma off */
/* how the MLX-only runs are labelled: qmma off, and matmul_qgemm.cu on (KILN_CUDA_QGEMM) */
static const char *mlx_tag(void) {
    static char tag[64];
    const char *qd = getenv("KILN_CUDA_QDEQ");
    if (!only_mlx) return "";
    snprintf(tag, sizeof tag, "%s%s%s", getenv("KILN_CUDA_QGEMM") ? " qmma off, qgemm" : " qmma off", qd ? ", QDEQ=" : "", qd ? qd : "");
    return tag;
}
static int report_only; /* print the error without checking it (KILN_CUDA_ACT=bf16, KILN_CUDA_FA=single: measured costs of one rounding) */

static void check_logits(const char *name, const char *backend, double tol, dtype_t buffers, const char *npy) {
    char path[256];
    ref_path(name, "reference.json", path, sizeof path);
    json_error_t je;
    json_t *ref = json_load_file(path, 0, &je);
    if (!ref) { CHECK(0, "%s: %s", path, je.text); return; }
    int n;
    int32_t *ids = int_array(json_object_get(ref, "input_ids"), &n);
    float *want = NULL;
    size_t rows, cols;
    err_t e = {0};
    model_t *m = NULL;
    if (npy_read_f32(npy, &want, &rows, &cols, &e)) { CHECK(0, "%s", e.msg); goto out; }
    if (!(m = load(name, backend, logits_kv, buffers))) goto out;
    float *got = malloc(sizeof(float) * rows * cols);
    int32_t *pos = malloc(sizeof(int32_t) * n), *li = malloc(sizeof(int32_t) * n);
    for (int i = 0; i < n; i++) { pos[i] = i; li[i] = i; }
    kv_seq_t s;
    kv_seq_init(&s);
    kv_seq_t *sp = &s;
    kv_seq_reserve(&s, &m->kv, n, &e);
    int32_t rs[2] = {0, n};
    batch_t b = {1, n, ids, pos, rs, &sp, li, n};
    if (model_forward(m, &b, got, &e)) CHECK(0, "%s: %s", name, e.msg);
    else {
        double err = ct_rel_err(got, want, rows * cols);
        const char *act = getenv("KILN_CUDA_ACT"), *fa = getenv("KILN_CUDA_FA"), *qd = getenv("KILN_CUDA_QDEQ");
        if (report_only) printf("# %-24s %-8s buffers %-4s kv %-4s%s logits rel err %.3g with KILN_CUDA_ACT=%s FA=%s QDEQ=%s (reported, not checked) vs %s\n",
                                name, backend, dtype_name(buffers), dtype_name(logits_kv), mlx_tag(), err, act ? act : "policy",
                                fa ? fa : "policy", qd ? qd : "policy", npy);
        else {
            printf("# %-24s %-8s buffers %-4s kv %-4s act %-6s%s logits rel err %.3g (tol %g) vs %s\n", name, backend, dtype_name(buffers),
                   dtype_name(logits_kv), act ? act : "policy", mlx_tag(), err, tol, npy);
            CHECK(err < tol, "%s on %s: logits rel err %.3g > %g", name, backend, err, tol);
        }
    }
    model_seq_release(m, &s); /* the recurrent state slot of a hybrid */
    kv_seq_free(&s, &m->kv);
    free(got); free(pos); free(li);
out:
    model_free(m);
    free(want); free(ids);
    json_decref(ref);
}

static void check_greedy(const char *name, const char *backend, dtype_t kvdt, double min_margin) {
    char path[256];
    ref_path(name, "reference.json", path, sizeof path);
    json_error_t je;
    json_t *ref = json_load_file(path, 0, &je);
    if (!ref) { CHECK(0, "%s: %s", path, je.text); return; }
    int n, ng;
    int32_t *prompt = int_array(json_object_get(ref, "greedy_prompt"), &n);
    int32_t *want = int_array(json_object_get(ref, "greedy_tokens"), &ng);
    json_t *margins = json_object_get(ref, "greedy_margins");
    model_t *m = load(name, backend, kvdt, fixture_buffers(name));
    if (!m) { free(prompt); free(want); json_decref(ref); return; }
    int V = m->cfg.vocab_size;
    float *logits = malloc(sizeof(float) * V);
    int32_t *toks = malloc(sizeof(int32_t) * (n + ng)), *pos = malloc(sizeof(int32_t) * (n + ng));
    for (int i = 0; i < n; i++) toks[i] = prompt[i];
    kv_seq_t s;
    kv_seq_init(&s);
    kv_seq_t *sp = &s;
    err_t e = {0};
    int cur = n, start = 0, compared = 0;
    for (int g = 0; g < ng; g++) {
        kv_seq_reserve(&s, &m->kv, cur, &e);
        int32_t rs[2] = {0, cur - start}, li = cur - start - 1;
        for (int i = start; i < cur; i++) pos[i] = i;
        batch_t b = {1, cur - start, toks + start, pos + start, rs, &sp, &li, 1};
        if (model_forward(m, &b, logits, &e)) { CHECK(0, "%s: %s", name, e.msg); break; }
        int32_t best = 0;
        for (int v = 1; v < V; v++) if (logits[v] > logits[best]) best = v;
        if (json_real_value(json_array_get(margins, g)) < min_margin) break; /* near-tie: stop comparing */
        CHECK(best == want[g], "%s on %s (kv %s): greedy step %d gives %d, reference %d", name, backend, dtype_name(kvdt), g, best, want[g]);
        compared++;
        toks[cur] = best;
        start = cur;
        cur++;
    }
    printf("# %-24s %-8s kv %-4s greedy: %d/%d tokens compared and equal (up to reference margin < %g)\n", name, backend,
           dtype_name(kvdt), compared, ng, min_margin);
    model_seq_release(m, &s);
    kv_seq_free(&s, &m->kv);
    free(logits); free(toks); free(pos); free(prompt); free(want);
    model_free(m);
    json_decref(ref);
}

/* Fixture references (their buffer convention), then from_pretrained's where it exists. */
static void check_all_logits(const char *backend, double tol) {
    char npy[256];
    for (size_t i = 0; i < N_FIX; i++) {
        if (only_mlx && !strstr(fixtures[i], "mlx")) continue;
        ref_path(fixtures[i], "logits.npy", npy, sizeof npy);
        check_logits(fixtures[i], backend, tol, fixture_buffers(fixtures[i]), npy);
        snprintf(npy, sizeof npy, "tests/fixtures/from_pretrained/%s.npy", fixtures[i]);
        FILE *f = fopen(npy, "rb");
        if (f) {
            fclose(f);
            check_logits(fixtures[i], backend, tol, DT_F32, npy);
        }
    }
}

/* "cuda" under the precision policy, then with the exact split forced (KILN_CUDA_ACT=split) */
static void check_policy_and_split(void) {
    check_all_logits("cuda", 1e-2);
    setenv("KILN_CUDA_ACT", "split", 1);
    check_all_logits("cuda", 1e-2);
    unsetenv("KILN_CUDA_ACT");
}

/* check_all_logits on "cuda" with an f16 cache and every step's attention on the tensor-core
 * kernel (KILN_CUDA_FA_MIN=1) in KILN_CUDA_FA mode fa; both variables are unset afterwards. */
static void check_fa_f16(const char *fa) {
    setenv("KILN_CUDA_FA", fa, 1);
    setenv("KILN_CUDA_FA_MIN", "1", 1);
    logits_kv = DT_F16;
    check_all_logits("cuda", 1e-2);
    logits_kv = DT_F32;
    unsetenv("KILN_CUDA_FA_MIN");
    unsetenv("KILN_CUDA_FA");
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* lines reach the log even if a case crashes */
    check_all_logits("cuda-f32", 1e-4);
    for (size_t i = 0; i < N_FIX; i++) {
        check_greedy(fixtures[i], "cuda-f32", DT_F32, 1e-3); /* f32 path: as strict as the CPU's parity test */
        check_greedy(fixtures[i], "cuda-f32", DT_F16, 0.05);
    }
    setenv("KILN_CUDA_GEMM_MIN_T", "1", 1);
    check_all_logits("cuda", 1e-2);
    for (size_t i = 0; i < N_FIX; i++) check_greedy(fixtures[i], "cuda", DT_F32, 0.05);
    /* "cuda" with an f16 cache: prefill attention on tensor cores (attention_mma.cu: head_dim
     * 32/64/128; KILN_CUDA_FA_MIN=1 so the fixtures' small steps take it too; Q and P rounded
     * once for llama/qwen3 under the precision policy, split for the rest) */
    setenv("KILN_CUDA_FA_MIN", "1", 1);
    logits_kv = DT_F16;
    check_all_logits("cuda", 1e-2);
    logits_kv = DT_F32;
    for (size_t i = 0; i < N_FIX; i++) check_greedy(fixtures[i], "cuda", DT_F16, 0.05);
    unsetenv("KILN_CUDA_FA_MIN");
    /* MLX weights past qmma's 64 tokens: the fixtures' prompts are shorter, so KILN_CUDA_QMMA=0
     * sends their steps to the dequantizing path (f16 by default, TF32 with KILN_CUDA_QDEQ=tf32; under the policy the bf16 weights of
     * llama/qwen3 fixtures take x rounded once, below with the split), and with KILN_CUDA_QGEMM=1
     * to matmul_qgemm.cu (opt-in: tensor cores on the codes; x rounded once for the llama/qwen3
     * fixtures under the policy, split for the rest and with KILN_CUDA_ACT=split). The bf16
     * dequantization (KILN_CUDA_QDEQ=bf16) is reported only: it measured 1.03-1.28e-2 on these fixtures. */
    setenv("KILN_CUDA_QMMA", "0", 1);
    only_mlx = "mlx";
    check_policy_and_split();
    /* ... the default there is matmul_dequant.cu (W and x rounded once to f16, each scaled by a
     * power of two); KILN_CUDA_QDEQ=tf32 keeps the TF32 path checked too (A/B) */
    setenv("KILN_CUDA_QDEQ", "tf32", 1);
    check_policy_and_split();
    unsetenv("KILN_CUDA_QDEQ");
    setenv("KILN_CUDA_QGEMM", "1", 1);
    check_policy_and_split();
    unsetenv("KILN_CUDA_QGEMM");
    setenv("KILN_CUDA_QDEQ", "bf16", 1);
    report_only = 1;
    check_all_logits("cuda", 1e-2);
    report_only = 0;
    unsetenv("KILN_CUDA_QDEQ");
    only_mlx = NULL;
    unsetenv("KILN_CUDA_QMMA");
    /* The exact split forced on every architecture (the default for all but llama/qwen3), in
     * the matmuls and in the tensor-core attention (f16 cache) */
    setenv("KILN_CUDA_ACT", "split", 1);
    check_all_logits("cuda", 1e-2);
    check_fa_f16("split");
    /* The single-rounding mode forced on every architecture: x rounded to bf16 once per matmul
     * (what most GPU servers do). On the random-weight hybrid/gemma4 fixtures this alone moves
     * the logits by 3e-2..0.27 (the same numbers as rounding x on the CPU:
     * tests/cuda/bf16_emul.c), so the policy keeps the split there; reported, not checked. */
    setenv("KILN_CUDA_ACT", "bf16", 1);
    report_only = 1;
    check_all_logits("cuda", 1e-2);
    /* ... and Q and P rounded once in the tensor-core attention too (f16 cache) */
    check_fa_f16("single");
    unsetenv("KILN_CUDA_ACT");
    report_only = 0;
    return ct_done("test_cuda_parity");
}
