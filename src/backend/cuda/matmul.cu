/* matmul.cu — y[T, N] = x[T, K] · Wᵀ for every weight storage, and the choice of kernel.
 *
 *   MLX 4/8-bit, T ≤ 64,    → matmul_qmma.cu: tensor cores on the codes, x as bf16 hi + lo
 *   "cuda" only                (KILN_CUDA_QMMA=0: the paths below)
 *   T ≤ 8, aligned          → matmul_gemv.cu (bandwidth-bound decode, f32 activations)
 *   T < gemm_min_t          → tiled_kernel here: 64×64 output tiles on CUDA cores, weights
 *                             (any dtype, MLX codes included) dequantized tile by tile into
 *                             shared memory, f32 activations and f32 accumulation (with the
 *                             default threshold 9 only "cuda-f32" gets here: it is ~8x slower
 *                             than cuBLASLt for a 32-row decode step)
 *   T ≥ gemm_min_t (9), and → cuBLASLt on tensor cores, f32 accumulation and output:
 *   bf16 weights from T ≥ gemm_min_t_bf16 (3: the GEMV re-reads x per row and was 2.4x
 *   slower at T = 8 than cuBLASLt at T = 32, bench/cuda/RESULTS.md)
 *                             bf16 weights: x rounded once to bf16 for llama/qwen3 (the
 *                             precision policy, backend_t.act_bf16_ok), else x split into
 *                             bf16 hi + lo, y = W·hi, then y += W·lo (beta = 1) (~f32
 *                             accuracy: rounding x once moved the hybrid fixtures' logits
 *                             by up to 0.27; docs/cuda.md, Numerics);
 *                             MLX 4/8-bit with KILN_CUDA_QDEQ=bf16 (opt-in: over the
 *                             bar on the MLX fixtures): dequantized to bf16, one bf16 GEMM;
 *                             MLX codes (default): dequantized to f16 with x, both scaled by
 *                             powers of two, one f16 GEMM (matmul_dequant.cu);
 *                             KILN_CUDA_QDEQ=tf32 and
 *                             f16 weights: the weight is first dequantized to f32 in a
 *                             scratch buffer (4/8-bit: a thread per code word) and
 *                             multiplied in TF32 (at prefill sizes the
 *                             GEMM's T·N·K work dwarfs the N·K dequantization; a fused
 *                             tensor-core kernel is future work); f32 weights: plain f32.
 * "cuda-f32" sets gemm_min_t to infinity: every matmul stays in f32 (the 1e-4 path).
 *
 * Reference: ref_matmul (backend/cpu/ref.c). The tiled kernel accumulates k in order
 * for every output, so its result does not depend on which tile a token lands in. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/x16.cuh"
#include "backend/cuda/xprep.cuh"

int cuda_gemv(cuda_impl_t *c, float *y, const float *x, int T, const dweight_t *w);
int cuda_qmma(cuda_impl_t *c, float *y, const float *x, int T, const dweight_t *w, int single);
int cuda_qwg(cuda_impl_t *c, float *y, const float *x, int T, const dweight_t *w);
int cuda_qwg_multi(cuda_impl_t *c, int n, float *const *y, const float *x, int T, const dweight_t *const *w);
int cuda_gemv_tc(cuda_impl_t *c, int n, float *const *y, const float *x, int T, const dweight_t *const *w);
int cuda_gemv_tc_max_t(void);
int cuda_gemv_tc_takes(const dweight_t *w, int T); /* the weight suits it at T tokens (2..: 4-bit, K >= 4096) */
/* the tensor-core GEMV's token counts on this backend ("cuda": qmma from 2 tokens): one, and 2..KILN_CUDA_GEMV_TC_T
 * unless x is forced to bf16 (gemv_tc_run's own conditions on T) */
static int tc_takes_t(const cuda_impl_t *c, int T) { return T <= cuda_gemv_tc_max_t() && c->qmma >= 2 && (T == 1 || c->act_bf16 != 1); }
/* ... and w at T tokens: where cuda_matmul's own call of it would not decline */
static int tc_takes(const cuda_impl_t *c, const dweight_t *w, int T) { return tc_takes_t(c, T) && cuda_gemv_tc_takes(w, T); }
int cuda_gemv_multi(cuda_impl_t *c, int n, float *const *y, const float *x, int T, const dweight_t *const *w);
int cuda_qgemm(cuda_impl_t *c, float *y, const float *x, int T, const dweight_t *w, int split);
int cuda_qdeq_f16(cuda_impl_t *c, float *y, const float *x, int T, const dweight_t *w);
int cuda_qdeq_f16_multi(cuda_impl_t *c, int n, float *const *y, const float *x, int T, const dweight_t *const *w);
int cuda_qd_rms_matmul_multi(cuda_impl_t *c, int n, float *const *y, const float *x, const float *nw, float off, float eps, int T,
                             const dweight_t *const *w);
int cuda_qd_matmul_add(cuda_impl_t *c, float *y, const float *x, int T, const dweight_t *w);
int cuda_qd_rms_mlp(cuda_impl_t *c, float *x, const float *nw, float off, float eps, int T, const dweight_t *wg, const dweight_t *wu,
                    const dweight_t *wd, act_t act);
int cuda_bfmma(cuda_impl_t *c, int n, float *const *y, const float *x, int T, const dweight_t *const *w, int split, int glu, int gelu);

#define TB_M 64 /* tokens per tile     */
#define TB_N 64 /* weight rows per tile */
#define TB_K 16

__global__ void __launch_bounds__(256) tiled_kernel(float *__restrict__ y, const float *__restrict__ x, int T, dweight_t w) {
    __shared__ float xs[TB_K][TB_M + 4];
    __shared__ float ws[TB_K][TB_N + 4];
    const int K = w.cols, N = w.rows;
    const int m0 = blockIdx.y * TB_M, n0 = blockIdx.x * TB_N;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    float acc[4][4] = {};
    for (int k0 = 0; k0 < K; k0 += TB_K) {
        for (int i = threadIdx.x; i < TB_M * TB_K; i += 256) {
            int mm = i / TB_K, kk = i % TB_K, m = m0 + mm, k = k0 + kk;
            xs[kk][mm] = (m < T && k < K) ? x[(size_t)m * K + k] : 0.f;
            int n = n0 + mm;
            ws[kk][mm] = (n < N && k < K) ? wload(w, n, k) : 0.f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TB_K; kk++) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; i++) { a[i] = xs[kk][ty * 4 + i]; b[i] = ws[kk][tx * 4 + i]; }
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int m = m0 + ty * 4 + i;
        if (m >= T) continue;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int n = n0 + tx * 4 + j;
            if (n < N) y[(size_t)m * N + n] = acc[i][j];
        }
    }
}

__global__ void to_16bit_kernel(void *out, const float *in, size_t n, int bf) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        if (bf) ((__nv_bfloat16 *)out)[i] = __float2bfloat16_rn(in[i]);
        else ((__half *)out)[i] = __float2half_rn(in[i]);
    }
}

/* the same rounding four floats a thread (16-byte loads, 8-byte stores): x16.cuh's conversions */
__global__ void to_bf16x4_kernel(uint2 *out, const float4 *in, size_t n4) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x) {
        const float4 v = in[i];
        __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y), b = __floats2bfloat162_rn(v.z, v.w);
        out[i] = make_uint2(*(const uint32_t *)&a, *(const uint32_t *)&b);
    }
}

/* x[n] → out[0..n) = hi = bf16(x), out[n..2n) = lo = bf16(x - hi): hi + lo carries 16 of
 * x's 24 mantissa bits (x - hi is exact in f32), so W·hi + W·lo on tensor cores (bf16
 * products are exact in f32) is within ~2^-17 of the f32 product. */
__global__ void split_bf16_kernel(__nv_bfloat16 *out, const float *in, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float v = in[i];
        const __nv_bfloat16 hi = __float2bfloat16_rn(v);
        out[i] = hi;
        out[n + i] = __float2bfloat16_rn(__fsub_rn(v, __bfloat162float(hi)));
    }
}

/* y[i] = y2[i] + y2[n + i]: the hi and lo halves of a split GEMM. */
__global__ void sum_halves_kernel(float *y, const float *y2, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = __fadd_rn(y2[i], y2[n + i]);
}
__global__ void sum_halves4_kernel(float *y, const float *y2, size_t n4) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x) {
        const float4 a = ((const float4 *)y2)[i], b = ((const float4 *)y2)[n4 + i];
        ((float4 *)y)[i] = make_float4(__fadd_rn(a.x, b.x), __fadd_rn(a.y, b.y), __fadd_rn(a.z, b.z), __fadd_rn(a.w, b.w));
    }
}

__global__ void dequant_f32_kernel(float *out, dweight_t w) {
    size_t n = (size_t)w.rows * w.cols;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = wload(w, (int)(i / w.cols), (int)(i % w.cols));
}

/* MLX 4/8-bit → f32, a thread per code word (8 or 4 codes, one group: groups are multiples
 * of 8 columns), the same scale·code + bias as wload, float4 stores. The per-element kernel
 * above recomputed bit offsets for every element and wrote ~0.9 TB/s (llama-3-8b q4 prefill:
 * ~30 ms of dequantization per 2048 tokens, KILN_CUDA_PROFILE=2048). */
template <int BITS>
__global__ void dequant_words_kernel(float4 *out, dweight_t w) {
    constexpr int CPW = 32 / BITS;
    const size_t wpr = (size_t)w.cols / CPW, nw = (size_t)w.rows * wpr;
    const int ng = w.cols / w.group;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < nw; i += (size_t)gridDim.x * blockDim.x) {
        float sc, bi;
        const uint32_t word = wword<CPW>(w, i, wpr, ng, 1.f, sc, bi);
        float v[CPW];
#pragma unroll
        for (int j = 0; j < CPW; j++) v[j] = sc * (float)((word >> (BITS * j)) & ((1u << BITS) - 1)) + bi;
#pragma unroll
        for (int j = 0; j < CPW / 4; j++) out[i * (CPW / 4) + j] = make_float4(v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3]);
    }
}

/* The same word walk, each scale·code + bias (computed in f32 as above) rounded once to bf16
 * for a bf16 GEMM (deq_bf16, opt-in: see cuda_matmul; the codes are exact in bf16, the scaled
 * value keeps 8 of its bits). One 16-byte (q4: 8 codes) or 8-byte
 * (q8: 4 codes) store per word. */
template <int BITS>
__global__ void dequant_words_bf16_kernel(__nv_bfloat16 *out, dweight_t w) {
    constexpr int CPW = 32 / BITS;
    const size_t wpr = (size_t)w.cols / CPW, nw = (size_t)w.rows * wpr;
    const int ng = w.cols / w.group;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < nw; i += (size_t)gridDim.x * blockDim.x) {
        float sc, bi;
        const uint32_t word = wword<CPW>(w, i, wpr, ng, 1.f, sc, bi);
        __align__(16) __nv_bfloat162 v[CPW / 2];
#pragma unroll
        for (int j = 0; j < CPW / 2; j++)
            v[j] = __floats2bfloat162_rn(sc * (float)((word >> (BITS * 2 * j)) & ((1u << BITS) - 1)) + bi,
                                         sc * (float)((word >> (BITS * (2 * j + 1))) & ((1u << BITS) - 1)) + bi);
        if (CPW == 8) ((uint4 *)out)[i] = *(const uint4 *)v;
        else ((uint2 *)out)[i] = *(const uint2 *)v;
    }
}

/* --- cuBLASLt: column-major view. W row-major [N, K] is A = K×N col-major; op(A) = Aᵀ.
 * x row-major [T, K] is B = K×T; D = y as N×T col-major (row-major [T, N]). --- */
typedef struct lt_plan {
    int N, K, T, type, tf32, fresh;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
} lt_plan_t;

#define LT_PLANS 64
static lt_plan_t plans[LT_PLANS];
static int n_plans, next_plan;

static lt_plan_t *lt_plan(cuda_impl_t *c, int N, int K, int T, cudaDataType_t type, int tf32) {
    for (int i = 0; i < n_plans; i++)
        if (plans[i].N == N && plans[i].K == K && plans[i].T == T && plans[i].type == (int)type && plans[i].tf32 == tf32) return &plans[i];
    lt_plan_t *p = &plans[next_plan];
    if (n_plans == LT_PLANS) {
        cublasLtMatmulDescDestroy(p->op);
        cublasLtMatrixLayoutDestroy(p->a); cublasLtMatrixLayoutDestroy(p->b); cublasLtMatrixLayoutDestroy(p->d);
    } else n_plans++;
    next_plan = (next_plan + 1) % LT_PLANS;
    p->N = N; p->K = K; p->T = T; p->type = (int)type; p->tf32 = tf32; p->fresh = 1;
    cublasCheck(cublasLtMatmulDescCreate(&p->op, tf32 == 1 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F));
    if (tf32 == 2 || tf32 == 4) { /* alpha and beta in device memory (cuda_lt_matmul_dev, _dev2) */
        cublasLtPointerMode_t pm = CUBLASLT_POINTER_MODE_DEVICE;
        cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_POINTER_MODE, &pm, sizeof pm));
    }
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    cublasCheck(cublasLtMatrixLayoutCreate(&p->a, type, K, N, K));
    cublasCheck(cublasLtMatrixLayoutCreate(&p->b, type, K, T, K));
    cublasCheck(cublasLtMatrixLayoutCreate(&p->d, CUDA_R_32F, N, T, N));
    if (tf32 == 3 || tf32 == 4) { /* lt_batch2, _dev2: a strided batch of two weights on one x (x's stride 0); A and D strides set per call */
        const int32_t two = 2;
        const int64_t sa = (int64_t)N * K, sb = 0, sd = (int64_t)N * T;
        cublasCheck(cublasLtMatrixLayoutSetAttribute(p->a, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &two, sizeof two));
        cublasCheck(cublasLtMatrixLayoutSetAttribute(p->b, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &two, sizeof two));
        cublasCheck(cublasLtMatrixLayoutSetAttribute(p->d, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &two, sizeof two));
        cublasCheck(cublasLtMatrixLayoutSetAttribute(p->a, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sa, sizeof sa));
        cublasCheck(cublasLtMatrixLayoutSetAttribute(p->b, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sb, sizeof sb));
        cublasCheck(cublasLtMatrixLayoutSetAttribute(p->d, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sd, sizeof sd));
    }
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &c->lt_workspace_bytes,
                                                     sizeof c->lt_workspace_bytes));
    cublasLtMatmulHeuristicResult_t res;
    int nres = 0;
    cublasCheck(cublasLtMatmulAlgoGetHeuristic(c->lt, p->op, p->a, p->b, p->d, p->d, pref, 1, &res, &nres));
    cublasLtMatmulPreferenceDestroy(pref);
    if (nres == 0) cublas_fail(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
    p->algo = res.algo;
    return p;
}

/* KILN_CUDA_LT_TUNE=N (opt-in, default 0: cuBLASLt's first heuristic answer, as before): a new
 * plan of a bf16 GEMM with beta = 0 times cuBLASLt's first N heuristic candidates on the call's own
 * operands (y is written by the call anyway) and keeps the fastest; one line per plan on stderr.
 * Not the default: the choice depends on timings, so two processes may pick differently, and an
 * algorithm with another K split sums in another order (f32 accumulation either way). */
static int lt_tune_n(void) {
    static int v = -1;
    if (v < 0) { const char *e = getenv("KILN_CUDA_LT_TUNE"); v = e ? atoi(e) : 0; if (v > 16) v = 16; }
    return v;
}
static void lt_tune(cuda_impl_t *c, lt_plan_t *p, float *y, const void *W, const void *X) {
    p->fresh = 0;
    const int want = lt_tune_n();
    if (want < 2 || c->capturing || p->type != (int)CUDA_R_16BF || p->tf32) return;
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &c->lt_workspace_bytes,
                                                     sizeof c->lt_workspace_bytes));
    cublasLtMatmulHeuristicResult_t res[16];
    int nres = 0;
    cublasCheck(cublasLtMatmulAlgoGetHeuristic(c->lt, p->op, p->a, p->b, p->d, p->d, pref, want, res, &nres));
    cublasLtMatmulPreferenceDestroy(pref);
    cudaEvent_t e0, e1;
    cudaCheck(cudaEventCreate(&e0));
    cudaCheck(cudaEventCreate(&e1));
    const float alpha = 1.f, beta = 0.f;
    float best = 1e30f, first = 0.f;
    int bi = -1;
    for (int i = 0; i < nres; i++) {
        if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
        int ok = 1;
        for (int r = 0; r < 7 && ok; r++) { /* 2 warm-ups, then 5 timed */
            if (r == 2) cudaCheck(cudaEventRecord(e0, c->stream));
            ok = cublasLtMatmul(c->lt, p->op, &alpha, W, p->a, X, p->b, &beta, y, p->d, y, p->d, &res[i].algo, c->lt_workspace,
                                c->lt_workspace_bytes, c->stream) == CUBLAS_STATUS_SUCCESS;
        }
        cudaCheck(cudaEventRecord(e1, c->stream));
        cudaCheck(cudaEventSynchronize(e1));
        float ms = 0.f;
        cudaCheck(cudaEventElapsedTime(&ms, e0, e1));
        if (!ok) continue;
        if (i == 0) first = ms;
        if (ms < best) { best = ms; bi = i; }
    }
    cudaCheck(cudaEventDestroy(e0));
    cudaCheck(cudaEventDestroy(e1));
    if (bi < 0) return;
    p->algo = res[bi].algo;
    fprintf(stderr, "kiln cuda: lt tune T=%d N=%d K=%d: candidate %d of %d, %.2f us (first %.2f us)\n", p->T, p->N, p->K, bi, nres,
            1e3f * best / 5, 1e3f * first / 5);
}

static void lt_matmul_beta(cuda_impl_t *c, float *y, const void *W, const void *X, int T, int N, int K, cudaDataType_t type, int tf32,
                           float beta) {
    lt_plan_t *p = lt_plan(c, N, K, T, type, tf32);
    if (p->fresh && beta == 0.f) lt_tune(c, p, y, W, X);
    float alpha = 1.f;
    cublasCheck(cublasLtMatmul(c->lt, p->op, &alpha, W, p->a, X, p->b, &beta, y, p->d, y, p->d, &p->algo, c->lt_workspace,
                               c->lt_workspace_bytes, c->stream));
}

static void lt_matmul(cuda_impl_t *c, float *y, const void *W, const void *X, int T, int N, int K, cudaDataType_t type, int tf32) {
    lt_plan_t *p = lt_plan(c, N, K, T, type, tf32);
    if (p->fresh) lt_tune(c, p, y, W, X);
    float alpha = 1.f, beta = 0.f;
    cublasCheck(cublasLtMatmul(c->lt, p->op, &alpha, W, p->a, X, p->b, &beta, y, p->d, y, p->d, &p->algo, c->lt_workspace,
                               c->lt_workspace_bytes, c->stream));
}

/* y = alpha·W·X + beta·y with alpha = alpha_beta[0], beta = alpha_beta[1] read from device memory
 * when the GEMM runs (matmul_dequant.cu: alpha undoes the power-of-two scalings) */
void cuda_lt_matmul_dev(cuda_impl_t *c, float *y, const void *W, const void *X, int T, int N, int K, cudaDataType_t type,
                        const float *alpha_beta) {
    lt_plan_t *p = lt_plan(c, N, K, T, type, 2);
    cublasCheck(cublasLtMatmul(c->lt, p->op, alpha_beta, W, p->a, X, p->b, alpha_beta + 1, y, p->d, y, p->d, &p->algo, c->lt_workspace,
                               c->lt_workspace_bytes, c->stream));
}

/* cuda_lt_matmul_dev for two weights of one shape and one x as ONE strided batch: W0 and W0 + sa, y0 and y0 + sd
 * (element strides, positive, sa ≥ N·K and 16-byte multiples), the batch's one alpha/beta from device memory
 * (matmul_dequant.cu's gate/up: up's own power of two is put back by the GLU) */
void cuda_lt_matmul_dev2(cuda_impl_t *c, float *y0, const void *W0, int64_t sa, int64_t sd, const void *X, int T, int N, int K,
                         cudaDataType_t type, const float *alpha_beta) {
    lt_plan_t *p = lt_plan(c, N, K, T, type, 4);
    cublasCheck(cublasLtMatrixLayoutSetAttribute(p->a, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sa, sizeof sa));
    cublasCheck(cublasLtMatrixLayoutSetAttribute(p->d, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sd, sizeof sd));
    cublasCheck(cublasLtMatmul(c->lt, p->op, alpha_beta, W0, p->a, X, p->b, alpha_beta + 1, y0, p->d, y0, p->d, &p->algo, c->lt_workspace,
                               c->lt_workspace_bytes, c->stream));
}

/* x[nx] rounded once to bf16 for a cuBLASLt GEMM: the producer's copy or this matmul_multi's
 * earlier conversion where x16.cuh's record names x, else converted now (into x16's buffer,
 * noted for the producers; the old scratch where x16 is off) */
static const void *x16_of(cuda_impl_t *c, const float *x, size_t nx) {
    const void *x16 = cuda_x16_get(c, x, nx);
    if (x16) return x16;
    void *b = cuda_x16_conv(c, x, nx);
    if (b && nx % 4 == 0 && !((uintptr_t)x & 15)) {
        const size_t n4 = nx / 4;
        to_bf16x4_kernel<<<cdiv(n4, 256) < 4096 ? cdiv(n4, 256) : 4096, 256, 0, c->stream>>>((uint2 *)b, (const float4 *)x, n4);
    } else {
        if (!b) b = cuda_scratch(c, &c->act16, &c->act16_bytes, nx * 2);
        to_16bit_kernel<<<cdiv(nx, 256) < 4096 ? cdiv(nx, 256) : 4096, 256, 0, c->stream>>>(b, x, nx, 1);
    }
    cudaLaunchCheck();
    return b;
}

/* the most tokens matmul_wgmma.cu takes in one call: qmma_max_t (64), or 128 with the 128-token tile on
 * (KILN_CUDA_QWG_128, default) at the default qmma_max_t — matmul, matmul_multi and matmul_glu try it up to
 * this, cuda_qwg_slices cuts longer runs */
static int qwg_max_t(const cuda_impl_t *c) { return cuda_qwg128_on() && c->qmma_max_t == 64 ? 128 : c->qmma_max_t; }

/* A weight the weight cache keeps as f16 (matmul_dequant.cu cuda_qdeq_kept: kept, or would be at its next
 * prefill) is a plain f16 GEMM past the wgmma kernels' 64 tokens from KILN_CUDA_QDEQ_CACHE_T tokens on (at
 * least 65; 0: never — the tiles and runs keep their sizes) instead of the 128-token tile and the runs:
 * those re-read and dequantize the packed weight per tile, the GEMM reads the kept copy once. */
int cuda_qdeq_kept(const cuda_impl_t *c, const dweight_t *w);
static int qdc_from_t(void) {
    const char *e = getenv("KILN_CUDA_QDEQ_CACHE_T");
    const int t = e && *e ? atoi(e) : 0;
    return t > 0 && t < 65 ? 65 : t;
}
/* the kept copy's GEMM takes T tokens of w (only past the 64-token kernels: decode steps never ask) */
static int qdc_takes(const cuda_impl_t *c, const dweight_t *w, int T) {
    if (T <= c->qmma_max_t || w->dtype != DT_U32) return 0;
    const int t = qdc_from_t();
    return t > 0 && T >= t && cuda_qdeq_kept(c, w);
}
/* the wgmma kernels take T tokens of w whole: up to qwg_max_t, unless the cache takes over */
static int qwg_whole(const cuda_impl_t *c, const dweight_t *w, int T) { return T <= qwg_max_t(c) && !qdc_takes(c, w, T); }

/* MLX 4/8-bit matmuls (and matmul_multi, matmul_glu) past the wgmma kernels' own sizes (64 tokens; 128 with the
 * 128-token tile, the default) up to MAXT tokens as runs of tokens on those kernels. Why: past them the
 * dequantizing path (matmul_dequant.cu) writes the whole weight as f16 whatever T is — ~0.35 ms a llama-3-8b
 * q4 layer plus ~0.14 of scans, against ~0.13 ms for a 64-token layer of matmul_wgmma.cu (bench/cuda/RESULTS.md
 * session 28–29 ncu) — so a short prompt pays more for that conversion than for its GEMMs. Each run reads the
 * packed weight again, so the dequantizing path wins back as T grows.
 * The runs: with the tile, 128-token tiles from the start and the rest as one piece (a tile launch costs ~1.7×
 * a 64-token one, so [128, 64] beats three 64s at 192 tokens); without it (or KILN_CUDA_QWG_MIX=0), ⌈T / 64⌉
 * equal runs. Measured on the H200 (session 30, bench/cuda/call_s30f.sh, prefill tok/s against no runs):
 * llama-3-8b q4 +19/+16 % at 144/192 tokens, even at 256, −17 % at 320; q8 +25/+23/+7 % at 144/192/256, −13 %
 * at 320; qwen3-0.6b q4 and qwen3.5-2b q4 (no weight of 2^24 elements) −2..−9 % at 144/192. Default MAXT: for
 * weights of ≥ 2^24 elements (4096 × 4096 and up) 192 at 4 bits, 256 at 8; 128 below — rules from these model
 * sizes. KILN_CUDA_QWG_SLICE=MAXT overrides it for every weight (0: never slice). Numerics: per token the
 * wgmma kernels' bits whichever run a token is in (test_qwg_slice, test_qwg_128). b (≥ QWG_MAX_SLICES + 1
 * ints) gets the runs' bounds; returns their number, 0 where not taken. */

int cuda_qwg_slices(const cuda_impl_t *c, int T, const dweight_t *w, int *b) {
    const int direct = qwg_max_t(c), tile = direct > c->qmma_max_t; /* up to direct: the kernels whole, before this */
    if (T <= direct || !c->qmma || c->act_bf16 == 1 || c->qmma_max_t < 2 * c->qmma) return 0;
    if (qdc_takes(c, w, T)) return 0; /* the kept f16 copy's GEMM instead */
    const char *e = getenv("KILN_CUDA_QWG_SLICE"); /* read per call: tests switch it */
    const long m = e && *e ? atol(e) : (long)w->rows * w->cols >= (1L << 24) ? (w->bits == 8 ? 256 : 192) : 128;
    if (m <= 0 || T > m) return 0;
    const char *mx = getenv("KILN_CUDA_QWG_MIX");
    int ns = 0;
    if (tile && !(mx && atoi(mx) == 0)) {
        /* 128-token tiles from the start, the rest as one piece (the tile if over 64 tokens, else the 64-token
         * path); a rest under 9 tokens (qmma's and the GEMV's sizes, other bits) borrows from the last tile */
        const int r = T % 128, full = T / 128;
        if (full + 2 > QWG_MAX_SLICES) return 0;
        b[0] = 0;
        for (int i = 1; i <= full; i++) b[ns = i] = 128 * i;
        if (r >= 9) b[++ns] = T;
        else if (r > 0) { b[ns] = T - 9; b[++ns] = T; }
        return ns;
    }
    ns = (T + c->qmma_max_t - 1) / c->qmma_max_t;
    if (ns > QWG_MAX_SLICES || T / ns < c->qmma || T / ns < 9) return 0;
    for (int i = 0; i <= ns; i++) b[i] = (int)((long)T * i / ns);
    return ns;
}

/* cuda_matmul sends w at T tokens to the dequantizing f16 GEMM (cuda_qdeq_f16, below): MLX codes past the
 * wgmma kernels, their runs and qmma, x not forced to bf16, no qgemm (each as the branches below decide
 * it); matmul_dequant.cu's fused prefill ops take only such weights */
int cuda_qd_takes(cuda_impl_t *c, const dweight_t *w, int T) {
    if (w->dtype != DT_U32 || T < c->gemm_min_t || T < 2) return 0;
    if (c->qmma && T >= c->qmma && (T <= c->qmma_max_t || (qwg_whole(c, w, T) && c->act_bf16 != 1))) return 0;
    int b[QWG_MAX_SLICES + 1];
    if (cuda_qwg_slices(c, T, w, b)) return 0;
    const char *qg = getenv("KILN_CUDA_QGEMM");
    return !(c->deq_bf16 == 1 || (c->deq_bf16 < 0 && c->act_bf16 == 1)) && !(qg && atoi(qg) > 0);
}

void cuda_matmul(backend_t *be, float *y, const float *x, int T, const weight_t *wt) {
    if (T <= 0) return;
    cuda_impl_t *c = cuda_impl(be);
    const dweight_t *w = (const dweight_t *)wt->device;
    cuda_capture_tick(c); /* a captured step is launched in segments of matmuls */
    /* MLX 4/8-bit, one token, on "cuda" (qmma from 2 tokens, the default): the decode GEMV on
     * tensor cores (matmul_gemv_tc.cu) */
    /* ... and 2..4 tokens there too (gemv_tcm_kernel: the weights streamed once for all of them,
     * each token's rows bitwise its own one-token launch; KILN_CUDA_GEMV_TC_T, default 2: +12..21 % at
     * 2 rows, slower than wgmma at 3 and 4 — bench/cuda/RESULTS.md session 46) */
    if (tc_takes_t(c, T) && w->dtype == DT_U32 && cuda_gemv_tc(c, 1, &y, x, T, &w) == 0) return;
    /* MLX 4/8-bit up to 64 tokens on "cuda": tensor cores on the codes (matmul_qmma.cu), x split
     * into hi + lo; rounded once only where KILN_CUDA_ACT=bf16 forces it (not the policy's
     * default: the dense MLX fixtures moved by 1.5-2.8e-2 that way) */
    /* ... from 2 tokens (KILN_CUDA_QWG) first Hopper's wgmma on the weights dequantized to f16 in
     * registers, x as f16 scaled per token (matmul_wgmma.cu: the prefill path's operands;
     * KILN_CUDA_QWG=0: qmma for all; x forced to bf16 keeps qmma's single rounding) */
    /* ... and at 65..128 tokens the 128-token tile (KILN_CUDA_QWG_128, default on; qwg_max_t) */
    if (c->qmma && T >= c->qmma && w->dtype == DT_U32 && qwg_whole(c, w, T) && c->act_bf16 != 1 && cuda_qwg(c, y, x, T, w) == 0) return;
    /* ... and past those up to 128–256 tokens, as runs of them (cuda_qwg_slices) */
    if (w->dtype == DT_U32) {
        int b[QWG_MAX_SLICES + 1];
        const int ns = cuda_qwg_slices(c, T, w, b);
        for (int i = 0; i < ns; i++) cuda_matmul(be, y + (size_t)b[i] * w->rows, x + (size_t)b[i] * w->cols, b[i + 1] - b[i], wt);
        if (ns) return;
    }
    if (c->qmma && T >= c->qmma && w->dtype == DT_U32 && cuda_qmma(c, y, x, T, w, c->act_bf16 == 1) == 0) return;
    if (T < c->gemm_min_t && !(w->dtype == DT_BF16 && T >= c->gemm_min_t_bf16)) {
        if (cuda_gemv(c, y, x, T, w) == 0) return;
        dim3 grid(cdiv(w->rows, TB_N), cdiv(T, TB_M));
        tiled_kernel<<<grid, 256, 0, c->stream>>>(y, x, T, *w);
        cudaLaunchCheck();
        return;
    }
    size_t nx = (size_t)T * w->cols;
    if (w->dtype == DT_F32) { lt_matmul(c, y, w->data, x, T, w->rows, w->cols, CUDA_R_32F, 0); return; }
    /* Precision policy (cuda_common.cuh act_bf16 / deq_bf16): x rounded once to bf16 where the
     * model's architecture allows it (backend_t.act_bf16_ok: llama and qwen3, whose fixtures
     * stay within 4-8e-3 of the reference that way) or KILN_CUDA_ACT=bf16 says so; the split
     * below everywhere else (the hybrid / gemma4 fixtures move 0.03-0.27 with one rounding: no
     * single matmul class carries it, docs/cuda.md). One rounding is one GEMM instead of two:
     * llama-3-8b bf16 prefill 33 % -> ~60 % of the GEMM rate (bench/cuda/RESULTS.md). */
    const int single = c->act_bf16 >= 0 ? c->act_bf16 : be->act_bf16_ok;
    /* MLX 4/8-bit past qmma, opt-in (KILN_CUDA_QGEMM=1; an explicit KILN_CUDA_QDEQ=bf16 wins):
     * tensor cores on the codes, x rounded once (single) or split into hi + lo, never
     * dequantized (matmul_qgemm.cu; measured slower than the TF32 path below) */
    if (w->dtype == DT_U32 && c->deq_bf16 != 1 && cuda_qgemm(c, y, x, T, w, !single) == 0) return;
    /* bf16 weights at 3..64 tokens: matmul_bfmma.cu (x rounded or split in registers, the weight
     * read once; KILN_CUDA_BFMMA=0: cuBLASLt below) */
    if (w->dtype == DT_BF16 && cuda_bfmma(c, 1, &y, x, T, &w, !single, 0, 0) == 0) return;
    if (w->dtype == DT_BF16 && single) {
        /* x's bf16 copy from its producer or from this matmul_multi's first conversion (x16.cuh,
         * KILN_CUDA_X16); else converted here (into x16's buffer, noted for the producers) */
        lt_matmul(c, y, w->data, x16_of(c, x, nx), T, w->rows, w->cols, CUDA_R_16BF, 0);
        return;
    }
    /* MLX 4/8-bit past qmma's sizes, opt-in only (KILN_CUDA_QDEQ=bf16, or KILN_CUDA_ACT=bf16
     * forced): the weight dequantized to bf16 (one rounding of scale·code + bias) and x rounded
     * once, one bf16 GEMM at twice TF32's rate (llama-3-8b q4 prefill 19.1k -> 30.7k tok/s on the
     * H200). Not the policy's default even for llama/qwen3: two roundings moved the dense MLX
     * fixtures by 1.03-1.28e-2 on the GPU (test_cuda_parity, KILN_CUDA_QMMA=0), over the 1e-2
     * bar (bench/cuda/RESULTS.md, 2026-12-01 helper-29). */
    const int deq16 = c->deq_bf16 >= 0 ? c->deq_bf16 : c->act_bf16 == 1;
    if (deq16 && w->dtype == DT_U32 && ((w->bits == 4 && w->group % 8 == 0 && w->cols % 8 == 0) ||
                                        (w->bits == 8 && w->group % 4 == 0 && w->cols % 4 == 0))) {
        const size_t nw = (size_t)w->rows * w->cols, nwords = nw / (32 / w->bits);
        __nv_bfloat16 *d = (__nv_bfloat16 *)cuda_scratch(c, &c->wdeq, &c->wdeq_bytes, nw * 2);
        void *x16 = cuda_scratch(c, &c->act16, &c->act16_bytes, nx * 2);
        const int wgrid = (int)(nwords / 256 < 8 * 1024 ? nwords / 256 + 1 : 8 * 1024);
        if (w->bits == 4) dequant_words_bf16_kernel<4><<<wgrid, 256, 0, c->stream>>>(d, *w);
        else dequant_words_bf16_kernel<8><<<wgrid, 256, 0, c->stream>>>(d, *w);
        to_16bit_kernel<<<cdiv(nx, 256) < 4096 ? cdiv(nx, 256) : 4096, 256, 0, c->stream>>>(x16, x, nx, 1);
        cudaLaunchCheck();
        lt_matmul(c, y, d, x16, T, w->rows, w->cols, CUDA_R_16BF, 0);
        return;
    }
    /* x = hi + lo: y = W·hi, then y += W·lo (a second GEMM with beta = 1). Stacking [hi; lo]
     * into one 2T-row GEMM and adding the halves afterwards (KILN_CUDA_SPLIT=stack) wrote and
     * re-read a [2T, N] f32 buffer: llama-3-8b bf16 prefill 17.6k -> 18.5k tok/s, qwen3-0.6b
     * 107k -> 116k with the accumulation (H200, 2048 tokens, bench/cuda/RESULTS.md). */
    /* From 256 tokens only: below, the GEMMs are bound by reading W, which stacking does once. */
    const int split_acc = T >= 256 && !(getenv("KILN_CUDA_SPLIT") && !strcmp(getenv("KILN_CUDA_SPLIT"), "stack"));
    if (w->dtype == DT_BF16 && split_acc) {
        void *x16 = cuda_scratch(c, &c->act16, &c->act16_bytes, nx * 4);
        split_bf16_kernel<<<cdiv(nx, 256) < 4096 ? cdiv(nx, 256) : 4096, 256, 0, c->stream>>>((__nv_bfloat16 *)x16, x, nx);
        cudaLaunchCheck();
        lt_matmul_beta(c, y, w->data, x16, T, w->rows, w->cols, CUDA_R_16BF, 0, 0.f);
        lt_matmul_beta(c, y, w->data, (const __nv_bfloat16 *)x16 + nx, T, w->rows, w->cols, CUDA_R_16BF, 0, 1.f);
        return;
    }
    if (w->dtype == DT_BF16) { /* KILN_CUDA_SPLIT=stack: one GEMM over [hi; lo] (2T rows), then y = y_hi + y_lo */
        const int N = w->rows;
        void *x16 = cuda_scratch(c, &c->act16, &c->act16_bytes, nx * 4);
        float *y2 = (float *)cuda_scratch(c, &c->ysplit, &c->ysplit_bytes, (size_t)2 * T * N * 4);
        split_bf16_kernel<<<cdiv(nx, 256) < 4096 ? cdiv(nx, 256) : 4096, 256, 0, c->stream>>>((__nv_bfloat16 *)x16, x, nx);
        cudaLaunchCheck();
        lt_matmul(c, y2, w->data, x16, 2 * T, N, w->cols, CUDA_R_16BF, 0);
        const size_t ny = (size_t)T * N;
        if (ny % 4 == 0) sum_halves4_kernel<<<cdiv(ny / 4, 256) < 8192 ? cdiv(ny / 4, 256) : 8192, 256, 0, c->stream>>>(y, y2, ny / 4);
        else sum_halves_kernel<<<cdiv(ny, 256) < 8192 ? cdiv(ny, 256) : 8192, 256, 0, c->stream>>>(y, y2, ny);
        cudaLaunchCheck();
        return;
    }
    /* MLX codes past qmma, the default (KILN_CUDA_QDEQ=tf32 / f32: TF32 below): the weight and
     * x each scaled by a power of two and rounded once to f16 (TF32's 10 bits), one f16 GEMM at
     * the bf16 rate, alpha scales back (matmul_dequant.cu) */
    if (w->dtype == DT_U32 && cuda_qdeq_f16(c, y, x, T, w) == 0) return;
    /* MLX codes and f16: dequantize to f32 and run TF32 (10-bit mantissa, f32 range). bf16
     * for both operands would round the dequantized weights a second time (measured: 1.3e-2
     * on the q4/q8 fixtures against 7e-3 for bf16 checkpoints), and f16 activations can
     * overflow on models trained in bf16. */
    size_t nw = (size_t)w->rows * w->cols;
    float *d = (float *)cuda_scratch(c, &c->wdeq, &c->wdeq_bytes, nw * 4);
    /* KILN_CUDA_DEQUANT=old: the per-element kernel, for comparison */
    const int old_deq = getenv("KILN_CUDA_DEQUANT") && !strcmp(getenv("KILN_CUDA_DEQUANT"), "old");
    const size_t nwords = w->bits ? nw / (32 / w->bits) : 0;
    const int wgrid = (int)(nwords / 256 < 8 * 1024 ? nwords / 256 + 1 : 8 * 1024);
    if (!old_deq && w->dtype == DT_U32 && w->bits == 4 && w->group % 8 == 0 && w->cols % 8 == 0)
        dequant_words_kernel<4><<<wgrid, 256, 0, c->stream>>>((float4 *)d, *w);
    else if (!old_deq && w->dtype == DT_U32 && w->bits == 8 && w->group % 4 == 0 && w->cols % 4 == 0)
        dequant_words_kernel<8><<<wgrid, 256, 0, c->stream>>>((float4 *)d, *w);
    else dequant_f32_kernel<<<(int)(nw / 256 < 16384 ? nw / 256 + 1 : 16384), 256, 0, c->stream>>>(d, *w);
    cudaLaunchCheck();
    lt_matmul(c, y, d, x, T, w->rows, w->cols, CUDA_R_32F, 1);
}

/* backend.h matmul_glu for MLX 4/8-bit at 3..128 tokens (3..8: the 16-token bucket, cuda_qwg_s16; 65..128: the 128-token tile's, unless KILN_CUDA_QWG128_MULTI=0) where matmul_multi
 * takes matmul_wgmma.cu's multi launch: gate and up in that one launch, the GLU in its split reduce (bitwise matmul_multi +
 * glu; KILN_CUDA_MULTI=0 or KILN_CUDA_QWG_MULTI=0: declines). As cuda_glu would, the GLU output's
 * bf16 copy is written where x16.cuh asks for one; where xprep.cuh would prepare it for a GEMV
 * (one token only) this declines. 0: done; -1: declined, nothing launched. */
int cuda_qwg_glu_ok(cuda_impl_t *c, const float *x, int T, const dweight_t *wg, const dweight_t *wu);
int cuda_qwg_glu(cuda_impl_t *c, float *y, const float *x, int T, const dweight_t *wg, const dweight_t *wu, int gelu, __nv_bfloat16 *y16);
int cuda_qwg_matmul_glu(backend_t *be, float *y, float *g, float *u, const float *x, int T, const weight_t *wg, const weight_t *wu, act_t act) {
    cuda_impl_t *c = cuda_impl(be);
    const char *m = getenv("KILN_CUDA_MULTI");
    /* 65..128 tokens: the 128-token tile's multi launch where cuda_qwg_glu_ok takes it */
    const dweight_t *dg = (const dweight_t *)wg->device, *du = (const dweight_t *)wu->device;
    if ((m && !strcmp(m, "0")) || !c->qmma || T < c->qmma || !qwg_whole(c, dg, T) || !qwg_whole(c, du, T) || c->act_bf16 == 1) return -1;
    /* 2..4 tokens where the tensor-core GEMV takes gate or up (cuda_matmul's path): declined, so y stays bitwise
     * matmul, matmul, glu (the 16-token bucket's multi launch, cuda_qwg_s16, would otherwise take it) */
    if (tc_takes(c, dg, T) || tc_takes(c, du, T)) return -1;
    const size_t n = (size_t)T * dg->rows;
    xp_dst xp;
    if (!cuda_qwg_glu_ok(c, x, T, dg, du) || n >= (1u << 30) || cuda_xp_want(c, 1, (int)n, 1, &xp)) return -1;
    __nv_bfloat16 *y16 = n % 4 == 0 && !(((uintptr_t)y | (uintptr_t)g | (uintptr_t)u) & 15) ? cuda_x16_want(c, n) : NULL;
    if (cuda_qwg_glu(c, y, x, T, dg, du, act == ACT_GELU_TANH, y16)) return -1; /* not reached: _ok said yes */
    if (y16) cuda_x16_set(c, y, n);
    cuda_capture_tick(c);
    return 0;
}

/* --- prefill sizes: the GEMMs of one x side by side, and the fused ops ---
 * Where cuda_matmul takes cuBLASLt with x rounded once (bf16 weights past matmul_bfmma.cu's 64
 * tokens, the llama/qwen3 policy), from LT_PREFILL_T tokens:
 *  - matmul_multi: x is rounded once on the backend's stream (x16.cuh, as the first matmul of the
 *    one-by-one loop would), then weight 0's GEMM runs there and weight i's on side stream i - 1
 *    (fork and join by events), each with its own cuBLASLt workspace. The GEMMs are each sized
 *    for the whole GPU, but a small one is not: qwen3-0.6b's k and v at 2048 tokens (N = K =
 *    1024) ran at ~410 TFLOP/s against q's ~490 and the layer mix's ~530 (ncu, bench/cuda/
 *    RESULTS.md), their last wave leaving SMs idle. Same plans, same algorithms, same operands:
 *    every y is bitwise the one-by-one loop's. Trade-off: 64 MB of workspace per side stream
 *    (made on first use) and two event records per side stream per call. Not while a step is
 *    captured (decode steps stay one graph on one stream). Opt-in, KILN_CUDA_MM_CONC=N: from N
 *    tokens (at least LT_PREFILL_T). Measured SLOWER (session 18, H200, qwen3-0.6b 2048-token
 *    prefill: 278.2k tok/s against 283.4-284.9k one by one in one call, 286.9k against 293.1-294.3k
 *    in the next): each of k and v already
 *    runs 128 CTAs of 128x128 tiles, a wave of its own; side by side they only contend.
 *  - matmul_add (y += x·Wᵀ): the GEMM with beta = 1 on y, instead of a GEMM into h and the add
 *    (or add_rms_norm) reading h back; cuBLASLt's epilogue adds the f32 accumulator to y with one
 *    rounding, as the add op does (test_lt_fused checks bitwise).
 *  - rms_matmul_multi / rms_matmul_glu: the norm writes only bf16(h), the copy the GEMMs read,
 *    never the f32 h nobody reads (backend.h: h is not written); the GLU of rms_matmul_glu takes
 *    gate into y and up into a scratch.
 *  - rms_mlp (the MLP block): as rms_matmul_glu, then the GLU output only as bf16 (its one reader
 *    is the down projection) and down with beta = 1 on x: +4.6 % on qwen3-0.6b prefill.
 *  - k/v and gate/up, two weights of one shape, as ONE batched launch (lt_batch2): +3.6 %.
 *  A 2048-token qwen3-0.6b layer thus moves ~16 MB less (two add_rms_norm passes of 36 MB become
 *  norms of 12 MB and GEMM epilogues that read y). Measured (session 18, H200, ncu): the norms
 *  9.4-10.6 -> 5.9-6.1 us, but the o and down GEMMs with beta = 1 take cuBLASLt's "badd" kernels,
 *  2.1-2.5 us longer (o 15.5 -> 18.0, down 20.6 -> 22.7); in wall time qwen3-0.6b prefill +1.4 %
 *  (293.1-294.3k against 289.1-289.9k tok/s, same call), llama-3-8b even. Logits bitwise the same
 *  (bench/cuda/logits_ab.sh). KILN_CUDA_LT_FUSE=0: the four fused ops decline (A/B). */
#define LT_PREFILL_T 128
int cuda_rms_norm_bf16(cuda_impl_t *c, __nv_bfloat16 *y16, const float *x, const float *w, float off, int T, int n, float eps);

/* the n weights (1..4) take cuda_matmul's cuBLASLt path with x rounded once at T tokens, one K */
static int lt_single_ok(backend_t *be, int n, const weight_t *const *wt, int T) {
    cuda_impl_t *c = cuda_impl(be);
    const int single = c->act_bf16 >= 0 ? c->act_bf16 : be->act_bf16_ok;
    if (!single || T < LT_PREFILL_T || T < c->gemm_min_t_bf16 || c->capturing || n < 1 || n > 4) return 0;
    const int K = ((const dweight_t *)wt[0]->device)->cols;
    for (int i = 0; i < n; i++) {
        const dweight_t *w = (const dweight_t *)wt[i]->device;
        if (w->dtype != DT_BF16 || w->cols != K) return 0;
    }
    return 1;
}

static int lt_fuse_on(void) {
    static int v = -1;
    if (v < 0) { const char *e = getenv("KILN_CUDA_LT_FUSE"); v = !(e && !strcmp(e, "0")); }
    return v;
}

/* Two GEMMs of one x and one shape (k and v; gate and up) as ONE cuBLASLt launch: a strided batch
 * of 2, x's stride 0, the weights' and outputs' address differences as the A and D strides (the pair
 * ordered so both are positive; declined where the outputs overlap or the order disagrees). One
 * launch of twice the tiles instead of two half-filled waves: qwen3-0.6b's k and v at 2048 tokens
 * ran 10.2-11.0 µs each against q's 17.7 for the same FLOPs (ncu, session 18). The batch's
 * algorithm is cuBLASLt's first heuristic answer for the batched shape (test_lt_fused: bitwise the
 * separate GEMMs on the test shapes; `kiln logits` md5 on the synths). KILN_CUDA_LT_BATCH=0: never.
 * 0: launched; -1: declined (nothing launched). */
static long lt_batch_n; /* pairs launched, for the tests (cuda_lt_batch_uses) */
static int lt_batch2(cuda_impl_t *c, float *y0, float *y1, const dweight_t *w0, const dweight_t *w1, const void *x16, int T, float beta) {
    static int on = -1;
    if (on < 0) { const char *e = getenv("KILN_CUDA_LT_BATCH"); on = !(e && !strcmp(e, "0")); }
    if (!on || w0->rows != w1->rows || w0->cols != w1->cols || w0->dtype != DT_BF16 || w1->dtype != DT_BF16) return -1;
    const int N = w0->rows, K = w0->cols;
    /* byte distances of separate allocations, as integers (the pair ordered by the weights' addresses) */
    const void *a0 = w0->data;
    float *d0 = y0;
    int64_t ba = (int64_t)((uintptr_t)w1->data - (uintptr_t)w0->data), bd = (int64_t)((uintptr_t)y1 - (uintptr_t)y0);
    if (ba < 0) {
        a0 = w1->data; d0 = y1;
        ba = -ba; bd = -bd;
    }
    if (ba % 16 || bd % 16) return -1;
    const int64_t sa = ba / 2, sd = bd / 4; /* elements: bf16 weights, f32 outputs */
    if (sa < (int64_t)N * K || sd < (int64_t)N * T) return -1;
    lt_plan_t *p = lt_plan(c, N, K, T, CUDA_R_16BF, 3);
    cublasCheck(cublasLtMatrixLayoutSetAttribute(p->a, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sa, sizeof sa));
    cublasCheck(cublasLtMatrixLayoutSetAttribute(p->d, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sd, sizeof sd));
    const float alpha = 1.f;
    if (cublasLtMatmul(c->lt, p->op, &alpha, a0, p->a, x16, p->b, &beta, d0, p->d, d0, p->d, &p->algo, c->lt_workspace, c->lt_workspace_bytes,
                       c->stream) != CUBLAS_STATUS_SUCCESS)
        return -1;
    lt_batch_n++;
    return 0;
}
extern "C" long cuda_lt_batch_uses(void) { return lt_batch_n; }

/* y[i] = beta·y[i] + x16·w[i]ᵀ (beta 0 or 1), the GEMMs side by side where n >= 2 and
 * KILN_CUDA_MM_CONC allows, else one after another on the backend's stream (a pair of one shape
 * as one batched launch: lt_batch2) */
static void lt_run(cuda_impl_t *c, int n, float *const *y, const void *x16, int T, const weight_t *const *wt, float beta) {
    const int K = ((const dweight_t *)wt[0]->device)->cols;
    const int conc = n >= 2 && c->mm_conc_min_t > 0 && T >= c->mm_conc_min_t;
    if (!conc && (n == 2 || n == 3)) { /* the last two weights (k and v; gate and up) as one batched GEMM */
        const dweight_t *wa = (const dweight_t *)wt[n - 2]->device, *wb = (const dweight_t *)wt[n - 1]->device;
        if (lt_batch2(c, y[n - 2], y[n - 1], wa, wb, x16, T, beta) == 0) {
            if (n == 3) lt_run(c, 1, y, x16, T, wt, beta);
            return;
        }
    }
    for (int i = 0; i < n; i++) { /* plans first (a fresh one may time candidates on the backend's stream: KILN_CUDA_LT_TUNE) */
        const dweight_t *w = (const dweight_t *)wt[i]->device;
        lt_plan_t *p = lt_plan(c, w->rows, K, T, CUDA_R_16BF, 0);
        if (p->fresh && beta == 0.f) lt_tune(c, p, y[i], w->data, x16);
    }
    for (int i = c->n_side; conc && i < n - 1; i++) { /* side streams, events and workspaces on first use */
        cudaCheck(cudaStreamCreateWithFlags(&c->side[i], cudaStreamNonBlocking));
        cudaCheck(cudaEventCreateWithFlags(&c->ev_join[i], cudaEventDisableTiming));
        cudaCheck(cudaMalloc(&c->side_ws[i], c->lt_workspace_bytes));
        if (i == 0) cudaCheck(cudaEventCreateWithFlags(&c->ev_fork, cudaEventDisableTiming));
        c->n_side = i + 1;
    }
    if (conc) cudaCheck(cudaEventRecord(c->ev_fork, c->stream));
    for (int i = n - 1; i >= 0; i--) { /* the side streams' GEMMs first: they start while weight 0's is issued */
        const dweight_t *w = (const dweight_t *)wt[i]->device;
        cudaStream_t s = conc && i ? c->side[i - 1] : c->stream;
        if (conc && i) cudaCheck(cudaStreamWaitEvent(s, c->ev_fork, 0));
        lt_plan_t *p = lt_plan(c, w->rows, K, T, CUDA_R_16BF, 0);
        const float alpha = 1.f;
        cublasCheck(cublasLtMatmul(c->lt, p->op, &alpha, w->data, p->a, x16, p->b, &beta, y[i], p->d, y[i], p->d, &p->algo,
                                   conc && i ? c->side_ws[i - 1] : c->lt_workspace, c->lt_workspace_bytes, s));
        if (conc && i) cudaCheck(cudaEventRecord(c->ev_join[i - 1], s));
    }
    for (int i = 1; conc && i < n; i++) cudaCheck(cudaStreamWaitEvent(c->stream, c->ev_join[i - 1], 0));
    if (conc) c->mm_conc_uses++;
}

/* matmul_multi's GEMMs side by side (above). 0: done; -1: declined, nothing launched. */
int cuda_mm_conc(backend_t *be, int n, float *const *y, const float *x, int T, const weight_t *const *wt) {
    cuda_impl_t *c = cuda_impl(be);
    if (n < 2 || c->mm_conc_min_t <= 0 || T < c->mm_conc_min_t || !lt_single_ok(be, n, wt, T)) return -1;
    cuda_x16_multi(c, 1);
    lt_run(c, n, y, x16_of(c, x, (size_t)T * ((const dweight_t *)wt[0]->device)->cols), T, wt, 0.f);
    cuda_x16_multi(c, 0);
    return 0;
}

/* backend.h matmul_add at prefill sizes: the GEMM with beta = 1 (above). 0: done; -1: declined. */
int cuda_lt_matmul_add(backend_t *be, float *y, const float *x, int T, const weight_t *w) {
    cuda_impl_t *c = cuda_impl(be);
    if (cuda_qd_matmul_add(c, y, x, T, (const dweight_t *)w->device) == 0) return 0; /* MLX weights (matmul_dequant.cu) */
    if (!lt_fuse_on() || !lt_single_ok(be, 1, &w, T)) return -1;
    lt_run(c, 1, &y, x16_of(c, x, (size_t)T * ((const dweight_t *)w->device)->cols), T, &w, 1.f);
    c->lt_fused_uses++;
    return 0;
}

/* bf16(rms_norm(x)) for a fused op's GEMMs, into the act16 scratch (nothing else in the op uses
 * it); NULL where the norm kernel does not take the shape */
static const void *lt_norm16(cuda_impl_t *c, const float *x, const float *nw, float off, float eps, int T, int K) {
    __nv_bfloat16 *h16 = (__nv_bfloat16 *)cuda_scratch(c, &c->act16, &c->act16_bytes, (size_t)T * K * 2);
    return cuda_rms_norm_bf16(c, h16, x, nw, off, T, K, eps) ? NULL : h16;
}

/* backend.h rms_matmul_multi at prefill sizes (above). 0: done; -1: declined, nothing launched. */
int cuda_lt_rms_matmul_multi(backend_t *be, int n, float *const *y, const float *x, const float *nw, float off, float eps, int T,
                             const weight_t *const *wt) {
    cuda_impl_t *c = cuda_impl(be);
    if (n >= 1 && n <= 4) { /* MLX weights (matmul_dequant.cu) */
        const dweight_t *dw[4];
        for (int i = 0; i < n; i++) dw[i] = (const dweight_t *)wt[i]->device;
        if (cuda_qd_rms_matmul_multi(c, n, y, x, nw, off, eps, T, dw) == 0) return 0;
    }
    if (!lt_fuse_on() || !lt_single_ok(be, n, wt, T)) return -1;
    const void *h16 = lt_norm16(c, x, nw, off, eps, T, ((const dweight_t *)wt[0]->device)->cols);
    if (!h16) return -1;
    lt_run(c, n, y, h16, T, wt, 0.f);
    c->lt_fused_uses++;
    return 0;
}

/* rms_matmul_glu's and rms_mlp's first half: bf16(rms_norm(x)), then gate into g and up into u.
 * 0: done; -1: the norm does not take the shape (nothing launched). */
static int lt_norm_gate_up(cuda_impl_t *c, float *g, float *u, const float *x, const float *nw, float off, float eps, int T,
                           const weight_t *const *wt) {
    const void *h16 = lt_norm16(c, x, nw, off, eps, T, ((const dweight_t *)wt[0]->device)->cols);
    if (!h16) return -1;
    float *const gu[2] = {g, u};
    lt_run(c, 2, gu, h16, T, wt, 0.f);
    return 0;
}

/* backend.h rms_matmul_glu at prefill sizes: gate into y, up into a scratch (the split path's
 * ysplit: that path never runs with x rounded once), then the GLU op in place — y's bf16 copy
 * where x16.cuh asks for one (the down projection's x). 0: done; -1: declined. */
void cuda_glu(backend_t *be, float *y, const float *g, const float *u, size_t n, act_t act);
int cuda_lt_rms_matmul_glu(backend_t *be, float *y, const float *x, const float *nw, float off, float eps, int T, const weight_t *wg,
                           const weight_t *wu, act_t act) {
    cuda_impl_t *c = cuda_impl(be);
    const weight_t *const wt[2] = {wg, wu};
    const dweight_t *dg = (const dweight_t *)wg->device, *du = (const dweight_t *)wu->device;
    if (!lt_fuse_on() || dg->rows != du->rows || !lt_single_ok(be, 2, wt, T)) return -1;
    const size_t ny = (size_t)T * dg->rows;
    float *u = (float *)cuda_scratch(c, &c->ysplit, &c->ysplit_bytes, ny * 4);
    if (lt_norm_gate_up(c, y, u, x, nw, off, eps, T, wt)) return -1;
    cuda_glu(be, y, y, u, ny, act);
    c->lt_fused_uses++;
    return 0;
}

/* backend.h rms_mlp at prefill sizes: the norm's bf16(h), gate and up into scratches, the GLU into
 * bf16 only (the f32 g the separate ops write is read by nothing but the down projection, which
 * reads its bf16 copy: 25 MB a qwen3-0.6b layer at 2048 tokens not written), down with beta = 1
 * on x. Bitwise rms_norm + matmul_glu + matmul_add (test_lt_fused). 0: done; -1: declined. */
void cuda_glu_bf16(cuda_impl_t *c, __nv_bfloat16 *y16, const float *g, const float *u, size_t n, act_t act);
int cuda_lt_rms_mlp(backend_t *be, float *x, const float *nw, float off, float eps, int T, const weight_t *wg, const weight_t *wu,
                    const weight_t *wd, act_t act) {
    cuda_impl_t *c = cuda_impl(be);
    const weight_t *const wt[2] = {wg, wu};
    const dweight_t *dg = (const dweight_t *)wg->device, *du = (const dweight_t *)wu->device, *dd = (const dweight_t *)wd->device;
    if (cuda_qd_rms_mlp(c, x, nw, off, eps, T, dg, du, dd, act) == 0) return 0; /* MLX weights (matmul_dequant.cu) */
    if (!lt_fuse_on() || dg->rows != du->rows || dd->cols != dg->rows || dd->rows != dg->cols || !lt_single_ok(be, 2, wt, T) ||
        !lt_single_ok(be, 1, &wd, T))
        return -1;
    const size_t ng = (size_t)T * dg->rows;
    if (ng % 4) return -1;
    /* gate and up in one buffer, in the weights' address order: lt_batch2 runs them as one launch */
    float *gu0 = (float *)cuda_scratch(c, &c->mlp_gu, &c->mlp_gu_bytes, 2 * ng * 4);
    const bool up_after = (uintptr_t)du->data > (uintptr_t)dg->data;
    float *g = up_after ? gu0 : gu0 + ng, *u = up_after ? gu0 + ng : gu0;
    __nv_bfloat16 *g16 = (__nv_bfloat16 *)cuda_scratch(c, &c->mlp16, &c->mlp16_bytes, ng * 2);
    if (lt_norm_gate_up(c, g, u, x, nw, off, eps, T, wt)) return -1;
    cuda_glu_bf16(c, g16, g, u, ng, act);
    lt_run(c, 1, &x, g16, T, &wd, 1.f);
    c->lt_fused_uses++;
    return 0;
}

extern "C" long cuda_mm_conc_uses(const backend_t *be) { return ((const cuda_impl_t *)be->impl)->mm_conc_uses; }
extern "C" long cuda_lt_fused_uses(const backend_t *be) { return ((const cuda_impl_t *)be->impl)->lt_fused_uses; }

/* matmul_multi: one x times n weights. One token of MLX 4/8-bit weights that share K, bits,
 * group and scale dtype (q/k/v, gate/up) on "cuda": one launch of the tensor-core GEMV over
 * all their row tiles (each row computed exactly as in a launch of its own weight); anything
 * else: the matmuls one by one. KILN_CUDA_MULTI=0: always one by one (A/B). */
void cuda_matmul_multi(backend_t *be, int n, float *const *y, const float *x, int T, const weight_t *const *wt) {
    cuda_impl_t *c = cuda_impl(be);
    static int off = -1;
    if (off < 0) off = getenv("KILN_CUDA_MULTI") && !strcmp(getenv("KILN_CUDA_MULTI"), "0");
    if (!off && tc_takes_t(c, T) && n >= 1 && n <= 4) {
        const dweight_t *w[4];
        for (int i = 0; i < n; i++) w[i] = (const dweight_t *)wt[i]->device;
        if (cuda_gemv_tc(c, n, y, x, T, w) == 0) {
            cuda_capture_tick(c);
            return;
        }
    }
    /* MLX 4/8-bit at 2..64 tokens on matmul_wgmma.cu (as cuda_matmul would take it): x converted
     * once for all n, each y bitwise its own matmul's — not at the 2..4 tokens where one of the
     * weights would take the tensor-core GEMV alone (a set the launch above declined: mixed bits or
     * groups; one by one below, each y its own matmul's) */
    if (!off && n >= 2 && n <= 4 && c->qmma && T >= c->qmma && T <= qwg_max_t(c) && c->act_bf16 != 1) {
        const dweight_t *w[4];
        int whole = 1;
        for (int i = 0; i < n; i++) {
            w[i] = (const dweight_t *)wt[i]->device;
            whole = whole && !qdc_takes(c, w[i], T) && !tc_takes(c, w[i], T);
        }
        if (whole && cuda_qwg_multi(c, n, y, x, T, w) == 0) {
            cuda_capture_tick(c);
            return;
        }
    }
    /* bf16/f16 weights of one K on the GEMV (1..2 tokens): one launch of the pipelined GEMV over
     * all their rows, each weight with its own launch's configuration (matmul_gemv.cu) */
    if (!off && n >= 2 && n <= 4 && T <= 2 && T < c->gemm_min_t) {
        const dweight_t *w[4];
        int ok = 1;
        for (int i = 0; i < n; i++) {
            w[i] = (const dweight_t *)wt[i]->device;
            if (w[i]->dtype == DT_BF16 && T >= c->gemm_min_t_bf16) ok = 0;
        }
        if (ok && cuda_gemv_multi(c, n, y, x, T, w) == 0) {
            cuda_capture_tick(c);
            return;
        }
    }
    /* bf16 weights of one K at 3..64 tokens: one launch of matmul_bfmma.cu over all of them (each
     * y bitwise its own matmul's) */
    if (!off && n >= 2 && n <= 4 && T >= c->gemm_min_t_bf16) {
        const dweight_t *w[4];
        for (int i = 0; i < n; i++) w[i] = (const dweight_t *)wt[i]->device;
        const int single = c->act_bf16 >= 0 ? c->act_bf16 : be->act_bf16_ok;
        if (cuda_bfmma(c, n, y, x, T, w, !single, 0, 0) == 0) {
            cuda_capture_tick(c);
            return;
        }
    }
    /* MLX weights past 64 (128) tokens up to 128–256 in runs (cuda_qwg_slices; the first weight's size picks
     * the cap): each run as above */
    int b[QWG_MAX_SLICES + 1];
    int ns = !off && n >= 2 && n <= 4 ? cuda_qwg_slices(c, T, (const dweight_t *)wt[0]->device, b) : 0;
    for (int i = 0; i < n && ns; i++)
        if (((const dweight_t *)wt[i]->device)->dtype != DT_U32 || wt[i]->cols != wt[0]->cols) ns = 0;
    if (ns) {
        for (int s = 0; s < ns; s++) {
            float *ys[4];
            for (int i = 0; i < n; i++) ys[i] = y[i] + (size_t)b[s] * wt[i]->rows;
            cuda_matmul_multi(be, n, ys, x + (size_t)b[s] * wt[0]->cols, b[s + 1] - b[s], wt);
        }
        return;
    }
    /* MLX weights past qmma where cuda_matmul would take the f16 dequantization (not forced to
     * bf16, no qgemm): x scanned and converted once for all n (matmul_dequant.cu; each y bitwise
     * its own matmul's) */
    const char *qg = getenv("KILN_CUDA_QGEMM");
    if (!off && n >= 2 && n <= 4 && T >= c->gemm_min_t && (c->qmma == 0 || T > c->qmma_max_t) &&
        !(c->deq_bf16 == 1 || (c->deq_bf16 < 0 && c->act_bf16 == 1)) && !(qg && atoi(qg) > 0)) {
        const dweight_t *w[4];
        for (int i = 0; i < n; i++) w[i] = (const dweight_t *)wt[i]->device;
        if (cuda_qdeq_f16_multi(c, n, y, x, T, w) == 0) {
            cuda_capture_tick(c);
            return;
        }
    }
    /* bf16 weights at prefill sizes, x rounded once: the GEMMs side by side */
    if (!off && n >= 2 && n <= 4 && cuda_mm_conc(be, n, y, x, T, wt) == 0) return;
    /* one by one; x16.cuh: where the first converts x to bf16 the others take that copy */
    cuda_x16_multi(c, 1);
    for (int i = 0; i < n; i++) cuda_matmul(be, y[i], x, T, wt[i]);
    cuda_x16_multi(c, 0);
}
