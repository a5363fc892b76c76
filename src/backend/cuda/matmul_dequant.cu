/* matmul_dequant.cu — MLX affine weights (any bit width) past qmma's sizes (prefill): the
 * weight dequantized to f16 and x converted to f16, each scaled by a power of two, one cuBLASLt
 * f16 × f16 → f32 GEMM at the bf16 tensor rate; y scaled back by the GEMM's alpha (a device
 * pointer). The default for these matmuls (KILN_CUDA_QDEQ=tf32 or f32: the TF32 path of
 * matmul.cu; =bf16: its bf16 dequantization for 4/8 bits).
 *
 *   qd_scan_kernel    QD_NP blocks: max|x| over the whole [T, K] matrix and the weight's bound
 *                     B = max over groups of |scale|·(2^bits − 1) + |bias| (≥ every |w|), one
 *                     partial maximum of each per block; B's partials are computed once per weight
 *                     and kept with it (qd_wbound), so a prefill matmul's scan reads x only and
 *                     matmul_multi's later weights (k, v, up) launch none — ncu, a 2-layer llama-3-8b
 *                     q4 2048-token prefill: scans 163 → 123 µs, 58 → 52 launches
 *   qd_convert_kernel every block first reduces the partials: x is scaled by 2^e, W by 2^s, so
 *                     max|x|·2^e and B·2^s lie in [2^14, 2^15) (f16's largest is 65504); then
 *                     the codes (a thread per 32-bit word for 4/8 bits, per element otherwise:
 *                     KILN_CUDA_DEQUANT=old takes that for 4/8 too, bitwise equal) become
 *                     f16(fma(scale·2^s, code, bias·2^s)) and x becomes f16(x·2^e); block 0
 *                     writes alpha = 2^-(e+s), beta = 0
 *   qd_convert_multi_kernel  (the default for 4/8 bits, session 32: qd_one) the same values for up to
 *                     three weights of one x in one launch: each kept bound was reduced to its
 *                     maximum once (qd_max_kernel), so a block reduces x's QD_NP partials only;
 *                     the word's row and column by increments, a code to f32 by OR + subtract (no
 *                     64-bit division, no I2F); then one GEMM per weight. qwen3-0.6b q4 had 7
 *                     convert launches a layer of ~10 µs each, now 4. Session 42: each word's row
 *                     by a division magic from the host, 32-bit indices, the scale type a template
 *                     parameter (qd_words_lean; KILN_CUDA_QDEQ_LEAN=0: qd_words) — the same bits
 *
 * Numerics (docs/cuda.md): with u = 2^-11 (f16: 10 stored mantissa bits, the same as TF32),
 * |ŵ − w| ≤ u·|w| + 2^-24|w| (the fma) + 2^-39·B (f16's subnormal half-spacing 2^-25, scaled
 * back) and |x̂ − x| ≤ u·|x| + 2^-39·max|x|; the products are exact in f32 and the scaling by
 * powers of two is exact, so |ŷ − y| ≤ (2u + u²)·Σ|w·x| + 2^-39·(B·Σ|x| + max|x|·Σ|w|) + the
 * GEMM's f32 accumulation. That is TF32's bound (which rounds both operands to the same 10
 * bits, per element, without the tiny absolute terms): x with a wide dynamic range costs
 * nothing unless a token's whole row sits ~2^25 below the matrix's max.
 * Declines (returns -1, the caller takes TF32) when x is not 16-byte aligned.
 * At the bottom, the fused prefill ops on this path (session 41): producers that write the GEMMs' f16
 * x themselves — the norm with a bound known in advance, the GLU scaled per row — and o's residual add
 * in its GEMM's epilogue; session 42: o's x as the tensor-core attention's unscaled f16 output over an
 * f16 cache (|x̂ − x| ≤ u·|x| + 2^-25: the bound above with 2^-25·Σ|w| for the scaled term of x), gate
 * and up as one batched GEMM. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/wgx.cuh"
#include "backend/cuda/x16.cuh"

void cuda_lt_matmul_dev(cuda_impl_t *c, float *y, const void *W, const void *X, int T, int N, int K, cudaDataType_t type,
                        const float *alpha_beta);

/* blocks of the scan kernel = partial maxima per quantity: one full wave of 256-thread blocks on
 * an H200 (256 blocks read x at ~1.8 TB/s: 65 us for llama-3-8b's down_proj input, ncu) */
#define QD_NP 1024

__device__ __forceinline__ float qd_amax4(float4 v) { return fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))); }

/* max over the 256 threads of a block, returned to every thread */
__device__ __forceinline__ float qd_block_max(float v, float *sh) {
#pragma unroll
    for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads(); /* sh may still be read from a previous call */
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    v = sh[threadIdx.x & 7];
#pragma unroll
    for (int o = 4; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* xpart (NULL: x not scanned) and wpart (NULL: the weight's bound is cached, below) get one partial
 * maximum per block. x is read four float4s a thread at a time (the loads issued before the maxima:
 * with one load in flight a thread, the scan read x at ~1.8 TB/s); a maximum is exact in any order. */
__global__ void __launch_bounds__(256) qd_scan_kernel(float *xpart, float *wpart, const float4 *x, size_t n4, dweight_t w) {
    __shared__ float sh[8];
    float xm = 0.f, wm = 0.f;
    const size_t st = (size_t)gridDim.x * blockDim.x;
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (; i + 3 * st < n4; i += 4 * st) {
        const float4 a = x[i], b = x[i + st], c = x[i + 2 * st], d = x[i + 3 * st];
        xm = fmaxf(xm, fmaxf(fmaxf(qd_amax4(a), qd_amax4(b)), fmaxf(qd_amax4(c), qd_amax4(d))));
    }
    for (; i < n4; i += st) xm = fmaxf(xm, qd_amax4(x[i]));
    if (wpart) {
        const size_t ng = (size_t)w.rows * (w.cols / w.group);
        const float cmax = (float)((1u << w.bits) - 1);
        for (size_t g = blockIdx.x * (size_t)blockDim.x + threadIdx.x; g < ng; g += st)
            wm = fmaxf(wm, fabsf(ld_f(w.scales, w.sb_dtype, g)) * cmax + fabsf(ld_f(w.biases, w.sb_dtype, g)));
    }
    xm = qd_block_max(xm, sh);
    wm = qd_block_max(wm, sh);
    if (threadIdx.x == 0) {
        if (xpart) xpart[blockIdx.x] = xm; /* NULL: x's partials stay those of the matmul before (matmul_multi) */
        if (wpart) wpart[blockIdx.x] = wm;
    }
}

/* p[QD_NP] = the maximum of p[0 .. QD_NP - 1] (one block: a weight's kept bound, once) */
__global__ void __launch_bounds__(256) qd_max_kernel(float *p) {
    __shared__ float sh[8];
    float m = 0.f;
#pragma unroll
    for (int j = 0; j < QD_NP / 256; j++) m = fmaxf(m, p[threadIdx.x + 256 * j]);
    m = qd_block_max(m, sh);
    if (threadIdx.x == 0) p[QD_NP] = m;
}

/* the exponent e with m·2^e in [2^14, 2^15) and 2^e: wgx.cuh's wg_exp / wg_pow2 (within ±60, so that 2^-(e+s)
 * stays a normal f32) — one definition for this path, the 64-token kernels and the fused ops' producers, whose
 * exponents meet in one alpha */

/* x's float4s of the grid-stride walk to f16, scaled by px = 2^e (exact): f16(x·2^e) */
__device__ __forceinline__ void qd_x_store(__half *xout, const float4 *x, float px, size_t n4, size_t i0, size_t stride) {
    for (size_t i = i0; i < n4; i += stride) {
        const float4 v = x[i];
        __align__(8) __half2 h[2] = {__floats2half2_rn(v.x * px, v.y * px), __floats2half2_rn(v.z * px, v.w * px)};
        ((uint2 *)xout)[i] = *(const uint2 *)h;
    }
}

/* a word's codes → 16-byte (q4) / 8-byte (q8) f16 run: f16(fma(sc, code, bi)), the code made f32 as the
 * bits of 2^23 + code less 2^23 (exact) */
template <int BITS>
__device__ __forceinline__ void qd_word_store(__half *wout, size_t i, uint32_t word, float sc, float bi) {
    constexpr int CPW = 32 / BITS;
    __align__(16) __half2 v[CPW / 2];
#pragma unroll
    for (int j = 0; j < CPW / 2; j++) {
        const float c0 = __int_as_float(0x4B000000u | ((word >> (BITS * 2 * j)) & ((1u << BITS) - 1))) - 8388608.f;
        const float c1 = __int_as_float(0x4B000000u | ((word >> (BITS * (2 * j + 1))) & ((1u << BITS) - 1))) - 8388608.f;
        v[j] = __floats2half2_rn(__fmaf_rn(sc, c0, bi), __fmaf_rn(sc, c1, bi));
    }
    if (CPW == 8) ((uint4 *)wout)[i] = *(const uint4 *)v;
    else ((uint2 *)wout)[i] = *(const uint2 *)v;
}

/* A thread's words of one weight on the grid-stride walk (i0, i0 + stride, ...), each through
 * qd_word_store: the word's row and column kept by increments (one division a thread, not a 64-bit
 * division and a 32-bit one a word), the group by a shift (groups of 2^k whole words), the code made
 * f32 by an OR and an exact subtraction (no quarter-rate I2F) — the same sc, bi and code values into
 * the same fma as wword's walk, so the same bits. */
template <int BITS>
__device__ __forceinline__ void qd_words(const dweight_t &w, __half *wout, float pw, size_t i0, size_t stride) {
    constexpr int CPW = 32 / BITS;
    const int ng = w.cols / w.group, wpr = w.cols / CPW, lgw = __ffs(w.group / CPW) - 1; /* words a row, log2 words a group */
    const size_t nw = (size_t)w.rows * wpr, sq = stride / wpr;
    const int sr = (int)(stride % wpr);
    size_t r = i0 / wpr;
    int c = (int)(i0 % wpr);
    for (size_t i = i0; i < nw; i += stride) {
        const size_t gi = r * ng + (c >> lgw);
        qd_word_store<BITS>(wout, i, __ldg((const uint32_t *)w.data + i), ld_f(w.scales, w.sb_dtype, gi) * pw,
                            ld_f(w.biases, w.sb_dtype, gi) * pw);
        c += sr;
        r += sq;
        if (c >= wpr) { c -= wpr; r++; }
    }
}

/* BITS = 4 / 8: a thread per code word (8 / 4 codes, one group); BITS = 0: per element, any bit
 * width (the arithmetic of wload, with the scale and bias pre-scaled by 2^s). Bound by its f16 writes
 * (2 bytes a parameter): four words loaded at once a thread — consecutive (one 16-byte load, a warp's
 * stores 64 bytes apart) or of the grid-stride walk — measured slower at 4 bits (ncu 704 → 824–849 µs a
 * 2-layer llama-3-8b prefill, bench/cuda/RESULTS.md session 29) and are not kept. */
template <int BITS, int INC>
__global__ void __launch_bounds__(256) qd_convert_kernel(__half *wout, __half *xout, float *ab, const float *xpart, const float *wpart,
                                                         dweight_t w, const float4 *x, size_t n4) {
    __shared__ float sh[8];
    float xm = 0.f, wm = 0.f;
    for (int i = threadIdx.x; i < QD_NP; i += blockDim.x) { xm = fmaxf(xm, xpart[i]); wm = fmaxf(wm, wpart[i]); }
    xm = qd_block_max(xm, sh);
    wm = qd_block_max(wm, sh);
    const int e = wg_exp(xm), s = wg_exp(wm);
    if (blockIdx.x == 0 && threadIdx.x == 0) { ab[0] = wg_pow2(-(e + s)); ab[1] = 0.f; }
    const float px = wg_pow2(e), pw = wg_pow2(s);
    const int ng = w.cols / w.group;
    const size_t stride = (size_t)gridDim.x * blockDim.x, i0 = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if constexpr ((BITS == 4 || BITS == 8) && INC) {
        qd_words<BITS>(w, wout, pw, i0, stride); /* INC: qd_words' increments (KILN_CUDA_DEQUANT=div: the divisions below) */
    } else if constexpr (BITS == 4 || BITS == 8) {
        constexpr int CPW = 32 / BITS;
        const size_t wpr = (size_t)w.cols / CPW, nw = (size_t)w.rows * wpr;
        for (size_t i = i0; i < nw; i += stride) {
            float sc, bi;
            const uint32_t word = wword<CPW>(w, i, wpr, ng, pw, sc, bi);
            __align__(16) __half2 v[CPW / 2];
#pragma unroll
            for (int j = 0; j < CPW / 2; j++)
                v[j] = __floats2half2_rn(__fmaf_rn(sc, (float)((word >> (BITS * 2 * j)) & ((1u << BITS) - 1)), bi),
                                         __fmaf_rn(sc, (float)((word >> (BITS * (2 * j + 1))) & ((1u << BITS) - 1)), bi));
            if (CPW == 8) ((uint4 *)wout)[i] = *(const uint4 *)v;
            else ((uint2 *)wout)[i] = *(const uint2 *)v;
        }
    } else {
        const size_t nw = (size_t)w.rows * w.cols;
        for (size_t i = i0; i < nw; i += stride) {
            const size_t r = i / w.cols;
            const int col = (int)(i % w.cols);
            const uint32_t code = wcode(w, r, col);
            const size_t gi = r * ng + col / w.group;
            const float sc = ld_f(w.scales, w.sb_dtype, gi) * pw, bi = ld_f(w.biases, w.sb_dtype, gi) * pw;
            wout[i] = __float2half_rn(__fmaf_rn(sc, (float)code, bi));
        }
    }
    qd_x_store(xout, x, px, n4, i0, stride);
}

/* One launch for up to QD_MAXW weights of one x (q/k/v, gate/up; or one weight): each weight's bound was
 * reduced to one maximum when it was first kept, so a block reduces only x's QD_NP partials (not 2 × QD_NP
 * a weight), converts every weight (word by word as qd_convert_kernel<BITS, 1>) and x once. Each weight
 * keeps its own 2^s and alpha, the same values and per-element arithmetic: every y bitwise what its own
 * matmul gives. qwen3-0.6b q4 prefill ran 7 convert launches a layer of ~10 µs each (a 2-6 MB job behind
 * a 2-KB reduction and a launch), now 4. Measured and not kept (session 32): U = 2 / 4 words a thread with
 * their loads first (llama-3-8b q4 convert 543 → 716 / 753 µs, 2 layers), the scan's last block reducing
 * x's partials for the convert (a ticket: +2 µs a scan, qwen3-0.6b prefill −1.5 %), 264 / 512 scan blocks. */
#define QD_MAXW 3
struct qd_multi {
    dweight_t w[QD_MAXW];
    __half *wout[QD_MAXW];
    const float *wmax[QD_MAXW]; /* each weight's bound (its kept partials' maximum) */
    int n;
    /* x's exponent: QDX_SCAN from the scan's partials (x converted here), QDX_GIVEN *xe (x16 written by its
     * producer: the norm of the fused ops), QDX_ROWS 0 (x16 scaled per row by its producer, the rows scaled
     * back after the GEMM: the GLU of qd rms_mlp) */
    int xmode;
    const int *xe;
    float beta; /* each GEMM's beta (1: y += x·Wᵀ, matmul_add) */
    /* qd_words_lean's walk, from the host (qd_walk_fill): words, words a row and its division magic, groups a row,
     * log2 words a group; lean = 0: some weight has 2^30 words or more — qd_words for all */
    uint32_t nw[QD_MAXW], wpr[QD_MAXW], dm[QD_MAXW];
    int dl[QD_MAXW], ng[QD_MAXW], lgw[QD_MAXW], lean;
};
#define QDX_SCAN 0
#define QDX_GIVEN 1
#define QDX_ROWS 2

/* qd_words without its per-thread setup (session 42): ncu had qd_convert_multi_kernel issue-bound (SM busy 53 %,
 * IPC 2.97 of 4, DRAM 6 %, H100) at ~200 instructions a code word — a thread walks only ~1.5 words of a weight
 * at qwen3-0.6b's sizes, so qd_words' per-weight divisions (row and column of its first word, of the stride:
 * 32-bit divisions behind 64-bit guards), 64-bit indices and the scale type's switch inside the loop cost more
 * than the codes. Here: 32-bit indices (nw < 2^30, checked on the host), the row by the host's division magic
 * (q = (umulhi(i, dm) + i) >> dl, exact for i < 2^31 and any divisor: Granlund–Montgomery's round-up form),
 * the scale type a template parameter. The same word, scale, bias and fma as qd_words: the same bits. */
template <int BITS, int SBT>
__device__ __forceinline__ void qd_words_lean(const dweight_t &w, const qd_multi &m, int k, __half *wout, float pw, uint32_t i0,
                                              uint32_t stride) {
    const uint32_t nw = m.nw[k], wpr = m.wpr[k], dm = m.dm[k];
    const int dl = m.dl[k], ng = m.ng[k], lgw = m.lgw[k];
    const uint32_t *data = (const uint32_t *)w.data;
    for (uint32_t i = i0; i < nw; i += stride) {
        const uint32_t r = (__umulhi(i, dm) + i) >> dl, cw = i - r * wpr, gi = r * ng + (cw >> lgw);
        float sc, bi;
        if constexpr (SBT == DT_F32) { sc = ((const float *)w.scales)[gi]; bi = ((const float *)w.biases)[gi]; }
        else if constexpr (SBT == DT_F16) { sc = __half2float(((const __half *)w.scales)[gi]); bi = __half2float(((const __half *)w.biases)[gi]); }
        else { sc = __bfloat162float(((const __nv_bfloat16 *)w.scales)[gi]); bi = __bfloat162float(((const __nv_bfloat16 *)w.biases)[gi]); }
        qd_word_store<BITS>(wout, i, __ldg(data + i), sc * pw, bi * pw);
    }
}

template <int BITS>
__global__ void __launch_bounds__(256) qd_convert_multi_kernel(qd_multi m, __half *xout, float *ab, const float *xpart, const float4 *x, size_t n4) {
    __shared__ float sh[8];
    int e = 0;
    if (m.xmode == QDX_SCAN) { /* x's maximum from the scan's QD_NP partials (a weight's bound was reduced once when it was kept) */
        float xm = 0.f;
#pragma unroll
        for (int j = 0; j < QD_NP / 256; j++) xm = fmaxf(xm, xpart[threadIdx.x + 256 * j]);
        xm = qd_block_max(xm, sh);
        e = wg_exp(xm);
    } else if (m.xmode == QDX_GIVEN) e = *m.xe;
    const float px = wg_pow2(e);
    const size_t stride = (size_t)gridDim.x * blockDim.x, i0 = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
#pragma unroll 1
    for (int k = 0; k < m.n; k++) {
        const dweight_t w = m.w[k];
        const int s = wg_exp(*m.wmax[k]);
        if (i0 == 0) { ab[2 * k] = wg_pow2(-(e + s)); ab[2 * k + 1] = m.beta; }
        if (!m.wout[k]) continue; /* NULL: kept from an earlier prefill (qd_keep) */
        if (!m.lean) qd_words<BITS>(w, m.wout[k], wg_pow2(s), i0, stride);
        else if (w.sb_dtype == DT_F32) qd_words_lean<BITS, DT_F32>(w, m, k, m.wout[k], wg_pow2(s), (uint32_t)i0, (uint32_t)stride);
        else if (w.sb_dtype == DT_F16) qd_words_lean<BITS, DT_F16>(w, m, k, m.wout[k], wg_pow2(s), (uint32_t)i0, (uint32_t)stride);
        else qd_words_lean<BITS, DT_BF16>(w, m, k, m.wout[k], wg_pow2(s), (uint32_t)i0, (uint32_t)stride);
    }
    qd_x_store(xout, x, px, n4, i0, stride);
}

/* Whether this path is on: KILN_CUDA_QDEQ unset or f16 (tf32 / f32 / bf16: matmul.cu's paths),
 * read per matmul like KILN_CUDA_DEQUANT (tests switch it between calls). */
static int qdeq_f16_on(void) {
    const char *e = getenv("KILN_CUDA_QDEQ");
    return !e || !*e || !strcmp(e, "f16");
}

/* The weight's bound partials (qd_scan_kernel's wpart): computed at the weight's first prefill matmul
 * into a QD_NP-float device array it keeps (freed with it: cuda_backend.cu), since scales and biases
 * never change — later scans read x only, and matmul_multi's second and later weights launch no scan
 * at all. NULL while a graph is captured (the allocation stays out of captures; the caller then scans
 * the weight as before: the same partials). */
static float *qd_wbound(cuda_impl_t *c, const dweight_t *w) {
    if (w->qd_wpart) return w->qd_wpart;
    if (c->capturing) return NULL;
    float *p = NULL;
    cudaCheck(cudaMalloc((void **)&p, (QD_NP + 1) * sizeof(float)));
    qd_scan_kernel<<<QD_NP, 256, 0, c->stream>>>(NULL, p, NULL, 0, *w);
    cudaLaunchCheck();
    qd_max_kernel<<<1, 256, 0, c->stream>>>(p);
    cudaLaunchCheck();
    ((dweight_t *)w)->qd_wpart = p;
    return p;
}

/* The convert kernels' grid: enough 256-thread blocks for `units` (code words or x's float4s, whichever
 * is more), at most 8 an SM (a full wave; each thread then walks several); KILN_CUDA_QDEQ_GRID=N fewer
 * (tests: threads that walk several words). */
static int qd_grid(const cuda_impl_t *c, size_t units) {
    const size_t cap = (size_t)(c->sm_count > 0 ? c->sm_count : 132) * 8;
    int grid = (int)(units / 256 + 1 < cap ? units / 256 + 1 : cap);
    const char *gc = getenv("KILN_CUDA_QDEQ_GRID");
    if (gc && atoi(gc) > 0 && atoi(gc) < grid) grid = atoi(gc);
    return grid;
}
/* qd_words walks this weight: 4/8-bit codes, groups of 2^k columns that are whole words (every MLX group
 * size: 32, 64, 128) */
static int qd_words_ok(const dweight_t *w) {
    return (w->bits == 4 || w->bits == 8) && (w->group & (w->group - 1)) == 0 && w->group % (32 / w->bits) == 0;
}

/* qd_one_ex takes these n weights: the one-launch path on (KILN_CUDA_QDEQ_ONE, KILN_CUDA_DEQUANT unset), at
 * most QD_MAXW weights of one bit width that qd_words walks (the fused ops ask first: qd_fused_ok) */
static int qd_one_ok(int n, const dweight_t *const *w) {
    const char *one = getenv("KILN_CUDA_QDEQ_ONE"), *dq = getenv("KILN_CUDA_DEQUANT");
    if ((one && *one == '0') || (dq && *dq) || n < 1 || n > QD_MAXW) return 0;
    for (int i = 0; i < n; i++)
        if (w[i]->bits != w[0]->bits || !qd_words_ok(w[i])) return 0;
    return 1;
}

/* qd_words_lean's constants for m's weights (after m.w and m.n): words a row wpr and its magic (dm, dl) with
 * i / wpr = (umulhi(i, dm) + i) >> dl for every i < 2^31 — dl = ceil(log2 wpr), dm = 2^32·(2^dl − wpr) / wpr + 1
 * (checked exhaustively below 2^22 and on 2·10^7 random i < 2^31 for 21 divisors, session 42); lean only where
 * every weight has fewer than 2^30 words (i + stride then stays under 2^31) */
static void qd_walk_fill(qd_multi *m, int bits) {
    const int cpw = 32 / bits;
    const char *le = getenv("KILN_CUDA_QDEQ_LEAN");
    m->lean = le ? atoi(le) != 0 : 1;
    for (int k = 0; k < m->n; k++) {
        const dweight_t *w = &m->w[k];
        const uint64_t nw = (uint64_t)w->rows * (w->cols / cpw);
        const uint32_t wpr = (uint32_t)(w->cols / cpw);
        int dl = 0;
        while ((1ull << dl) < wpr) dl++;
        m->nw[k] = (uint32_t)nw;
        m->wpr[k] = wpr;
        m->dl[k] = dl;
        m->dm[k] = (uint32_t)((((1ull << dl) - wpr) << 32) / wpr + 1);
        m->ng[k] = w->cols / w->group;
        m->lgw[k] = __builtin_ctz((unsigned)(w->group / cpw));
        if (nw >= (1ull << 30)) m->lean = 0;
    }
}

/* One matmul; with_x = 0: x16 and x's partial maxima are those the previous call left (the same
 * x, matmul_multi), only the weight is dequantized. */
static void qd_run(cuda_impl_t *c, float *y, const float *x, int T, const dweight_t *w, int with_x) {
    const size_t nx = (size_t)T * w->cols, nw = (size_t)w->rows * w->cols, n4 = with_x ? nx / 4 : 0;
    const size_t xbytes = (nx * 2 + 255) / 256 * 256;
    __half *wd = (__half *)cuda_scratch(c, &c->wdeq, &c->wdeq_bytes, nw * 2);
    char *a16 = (char *)c->act16;
    if (with_x) a16 = (char *)cuda_scratch(c, &c->act16, &c->act16_bytes, xbytes + (2 * QD_NP + 2) * sizeof(float));
    __half *x16 = (__half *)a16;
    float *part = (float *)(a16 + xbytes), *ab = part + 2 * QD_NP;
    const float *wpart = qd_wbound(c, w);
    if (with_x || !wpart) {
        qd_scan_kernel<<<QD_NP, 256, 0, c->stream>>>(with_x ? part : NULL, wpart ? NULL : part + QD_NP, (const float4 *)x, n4, *w);
        cudaLaunchCheck();
    }
    if (!wpart) wpart = part + QD_NP;
    const size_t wunits = w->bits == 4 ? nw / 8 : w->bits == 8 ? nw / 4 : nw;
    const int grid = qd_grid(c, wunits > n4 ? wunits : n4);
    const char *dq = getenv("KILN_CUDA_DEQUANT");
    const int old = dq && !strcmp(dq, "old"), inc = !(dq && !strcmp(dq, "div")) && qd_words_ok(w);
    const float4 *x4 = (const float4 *)x;
    if (!old && w->bits == 4 && inc) qd_convert_kernel<4, 1><<<grid, 256, 0, c->stream>>>(wd, x16, ab, part, wpart, *w, x4, n4);
    else if (!old && w->bits == 4) qd_convert_kernel<4, 0><<<grid, 256, 0, c->stream>>>(wd, x16, ab, part, wpart, *w, x4, n4);
    else if (!old && w->bits == 8 && inc) qd_convert_kernel<8, 1><<<grid, 256, 0, c->stream>>>(wd, x16, ab, part, wpart, *w, x4, n4);
    else if (!old && w->bits == 8) qd_convert_kernel<8, 0><<<grid, 256, 0, c->stream>>>(wd, x16, ab, part, wpart, *w, x4, n4);
    else qd_convert_kernel<0, 0><<<grid, 256, 0, c->stream>>>(wd, x16, ab, part, wpart, *w, x4, n4);
    cudaLaunchCheck();
    cuda_lt_matmul_dev(c, y, wd, x16, T, w->rows, w->cols, CUDA_R_16F, ab);
}

static int qd_ok(const float *x, int T, const dweight_t *w) {
    return w->dtype == DT_U32 && !((uintptr_t)x & 15) && (size_t)T * w->cols % 4 == 0;
}

/* The weight cache (--weight-cache-gb): a weight's f16 form (the same values qd_words writes: they
 * depend on the codes, scales, biases and the weight's own bound only, never on x) kept in device
 * memory after its first prefill, so later prefills convert x alone and skip a write and a read of
 * 2 bytes a parameter — llama-3-8b q4 prefill +12.5 % at 2048 tokens, +39 / +55 % at 512 / 300
 * (H200, session 34). The trade-off is memory (its layers: 13.9 GB on top of 4.5 GB of codes), so
 * it is bounded by qdc_budget, taken weight by weight in the order prefills reach them (a model
 * over the budget keeps its first layers); not while a graph is captured (no allocation there),
 * and a failed allocation turns it off (the step goes on through the scratch). qd_keep returns the
 * weight's kept copy (fresh = 1: to be written by this launch) or NULL. */
extern "C" long kiln_cuda_qdc_fills, kiln_cuda_qdc_hits; /* weights written into the cache, GEMMs that read a kept copy (tests) */
long kiln_cuda_qdc_fills, kiln_cuda_qdc_hits;

/* the budget: KILN_CUDA_QDEQ_CACHE_GB when set (read per call, like the other switches here: tests
 * turn it on and off; 0 = off), else the backend's (cuda_qdeq_cache_plan: --weight-cache-gb) */
static size_t qd_cache_budget(const cuda_impl_t *c) {
    const char *e = getenv("KILN_CUDA_QDEQ_CACHE_GB");
    if (e && *e) return atof(e) > 0 ? (size_t)(atof(e) * 1e9) : 0;
    return c->qdc_budget;
}

/* Which weights are kept: 4/8-bit (qd_one's word walk). A small one — under QDC_MIN_ELEMS parameters
 * (KILN_CUDA_QDEQ_CACHE_MIN=N; tests set 0 or more) — only from QDC_SMALL_T tokens on
 * (KILN_CUDA_QDEQ_CACHE_SMALL_T), and below that its prefills take the scratch even once it is kept:
 * its f16 form, written by the convert launch just before its GEMM, is still in the 50 MB L2 when
 * the GEMM reads it, while a kept copy comes from HBM. On the H200 (session 34, call 1, every weight
 * kept) qwen3-0.6b q4 (weights of 1–3 M parameters) prefilled 300 / 512 tokens 10 / 6 % slower and
 * 2048 tokens 5 % faster (q8 +7 %); llama-3-8b q4 (16.8–58.7 M) 55 / 39 / 12.5 % faster at 300 / 512
 * / 2048. Where between 512 and 2048 the small weights cross over is not measured: 2048 (the CUDA
 * engine's step budget, so a long prompt's every chunk) is the measured side. */
#define QDC_MIN_ELEMS (1L << 24)
#define QDC_SMALL_T 2048
#define QDC_HEADROOM ((size_t)1 << 30) /* device bytes a fill leaves free */
static int qd_cacheable(const dweight_t *w) { return w->dtype == DT_U32 && qd_words_ok(w); }
static int qd_small(const dweight_t *w) {
    const char *e = getenv("KILN_CUDA_QDEQ_CACHE_MIN");
    return (long)w->rows * w->cols < (e && *e ? atol(e) : QDC_MIN_ELEMS);
}
static int qd_small_t(void) {
    const char *e = getenv("KILN_CUDA_QDEQ_CACHE_SMALL_T");
    return e && *e ? atoi(e) : QDC_SMALL_T;
}

/* the cache would take w now: room in the budget, not capturing (no allocation there), not stopped */
static int qd_room(const cuda_impl_t *c, const dweight_t *w) {
    return !c->capturing && !c->qdc_full && qd_cacheable(w) && c->qdc_used + dweight_f16_bytes(w) <= qd_cache_budget(c);
}

/* 1 where w has a kept f16 copy or its next prefill would keep one: matmul.cu then sends it here from
 * KILN_CUDA_QDEQ_CACHE_T tokens instead of to the wgmma tiles */
int cuda_qdeq_kept(const cuda_impl_t *c, const dweight_t *w) {
    if (qd_small(w)) return 0; /* at the tiles' sizes a small weight takes the scratch anyway */
    return w->qd_f16 || (qdeq_f16_on() && qd_room(c, w));
}

/* The cache's budget from --weight-cache-gb (gb > 0: that much; < 0: auto, an eighth of the device's
 * memory; 0: off, the default), never more than the f16 forms of every weight it would keep; returns what is
 * still unallocated (the engine leaves it out of the KV cache). Auto's eighth: llama-3-8b's layers
 * (13.9 GB) fit on an H200 (141 GB) whole, on an 80 GB device ~70 % of them (the first layers a
 * prefill reaches), on 24 GB ~20 %; the KV cache keeps the rest of what is free. */
size_t cuda_qdeq_cache_plan(cuda_impl_t *c, double gb) {
    size_t budget = 0, want = 0, fr = 0, tot = 0;
    /* none where prefills never come here: another dequantization forced (KILN_CUDA_QDEQ=tf32|bf16,
     * KILN_CUDA_ACT=bf16: matmul.cu's paths) or "cuda-f32", whose matmuls never reach a GEMM */
    if (!qdeq_f16_on() || c->deq_bf16 == 1 || (c->deq_bf16 < 0 && c->act_bf16 == 1) || c->gemm_min_t == 0x7fffffff) gb = 0;
    if (gb > 0) budget = (size_t)(gb * 1e9);
    else if (gb < 0 && cudaMemGetInfo(&fr, &tot) == cudaSuccess) budget = tot / 8;
    else cudaGetLastError();
    for (int i = 0; i < c->n_weights; i++)
        if (qd_cacheable(c->weights[i])) want += dweight_f16_bytes(c->weights[i]);
    c->qdc_budget = budget < want ? budget : want;
    return c->qdc_budget > c->qdc_used ? c->qdc_budget - c->qdc_used : 0;
}

static __half *qd_keep(cuda_impl_t *c, const dweight_t *w, int T, int *fresh) {
    *fresh = 0;
    if (qd_small(w) && T < qd_small_t()) return NULL;
    if (w->qd_f16) { kiln_cuda_qdc_hits++; return w->qd_f16; }
    if (!qd_room(c, w)) return NULL;
    const size_t bytes = dweight_f16_bytes(w);
    /* and never the last GB: the step's scratch still grows after the first prefills (an explicit
     * --kv-cache-gb may have left less room than the automatic budget keeps for the cache) */
    size_t fr = 0, tot = 0;
    __half *p = NULL;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess || fr < bytes + QDC_HEADROOM || cudaMalloc((void **)&p, bytes) != cudaSuccess) {
        cudaGetLastError();
        fprintf(stderr, "kiln cuda: the weight cache stops at %.2f GB: no device memory for %.1f MB more (the rest is dequantized per prefill)\n",
                c->qdc_used / 1e9, bytes / 1e6);
        c->qdc_full = 1;
        return NULL;
    }
    c->qdc_used += bytes;
    ((dweight_t *)w)->qd_f16 = p;
    *fresh = 1;
    kiln_cuda_qdc_fills++;
    return p;
}

/* c->qdf's layout (qd_fused_scratch): x's exponent from the norm, the alphas and betas of qd_one_ex's GEMMs
 * where x comes from a producer, the rows' 2^-e_t from the GLU, then x as f16 */
#define QDF_XE 0
#define QDF_AB 64
#define QDF_RS 256

/* n weights of one x in one scan, one convert launch and n GEMMs (qd_convert_multi_kernel); -1 where it
 * does not apply (mixed or other bit widths, groups not 2^k whole words, more than QD_MAXW weights, a
 * graph capture before every bound is kept, KILN_CUDA_QDEQ_ONE=0 or KILN_CUDA_DEQUANT set): the caller
 * then runs qd_run per weight. qd_one_ex: x already f16 (x16, T × K) from its producer — its exponent
 * at *xe (QDX_GIVEN) or per row (QDX_ROWS: the GEMMs' exponent 0) — with no scan and no x conversion;
 * beta 1: y += x·Wᵀ. The small values (xe, the alphas) in c->qdf's head. */
static int qd_one_ex(cuda_impl_t *c, int n, float *const *y, const float *x, const __half *x16in, int xmode, const int *xe, float beta,
                     int T, const dweight_t *const *w, const __half **wf16 = NULL, const float **wab = NULL) {
    if (!qd_one_ok(n, w)) return -1;
    const int bits = w[0]->bits;
    qd_multi m = {};
    const __half *wg[QD_MAXW]; /* each GEMM's f16 weight: kept, fresh (written by this launch) or scratch */
    size_t off[QD_MAXW + 1] = {0}, words = 0;
    for (int i = 0; i < n; i++) {
        m.w[i] = *w[i];
        const float *wp = qd_wbound(c, w[i]);
        if (!wp) return -1;
        m.wmax[i] = wp + QD_NP;
    }
    for (int i = 0; i < n; i++) { /* after every bound: from here on this launch writes what qd_keep hands out */
        const size_t nw = (size_t)w[i]->rows * w[i]->cols;
        int fresh;
        wg[i] = qd_keep(c, w[i], T, &fresh);
        m.wout[i] = fresh ? (__half *)wg[i] : NULL;
        off[i + 1] = off[i] + (wg[i] ? 0 : (nw * 2 + 255) / 256 * 256);
        if (!wg[i] || fresh) words += nw * bits / 32;
    }
    m.n = n;
    m.xmode = xmode;
    m.xe = xe;
    m.beta = beta;
    qd_walk_fill(&m, bits);
    const size_t nx = (size_t)T * w[0]->cols, n4 = xmode == QDX_SCAN ? nx / 4 : 0, xbytes = (nx * 2 + 255) / 256 * 256;
    char *wd = off[n] ? (char *)cuda_scratch(c, &c->wdeq, &c->wdeq_bytes, off[n]) : NULL;
    __half *x16;
    float *part = NULL, *ab;
    if (xmode == QDX_SCAN) {
        char *a16 = (char *)cuda_scratch(c, &c->act16, &c->act16_bytes, xbytes + (QD_NP + 2 * QD_MAXW) * sizeof(float));
        x16 = (__half *)a16;
        part = (float *)(a16 + xbytes);
        ab = part + QD_NP;
    } else {
        x16 = (__half *)x16in;
        ab = (float *)((char *)c->qdf + QDF_AB); /* qd_fused_scratch made it */
    }
    for (int i = 0; i < n; i++)
        if (!wg[i]) wg[i] = m.wout[i] = (__half *)(wd + off[i]);
    if (xmode == QDX_SCAN) {
        qd_scan_kernel<<<QD_NP, 256, 0, c->stream>>>(part, NULL, (const float4 *)x, n4, *w[0]);
        cudaLaunchCheck();
    }
    const int grid = qd_grid(c, words > n4 ? words : n4);
    if (bits == 4) qd_convert_multi_kernel<4><<<grid, 256, 0, c->stream>>>(m, x16, ab, part, (const float4 *)x, n4);
    else qd_convert_multi_kernel<8><<<grid, 256, 0, c->stream>>>(m, x16, ab, part, (const float4 *)x, n4);
    cudaLaunchCheck();
    for (int i = 0; i < n; i++) {
        if (wf16) { wf16[i] = wg[i]; wab[i] = ab + 2 * i; continue; } /* converted only: the caller's GEMMs */
        cuda_lt_matmul_dev(c, y[i], wg[i], x16, T, w[i]->rows, w[i]->cols, CUDA_R_16F, ab + 2 * i);
    }
    return 0;
}
static int qd_one(cuda_impl_t *c, int n, float *const *y, const float *x, int T, const dweight_t *const *w) {
    return qd_one_ex(c, n, y, x, NULL, QDX_SCAN, NULL, 0.f, T, w);
}

int cuda_qdeq_f16(cuda_impl_t *c, float *y, const float *x, int T, const dweight_t *w) {
    if (!qdeq_f16_on() || !qd_ok(x, T, w)) return -1;
    if (qd_one(c, 1, &y, x, T, &w)) qd_run(c, y, x, T, w, 1);
    return 0;
}

/* n weights of one x (q/k/v, gate/up) that would each take cuda_qdeq_f16: x is scanned and
 * converted once (the same x16 and 2^e for all; each weight its own 2^s and alpha) — each y
 * bitwise what cuda_qdeq_f16 gives. */
int cuda_qdeq_f16_multi(cuda_impl_t *c, int n, float *const *y, const float *x, int T, const dweight_t *const *w) {
    if (!qdeq_f16_on()) return -1;
    for (int i = 0; i < n; i++)
        if (!qd_ok(x, T, w[i]) || w[i]->cols != w[0]->cols) return -1;
    if (!qd_one(c, n, y, x, T, w)) return 0;
    for (int i = 0; i < n; i++) qd_run(c, y[i], x, T, w[i], i == 0);
    return 0;
}

/* --- The fused prefill ops on this path: backend.h rms_matmul_multi, matmul_add and rms_mlp for MLX
 * weights that cuda_matmul would send here (cuda_qd_takes, matmul.cu). The separate ops moved every
 * activation through f32 and then through the scan and conversion above; here the producers write
 * the GEMMs' f16 operands themselves:
 *   rms_matmul_multi  the norm writes f16(h·2^e) with e from a bound known without a pass over h
 *                     (rmsnorm.cu rms_norm_f16s_kernel: |h| ≤ √K·max|off + w|), no f32 h, no scan,
 *                     no x conversion; one convert launch for the weights, the GEMMs
 *   matmul_add        the scan and conversion of x as before, the GEMM with beta = 1 on y (the
 *                     residual add in its epilogue, no f32 product and no add pass)
 *   rms_mlp           the norm as above, gate and up, then the GLU writes f16(glu·2^e_t) with e_t
 *                     from its own row (elementwise.cu glu_f16row_kernel: no f32 GLU output, no scan,
 *                     no conversion), down into a scratch, x[t] += 2^-e_t·that (add_rowscale_kernel)
 * A 2048-token qwen3-0.6b q4 layer moved ~330 MB outside its GEMMs through the separate ops against
 * ~160 MB for a bf16 checkpoint's fused ones (the estimate that started this: bench/cuda/RESULTS.md,
 * session 41); these cut ~120 MB and five launches of it. Numerics: the floats of the separate ops
 * wherever a value stays in f16's normal range under both scalings (a power of two moves no rounding
 * there, and the GEMMs' f32 sums scale exactly with their operands): matmul_add is bitwise matmul +
 * add; the other two differ only where the separate path's one scale for the matrix put a value under
 * 2^-14 of f16's range and these did not, or the reverse (docs/cuda.md, Numerics; test_qd_fused).
 * KILN_CUDA_QD_FUSE=0: the three decline (A/B). */
int cuda_rms_norm_f16s(cuda_impl_t *c, __half *y16, int *xe, const float *x, const float *w, float off, int T, int n, float eps, float *xa,
                       const float *d, const float *rs);
int cuda_glu_f16row(cuda_impl_t *c, __half *y16, float *rs, const float *g, const float *u, int T, int I, act_t act, const float *un,
                    const float *ud);
void cuda_lt_matmul_dev2(cuda_impl_t *c, float *y0, const void *W0, int64_t sa, int64_t sd, const void *X, int T, int N, int K,
                         cudaDataType_t type, const float *alpha_beta);
void cuda_add_rowscale(cuda_impl_t *c, float *x, const float *d, const float *rs, int T, int n);
int cuda_qd_takes(cuda_impl_t *c, const dweight_t *w, int T);

static size_t qdf_rs_bytes(int T) { return ((size_t)T * sizeof(float) + 255) / 256 * 256; }
/* c->qdf for T rows and an f16 x of nx elements (before anything of the op is launched: a grown scratch
 * is a new buffer) */
static char *qd_fused_scratch(cuda_impl_t *c, int T, size_t nx) {
    return (char *)cuda_scratch(c, &c->qdf, &c->qdf_bytes, QDF_RS + qdf_rs_bytes(T) + nx * 2);
}

/* the n weights take this path at T tokens, all through qd_one_ex (so nothing the op launches can be
 * declined half way): the switches, bit widths and word walk qd_one_ex checks, each weight's kept bound
 * (made here if new: never while a graph is captured) */
static int qd_fused_ok(cuda_impl_t *c, int n, const dweight_t *const *w, int T) {
    const char *f = getenv("KILN_CUDA_QD_FUSE");
    if ((f && !strcmp(f, "0")) || !qdeq_f16_on() || c->capturing || !qd_one_ok(n, w)) return 0;
    for (int i = 0; i < n; i++)
        if (!cuda_qd_takes(c, w[i], T) || w[i]->cols != w[0]->cols || !qd_wbound(c, w[i])) return 0;
    return 1;
}

int cuda_qd_rms_matmul_multi(cuda_impl_t *c, int n, float *const *y, const float *x, const float *nw, float off, float eps, int T,
                             const dweight_t *const *w) {
    const int K = w[0]->cols;
    if (!qd_fused_ok(c, n, w, T)) return -1;
    /* the rms_mlp before it left x's residual add (KILN_CUDA_QD_DEFER): done by the norm here. Its rows and scales
     * live in this scratch (QDF_RS, which the norm does not write) and ysplit, the same sizes as then: no regrowth */
    const int add = c->dra.x && c->dra.x == x && c->dra.T == T && c->dra.n == K;
    char *q = qd_fused_scratch(c, T, (size_t)T * K);
    int *xe = (int *)(q + QDF_XE);
    __half *h16 = (__half *)(q + QDF_RS + qdf_rs_bytes(T));
    if (cuda_rms_norm_f16s(c, h16, xe, x, nw, off, T, K, eps, add ? c->dra.x : NULL, add ? c->dra.d : NULL, add ? c->dra.rs : NULL))
        return -1; /* its sizes and alignments: nothing launched */
    if (add) {
        c->dra.x = NULL;
        c->dra.used++;
    }
    qd_one_ex(c, n, y, NULL, h16, QDX_GIVEN, xe, 0.f, T, w);
    c->qd_fused_uses++;
    return 0;
}

/* o's x as the attention's f16 form (x16.cuh) where the attention wrote one — unscaled (e = 0: QDX_ROWS' alpha
 * 2^-s), no scan, no conversion; otherwise the scan as before, noting the length so that the next layers'
 * attentions write that form. Default since session 42 (H200: qwen3-0.6b q4 prefill +1.6 % alone, logits
 * md5-identical over 600 ids; test_qd_att16); KILN_CUDA_QD_ATT16=0: the scan always (read per call) */
static int qd_att16_on(void) {
    const char *e = getenv("KILN_CUDA_QD_ATT16");
    return !e || atoi(e) > 0;
}
int cuda_qd_matmul_add(cuda_impl_t *c, float *y, const float *x, int T, const dweight_t *w) {
    if (!qd_fused_ok(c, 1, &w, T) || !qd_ok(x, T, w)) return -1;
    const size_t nx = (size_t)T * w->cols;
    const __half *xh = qd_att16_on() ? cuda_x16h_get(c, x, nx) : NULL;
    if (xh) {
        qd_fused_scratch(c, T, 0); /* the alphas' home */
        qd_one_ex(c, 1, &y, NULL, xh, QDX_ROWS, NULL, 1.f, T, &w);
        c->qd_fused_uses++;
        return 0;
    }
    if (qd_att16_on()) cuda_x16h_note(c, nx);
    qd_one_ex(c, 1, &y, x, NULL, QDX_SCAN, NULL, 1.f, T, &w);
    c->qd_fused_uses++;
    return 0;
}

/* KILN_CUDA_QD_DEFER (=1, opt-in until it has run on a GPU — written in session 65, whose device starts were all
 * refused; read per call; unset or 0: rms_mlp adds its rows itself, the A/B): rms_mlp leaves x[t] +=
 * 2^-e_t·down[t] (add_rowscale_kernel) pending in c->dra, and the next layer's rms_matmul_multi on that x does it in
 * its norm (rms_norm_f16s_kernel ADD: the same roundings, x stored, then normalized) — one launch and one 8 MB read of
 * x less a qwen3-0.6b layer at 2048 tokens. Every other op flushes first (cuda_defer_flush, from xprep.cu's op
 * wrappers and the download), so nothing reads x before the add; needs those wrappers (cuda_xp_wrapped). */
static int qd_defer_on(cuda_impl_t *c) {
    const char *e = getenv("KILN_CUDA_QD_DEFER");
    return e && atoi(e) != 0 && cuda_xp_wrapped(c);
}

int cuda_qd_rms_mlp(cuda_impl_t *c, float *x, const float *nw, float off, float eps, int T, const dweight_t *wg, const dweight_t *wu,
                    const dweight_t *wd, act_t act) {
    const dweight_t *const gu[2] = {wg, wu};
    const int H = wg->cols, I = wg->rows;
    /* the GLU's conditions here (it runs after the GEMMs); the norm's are its own, checked before anything runs */
    if (wu->rows != I || wu->cols != H || wd->rows != H || wd->cols != I || I % 4 || I > 16384 || !qd_fused_ok(c, 2, gu, T) ||
        !qd_fused_ok(c, 1, &wd, T))
        return -1;
    const size_t ng = (size_t)T * I, nh = (size_t)T * H;
    /* every scratch first (a grown one is a new buffer): the norm's f16 h, gate and up (f32, one buffer), the GLU's f16, down's rows */
    char *q = qd_fused_scratch(c, T, nh);
    float *g = (float *)cuda_scratch(c, &c->mlp_gu, &c->mlp_gu_bytes, 2 * ng * 4), *u = g + ng;
    __half *g16 = (__half *)cuda_scratch(c, &c->mlp16, &c->mlp16_bytes, ng * 2);
    float *yd = (float *)cuda_scratch(c, &c->ysplit, &c->ysplit_bytes, nh * 4);
    int *xe = (int *)(q + QDF_XE);
    float *rs = (float *)(q + QDF_RS);
    __half *h16 = (__half *)(q + QDF_RS + qdf_rs_bytes(T));
    if (cuda_rms_norm_f16s(c, h16, xe, x, nw, off, T, H, eps, NULL, NULL, NULL)) return -1; /* its sizes and alignments: nothing launched */
    float *const ygu[2] = {g, u};
    /* gate and up as ONE batched GEMM where their f16 forms lie a whole positive stride apart (the scratch: always;
     * kept copies: by their addresses) with gate's alpha; the GLU multiplies up by its own alpha over gate's (a power
     * of two: exact). Default since session 42 (H200: qwen3-0.6b q4 prefill +1.1 % alone, +2.5 % with the f16
     * attention form); KILN_CUDA_QD_BATCH=0: two GEMMs (read per call) */
    const char *qb = getenv("KILN_CUDA_QD_BATCH");
    const __half *w16[2];
    const float *ab2[2];
    qd_one_ex(c, 2, ygu, NULL, h16, QDX_GIVEN, xe, 0.f, T, gu, w16, ab2);
    const int64_t sa = (int64_t)(w16[1] - w16[0]);
    if ((!qb || atoi(qb) > 0) && sa >= (int64_t)I * H && sa % 8 == 0) {
        cuda_lt_matmul_dev2(c, g, w16[0], sa, (int64_t)ng, h16, T, I, H, CUDA_R_16F, ab2[0]);
        cuda_glu_f16row(c, g16, rs, g, u, T, I, act, ab2[1], ab2[0]);
    } else {
        for (int i = 0; i < 2; i++) cuda_lt_matmul_dev(c, ygu[i], w16[i], h16, T, I, H, CUDA_R_16F, ab2[i]);
        cuda_glu_f16row(c, g16, rs, g, u, T, I, act, NULL, NULL); /* its conditions: I % 4, I <= 16384, scratch aligned */
    }
    qd_one_ex(c, 1, &yd, NULL, g16, QDX_ROWS, NULL, 0.f, T, &wd);
    if (qd_defer_on(c)) { /* the add left to the next layer's norm (or the next op's flush) */
        c->dra.x = x; c->dra.d = yd; c->dra.rs = rs; c->dra.T = T; c->dra.n = H;
    } else
        cuda_add_rowscale(c, x, yd, rs, T, H);
    c->qd_fused_uses++;
    return 0;
}
extern "C" long cuda_qd_fused_uses(const backend_t *be) { return ((const cuda_impl_t *)be->impl)->qd_fused_uses; }
extern "C" long cuda_qd_defer_uses(const backend_t *be) { return ((const cuda_impl_t *)be->impl)->dra.used; }
