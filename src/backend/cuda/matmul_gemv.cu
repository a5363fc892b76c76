/* matmul_gemv.cu — y[T, N] = x[T, K] · Wᵀ for small T (decode): one warp per output row.
 *
 * Reference: ref_matmul (backend/cpu/ref.c). Batch-1 decode reads every weight once per
 * token, so this kernel is about bandwidth: each lane streams 16-byte pieces of its row
 * (8 bf16/f16 values, 4 f32, or one 32-column unit of packed MLX codes: `bits` words)
 * and uses each piece for all T ≤ 8 tokens of the step. x stays f32 and is read through
 * L1 (it is tiny and shared by the warps of a block). Quantized values are dequantized in
 * registers, w = scale * code + bias, exactly as weight_row_f32 does.
 *
 * bf16/f16 at 1..2 tokens: gemvp_kernel (R = 4 shapes) and gemvp_multi_kernel (matmul_multi: q/k/v,
 * gate/up in one launch), gemvh_kernel's arithmetic with loads pipelined and issued before the
 * programmatic-dependent-launch wait (below). bf16/f16 and MLX 4/8-bit otherwise go through
 * gemvq_kernel/gemvh_kernel (multi-row, below); f32 and
 * 2/3/5/6-bit through gemv_kernel. Order: lane l accumulates units l, l+32, ... in order, then a fixed xor-shuffle tree;
 * nothing depends on T, so a token's outputs are bitwise the same alone or with others. */
#include "backend/cuda/bfmma.cuh"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/glu_act.cuh"

#define GEMV_TMAX 8
#define GEMV_WARPS 4
#ifndef GEMV_PIPE
#define GEMV_PIPE 4 /* gemvp: 16-byte weight pieces per lane per round (two rounds in registers) */
#endif
#ifndef GEMV_MINB
#define GEMV_MINB 8 /* gemvp: blocks per SM the registers must allow (<= 64 registers) */
#endif

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

/* The 8 bf16/f16 weights packed in a 16-byte unit v, as floats in column order (exact). */
template <int KIND>
__device__ __forceinline__ void unpack_unit8(uint4 v, float (&wv)[8]) {
    const uint32_t pk[4] = {v.x, v.y, v.z, v.w};
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
            float wv[8];
            unpack_unit8<KIND>(v, wv);
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
template <int TT, int NC = 1> /* NC = 0: plain loads (x written by a kernel a PDL launch overlaps); 2: .cg (x written by
                                 * other blocks of this kernel before a grid barrier: gemvp_mlp_kernel) */
__device__ __forceinline__ void ld_x8(float (&xv)[TT][8], const float *__restrict__ x, size_t K, int T, size_t col) {
#pragma unroll
    for (int t = 0; t < TT; t++) {
        if (t < T) {
            const float4 *px = (const float4 *)(x + t * K + col);
            float4 a = NC == 1 ? __ldg(px) : NC == 2 ? __ldcg(px) : __ldca(px), b = NC == 1 ? __ldg(px + 1) : NC == 2 ? __ldcg(px + 1) : __ldca(px + 1);
            xv[t][0] = a.x; xv[t][1] = a.y; xv[t][2] = a.z; xv[t][3] = a.w;
            xv[t][4] = b.x; xv[t][5] = b.y; xv[t][6] = b.z; xv[t][7] = b.w;
        } else {
#pragma unroll
            for (int j = 0; j < 8; j++) xv[t][j] = 0.f;
        }
    }
}

/* acc[t] += the 8 bf16/f16 weights packed in v · xv[t][0..8), in column order (one explicit
 * _rn fma per product): the inner step of gemvh and gemvp. */
template <int KIND, int TT>
__device__ __forceinline__ void fma_unit8(float (&acc)[TT], uint4 v, const float (&xv)[TT][8]) {
    float wv[8];
    unpack_unit8<KIND>(v, wv);
#pragma unroll
    for (int t = 0; t < TT; t++)
#pragma unroll
        for (int j = 0; j < 8; j++) acc[t] = __fmaf_rn(wv[j], xv[t][j], acc[t]);
}

__device__ __forceinline__ float code_f(uint32_t bits_in_mantissa) {
    return __fsub_rn(__uint_as_float(bits_in_mantissa | 0x4B000000u), 8388608.f);
}

/* ACC (matmul_add): y += the sum instead of y = the sum (one __fadd_rn of the stored value, read
 * with .cg after the PDL wait, and the sum: bitwise the add op's y + x) */
template <int TT, int R, int KS, bool ACC = false>
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
                if (lane == 0 && t < T && n0 + r < rows) {
                    float *p = y + (size_t)t * rows + n0 + r;
                    *p = ACC ? __fadd_rn(__ldcg(p), v) : v;
                }
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
                if (t < T && n0 + r < rows) {
                    float *p = y + (size_t)t * rows + n0 + r;
                    *p = ACC ? __fadd_rn(__ldcg(p), v) : v;
                }
            }
    }
}

/* warp_store for the GLU GEMV (gemvh_body, GLU): rows r < R/2 of the warp are gate rows n0 + r,
 * rows R/2 + r the up rows n0 + r; each row's sum is formed exactly as warp_store forms it (the
 * xor tree; with KS > 1 the group's first warp adds the warps' sums in warp order), then
 * y[t, n0 + r] = glu_act(gate, up) instead of the two stores. */
template <int TT, int R, int KS>
__device__ __forceinline__ void warp_store_glu(float (&acc)[R][TT], float *__restrict__ y, int T, int n0, int rows, int lane, int gelu) {
    constexpr int P = R / 2;
    __shared__ float red[KS > 1 ? GEMV_WARPS : 1][R][TT];
    const int warp = threadIdx.x >> 5;
    float v[R][TT];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < TT; t++) {
            float s = acc[r][t];
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
            v[r][t] = s;
            if (KS > 1 && lane == 0) red[warp][r][t] = s;
        }
    if (KS == 1) {
        if (lane == 0)
#pragma unroll
            for (int p = 0; p < P; p++)
#pragma unroll
                for (int t = 0; t < TT; t++)
                    if (t < T && n0 + p < rows) y[(size_t)t * rows + n0 + p] = glu_act(v[p][t], v[P + p][t], gelu);
    } else {
        __syncthreads();
        if (warp % KS == 0)
            for (int i = lane; i < P * TT; i += 32) {
                const int p = i / TT, t = i % TT;
                float g = red[warp][p][t], u = red[warp][P + p][t];
#pragma unroll
                for (int k = 1; k < KS; k++) {
                    g = __fadd_rn(g, red[warp + k][p][t]);
                    u = __fadd_rn(u, red[warp + k][P + p][t]);
                }
                if (t < T && n0 + p < rows) y[(size_t)t * rows + n0 + p] = glu_act(g, u, gelu);
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
        for (int r = 0; r < R; r++) fma_unit8<KIND, TT>(acc[r], v[r], xv);
    }
    warp_store<TT, R, KS>(acc, y, T, n0, w.rows, lane);
}

/* --- bf16/f16, pipelined, with programmatic dependent launch (the default) ---
 *
 * gemvh_body is gemvh_kernel's arithmetic (lane l accumulates units l, l+32·KS, ... of its rows
 * in order, the same __fmaf_rn chain, the same warp_store): only the schedule differs, so its
 * outputs are bitwise gemvh_kernel's. (1) The next U units' weights of every row are loaded
 * before the current ones are used (software pipelining: a lane keeps U·R 16-byte pieces in
 * flight at all times, not only at the start of an unrolled round). (2) The first round is
 * loaded BEFORE griddepcontrol.wait: launched with programmatic stream serialization, the
 * kernel's blocks start while the previous kernel (the one that writes x) still runs, and
 * stream their weights then — the weights never depend on it. x and y are touched only after
 * the wait. Every block also calls griddepcontrol.launch_dependents at its start, so a GEMV
 * after this one (q → k → v, gate → up one by one) may start as soon as all of this one's
 * blocks are resident. Kernels launched without the attribute: both instructions are no-ops.
 * pdl_wait/pdl_trigger/cuda_launch_pdl: cuda_common.cuh (KILN_CUDA_PDL=0: launched without the
 * attribute); KILN_CUDA_GEMV=h0: gemvh_kernel above. */

/* gemvh_body's variants (MODE bits): GM_GLU (matmul_glu: the warp's rows are R/2 gate/up pairs, y =
 * the GLU), GM_NORM (rms_matmul_multi / rms_matmul_glu: x is first normalized into shared memory by
 * norm_x_smem), GM_ACC (matmul_add: y += the sums). */
enum { GM_GLU = 1, GM_NORM = 2, GM_ACC = 4, GM_R4 = 8 /* gemvp_multi_kernel: every weight at R = 4 with its own KS (below) */,
       GM_PF = 16 /* gemvp_kernel after the decode attention: weight bytes prefetched into L2 before the wait (below) */ };
typedef struct gemv_ext {
    const void *wu;   /* GM_GLU: the up weight (wdata is the gate)               */
    int gelu;         /* GM_GLU: the activation (0 silu, 1 gelu-tanh)             */
    const float *nw;  /* GM_NORM: rms_norm's weight (NULL: none), offset and eps  */
    float off, eps;
} gemv_ext_t;

/* GM_NORM's x: the step's T rows of x [T, n] normalized into shared memory (xs, T·n floats) exactly as
 * rmsnorm.cu's rms_norm4_kernel computes rms_norm (256 < n <= 8192, n % 4 == 0): there a block of 256
 * threads, thread i summing squares of float4s i, i + 256, ... (fmaf in x, y, z, w order), an xor
 * tree per warp and the 8 warp sums added in warp order; here each of the 128 threads carries the
 * sums of two of those threads (i and i + 128), warp k's xor trees give warp sums k and k + 4, and
 * the same scaling (x · inv) · (off + w). x is read once (into xs, then scaled in place: a thread
 * scales the float4s it stored). x comes from the previous kernel: read after the PDL wait with .cg
 * loads (L2: no L1 line of x from an earlier kernel on this SM can be stale, x being the residual
 * that matmul_add rewrites every layer). Every thread of the block must call it (barriers). */
__device__ __forceinline__ void norm_x_smem(float *xs, const float *x, int T, int n, const gemv_ext_t &e) {
    __shared__ float ws[2][8];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, n4 = n / 4;
    for (int t = 0; t < T; t++) {
        const float4 *xr = (const float4 *)(x + (size_t)t * n);
        float4 *xo = (float4 *)(xs + (size_t)t * n);
        float s0 = 0.f, s1 = 0.f;
#pragma unroll 4
        for (int i = tid; i < n4; i += 256) {
            const float4 v = __ldcg(xr + i);
            xo[i] = v;
            s0 = fmaf(v.x, v.x, s0); s0 = fmaf(v.y, v.y, s0); s0 = fmaf(v.z, v.z, s0); s0 = fmaf(v.w, v.w, s0);
        }
#pragma unroll 4
        for (int i = tid + 128; i < n4; i += 256) {
            const float4 v = __ldcg(xr + i);
            xo[i] = v;
            s1 = fmaf(v.x, v.x, s1); s1 = fmaf(v.y, v.y, s1); s1 = fmaf(v.z, v.z, s1); s1 = fmaf(v.w, v.w, s1);
        }
        for (int o = 16; o > 0; o >>= 1) {
            s0 += __shfl_xor_sync(0xffffffffu, s0, o);
            s1 += __shfl_xor_sync(0xffffffffu, s1, o);
        }
        if (lane == 0) { ws[t][warp] = s0; ws[t][warp + 4] = s1; }
    }
    __syncthreads();
    for (int t = 0; t < T; t++) {
        float tot = 0.f;
        for (int i = 0; i < 8; i++) tot += ws[t][i];
        const float inv = 1.0f / sqrtf(tot / (float)n + e.eps);
        float4 *xo = (float4 *)(xs + (size_t)t * n);
        for (int i = tid; i < n4; i += GEMV_WARPS * 32) {
            float4 o = xo[i];
            if (e.nw) {
                const float4 wv = __ldg((const float4 *)e.nw + i);
                o.x = (o.x * inv) * (e.off + wv.x); o.y = (o.y * inv) * (e.off + wv.y);
                o.z = (o.z * inv) * (e.off + wv.z); o.w = (o.w * inv) * (e.off + wv.w);
            } else {
                o.x *= inv; o.y *= inv; o.z *= inv; o.w *= inv;
            }
            xo[i] = o;
        }
    }
    __syncthreads();
}

extern __shared__ float4 gemv_xs[]; /* GM_NORM: the normalized x, T·K floats (dynamic shared memory) */

template <int TT>
__device__ __forceinline__ void ld_x8_s(float (&xv)[TT][8], size_t K, int T, size_t col) {
    const float *xs = (const float *)gemv_xs;
#pragma unroll
    for (int t = 0; t < TT; t++) {
        if (t < T) {
            const float4 *px = (const float4 *)(xs + t * K + col);
            const float4 a = px[0], b = px[1];
            xv[t][0] = a.x; xv[t][1] = a.y; xv[t][2] = a.z; xv[t][3] = a.w;
            xv[t][4] = b.x; xv[t][5] = b.y; xv[t][6] = b.z; xv[t][7] = b.w;
        } else {
#pragma unroll
            for (int j = 0; j < 8; j++) xv[t][j] = 0.f;
        }
    }
}

/* PERS (gemvp_mlp_kernel, below): gemvh_body called for one row group of a persistent block; ps says
 * how this call waits after its first weight loads — PW_PDL the PDL wait, PW_GRID the kernel's grid
 * barrier (every warp of the block reaches it, even one with no rows), PW_NONE not at all (a later row
 * group) — and whether GM_NORM normalizes x into shared memory (the block's first row group) or finds it
 * there. No pdl_trigger at the start: the persistent kernel triggers after its grid barrier, once all of
 * its blocks are resident (a dependent kernel taking their places first would deadlock the barrier). */
struct gemv_pers { unsigned *ctr; unsigned target; int wait, norm, spin_ns; };
enum { PW_NONE, PW_PDL, PW_GRID };
/* All blocks of the grid (target = gridDim.x, all resident) arrive once: their writes before are
 * visible to every block after (fence + relaxed add, acquire loads; ctr[0] reset by the kernel's last
 * block at its exit). Then the dependents may launch (pdl_trigger). */
__device__ __forceinline__ void gemv_grid_barrier(unsigned *ctr, unsigned target, int spin_ns) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(ctr, 1u);
        unsigned v;
        /* a pause between polls (spin_ns): ~1000 blocks polling one L2 line would slow every weight line of
         * that L2 slice for the blocks still streaming */
        for (;;) {
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(ctr) : "memory");
            if (v >= target) break;
            if (spin_ns > 0) __nanosleep(spin_ns);
        }
    }
    __syncthreads();
    pdl_trigger();
}

template <int KIND, int TT, int R, int KS, int MODE = 0, int PERS = 0>
__device__ __forceinline__ void gemvh_body(float *__restrict__ y, const float *__restrict__ x, int T, const void *wdata, int rows, int cols,
                                           int bx, const gemv_ext_t &e = gemv_ext_t(), unsigned pf = 0, const gemv_pers *ps = nullptr) {
    constexpr bool GLU = MODE & GM_GLU, NORM = MODE & GM_NORM, ACC = MODE & GM_ACC;
    constexpr int U = GEMV_PIPE / R; /* units per round: U·R pieces in flight per lane */
    constexpr int RN = GLU ? R / 2 : R; /* output rows per warp (GLU: R/2 gate rows, then the same R/2 up rows) */
    const int lane = threadIdx.x & 31, n0 = (bx * (GEMV_WARPS / KS) + (threadIdx.x >> 5) / KS) * RN;
    const int kw = (threadIdx.x >> 5) % KS;
    if constexpr (!PERS) pdl_trigger();
    /* KS > 1: every warp reaches warp_store's barrier; NORM: every warp reaches norm_x_smem's (a warp
     * past the last row loads the last row's weights, then leaves after the norm); PERS: also the grid
     * barrier */
    const bool dead = KS == 1 && n0 >= rows;
    if (!NORM && dead && (!PERS || ps->wait != PW_GRID)) return;
    const size_t K = (size_t)cols;
    const int units = (int)(K / 8), step = 32 * KS;
    /* GM_R4 (gemvp_multi_kernel, four rows per group): one base pointer and 32-bit row offsets (fewer
     * registers: with four 64-bit row pointers that kernel spilled); the same rows as below */
    constexpr bool LIN = (MODE & GM_R4) && !GLU;
    const uint4 *rowp[LIN ? 1 : R];
    uint32_t roff[LIN ? R : 1];
    if constexpr (LIN) {
        const int nb = min(n0, rows - 1), rl = rows - 1 - n0;
        rowp[0] = (const uint4 *)((const uint16_t *)wdata + (size_t)nb * K);
#pragma unroll
        for (int r = 0; r < R; r++) roff[r] = (uint32_t)max(0, min(r, rl)) * (uint32_t)(K / 8);
    } else {
#pragma unroll
        for (int r = 0; r < R; r++) {
            const int rr = r % RN, n = n0 + rr < rows ? n0 + rr : rows - 1;
            rowp[r] = (const uint4 *)((const uint16_t *)(GLU && r >= RN ? e.wu : wdata) + (size_t)n * K);
        }
    }
    auto row = [&](int r) -> const uint4 * {
        if constexpr (LIN) return rowp[0] + roff[r];
        else return rowp[r];
    };
    float acc[R][TT];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < TT; t++) acc[r][t] = 0.f;
    int u = kw * 32 + lane;
    uint4 cur[U][R];
#pragma unroll
    for (int j = 0; j < U; j++)
#pragma unroll
        for (int r = 0; r < R; r++) cur[j][r] = u + j * step < units ? __ldg(row(r) + u + j * step) : make_uint4(0u, 0u, 0u, 0u);
    if constexpr ((MODE & GM_PF) != 0) {
        /* GM_PF (launched right after the batch-1 decode attention, which leaves DRAM mostly idle
         * while its latency chain runs): warp 0 of each of the first pf % 4096 blocks asks L2 for
         * bytes [bx·B, (bx + 1)·B) of the weight (contiguous, rows·cols 16-bit values; B = pf rounded
         * down to 4096) by bulk prefetches, so after the wait the rows stream from L2. Only a
         * cache hint: nothing here changes what is read or computed. */
        const size_t B = pf & ~4095u, tot = (size_t)rows * K * 2, b0 = (size_t)bx * B, b1 = min(b0 + B, tot);
        if (threadIdx.x < 32 && bx < (int)(pf & 4095u))
            for (size_t o = b0 + (size_t)lane * 4096; o < b1; o += 32 * 4096) {
                const uint32_t n = (uint32_t)min((size_t)4096, b1 - o);
                asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"((const char *)wdata + o), "r"(n) : "memory");
            }
    }
    if constexpr (PERS) {
        if (ps->wait == PW_PDL) pdl_wait();
        else if (ps->wait == PW_GRID) gemv_grid_barrier(ps->ctr, ps->target, ps->spin_ns);
    } else pdl_wait(); /* x (and y) belong to the previous kernels */
    if constexpr (NORM) {
        if (!PERS || ps->norm) norm_x_smem((float *)gemv_xs, x, T, cols, e);
        if (dead) return;
    }
    if constexpr (PERS && !NORM)
        if (dead) return;
    for (; u < units; u += U * step) {
        uint4 nxt[U][R];
#pragma unroll
        for (int j = 0; j < U; j++) {
            const int un = u + (U + j) * step;
#pragma unroll
            for (int r = 0; r < R; r++) nxt[j][r] = un < units ? __ldg(row(r) + un) : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int j = 0; j < U; j++) {
            const int uj = u + j * step;
            if (uj >= units) break;
            float xv[TT][8];
            if constexpr (NORM) ld_x8_s<TT>(xv, K, T, (size_t)uj * 8);
            else ld_x8<TT, PERS ? 2 : 0>(xv, x, K, T, (size_t)uj * 8);
#pragma unroll
            for (int r = 0; r < R; r++) fma_unit8<KIND, TT>(acc[r], cur[j][r], xv);
        }
#pragma unroll
        for (int j = 0; j < U; j++)
#pragma unroll
            for (int r = 0; r < R; r++) cur[j][r] = nxt[j][r];
    }
    if constexpr (GLU) warp_store_glu<TT, R, KS>(acc, y, T, n0, rows, lane, e.gelu);
    else warp_store<TT, R, KS, ACC>(acc, y, T, n0, rows, lane);
}

template <int KIND, int TT, int R, int KS, int MODE = 0>
__global__ void __launch_bounds__(GEMV_WARPS * 32, GEMV_MINB) gemvp_kernel(float *__restrict__ y, const float *__restrict__ x, int T, const void *wdata,
                                                                int rows, int cols, unsigned pf) {
    gemvh_body<KIND, TT, R, KS, MODE>(y, x, T, wdata, rows, cols, blockIdx.x, gemv_ext_t(), pf);
}

/* The (R, KS) of a weight (rows per warp, warps per row group), by shape and dtype only, for
 * every T: a row's arithmetic depends on KS alone, so a token's outputs do not depend on the
 * batch, and one launch over several weights (matmul_multi) gives each of them the bits of
 * its own launch. */
enum { CFG_R4, CFG_R2K2, CFG_R2, CFG_R1K4, CFG_R1, N_CFG };
static int gemv_cfg(const cuda_impl_t *c, const dweight_t *w, int T) {
    /* rows per warp: enough blocks to fill the GPU twice over */
    const int rows = w->rows, sms = c->sm_count > 0 ? c->sm_count : 132;
    const int R = rows >= 4 * GEMV_WARPS * 2 * sms ? 4 : rows >= 2 * GEMV_WARPS * 2 * sms ? 2 : 1;
    /* small matrices (R = 1: fewer than ~2k rows, e.g. k/v projections): the block's four
     * warps split K, so four times as many warps stream the weight (llama-3-8b k/v at one
     * warp per row: 8-10 us for 2-8 MB, ncu). KILN_CUDA_GEMV=ks1: one warp per row. */
    const int ks = R == 1 && !getenv_gemv_ks1(), ks2 = R == 2 && getenv_gemv_ks2(w);
    /* 3..8 tokens: two rows per warp on big matrices halve the x reads per row (x is
     * re-read from L1 for every row and token: that, not the weights, bounds these sizes) */
    if (T >= 3 && R >= 2) return getenv_gemv_r1() ? CFG_R1 : ks2 ? CFG_R2K2 : CFG_R2;
    if (R == 4) return CFG_R4;
    if (R == 2) return ks2 ? CFG_R2K2 : CFG_R2;
    return ks ? CFG_R1K4 : CFG_R1;
}
static const int cfg_R[N_CFG] = {4, 2, 2, 1, 1}, cfg_KS[N_CFG] = {1, 2, 1, GEMV_WARPS, 1};
static int cfg_blocks(int cfg, int rows) { return cdiv(rows, GEMV_WARPS / cfg_KS[cfg] * cfg_R[cfg]); }

static int getenv_gemv_h0(void) {
    static int v = -1;
    if (v < 0) { const char *e = getenv("KILN_CUDA_GEMV"); v = e && !strcmp(e, "h0"); }
    return v;
}
/* One launch of one weight: gemvp_kernel (PDL) for every shape. Alone (ncu, one graph-less
 * llama-3-8b decode step, L2 not flushed) it is faster at R = 4 (lm_head 240.7 -> 235.7 us) but
 * slower at R = 2 with split K (down 30.7 -> 31.9 us, o 12.3 -> 12.6: twice the registers, half
 * the blocks per SM); in the step, behind the PDL-launched rms_norm/glu, every shape on gemvp
 * measured llama-3-8b 194.4 tok/s vs 195.6/193.7 with R = 4 only, qwen3-0.6b 645.2 vs 631.2
 * (bench/cuda/RESULTS.md). KILN_CUDA_GEMV_PIPE=r4: R = 4 only, =0 (or KILN_CUDA_GEMV=h0): never. */
static int gemv_pipe(int cfg) {
    static int v = -2;
    if (v == -2) { const char *e = getenv("KILN_CUDA_GEMV_PIPE"); v = !e ? 1 : !strcmp(e, "r4") ? 4 : atoi(e) != 0; }
    if (getenv_gemv_h0()) return 0;
    return v == 4 ? cfg == CFG_R4 : v;
}

/* Small matrices at one token: the K-split shapes (R1K4, R2K2: qwen3-0.6b's q/k/v, o, gate/up, down)
 * at four rows per row group with the KS of their own configuration — the GM_R4 argument of
 * rms_matmul_multi (a row's sum depends on KS alone, so every output is bitwise that of R = 1 / 2),
 * a quarter / half the blocks, and each x piece loaded once for four rows. qwen3-0.6b bf16 (ncu, one
 * layer alone): q/k/v 8.2 -> 5.2 us, o 4.2 -> 3.9, gate/up 7.0 -> 6.0, down 4.8 -> 4.5; decode
 * 867-889 -> 987-999 tok/s (bench/cuda/RESULTS.md, session 11, helper-69). llama-3-8b's o/down
 * (R2K2, 4096 rows) measured slower at R = 4 (220 -> 204 tok/s), so single weights take it at R1K4
 * only. KILN_CUDA_GEMV_R4S=MASK: 1 matmul_multi without the norm, 2 matmul_glu (two gate/up pairs
 * per warp), 4 single weights (matmul, matmul_add) at R1K4 and R2K2, 8 single weights at R1K4;
 * default 11 (1 | 2 | 8), 0: R = 1 / 2 as before. */
static int r4s_on(int bit) {
    static int v = -1;
    if (v < 0) { const char *e = getenv("KILN_CUDA_GEMV_R4S"); v = e ? atoi(e) : 1 | 2 | 8; }
    return v & bit;
}
/* At one token: does a single weight (matmul, matmul_add: launch_p) of configuration cfg take four rows a
 * row group (GM_R4, cfg's KS), and does matmul_glu (launch_glu) take two gate/up pairs a warp? And the
 * row groups (blocks) of each launch. Shared by those launches and the one-launch MLP (gemv_mlp). */
static bool single_r4(int cfg) { return (cfg == CFG_R2K2 || cfg == CFG_R1K4) && (r4s_on(4) || (cfg == CFG_R1K4 && r4s_on(8))); }
static bool glu_r4(int cfg) { return (cfg == CFG_R2K2 || cfg == CFG_R1K4) && r4s_on(2); }
static int single_blocks1(int cfg, int rows) { return single_r4(cfg) ? cdiv(rows, GEMV_WARPS / cfg_KS[cfg] * 4) : cfg_blocks(cfg, rows); }
static int glu_blocks1(int cfg, int rows) { return cdiv(rows, GEMV_WARPS / cfg_KS[cfg] * (glu_r4(cfg) || cfg == CFG_R4 ? 2 : 1)); }

/* L2 prefetch of the weight of the GEMV that reads the batch-1 decode attention's output (the
 * o-projection): attention.cu names that output by cuda_gemv_prefetch_hint when it launches
 * attn_dec_mma_kernel on PDL; the next pipelined single-weight bf16 launch with that x at one token
 * (launch_p) takes gemvp_kernel<.., GM_PF>, whose first blocks, resident beside the attention's,
 * ask L2 for the weight's first KILN_CUDA_GEMV_L2PF MB (default 12; llama-3-8b bf16 (o: 32 MiB), two
 * H200 calls, bench/cuda/RESULTS.md session 13 helper-80: 8 and 12 MB 79.5 % of copy, 16 MB 79.1-79.3,
 * 24 MB 79.0, 32 MB 78.7, none 78.9 / 77.7; 0: off, the plain kernel) before their PDL wait, while
 * the attention's latency chain runs (more competes with the attention's own K/V reads and L2).
 * Per thread: the hint is the recording thread's. */
static thread_local const cuda_impl_t *pf_c;
static thread_local const float *pf_x;
void cuda_gemv_prefetch_hint(cuda_impl_t *c, const float *x) { pf_c = c; pf_x = x; }
static size_t l2pf_budget(void) {
    static long v = -1;
    if (v < 0) { const char *e = getenv("KILN_CUDA_GEMV_L2PF"); v = e ? atol(e) : 12; if (v < 0) v = 0; }
    return (size_t)v << 20;
}
/* gemvp_kernel's pf (0: none): bytes per prefetching block (a multiple of 4096: the budget over the
 * first 2·SMs blocks, resident beside the attention's one block per SM) + the number of such blocks */
static unsigned take_prefetch(cuda_impl_t *c, const float *x, const dweight_t *w, int blocks) {
    if (pf_c != c || pf_x != x || !x) return 0;
    pf_c = NULL; pf_x = NULL;
    const size_t tot = (size_t)w->rows * w->cols * 2, bud = l2pf_budget() < tot ? l2pf_budget() : tot;
    const int sms = c->sm_count > 0 ? c->sm_count : 132, pb = blocks < 2 * sms ? blocks : 2 * sms;
    if (!bud || pb <= 0) return 0;
    const size_t per = ((bud + pb - 1) / pb + 4095) / 4096 * 4096;
    return per > 0xfffff000u || pb > 4095 ? 0 : (unsigned)per | (unsigned)pb;
}

template <int KIND, int TT, int MODE = 0>
static void launch_p(cuda_impl_t *c, int cfg, float *y, const float *x, int T, const dweight_t *w, unsigned pf = 0) {
    if constexpr (TT == 1 && KIND == K_BF16 && !(MODE & GM_PF) && (MODE == 0 || MODE == GM_ACC)) {
        if (pf_x == x && pf_x) {
            const unsigned b = take_prefetch(c, x, w, single_blocks1(cfg, w->rows));
            if (b) { launch_p<KIND, TT, MODE | GM_PF>(c, cfg, y, x, T, w, b); return; }
        }
    }
    if constexpr (TT == 1) {
        if (single_r4(cfg)) {
            const dim3 grid(single_blocks1(cfg, w->rows)), block(GEMV_WARPS * 32);
            if (cfg == CFG_R2K2) cuda_launch_pdl(c->stream, gemvp_kernel<KIND, TT, 4, 2, MODE | GM_R4>, grid, block, 0, y, x, T, w->data, w->rows, w->cols, pf);
            else cuda_launch_pdl(c->stream, gemvp_kernel<KIND, TT, 4, GEMV_WARPS, MODE | GM_R4>, grid, block, 0, y, x, T, w->data, w->rows, w->cols, pf);
            return;
        }
    }
    const dim3 grid(cfg_blocks(cfg, w->rows)), block(GEMV_WARPS * 32);
    const void *d = w->data;
    const int rows = w->rows, cols = w->cols;
    switch (cfg) {
    case CFG_R4: cuda_launch_pdl(c->stream, gemvp_kernel<KIND, TT, 4, 1, MODE>, grid, block, 0, y, x, T, d, rows, cols, pf); break;
    case CFG_R2K2: cuda_launch_pdl(c->stream, gemvp_kernel<KIND, TT, 2, 2, MODE>, grid, block, 0, y, x, T, d, rows, cols, pf); break;
    case CFG_R2: cuda_launch_pdl(c->stream, gemvp_kernel<KIND, TT, 2, 1, MODE>, grid, block, 0, y, x, T, d, rows, cols, pf); break;
    case CFG_R1K4: cuda_launch_pdl(c->stream, gemvp_kernel<KIND, TT, 1, GEMV_WARPS, MODE>, grid, block, 0, y, x, T, d, rows, cols, pf); break;
    default: cuda_launch_pdl(c->stream, gemvp_kernel<KIND, TT, 1, 1, MODE>, grid, block, 0, y, x, T, d, rows, cols, pf); break;
    }
}
template <int KIND, int MODE = 0>
static void launch_p_tt(cuda_impl_t *c, int cfg, float *y, const float *x, int T, const dweight_t *w) {
    if (T == 1) launch_p<KIND, 1, MODE>(c, cfg, y, x, T, w);
    else launch_p<KIND, 2, MODE>(c, cfg, y, x, T, w);
}

/* --- matmul_multi for bf16/f16: one launch over up to four weights of one K and dtype (q/k/v,
 * gate/up), 1..2 tokens. Blocks [b0[i], b0[i+1]) run weight i with its own (R, KS) through
 * the same gemvh_body as its own launch: bitwise the same outputs. */
typedef struct gemv_multi {
    float *y[4];
    const void *d[4];
    int rows[4], cfg[4], b0[5];
    int n, cols;
    gemv_ext_t e; /* MODE GM_NORM: x's rms_norm */
} gemv_multi_t;

template <int KIND, int TT, int MODE = 0>
__global__ void __launch_bounds__(GEMV_WARPS * 32, GEMV_MINB) gemvp_multi_kernel(const float *__restrict__ x, int T, gemv_multi_t m) {
    const int b = blockIdx.x;
    const int i = b >= m.b0[3] && m.n > 3 ? 3 : b >= m.b0[2] && m.n > 2 ? 2 : b >= m.b0[1] && m.n > 1 ? 1 : 0;
    float *y = i == 0 ? m.y[0] : i == 1 ? m.y[1] : i == 2 ? m.y[2] : m.y[3];
    const void *d = i == 0 ? m.d[0] : i == 1 ? m.d[1] : i == 2 ? m.d[2] : m.d[3];
    const int rows = i == 0 ? m.rows[0] : i == 1 ? m.rows[1] : i == 2 ? m.rows[2] : m.rows[3];
    const int cfg = i == 0 ? m.cfg[0] : i == 1 ? m.cfg[1] : i == 2 ? m.cfg[2] : m.cfg[3];
    const int bx = b - (i == 0 ? m.b0[0] : i == 1 ? m.b0[1] : i == 2 ? m.b0[2] : m.b0[3]);
    if constexpr (MODE & GM_R4) { /* four rows per row group, the K split (KS) of the weight's own configuration */
        switch (cfg) {
        case CFG_R2K2: gemvh_body<KIND, TT, 4, 2, MODE>(y, x, T, d, rows, m.cols, bx, m.e); break;
        case CFG_R1K4: gemvh_body<KIND, TT, 4, GEMV_WARPS, MODE>(y, x, T, d, rows, m.cols, bx, m.e); break;
        default: gemvh_body<KIND, TT, 4, 1, MODE>(y, x, T, d, rows, m.cols, bx, m.e); break;
        }
        return;
    }
    switch (cfg) {
    case CFG_R4: gemvh_body<KIND, TT, 4, 1, MODE>(y, x, T, d, rows, m.cols, bx, m.e); break;
    case CFG_R2K2: gemvh_body<KIND, TT, 2, 2, MODE>(y, x, T, d, rows, m.cols, bx, m.e); break;
    case CFG_R2: gemvh_body<KIND, TT, 2, 1, MODE>(y, x, T, d, rows, m.cols, bx, m.e); break;
    case CFG_R1K4: gemvh_body<KIND, TT, 1, GEMV_WARPS, MODE>(y, x, T, d, rows, m.cols, bx, m.e); break;
    default: gemvh_body<KIND, TT, 1, 1, MODE>(y, x, T, d, rows, m.cols, bx, m.e); break;
    }
}

/* Returns 0 when launched (n bf16 or n f16 weights of one K, K % 8 == 0, 1..2 tokens, x
 * 16-byte aligned, the pipelined path on), -1 otherwise (the caller runs them one by one). */
static int gemv_multi_launch(cuda_impl_t *c, int n, float *const *y, const float *x, int T, const dweight_t *const *w, const gemv_ext_t *ne);
int cuda_gemv_multi(cuda_impl_t *c, int n, float *const *y, const float *x, int T, const dweight_t *const *w) {
    return gemv_multi_launch(c, n, y, x, T, w, NULL);
}

/* GM_NORM applies where rms_norm takes rms_norm4_kernel (256 < n <= 8192, n % 4 == 0, 16-byte aligned x
 * and weight: the order norm_x_smem reproduces), the normalized rows fit the default 48 KB of shared
 * memory, and n >= KILN_CUDA_FUSE_NORM_MIN_K (default 4096): every block redoes the norm after the
 * wait, which paid on llama-3-8b (n = 4096: 203.2 -> 206.4 tok/s) but cost qwen3-0.6b (n = 1024, its
 * GEMVs ~2-4 us: 708 -> 654 with both fusions; bench/cuda/RESULTS.md, session 8, helper-49).
 * KILN_CUDA_FUSE_NORM=0: never (rms_matmul_multi / rms_matmul_glu / matmul_add decline). */
static int fuse_norm_min_k(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("KILN_CUDA_FUSE_NORM"), *k = getenv("KILN_CUDA_FUSE_NORM_MIN_K");
        v = e && !strcmp(e, "0") ? 1 << 30 : k ? atoi(k) : 4096;
    }
    return v;
}
/* rms_matmul_multi (GM_NORM) with four rows per row group for every weight (GM_R4), each weight keeping
 * its configuration's K split KS: a row's sum depends on KS alone (lane l of warp k adds units
 * k·32 + l, + 32·KS, ... in order, the xor tree, the KS warps' sums in warp order), so the outputs are
 * bitwise those of the weight's own configuration (R = 1/2/4). The point is the block count: every
 * block normalizes x in its prologue (16 KB read from L2, two barriers), and llama-3-8b's q/k/v ran
 * 1024 + 1024 + 1024 blocks (q R = 2 KS = 2, k/v R = 1 KS = 4, each k/v block streaming one 8 KB row):
 * 24.6 us for 50.4 MB alone (2.0 TB/s, ncu), against 3.9 TB/s for gate/up. With R = 4: 512 + 256 + 256
 * blocks, one wave: 25.1/26.5 -> 18.7/21.9 us alone, llama-3-8b bf16 decode 216.3 -> 226.0 tok/s (same
 * binary, bench/cuda/RESULTS.md session 10). KILN_CUDA_GEMV_NORM_R4=0: each weight's own R, as before. */
static int norm_r4_on(void) {
    static int v = -1;
    if (v < 0) { const char *e = getenv("KILN_CUDA_GEMV_NORM_R4"); v = !(e && !strcmp(e, "0")); }
    return v;
}
static int norm_ok(const float *x, const float *nw, int n, int T) {
    return n >= fuse_norm_min_k() && n % 4 == 0 && n > 256 && n <= 8192 && !((uintptr_t)x & 15) && !((uintptr_t)nw & 15) &&
           (size_t)T * n * 4 <= 48 * 1024;
}

/* ne: GM_NORM with its rms_norm (NULL: x as it is) */
static int gemv_multi_launch(cuda_impl_t *c, int n, float *const *y, const float *x, int T, const dweight_t *const *w, const gemv_ext_t *ne) {
    if (n < 1 || n > 4 || T < 1 || T > 2 || ((uintptr_t)x & 15) || getenv_gemv_old() || getenv_gemv_h0()) return -1;
    for (int i = 0; i < n; i++)
        if ((w[i]->dtype != DT_BF16 && w[i]->dtype != DT_F16) || w[i]->dtype != w[0]->dtype || w[i]->cols != w[0]->cols || w[i]->cols % 8)
            return -1;
    gemv_multi_t m = {};
    m.n = n;
    m.cols = w[0]->cols;
    const bool r4 = T == 1 && (ne ? norm_r4_on() : r4s_on(1)); /* T = 2: R = 4 spilled (48 bytes at 64 registers) */
    int nb = 0;
    for (int i = 0; i < 4; i++) {
        m.b0[i] = nb;
        if (i >= n) continue;
        m.y[i] = y[i];
        m.d[i] = w[i]->data;
        m.rows[i] = w[i]->rows;
        m.cfg[i] = gemv_cfg(c, w[i], T);
        nb += r4 ? cdiv(w[i]->rows, GEMV_WARPS / cfg_KS[m.cfg[i]] * 4) : cfg_blocks(m.cfg[i], w[i]->rows);
    }
    m.b0[4] = nb;
    const dim3 grid(nb), block(GEMV_WARPS * 32);
    if (ne) {
        m.e = *ne;
        const size_t sm = (size_t)T * m.cols * 4;
        if (r4) {
            if (w[0]->dtype == DT_BF16) cuda_launch_pdl(c->stream, gemvp_multi_kernel<K_BF16, 1, GM_NORM | GM_R4>, grid, block, sm, x, T, m);
            else cuda_launch_pdl(c->stream, gemvp_multi_kernel<K_F16, 1, GM_NORM | GM_R4>, grid, block, sm, x, T, m);
        } else if (w[0]->dtype == DT_BF16) {
            if (T == 1) cuda_launch_pdl(c->stream, gemvp_multi_kernel<K_BF16, 1, GM_NORM>, grid, block, sm, x, T, m);
            else cuda_launch_pdl(c->stream, gemvp_multi_kernel<K_BF16, 2, GM_NORM>, grid, block, sm, x, T, m);
        } else {
            if (T == 1) cuda_launch_pdl(c->stream, gemvp_multi_kernel<K_F16, 1, GM_NORM>, grid, block, sm, x, T, m);
            else cuda_launch_pdl(c->stream, gemvp_multi_kernel<K_F16, 2, GM_NORM>, grid, block, sm, x, T, m);
        }
        return 0;
    }
    if (r4) {
        if (w[0]->dtype == DT_BF16) cuda_launch_pdl(c->stream, gemvp_multi_kernel<K_BF16, 1, GM_R4>, grid, block, 0, x, T, m);
        else cuda_launch_pdl(c->stream, gemvp_multi_kernel<K_F16, 1, GM_R4>, grid, block, 0, x, T, m);
    } else if (w[0]->dtype == DT_BF16) {
        if (T == 1) cuda_launch_pdl(c->stream, gemvp_multi_kernel<K_BF16, 1>, grid, block, 0, x, T, m);
        else cuda_launch_pdl(c->stream, gemvp_multi_kernel<K_BF16, 2>, grid, block, 0, x, T, m);
    } else {
        if (T == 1) cuda_launch_pdl(c->stream, gemvp_multi_kernel<K_F16, 1>, grid, block, 0, x, T, m);
        else cuda_launch_pdl(c->stream, gemvp_multi_kernel<K_F16, 2>, grid, block, 0, x, T, m);
    }
    return 0;
}

/* --- matmul_glu for bf16/f16 (backend.h): y[T, I] = act(x·Wgᵀ) ⊙ (x·Wuᵀ) in one launch, 1..2
 * tokens. A warp takes R/2 gate rows and the same R/2 up rows (R and KS from the gate weight's
 * own configuration, gemv_cfg: R = 1 becomes one pair, R = 2) through gemvh_body, so each row's
 * sum is bitwise what matmul / matmul_multi give it (a row's arithmetic depends on KS alone), and
 * writes glu_act of the pair — bitwise elementwise.cu's glu of those two outputs. No gate/up
 * outputs are written and no glu kernel runs: one launch and one PDL hop less per layer. */
template <int KIND, int TT, int R, int KS, int MODE>
__global__ void __launch_bounds__(GEMV_WARPS * 32, GEMV_MINB) gemvp_glu_kernel(float *__restrict__ y, const float *__restrict__ x, int T,
                                                                    const void *wg, int rows, int cols, gemv_ext_t e) {
    gemvh_body<KIND, TT, R, KS, MODE>(y, x, T, wg, rows, cols, blockIdx.x, e);
}

template <int KIND, int TT, int MODE>
static void launch_glu(cuda_impl_t *c, int cfg, float *y, const float *x, int T, const void *wg, int rows, int cols, const gemv_ext_t &e) {
    const int KS = cfg_KS[cfg], pairs = cfg == CFG_R4 ? 2 : 1; /* R = 4: two pairs per warp; R = 2 or 1: one */
    const size_t sm = MODE & GM_NORM ? (size_t)T * cols * 4 : 0;
    if constexpr (TT == 1) {
        if (glu_r4(cfg)) { /* two pairs per warp, the KS of cfg */
            const dim3 grid(glu_blocks1(cfg, rows)), block(GEMV_WARPS * 32);
            if (cfg == CFG_R2K2) cuda_launch_pdl(c->stream, gemvp_glu_kernel<KIND, TT, 4, 2, MODE>, grid, block, sm, y, x, T, wg, rows, cols, e);
            else cuda_launch_pdl(c->stream, gemvp_glu_kernel<KIND, TT, 4, GEMV_WARPS, MODE>, grid, block, sm, y, x, T, wg, rows, cols, e);
            return;
        }
    }
    const dim3 grid(cdiv(rows, GEMV_WARPS / KS * pairs)), block(GEMV_WARPS * 32);
    switch (cfg) {
    case CFG_R4: cuda_launch_pdl(c->stream, gemvp_glu_kernel<KIND, TT, 4, 1, MODE>, grid, block, sm, y, x, T, wg, rows, cols, e); break;
    case CFG_R2K2: cuda_launch_pdl(c->stream, gemvp_glu_kernel<KIND, TT, 2, 2, MODE>, grid, block, sm, y, x, T, wg, rows, cols, e); break;
    case CFG_R1K4: cuda_launch_pdl(c->stream, gemvp_glu_kernel<KIND, TT, 2, GEMV_WARPS, MODE>, grid, block, sm, y, x, T, wg, rows, cols, e); break;
    default: cuda_launch_pdl(c->stream, gemvp_glu_kernel<KIND, TT, 2, 1, MODE>, grid, block, sm, y, x, T, wg, rows, cols, e); break;
    }
}
template <int KIND, int MODE>
static void launch_glu_tt(cuda_impl_t *c, int cfg, float *y, const float *x, int T, const void *wg, int rows, int cols, const gemv_ext_t &e) {
    if (T == 1) launch_glu<KIND, 1, MODE>(c, cfg, y, x, T, wg, rows, cols, e);
    else launch_glu<KIND, 2, MODE>(c, cfg, y, x, T, wg, rows, cols, e);
}

/* KILN_CUDA_GLU_GEMV=0: matmul_glu runs matmul_multi + glu, rms_matmul_glu declines (A/B);
 * KILN_CUDA_GLU_MIN_K=N: only for K >= N (default 0: every K) */
static int glu_gemv_min_k(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("KILN_CUDA_GLU_GEMV"), *k = getenv("KILN_CUDA_GLU_MIN_K");
        v = e && !strcmp(e, "0") ? 1 << 30 : k ? atoi(k) : 0;
    }
    return v;
}

/* The bf16/f16 GEMV conditions of cuda_matmul / cuda_matmul_multi for one or two tokens: below
 * both GEMM thresholds, the pipelined kernel on, x 16-byte aligned, K % 8 == 0. */
static int gemvp_ok(cuda_impl_t *c, const dweight_t *w, const float *x, int T) {
    return T >= 1 && T <= 2 && T < c->gemm_min_t && !(w->dtype == DT_BF16 && T >= c->gemm_min_t_bf16) && !((uintptr_t)x & 15) &&
           (w->dtype == DT_BF16 || w->dtype == DT_F16) && w->cols % 8 == 0 && !getenv_gemv_old() && !getenv_gemv_h0();
}
static int multi_on(void) {
    const char *me = getenv("KILN_CUDA_MULTI");
    return !(me && !strcmp(me, "0"));
}

/* Returns 0 when launched (wg, wu both bf16 or both f16 of one shape on the GEMV: where
 * matmul_multi takes gemvp_multi_kernel), -1 otherwise. ne: GM_NORM (NULL: x as it is). */
static int cuda_gemv_glu(cuda_impl_t *c, float *y, const float *x, int T, const dweight_t *wg, const dweight_t *wu, int gelu, const gemv_ext_t *ne) {
    if (wg->cols < glu_gemv_min_k() || !multi_on() || !gemvp_ok(c, wg, x, T) || wu->dtype != wg->dtype || wu->rows != wg->rows ||
        wu->cols != wg->cols)
        return -1;
    const int cfg = gemv_cfg(c, wg, T);
    gemv_ext_t e = ne ? *ne : gemv_ext_t();
    e.wu = wu->data;
    e.gelu = gelu;
    if (wg->dtype == DT_BF16) {
        if (ne) launch_glu_tt<K_BF16, GM_GLU | GM_NORM>(c, cfg, y, x, T, wg->data, wg->rows, wg->cols, e);
        else launch_glu_tt<K_BF16, GM_GLU>(c, cfg, y, x, T, wg->data, wg->rows, wg->cols, e);
    } else {
        if (ne) launch_glu_tt<K_F16, GM_GLU | GM_NORM>(c, cfg, y, x, T, wg->data, wg->rows, wg->cols, e);
        else launch_glu_tt<K_F16, GM_GLU>(c, cfg, y, x, T, wg->data, wg->rows, wg->cols, e);
    }
    cuda_capture_tick(c);
    return 0;
}

/* backend.h matmul_glu: the fused GEMV above where matmul_multi would take the bf16/f16 GEMV,
 * else matmul_multi into g and u, then glu. */
int cuda_bfmma(cuda_impl_t *c, int n, float *const *y, const float *x, int T, const dweight_t *const *w, int split, int glu, int gelu);
int cuda_qwg_matmul_glu(backend_t *be, float *y, float *g, float *u, const float *x, int T, const weight_t *wg, const weight_t *wu, act_t act);

void cuda_matmul_glu(backend_t *be, float *y, float *g, float *u, const float *x, int T, const weight_t *wg, const weight_t *wu, act_t act) {
    if (T <= 0) return;
    cuda_impl_t *c = cuda_impl(be);
    if (cuda_gemv_glu(c, y, x, T, (const dweight_t *)wg->device, (const dweight_t *)wu->device, act == ACT_GELU_TANH, NULL) == 0) return;
    /* bf16 at 3..64 tokens: matmul_bfmma.cu's GLU tiles (bitwise matmul_multi + glu) */
    const dweight_t *wgu[2] = {(const dweight_t *)wg->device, (const dweight_t *)wu->device};
    float *const yy1[2] = {y, y};
    const int single = c->act_bf16 >= 0 ? c->act_bf16 : be->act_bf16_ok;
    if (T >= c->gemm_min_t_bf16 && cuda_bfmma(c, 2, yy1, x, T, wgu, !single, 1, act == ACT_GELU_TANH) == 0) {
        cuda_capture_tick(c);
        return;
    }
    /* MLX 4/8-bit at 9..64 tokens: matmul_wgmma.cu's multi launch with the GLU in its reduce (matmul.cu) */
    if (cuda_qwg_matmul_glu(be, y, g, u, x, T, wg, wu, act) == 0) return;
    /* ... past 64 (128) tokens up to 128–256 in runs of them (matmul.cu cuda_qwg_slices) */
    int b[QWG_MAX_SLICES + 1];
    const int ns = wgu[0]->dtype == DT_U32 && wgu[1]->dtype == DT_U32 ? cuda_qwg_slices(c, T, wgu[0], b) : 0;
    for (int s = 0; s < ns; s++) {
        const size_t o = (size_t)b[s] * wg->rows;
        cuda_matmul_glu(be, y + o, g + o, u + o, x + (size_t)b[s] * wg->cols, b[s + 1] - b[s], wg, wu, act);
    }
    if (ns) return;
    float *const yy[2] = {g, u};
    const weight_t *const ww[2] = {wg, wu};
    cuda_matmul_multi(be, 2, yy, x, T, ww);
    cuda_glu(be, y, g, u, (size_t)T * wg->rows, act);
}

/* the fused ops below at 3..64 tokens on matmul_bfmma.cu (bf16 weights; it declines other shapes):
 * where matmul / matmul_multi / matmul_glu take it, with KILN_CUDA_BFMMA_FUSE=1 or 2 (opt-in; unset:
 * they decline there as before). =1 bitwise the separate ops: the norm as rms_norm4_kernel computes
 * it, y += as the add op (test_bfmma_fused); =2 the norm's 1/rms on the sums (not bitwise). */
static int bfm_fused(cuda_impl_t *c, int T) { return T >= 3 && T >= c->gemm_min_t_bf16 && cuda_bfmma_fuse_on(); }

/* backend.h rms_matmul_glu: matmul_glu of rms_norm(x) with the norm in each block's prologue
 * (GM_NORM); declines (nonzero) where that kernel does not apply. */
int cuda_rms_matmul_glu(backend_t *be, float *y, const float *x, const float *nw, float off, float eps, int T, const weight_t *wg,
                        const weight_t *wu, act_t act) {
    cuda_impl_t *c = cuda_impl(be);
    if (cuda_lt_rms_matmul_glu(be, y, x, nw, off, eps, T, wg, wu, act) == 0) return 0; /* prefill sizes: matmul.cu */
    const dweight_t *dg = (const dweight_t *)wg->device, *du = (const dweight_t *)wu->device;
    if (bfm_fused(c, T)) { /* bf16 at 3..64 tokens: matmul_bfmma.cu's GLU tiles with the norm in the prologue */
        const dweight_t *wgu[2] = {dg, du};
        float *const yy[2] = {y, y};
        bfm_ext_t ex = {};
        ex.nw = nw; ex.off = off; ex.eps = eps; ex.norm = cuda_bfmma_fuse_on();
        const int single = c->act_bf16 >= 0 ? c->act_bf16 : be->act_bf16_ok;
        if (cuda_bfmma_ex(c, 2, yy, x, T, wgu, !single, 1, act == ACT_GELU_TANH, &ex) == 0) {
            cuda_capture_tick(c);
            return 0;
        }
    }
    if (!norm_ok(x, nw, dg->cols, T)) return -1;
    gemv_ext_t e = {};
    e.nw = nw; e.off = off; e.eps = eps;
    return cuda_gemv_glu(c, y, x, T, dg, du, act == ACT_GELU_TANH, &e);
}

/* --- rms_mlp at one token in ONE launch (gemvp_mlp_kernel): x += glu(h·Wgᵀ, h·Wuᵀ)·Wdᵀ, h = rms_norm(x)
 *
 * The separate path is two GEMV launches (rms_matmul_glu, then matmul_add of the down projection),
 * and for hidden sizes under KILN_CUDA_FUSE_NORM_MIN_K (qwen3-0.6b: 1024) two more kernels (the
 * add_rms_norm after o and after down). Each launch costs a PDL hop and the ramp of a new grid, which
 * on a small model is most of a GEMV (qwen3-0.6b: ~32 µs a layer for 31 MB of weights that stream in
 * ~7 µs). Here one persistent grid (every block resident: grid <= occupancy × SMs) runs
 *   phase 1: the gate/up row groups of the GLU GEMV with the norm in the prologue (GM_GLU | GM_NORM,
 *            once per block), g = the GLU output into a scratch vector;
 *   grid barrier: every block's g rows written (issued after the first down row group's weights are
 *            in flight: the same pre-wait loads PDL gives a launch);
 *   phase 2: the down row groups with y += (GM_ACC) into x.
 * Each row is computed by gemvh_body with the (R, KS) its own launch would take (gemv_cfg and the
 * launch_glu / launch_p rules), so x is bitwise rms_norm + matmul_glu + matmul_add (test_gemv_mlp).
 * Only the (R, KS) pairs of common shapes are instantiated; others decline to the separate ops.
 *
 * OPT-IN (KILN_CUDA_MLP_PERSIST=1), because it is SLOWER (bench/cuda/RESULTS.md, session 21, same calls):
 * llama-3-8b bf16 batch-1 196.6-198.5 tok/s against 220.8-224.4 for the separate launches, qwen3-0.6b
 * bf16 984-986 against 998-1044. A pause between the barrier's polls (KILN_CUDA_MLP_SPIN_NS, default
 * 256) gained ~2 % on qwen3 over none; fewer blocks an SM (KILN_CUDA_MLP_BPS=4 / 2) lost 4-32 %: the
 * weight stream needs all 8 blocks' warps busy, and a grid barrier over ~1000 blocks costs at least
 * what the PDL hop between two launches does. Kept, tested and bitwise, as the base for dataflow
 * instead of a barrier: readiness flags per chunk of g, so a down row's K loop waits only for the
 * chunk it reads next while phase 1's tail still runs. */
template <int KIND, int R1, int KS1, int R2, int KS2, int M2>
__global__ void __launch_bounds__(GEMV_WARPS * 32, GEMV_MINB)
    gemvp_mlp_kernel(float *__restrict__ x, float *__restrict__ g, const void *wg, int I, int H, gemv_ext_t e, const void *wd, unsigned *ctr,
                     int nb1, int nb2, int spin_ns) {
    gemv_pers ps = {ctr, gridDim.x, PW_PDL, 1, spin_ns};
    for (int b = blockIdx.x; b < nb1; b += gridDim.x) { /* phase 1: g [I] */
        gemvh_body<KIND, 1, R1, KS1, GM_GLU | GM_NORM, 1>(g, x, 1, wg, I, H, b, e, 0, &ps);
        if (KS1 > 1) __syncthreads(); /* warp_store's shared sums are reused by the next row group */
        ps.wait = PW_NONE;
        ps.norm = 0;
    }
    if ((int)blockIdx.x >= nb1) pdl_wait(); /* x belongs to the kernel before */
    ps.wait = PW_GRID;
    if ((int)blockIdx.x >= nb2) gemv_grid_barrier(ctr, gridDim.x, spin_ns);
    for (int b = blockIdx.x; b < nb2; b += gridDim.x) { /* phase 2: x [H] += g · Wdᵀ */
        gemvh_body<KIND, 1, R2, KS2, GM_ACC | M2, 1>(x, g, 1, wd, H, I, b, gemv_ext_t(), 0, &ps);
        if (KS2 > 1) __syncthreads();
        ps.wait = PW_NONE;
    }
    __syncthreads(); /* the last block out resets the barrier for the next launch (all have passed it) */
    if (threadIdx.x == 0 && atomicAdd(ctr + 1, 1u) == gridDim.x - 1) {
        ctr[0] = 0;
        ctr[1] = 0;
    }
}

/* opt-in (KILN_CUDA_MLP_PERSIST=1; read per call, so a test can switch it): measured slower than the
 * separate launches (bench/cuda/RESULTS.md session 21: llama-3-8b bf16 196.6 vs 220.8 tok/s, qwen3-0.6b
 * 984-986 vs 998-1027) */
static int mlp_pers_on(void) {
    const char *e = getenv("KILN_CUDA_MLP_PERSIST");
    return e && atoi(e) > 0;
}

template <int KIND, int R1, int KS1, int R2, int KS2, int M2>
static int mlp_launch(cuda_impl_t *c, float *x, float *g, const dweight_t *wg, const gemv_ext_t &e, const dweight_t *wd, int nb1, int nb2) {
    auto kern = gemvp_mlp_kernel<KIND, R1, KS1, R2, KS2, M2>;
    const size_t smem = (size_t)wg->cols * 4; /* GM_NORM: the normalized x */
    static int per_sm = -1;                   /* per instantiation; smem <= 48 KB (the caller's norm condition) */
    static size_t per_sm_smem;
    if (per_sm < 0 || per_sm_smem != smem) {
        int b = 0;
        cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kern, GEMV_WARPS * 32, smem));
        per_sm = b;
        per_sm_smem = smem;
    }
    if (per_sm < 1) return -1;
    /* KILN_CUDA_MLP_BPS=N: at most N blocks an SM (fewer arrivals at the barrier, more row groups a block);
     * KILN_CUDA_MLP_SPIN_NS: the pause between polls (default 256, 0: none) */
    static int bps = -1, spin = -1;
    if (bps < 0) { const char *v = getenv("KILN_CUDA_MLP_BPS"); bps = v && atoi(v) > 0 ? atoi(v) : 1000; }
    if (spin < 0) { const char *v = getenv("KILN_CUDA_MLP_SPIN_NS"); spin = v ? atoi(v) : 256; if (spin < 0) spin = 0; }
    const int res = per_sm < bps ? per_sm : bps;
    const int sms = c->sm_count > 0 ? c->sm_count : 132, want = nb1 > nb2 ? nb1 : nb2;
    const int grid = want < res * sms ? want : res * sms;
    cuda_launch_pdl(c->stream, kern, dim3(grid), dim3(GEMV_WARPS * 32), smem, x, g, wg->data, wg->rows, wg->cols, e, wd->data, c->mlp_ctr,
                    nb1, nb2, spin);
    return 0;
}
template <int KIND, int R1, int KS1>
static int mlp_launch2(cuda_impl_t *c, int p2, float *x, float *g, const dweight_t *wg, const gemv_ext_t &e, const dweight_t *wd, int nb1, int nb2) {
    switch (p2) {
    case 0: return mlp_launch<KIND, R1, KS1, 4, 1, 0>(c, x, g, wg, e, wd, nb1, nb2);
    case 1: return mlp_launch<KIND, R1, KS1, 2, 2, 0>(c, x, g, wg, e, wd, nb1, nb2);
    case 2: return mlp_launch<KIND, R1, KS1, 4, 2, GM_R4>(c, x, g, wg, e, wd, nb1, nb2);
    default: return mlp_launch<KIND, R1, KS1, 4, GEMV_WARPS, GM_R4>(c, x, g, wg, e, wd, nb1, nb2);
    }
}
template <int KIND>
static int mlp_launch1(cuda_impl_t *c, int p1, int p2, float *x, float *g, const dweight_t *wg, const gemv_ext_t &e, const dweight_t *wd, int nb1,
                       int nb2) {
    switch (p1) {
    case 0: return mlp_launch2<KIND, 4, 1>(c, p2, x, g, wg, e, wd, nb1, nb2);
    case 1: return mlp_launch2<KIND, 4, 2>(c, p2, x, g, wg, e, wd, nb1, nb2);
    default: return mlp_launch2<KIND, 4, GEMV_WARPS>(c, p2, x, g, wg, e, wd, nb1, nb2);
    }
}

/* 0: launched; -1: declined (T != 1, dtypes, shapes, a (R, KS) pair not instantiated, the norm's
 * conditions, scratch that cannot grow while a graph is captured) */
static int gemv_mlp(cuda_impl_t *c, float *x, const float *nw, float off, float eps, int T, const dweight_t *wg, const dweight_t *wu,
                    const dweight_t *wd, int gelu) {
    const int H = wg->cols, I = wg->rows;
    if (T != 1 || !mlp_pers_on() || !multi_on() || H < glu_gemv_min_k() || !gemvp_ok(c, wg, x, T) || wu->dtype != wg->dtype ||
        wd->dtype != wg->dtype || wu->rows != I || wu->cols != H || wd->rows != H || wd->cols != I || !gemvp_ok(c, wd, x, T) ||
        I % 4 || !gemv_pipe(gemv_cfg(c, wd, T)))
        return -1;
    /* the GEMV norm's conditions (norm_x_smem reproduces rms_norm4_kernel) without the min-K rule: the
     * norm runs once per resident block here, not once per row group */
    if (H % 4 || H <= 256 || H > 8192 || ((uintptr_t)x & 15) || ((uintptr_t)nw & 15)) return -1;
    /* phase 1: launch_glu's (R, KS) at one token */
    const int cfg1 = gemv_cfg(c, wg, T), cfg2 = gemv_cfg(c, wd, T);
    const int p1 = glu_r4(cfg1) ? (cfg1 == CFG_R2K2 ? 1 : 2) : cfg1 == CFG_R4 ? 0 : -1;
    /* phase 2: launch_p's (R, KS) for matmul_add at one token */
    const int p2 = single_r4(cfg2) ? (cfg2 == CFG_R2K2 ? 2 : 3) : cfg2 == CFG_R4 ? 0 : cfg2 == CFG_R2K2 ? 1 : -1;
    if (p1 < 0 || p2 < 0) return -1; /* (R, KS) pairs not instantiated */
    const int nb1 = glu_blocks1(cfg1, I), nb2 = single_blocks1(cfg2, H);
    /* the scratch g and the barrier's counters: made once (cudaMalloc is allowed in a relaxed capture; the
     * counters' zeroing is a stream op, so captured graphs replay it only in the step that made them) */
    const size_t gb = (size_t)I * 4;
    if (gb > c->mlp_g_bytes) {
        if (c->capturing && c->mlp_g) return -1; /* an earlier graph may still read the old one */
        if (c->mlp_g) { cuda_sync(c); cudaCheck(cudaFree(c->mlp_g)); }
        cudaCheck(cudaMalloc((void **)&c->mlp_g, gb));
        c->mlp_g_bytes = gb;
    }
    if (!c->mlp_ctr) {
        cudaCheck(cudaMalloc((void **)&c->mlp_ctr, 2 * sizeof(unsigned)));
        cudaCheck(cudaMemsetAsync(c->mlp_ctr, 0, 2 * sizeof(unsigned), c->stream));
    }
    gemv_ext_t e = {};
    e.nw = nw; e.off = off; e.eps = eps; e.wu = wu->data; e.gelu = gelu;
    const int r = wg->dtype == DT_BF16 ? mlp_launch1<K_BF16>(c, p1, p2, x, c->mlp_g, wg, e, wd, nb1, nb2)
                                       : mlp_launch1<K_F16>(c, p1, p2, x, c->mlp_g, wg, e, wd, nb1, nb2);
    if (r) return -1;
    c->mlp_pers_uses++;
    cuda_capture_tick(c);
    return 0;
}

int cuda_rms_mlp(backend_t *be, float *x, const float *nw, float off, float eps, int T, const weight_t *wg, const weight_t *wu,
                 const weight_t *wd, act_t act) {
    cuda_impl_t *c = cuda_impl(be);
    if (T == 1 && gemv_mlp(c, x, nw, off, eps, T, (const dweight_t *)wg->device, (const dweight_t *)wu->device, (const dweight_t *)wd->device,
                           act == ACT_GELU_TANH) == 0)
        return 0;
    return cuda_lt_rms_mlp(be, x, nw, off, eps, T, wg, wu, wd, act);
}
extern "C" long cuda_mlp_pers_uses(const backend_t *be) { return ((const cuda_impl_t *)be->impl)->mlp_pers_uses; }

/* backend.h rms_matmul_multi: matmul_multi of rms_norm(x), the norm in each block's prologue;
 * declines (nonzero) where gemvp_multi_kernel or the norm does not apply. */
int cuda_rms_matmul_multi(backend_t *be, int n, float *const *y, const float *x, const float *nw, float off, float eps, int T,
                          const weight_t *const *wt) {
    cuda_impl_t *c = cuda_impl(be);
    if (n < 1 || n > 4) return -1;
    if (cuda_lt_rms_matmul_multi(be, n, y, x, nw, off, eps, T, wt) == 0) return 0; /* prefill sizes: matmul.cu */
    const dweight_t *w[4];
    for (int i = 0; i < n; i++) w[i] = (const dweight_t *)wt[i]->device;
    if (bfm_fused(c, T)) { /* bf16 at 3..64 tokens: one matmul_bfmma.cu launch with the norm in its prologue */
        bfm_ext_t ex = {};
        ex.nw = nw; ex.off = off; ex.eps = eps; ex.norm = cuda_bfmma_fuse_on();
        const int single = c->act_bf16 >= 0 ? c->act_bf16 : be->act_bf16_ok;
        if (cuda_bfmma_ex(c, n, y, x, T, w, !single, 0, 0, &ex) == 0) {
            cuda_capture_tick(c);
            return 0;
        }
    }
    if (!multi_on()) return -1;
    for (int i = 0; i < n; i++)
        if (!gemvp_ok(c, w[i], x, T)) return -1;
    if (!norm_ok(x, nw, w[0]->cols, T)) return -1;
    gemv_ext_t e = {};
    e.nw = nw; e.off = off; e.eps = eps;
    if (gemv_multi_launch(c, n, y, x, T, w, &e)) return -1;
    cuda_capture_tick(c);
    return 0;
}

/* backend.h matmul_add: y += x·Wᵀ by the GEMV's stores (GM_ACC), where cuda_matmul takes the
 * pipelined bf16/f16 GEMV and y's rows are long enough for the norm fusion that follows it (the
 * residual stream: rows >= KILN_CUDA_FUSE_NORM_MIN_K; otherwise the model keeps add_rms_norm);
 * declines (nonzero) elsewhere. */
int cuda_matmul_add(backend_t *be, float *y, const float *x, int T, const weight_t *wt) {
    cuda_impl_t *c = cuda_impl(be);
    const dweight_t *w = (const dweight_t *)wt->device;
    if (cuda_lt_matmul_add(be, y, x, T, wt) == 0) return 0; /* prefill sizes: matmul.cu */
    if (bfm_fused(c, T)) { /* bf16 at 3..64 tokens: matmul_bfmma.cu with y += in its stores */
        bfm_ext_t ex = {};
        ex.acc = 1;
        const int single = c->act_bf16 >= 0 ? c->act_bf16 : be->act_bf16_ok;
        if (cuda_bfmma_ex(c, 1, &y, x, T, &w, !single, 0, 0, &ex) == 0) {
            cuda_capture_tick(c);
            return 0;
        }
    }
    /* small rows at one token too where the one-launch rms_mlp takes the norm that follows (llama.c calls
     * rms_mlp after a matmul_add of o) */
    if ((w->rows < fuse_norm_min_k() && !(T == 1 && mlp_pers_on())) || !gemvp_ok(c, w, x, T)) return -1;
    const int cfg = gemv_cfg(c, w, T);
    if (!gemv_pipe(cfg)) return -1;
    if (w->dtype == DT_BF16) launch_p_tt<K_BF16, GM_ACC>(c, cfg, y, x, T, w);
    else launch_p_tt<K_F16, GM_ACC>(c, cfg, y, x, T, w);
    cuda_capture_tick(c);
    return 0;
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

template <int TT>
static void launch_cfg(cuda_impl_t *c, int cfg, float *y, const float *x, int T, const dweight_t *w) {
    switch (cfg) {
    case CFG_R4: launch_fast<TT, 4>(c, y, x, T, w); break;
    case CFG_R2K2: launch_fast<TT, 2, 2>(c, y, x, T, w); break;
    case CFG_R2: launch_fast<TT, 2>(c, y, x, T, w); break;
    case CFG_R1K4: launch_fast<TT, 1, GEMV_WARPS>(c, y, x, T, w); break;
    default: launch_fast<TT, 1>(c, y, x, T, w); break;
    }
}

/* bf16/f16 with columns % 8 == 0 and MLX 4/8-bit: the multi-row kernels above (bf16/f16 at
 * 1..2 tokens: the pipelined gemvp_kernel unless KILN_CUDA_GEMV=h0; 3..8 tokens keep
 * gemvh_kernel: the x pieces of 4..8 tokens would not fit next to two rounds of weights). */
static int try_fast(cuda_impl_t *c, float *y, const float *x, int T, const dweight_t *w) {
    int ok = ((w->dtype == DT_BF16 || w->dtype == DT_F16) && w->cols % 8 == 0) || (w->dtype == DT_U32 && (w->bits == 4 || w->bits == 8));
    if (!ok || getenv_gemv_old()) return -1;
    const int cfg = gemv_cfg(c, w, T);
    if (w->dtype != DT_U32 && T <= 2 && gemv_pipe(cfg)) {
        if (w->dtype == DT_BF16) launch_p_tt<K_BF16>(c, cfg, y, x, T, w);
        else launch_p_tt<K_F16>(c, cfg, y, x, T, w);
        return 0;
    }
    if (T == 1) launch_cfg<1>(c, cfg, y, x, T, w);
    else if (T == 2) launch_cfg<2>(c, cfg, y, x, T, w);
    else if (T <= 4) launch_cfg<4>(c, cfg, y, x, T, w);
    else launch_cfg<8>(c, cfg, y, x, T, w);
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
