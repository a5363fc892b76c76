/* matmul_gemv_tc.cu — batch-1 decode y[1, N] = x[1, K] · Wᵀ for MLX 4/8-bit weights on
 * tensor cores, for one weight or several that share x (matmul_multi: q/k/v, gate/up) in
 * one launch.
 *
 * Reference: ref_matmul (backend/cpu/ref.c). The "cuda" backend's matmul at T = 1 for MLX
 * 4/8-bit, groups 32/64/128, K % 128 == 0, 16-bit scales/biases ("cuda-f32" keeps the f32
 * GEMV of matmul_gemv.cu; 2..64 tokens go through matmul_qmma.cu). KILN_CUDA_GEMV_TC=0: the
 * f32 GEMV instead (A/B).
 *
 * Why: batch-1 decode streams every weight once, so the kernel must keep HBM busy all the
 * time. The f32 GEMV spent ~3.5 ALU ops per 4-bit code (8.6e12 codes/s at 4.3 TB/s would
 * take ~90 % of the H200's FP32 issue rate) and, one wave of warps that each load, wait,
 * then compute, left HBM idle during the compute phases: 1.25 TB/s on a 33 MB gate_proj.
 * The earlier tensor-core attempt (8 bytes of a group per lane per row, scale/bias reloaded
 * per row and group) was slower still (bench/cuda/RESULTS.md, 2026-12-01 late). Here:
 *
 *     y[n] = Σ_units  scale[n, g] · (Σ_k code[n, k] · x[k])  +  bias[n, g] · (Σ_k x[k])
 *
 * - Work: a warp owns a tile of 16 rows and every 4th chunk of it (the block's 4 warps
 *   split K, then add in warp order through shared memory); a chunk is 4 lane spans of 64
 *   bytes per row: lane (g, q) (lane = 4g + q) reads 64 contiguous bytes of rows g and
 *   g + 8 (4 × 16-byte loads each). Blocks loop over tiles (grid = resident blocks), and each
 *   warp loads its next (tile, chunk) item into registers before it computes the current
 *   one, so every warp keeps 128 bytes per lane in flight while its ALUs work.
 * - MMA m16n8k16 (f16 in, f32 accumulate): A = the 16 rows' codes, exact in f16. The k-slots
 *   of lane q are its own span's columns, and B column 2q / 2q+1 holds x hi / lo on lane q's
 *   k-slots only (zero elsewhere): D column 2q is then lane q's own partial dot product, so
 *   each lane's span can sit in a different quantization group and no shuffles or shared
 *   staging of codes are needed. Only lanes (g, q) with g / 2 == q load B (from shared
 *   memory); the rest pass zeros.
 * - Codes → f16 (exact): 4-bit pairs (n0,n4) (n1,n5) (n2,n6) (n3,n7) by LOP3 under the f16
 *   exponent of 1024 (1024 + n, and 1024 + 16n from the next nibble) and one f16x2
 *   subtract / FMA; 8-bit (c0,c2) (c1,c3) by one PRMT each and a subtract. ~1.1 ALU ops per
 *   4-bit code. x is stored per word in the matching order (0,4,1,5,2,6,3,7 / 0,2,1,3).
 * - x is split once per block into f16 hi + lo of x·2^e, e a power of two chosen from max|x|
 *   so that max|x|·2^e < 2^14 (no overflow; hi + lo carries ~22 bits, tiny elements are kept
 *   to 2^-38 of the largest). The unit sums Σx are f32 from x itself, in column order.
 * - Scales/biases of a lane's span for its two rows: one 2/4/8-byte load each, with the codes.
 *
 * Numerics: beyond f32, x's ~2^-22 split (the hi + lo tensor-core products are exact, f32
 * accumulation), within 1e-4 of ref_matmul (test_cuda_kernels). A row's result depends on
 * K and the weight's own data only: bitwise the same alone or inside a matmul_multi launch
 * (test_cuda_kernels test_matmul_multi). T = 1 only (one token: batch invariance on "cuda"
 * is the switch between kernels, docs/cuda.md). */
#include "backend/cuda/cuda_common.cuh"

#define TC_WARPS 4 /* warps per block: the K split of a tile */
#define TC_MAXSEG 4

struct tc_seg {
    const uint32_t *data;
    const void *scales, *biases;
    float *y;
    int rows, tile0; /* tile0: first tile of this weight in the launch */
};
struct tc_args {
    tc_seg seg[TC_MAXSEG];
    int nseg, ntiles, K, ng, lg_group;
    const float *x;
};

template <int BITS> struct tc_geo {
    static constexpr int CPW = 32 / BITS;         /* codes per 32-bit word: 8 or 4          */
    static constexpr int SPAN = 16 * CPW;         /* columns of a lane span (64 bytes)      */
    static constexpr int CHUNK = 4 * SPAN;        /* columns of an item (4 lanes per row)   */
    static constexpr int SPAN_B = 68 * CPW;       /* shared bytes of a span's x: 16 words × (hi+lo) + pad */
};

struct tc_buf {
    uint4 c[2][4];        /* rows g, g+8: 4 × 16 bytes of codes each */
    uint32_t s[2][2], b[2][2]; /* their scales/biases for the span's units (16-bit each) */
};

__device__ __forceinline__ void tc_mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t hsub2(uint32_t a, uint32_t b) {
    uint32_t d;
    asm("sub.rn.f16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
__device__ __forceinline__ uint32_t hfma2(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t d;
    asm("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
__device__ __forceinline__ uint4 tc_ld16(const uint32_t *p) {
    uint4 v;
    asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
/* NU 16-bit values (NU = 1, 2, 4) at p, aligned to their size. Volatile like the code loads:
 * issued with them, not sunk by the compiler to their first use (one exposed HBM latency
 * per item otherwise). */
template <int NU>
__device__ __forceinline__ void tc_ld_sb(uint32_t (&v)[2], const uint16_t *p) {
    if constexpr (NU == 4) asm volatile("ld.global.nc.v2.u32 {%0,%1}, [%2];\n" : "=r"(v[0]), "=r"(v[1]) : "l"(p));
    else if constexpr (NU == 2) { asm volatile("ld.global.nc.u32 %0, [%1];\n" : "=r"(v[0]) : "l"(p)); v[1] = 0; }
    else {
        unsigned short h;
        asm volatile("ld.global.nc.u16 %0, [%1];\n" : "=h"(h) : "l"(p));
        v[0] = h; v[1] = 0;
    }
}
template <int SBF>
__device__ __forceinline__ float tc_sb(const uint32_t (&v)[2], int u) {
    const uint32_t h = (v[u >> 1] >> (16 * (u & 1))) & 0xffffu;
    if constexpr (SBF == 0) return __uint_as_float(h << 16);
    else return __half2float(__ushort_as_half((unsigned short)h));
}

__device__ __forceinline__ int tc_seg_of(const tc_args &a, int tile) {
    int s = 0;
#pragma unroll
    for (int i = 1; i < TC_MAXSEG; i++)
        if (i < a.nseg && tile >= a.seg[i].tile0) s = i;
    return s;
}

/* Loads item (tile, chunk) of this lane: codes and scale/bias words of its span, rows g, g+8. */
template <int BITS, int NU>
__device__ __forceinline__ void tc_load(tc_buf &B, const tc_args &a, int tile, int chunk, int g, int q) {
    using G = tc_geo<BITS>;
    const int col0 = chunk * G::CHUNK + q * G::SPAN;
    if (col0 >= a.K) return; /* nothing to read: compute skips this span's units */
    const tc_seg &sg = a.seg[tc_seg_of(a, tile)];
    const int wpr = a.K / G::CPW; /* words per row */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int row = (tile - sg.tile0) * 16 + g + 8 * r;
        row = row < sg.rows ? row : sg.rows - 1;
        const uint32_t *p = sg.data + (size_t)row * wpr + col0 / G::CPW;
#pragma unroll
        for (int j = 0; j < 4; j++) B.c[r][j] = tc_ld16(p + 4 * j);
        const size_t si = (size_t)row * a.ng + (col0 >> a.lg_group);
        tc_ld_sb<NU>(B.s[r], (const uint16_t *)sg.scales + si);
        tc_ld_sb<NU>(B.b[r], (const uint16_t *)sg.biases + si);
    }
}

/* acc[r] += this lane's span of item (chunk) for rows g, g+8 (every lane runs the MMAs). */
template <int BITS, int NU, int SBF>
__device__ __forceinline__ void tc_compute(const tc_buf &B, float (&acc)[2], const tc_args &a, int chunk, int q, const char *xsh,
                                           int boff, bool bact, const float *xsum, float inv_scale) {
    using G = tc_geo<BITS>;
    constexpr int WPU = 16 / NU; /* words per unit (a unit: one group, or the span when the group is larger) */
    const int col0 = chunk * G::CHUNK + q * G::SPAN;
    const bool valid = col0 < a.K;
    const uint32_t *w0 = (const uint32_t *)&B.c[0][0], *w1 = (const uint32_t *)&B.c[1][0];
    const char *xb = xsh + (size_t)(chunk * 4 + q) * G::SPAN_B + boff;
#pragma unroll
    for (int u = 0; u < NU; u++) {
        float d[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int i = u * WPU; i < (u + 1) * WPU; i++) {
            const uint32_t v0 = valid ? w0[i] : 0u, v1 = valid ? w1[i] : 0u;
            if constexpr (BITS == 4) {
                uint4 bx = make_uint4(0, 0, 0, 0);
                if (bact) bx = *(const uint4 *)(xb + i * 32);
                const uint32_t K1024 = 0x64006400u, M16 = 0x2C002C00u /* 1/16 */, N64 = 0xD400D400u /* -64 */;
                const uint32_t s0 = v0 >> 8, s1 = v1 >> 8;
                const uint32_t p00 = hsub2((v0 & 0x000F000Fu) | K1024, K1024), p01 = hfma2((v0 & 0x00F000F0u) | K1024, M16, N64);
                const uint32_t p02 = hsub2((s0 & 0x000F000Fu) | K1024, K1024), p03 = hfma2((s0 & 0x00F000F0u) | K1024, M16, N64);
                const uint32_t p10 = hsub2((v1 & 0x000F000Fu) | K1024, K1024), p11 = hfma2((v1 & 0x00F000F0u) | K1024, M16, N64);
                const uint32_t p12 = hsub2((s1 & 0x000F000Fu) | K1024, K1024), p13 = hfma2((s1 & 0x00F000F0u) | K1024, M16, N64);
                tc_mma(d, p00, p10, p01, p11, bx.x, bx.y);
                tc_mma(d, p02, p12, p03, p13, bx.z, bx.w);
            } else {
                uint2 bx = make_uint2(0, 0);
                if (bact) bx = *(const uint2 *)(xb + i * 16);
                const uint32_t K1024 = 0x64006400u;
                const uint32_t pa0 = hsub2(__byte_perm(v0, 0x64646464u, 0x4240), K1024), pb0 = hsub2(__byte_perm(v0, 0x64646464u, 0x4341), K1024);
                const uint32_t pa1 = hsub2(__byte_perm(v1, 0x64646464u, 0x4240), K1024), pb1 = hsub2(__byte_perm(v1, 0x64646464u, 0x4341), K1024);
                tc_mma(d, pa0, pa1, pb0, pb1, bx.x, bx.y);
            }
        }
        if (valid) {
            const float xs = xsum[col0 / (G::SPAN / NU) + u];
            acc[0] = __fmaf_rn(tc_sb<SBF>(B.s[0], u), __fmul_rn(__fadd_rn(d[0], d[1]), inv_scale), acc[0]);
            acc[0] = __fmaf_rn(tc_sb<SBF>(B.b[0], u), xs, acc[0]);
            acc[1] = __fmaf_rn(tc_sb<SBF>(B.s[1], u), __fmul_rn(__fadd_rn(d[2], d[3]), inv_scale), acc[1]);
            acc[1] = __fmaf_rn(tc_sb<SBF>(B.b[1], u), xs, acc[1]);
        }
    }
}

template <int BITS, int NU, int SBF>
__global__ void __launch_bounds__(TC_WARPS * 32) gemv_tc_kernel(const __grid_constant__ tc_args a) {
    using G = tc_geo<BITS>;
    extern __shared__ __align__(16) char tc_sh[];
    const int K = a.K, nchunks = (K + G::CHUNK - 1) / G::CHUNK, nspans = nchunks * 4;
    char *xsh = tc_sh;                                          /* nspans × SPAN_B */
    float *xsum = (float *)(tc_sh + (size_t)nspans * G::SPAN_B); /* K / unit       */
    float *red = xsum + K / (G::SPAN / NU);                       /* TC_WARPS × 16  */
    __shared__ float smax[TC_WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
    const int ipt = (nchunks + TC_WARPS - 1) / TC_WARPS; /* items per warp per tile */
    const int ntb = a.ntiles > (int)blockIdx.x ? (a.ntiles - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;
    const int n = ntb * ipt;
    tc_buf A, Bf;
    if (n > 0) tc_load<BITS, NU>(A, a, blockIdx.x, warp, g, q); /* in flight while x is split */

    /* x → shared: max |x| → e; f16 hi/lo of x·2^e per word in MMA order; Σx per unit (x is
     * 16-byte aligned, K % 128 == 0: float4 loads, unrolled so each pass is ~one round trip) */
    const float4 *x4 = (const float4 *)a.x;
    float m = 0.f;
#pragma unroll 8
    for (int i = threadIdx.x; i < K / 4; i += blockDim.x) {
        const float4 v = __ldg(x4 + i);
        m = fmaxf(m, fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))));
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) smax[warp] = m;
    __syncthreads();
    m = smax[0];
#pragma unroll
    for (int i = 1; i < TC_WARPS; i++) m = fmaxf(m, smax[i]);
    int ex = 0;
    if (m > 0.f && m <= 3.0e38f) { frexpf(m, &ex); ex = 14 - ex; ex = ex > 120 ? 120 : ex < -120 ? -120 : ex; }
    const float up = __int_as_float((127 + ex) << 23), inv_scale = __int_as_float((127 - ex) << 23);
#pragma unroll 4
    for (int wb = threadIdx.x; wb < nspans * 16; wb += blockDim.x) {
        float xv[G::CPW];
#pragma unroll
        for (int j = 0; j < G::CPW / 4; j++) {
            const float4 v = wb * G::CPW < K ? __ldg(x4 + wb * (G::CPW / 4) + j) : make_float4(0.f, 0.f, 0.f, 0.f);
            xv[4 * j] = v.x; xv[4 * j + 1] = v.y; xv[4 * j + 2] = v.z; xv[4 * j + 3] = v.w;
        }
        uint32_t hw[G::CPW / 2], lw[G::CPW / 2];
#pragma unroll
        for (int j = 0; j < G::CPW / 2; j++) { /* word order: (j, j + CPW/2) pairs */
            const float v0 = __fmul_rn(xv[j], up), v1 = __fmul_rn(xv[j + G::CPW / 2], up);
            const __half h0 = __float2half_rn(v0), h1 = __float2half_rn(v1);
            const __half l0 = __float2half_rn(__fsub_rn(v0, __half2float(h0))), l1 = __float2half_rn(__fsub_rn(v1, __half2float(h1)));
            hw[j] = (uint32_t)__half_as_ushort(h0) | (uint32_t)__half_as_ushort(h1) << 16;
            lw[j] = (uint32_t)__half_as_ushort(l0) | (uint32_t)__half_as_ushort(l1) << 16;
        }
        char *d = xsh + (size_t)(wb / 16) * G::SPAN_B + (wb % 16) * 4 * G::CPW;
        if constexpr (BITS == 4) {
            *(uint4 *)d = make_uint4(hw[0], hw[1], hw[2], hw[3]);
            *(uint4 *)(d + 16) = make_uint4(lw[0], lw[1], lw[2], lw[3]);
        } else {
            *(uint2 *)d = make_uint2(hw[0], hw[1]);
            *(uint2 *)(d + 8) = make_uint2(lw[0], lw[1]);
        }
    }
    constexpr int U = G::SPAN / NU;
    for (int u = threadIdx.x; u < K / U; u += blockDim.x) {
        float4 v[U / 4];
#pragma unroll
        for (int j = 0; j < U / 4; j++) v[j] = __ldg(x4 + u * (U / 4) + j);
        float s = 0.f;
#pragma unroll
        for (int j = 0; j < U / 4; j++) s = __fadd_rn(__fadd_rn(__fadd_rn(__fadd_rn(s, v[j].x), v[j].y), v[j].z), v[j].w);
        xsum[u] = s;
    }
    __syncthreads();

    const bool bact = (g >> 1) == q;
    const int boff = (g & 1) * 2 * G::CPW; /* lo half after the word's hi half */
    float acc[2] = {0.f, 0.f};
    auto item = [&](tc_buf &B, int it) {
        const int tile = blockIdx.x + (it / ipt) * gridDim.x, chunk = warp + (it % ipt) * TC_WARPS;
        if (chunk < nchunks) tc_compute<BITS, NU, SBF>(B, acc, a, chunk, q, xsh, boff, bact, xsum, inv_scale);
        if (it % ipt == ipt - 1) { /* the tile's last item: add lanes q, then warps in order */
#pragma unroll
            for (int r = 0; r < 2; r++) {
                acc[r] = __fadd_rn(acc[r], __shfl_xor_sync(0xffffffffu, acc[r], 1));
                acc[r] = __fadd_rn(acc[r], __shfl_xor_sync(0xffffffffu, acc[r], 2));
            }
            if (q == 0) { red[warp * 16 + g] = acc[0]; red[warp * 16 + g + 8] = acc[1]; }
            acc[0] = acc[1] = 0.f;
            __syncthreads();
            if (warp == 0 && lane < 16) {
                float v = red[lane];
#pragma unroll
                for (int w = 1; w < TC_WARPS; w++) v = __fadd_rn(v, red[w * 16 + lane]);
                const tc_seg &sg = a.seg[tc_seg_of(a, tile)];
                const int row = (tile - sg.tile0) * 16 + lane;
                if (row < sg.rows) sg.y[row] = v;
            }
            __syncthreads();
        }
    };
    auto load = [&](tc_buf &B, int it) {
        const int tile = blockIdx.x + (it / ipt) * gridDim.x, chunk = warp + (it % ipt) * TC_WARPS;
        if (chunk < nchunks) tc_load<BITS, NU>(B, a, tile, chunk, g, q);
    };
    for (int it = 0; it < n; it += 2) {
        if (it + 1 < n) load(Bf, it + 1);
        item(A, it);
        if (it + 1 < n) {
            if (it + 2 < n) load(A, it + 2);
            item(Bf, it + 1);
        }
    }
}

static int gemv_tc_enabled(void) {
    static int v = -1;
    if (v < 0) { const char *e = getenv("KILN_CUDA_GEMV_TC"); v = !(e && !strcmp(e, "0")); }
    return v;
}

/* Can w go through the kernel (alone or with others of the same K, bits, group, scale type)? */
static int tc_ok(const dweight_t *w) {
    return w->dtype == DT_U32 && (w->bits == 4 || w->bits == 8) && (w->group == 32 || w->group == 64 || w->group == 128) && w->cols % 128 == 0 &&
           (w->sb_dtype == DT_BF16 || w->sb_dtype == DT_F16) && w->rows > 0 && !((uintptr_t)w->data & 15);
}

template <int BITS, int NU, int SBF>
static int tc_launch(cuda_impl_t *c, const tc_args &a) {
    using G = tc_geo<BITS>;
    const int nchunks = (a.K + G::CHUNK - 1) / G::CHUNK;
    const size_t smem = (size_t)nchunks * 4 * G::SPAN_B + sizeof(float) * (a.K / (G::SPAN / NU) + TC_WARPS * 16);
    if (smem > c->smem_optin) return -1;
    static size_t attr_set;
    static struct { size_t smem; int blocks; } occ[8];
    static int n_occ;
    auto kern = gemv_tc_kernel<BITS, NU, SBF>;
    if (smem > 48 * 1024 && smem > attr_set) {
        cudaCheck(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        attr_set = smem;
    }
    int per_sm = 0;
    for (int i = 0; i < n_occ; i++)
        if (occ[i].smem == smem) per_sm = occ[i].blocks;
    if (!per_sm) {
        cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, TC_WARPS * 32, smem));
        if (per_sm < 1) per_sm = 1;
        if (n_occ < 8) { occ[n_occ].smem = smem; occ[n_occ].blocks = per_sm; n_occ++; }
    }
    const int sms = c->sm_count > 0 ? c->sm_count : 132;
    const int grid = a.ntiles < sms * per_sm ? a.ntiles : sms * per_sm;
    kern<<<grid, TC_WARPS * 32, smem, c->stream>>>(a);
    cudaLaunchCheck();
    return 0;
}

/* y[i] = x · w[i]ᵀ for n ≤ TC_MAXSEG weights of the same K, bits, group and scale dtype, one
 * token, in one launch. Returns -1 (nothing launched) when they do not suit the kernel. */
int cuda_gemv_tc(cuda_impl_t *c, int n, float *const *y, const float *x, const dweight_t *const *w) {
    if (!gemv_tc_enabled() || n < 1 || n > TC_MAXSEG || ((uintptr_t)x & 15)) return -1;
    tc_args a;
    memset(&a, 0, sizeof a);
    const dweight_t *w0 = w[0];
    if (!tc_ok(w0)) return -1;
    const int bits = w0->bits, group = w0->group, sbf = w0->sb_dtype == DT_F16;
    const int span = bits == 4 ? 128 : 64, nu = span / (group < span ? group : span);
    for (int i = 0; i < n; i++) {
        const dweight_t *wi = w[i];
        if (!tc_ok(wi) || wi->cols != w0->cols || wi->bits != bits || wi->group != group || wi->sb_dtype != w0->sb_dtype) return -1;
        if (((uintptr_t)wi->scales | (uintptr_t)wi->biases) & (2 * nu - 1)) return -1;
        a.seg[i].data = (const uint32_t *)wi->data;
        a.seg[i].scales = wi->scales;
        a.seg[i].biases = wi->biases;
        a.seg[i].y = y[i];
        a.seg[i].rows = wi->rows;
        a.seg[i].tile0 = a.ntiles;
        a.ntiles += (wi->rows + 15) / 16;
    }
    a.nseg = n;
    a.K = w0->cols;
    a.ng = w0->cols / group;
    a.lg_group = group == 32 ? 5 : group == 64 ? 6 : 7;
    a.x = x;
#define TC_L(B, N) (sbf ? tc_launch<B, N, 1>(c, a) : tc_launch<B, N, 0>(c, a))
    if (bits == 4) return nu == 4 ? TC_L(4, 4) : nu == 2 ? TC_L(4, 2) : TC_L(4, 1);
    return nu == 2 ? TC_L(8, 2) : TC_L(8, 1);
#undef TC_L
}
