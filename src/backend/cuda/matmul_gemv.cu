/* matmul_gemv.cu — y[T, N] = x[T, K] · Wᵀ for small T (decode): one warp per output row.
 *
 * Reference: ref_matmul (backend/cpu/ref.c). Batch-1 decode reads every weight once per
 * token, so this kernel is about bandwidth: each lane streams 16-byte pieces of its row
 * (8 bf16/f16 values, 4 f32, or one 32-column unit of packed MLX codes: `bits` words)
 * and uses each piece for all T ≤ 8 tokens of the step. x stays f32 and is read through
 * L1 (it is tiny and shared by the warps of a block). Quantized values are dequantized in
 * registers, w = scale * code + bias, exactly as weight_row_f32 does.
 *
 * bf16/f16 and MLX 4/8-bit go through gemvq_kernel/gemvh_kernel (multi-row, below); f32 and
 * 2/3/5/6-bit through gemv_kernel. Order: lane l accumulates units l, l+32, ... in order, then a fixed xor-shuffle tree;
 * nothing depends on T, so a token's outputs are bitwise the same alone or with others. */
#include "backend/cuda/cuda_common.cuh"

#define GEMV_TMAX 8
#define GEMV_WARPS 4

enum { K_F32, K_F16, K_BF16, K_QUANT };

/* KILN_CUDA_GEMV=old: every dtype through gemv_kernel below (for A/B measurements) */
static int getenv_gemv_old(void) {
    static int v = -1;
    if (v < 0) { const char *e = getenv("KILN_CUDA_GEMV"); v = e && !strcmp(e, "old"); }
    return v;
}
/* KILN_CUDA_GEMV=r1: one row per warp for 3..8 tokens (as before R = 2 was allowed there) */
static int getenv_gemv_r1(void) {
    static int v = -1;
    if (v < 0) { const char *e = getenv("KILN_CUDA_GEMV"); v = e && !strcmp(e, "r1"); }
    return v;
}

/* KILN_CUDA_GEMV=ks1: small matrices at T = 1 keep one warp per row (for A/B measurements) */
/* Matrices with R = 2 (2k..4k rows: q/o/down of llama-3-8b, gate/up of qwen3-0.6b) split K over
 * the two warps of a row pair for bf16/f16 and 4-bit weights (by shape and dtype, every T).
 * Measured on the H200 (bench/cuda/RESULTS.md): llama-3-8b bf16 159.7 -> 167.0 tok/s, qwen3-0.6b
 * bf16 387 -> 397, q4 unchanged, q8 156.5 -> 139.8 (its R = 2 kernel holds 66 registers: twice
 * the warps no longer fit), so 8-bit keeps one warp. KILN_CUDA_GEMV_KS2=0: never, =1: always. */
static int getenv_gemv_ks2(const dweight_t *w) {
    static int v = -2;
    if (v == -2) { const char *e = getenv("KILN_CUDA_GEMV_KS2"); v = e ? atoi(e) : -1; }
    return v >= 0 ? v : !(w->dtype == DT_U32 && w->bits == 8);
}
static int getenv_gemv_ks1(void) {
    static int v = -1;
    if (v < 0) { const char *e = getenv("KILN_CUDA_GEMV"); v = e && !strcmp(e, "ks1"); }
    return v;
}

template <int BITS>
__device__ __forceinline__ void load_words(const uint32_t *p, uint32_t *w) {
    if constexpr (BITS % 4 == 0) {
#pragma unroll
        for (int i = 0; i < BITS / 4; i++) {
            uint4 v = __ldg((const uint4 *)p + i);
            w[4 * i] = v.x; w[4 * i + 1] = v.y; w[4 * i + 2] = v.z; w[4 * i + 3] = v.w;
        }
    } else if constexpr (BITS == 2 || BITS == 6) {
#pragma unroll
        for (int i = 0; i < BITS / 2; i++) {
            uint2 v = __ldg((const uint2 *)p + i);
            w[2 * i] = v.x; w[2 * i + 1] = v.y;
        }
    } else {
#pragma unroll
        for (int i = 0; i < BITS; i++) w[i] = __ldg(p + i);
    }
}

/* Code j (0..31) of a 32-column unit held in BITS words; j and BITS are compile-time. */
template <int BITS>
__device__ __forceinline__ uint32_t unit_code(const uint32_t *w, int j) {
    const int bit = j * BITS, word = bit >> 5, off = bit & 31;
    uint32_t v = w[word] >> off;
    if (off + BITS > 32) v |= w[word + 1] << (32 - off);
    return v & ((1u << BITS) - 1);
}

__device__ __forceinline__ void fma_tokens(float (&acc)[GEMV_TMAX], const float *x, size_t K, int T, int col, const float (&wv)[4]) {
#pragma unroll
    for (int t = 0; t < GEMV_TMAX; t++)
        if (t < T) {
            float4 xv = __ldg((const float4 *)(x + t * K + col));
            acc[t] = fmaf(wv[0], xv.x, acc[t]);
            acc[t] = fmaf(wv[1], xv.y, acc[t]);
            acc[t] = fmaf(wv[2], xv.z, acc[t]);
            acc[t] = fmaf(wv[3], xv.w, acc[t]);
        }
}

template <int KIND, int BITS>
__global__ void __launch_bounds__(GEMV_WARPS * 32) gemv_kernel(float *__restrict__ y, const float *__restrict__ x, int T, dweight_t w) {
    const int lane = threadIdx.x & 31, n = blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    if (n >= w.rows) return;
    const size_t K = (size_t)w.cols;
    float acc[GEMV_TMAX];
#pragma unroll
    for (int t = 0; t < GEMV_TMAX; t++) acc[t] = 0.f;
    if constexpr (KIND == K_QUANT) {
        const uint32_t *row = (const uint32_t *)w.data + (size_t)n * (K / 32) * BITS;
        const int units = (int)(K / 32), ng = (int)(K / w.group);
        const size_t sb = (size_t)n * ng;
#pragma unroll 2
        for (int u = lane; u < units; u += 32) {
            uint32_t words[BITS];
            load_words<BITS>(row + (size_t)u * BITS, words);
            const int g = u * 32 / w.group;
            const float s = ld_f(w.scales, w.sb_dtype, sb + g), b = ld_f(w.biases, w.sb_dtype, sb + g);
#pragma unroll
            for (int q = 0; q < 8; q++) {
                float wv[4];
#pragma unroll
                for (int j = 0; j < 4; j++) wv[j] = s * (float)unit_code<BITS>(words, 4 * q + j) + b;
                fma_tokens(acc, x, K, T, u * 32 + 4 * q, wv);
            }
        }
    } else if constexpr (KIND == K_F32) {
        const float *row = (const float *)w.data + (size_t)n * K;
        const int units = (int)(K / 4);
#pragma unroll 4
        for (int u = lane; u < units; u += 32) {
            float4 v = __ldg((const float4 *)row + u);
            float wv[4] = {v.x, v.y, v.z, v.w};
            fma_tokens(acc, x, K, T, u * 4, wv);
        }
    } else {
        const uint16_t *row = (const uint16_t *)w.data + (size_t)n * K;
        const int units = (int)(K / 8);
#pragma unroll 4
        for (int u = lane; u < units; u += 32) {
            uint4 v = __ldg((const uint4 *)row + u);
            const uint32_t pk[4] = {v.x, v.y, v.z, v.w};
            float wv[8];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                if constexpr (KIND == K_BF16) {
                    wv[2 * i] = __uint_as_float(pk[i] << 16);
                    wv[2 * i + 1] = __uint_as_float(pk[i] & 0xffff0000u);
                } else {
                    wv[2 * i] = __half2float(__ushort_as_half((unsigned short)(pk[i] & 0xffffu)));
                    wv[2 * i + 1] = __half2float(__ushort_as_half((unsigned short)(pk[i] >> 16)));
                }
            }
            const float lo[4] = {wv[0], wv[1], wv[2], wv[3]}, hi[4] = {wv[4], wv[5], wv[6], wv[7]};
            fma_tokens(acc, x, K, T, u * 8, lo);
            fma_tokens(acc, x, K, T, u * 8 + 4, hi);
        }
    }
#pragma unroll
    for (int t = 0; t < GEMV_TMAX; t++) {
        float v = acc[t];
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0 && t < T) y[(size_t)t * w.rows + n] = v;
    }
}

/* --- the decode GEMV for bf16/f16 and MLX 4/8-bit weights (the formats models ship in) ---
 *
 * A warp owns R consecutive output rows (R = 1, 2, 4 by the weight's row count, so large
 * matrices get several 16-byte loads in flight per lane and each x piece, read once, is used
 * for R rows). Lane l walks units l, l+32, ... of every row in order.
 *
 * Quantized: per 32-column unit (inside one group), p = Σ_j code_j · x_j in column order,
 * then acc = fma(scale, p, acc), acc = fma(bias, Σ_j x_j, acc); the x sum is shared by the
 * warp's rows. Codes become exact floats without I2F: (code | 0x4B000000) - 2^23. 4-bit
 * nibble j of a word is masked in place (code·16^j, exact) and multiplied by x_j·16^-j
 * (exact), which gives the product code_j·x_j bit for bit; 8-bit codes come out of one PRMT.
 * Every operation is an explicit _rn intrinsic, so nothing depends on R, the token bucket
 * TT or T: a token's outputs are bitwise the same alone or in a batch. */
template <int TT>
__device__ __forceinline__ void ld_x8(float (&xv)[TT][8], const float *__restrict__ x, size_t K, int T, size_t col) {
#pragma unroll
    for (int t = 0; t < TT; t++) {
        if (t < T) {
            float4 a = __ldg((const float4 *)(x + t * K + col)), b = __ldg((const float4 *)(x + t * K + col + 4));
            xv[t][0] = a.x; xv[t][1] = a.y; xv[t][2] = a.z; xv[t][3] = a.w;
            xv[t][4] = b.x; xv[t][5] = b.y; xv[t][6] = b.z; xv[t][7] = b.w;
        } else {
#pragma unroll
            for (int j = 0; j < 8; j++) xv[t][j] = 0.f;
        }
    }
}

__device__ __forceinline__ float code_f(uint32_t bits_in_mantissa) {
    return __fsub_rn(__uint_as_float(bits_in_mantissa | 0x4B000000u), 8388608.f);
}

template <int TT, int R, int KS>
__device__ __forceinline__ void warp_store(float (&acc)[R][TT], float *__restrict__ y, int T, int n0, int rows, int lane) {
    __shared__ float red[KS > 1 ? GEMV_WARPS : 1][R][TT];
    const int warp = threadIdx.x >> 5;
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < TT; t++) {
            float v = acc[r][t];
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
            if (KS == 1) {
                if (lane == 0 && t < T && n0 + r < rows) y[(size_t)t * rows + n0 + r] = v;
            } else if (lane == 0) red[warp][r][t] = v;
        }
    if (KS > 1) { /* the KS warps of a row group split K: its first warp adds them in warp order */
        __syncthreads();
        if (warp % KS == 0)
            for (int i = lane; i < R * TT; i += 32) {
                const int r = i / TT, t = i % TT;
                float v = red[warp][r][t];
#pragma unroll
                for (int k = 1; k < KS; k++) v = __fadd_rn(v, red[warp + k][r][t]);
                if (t < T && n0 + r < rows) y[(size_t)t * rows + n0 + r] = v;
            }
    }
}

/* KS = 1: a warp per R rows; KS = GEMV_WARPS (small matrices): the block's warps split the
 * row's units (warp k takes units k·32 + lane, stepping by 32·KS) and add in warp order. */
template <int BITS, int TT, int R, int KS>
__global__ void __launch_bounds__(GEMV_WARPS * 32) gemvq_kernel(float *__restrict__ y, const float *__restrict__ x, int T, dweight_t w) {
    const int lane = threadIdx.x & 31, n0 = (blockIdx.x * (GEMV_WARPS / KS) + (threadIdx.x >> 5) / KS) * R;
    const int kw = (threadIdx.x >> 5) % KS;
    if (KS == 1 && n0 >= w.rows) return; /* KS > 1: every warp reaches warp_store's barrier */
    const size_t K = (size_t)w.cols;
    const int units = (int)(K / 32), ng = (int)(K / w.group), upg = w.group / 32;
    const uint32_t *rowp[R];
    size_t sbi[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int n = n0 + r < w.rows ? n0 + r : w.rows - 1;
        rowp[r] = (const uint32_t *)w.data + (size_t)n * units * BITS;
        sbi[r] = (size_t)n * ng;
    }
    float acc[R][TT];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < TT; t++) acc[r][t] = 0.f;
#pragma unroll 2
    for (int u = kw * 32 + lane; u < units; u += 32 * KS) {
        uint32_t wd[R][BITS];
#pragma unroll
        for (int r = 0; r < R; r++) load_words<BITS>(rowp[r] + (size_t)u * BITS, wd[r]);
        float s[R], b[R];
        const int g = u / upg;
#pragma unroll
        for (int r = 0; r < R; r++) { s[r] = ld_f(w.scales, w.sb_dtype, sbi[r] + g); b[r] = ld_f(w.biases, w.sb_dtype, sbi[r] + g); }
        float p[R][TT], xs[TT];
#pragma unroll
        for (int t = 0; t < TT; t++) {
            xs[t] = 0.f;
#pragma unroll
            for (int r = 0; r < R; r++) p[r][t] = 0.f;
        }
#pragma unroll
        for (int ch = 0; ch < 4; ch++) { /* 8 columns at a time */
            float xv[TT][8];
            ld_x8<TT>(xv, x, K, T, (size_t)u * 32 + ch * 8);
#pragma unroll
            for (int t = 0; t < TT; t++)
#pragma unroll
                for (int j = 0; j < 8; j++) xs[t] = __fadd_rn(xs[t], xv[t][j]);
            if constexpr (BITS == 4) {
                const float inv[8] = {1.f, 0.0625f, 0.00390625f, 0.000244140625f, 1.52587890625e-05f, 1.f, 0.0625f, 0.00390625f};
                float xq[TT][8];
#pragma unroll
                for (int t = 0; t < TT; t++)
#pragma unroll
                    for (int j = 0; j < 8; j++) xq[t][j] = __fmul_rn(xv[t][j], inv[j]);
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const uint32_t v = wd[r][ch], hi = v >> 20;
                    float c[8];
#pragma unroll
                    for (int j = 0; j < 5; j++) c[j] = code_f(v & (0xFu << (4 * j)));
#pragma unroll
                    for (int j = 0; j < 3; j++) c[5 + j] = code_f(hi & (0xFu << (4 * j)));
#pragma unroll
                    for (int t = 0; t < TT; t++)
#pragma unroll
                        for (int j = 0; j < 8; j++) p[r][t] = __fmaf_rn(c[j], xq[t][j], p[r][t]);
                }
            } else { /* BITS == 8 */
#pragma unroll
                for (int r = 0; r < R; r++) {
                    float c[8];
#pragma unroll
                    for (int j = 0; j < 8; j++)
                        c[j] = __fsub_rn(__uint_as_float(__byte_perm(wd[r][2 * ch + j / 4], 0x4B000000u, 0x7440u | (j & 3))), 8388608.f);
#pragma unroll
                    for (int t = 0; t < TT; t++)
#pragma unroll
                        for (int j = 0; j < 8; j++) p[r][t] = __fmaf_rn(c[j], xv[t][j], p[r][t]);
                }
            }
        }
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int t = 0; t < TT; t++) {
                acc[r][t] = __fmaf_rn(s[r], p[r][t], acc[r][t]);
                acc[r][t] = __fmaf_rn(b[r], xs[t], acc[r][t]);
            }
    }
    warp_store<TT, R, KS>(acc, y, T, n0, w.rows, lane);
}

template <int KIND, int TT, int R, int KS>
__global__ void __launch_bounds__(GEMV_WARPS * 32) gemvh_kernel(float *__restrict__ y, const float *__restrict__ x, int T, dweight_t w) {
    const int lane = threadIdx.x & 31, n0 = (blockIdx.x * (GEMV_WARPS / KS) + (threadIdx.x >> 5) / KS) * R;
    const int kw = (threadIdx.x >> 5) % KS;
    if (KS == 1 && n0 >= w.rows) return; /* KS > 1: every warp reaches warp_store's barrier */
    const size_t K = (size_t)w.cols;
    const int units = (int)(K / 8);
    const uint4 *rowp[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int n = n0 + r < w.rows ? n0 + r : w.rows - 1;
        rowp[r] = (const uint4 *)((const uint16_t *)w.data + (size_t)n * K);
    }
    float acc[R][TT];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < TT; t++) acc[r][t] = 0.f;
#pragma unroll 4
    for (int u = kw * 32 + lane; u < units; u += 32 * KS) {
        uint4 v[R];
#pragma unroll
        for (int r = 0; r < R; r++) v[r] = __ldg(rowp[r] + u);
        float xv[TT][8];
        ld_x8<TT>(xv, x, K, T, (size_t)u * 8);
#pragma unroll
        for (int r = 0; r < R; r++) {
            const uint32_t pk[4] = {v[r].x, v[r].y, v[r].z, v[r].w};
            float wv[8];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                if constexpr (KIND == K_BF16) {
                    wv[2 * i] = __uint_as_float(pk[i] << 16);
                    wv[2 * i + 1] = __uint_as_float(pk[i] & 0xffff0000u);
                } else {
                    wv[2 * i] = __half2float(__ushort_as_half((unsigned short)(pk[i] & 0xffffu)));
                    wv[2 * i + 1] = __half2float(__ushort_as_half((unsigned short)(pk[i] >> 16)));
                }
            }
#pragma unroll
            for (int t = 0; t < TT; t++)
#pragma unroll
                for (int j = 0; j < 8; j++) acc[r][t] = __fmaf_rn(wv[j], xv[t][j], acc[r][t]);
        }
    }
    warp_store<TT, R, KS>(acc, y, T, n0, w.rows, lane);
}

template <int TT, int R, int KS = 1>
static void launch_fast(cuda_impl_t *c, float *y, const float *x, int T, const dweight_t *w) {
    dim3 grid(cdiv(w->rows, GEMV_WARPS / KS * R)), block(GEMV_WARPS * 32);
    cudaStream_t s = c->stream;
    if (w->dtype == DT_BF16) gemvh_kernel<K_BF16, TT, R, KS><<<grid, block, 0, s>>>(y, x, T, *w);
    else if (w->dtype == DT_F16) gemvh_kernel<K_F16, TT, R, KS><<<grid, block, 0, s>>>(y, x, T, *w);
    else if (w->bits == 4) gemvq_kernel<4, TT, R, KS><<<grid, block, 0, s>>>(y, x, T, *w);
    else gemvq_kernel<8, TT, R, KS><<<grid, block, 0, s>>>(y, x, T, *w);
}

/* bf16/f16 with columns % 8 == 0 and MLX 4/8-bit: the multi-row kernels above. */
static int try_fast(cuda_impl_t *c, float *y, const float *x, int T, const dweight_t *w) {
    int ok = ((w->dtype == DT_BF16 || w->dtype == DT_F16) && w->cols % 8 == 0) || (w->dtype == DT_U32 && (w->bits == 4 || w->bits == 8));
    if (!ok || getenv_gemv_old()) return -1;
    /* rows per warp: enough blocks to fill the GPU twice over; the choice depends on the
     * weight's shape only (and never changes a row's arithmetic) */
    const int rows = w->rows, sms = c->sm_count > 0 ? c->sm_count : 132;
    const int R = rows >= 4 * GEMV_WARPS * 2 * sms ? 4 : rows >= 2 * GEMV_WARPS * 2 * sms ? 2 : 1;
    /* small matrices (R = 1: fewer than ~2k rows, e.g. k/v projections): the block's four
     * warps split K, so four times as many warps stream the weight (llama-3-8b k/v at one
     * warp per row: 8-10 us for 2-8 MB, ncu). By shape, for every T: a token's sums do not
     * depend on the batch. KILN_CUDA_GEMV=ks1: one warp per row as before. */
    const int ks = R == 1 && !getenv_gemv_ks1(), ks2 = R == 2 && getenv_gemv_ks2(w);
    if (T == 1) {
        if (R == 4) launch_fast<1, 4>(c, y, x, T, w);
        else if (R == 2) { if (ks2) launch_fast<1, 2, 2>(c, y, x, T, w); else launch_fast<1, 2>(c, y, x, T, w); }
        else if (ks) launch_fast<1, 1, GEMV_WARPS>(c, y, x, T, w);
        else launch_fast<1, 1>(c, y, x, T, w);
    } else if (T == 2) {
        if (R == 4) launch_fast<2, 4>(c, y, x, T, w);
        else if (R == 2) { if (ks2) launch_fast<2, 2, 2>(c, y, x, T, w); else launch_fast<2, 2>(c, y, x, T, w); }
        else if (ks) launch_fast<2, 1, GEMV_WARPS>(c, y, x, T, w);
        else launch_fast<2, 1>(c, y, x, T, w);
    }
    /* 3..8 tokens: two rows per warp on big matrices halve the x reads per row (x is
     * re-read from L1 for every row and token: that, not the weights, bounds these sizes) */
    else if (T <= 4) {
        if (R >= 2 && !getenv_gemv_r1()) { if (ks2) launch_fast<4, 2, 2>(c, y, x, T, w); else launch_fast<4, 2>(c, y, x, T, w); }
        else if (ks) launch_fast<4, 1, GEMV_WARPS>(c, y, x, T, w);
        else launch_fast<4, 1>(c, y, x, T, w);
    } else {
        if (R >= 2 && !getenv_gemv_r1()) { if (ks2) launch_fast<8, 2, 2>(c, y, x, T, w); else launch_fast<8, 2>(c, y, x, T, w); }
        else if (ks) launch_fast<8, 1, GEMV_WARPS>(c, y, x, T, w);
        else launch_fast<8, 1>(c, y, x, T, w);
    }
    cudaLaunchCheck();
    return 0;
}

/* Returns 0 when the shape/alignment suits the GEMV kernels (and launches), -1 otherwise. */
int cuda_gemv(cuda_impl_t *c, float *y, const float *x, int T, const dweight_t *w) {
    if (T > GEMV_TMAX || ((uintptr_t)x & 15)) return -1;
    if (try_fast(c, y, x, T, w) == 0) return 0;
    dim3 grid(cdiv(w->rows, GEMV_WARPS)), block(GEMV_WARPS * 32);
    cudaStream_t s = c->stream;
    switch (w->dtype) {
    case DT_F32: if (w->cols % 4) return -1; gemv_kernel<K_F32, 0><<<grid, block, 0, s>>>(y, x, T, *w); break;
    case DT_F16: if (w->cols % 8) return -1; gemv_kernel<K_F16, 0><<<grid, block, 0, s>>>(y, x, T, *w); break;
    case DT_BF16: if (w->cols % 8) return -1; gemv_kernel<K_BF16, 0><<<grid, block, 0, s>>>(y, x, T, *w); break;
    case DT_U32:
        switch (w->bits) {
        case 2: gemv_kernel<K_QUANT, 2><<<grid, block, 0, s>>>(y, x, T, *w); break;
        case 3: gemv_kernel<K_QUANT, 3><<<grid, block, 0, s>>>(y, x, T, *w); break;
        case 4: gemv_kernel<K_QUANT, 4><<<grid, block, 0, s>>>(y, x, T, *w); break;
        case 5: gemv_kernel<K_QUANT, 5><<<grid, block, 0, s>>>(y, x, T, *w); break;
        case 6: gemv_kernel<K_QUANT, 6><<<grid, block, 0, s>>>(y, x, T, *w); break;
        case 8: gemv_kernel<K_QUANT, 8><<<grid, block, 0, s>>>(y, x, T, *w); break;
        default: return -1;
        }
        break;
    default: return -1;
    }
    cudaLaunchCheck();
    return 0;
}
