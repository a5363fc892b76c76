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
#include "backend/cuda/cuda_common.cuh"

__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t bf2_bits(__nv_bfloat162 v) { return *reinterpret_cast<uint32_t *>(&v); }

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

__device__ __forceinline__ void cp_async16(void *dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src));
}
__device__ __forceinline__ void cp_async4(void *dst, const void *src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

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

__device__ __forceinline__ float stage_sb(const unsigned char *p, int dt, int odd) {
    const uint32_t v = *(const uint32_t *)p;
    if (dt == DT_F32) return __uint_as_float(v);
    const unsigned short h = (unsigned short)(odd ? v >> 16 : v & 0xffffu);
    return dt == DT_F16 ? __half2float(__ushort_as_half(h)) : __uint_as_float((uint32_t)h << 16);
}

template <int BITS, int NT, int SEG>
__global__ void __launch_bounds__(512, NT == 1 ? 2 : 1) qmma_kernel(float *__restrict__ y, const float *__restrict__ x, int T, dweight_t w, int KS, int SB) {
    extern __shared__ __align__(16) unsigned char smem[]; /* per warp a ring of QMMA_STAGES stages; then red [KS][16][8·NT] */
    constexpr int RB = qstage<BITS, SEG>::RB, KSTEPS = SEG / 16, TT = 8 * NT, S = QMMA_STAGES;
    const int Tx = NT == 1 ? T : 0; /* x in the stages (SB bytes each) */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
    const int N = w.rows, K = w.cols, r0 = blockIdx.x * 16, t0 = blockIdx.y * TT;
    const int wpr = K / 32 * BITS, ng = K / w.group, nseg = K / SEG;
    const int nmine = warp < nseg ? (nseg - warp + KS - 1) / KS : 0;
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
        if (i < nmine) issue_stage<BITS, SEG>(ring + i * SB, w, r0, warp + i * KS, lane, wpr, ng, x, Tx);
        cp_commit();
    }
    for (int it = 0; it < nmine; it++) {
        if (it + S - 1 < nmine)
            issue_stage<BITS, SEG>(ring + ((it + S - 1) % S) * SB, w, r0, warp + (it + S - 1) * KS, lane, wpr, ng, x, Tx);
        cp_commit();
        cp_wait<S - 1>();
        __syncwarp();
        const unsigned char *st = ring + (it % S) * SB;
        const int seg = warp + it * KS, col0 = seg * SEG, gi = col0 / w.group;
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
                xs[j] = __fadd_rn(xs[j], __fadd_rn(__fadd_rn(x0.x, x0.y), __fadd_rn(x8.x, x8.y)));
                uint32_t h0, l0, h8, l8;
                split2(x0.x, x0.y, h0, l0);
                split2(x8.x, x8.y, h8, l8);
                mma_bf16(p[j], a, h0, h8);
                mma_bf16(p[j], a, l0, l8);
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
        float v = red[idx];
        for (int k = 1; k < KS; k++) v = __fadd_rn(v, red[(size_t)k * 16 * TT + idx]);
        if (r0 + row < N && t0 + tok < T) y[(size_t)(t0 + tok) * N + r0 + row] = v;
    }
}

/* --- batched decode (9..64 tokens): the same sums, x shared by 128 rows -------------------
 * Above 8 tokens qmma_kernel reads x from global memory in every warp: a block holds 16 rows,
 * so each x element is fetched (through L2) and split into hi + lo once per 16 rows. At 64
 * tokens that is 16 bytes of x per 4-bit weight (0.5 byte): llama-3-8b q4 at 64 rows spent
 * ~45 ms per step in matmuls (KILN_CUDA_PROFILE=64) against ~12 ms for a whole bf16 step.
 *
 * qmma_wide_kernel computes exactly the same numbers with a different data flow: a block owns
 * 128 rows (8 warps × 16), up to 64 tokens and ONE of the KS split-K slots (grid.y), i.e.
 * the segments slot, slot + KS, slot + 2·KS, ... — the segments warp `slot` of qmma_kernel
 * takes. Per segment the block splits x once into shared memory (hi/lo bf16 in the order the
 * B fragments want: one 16-byte load per fragment pair) and all 8 warps use it: x costs 2
 * bytes per weight instead of 16. The per-segment math (p from the MMAs in k-step order, hi
 * then lo; Σx of the segment in the lane order of qmma_kernel; acc = b·Σx + (s·p + acc)) is
 * the same expression on the same operands. The price: the slots' partial sums leave the
 * block, [KS][T][N] floats in a scratch buffer, and qmma_reduce adds them in slot order —
 * the order qmma_kernel's in-block reduction uses — so a token's outputs are bitwise those of
 * qmma_kernel (test_cuda_kernels, KILN_CUDA_QMMA=1: each row alone, T = 1 on qmma_kernel, vs
 * in a batch of 9..64 on this kernel; test_qmma_wide: batches of 9..64 vs 8). Measured (H200,
 * bench/cuda/RESULTS.md 2026-12-01 helper-30): matmuls of a 64-row llama-3-8b q4 step 45 ->
 * 20 ms, c=64 through the engine 1287 -> 2306..2458 tok/s; still ~2x a bf16 step. What is
 * left, unmeasured per kernel: the [KS][T][N] partials (KS = 16 for q/o/down: ~2 bytes per
 * weight written and read again), 4..14 segments per block (pipeline fill), one 16-warp block
 * per SM. KILN_CUDA_QMMA_WIDE=N: the fewest tokens that take it (default 9; 0: never, A/B). */
#define QW_WARPS 8
#define QW_ROWS (16 * QW_WARPS)

template <int BITS, int SEG, int NTH>
__device__ __forceinline__ void wide_issue(unsigned char *dst, const dweight_t &w, int r0, int seg, int tid, int wpr, int ng) {
    constexpr int RB = qstage<BITS, SEG>::RB, CPR = RB / 16, CH = QW_ROWS * CPR;
    const int N = w.rows;
#pragma unroll
    for (int c = tid; c < CH; c += NTH) {
        const int row = c / CPR, part = c % CPR, r = min(r0 + row, N - 1);
        cp_async16(dst + row * RB + part * 16, (const unsigned char *)w.data + (size_t)r * wpr * 4 + (size_t)seg * RB + part * 16);
    }
    /* thread i < 128: the scale word of row i; 128..255: the bias word */
    if (tid >= 2 * QW_ROWS) return;
    const int row = tid & (QW_ROWS - 1), r = min(r0 + row, N - 1);
    const size_t idx = (size_t)r * ng + (size_t)seg * SEG / w.group;
    const unsigned char *base = (const unsigned char *)(tid < QW_ROWS ? w.scales : w.biases);
    const uintptr_t a = w.sb_dtype == DT_F32 ? (uintptr_t)(base + idx * 4) : (uintptr_t)(base + idx * 2) & ~(uintptr_t)3;
    cp_async4(dst + QW_ROWS * RB + tid * 4, (const void *)a);
}

template <int BITS, int SEG> struct wstage {
    static constexpr int BYTES = QW_ROWS * qstage<BITS, SEG>::RB + 8 * QW_ROWS; /* codes, scale words, bias words */
};

/* TW: token groups per block — at 64 tokens (NT 8) 16 warps, each 16 rows × 32 tokens (a warp
 * holding all 64 tokens' sums spilled at the 128 registers two blocks per SM allow). x of the
 * next segment waits in the splitters' registers (one segment ahead); putting it into the
 * cp.async ring with the codes (S - 1 segments ahead, split from shared memory behind a second
 * barrier) measured no better: llama-3-8b q4 c=64 2306 vs 2373 tok/s, same call. */
template <int BITS, int NT, int SEG, int TW>
__global__ void __launch_bounds__(32 * QW_WARPS * TW, 2 / TW) qmma_wide_kernel(float *__restrict__ out, const float *__restrict__ x, int T, dweight_t w, int KS) {
    extern __shared__ __align__(16) unsigned char smem[];
    constexpr int RB = qstage<BITS, SEG>::RB, KSTEPS = SEG / 16, TT = 8 * NT, S = QMMA_STAGES, NTH = 32 * QW_WARPS * TW, JW = NT / TW;
    constexpr int SB = wstage<BITS, SEG>::BYTES;
    unsigned char *ring = smem;
    uint4 *xb = (uint4 *)(smem + S * SB);              /* [2][KSTEPS][TT][4 q]: (hi k, hi k+8, lo k, lo k+8) */
    float *xsb = (float *)(xb + 2 * KSTEPS * TT * 4);  /* [2][TT]: Σx of the segment per token */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
    const int N = w.rows, K = w.cols, r0 = blockIdx.x * QW_ROWS, slot = blockIdx.y, t0 = blockIdx.z * TT;
    const int wpr = K / 32 * BITS, ng = K / w.group, nseg = K / SEG;
    const int nmine = (nseg - slot + KS - 1) / KS; /* KS <= nseg / 2: every slot has segments */
    const uint32_t sel4 = 0x4040u | (uint32_t)q | ((uint32_t)q << 8);
    const int wr = (warp % QW_WARPS) * 16, j0 = (warp / QW_WARPS) * JW; /* the warp's rows and token tiles */
    const size_t ia = (size_t)min(r0 + wr + g, N - 1) * ng, ib = (size_t)min(r0 + wr + g + 8, N - 1) * ng;
    const int soa = (int)((((uintptr_t)w.scales >> 1) + ia) & 1), sob = (int)((((uintptr_t)w.scales >> 1) + ib) & 1);
    const int boa = (int)((((uintptr_t)w.biases >> 1) + ia) & 1), bob = (int)((((uintptr_t)w.biases >> 1) + ib) & 1);
    /* the x splitters: thread (token xt, lane part xq) of the first TT·4 threads (whole warps) */
    const int xt = tid >> 2, xq = tid & 3, xtok = t0 + xt;
    const bool splitter = tid < TT * 4, xval = splitter && xtok < T;
    float2 xr[KSTEPS][2];
    auto load_x = [&](int seg) {
#pragma unroll
        for (int s = 0; s < KSTEPS; s++) {
            xr[s][0] = xr[s][1] = make_float2(0.f, 0.f);
            if (xval) {
                const float *xp = x + (size_t)xtok * K + (size_t)seg * SEG + 16 * s + 2 * xq;
                xr[s][0] = __ldg((const float2 *)xp);
                xr[s][1] = __ldg((const float2 *)(xp + 8));
            }
        }
    };
    float acc[JW][4];
#pragma unroll
    for (int j = 0; j < JW; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) acc[j][i] = 0.f;
    if (splitter) load_x(slot);
#pragma unroll
    for (int i = 0; i < S - 1; i++) {
        if (i < nmine) wide_issue<BITS, SEG, NTH>(ring + i * SB, w, r0, slot + i * KS, tid, wpr, ng);
        cp_commit();
    }
    for (int it = 0; it < nmine; it++) {
        const int seg = slot + it * KS, col0 = seg * SEG, gi = col0 / w.group;
        uint4 *xbi = xb + (it & 1) * KSTEPS * TT * 4;
        float *xsi = xsb + (it & 1) * TT;
        if (splitter) { /* x of this segment → shared memory, split; Σx as qmma_kernel's lanes add it */
            float v = 0.f;
#pragma unroll
            for (int s = 0; s < KSTEPS; s++) {
                const float2 x0 = xr[s][0], x8 = xr[s][1];
                v = __fadd_rn(v, __fadd_rn(__fadd_rn(x0.x, x0.y), __fadd_rn(x8.x, x8.y)));
                uint4 u;
                split2(x0.x, x0.y, u.x, u.z);
                split2(x8.x, x8.y, u.y, u.w);
                xbi[(s * TT + xt) * 4 + xq] = u;
            }
            v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 1));
            v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 2));
            if (xq == 0) xsi[xt] = v;
            if (it + 1 < nmine) load_x(seg + KS); /* next segment's x in flight during the MMAs */
        }
        cp_wait<S - 2>(); /* this segment's codes (S-2 later groups may still fly) */
        __syncthreads();  /* codes and x visible; stage (it-1)%S and x buffer (it+1)&1 free */
        if (it + S - 1 < nmine) wide_issue<BITS, SEG, NTH>(ring + ((it + S - 1) % S) * SB, w, r0, seg + (S - 1) * KS, tid, wpr, ng);
        cp_commit();
        const unsigned char *st = ring + (it % S) * SB;
        const float sA = stage_sb(st + QW_ROWS * RB + (wr + g) * 4, w.sb_dtype, soa ^ (gi & 1));
        const float sB = stage_sb(st + QW_ROWS * RB + (wr + g + 8) * 4, w.sb_dtype, sob ^ (gi & 1));
        const float bA = stage_sb(st + QW_ROWS * RB + 4 * QW_ROWS + (wr + g) * 4, w.sb_dtype, boa ^ (gi & 1));
        const float bB = stage_sb(st + QW_ROWS * RB + 4 * QW_ROWS + (wr + g + 8) * 4, w.sb_dtype, bob ^ (gi & 1));
        constexpr int WPS = RB / 4;
        uint32_t ca[WPS], cb[WPS];
#pragma unroll
        for (int i = 0; i < WPS / 4; i++) {
            const uint4 va = ((const uint4 *)(st + (wr + g) * RB))[i], vb = ((const uint4 *)(st + (wr + g + 8) * RB))[i];
            ca[4 * i] = va.x; ca[4 * i + 1] = va.y; ca[4 * i + 2] = va.z; ca[4 * i + 3] = va.w;
            cb[4 * i] = vb.x; cb[4 * i + 1] = vb.y; cb[4 * i + 2] = vb.z; cb[4 * i + 3] = vb.w;
        }
        float p[JW][4];
#pragma unroll
        for (int j = 0; j < JW; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) p[j][i] = 0.f;
#pragma unroll
        for (int s = 0; s < KSTEPS; s++) {
            uint32_t a[4];
            if constexpr (BITS == 4) {
                a[0] = codes4(ca[2 * s], sel4); a[1] = codes4(cb[2 * s], sel4);
                a[2] = codes4(ca[2 * s + 1], sel4); a[3] = codes4(cb[2 * s + 1], sel4);
            } else {
                const int b = 2 * (q & 1), odd = q >> 1;
                a[0] = codes8(odd ? ca[4 * s + 1] : ca[4 * s], b); a[1] = codes8(odd ? cb[4 * s + 1] : cb[4 * s], b);
                a[2] = codes8(odd ? ca[4 * s + 3] : ca[4 * s + 2], b); a[3] = codes8(odd ? cb[4 * s + 3] : cb[4 * s + 2], b);
            }
#pragma unroll
            for (int j = 0; j < JW; j++) {
                if (t0 + 8 * (j0 + j) >= T) break; /* warp-uniform */
                const uint4 xv = xbi[(s * TT + 8 * (j0 + j) + g) * 4 + q];
                mma_bf16(p[j], a, xv.x, xv.y);
                mma_bf16(p[j], a, xv.z, xv.w);
            }
        }
#pragma unroll
        for (int j = 0; j < JW; j++) {
            if (t0 + 8 * (j0 + j) >= T) break;
            const float x0 = xsi[8 * (j0 + j) + 2 * q], x1 = xsi[8 * (j0 + j) + 2 * q + 1];
            acc[j][0] = __fmaf_rn(bA, x0, __fmaf_rn(sA, p[j][0], acc[j][0]));
            acc[j][1] = __fmaf_rn(bA, x1, __fmaf_rn(sA, p[j][1], acc[j][1]));
            acc[j][2] = __fmaf_rn(bB, x0, __fmaf_rn(sB, p[j][2], acc[j][2]));
            acc[j][3] = __fmaf_rn(bB, x1, __fmaf_rn(sB, p[j][3], acc[j][3]));
        }
    }
    cp_wait<0>();
    /* this slot's sums: out = y when KS == 1, else the slot's plane [T][N] of the scratch */
    float *o = out + (size_t)slot * T * N;
#pragma unroll
    for (int j = 0; j < JW; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int row = r0 + wr + g + 8 * (i >> 1), t = t0 + 8 * (j0 + j) + 2 * q + (i & 1);
            if (row < N && t < T) o[(size_t)t * N + row] = acc[j][i];
        }
}

/* y = part[0] + part[1] + ... + part[KS-1], added in slot order (qmma_kernel's reduction) */
__global__ void qmma_reduce_kernel(float *__restrict__ y, const float *__restrict__ part, int KS, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float v = part[i];
        for (int k = 1; k < KS; k++) v = __fadd_rn(v, part[(size_t)k * n + i]);
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

template <int BITS, int NT, int SEG, int TW>
static void launch_wide(cuda_impl_t *c, float *y, const float *x, int T, const dweight_t *w) {
    const int KS = qmma_ks(c, w, SEG), N = w->rows;
    constexpr int SB = wstage<BITS, SEG>::BYTES;
    const size_t smem = (size_t)QMMA_STAGES * SB + 2 * (SEG / 16) * 8 * NT * 64 + 2 * 8 * NT * 4;
    static size_t attr;
    if (smem > 48 * 1024 && smem > attr) {
        cudaCheck(cudaFuncSetAttribute(qmma_wide_kernel<BITS, NT, SEG, TW>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        attr = smem;
    }
    float *out = y;
    if (KS > 1) out = (float *)cuda_scratch(c, (void **)&c->qpart, &c->qpart_bytes, sizeof(float) * (size_t)KS * T * N);
    dim3 grid(cdiv(N, QW_ROWS), KS, cdiv(T, 8 * NT));
    qmma_wide_kernel<BITS, NT, SEG, TW><<<grid, 32 * QW_WARPS * TW, smem, c->stream>>>(out, x, T, *w, KS);
    cudaLaunchCheck();
    if (KS > 1) {
        const size_t n = (size_t)T * N;
        qmma_reduce_kernel<<<(int)(cdiv(n, 256) < 4096 ? cdiv(n, 256) : 4096), 256, 0, c->stream>>>(y, out, KS, n);
        cudaLaunchCheck();
    }
}

static int qmma_wide_min_t(void) {
    static int v = -1;
    if (v < 0) { const char *e = getenv("KILN_CUDA_QMMA_WIDE"); v = e ? atoi(e) : 9; if (v <= 0) v = 1 << 30; }
    return v;
}

template <int BITS, int NT, int SEG>
static void launch(cuda_impl_t *c, float *y, const float *x, int T, const dweight_t *w) {
    const int KS = qmma_ks(c, w, SEG), tiles = cdiv(w->rows, 16);
    const int SB = qstage<BITS, SEG>::BYTES + (NT == 1 ? T * SEG * 4 : 0);
    const size_t ring = (size_t)KS * QMMA_STAGES * SB, red = (size_t)KS * 16 * 8 * NT * sizeof(float);
    const size_t smem = ring > red ? ring : red;
    static size_t attr; /* per instantiation: opt in to more than 48 KB once */
    if (smem > 48 * 1024 && smem > attr) {
        cudaCheck(cudaFuncSetAttribute(qmma_kernel<BITS, NT, SEG>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        attr = smem;
    }
    dim3 grid(tiles, cdiv(T, 8 * NT));
    qmma_kernel<BITS, NT, SEG><<<grid, 32 * KS, smem, c->stream>>>(y, x, T, *w, KS, SB);
}

template <int BITS, int SEG>
static void launch_t(cuda_impl_t *c, float *y, const float *x, int T, const dweight_t *w) {
    if (T >= qmma_wide_min_t() && T <= 64) {
        if (T <= 16) launch_wide<BITS, 2, SEG, 1>(c, y, x, T, w);
        else if (T <= 32) launch_wide<BITS, 4, SEG, 1>(c, y, x, T, w);
        else launch_wide<BITS, 8, SEG, 2>(c, y, x, T, w);
    } else if (T <= 8) launch<BITS, 1, SEG>(c, y, x, T, w);
    else if (T <= 16) launch<BITS, 2, SEG>(c, y, x, T, w);
    else if (T <= 32) launch<BITS, 4, SEG>(c, y, x, T, w);
    else launch<BITS, 8, SEG>(c, y, x, T, w);
}

/* 0 when the weight and step suit the kernel (MLX 4/8-bit, T ≤ qmma_max_t: 64, or
 * KILN_CUDA_QMMA_MAX_T; x 16-byte aligned) and it
 * was launched; -1 otherwise. */
int cuda_qmma(cuda_impl_t *c, float *y, const float *x, int T, const dweight_t *w) {
    if (w->dtype != DT_U32 || (w->bits != 4 && w->bits != 8) || T > c->qmma_max_t || ((uintptr_t)x & 15) || w->cols % 32 || w->group % 32)
        return -1;
    /* code rows must be 16-byte aligned for the async copies, scales and biases 2-byte (f32: 4) */
    if (((uintptr_t)w->data & 15) || ((uintptr_t)w->scales & (w->sb_dtype == DT_F32 ? 3 : 1)) ||
        ((uintptr_t)w->biases & (w->sb_dtype == DT_F32 ? 3 : 1)))
        return -1;
    const int seg64 = w->group % 64 == 0;
    if (w->bits == 4) { if (seg64) launch_t<4, 64>(c, y, x, T, w); else launch_t<4, 32>(c, y, x, T, w); }
    else { if (seg64) launch_t<8, 64>(c, y, x, T, w); else launch_t<8, 32>(c, y, x, T, w); }
    cudaLaunchCheck();
    return 0;
}
