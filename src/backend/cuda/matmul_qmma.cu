/* matmul_qmma.cu — y[T, N] = x[T, K] · Wᵀ for MLX 4/8-bit weights on tensor cores, T ≤ 64.
 *
 * The "cuda" backend's matmul for quantized weights at decode and batched-decode sizes
 * (the f32 GEMV of matmul_gemv.cu stays the "cuda-f32" path). It never dequantizes:
 * with w = scale·code + bias per group,
 *     y[t, n] = Σ_segments  scale[n, g] · (Σ_k code[n, k] · x[t, k])  +  bias[n, g] · (Σ_k x[t, k])
 * where a segment is 32 or 64 columns inside one group. The code sums run on tensor cores
 * (mma.sync m16n8k16, bf16 in, f32 accumulate): codes are small integers, exact in bf16, and
 * x is split into bf16 hi + lo (x - hi is exact in f32), two MMAs, so the only rounding
 * beyond f32 is x's 17th mantissa bit (~1e-6 relative, measured in test_cuda_kernels). The
 * x sums are f32, from x itself.
 *
 * Work split: a block owns a 16-row tile of W and 8·NT tokens; its KS warps take the K
 * segments round-robin (split-K inside the block: up to 16 warps per 16 rows so small
 * matrices still fill the GPU), each keeps mma accumulators for its 16 rows × 8·NT tokens,
 * and the block adds the warps' partial results in warp order through shared memory. Each
 * warp streams its segments' codes and scale/bias words into a 4-stage shared-memory ring
 * with cp.async (every lane copies distinct 16-byte pieces, three segments in flight), so
 * enough bytes are in flight per SM for HBM bandwidth at batch 1.
 *
 * Fragments (PTX ISA, mma.m16n8k16, lane = 4g + q): A (weights, 16 rows × 16 k) a0a1 row g
 * k 2q,2q+1; a2a3 row g+8; a4a5 row g, k 2q+8,2q+9; a6a7 row g+8. B (x, 16 k × 8 tokens):
 * b0b1 k 2q,2q+1 token g; b2b3 k 2q+8,2q+9. D: d0d1 row g tokens 2q,2q+1; d2d3 row g+8.
 * 4-bit codes: byte q of a code word holds the codes of columns 2q (low nibble) and 2q+1;
 * each nibble is put under a bf16 exponent of 2^7 (0x43, nibble: 128 + c, exact) and 128 is
 * subtracted (codes4). 8-bit codes go through f32 (2^23 | code) and one pack to bf16x2.
 *
 * Determinism: a token's outputs depend only on its own x column (each MMA output column
 * is the dot product of one B column), the segment order and the warp order, none of which
 * depends on T or on the other tokens: bitwise the same alone or in a batch (tested). */
#include <type_traits>
#include "backend/cuda/mma_util.cuh"


/* Byte q of word v (4-bit codes of columns 2q, 2q+1) → bf16x2 (c0, c1), exact: PRMT makes
 * (b, 0x43, b, 0x43), the low nibble stays in byte 0 and the high one moves to byte 2 — a bf16
 * exponent of 2^7 over a 7-bit mantissa is 128 + c — and 128 is subtracted. */
__device__ __forceinline__ uint32_t codes4(uint32_t v, uint32_t sel) {
    const uint32_t u = __byte_perm(v, 0x43u, sel);
    uint32_t r = (u & 0xFF00FF0Fu) | ((u >> 4) & 0x000F0000u);
    __nv_bfloat162 d = __hsub2(*reinterpret_cast<__nv_bfloat162 *>(&r), __floats2bfloat162_rn(128.f, 128.f));
    return bf2_bits(d);
}
/* Bytes b, b+1 of word v (8-bit codes) → bf16x2 (c0, c1), exact. */
__device__ __forceinline__ uint32_t codes8(uint32_t v, int b) {
    const float f0 = __fsub_rn(__uint_as_float(__byte_perm(v, 0x4B000000u, 0x7440u | b)), 8388608.f);
    const float f1 = __fsub_rn(__uint_as_float(__byte_perm(v, 0x4B000000u, 0x7440u | (b + 1))), 8388608.f);
    return bf2_bits(__floats2bfloat162_rn(f0, f1));
}
/* (x0, x1) → bf16x2 hi and lo with hi + lo = x to 16 significant bits. */
__device__ __forceinline__ void split2(float x0, float x1, uint32_t &hi, uint32_t &lo) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(x0, x1);
    const float2 hf = __bfloat1622float2(h);
    hi = bf2_bits(h);
    lo = bf2_bits(__floats2bfloat162_rn(__fsub_rn(x0, hf.x), __fsub_rn(x1, hf.y)));
}


#define QMMA_STAGES 4

/* One stage of a warp's ring: the 16 rows' codes of one segment, then 16 words holding
 * the rows' scales and 16 holding their biases (the aligned 4-byte word that contains the
 * value: two 16-bit values or one f32). */
template <int BITS, int SEG> struct qstage {
    static constexpr int RB = SEG * BITS / 8;    /* code bytes per row per segment */
    static constexpr int BYTES = 16 * RB + 128; /* + T·SEG floats of x at decode sizes */
};

template <int BITS, int SEG>
__device__ __forceinline__ void issue_stage(unsigned char *dst, const dweight_t &w, int r0, int seg, int lane, int wpr, int ng,
                                            const float *x, int Tx) {
    constexpr int RB = qstage<BITS, SEG>::RB, CPR = RB / 16, CH = 16 * CPR;
    const int N = w.rows;
#pragma unroll
    for (int c = lane; c < CH; c += 32) {
        const int row = c / CPR, part = c % CPR, r = min(r0 + row, N - 1);
        cp_async16(dst + row * RB + part * 16, (const unsigned char *)w.data + (size_t)r * wpr * 4 + (size_t)seg * RB + part * 16);
    }
    const int row = lane & 15, r = min(r0 + row, N - 1);
    const size_t idx = (size_t)r * ng + (size_t)seg * SEG / w.group;
    const unsigned char *base = (const unsigned char *)(lane < 16 ? w.scales : w.biases);
    const uintptr_t a = w.sb_dtype == DT_F32 ? (uintptr_t)(base + idx * 4) : (uintptr_t)(base + idx * 2) & ~(uintptr_t)3;
    cp_async4(dst + 16 * RB + lane * 4, (const void *)a);
    /* decode sizes (Tx = T ≤ 8): the segment's x columns of every token ride along */
    for (int c = lane; c < Tx * (SEG / 4); c += 32) {
        const int t = c / (SEG / 4), part = c % (SEG / 4);
        cp_async16(dst + 16 * RB + 128 + (t * SEG + part * 4) * 4, x + (size_t)t * w.cols + (size_t)seg * SEG + part * 4);
    }
}

__device__ __forceinline__ float stage_sb(const unsigned char *p, int dt, int odd) { return sb_word_val(*(const uint32_t *)p, dt, odd); }

template <int BITS, int NT, int SEG, bool ONE>
__global__ void __launch_bounds__(512, NT == 1 ? 2 : 1) qmma_kernel(float *__restrict__ y, const float *__restrict__ x, int T, dweight_t w, int KS, int G, int SB) {
    extern __shared__ __align__(16) unsigned char smem[]; /* per warp a ring of QMMA_STAGES stages; then red [KS][16][8·NT] */
    constexpr int RB = qstage<BITS, SEG>::RB, KSTEPS = SEG / 16, TT = 8 * NT, S = QMMA_STAGES;
    const int Tx = NT == 1 ? T : 0; /* x in the stages (SB bytes each) */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
    const int N = w.rows, K = w.cols, r0 = blockIdx.x * 16, t0 = blockIdx.y * TT;
    const int wpr = K / 32 * BITS, ng = K / w.group, nseg = K / SEG;
    const int sbeg = (int)((long)warp * nseg / KS), nmine = (int)((long)(warp + 1) * nseg / KS) - sbeg; /* slot = warp: contiguous segments */
    const uint32_t sel4 = 0x4040u | (uint32_t)q | ((uint32_t)q << 8);
    /* a 16-bit scale/bias sits in the upper half of its aligned word when its address is 2 mod 4 */
    const size_t ia = (size_t)min(r0 + g, N - 1) * ng, ib = (size_t)min(r0 + g + 8, N - 1) * ng;
    const int soa = (int)((((uintptr_t)w.scales >> 1) + ia) & 1), sob = (int)((((uintptr_t)w.scales >> 1) + ib) & 1);
    const int boa = (int)((((uintptr_t)w.biases >> 1) + ia) & 1), bob = (int)((((uintptr_t)w.biases >> 1) + ib) & 1);
    unsigned char *ring = smem + (size_t)warp * S * SB;
    float acc[NT][4];
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) acc[j][i] = 0.f;
#pragma unroll
    for (int i = 0; i < S - 1; i++) {
        if (i < nmine) issue_stage<BITS, SEG>(ring + i * SB, w, r0, sbeg + i, lane, wpr, ng, x, Tx);
        cp_commit();
    }
    for (int it = 0; it < nmine; it++) {
        if (it + S - 1 < nmine)
            issue_stage<BITS, SEG>(ring + ((it + S - 1) % S) * SB, w, r0, sbeg + it + S - 1, lane, wpr, ng, x, Tx);
        cp_commit();
        cp_wait<S - 1>();
        __syncwarp();
        const unsigned char *st = ring + (it % S) * SB;
        const int seg = sbeg + it, col0 = seg * SEG, gi = col0 / w.group;
        /* which half of the scale word: the value's index r·ng + gi is odd */
        const float sA = stage_sb(st + 16 * RB + g * 4, w.sb_dtype, soa ^ (gi & 1));
        const float sB = stage_sb(st + 16 * RB + (g + 8) * 4, w.sb_dtype, sob ^ (gi & 1));
        const float bA = stage_sb(st + 16 * RB + 64 + g * 4, w.sb_dtype, boa ^ (gi & 1));
        const float bB = stage_sb(st + 16 * RB + 64 + (g + 8) * 4, w.sb_dtype, bob ^ (gi & 1));
        constexpr int WPS = RB / 4;
        uint32_t ca[WPS], cb[WPS];
#pragma unroll
        for (int i = 0; i < WPS / 4; i++) {
            const uint4 va = ((const uint4 *)(st + g * RB))[i], vb = ((const uint4 *)(st + (g + 8) * RB))[i];
            ca[4 * i] = va.x; ca[4 * i + 1] = va.y; ca[4 * i + 2] = va.z; ca[4 * i + 3] = va.w;
            cb[4 * i] = vb.x; cb[4 * i + 1] = vb.y; cb[4 * i + 2] = vb.z; cb[4 * i + 3] = vb.w;
        }
        const float *xst = (const float *)(st + 16 * RB + 128);
        float p[NT][4], xs[NT];
#pragma unroll
        for (int j = 0; j < NT; j++) {
            xs[j] = 0.f;
#pragma unroll
            for (int i = 0; i < 4; i++) p[j][i] = 0.f;
        }
#pragma unroll
        for (int s = 0; s < KSTEPS; s++) {
            uint32_t a[4];
            if constexpr (BITS == 4) {
                a[0] = codes4(ca[2 * s], sel4); a[1] = codes4(cb[2 * s], sel4);
                a[2] = codes4(ca[2 * s + 1], sel4); a[3] = codes4(cb[2 * s + 1], sel4);
            } else {
                const int b = 2 * (q & 1), odd = q >> 1; /* word 4s + q/2 (select, not a runtime index: registers) */
                a[0] = codes8(odd ? ca[4 * s + 1] : ca[4 * s], b); a[1] = codes8(odd ? cb[4 * s + 1] : cb[4 * s], b);
                a[2] = codes8(odd ? ca[4 * s + 3] : ca[4 * s + 2], b); a[3] = codes8(odd ? cb[4 * s + 3] : cb[4 * s + 2], b);
            }
#pragma unroll
            for (int j = 0; j < NT; j++) {
                if (t0 + 8 * j >= T) break; /* warp-uniform: the tile has no tokens */
                const int t = t0 + 8 * j + g;
                float2 x0 = make_float2(0.f, 0.f), x8 = x0;
                if (t < T) {
                    if (NT == 1) {
                        const float *xp = xst + t * SEG + 16 * s + 2 * q;
                        x0 = *(const float2 *)xp;
                        x8 = *(const float2 *)(xp + 8);
                    } else {
                        const float *xp = x + (size_t)t * K + col0 + 16 * s + 2 * q;
                        x0 = __ldg((const float2 *)xp);
                        x8 = __ldg((const float2 *)(xp + 8));
                    }
                }
                if constexpr (ONE) { /* x rounded once to bf16, Σx of the rounded values too: y = W·bf16(x) */
                    x0 = __bfloat1622float2(__floats2bfloat162_rn(x0.x, x0.y));
                    x8 = __bfloat1622float2(__floats2bfloat162_rn(x8.x, x8.y));
                }
                xs[j] = __fadd_rn(xs[j], __fadd_rn(__fadd_rn(x0.x, x0.y), __fadd_rn(x8.x, x8.y)));
                if constexpr (ONE) { /* one MMA */
                    mma_bf16(p[j], a, bf2_bits(__floats2bfloat162_rn(x0.x, x0.y)), bf2_bits(__floats2bfloat162_rn(x8.x, x8.y)));
                } else {
                    uint32_t h0, l0, h8, l8;
                    split2(x0.x, x0.y, h0, l0);
                    split2(x8.x, x8.y, h8, l8);
                    mma_bf16(p[j], a, h0, h8);
                    mma_bf16(p[j], a, l0, l8);
                }
            }
        }
        __syncwarp(); /* the stage may be refilled by the next iteration's copy */
#pragma unroll
        for (int j = 0; j < NT; j++) {
            if (t0 + 8 * j >= T) break;
            float v = xs[j]; /* Σx of this segment for token t0+8j+g, then fetched for tokens 2q, 2q+1 */
            v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 1));
            v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 2));
            const float x0 = __shfl_sync(0xffffffffu, v, 8 * q), x1 = __shfl_sync(0xffffffffu, v, 8 * q + 4);
            acc[j][0] = __fmaf_rn(bA, x0, __fmaf_rn(sA, p[j][0], acc[j][0]));
            acc[j][1] = __fmaf_rn(bA, x1, __fmaf_rn(sA, p[j][1], acc[j][1]));
            acc[j][2] = __fmaf_rn(bB, x0, __fmaf_rn(sB, p[j][2], acc[j][2]));
            acc[j][3] = __fmaf_rn(bB, x1, __fmaf_rn(sB, p[j][3], acc[j][3]));
        }
    }
    cp_wait<0>();
    __syncthreads(); /* the rings become the reduction buffer */
    float *red = (float *)smem;
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) red[((size_t)warp * 16 + g + 8 * (i >> 1)) * TT + 8 * j + 2 * q + (i & 1)] = acc[j][i];
    __syncthreads();
    for (int idx = threadIdx.x; idx < 16 * TT; idx += blockDim.x) {
        const int row = idx / TT, tok = idx % TT;
        float v = 0.f; /* the slots folded in order within each of the G groups, then the groups in order */
        for (int gq = 0; gq < G; gq++) {
            const int a = gq * KS / G, b = (gq + 1) * KS / G;
            float u = red[(size_t)a * 16 * TT + idx];
            for (int k = a + 1; k < b; k++) u = __fadd_rn(u, red[(size_t)k * 16 * TT + idx]);
            v = gq ? __fadd_rn(v, u) : u;
        }
        if (r0 + row < N && t0 + tok < T) y[(size_t)(t0 + tok) * N + r0 + row] = v;
    }
}

/* --- batched decode (9..64 tokens): the same sums, x shared by 128 rows -------------------
 * Above 8 tokens qmma_kernel reads x from global memory in every warp: a block holds 16 rows,
 * so each x element is fetched (through L2) and split into hi + lo once per 16 rows (16 bytes
 * of x per 0.5-byte 4-bit weight at 64 tokens).
 *
 * Summation order (both kernels, so a token's outputs are bitwise the same at any T ≤ 64): the
 * K segments are cut into KS slots of contiguous segments (qmma_ks, by shape), the slots into G
 * groups of contiguous slots (qmma_groups, by shape); a slot's sum is acc = b·Σx + (s·p + acc)
 * over its segments in order, a group's sum the slots' sums added in order, y the groups' sums
 * added in order. qmma_kernel: warp w = slot w, the block adds the warps' sums that way.
 *
 * qmma_wide_kernel: a block = 128 rows × ≤ 64 tokens × ONE group, i.e. all the segments of its
 * slots in a row (8..64 segments for llama-3-8b instead of 4..14), adding each finished slot's
 * sums into a running sum kept per thread in shared memory. x is split once per matmul by
 * qmma_xprep_kernel into bf16 hi (+ lo) in the B-fragment order of mma.m16n8k16 plus Σx per
 * (segment, token) — the same values and the same Σx lane order as qmma_kernel's — and each
 * segment's x tile rides in the cp.async ring with the codes and scale/bias words (no
 * splitting, no x registers, one barrier per segment). 8 warps = 4 row-warps × 2 token-warps,
 * a warp 32 rows (two A tiles sharing every x fragment load) × half the tokens; two blocks per
 * SM. The groups' sums go to a [G][T][N] scratch and qmma_reduce_kernel adds them in order
 * (G = 1 writes y directly): G is chosen so the grid is about two blocks per SM
 * (KILN_CUDA_QMMA_WAVE, default 2). KILN_CUDA_QMMA_WIDE=N: the fewest tokens that take it
 * (default 9; 0: never, A/B). ONE (opt-in: KILN_CUDA_ACT=bf16 or KILN_CUDA_QMMA_ACT=bf16; NOT
 * the precision policy's default, which keeps hi + lo here: x rounded once moved the dense MLX
 * fixtures by 1.5-2.8e-2, over the 1e-2 bar): x rounded once to bf16 and Σx summed over the
 * rounded values, i.e. y = W·bf16(x) with exact products, one MMA per k-step, in both kernels. */
#define QW_ROWS 128
#define QW_STAGES 3

template <int SEG, int NT, bool ONE> struct wx {
    static constexpr int TP = 8 * NT;                               /* tokens per block (padded) */
    static constexpr int XB = (SEG / 16) * TP * 4 * (ONE ? 8 : 16); /* fragments: [KSTEPS][TP][4 q] of (hi k, hi k+8[, lo k, lo k+8]) */
    static constexpr int BYTES = XB + 4 * TP;                      /* + Σx per token */
};
template <int BITS, int SEG, int NT, bool ONE> struct wstage {
    static constexpr int CB = QW_ROWS * qstage<BITS, SEG>::RB;  /* codes [128 rows][RB] */
    static constexpr int BYTES = CB + 8 * QW_ROWS + wx<SEG, NT, ONE>::BYTES; /* + scale words, bias words, x */
};

/* x [T][K] → per segment: the B fragments of its KSTEPS k-steps for TP tokens (tokens ≥ T zero),
 * then Σx of the segment per token, summed as qmma_kernel's lanes do (lane q: Σ_s (x[2q] + x[2q+1])
 * + (x[2q+8] + x[2q+9]), then q ^ 1, then q ^ 2). A thread per (segment, token, q). */
template <int SEG, int NT, bool ONE>
__global__ void qmma_xprep_kernel(unsigned char *__restrict__ xsp, const float *__restrict__ x, int T, int K) {
    constexpr int KSTEPS = SEG / 16, TP = wx<SEG, NT, ONE>::TP, XB = wx<SEG, NT, ONE>::XB;
    const int i = blockIdx.x * blockDim.x + threadIdx.x, nseg = K / SEG;
    const bool valid = i < nseg * TP * 4; /* no early return: the shuffles below take whole warps */
    const int q = i & 3, t = (i >> 2) % TP, seg = i / (TP * 4);
    unsigned char *base = xsp + (size_t)seg * wx<SEG, NT, ONE>::BYTES;
    float v = 0.f;
#pragma unroll
    for (int s = 0; s < KSTEPS; s++) {
        float2 x0 = make_float2(0.f, 0.f), x8 = x0;
        if (valid && t < T) {
            const float *xp = x + (size_t)t * K + (size_t)seg * SEG + 16 * s + 2 * q;
            x0 = *(const float2 *)xp;
            x8 = *(const float2 *)(xp + 8);
        }
        if constexpr (ONE) { /* rounded once, Σx of the rounded values (qmma_kernel's ONE) */
            x0 = __bfloat1622float2(__floats2bfloat162_rn(x0.x, x0.y));
            x8 = __bfloat1622float2(__floats2bfloat162_rn(x8.x, x8.y));
        }
        v = __fadd_rn(v, __fadd_rn(__fadd_rn(x0.x, x0.y), __fadd_rn(x8.x, x8.y)));
        if (!valid) continue;
        if constexpr (ONE) {
            ((uint2 *)base)[(s * TP + t) * 4 + q] = make_uint2(bf2_bits(__floats2bfloat162_rn(x0.x, x0.y)), bf2_bits(__floats2bfloat162_rn(x8.x, x8.y)));
        } else {
            uint4 u;
            split2(x0.x, x0.y, u.x, u.z);
            split2(x8.x, x8.y, u.y, u.w);
            ((uint4 *)base)[(s * TP + t) * 4 + q] = u;
        }
    }
    v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 1));
    v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 2));
    if (valid && q == 0) ((float *)(base + XB))[t] = v;
}

template <int BITS, int SEG, int NT, bool ONE>
__device__ __forceinline__ void wide_issue(unsigned char *dst, const dweight_t &w, const unsigned char *xsp, int r0, int seg, int tid, int wpr, int ng) {
    constexpr int RB = qstage<BITS, SEG>::RB, CPR = RB / 16, CH = QW_ROWS * CPR, CB = wstage<BITS, SEG, NT, ONE>::CB;
    constexpr int XC = wx<SEG, NT, ONE>::BYTES / 16;
    const int N = w.rows;
#pragma unroll
    for (int c = tid; c < CH; c += 256) {
        const int row = c / CPR, part = c % CPR, r = min(r0 + row, N - 1);
        cp_async16(dst + row * RB + part * 16, (const unsigned char *)w.data + (size_t)r * wpr * 4 + (size_t)seg * RB + part * 16);
    }
    /* thread i < 128: the scale word of row i; 128..255: the bias word */
    {
        const int row = tid & (QW_ROWS - 1), r = min(r0 + row, N - 1);
        const size_t idx = (size_t)r * ng + (size_t)seg * SEG / w.group;
        const unsigned char *base = (const unsigned char *)(tid < QW_ROWS ? w.scales : w.biases);
        const uintptr_t a = w.sb_dtype == DT_F32 ? (uintptr_t)(base + idx * 4) : (uintptr_t)(base + idx * 2) & ~(uintptr_t)3;
        cp_async4(dst + CB + tid * 4, (const void *)a);
    }
    const unsigned char *xs = xsp + (size_t)seg * wx<SEG, NT, ONE>::BYTES;
#pragma unroll
    for (int c = tid; c < XC; c += 256) cp_async16(dst + CB + 8 * QW_ROWS + c * 16, xs + c * 16);
}

/* The wide and big kernels' shared ends. A slot ends: the block's running sum in shared memory
 * (run, one plane of 256 per accumulator) becomes slot (first) or run + slot, in qmma_kernel's
 * order; the accumulators restart at 0 unless the group's last slot leaves the sum in them. */
template <int NJ>
__device__ __forceinline__ void qmma_slot_end(float (&acc)[2][NJ][4], float *run, int tid, bool first, bool last) {
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int j = 0; j < NJ; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                float *r = run + ((m * NJ + j) * 4 + i) * 256 + tid;
                float v = acc[m][j][i];
                if (!first) v = __fadd_rn(*r, v);
                if (!last) { *r = v; v = 0.f; }
                acc[m][j][i] = v;
            }
}
/* A warp's 32 rows (from row0) × NJ token tiles (from tile jt) of the group's sums to o [T][N]. */
template <int NJ>
__device__ __forceinline__ void qmma_store(float *o, const float (&acc)[2][NJ][4], int row0, int g, int q, int jt, int N, int T) {
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int j = 0; j < NJ; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int row = row0 + 16 * m + g + 8 * (i >> 1), t = 8 * (jt + j) + 2 * q + (i & 1);
                if (row < N && t < T) o[(size_t)t * N + row] = acc[m][j][i];
            }
}

template <int BITS, int SEG, int NT, bool ONE>
__global__ void __launch_bounds__(256, 2) qmma_wide_kernel(float *__restrict__ out, const unsigned char *__restrict__ xsp, int T, dweight_t w, int KS, int G) {
    extern __shared__ __align__(16) unsigned char smem[];
    constexpr int RB = qstage<BITS, SEG>::RB, KSTEPS = SEG / 16, TP = 8 * NT, JW = NT / 2, S = QW_STAGES;
    constexpr int SB = wstage<BITS, SEG, NT, ONE>::BYTES, CB = wstage<BITS, SEG, NT, ONE>::CB, XB = wx<SEG, NT, ONE>::XB;
    unsigned char *ring = smem;
    float *run = (float *)(smem + S * SB); /* [2·JW·4][256]: each thread's sum of the group's finished slots */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
    const int N = w.rows, K = w.cols, r0 = blockIdx.x * QW_ROWS, grp = blockIdx.y;
    const int wpr = K / 32 * BITS, ng = K / w.group, nseg = K / SEG;
    const int s0 = grp * KS / G, s1 = (grp + 1) * KS / G;
    const int seg0 = (int)((long)s0 * nseg / KS), n = (int)((long)s1 * nseg / KS) - seg0;
    const uint32_t sel4 = 0x4040u | (uint32_t)q | ((uint32_t)q << 8);
    const int wr = (warp & 3) * 32, jt = (warp >> 2) * JW; /* the warp's first row (two 16-row tiles) and token tile */
    /* which half of a 16-bit scale/bias word: (address/2 + r·ng + gi) odd; bit 2m+h: row wr + 16m + 8h + g */
    int sodd = 0, bodd = 0;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const size_t ir = (size_t)min(r0 + wr + 8 * k + g, N - 1) * ng;
        sodd |= (int)((((uintptr_t)w.scales >> 1) + ir) & 1) << k;
        bodd |= (int)((((uintptr_t)w.biases >> 1) + ir) & 1) << k;
    }
    float acc[2][JW][4];
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int j = 0; j < JW; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[m][j][i] = 0.f;
#pragma unroll
    for (int i = 0; i < S - 1; i++) {
        if (i < n) wide_issue<BITS, SEG, NT, ONE>(ring + i * SB, w, xsp, r0, seg0 + i, tid, wpr, ng);
        cp_commit();
    }
    int slot = s0, send = (int)((long)(s0 + 1) * nseg / KS); /* the current slot and its end segment */
    for (int it = 0; it < n; it++) {
        const int seg = seg0 + it, gi = seg * SEG / w.group;
        cp_wait<S - 2>(); /* this segment's group (S-2 later groups may still fly) */
        __syncthreads();  /* visible to all; stage (it-1)%S free */
        if (it + S - 1 < n) wide_issue<BITS, SEG, NT, ONE>(ring + ((it + S - 1) % S) * SB, w, xsp, r0, seg + S - 1, tid, wpr, ng);
        cp_commit();
        const unsigned char *st = ring + (it % S) * SB;
        float sc[4], bi[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            sc[k] = stage_sb(st + CB + (wr + 8 * k + g) * 4, w.sb_dtype, ((sodd >> k) & 1) ^ (gi & 1));
            bi[k] = stage_sb(st + CB + 4 * QW_ROWS + (wr + 8 * k + g) * 4, w.sb_dtype, ((bodd >> k) & 1) ^ (gi & 1));
        }
        const unsigned char *xf = st + CB + 8 * QW_ROWS;
        const float *xsum = (const float *)(xf + XB);
        float p[2][JW][4];
#pragma unroll
        for (int m = 0; m < 2; m++)
#pragma unroll
            for (int j = 0; j < JW; j++)
#pragma unroll
                for (int i = 0; i < 4; i++) p[m][j][i] = 0.f;
#pragma unroll 1 /* all four k-steps unrolled spilled at the 128 registers two blocks per SM allow */
        for (int s = 0; s < KSTEPS; s++) {
            uint32_t a[2][4];
#pragma unroll
            for (int m = 0; m < 2; m++) {
                const unsigned char *ra = st + (wr + 16 * m + g) * RB, *rb = ra + 8 * RB;
                if constexpr (BITS == 4) { /* words 2s, 2s+1 of rows g, g+8 */
                    const uint2 va = *(const uint2 *)(ra + 8 * s), vb = *(const uint2 *)(rb + 8 * s);
                    a[m][0] = codes4(va.x, sel4); a[m][1] = codes4(vb.x, sel4);
                    a[m][2] = codes4(va.y, sel4); a[m][3] = codes4(vb.y, sel4);
                } else { /* words 4s..4s+3 */
                    const uint4 va = *(const uint4 *)(ra + 16 * s), vb = *(const uint4 *)(rb + 16 * s);
                    const int b = 2 * (q & 1), odd = q >> 1;
                    a[m][0] = codes8(odd ? va.y : va.x, b); a[m][1] = codes8(odd ? vb.y : vb.x, b);
                    a[m][2] = codes8(odd ? va.w : va.z, b); a[m][3] = codes8(odd ? vb.w : vb.z, b);
                }
            }
#pragma unroll
            for (int j = 0; j < JW; j++) {
                if (8 * (jt + j) >= T) break; /* warp-uniform: the tile has no tokens */
                const int e = (s * TP + 8 * (jt + j) + g) * 4 + q;
                if constexpr (ONE) {
                    const uint2 xv = ((const uint2 *)xf)[e];
#pragma unroll
                    for (int m = 0; m < 2; m++) mma_bf16(p[m][j], a[m], xv.x, xv.y);
                } else {
                    const uint4 xv = ((const uint4 *)xf)[e];
#pragma unroll
                    for (int m = 0; m < 2; m++) {
                        mma_bf16(p[m][j], a[m], xv.x, xv.y);
                        mma_bf16(p[m][j], a[m], xv.z, xv.w);
                    }
                }
            }
        }
#pragma unroll
        for (int j = 0; j < JW; j++) {
            if (8 * (jt + j) >= T) break;
            const float x0 = xsum[8 * (jt + j) + 2 * q], x1 = xsum[8 * (jt + j) + 2 * q + 1];
#pragma unroll
            for (int m = 0; m < 2; m++) {
                acc[m][j][0] = __fmaf_rn(bi[2 * m], x0, __fmaf_rn(sc[2 * m], p[m][j][0], acc[m][j][0]));
                acc[m][j][1] = __fmaf_rn(bi[2 * m], x1, __fmaf_rn(sc[2 * m], p[m][j][1], acc[m][j][1]));
                acc[m][j][2] = __fmaf_rn(bi[2 * m + 1], x0, __fmaf_rn(sc[2 * m + 1], p[m][j][2], acc[m][j][2]));
                acc[m][j][3] = __fmaf_rn(bi[2 * m + 1], x1, __fmaf_rn(sc[2 * m + 1], p[m][j][3], acc[m][j][3]));
            }
        }
        if (seg + 1 == send) { /* a slot ends: run = slot (first) or run + slot, in qmma_kernel's order */
            qmma_slot_end(acc, run, tid, slot == s0, slot + 1 == s1);
            slot++;
            send = (int)((long)(slot + 1) * nseg / KS);
        }
    }
    cp_wait<0>();
    /* the group's sums: y when G == 1, else the group's plane [T][N] of the scratch */
    float *o = out + (size_t)grp * T * N;
    qmma_store(o, acc, r0 + wr, g, q, jt, N, T);
}

/* --- qmma_big_kernel (9..64 tokens, large matrices): the wide kernel's sums in a GEMM-shaped tile
 * ncu of qmma_wide_kernel at 64 tokens (llama-3-8b q4 gate, 14336 x 4096): 12.7 instructions per
 * MMA, 0.49 issued per scheduler-cycle (3.4 warps, 0.8 eligible), tensor pipe 23 % active, 0.29
 * TB/s, 59k local-memory (spill) requests. Here a block = 256 rows x all tokens (one block per SM,
 * up to 255 registers, no spills): warp w owns rows 32w..32w+31 (two A tiles) x every token tile,
 * so a decoded code fragment feeds 2·NT MMAs per x rounding (16 at 64 tokens, was 8), a
 * scale/bias word 4·NT, each x fragment two row tiles; a k-step's x fragments are loaded first
 * and its MMAs issued hi for every tile, then lo (consecutive MMAs independent); the first MMA of
 * a segment takes C = 0 (no zeroing). The ring holds S stages of (codes of 256 rows, scale/bias
 * words, the segment's x tile), 4..8 deep by size (6 for 4-bit at 64 tokens: 40 KB of codes in
 * flight per SM, was 2 x 8 KB). Everything a token's outputs depend on — segments, slots, groups
 * (qmma_groups of the shape), the MMA operands and their order per accumulator, the fma order —
 * is qmma_wide_kernel's, so the bits are the same (tested with KILN_CUDA_QMMA_BIG=2).
 * Measured (H200, llama-3-8b q4 shapes): ≤ 32 tokens ~20 % faster than qmma_wide_kernel (lm_head
 * 674 → 545 µs, gate 90 → 72, down 76 → 63, q 26 → 21); at 64 tokens 7.5 instead of 12.7
 * instructions per MMA but NOT faster (lm_head 867 vs 859 µs): ~25 cycles per MMA per scheduler
 * either way, tensor pipe ~25 % active — the limit there is not the instruction count (a 512-thread
 * variant, 16 warps of 32 rows x half the tokens at 128 registers, was slower: gate 133 vs 115 µs).
 * ncu stall reasons per issued instruction, both kernels at 64 tokens: "wait" (fixed-latency
 * dependency, i.e. the stall counts the compiler puts after each mma.sync) 2.7 cycles, the largest;
 * ~20 cycles per MMA per warp — the per-warp mma.sync rate caps it (next: wgmma).
 * So the default takes it for steps of ≤ 32 tokens where cdiv(N,256)·G fills ≥ 3/4 of the SMs
 * (llama-3-8b q/o/gate/up/down/lm_head); KILN_CUDA_QMMA_BIG=0 never, =2 always (tests). */
#define QB_ROWS 256
#define QB_SMEM_MAX (227 * 1024)

template <int BITS, int SEG, int NT, bool ONE> struct bstage {
    static constexpr int CB = QB_ROWS * qstage<BITS, SEG>::RB;                 /* codes [256 rows][RB] */
    static constexpr int BYTES = CB + 8 * QB_ROWS + wx<SEG, NT, ONE>::BYTES;   /* + scale words, bias words, x */
    static constexpr int RUN = 2 * NT * 4 * 256 * 4;                          /* per-thread running slot sums */
    static constexpr int S0 = (QB_SMEM_MAX - RUN) / BYTES;
    static constexpr int S = S0 > 8 ? 8 : S0;                                 /* ring depth */
};

template <int BITS, int SEG, int NT, bool ONE>
__device__ __forceinline__ void big_issue(unsigned char *dst, const dweight_t &w, const unsigned char *xsp, int r0, int seg, int tid, int wpr, int ng) {
    constexpr int RB = qstage<BITS, SEG>::RB, CPR = RB / 16, CH = QB_ROWS * CPR, CB = bstage<BITS, SEG, NT, ONE>::CB;
    constexpr int XC = wx<SEG, NT, ONE>::BYTES / 16;
    const int N = w.rows;
#pragma unroll
    for (int c = tid; c < CH; c += 256) {
        const int row = c / CPR, part = c % CPR, r = min(r0 + row, N - 1);
        cp_async16(dst + row * RB + part * 16, (const unsigned char *)w.data + (size_t)r * wpr * 4 + (size_t)seg * RB + part * 16);
    }
    { /* thread i: the scale word and the bias word of row i */
        const int r = min(r0 + tid, N - 1);
        const size_t idx = (size_t)r * ng + (size_t)seg * SEG / w.group;
        const uintptr_t as = w.sb_dtype == DT_F32 ? (uintptr_t)((const unsigned char *)w.scales + idx * 4) : (uintptr_t)((const unsigned char *)w.scales + idx * 2) & ~(uintptr_t)3;
        const uintptr_t ab = w.sb_dtype == DT_F32 ? (uintptr_t)((const unsigned char *)w.biases + idx * 4) : (uintptr_t)((const unsigned char *)w.biases + idx * 2) & ~(uintptr_t)3;
        cp_async4(dst + CB + tid * 4, (const void *)as);
        cp_async4(dst + CB + 4 * QB_ROWS + tid * 4, (const void *)ab);
    }
    const unsigned char *xs = xsp + (size_t)seg * wx<SEG, NT, ONE>::BYTES;
#pragma unroll
    for (int c = tid; c < XC; c += 256) cp_async16(dst + CB + 8 * QB_ROWS + c * 16, xs + c * 16);
}

template <int BITS, int SEG, int NT, bool ONE>
__global__ void __launch_bounds__(256, 1) qmma_big_kernel(float *__restrict__ out, const unsigned char *__restrict__ xsp, int T, dweight_t w, int KS, int G) {
    extern __shared__ __align__(16) unsigned char smem[];
    constexpr int RB = qstage<BITS, SEG>::RB, KSTEPS = SEG / 16, TP = 8 * NT, S = bstage<BITS, SEG, NT, ONE>::S;
    constexpr int SB = bstage<BITS, SEG, NT, ONE>::BYTES, CB = bstage<BITS, SEG, NT, ONE>::CB, XB = wx<SEG, NT, ONE>::XB;
    unsigned char *ring = smem;
    float *run = (float *)(smem + S * SB); /* [2·NT·4][256] */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
    const int N = w.rows, K = w.cols, r0 = blockIdx.x * QB_ROWS, grp = blockIdx.y;
    const int wpr = K / 32 * BITS, ng = K / w.group, nseg = K / SEG;
    const int s0 = grp * KS / G, s1 = (grp + 1) * KS / G;
    const int seg0 = (int)((long)s0 * nseg / KS), n = (int)((long)s1 * nseg / KS) - seg0;
    const uint32_t sel4 = 0x4040u | (uint32_t)q | ((uint32_t)q << 8);
    const int wr = warp * 32;
    const int ntt = min(NT, (T + 7) / 8); /* token tiles with tokens */
    int sodd = 0, bodd = 0;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const size_t ir = (size_t)min(r0 + wr + 8 * k + g, N - 1) * ng;
        sodd |= (int)((((uintptr_t)w.scales >> 1) + ir) & 1) << k;
        bodd |= (int)((((uintptr_t)w.biases >> 1) + ir) & 1) << k;
    }
    float acc[2][NT][4];
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[m][j][i] = 0.f;
#pragma unroll
    for (int i = 0; i < S - 1; i++) {
        if (i < n) big_issue<BITS, SEG, NT, ONE>(ring + i * SB, w, xsp, r0, seg0 + i, tid, wpr, ng);
        cp_commit();
    }
    int slot = s0, send = (int)((long)(s0 + 1) * nseg / KS);
    for (int it = 0; it < n; it++) {
        const int seg = seg0 + it, gi = seg * SEG / w.group;
        cp_wait<S - 2>();
        __syncthreads();
        if (it + S - 1 < n) big_issue<BITS, SEG, NT, ONE>(ring + ((it + S - 1) % S) * SB, w, xsp, r0, seg + S - 1, tid, wpr, ng);
        cp_commit();
        const unsigned char *st = ring + (it % S) * SB;
        const unsigned char *xf = st + CB + 8 * QB_ROWS;
        const float *xsum = (const float *)(xf + XB);
        float p[2][NT][4];
#pragma unroll
        for (int s = 0; s < KSTEPS; s++) {
            uint32_t a[2][4];
#pragma unroll
            for (int m = 0; m < 2; m++) {
                const unsigned char *ra = st + (wr + 16 * m + g) * RB, *rb = ra + 8 * RB;
                if constexpr (BITS == 4) {
                    const uint2 va = *(const uint2 *)(ra + 8 * s), vb = *(const uint2 *)(rb + 8 * s);
                    a[m][0] = codes4(va.x, sel4); a[m][1] = codes4(vb.x, sel4);
                    a[m][2] = codes4(va.y, sel4); a[m][3] = codes4(vb.y, sel4);
                } else {
                    const uint4 va = *(const uint4 *)(ra + 16 * s), vb = *(const uint4 *)(rb + 16 * s);
                    const int b = 2 * (q & 1), odd = q >> 1;
                    a[m][0] = codes8(odd ? va.y : va.x, b); a[m][1] = codes8(odd ? vb.y : vb.x, b);
                    a[m][2] = codes8(odd ? va.w : va.z, b); a[m][3] = codes8(odd ? vb.w : vb.z, b);
                }
            }
            /* the k-step's x fragments of every token tile (hi, or hi + lo when x is split), then
             * the MMAs: hi for all tiles, then lo */
            using xv_t = typename std::conditional<ONE, uint2, uint4>::type;
            xv_t xv[NT];
#pragma unroll
            for (int j = 0; j < NT; j++)
                if (j < ntt) xv[j] = ((const xv_t *)xf)[(s * TP + 8 * j + g) * 4 + q];
#pragma unroll
            for (int j = 0; j < NT; j++) {
                if (j >= ntt) break;
#pragma unroll
                for (int m = 0; m < 2; m++) {
                    if (s == 0) mma_bf16_z(p[m][j], a[m], xv[j].x, xv[j].y);
                    else mma_bf16(p[m][j], a[m], xv[j].x, xv[j].y);
                }
            }
            if constexpr (!ONE) {
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    if (j >= ntt) break;
#pragma unroll
                    for (int m = 0; m < 2; m++) mma_bf16(p[m][j], a[m], xv[j].z, xv[j].w);
                }
            }
        }
        float sc[4], bi[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            sc[k] = stage_sb(st + CB + (wr + 8 * k + g) * 4, w.sb_dtype, ((sodd >> k) & 1) ^ (gi & 1));
            bi[k] = stage_sb(st + CB + 4 * QB_ROWS + (wr + 8 * k + g) * 4, w.sb_dtype, ((bodd >> k) & 1) ^ (gi & 1));
        }
#pragma unroll
        for (int j = 0; j < NT; j++) {
            if (j >= ntt) break;
            const float2 xx = *(const float2 *)(xsum + 8 * j + 2 * q);
#pragma unroll
            for (int m = 0; m < 2; m++) {
                acc[m][j][0] = __fmaf_rn(bi[2 * m], xx.x, __fmaf_rn(sc[2 * m], p[m][j][0], acc[m][j][0]));
                acc[m][j][1] = __fmaf_rn(bi[2 * m], xx.y, __fmaf_rn(sc[2 * m], p[m][j][1], acc[m][j][1]));
                acc[m][j][2] = __fmaf_rn(bi[2 * m + 1], xx.x, __fmaf_rn(sc[2 * m + 1], p[m][j][2], acc[m][j][2]));
                acc[m][j][3] = __fmaf_rn(bi[2 * m + 1], xx.y, __fmaf_rn(sc[2 * m + 1], p[m][j][3], acc[m][j][3]));
            }
        }
        if (seg + 1 == send) { /* a slot ends: run = slot (first) or run + slot */
            qmma_slot_end(acc, run, tid, slot == s0, slot + 1 == s1);
            slot++;
            send = (int)((long)(slot + 1) * nseg / KS);
        }
    }
    cp_wait<0>();
    float *o = out + (size_t)grp * T * N;
    qmma_store(o, acc, r0 + wr, g, q, 0, N, T);
}

/* y = part[0] + part[1] + ... + part[G-1], added in group order */
__global__ void qmma_reduce_kernel(float *__restrict__ y, const float *__restrict__ part, int G, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float v = part[i];
        for (int k = 1; k < G; k++) v = __fadd_rn(v, part[(size_t)k * n + i]);
        y[i] = v;
    }
}

/* split-K: up to 16 warps (slots) per 16-row tile, at least 2 segments each; fewer for large
 * matrices, whose row tiles alone fill the GPU. A function of the shape only, never of T (a
 * token's sums are the same in any batch), and the same for both kernels. */
static int qmma_ks(const cuda_impl_t *c, const dweight_t *w, int SEG) {
    const int nseg = w->cols / SEG, tiles = cdiv(w->rows, 16);
    const int kmax = tiles >= 2 * (c->sm_count > 0 ? c->sm_count : 132) ? 8 : 16;
    const int KS = nseg / 2;
    return KS < 1 ? 1 : KS > kmax ? kmax : KS;
}

/* groups of slots: about KILN_CUDA_QMMA_WAVE (default 2) wide blocks per SM. Shape only. */
static int qmma_groups(const cuda_impl_t *c, const dweight_t *w, int KS) {
    static int wave = -1;
    if (wave < 0) { const char *e = getenv("KILN_CUDA_QMMA_WAVE"); wave = e && atoi(e) > 0 ? atoi(e) : 2; }
    const int G = wave * (c->sm_count > 0 ? c->sm_count : 132) / cdiv(w->rows, QW_ROWS);
    return G < 1 ? 1 : G > KS ? KS : G;
}

/* KILN_CUDA_QMMA_BIG: 0 never qmma_big_kernel, 2 always (tests), default 1: steps of ≤ 32 tokens
 * where its 256-row blocks fill at least 3/4 of the SMs (measured 20 % faster there; at 33..64
 * tokens no faster than qmma_wide_kernel, which keeps them) */
static int qmma_big_mode(void) {
    static int v = -1;
    if (v < 0) { const char *e = getenv("KILN_CUDA_QMMA_BIG"); v = e ? atoi(e) : 1; }
    return v;
}

template <int BITS, int SEG, int NT, bool ONE>
static void launch_wide(cuda_impl_t *c, float *y, const float *x, int T, const dweight_t *w) {
    const int KS = qmma_ks(c, w, SEG), G = qmma_groups(c, w, KS), N = w->rows, nseg = w->cols / SEG;
    const int sms = c->sm_count > 0 ? c->sm_count : 132, bm = qmma_big_mode();
    const bool big = bm == 2 || (bm == 1 && NT <= 4 && 4 * cdiv(N, QB_ROWS) * G >= 3 * sms);
    constexpr int TP = 8 * NT, SB = wstage<BITS, SEG, NT, ONE>::BYTES;
    constexpr int BSM = bstage<BITS, SEG, NT, ONE>::S * bstage<BITS, SEG, NT, ONE>::BYTES + bstage<BITS, SEG, NT, ONE>::RUN;
    const size_t smem = big ? (size_t)BSM : (size_t)QW_STAGES * SB + (size_t)2 * (NT / 2) * 4 * 256 * 4;
    static size_t attr, battr;
    if (!big && smem > 48 * 1024 && smem > attr) {
        cudaCheck(cudaFuncSetAttribute(qmma_wide_kernel<BITS, SEG, NT, ONE>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        attr = smem;
    }
    if (big && smem > 48 * 1024 && smem > battr) {
        cudaCheck(cudaFuncSetAttribute(qmma_big_kernel<BITS, SEG, NT, ONE>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        battr = smem;
    }
    /* scratch: the split x [nseg][wx BYTES], then (G > 1) the groups' sums [G][T][N] */
    const size_t xbytes = (size_t)nseg * wx<SEG, NT, ONE>::BYTES, pbytes = G > 1 ? sizeof(float) * (size_t)G * T * N : 0;
    unsigned char *scr = (unsigned char *)cuda_scratch(c, (void **)&c->qpart, &c->qpart_bytes, xbytes + pbytes);
    const int nth = nseg * TP * 4;
    qmma_xprep_kernel<SEG, NT, ONE><<<cdiv(nth, 256), 256, 0, c->stream>>>(scr, x, T, w->cols);
    cudaLaunchCheck();
    float *out = G > 1 ? (float *)(scr + xbytes) : y;
    if (big) {
        dim3 grid(cdiv(N, QB_ROWS), G);
        qmma_big_kernel<BITS, SEG, NT, ONE><<<grid, 256, smem, c->stream>>>(out, scr, T, *w, KS, G);
    } else {
        dim3 grid(cdiv(N, QW_ROWS), G);
        qmma_wide_kernel<BITS, SEG, NT, ONE><<<grid, 256, smem, c->stream>>>(out, scr, T, *w, KS, G);
    }
    cudaLaunchCheck();
    if (G > 1) {
        const size_t n = (size_t)T * N;
        qmma_reduce_kernel<<<(int)(cdiv(n, 256) < 4096 ? cdiv(n, 256) : 4096), 256, 0, c->stream>>>(y, out, G, n);
        cudaLaunchCheck();
    }
}

static int qmma_wide_min_t(void) {
    static int v = -1;
    if (v < 0) { const char *e = getenv("KILN_CUDA_QMMA_WIDE"); v = e ? atoi(e) : 9; if (v <= 0) v = 1 << 30; }
    return v;
}

template <int BITS, int NT, int SEG, bool ONE>
static void launch(cuda_impl_t *c, float *y, const float *x, int T, const dweight_t *w) {
    const int KS = qmma_ks(c, w, SEG), G = qmma_groups(c, w, KS), tiles = cdiv(w->rows, 16);
    const int SB = qstage<BITS, SEG>::BYTES + (NT == 1 ? T * SEG * 4 : 0);
    const size_t ring = (size_t)KS * QMMA_STAGES * SB, red = (size_t)KS * 16 * 8 * NT * sizeof(float);
    const size_t smem = ring > red ? ring : red;
    static size_t attr; /* per instantiation: opt in to more than 48 KB once */
    if (smem > 48 * 1024 && smem > attr) {
        cudaCheck(cudaFuncSetAttribute(qmma_kernel<BITS, NT, SEG, ONE>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        attr = smem;
    }
    dim3 grid(tiles, cdiv(T, 8 * NT));
    qmma_kernel<BITS, NT, SEG, ONE><<<grid, 32 * KS, smem, c->stream>>>(y, x, T, *w, KS, G, SB);
}

template <int BITS, int SEG, bool ONE>
static void launch_t(cuda_impl_t *c, float *y, const float *x, int T, const dweight_t *w) {
    if (T >= qmma_wide_min_t() && T <= 64) {
        if (T <= 16) launch_wide<BITS, SEG, 2, ONE>(c, y, x, T, w);
        else if (T <= 32) launch_wide<BITS, SEG, 4, ONE>(c, y, x, T, w);
        else launch_wide<BITS, SEG, 8, ONE>(c, y, x, T, w);
    } else if (T <= 8) launch<BITS, 1, SEG, ONE>(c, y, x, T, w);
    else if (T <= 16) launch<BITS, 2, SEG, ONE>(c, y, x, T, w);
    else if (T <= 32) launch<BITS, 4, SEG, ONE>(c, y, x, T, w);
    else launch<BITS, 8, SEG, ONE>(c, y, x, T, w);
}

/* 0 when the weight and step suit the kernel (MLX 4/8-bit, T ≤ qmma_max_t: 64, or
 * KILN_CUDA_QMMA_MAX_T; x 16-byte aligned) and it was launched; -1 otherwise. single: x
 * rounded once to bf16 (KILN_CUDA_ACT=bf16 forced), else split into hi + lo. */
int cuda_qmma(cuda_impl_t *c, float *y, const float *x, int T, const dweight_t *w, int single) {
    if (w->dtype != DT_U32 || (w->bits != 4 && w->bits != 8) || T > c->qmma_max_t || ((uintptr_t)x & 15) || w->cols % 32 || w->group % 32)
        return -1;
    /* code rows must be 16-byte aligned for the async copies, scales and biases 2-byte (f32: 4) */
    if (((uintptr_t)w->data & 15) || ((uintptr_t)w->scales & (w->sb_dtype == DT_F32 ? 3 : 1)) ||
        ((uintptr_t)w->biases & (w->sb_dtype == DT_F32 ? 3 : 1)))
        return -1;
    static int qact = -2; /* KILN_CUDA_QMMA_ACT=split|bf16: force either for qmma only (A/B) */
    if (qact == -2) { const char *e = getenv("KILN_CUDA_QMMA_ACT"); qact = !e ? -1 : !strcmp(e, "bf16") ? 1 : !strcmp(e, "split") ? 0 : -1; }
    if (qact >= 0) single = qact;
    const int seg64 = w->group % 64 == 0;
    if (single) {
        if (w->bits == 4) { if (seg64) launch_t<4, 64, true>(c, y, x, T, w); else launch_t<4, 32, true>(c, y, x, T, w); }
        else { if (seg64) launch_t<8, 64, true>(c, y, x, T, w); else launch_t<8, 32, true>(c, y, x, T, w); }
    } else {
        if (w->bits == 4) { if (seg64) launch_t<4, 64, false>(c, y, x, T, w); else launch_t<4, 32, false>(c, y, x, T, w); }
        else { if (seg64) launch_t<8, 64, false>(c, y, x, T, w); else launch_t<8, 32, false>(c, y, x, T, w); }
    }
    cudaLaunchCheck();
    return 0;
}
