/* matmul_gemv_mma.cu — batch-1 decode y[1, N] = x[1, K] · Wᵀ for MLX 4/8-bit weights on
 * tensor cores, streaming the codes straight from HBM into registers.
 *
 * Reference: ref_matmul (backend/cpu/ref.c). The "cuda" backend's matmul at T = 1 for MLX
 * 4/8-bit weights with groups of 32/64/128 (the f32 GEMV of matmul_gemv.cu stays the
 * "cuda-f32" path; 2..64 tokens go through matmul_qmma.cu). Why another kernel: the f32 GEMV
 * spends ~3 integer/float ops per code and re-reads 128 bytes of x from L1 per 16 bytes of
 * codes, which held llama-3-8b q4 at ~1 TB/s (bench/cuda/RESULTS.md, 2026-12-01); qmma at
 * T = 1 wastes 7/8 of each MMA and splits x per k-step. Here, with w = scale·code + bias:
 *
 *     y[n] = Σ_groups  scale[n, g] · (Σ_k code[n, k] · x[k])  +  bias[n, g] · (Σ_k x[k])
 *
 * - x is split once per block into bf16 hi + lo (x − hi is exact in f32; hi + lo carries
 *   16 significant bits) in shared memory, laid out so each lane's B fragment is one 64-bit
 *   load, and the per-group sums Σx (f32, from x itself) are computed in the same pass.
 * - mma.sync m16n8k16 (bf16 in, f32 accumulate): A = 16 weight rows × 16 k of codes, exact in
 *   bf16; B column 0 = hi, column 1 = lo (columns 2..7 zero), so one MMA does 256 codes and
 *   y = D[.,0] + D[.,1]. The k-slots of an MMA may be any permutation of 16 columns as long as
 *   A and B agree: lane (g, q) (lane = 4g + q) loads its own contiguous piece of the group
 *   for rows g and g + 8 straight from global memory (4-bit, group 64: 8 bytes per row), and
 *   x is stored in the matching order, so no shuffles and no shared staging of codes.
 * - 4-bit: word → four bf16x2 pairs (n0,n4) (n1,n5) (n2,n6) (n3,n7) by shift + LOP3 under a
 *   bf16 exponent of 2^7 (128 + n, exact) and one bf16x2 subtract of 128 (exact); x is stored
 *   per 8 columns in the order 0,4,1,5,2,6,3,7. 8-bit: byte → f32 (2^23 | c) − 2^23, packed to
 *   bf16x2 (exact: ≤ 8 significant bits); x in natural order.
 * - Work split: a warp owns 16 rows and every KS-th group of them (the block's KS warps split
 *   K; they add their partial sums in warp order through shared memory); blocks loop over
 *   row tiles when there are more tiles than resident blocks, so x is split once per block.
 *   KS follows the matrix shape only.
 *
 * Numerics: the only rounding beyond f32 is x's 17th mantissa bit (~2^-17 relative), as in
 * qmma (tested within 1e-4 of ref_matmul in test_cuda_kernels). T = 1 only: a single token,
 * so batch invariance is the switch between kernels documented in docs/cuda.md.
 *
 * OPT-IN (KILN_CUDA_GEMV_MMA=1), because measured on the H200 it is SLOWER than the f32 GEMV
 * it was meant to replace (bench/cuda/RESULTS.md, 2026-12-01 late): llama-3-8b q4 decode
 * 148.9 vs 169.2 tok/s, q8 143.0 vs 158.3; ncu, gate_proj 14336×4096 q4: 35.6 vs 26.4 us. Its
 * instructions are not the limit (loads only, KILN_CUDA_GM_MODE=4: still 30.1 us; without the
 * scale/bias loads, =2: 27.0 us): the 16-rows × 32-byte access pattern and the per-row
 * scale/bias reads are. Kept, tested, for the next attempt at the access pattern.
 * KILN_CUDA_GM_MODE (default 17) picks the variants measured there. */
#include "backend/cuda/cuda_common.cuh"

__device__ __forceinline__ void gm_mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* nw words (1, 2, 4 or 8) of codes from global memory, not kept in L1 (read once) */
template <int NW>
__device__ __forceinline__ void gm_load(uint32_t *w, const uint32_t *p) {
    if constexpr (NW == 1) {
        asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];\n" : "=r"(w[0]) : "l"(p));
    } else if constexpr (NW == 2) {
        asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];\n" : "=r"(w[0]), "=r"(w[1]) : "l"(p));
    } else {
#pragma unroll
        for (int i = 0; i < NW / 4; i++)
            asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                         : "=r"(w[4 * i]), "=r"(w[4 * i + 1]), "=r"(w[4 * i + 2]), "=r"(w[4 * i + 3])
                         : "l"(p + 4 * i));
    }
}

__device__ __forceinline__ uint32_t bf16x2_sub128(uint32_t v) {
    __nv_bfloat162 r = __hsub2(*reinterpret_cast<__nv_bfloat162 *>(&v), __floats2bfloat162_rn(128.f, 128.f));
    return *reinterpret_cast<uint32_t *>(&r);
}
/* nibbles j and j+4 of w → bf16x2 (n_j, n_{j+4}), exact */
__device__ __forceinline__ uint32_t nib2(uint32_t w, int j) { return bf16x2_sub128(((w >> (4 * j)) & 0x000F000Fu) | 0x43004300u); }
/* bytes b, b+1 of w → bf16x2 (c_b, c_{b+1}), exact */
__device__ __forceinline__ uint32_t byte2(uint32_t w, int b) {
    const float f0 = __fsub_rn(__uint_as_float(__byte_perm(w, 0x4B000000u, 0x7440u | b)), 8388608.f);
    const float f1 = __fsub_rn(__uint_as_float(__byte_perm(w, 0x4B000000u, 0x7440u | (b + 1))), 8388608.f);
    __nv_bfloat162 r = __floats2bfloat162_rn(f0, f1);
    return *reinterpret_cast<uint32_t *>(&r);
}

/* Shared memory: plane 0 = hi, plane 1 = lo ([K + 8] bf16 each, permuted per 8 columns for
 * 4-bit), then xs[K / G] f32 group sums, then red[KS][16] f32. */
static size_t gm_smem(int K, int G, int KS, int es) {
    return (size_t)2 * (K + 8) * 2 + (size_t)(K / G) * 4 + (size_t)KS * 16 * 4 + (size_t)2 * 16 * (K / G) * es + 16;
}

/* U groups of codes per lane in flight (64 bytes per lane: both rows together) */
template <int BITS, int G> struct gm_cfg {
    static constexpr int LW = G * BITS / 128;             /* code words per lane per row per group */
    static constexpr int U = 16 / (2 * LW) > 0 ? 16 / (2 * LW) : 1;
    static constexpr int KST = G / 16;                     /* k-steps per group */
};

template <int BITS, int G, int UM = 1>
__global__ void __launch_bounds__(512) gemv_mma_kernel(float *__restrict__ y, const float *__restrict__ x, dweight_t w, int KS, int mode) {
    extern __shared__ __align__(16) unsigned char smem[];
    constexpr int LW = gm_cfg<BITS, G>::LW, U = gm_cfg<BITS, G>::U * UM, KST = gm_cfg<BITS, G>::KST;
    const int K = w.cols, N = w.rows, ng = K / G, PS = K + 8; /* plane stride (elements): banks */
    __nv_bfloat16 *planes = (__nv_bfloat16 *)smem;
    float *xs = (float *)(smem + (size_t)2 * PS * 2);
    float *red = xs + ng;
    /* the tile's scales then biases, as stored (16 rows × ng, es bytes each), 16-byte aligned */
    const int es = w.sb_dtype == DT_F32 ? 4 : 2;
    unsigned char *sbuf = (unsigned char *)(((uintptr_t)(red + KS * 16) + 15) & ~(uintptr_t)15);
    const int sbs = (mode & 16) != 0;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;

    /* 1. x → hi/lo planes and per-group sums; a thread per 8 columns, the G/8 threads of a
     *    group are consecutive lanes of one warp (blockDim is a multiple of 32, K/8 of G/8) */
    for (int i0 = 0; i0 < K / 8; i0 += blockDim.x) {
        const int i = i0 + tid;
        float v[8], s = 0.f;
        if (i < K / 8) {
            const float4 a = __ldg((const float4 *)(x + 8 * i)), b = __ldg((const float4 *)(x + 8 * i + 4));
            v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
            s = __fadd_rn(__fadd_rn(__fadd_rn(v[0], v[1]), __fadd_rn(v[2], v[3])), __fadd_rn(__fadd_rn(v[4], v[5]), __fadd_rn(v[6], v[7])));
            uint32_t hi[4], lo[4];
#pragma unroll
            for (int p = 0; p < 4; p++) {
                /* 4-bit: positions (2p, 2p+1) hold columns (p, p+4); 8-bit: (2p, 2p+1) */
                const float e0 = BITS == 4 ? v[p] : v[2 * p], e1 = BITS == 4 ? v[p + 4] : v[2 * p + 1];
                const __nv_bfloat162 h = __floats2bfloat162_rn(e0, e1);
                const float2 hf = __bfloat1622float2(h);
                const __nv_bfloat162 l = __floats2bfloat162_rn(__fsub_rn(e0, hf.x), __fsub_rn(e1, hf.y));
                hi[p] = *reinterpret_cast<const uint32_t *>(&h);
                lo[p] = *reinterpret_cast<const uint32_t *>(&l);
            }
            *(uint4 *)(planes + 8 * i) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
            *(uint4 *)(planes + PS + 8 * i) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
        }
#pragma unroll
        for (int o = 1; o < G / 8; o <<= 1) s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, o));
        if (i < K / 8 && i % (G / 8) == 0) xs[i / (G / 8)] = s;
    }
    __syncthreads();

    /* lane (g, q): B from plane g (hi, lo) for g < 2, zero for the other columns */
    const __nv_bfloat16 *bp = planes + (g & 1) * PS + q * (G / 4);
    const bool bcol = g < 2;
    const size_t wpr = (size_t)K * BITS / 32; /* code words per row */
    const int tiles = (N + 15) / 16;
    /* this warp's groups: a contiguous range (mode & 1) or every KS-th */
    const int contig = mode & 1, pf = !(mode & 8);
    const int gbeg = contig ? (int)((long)ng * warp / KS) : warp, gend = contig ? (int)((long)ng * (warp + 1) / KS) : ng;
    const int nmine = contig ? gend - gbeg : (warp < ng ? (ng - warp + KS - 1) / KS : 0);
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const int rA = min(tile * 16 + g, N - 1), rB = min(tile * 16 + g + 8, N - 1);
        const uint32_t *pA = (const uint32_t *)w.data + (size_t)rA * wpr + q * LW;
        const uint32_t *pB = (const uint32_t *)w.data + (size_t)rB * wpr + q * LW;
        const size_t sA = (size_t)rA * ng, sB = (size_t)rB * ng;
        float accA = 0.f, accB = 0.f;
        const int r0 = tile * 16, nr = min(16, N - r0);
        uint32_t ca[U][LW], cb[U][LW], na[U][LW], nb[U][LW];
        float scA[U], scB[U], biA[U], biB[U], nsA[U], nsB[U], nbA[U], nbB[U];
        /* loads the U groups from this warp's j0-th on (registers only: fully unrolled) */
        auto load = [&](int j0, uint32_t (&la)[U][LW], uint32_t (&lb)[U][LW], float (&lsA)[U], float (&lsB)[U], float (&lbA)[U], float (&lbB)[U]) {
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int j = j0 + u, gi = contig ? gbeg + j : warp + j * KS;
                if (j < nmine) {
                    gm_load<LW>(la[u], pA + (size_t)gi * (G * BITS / 32));
                    gm_load<LW>(lb[u], pB + (size_t)gi * (G * BITS / 32));
                    if (q == 0 && !(mode & 18)) {
                        lsA[u] = ld_f(w.scales, w.sb_dtype, sA + gi); lsB[u] = ld_f(w.scales, w.sb_dtype, sB + gi);
                        lbA[u] = ld_f(w.biases, w.sb_dtype, sA + gi); lbB[u] = ld_f(w.biases, w.sb_dtype, sB + gi);
                    } else { lsA[u] = lsB[u] = 1.f; lbA[u] = lbB[u] = 0.f; }
                }
            }
        };
        if (nmine > 0) load(0, ca, cb, scA, scB, biA, biB);
        if (sbs) { /* the tile's rows are consecutive: their scales (biases) are one run of nr·ng values */
            const size_t bytes = (size_t)nr * ng * es;
            const unsigned char *gs = (const unsigned char *)w.scales + (size_t)r0 * ng * es, *gb = (const unsigned char *)w.biases + (size_t)r0 * ng * es;
            unsigned char *ss = sbuf, *sbb = sbuf + (size_t)16 * ng * es;
            if (!(bytes & 15) && !(((uintptr_t)gs | (uintptr_t)gb) & 15))
                for (size_t i = tid; i < bytes / 16; i += blockDim.x) {
                    ((uint4 *)ss)[i] = __ldg((const uint4 *)gs + i);
                    ((uint4 *)sbb)[i] = __ldg((const uint4 *)gb + i);
                }
            else
                for (size_t i = tid; i < bytes / 2; i += blockDim.x) {
                    ((unsigned short *)ss)[i] = __ldg((const unsigned short *)gs + i);
                    ((unsigned short *)sbb)[i] = __ldg((const unsigned short *)gb + i);
                }
            __syncthreads();
        }
        for (int j0 = 0; j0 < nmine; j0 += U) {
            if (pf && j0 + U < nmine) load(j0 + U, na, nb, nsA, nsB, nbA, nbB); /* next batch in flight while this one computes */
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int j = j0 + u, gi = contig ? gbeg + j : warp + j * KS;
                if (j >= nmine) break; /* warp-uniform */
                if (mode & 4) { /* diagnostic: loads only */
                    accA += __uint_as_float(ca[u][0] & 0x3f000000u); accB += __uint_as_float(cb[u][LW - 1] & 0x3f000000u);
                    continue;
                }
                float d[4] = {0.f, 0.f, 0.f, 0.f};
                const __nv_bfloat16 *bg = bp + (size_t)gi * G;
#pragma unroll
                for (int s = 0; s < KST; s++) {
                    uint32_t a0, a1, a2, a3;
                    uint2 b = *(const uint2 *)(bg + (BITS == 4 ? 8 * (s / 2) + 4 * (s % 2) : 4 * s));
                    if (!bcol) b = make_uint2(0u, 0u);
                    if constexpr (BITS == 4) {
                        const uint32_t wa = ca[u][s / 2], wb = cb[u][s / 2];
                        const int jj = 2 * (s % 2);
                        a0 = nib2(wa, jj); a2 = nib2(wa, jj + 1);
                        a1 = nib2(wb, jj); a3 = nib2(wb, jj + 1);
                    } else {
                        const uint32_t wa = ca[u][s], wb = cb[u][s];
                        a0 = byte2(wa, 0); a2 = byte2(wa, 2);
                        a1 = byte2(wb, 0); a3 = byte2(wb, 2);
                    }
                    gm_mma(d, a0, a1, a2, a3, b.x, b.y);
                }
                if (q == 0) { /* columns 0 (hi) and 1 (lo) of rows g, g + 8 */
                    const float xsum = xs[gi];
                    if (sbs) {
                        const size_t o = (size_t)16 * ng;
                        scA[u] = ld_f(sbuf, w.sb_dtype, (size_t)g * ng + gi); scB[u] = ld_f(sbuf, w.sb_dtype, (size_t)(g + 8) * ng + gi);
                        biA[u] = ld_f(sbuf, w.sb_dtype, o + (size_t)g * ng + gi); biB[u] = ld_f(sbuf, w.sb_dtype, o + (size_t)(g + 8) * ng + gi);
                    }
                    accA = __fmaf_rn(biA[u], xsum, __fmaf_rn(scA[u], __fadd_rn(d[0], d[1]), accA));
                    accB = __fmaf_rn(biB[u], xsum, __fmaf_rn(scB[u], __fadd_rn(d[2], d[3]), accB));
                }
            }
            if (!pf && j0 + U < nmine) load(j0 + U, na, nb, nsA, nsB, nbA, nbB);
#pragma unroll
            for (int u = 0; u < U; u++) {
#pragma unroll
                for (int i = 0; i < LW; i++) { ca[u][i] = na[u][i]; cb[u][i] = nb[u][i]; }
                scA[u] = nsA[u]; scB[u] = nsB[u]; biA[u] = nbA[u]; biB[u] = nbB[u];
            }
        }
        if (q == 0) { red[warp * 16 + g] = accA; red[warp * 16 + g + 8] = accB; }
        __syncthreads();
        if (tid < 16) {
            float v = red[tid];
            for (int k = 1; k < KS; k++) v = __fadd_rn(v, red[k * 16 + tid]);
            if (tile * 16 + tid < N) y[tile * 16 + tid] = v;
        }
        __syncthreads();
    }
}

static int gemv_mma_enabled(void) {
    static int v = -1;
    if (v < 0) { const char *e = getenv("KILN_CUDA_GEMV_MMA"); v = e && !strcmp(e, "1"); }
    return v;
}
/* KILN_CUDA_GM_MODE (measurements): bit 0 contiguous group ranges per warp, bit 1 no
 * scale/bias loads (wrong results), bit 2 loads only (wrong results), bit 3 no prefetch */
static int gm_env(const char *name, int dflt) {
    const char *e = getenv(name);
    return e ? atoi(e) : dflt;
}
static int gm_mode(void) {
    static int v = -1;
    if (v < 0) { const char *e = getenv("KILN_CUDA_GM_MODE"); v = e ? atoi(e) : 17; }
    return v;
}

template <int BITS, int G, int UM = 1>
static void gm_launch(cuda_impl_t *c, float *y, const float *x, const dweight_t *w) {
    const int sms = c->sm_count > 0 ? c->sm_count : 132, tiles = cdiv(w->rows, 16), ng = w->cols / G;
    /* warps split K until ~24 warps per SM are streaming (at most 16 per block, at least one
     * group each): by shape only */
    int KS = cdiv((long)sms * gm_env("KILN_CUDA_GM_WANT", 24), tiles);
    KS = KS < 1 ? 1 : KS > 16 ? 16 : KS;
    if (KS > ng) KS = ng;
    if (KS < 4 && ng >= 4) KS = 4; /* big matrices: 4-warp blocks so x is split once per 4 warps' rows */
    const size_t smem = gm_smem(w->cols, G, KS, w->sb_dtype == DT_F32 ? 4 : 2);
    static size_t attr; /* per instantiation: opt in to more than 48 KB once */
    if (smem > 48 * 1024 && smem > attr) {
        cudaCheck(cudaFuncSetAttribute(gemv_mma_kernel<BITS, G, UM>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        attr = smem;
    }
    /* resident blocks per SM for this (KS, smem), cached: blocks loop over row tiles beyond that */
    static struct { int KS; size_t smem; int occ; } cache[16];
    static int n_cache;
    int occ = 0;
    for (int i = 0; i < n_cache; i++)
        if (cache[i].KS == KS && cache[i].smem == smem) occ = cache[i].occ;
    if (!occ) {
        cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, gemv_mma_kernel<BITS, G, UM>, 32 * KS, smem));
        if (occ < 1) occ = 1;
        if (n_cache < 16) { cache[n_cache].KS = KS; cache[n_cache].smem = smem; cache[n_cache].occ = occ; n_cache++; }
    }
    const int grid = tiles < sms * occ ? tiles : sms * occ;
    gemv_mma_kernel<BITS, G, UM><<<grid, 32 * KS, smem, c->stream>>>(y, x, *w, KS, gm_mode());
}

/* 0 when launched (T = 1, MLX 4/8-bit, group 32/64/128, aligned, x fits in shared memory),
 * -1 otherwise (the caller falls back to the other kernels). */
int cuda_gemv_mma(cuda_impl_t *c, float *y, const float *x, int T, const dweight_t *w) {
    if (T != 1 || !gemv_mma_enabled() || w->dtype != DT_U32 || (w->bits != 4 && w->bits != 8)) return -1;
    if ((w->group != 32 && w->group != 64 && w->group != 128) || w->cols % w->group || ((uintptr_t)x & 15) || ((uintptr_t)w->data & 15))
        return -1;
    if (gm_smem(w->cols, w->group, 16, w->sb_dtype == DT_F32 ? 4 : 2) > c->smem_optin) return -1;
    if (w->bits == 4) {
        if (w->group == 32) gm_launch<4, 32>(c, y, x, w);
        else if (w->group == 64) { if (gm_env("KILN_CUDA_GM_U2", 0)) gm_launch<4, 64, 2>(c, y, x, w); else gm_launch<4, 64>(c, y, x, w); }
        else gm_launch<4, 128>(c, y, x, w);
    } else {
        if (w->group == 32) gm_launch<8, 32>(c, y, x, w);
        else if (w->group == 64) { if (gm_env("KILN_CUDA_GM_U2", 0)) gm_launch<8, 64, 2>(c, y, x, w); else gm_launch<8, 64>(c, y, x, w); }
        else gm_launch<8, 128>(c, y, x, w);
    }
    cudaLaunchCheck();
    return 0;
}
