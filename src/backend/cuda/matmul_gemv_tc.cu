/* matmul_gemv_tc.cu — batch-1 decode y[1, N] = x[1, K] · Wᵀ for MLX 4/8-bit weights on
 * tensor cores (integer MMA), for one weight or several that share x (matmul_multi: q/k/v,
 * gate/up) in one launch.
 *
 * Reference: ref_matmul (backend/cpu/ref.c). The "cuda" backend's matmul at T = 1 for MLX
 * 4/8-bit, groups 32/64/128, K % 128 == 0, 16-bit scales/biases ("cuda-f32" keeps the f32
 * GEMV of matmul_gemv.cu; 2..64 tokens go through matmul_qmma.cu). KILN_CUDA_GEMV_TC=0: the
 * f32 GEMV instead (A/B).
 *
 * Why: batch-1 decode streams every weight once, so the kernel must keep HBM busy all the
 * time with few instructions per byte. The f32 GEMV spent ~3.5 ALU ops per 4-bit code (at
 * 4.3 TB/s: ~90 % of the H200's FP32 issue rate) and, one wave of warps that each load, wait,
 * then compute, left HBM idle during the compute phases: 1.25 TB/s on a 33 MB gate_proj.
 * The first tensor-core attempt (8 bytes of a group per lane per row) was slower still; a
 * version of this kernel with f16 MMAs (codes → f16 by LOP3 + HFMA2, x as f16 hi + lo) was
 * issue-bound (ncu: 41 % issue, ~460 instructions per 4 KB item). Measured on the H200
 * (bench/cuda/RESULTS.md, 2026-12-01 helper-28), llama-3-8b q4 decode: f32 GEMV 177, f16 MMA
 * 215, this kernel 239 tok/s. Here:
 *
 *     y[n] = Σ_units  scale[n, g] · (Σ_k code[n, k] · x[k])  +  bias[n, g] · (Σ_k x[k])
 *
 * - Work: a warp owns a tile of 16 rows and every S-th chunk of it (the block's S warps, 4,
 *   or 8 from K = 8192, split K, then add in warp order through shared memory); a chunk is 4
 *   lane spans of 64 bytes per row: lane (g, q) (lane = 4g + q) reads 64 contiguous bytes of
 *   rows g and g + 8 (4 × 16-byte loads each) plus its span's scales/biases (one 2/4/8-byte
 *   load each, volatile so they are issued with the codes). A block holds G tile groups of S
 *   warps (G up to 2: no more than blocks of one group would fit on an SM or the tiles need to
 *   cover every SM), which share the block's x preparation (one per SM instead
 *   of one per group: KILN_CUDA_GEMV_TC_GROUPS=1 for a block per group; a group's reduction
 *   uses its own named barrier). Groups loop over tiles (grid = resident blocks); each warp
 *   loads its next (tile, chunk) item into registers before it computes the current one, so
 *   it keeps 128 bytes per lane in flight while its ALUs work.
 * - x' = round(x·2^e) with e from max|x| so that |x'| < 2^22 (x to 2^-23 of its largest
 *   element), split once per block into three signed byte planes, x' = d2·2^16 + d1·2^8 + d0,
 *   kept in shared memory per octet (8 columns) in the MMA's k order. x is read from L2 once
 *   (max pass) into shared memory as f32, the digits gathered from the bytes of x' + 0x808080 by
 *   PRMT (KILN_CUDA_GEMV_TC_XF=0: three passes over x in L2 and digit-by-digit arithmetic; same
 *   digits). Every block prepares x for itself, so this preparation is a fixed cost per launch.
 * - Launched with programmatic dependent launch (cuda_common.cuh, KILN_CUDA_PDL=0: off): a block
 *   issues its first two items' loads, then waits (griddepcontrol.wait) for the kernel that
 *   writes x, so the weight stream starts while that kernel (add_rms_norm, glu, ...) still runs.
 *   llama-3-8b q4 decode 220 → 310 tok/s, q8 186 → 244 (bench/cuda/RESULTS.md, helper-34).
 * - mma.sync m16n8k32 u8 × s8 → s32 (exact integer sums): A = the codes as bytes (4-bit:
 *   w & 0x0F0F0F0F and (w >> 4) & 0x0F0F0F0F, 1.5 ops per 4 codes of a row; 8-bit: the words as
 *   they are). The k-slots of lane q are its own span's columns; B column 2q+p of one MMA holds
 *   plane p (0, 1) on lane q's k-slots only and column 2q of a second MMA (same A) plane 2, so
 *   D column 2q (2q+1) is lane q's own partial dot product with that plane: each lane's span
 *   can sit in a different quantization group, no shuffles, no staging of codes. Lanes that
 *   supply no B column read a zero span. ~10 instructions per 8 codes of two rows.
 * - Per unit (a group, or the span when the group is larger): p = d2-sum·2^16 + d1-sum·2^8 +
 *   d0-sum in f32, acc += scale · p·2^-e + bias · Σx (Σx in f32 from x itself, column order).
 *
 * - Fused decode ops (backend.h matmul_add, rms_matmul_multi, rms_matmul_glu, matmul_glu; the
 *   cuda_tc_* entries at the end; the kernel's MODE template bits): TC_NORM x is the residual
 *   stream, normalized in the prologue in rms_norm4_kernel's order (bitwise rms_norm); TC_ACC y +=
 *   the row sums in the store (bitwise the add op); TC_GLU a tile group computes gate tile t, then
 *   up tile t, and stores glu_act of the two sums (bitwise glu_kernel). llama's batch-1 layer then
 *   loses add_rms_norm twice and glu. Opt-in, KILN_CUDA_TC_FUSE=1 (see the entries below).
 *   KILN_CUDA_GEMV_TC_TRACE=FILE: per-block %globaltimer stamps (TC_TRACE, below).
 *
 * Numerics: beyond f32, x's rounding to 2^-23 of max|x| (the integer products and sums are
 * exact), within 1e-4 of ref_matmul (test_cuda_kernels). A row's result depends on K and the
 * weight's own data only: bitwise the same alone or inside a matmul_multi launch
 * (test_cuda_kernels test_matmul_multi). T = 1 only (one token: batch invariance on "cuda"
 * is the switch between kernels, docs/cuda.md). */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/glu_act.cuh"
#include "backend/cuda/xprep.cuh"
#include "backend/cuda/tmap.cuh" /* CUtensorMap and its encoder (the ring GEMV) */

#define TC_MAXW 8    /* the K split of a tile: S warps (4, or 8 from K = 8192) */
#define TC_MAXT 512  /* threads per block: G tile groups of S warps */
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
    int S, G; /* warps per tile (K split), tile groups per block (they share the block's x preparation) */
    int pre;  /* 2: items 0 and 1 loaded before the wait; 1 (KILN_CUDA_GEMV_TC_PRE=1): item 1 after x's
               * preparation; 3: item 1 right after x's cp.async into shared memory (1 and 3 measured
               * slower: llama-3-8b q4 334 / 331 vs 345 tok/s, bench/cuda/RESULTS.md) */
    int xf; /* x read once into shared memory, digits by PRMT (KILN_CUDA_GEMV_TC_XF=0: three reads from L2, digit by digit) */
    const float *x;
    /* the fused ops (backend.h, one token; the kernel's MODE bits, below): TC_NORM x is the residual
     * stream, normalized in the prologue exactly as rms_norm4_kernel does it (rms_matmul_multi /
     * rms_matmul_glu); TC_ACC y += the row sums (matmul_add: the add op's f32 sum); TC_GLU two weights
     * of equal rows (gate, up) whose tile t and tile P + t one group computes in a row, storing
     * glu_act(gate, up) to seg[0].y (matmul_glu / rms_matmul_glu) */
    int mode, gelu;
    const float *nw; /* TC_NORM: the norm weight (NULL: none), offset and eps */
    float off, eps;
    unsigned long long *trace; /* TC_TRACE (KILN_CUDA_GEMV_TC_TRACE): 8 words a block */
    const char *xp; /* TC_PREP: x as its producer prepared it (xprep.cuh: this kernel's shared-memory image) */
};
/* MODE bits of gemv_tc_kernel (template: MODE = 0 is the plain kernel, compiled exactly as before
 * these existed — an earlier version with runtime mode branches ran the plain GEMV ~8 % slower) */
enum { TC_NORM = 1, TC_ACC = 2, TC_GLU = 4, TC_TRACE = 8, TC_PREP = 16 };

template <int BITS> struct tc_geo {
    static constexpr int SPAN = 512 / BITS;       /* columns of a lane span (64 bytes of codes) */
    static constexpr int NOCT = SPAN / 8;         /* octets (8 columns: one IMMA k-slice per row pair) */
    static constexpr int CHUNK = 4 * SPAN;        /* columns of an item (4 lanes per row)   */
    static constexpr int SPAN_B = NOCT * 24 + 16; /* shared bytes of a span's x digits (3 planes × 8 per octet) + pad */
};

struct tc_buf {
    uint4 c[2][4];             /* rows g, g+8: 4 × 16 bytes of codes each */
    uint32_t s[2][2], b[2][2]; /* their scales/biases for the span's units (16-bit each) */
};

__device__ __forceinline__ void tc_imma(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
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

/* Loads item (tile, chunk) of this lane: codes and scale/bias words of its span, rows g, g+8
 * (a span past K: zero codes, and compute skips its units). */
template <int BITS, int NU>
__device__ __forceinline__ void tc_load(tc_buf &B, const tc_args &a, int tile, int chunk, int g, int q) {
    using G = tc_geo<BITS>;
    const int col0 = chunk * G::CHUNK + q * G::SPAN;
    if (col0 >= a.K) {
#pragma unroll
        for (int r = 0; r < 2; r++)
#pragma unroll
            for (int j = 0; j < 4; j++) B.c[r][j] = make_uint4(0, 0, 0, 0);
        return;
    }
    const tc_seg &sg = a.seg[tc_seg_of(a, tile)];
    const int wpr = a.K * BITS / 32; /* words per row */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int row = (tile - sg.tile0) * 16 + g + 8 * r;
        row = row < sg.rows ? row : sg.rows - 1;
        const uint32_t *p = sg.data + (size_t)row * wpr + col0 * BITS / 32;
#pragma unroll
        for (int j = 0; j < 4; j++) B.c[r][j] = tc_ld16(p + 4 * j);
        const size_t si = (size_t)row * a.ng + (col0 >> a.lg_group);
        tc_ld_sb<NU>(B.s[r], (const uint16_t *)sg.scales + si);
        tc_ld_sb<NU>(B.b[r], (const uint16_t *)sg.biases + si);
    }
}

/* octet o's A fragment of rows g (w0) and g + 8 (w1): 4-bit the bytes (n0,n2,n4,n6) and (n1,n3,n5,n7)
 * of the octet's word, 8-bit the octet's two words as they are */
template <int BITS>
__device__ __forceinline__ void tc_afrag(const uint32_t *w0, const uint32_t *w1, int o, uint32_t &a0, uint32_t &a1, uint32_t &a2,
                                         uint32_t &a3) {
    if constexpr (BITS == 4) {
        a0 = w0[o] & 0x0F0F0F0Fu; a2 = (w0[o] >> 4) & 0x0F0F0F0Fu;
        a1 = w1[o] & 0x0F0F0F0Fu; a3 = (w1[o] >> 4) & 0x0F0F0F0Fu;
    } else {
        a0 = w0[2 * o]; a2 = w0[2 * o + 1];
        a1 = w1[2 * o]; a3 = w1[2 * o + 1];
    }
}

/* acc[r] += this lane's span of item (chunk) for rows g, g+8 (every lane runs the MMAs).
 * xb1 / xb2: the lane's B source for the plane-0/1 and the plane-2 MMA (a zero span when the
 * lane supplies no B column). */
template <int BITS, int NU, int SBF>
__device__ __forceinline__ void tc_compute(const tc_buf &B, float (&acc)[2], int col0, bool valid, const char *xb1, const char *xb2,
                                           const float *xsum, float inv_scale) {
    using G = tc_geo<BITS>;
    constexpr int OPU = G::NOCT / NU; /* octets per unit (a unit: one group, or the span when the group is larger) */
    const uint32_t *w0 = (const uint32_t *)&B.c[0][0], *w1 = (const uint32_t *)&B.c[1][0];
#pragma unroll
    for (int u = 0; u < NU; u++) {
        int d[4] = {0, 0, 0, 0}, e[4] = {0, 0, 0, 0};
#pragma unroll
        for (int o = u * OPU; o < (u + 1) * OPU; o++) {
            uint32_t a0, a1, a2, a3;
            tc_afrag<BITS>(w0, w1, o, a0, a1, a2, a3);
            const uint2 b1 = *(const uint2 *)(xb1 + o * 24), b2 = *(const uint2 *)(xb2 + o * 24);
            tc_imma(d, a0, a1, a2, a3, b1.x, b1.y);
            tc_imma(e, a0, a1, a2, a3, b2.x, b2.y);
        }
        if (valid) { /* Σ code·x' = d2·2^16 + d1·2^8 + d0 over the unit (|d0 + d1·2^8| < 2^31) */
            const float xs = xsum[col0 / (G::SPAN / NU) + u];
            const float p0 = __fmaf_rn((float)e[0], 65536.f, (float)(d[0] + d[1] * 256));
            const float p1 = __fmaf_rn((float)e[2], 65536.f, (float)(d[2] + d[3] * 256));
            acc[0] = __fmaf_rn(tc_sb<SBF>(B.s[0], u), __fmul_rn(p0, inv_scale), acc[0]);
            acc[0] = __fmaf_rn(tc_sb<SBF>(B.b[0], u), xs, acc[0]);
            acc[1] = __fmaf_rn(tc_sb<SBF>(B.s[1], u), __fmul_rn(p1, inv_scale), acc[1]);
            acc[1] = __fmaf_rn(tc_sb<SBF>(B.b[1], u), xs, acc[1]);
        }
    }
}

/* The signed base-256 digit i (0, 1, 2) of v (|v| < 2^22): v = d2·2^16 + d1·2^8 + d0, each in
 * [-128, 127] (the digit-by-digit preparation of KILN_CUDA_GEMV_TC_XF=0). */
__device__ __forceinline__ void tc_digits(int v, int (&d)[3]) {
    d[0] = (int)(int8_t)(v & 255);
    v = (v - d[0]) >> 8;
    d[1] = (int)(int8_t)(v & 255);
    d[2] = (v - d[1]) >> 8;
}

/* barrier of tile group grp's S warps (named barrier 1 + grp; the block-wide one is 0) */
__device__ __forceinline__ void tc_bar(int grp, int S) {
    switch (grp) { /* constant ids: ptxas reserves all 16 for a register id */
    case 0: asm volatile("bar.sync 1, %0;\n" ::"r"(S * 32) : "memory"); break;
    case 1: asm volatile("bar.sync 2, %0;\n" ::"r"(S * 32) : "memory"); break;
    case 2: asm volatile("bar.sync 3, %0;\n" ::"r"(S * 32) : "memory"); break;
    default: asm volatile("bar.sync 4, %0;\n" ::"r"(S * 32) : "memory"); break;
    }
}

/* TC_TRACE (KILN_CUDA_GEMV_TC_TRACE=FILE; diagnostic, eager only: KILN_CUDA_GRAPH=0): thread 0 of
 * every block writes %globaltimer at 0 entry, 1 its first loads issued, 2 after the PDL wait, 3 x
 * prepared, 4 its first item computed, 5 its last item done, then 6 %smid and 7 its item count
 * (helper-51's side branch 33bfb2a, adapted) */
#define TC_STAMP(k)                                                                                 \
    do {                                                                                            \
        if constexpr ((MODE & TC_TRACE) != 0)                                                       \
            if (threadIdx.x == 0) {                                                                 \
                unsigned long long t_;                                                              \
                asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t_));                           \
                a.trace[(size_t)blockIdx.x * 8 + (k)] = t_;                                         \
            }                                                                                       \
    } while (0)

template <int BITS, int NU, int SBF, int MODE>
__global__ void __launch_bounds__(TC_MAXT) gemv_tc_kernel(const __grid_constant__ tc_args a) {
    TC_STAMP(0);
    TL_STAMPS(2); /* KILN_CUDA_TIMELINE builds: stamps 11 and 12 (timeline.cuh) */
    using G = tc_geo<BITS>;
    extern __shared__ __align__(16) char tc_sh[];
    const int K = a.K, nchunks = (K + G::CHUNK - 1) / G::CHUNK, nspans = nchunks * 4;
    const int S = a.S, NW = blockDim.x >> 5;                        /* warps splitting a tile's K; warps of the block */
    constexpr int U = G::SPAN / NU;                                 /* columns of a unit (Σx)     */
    char *xsh = tc_sh;                                              /* (nspans + 1 zero span) × SPAN_B */
    float *xf = (float *)(tc_sh + (size_t)(nspans + 1) * G::SPAN_B); /* a.xf: x, U + 4 floats a unit */
    float *xsum = xf + (a.xf ? K + 4 * (K / U) : 0);                /* K / unit                   */
    constexpr bool prep = (MODE & TC_PREP) != 0;                    /* then 2^-e per span after Σx */
    const float *xinv = xsum + K / U;
    float *red = xsum + K / U + (prep ? nspans : 0);                /* G × S × 16                 */
    __shared__ float smax[TC_MAXT / 32];
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int grp = (threadIdx.x >> 5) / S, warp = (threadIdx.x >> 5) % S; /* tile group, warp in it */
    const int gi = blockIdx.x * a.G + grp, NG = gridDim.x * a.G;         /* group index, groups in the grid */
    const int ipt = (nchunks + S - 1) / S; /* items per warp per tile */
    /* TC_GLU: the group's k-th tile is pair gi + (k/2)·NG's gate tile (k even) or up tile (P later) */
    constexpr bool glu = (MODE & TC_GLU) != 0;
    const int P = glu ? a.seg[1].tile0 : 0;
    const int ntb = glu ? (P > gi ? 2 * ((P - 1 - gi) / NG + 1) : 0) : a.ntiles > gi ? (a.ntiles - 1 - gi) / NG + 1 : 0;
    const int n = ntb * ipt;
    pdl_trigger(); /* the next kernel (if PDL-launched) may start: it waits for this one's end */
    tc_buf A, Bf;
    int ct = gi, cj = 0, lt = gi, lj = 0; /* compute / load cursors: tile, item in tile */
    int ck = 0, lk = 0;                  /* TC_GLU: the tiles' indices k in the group's walk */
    auto load = [&](tc_buf &B) { /* the item after the last one loaded */
        if (++lj == ipt) {
            lj = 0;
            if constexpr (glu) { ++lk; lt = gi + (lk >> 1) * NG + (lk & 1) * P; }
            else lt += NG;
        }
        const int chunk = warp + lj * S;
        if (chunk < nchunks) tc_load<BITS, NU>(B, a, lt, chunk, g, q);
    };
    /* the first two items in flight before x exists: weights do not depend on the kernel before
     * (launched with PDL, this overlaps that kernel's tail and this one's launch), then wait for x */
    if (n > 0) tc_load<BITS, NU>(A, a, gi, warp, g, q);
    if (n > 1 && a.pre == 2) load(Bf);
    TC_STAMP(1);
    pdl_wait();
    TC_STAMP(2);

    float inv_scale = 1.f;
    if constexpr (prep) {
        /* TC_PREP: the producer wrote this block's shared-memory image of x (digit planes, the zero
         * span, Σx, 2^-e per span: xprep.cuh); copied, nothing computed */
        const int n16 = (int)(((size_t)(nspans + 1) * G::SPAN_B + sizeof(float) * (K / U + nspans)) >> 4);
        for (int i = threadIdx.x; i < n16; i += blockDim.x)
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"((uint32_t)__cvta_generic_to_shared(tc_sh + 16 * (size_t)i)),
                         "l"(a.xp + 16 * (size_t)i)
                         : "memory");
        asm volatile("cp.async.commit_group;\n" ::: "memory");
        asm volatile("cp.async.wait_group 0;\n" ::: "memory");
        __syncthreads();
    } else {
    /* x → shared: max |x| → e; x' = round(x·2^e) (|x'| < 2^22) as three signed byte planes per
     * octet in IMMA order; Σx per unit (x 16-byte aligned, K % 128 == 0: float4 loads) */
    const float4 *x4 = (const float4 *)a.x;
    float4 *xf4 = (float4 *)xf; /* a.xf: x read from L2 once, kept here for the digits and Σx */
    float m = 0.f;
    const bool xa = a.pre == 3 && a.xf && !(MODE & TC_NORM); /* x by cp.async into xf4, then item 1's loads, then the max pass over shared memory */
    if constexpr ((MODE & TC_NORM) != 0) {
        /* h = rms_norm(x) as rmsnorm.cu's rms_norm4_kernel computes it (256 < K <= 8192; a.xf): there
         * 256 threads, thread t summing the squares of float4s t, t + 256, ... (fmaf in x, y, z, w
         * order), an xor tree per warp, the 8 warp sums added in warp order, then (x·inv)·(off + w);
         * here x is read once into xf, each of those 256 sums is taken by thread t mod NW·32 from
         * there, and h replaces x in xf (the max pass below runs over h) */
        __shared__ float nws[8];
        for (int i = threadIdx.x; i < K / 4; i += blockDim.x) xf4[i + (i / (U / 4))] = __ldcg(x4 + i);
        __syncthreads();
        for (int vt = threadIdx.x; vt - (int)(threadIdx.x & 31) < 256; vt += blockDim.x) { /* warp-uniform */
            float ss = 0.f;
            for (int i = vt; i < K / 4; i += 256) {
                const float4 v = xf4[i + (i / (U / 4))];
                ss = fmaf(v.x, v.x, ss); ss = fmaf(v.y, v.y, ss); ss = fmaf(v.z, v.z, ss); ss = fmaf(v.w, v.w, ss);
            }
            for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
            if (lane == 0) nws[vt >> 5] = ss;
        }
        __syncthreads();
        float tot = 0.f;
        for (int i = 0; i < 8; i++) tot += nws[i];
        const float inv = 1.0f / sqrtf(tot / (float)K + a.eps);
        for (int i = threadIdx.x; i < K / 4; i += blockDim.x) {
            float4 o = xf4[i + (i / (U / 4))];
            if (a.nw) {
                const float4 wv = ((const float4 *)a.nw)[i];
                o.x = (o.x * inv) * (a.off + wv.x); o.y = (o.y * inv) * (a.off + wv.y);
                o.z = (o.z * inv) * (a.off + wv.z); o.w = (o.w * inv) * (a.off + wv.w);
            } else {
                o.x *= inv; o.y *= inv; o.z *= inv; o.w *= inv;
            }
            xf4[i + (i / (U / 4))] = o;
            m = fmaxf(m, fmaxf(fmaxf(fabsf(o.x), fabsf(o.y)), fmaxf(fabsf(o.z), fabsf(o.w))));
        }
    }
    if (xa) {
        for (int i = threadIdx.x; i < K / 4; i += blockDim.x)
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"((uint32_t)__cvta_generic_to_shared(xf4 + i + (i / (U / 4)))), "l"(x4 + i)
                         : "memory");
        asm volatile("cp.async.commit_group;\n" ::: "memory");
        if (n > 1) load(Bf);
        asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    }
    /* the plain kernel (MODE 0): four of the thread's float4s loaded before any is stored — one load, store, max
     * per float4 kept each ld.global.cg behind the shared store before it, a round trip to L2 per float4, ~28 % of
     * a launch's warp samples (ncu source counters, session 28). The same values and max order. The fused and
     * traced modes keep the one-at-a-time loop (batched, four registers spilled there) */
    if constexpr (MODE == 0) {
        for (int i0 = threadIdx.x; i0 < K / 4; i0 += 4 * blockDim.x) {
            float4 v[4];
#pragma unroll
            for (int b = 0; b < 4; b++) {
                const int i = i0 + b * blockDim.x;
                if (i < K / 4) v[b] = xa ? xf4[i + (i / (U / 4))] : __ldcg(x4 + i); /* xa: this thread's own cp.async data */
            }
#pragma unroll
            for (int b = 0; b < 4; b++) {
                const int i = i0 + b * blockDim.x;
                if (i >= K / 4) break;
                m = fmaxf(m, fmaxf(fmaxf(fabsf(v[b].x), fabsf(v[b].y)), fmaxf(fabsf(v[b].z), fabsf(v[b].w))));
                if (a.xf && !xa) xf4[i + (i / (U / 4))] = v[b]; /* a float4 of padding per unit: Σx's reads avoid bank conflicts */
            }
        }
    } else {
#pragma unroll 8
        for (int i = (MODE & TC_NORM) ? K : threadIdx.x; i < K / 4; i += blockDim.x) {
            const float4 v = xa ? xf4[i + (i / (U / 4))] : __ldcg(x4 + i); /* xa: this thread's own cp.async data */
            m = fmaxf(m, fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))));
            if (a.xf && !xa) xf4[i + (i / (U / 4))] = v; /* a float4 of padding per unit: Σx's reads avoid bank conflicts */
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) smax[threadIdx.x >> 5] = m;
    __syncthreads();
    m = smax[0];
    for (int i = 1; i < NW; i++) m = fmaxf(m, smax[i]);
    int ex = 0;
    if (m > 0.f && m <= 3.0e38f) { frexpf(m, &ex); ex = 22 - ex; ex = ex > 120 ? 120 : ex < -120 ? -120 : ex; }
    const float up = __int_as_float((127 + ex) << 23);
    inv_scale = __int_as_float((127 - ex) << 23);
#pragma unroll 4
    for (int ob = threadIdx.x; ob < (nspans + 1) * G::NOCT; ob += blockDim.x) {
        float xv[8];
        const bool in = ob * 8 < K; /* the padding spans and the zero span hold zeros */
        const int i0 = 2 * ob, ix = a.xf ? i0 + i0 / (U / 4) : i0; /* octets never straddle a unit */
        const float4 *src = a.xf ? xf4 : x4;
        const float4 v0 = in ? (a.xf ? src[ix] : __ldcg(src + ix)) : make_float4(0.f, 0.f, 0.f, 0.f),
                     v1 = in ? (a.xf ? src[ix + 1] : __ldcg(src + ix + 1)) : make_float4(0.f, 0.f, 0.f, 0.f);
        xv[0] = v0.x; xv[1] = v0.y; xv[2] = v0.z; xv[3] = v0.w; xv[4] = v1.x; xv[5] = v1.y; xv[6] = v1.z; xv[7] = v1.w;
        uint32_t pl[3][2] = {{0, 0}, {0, 0}, {0, 0}};
        if (!a.xf) {
#pragma unroll
            for (int j = 0; j < 8; j++) {
                /* byte position of column j: 4-bit (0,2,4,6 | 1,3,5,7) like the nibble bytes; 8-bit natural */
                const int pos = BITS == 4 ? (j & 1) * 4 + (j >> 1) : j;
                int d[3];
                tc_digits(__float2int_rn(__fmul_rn(xv[j], up)), d);
#pragma unroll
                for (int p = 0; p < 3; p++) pl[p][pos >> 2] |= (uint32_t)(d[p] & 255) << (8 * (pos & 3));
            }
        } else {
            xp_octet_planes<BITS>(xv, up, pl); /* the same digits by PRMT from the bytes of x' + 0x808080 (xprep.cuh) */
        }
        uint2 *dst = (uint2 *)(xsh + (size_t)(ob / G::NOCT) * G::SPAN_B + (ob % G::NOCT) * 24);
#pragma unroll
        for (int p = 0; p < 3; p++) dst[p] = make_uint2(pl[p][0], pl[p][1]);
    }
    for (int u = threadIdx.x; u < K / U; u += blockDim.x) {
        float4 v[U / 4];
#pragma unroll
        for (int j = 0; j < U / 4; j++) v[j] = a.xf ? xf4[u * (U / 4 + 1) + j] : __ldcg(x4 + u * (U / 4) + j);
        float s = 0.f;
#pragma unroll
        for (int j = 0; j < U / 4; j++) s = __fadd_rn(__fadd_rn(__fadd_rn(__fadd_rn(s, v[j].x), v[j].y), v[j].z), v[j].w);
        xsum[u] = s;
    }
    __syncthreads();
    }
    if (n > 1 && (a.pre == 1 || (a.pre == 3 && !a.xf))) load(Bf);
    TC_STAMP(3);
    TL_STAMP(11); /* KILN_CUDA_TIMELINE builds: x prepared (after the block barrier) */

    /* B columns: 2q'+p of the plane-0/1 MMA = lane q' span's plane p (lane g = 2q'+p supplies it),
     * 2q' of the plane-2 MMA = its plane 2 (lane g = 2q'); every other lane reads the zero span */
    const char *zero = xsh + (size_t)nspans * G::SPAN_B;
    const bool act1 = (g >> 1) == q, act2 = g == 2 * q;
    const int off1 = act1 ? 8 * (g & 1) : 0, off2 = act2 ? 16 : 0;
    float acc[2] = {0.f, 0.f};
    float gv = 0.f; /* TC_GLU: the gate row's sum (warp 0, lanes < 16) until its up row's */
    auto item = [&](tc_buf &B) {
        const int chunk = warp + cj * S;
        if (chunk < nchunks) {
            const int span = chunk * 4 + q, col0 = span * G::SPAN;
            const char *sp = xsh + (size_t)span * G::SPAN_B;
            tc_compute<BITS, NU, SBF>(B, acc, col0, col0 < K, (act1 ? sp : zero) + off1, (act2 ? sp : zero) + off2, xsum,
                                      prep ? xinv[span] : inv_scale);
        }
        if (++cj == ipt) { /* the tile's last item: add lanes q, then warps in order */
#pragma unroll
            for (int r = 0; r < 2; r++) {
                acc[r] = __fadd_rn(acc[r], __shfl_xor_sync(0xffffffffu, acc[r], 1));
                acc[r] = __fadd_rn(acc[r], __shfl_xor_sync(0xffffffffu, acc[r], 2));
            }
            float *rg = red + grp * S * 16; /* this group's S × 16 */
            if (q == 0) { rg[warp * 16 + g] = acc[0]; rg[warp * 16 + g + 8] = acc[1]; }
            acc[0] = acc[1] = 0.f;
            tc_bar(grp, S);
            if (warp == 0 && lane < 16) {
                float v = rg[lane];
                for (int w = 1; w < S; w++) v = __fadd_rn(v, rg[w * 16 + lane]);
                const tc_seg &sg = a.seg[tc_seg_of(a, ct)];
                const int row = (ct - sg.tile0) * 16 + lane;
                if constexpr (glu) {
                    if (!(ck & 1)) gv = v;
                    else if (row < sg.rows) a.seg[0].y[row] = glu_act(gv, v, a.gelu); /* bitwise glu_kernel's */
                } else if constexpr ((MODE & TC_ACC) != 0) {
                    if (row < sg.rows) sg.y[row] = __fadd_rn(__ldcg(sg.y + row), v); /* the add op's x + d */
                } else if (row < sg.rows) sg.y[row] = v;
            }
            tc_bar(grp, S);
            cj = 0;
            if constexpr (glu) { ++ck; ct = gi + (ck >> 1) * NG + (ck & 1) * P; }
            else ct += NG;
        }
    };
    for (int it = 0; it < n; it += 2) { /* computing item it, it + 1 is in flight */
        item(A);
        if (it == 0) TC_STAMP(4);
        if (it + 2 < n) load(A);
        if (it + 1 < n) {
            item(Bf);
            if (it + 3 < n) load(Bf);
        }
    }
    TC_STAMP(5);
    TL_STAMP(12); /* thread 0's last item done */
    if constexpr ((MODE & TC_TRACE) != 0)
        if (threadIdx.x == 0) {
            unsigned sm;
            asm volatile("mov.u32 %0, %%smid;\n" : "=r"(sm));
            a.trace[(size_t)blockIdx.x * 8 + 6] = sm;
            a.trace[(size_t)blockIdx.x * 8 + 7] = (unsigned long long)n;
        }
}

/* ---- 2..4 tokens: gemv_tcm_kernel (matmul and matmul_multi at T = NT; KILN_CUDA_GEMV_TC_T, default 2; 4-bit weights
 * of K >= KILN_CUDA_GEMV_TC_T_MINK only, default 4096: tcm_shape_ok) ----
 *
 * A decode step of 2..4 rows (a few concurrent requests, a short verify) on the same walk as one
 * token: the weights stream once and every item feeds NT tokens from the same A registers. Lane q
 * still owns D columns 2q, 2q+1 of each MMA, so the NT·3 (token, plane) columns take M = ⌈3·NT/2⌉
 * MMAs an octet (NT = 1: two, one half empty; 2: 3; 3: 5; 4: 6) where the one-token kernel's two
 * fed one token. Column 2m + c of MMA m is plane j = 2m + c (j = 3t + p: token t's digit p; j =
 * 3·NT, where odd, a zero plane), so a lane reads its B fragments at one base + 16·m, and lanes that
 * supply no column read the zero span as before. Before this, 2..8 rows took matmul_wgmma.cu, which
 * converts every weight element to f16 for a handful of tokens: a 2-row llama-3-8b q4 step cost
 * 1.7× a one-row step.
 *
 * Each token's rows are bitwise what the one-token kernel gives for that token alone: the same
 * digits (x' = round(x·2^e_t), e_t from max|x_t|), the same exact integer sums, the same f32 fold
 * per unit (scale·p·2^-e + bias·Σx), the same lane and warp order at the tile's end, and S by K as
 * there (test_cuda_kernels test_gemv_tcm). So c = 1..NT decode rows through the engine are batch
 * invariant, as one row always was.
 *
 * Kept simpler than the one-token kernel: plain matmuls only (no fused norm / add / GLU modes, no
 * producer-prepared x, no trace), x read from L2 for its max, digit and Σx passes (no f32 copy in
 * shared memory: the digit planes are already 3·NT bytes a column — 172 KB at K = 14336, NT = 4),
 * blocks of at most 256 threads (a tile group of 8 warps, or two of 4) so that the larger
 * accumulator set does not spill under the one-token kernel's 128-register cap. */
#define TCM_MAXT 256
#define TCM_MAXNT 4
template <int BITS, int NT> struct tcm_geo {
    static constexpr int M = (3 * NT + 1) / 2;                /* MMAs an octet */
    static constexpr int OCT_B = 16 * M;                      /* bytes of an octet's digits: plane j at 8·j */
    static constexpr int SPAN_B = tc_geo<BITS>::NOCT * OCT_B + 16; /* + pad: the 4 lanes' spans on distinct banks */
};

/* acc[t][r] += this lane's span of the item for token t, rows g, g+8 (tc_compute for NT tokens; xb:
 * the lane's B source, its own span or the zero span, at its column's plane parity) */
template <int BITS, int NU, int SBF, int NT>
__device__ __forceinline__ void tcm_compute(const tc_buf &B, float (&acc)[NT][2], int col0, bool valid, const char *xb, const float *xsum,
                                            int ku, const float (&inv)[NT]) {
    using G = tc_geo<BITS>;
    using H = tcm_geo<BITS, NT>;
    constexpr int OPU = G::NOCT / NU, M = H::M;
    const uint32_t *w0 = (const uint32_t *)&B.c[0][0], *w1 = (const uint32_t *)&B.c[1][0];
#pragma unroll
    for (int u = 0; u < NU; u++) {
        int d[M][4];
#pragma unroll
        for (int m = 0; m < M; m++) d[m][0] = d[m][1] = d[m][2] = d[m][3] = 0;
#pragma unroll
        for (int o = u * OPU; o < (u + 1) * OPU; o++) {
            uint32_t a0, a1, a2, a3;
            tc_afrag<BITS>(w0, w1, o, a0, a1, a2, a3);
#pragma unroll
            for (int m = 0; m < M; m++) {
                const uint2 b = *(const uint2 *)(xb + o * H::OCT_B + 16 * m);
                tc_imma(d[m], a0, a1, a2, a3, b.x, b.y);
            }
        }
        if (valid) {
#pragma unroll
            for (int t = 0; t < NT; t++) { /* plane j of row g: d[j / 2][j % 2], of row g + 8: d[j / 2][2 + j % 2] */
                const int j0 = 3 * t, j1 = 3 * t + 1, j2 = 3 * t + 2;
                const float xs = xsum[t * ku + col0 / (G::SPAN / NU) + u];
                const float p0 = __fmaf_rn((float)d[j2 >> 1][j2 & 1], 65536.f, (float)(d[j0 >> 1][j0 & 1] + d[j1 >> 1][j1 & 1] * 256));
                const float p1 = __fmaf_rn((float)d[j2 >> 1][2 + (j2 & 1)], 65536.f, (float)(d[j0 >> 1][2 + (j0 & 1)] + d[j1 >> 1][2 + (j1 & 1)] * 256));
                acc[t][0] = __fmaf_rn(tc_sb<SBF>(B.s[0], u), __fmul_rn(p0, inv[t]), acc[t][0]);
                acc[t][0] = __fmaf_rn(tc_sb<SBF>(B.b[0], u), xs, acc[t][0]);
                acc[t][1] = __fmaf_rn(tc_sb<SBF>(B.s[1], u), __fmul_rn(p1, inv[t]), acc[t][1]);
                acc[t][1] = __fmaf_rn(tc_sb<SBF>(B.b[1], u), xs, acc[t][1]);
            }
        }
    }
}

template <int BITS, int NU, int SBF, int NT>
__global__ void __launch_bounds__(TCM_MAXT) gemv_tcm_kernel(const __grid_constant__ tc_args a) {
    using G = tc_geo<BITS>;
    using H = tcm_geo<BITS, NT>;
    extern __shared__ __align__(16) char tc_sh[];
    const int K = a.K, nchunks = (K + G::CHUNK - 1) / G::CHUNK, nspans = nchunks * 4;
    const int S = a.S, NW = blockDim.x >> 5;
    constexpr int U = G::SPAN / NU;
    const int ku = K / U;                                              /* units a row */
    char *xsh = tc_sh;                                                 /* (nspans + 1 zero span) × SPAN_B */
    float *xsum = (float *)(tc_sh + (size_t)(nspans + 1) * H::SPAN_B); /* NT × ku */
    float *red = xsum + NT * ku;                                       /* G × S × NT × 16 */
    __shared__ float smax[NT][TCM_MAXT / 32];
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int grp = (threadIdx.x >> 5) / S, warp = (threadIdx.x >> 5) % S;
    const int gi = blockIdx.x * a.G + grp, NG = gridDim.x * a.G;
    const int ipt = (nchunks + S - 1) / S;
    const int ntb = a.ntiles > gi ? (a.ntiles - 1 - gi) / NG + 1 : 0, n = ntb * ipt;
    pdl_trigger();
    tc_buf A, Bf;
    int ct = gi, cj = 0, lt = gi, lj = 0;
    auto load = [&](tc_buf &B) {
        if (++lj == ipt) { lj = 0; lt += NG; }
        const int chunk = warp + lj * S;
        if (chunk < nchunks) tc_load<BITS, NU>(B, a, lt, chunk, g, q);
    };
    if (n > 0) tc_load<BITS, NU>(A, a, gi, warp, g, q); /* the first two items before x exists, as one token does */
    if (n > 1) load(Bf);
    pdl_wait();

    /* per token: max |x_t| (four float4s in flight a thread), then e_t */
    const float4 *x4 = (const float4 *)a.x;
    float m[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) m[t] = 0.f;
    for (int i0 = threadIdx.x; i0 < K / 4; i0 += 2 * blockDim.x) {
        float4 v[NT][2];
#pragma unroll
        for (int b = 0; b < 2; b++)
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const int i = i0 + b * blockDim.x;
                v[t][b] = i < K / 4 ? __ldcg(x4 + (size_t)t * (K / 4) + i) : make_float4(0.f, 0.f, 0.f, 0.f);
            }
#pragma unroll
        for (int b = 0; b < 2; b++)
#pragma unroll
            for (int t = 0; t < NT; t++)
                m[t] = fmaxf(m[t], fmaxf(fmaxf(fabsf(v[t][b].x), fabsf(v[t][b].y)), fmaxf(fabsf(v[t][b].z), fabsf(v[t][b].w))));
    }
#pragma unroll
    for (int t = 0; t < NT; t++) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) m[t] = fmaxf(m[t], __shfl_xor_sync(0xffffffffu, m[t], o));
        if (lane == 0) smax[t][threadIdx.x >> 5] = m[t];
    }
    __syncthreads();
    float up[NT], inv[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) {
        float mt = smax[t][0];
        for (int i = 1; i < NW; i++) mt = fmaxf(mt, smax[t][i]);
        int ex = 0;
        if (mt > 0.f && mt <= 3.0e38f) { frexpf(mt, &ex); ex = 22 - ex; ex = ex > 120 ? 120 : ex < -120 ? -120 : ex; }
        up[t] = __int_as_float((127 + ex) << 23);
        inv[t] = __int_as_float((127 - ex) << 23);
    }
    /* digit planes: octet ob of token t at plane j = 3t + p (the one-token kernel's PRMT gather) */
    for (int ob = threadIdx.x; ob < (nspans + 1) * G::NOCT; ob += blockDim.x) {
        const bool in = ob * 8 < K;
        uint2 *dst = (uint2 *)(xsh + (size_t)(ob / G::NOCT) * H::SPAN_B + (ob % G::NOCT) * H::OCT_B);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            const float4 *src = x4 + (size_t)t * (K / 4) + 2 * ob;
            const float4 v0 = in ? __ldcg(src) : make_float4(0.f, 0.f, 0.f, 0.f), v1 = in ? __ldcg(src + 1) : make_float4(0.f, 0.f, 0.f, 0.f);
            const float xv[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
            uint32_t pl[3][2];
            xp_octet_planes<BITS>(xv, up[t], pl);
#pragma unroll
            for (int p = 0; p < 3; p++) dst[3 * t + p] = make_uint2(pl[p][0], pl[p][1]);
        }
        if constexpr ((3 * NT) & 1) dst[3 * NT] = make_uint2(0, 0);
    }
    /* Σx per unit and token, in the one-token kernel's order */
    for (int i = threadIdx.x; i < NT * ku; i += blockDim.x) {
        const int t = i / ku, u = i % ku;
        const float4 *src = x4 + (size_t)t * (K / 4) + (size_t)u * (U / 4);
        float4 v[U / 4];
#pragma unroll
        for (int j = 0; j < U / 4; j++) v[j] = __ldcg(src + j);
        float s = 0.f;
#pragma unroll
        for (int j = 0; j < U / 4; j++) s = __fadd_rn(__fadd_rn(__fadd_rn(__fadd_rn(s, v[j].x), v[j].y), v[j].z), v[j].w);
        xsum[i] = s;
    }
    __syncthreads();

    const char *zero = xsh + (size_t)nspans * H::SPAN_B;
    const bool act = (g >> 1) == q; /* lane (g, q) supplies column g of every MMA: plane 2m + (g & 1) of span q' = g / 2 */
    const int off = act ? 8 * (g & 1) : 0;
    float acc[NT][2];
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t][0] = acc[t][1] = 0.f;
    auto item = [&](tc_buf &B) {
        const int chunk = warp + cj * S;
        if (chunk < nchunks) {
            const int span = chunk * 4 + q, col0 = span * G::SPAN;
            tcm_compute<BITS, NU, SBF, NT>(B, acc, col0, col0 < K, (act ? xsh + (size_t)span * H::SPAN_B : zero) + off, xsum, ku, inv);
        }
        if (++cj == ipt) { /* the tile's last item: lanes q, then warps in order (the one-token kernel's) */
            float *rg = red + grp * S * NT * 16;
#pragma unroll
            for (int t = 0; t < NT; t++) {
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    acc[t][r] = __fadd_rn(acc[t][r], __shfl_xor_sync(0xffffffffu, acc[t][r], 1));
                    acc[t][r] = __fadd_rn(acc[t][r], __shfl_xor_sync(0xffffffffu, acc[t][r], 2));
                }
                if (q == 0) { rg[(warp * NT + t) * 16 + g] = acc[t][0]; rg[(warp * NT + t) * 16 + g + 8] = acc[t][1]; }
                acc[t][0] = acc[t][1] = 0.f;
            }
            tc_bar(grp, S);
            if (warp == 0) {
                const tc_seg &sg = a.seg[tc_seg_of(a, ct)];
                for (int i = lane; i < NT * 16; i += 32) {
                    const int t = i >> 4, l = i & 15;
                    float v = rg[t * 16 + l];
                    for (int w = 1; w < S; w++) v = __fadd_rn(v, rg[(w * NT + t) * 16 + l]);
                    const int row = (ct - sg.tile0) * 16 + l;
                    if (row < sg.rows) sg.y[(size_t)t * sg.rows + row] = v;
                }
            }
            tc_bar(grp, S);
            cj = 0;
            ct += NG;
        }
    };
    for (int it = 0; it < n; it += 2) {
        item(A);
        if (it + 2 < n) load(A);
        if (it + 1 < n) {
            item(Bf);
            if (it + 3 < n) load(Bf);
        }
    }
}

/* ---- the ring GEMV: gemv_tcr_kernel (one token, matmul / matmul_multi without fused modes; KILN_CUDA_GEMV_RING=1,
 * opt-in, read per call) ----
 *
 * Why: ~1.0 ms of a 2.8-ms llama-3-8b q4 token (H100, session 55) lies between the GEMVs, not in them. gemv_tc_kernel's
 * blocks fill an SM's registers (16 warps × 128), so the next launch's blocks become resident only once this one's
 * have left, and every hop drains the memory pipe: the next kernel's first loads wait for its blocks to be placed.
 * Here a block is one producer warp and TCR_NCW = 8 consumer warps (about half an SM's registers) with ~100 KB of
 * shared memory (KILN_CUDA_GEMV_RING_SMEM; more only where two slots a consumer set need it), so the next launch's
 * blocks fit beside a running one. The producer streams the block's weights by the copy engine into a ring of
 * shared-memory slots, starting before the PDL wait (weights do not depend on the kernel before), so a launch that
 * is resident early has its ring full when its x is ready; the consumers wait for x, prepare it and run tc_compute
 * on each chunk of a slot, then free it.
 *
 * A slot is a quad: 4 chunks (4 × 256 bytes of codes) of one tile's 16 rows, with their scales and biases — three
 * tensor-map boxes (codes as 64-bit elements, 1040 bytes a row: the quad plus 16 bytes of the next, so that rows lie
 * 16 bytes apart in the banks and a warp's code reads are conflict-free; scales and biases 4 × SBR bytes a row).
 * Session 58's first version copied one chunk an item in three boxes, two of them 16-byte rows: the producer's
 * lane then issued ~60 instructions per 4.6 KB and the kernel streamed 0.6–0.96 TB/s (ncu, H100); per-row bulk
 * copies were slower still (batch-1 llama-3-8b q4 75 tok/s against 190).
 *
 * The 8 consumer warps are two sets of 4; each set takes one quad of every slot the producer fills for it and has
 * its own half of the ring, used in its own order, so a slot's fills all go to one set and full[s]'s parity alone
 * names the fill (no tags: session 57's race was a shared ring whose uses went to different warps). With S = 4
 * (K < 8192) a set is a tile group; with S = 8 a set is a quad's 4 warps of the one group.
 *
 * Bitwise gemv_tc_kernel: the same x preparation (the f32 copy where the budget allows it, else three reads of x from
 * L2; the same digits either way), the same split of a tile (S warps by K, warp w of a group taking chunks w, w + S,
 * …), the same fold per unit and the same lane and warp order at a tile's end — only where an item's bytes come
 * from changes. test_gemv_ring compares the two kernels bitwise; test_gemv_tcm's one-token rows then check it again.
 * Takes what gemv_tc_kernel takes where a row's scales are a multiple of 16 bytes (K a multiple of 8 groups) and
 * codes, scales and biases 16-byte aligned; otherwise, or where the tensor maps cannot be encoded, gemv_tc_kernel
 * runs.
 *
 * Where it stands (session 59, H100, bench/cuda/RESULTS.md): alone it is level with gemv_tc_kernel (ncu, 2-layer
 * llama-3-8b q4: gate/up 33.6 vs 37.2 µs, q/k/v 16.7 vs 13.8, o 13.9 vs 11.8, down 29.2 vs 24.5 — 8 consumer warps
 * against 16, and a ring of 4 slots holds less than gemv_tc_kernel's registers have in flight); in the decode chain
 * batch-1 llama-3-8b q4 343–346 tok/s against 358–361, 360 at a 200 KB budget (10 slots, no two blocks an SM).
 * Session 60: PDL-launched (now its default) and bitwise after the fence at its refills (tcr_launch). Its chain
 * numbers so far (336.6 against 353.1 off) had it on few launches: tcr_map's old hash left most maps without room
 * (gate/up ringed in 4 of llama-3-8b's 32 layers). Session 62, whole: bitwise in the chain (5160 launches compared,
 * logits md5 equal) and 22 % slower (llama-3-8b q4 272 vs 348 tok/s; every launch class loses), level at one block an
 * SM (KILN_CUDA_GEMV_RING_SMEM=200000); the decode timeline has its GEMV spans from x-ready longer than
 * gemv_tc_kernel's (q/k/v 12.6 vs 6.2 µs): 8 consumer warps consume slower than 16, which the early copies do not
 * make up. Opt-in. */
#define TCR_NCW 8    /* consumer warps: two sets of 4 */
#define TCR_NSMAX 16 /* ring slots at most */
#define TCR_BAR 5    /* the consumers' named barrier (tc_bar uses 1..4) */
#define TCR_QB 1040  /* bytes of a quad's row in a slot: 4 chunks + 16 (bank offset) */
struct tcr_args {
    const CUtensorMap *tm[3 * TC_MAXSEG]; /* segment i: codes (uint64 [rows][K·BITS/64]), scales, biases (uint16 [rows][K/group]),
                                           * in device memory (tcr_map) */
    tc_args a;
    int NS, SBR; /* ring slots (NS / 2 a consumer set); bytes of scales a row of a chunk (the biases' too) */
    int trig_end; /* KILN_CUDA_GEMV_RING_TRIG=end (diagnosis): the next kernel let in at the consumers' end, not at entry */
    int prod_wait; /* KILN_CUDA_GEMV_RING_PREWAIT=0 (diagnosis): the producer too waits for the kernel before (no copies before it) */
    int nofence;   /* KILN_CUDA_GEMV_RING_FENCE=0 (diagnosis): no proxy fence between a slot's reads and its refill (session 59's race) */
};
__device__ __forceinline__ void tcr_mb_wait(uint32_t a, uint32_t par) {
    asm volatile("{\n.reg .pred p;\nTCR_W_%=:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra TCR_W_%=;\n}\n" ::"r"(a), "r"(par)
                 : "memory");
}
__device__ __forceinline__ void tcr_tma(uint32_t dst, const CUtensorMap *m, int x, int y, uint32_t mb) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
                 "l"((uint64_t)m), "r"(x), "r"(y), "r"(mb)
                 : "memory");
}
/* tc_ld_sb's NU 16-bit values, from a slot in shared memory */
template <int NU>
__device__ __forceinline__ void tcr_ld_sb(uint32_t (&v)[2], const char *p) {
    if constexpr (NU == 4) { const uint2 u = *(const uint2 *)p; v[0] = u.x; v[1] = u.y; }
    else if constexpr (NU == 2) { v[0] = *(const uint32_t *)p; v[1] = 0; }
    else { v[0] = *(const uint16_t *)p; v[1] = 0; }
}
__device__ __forceinline__ void tcr_bar(void) { asm volatile("bar.sync %0, %1;\n" ::"n"(TCR_BAR), "n"(TCR_NCW * 32) : "memory"); }

template <int BITS, int NU, int SBF>
__global__ void __launch_bounds__(32 * (TCR_NCW + 1)) gemv_tcr_kernel(const __grid_constant__ tcr_args r) {
    using G = tc_geo<BITS>;
    const tc_args &a = r.a;
    extern __shared__ __align__(128) char tcr_sh[];
    __shared__ __align__(8) uint64_t full[TCR_NSMAX], empty[TCR_NSMAX];
    __shared__ float smax[TCR_NCW];
    const int K = a.K, nchunks = (K + G::CHUNK - 1) / G::CHUNK, nspans = nchunks * 4, S = a.S, NS = r.NS, SBR = r.SBR;
    const int ng = TCR_NCW / S, ipt = (nchunks + S - 1) / S, nq = S / 4, half = NS / 2;
    const int scb = 16 * TCR_QB, slot = scb + 2 * 16 * 4 * SBR; /* a slot: codes box, then scales, biases (16 × 4·SBR each) */
    constexpr int U = G::SPAN / NU;
    char *xsh = tcr_sh + (size_t)NS * slot;                        /* (nspans + 1 zero span) × SPAN_B */
    float *xf = (float *)(xsh + (size_t)(nspans + 1) * G::SPAN_B); /* a.xf: x, U + 4 floats a unit */
    float *xsum = xf + (a.xf ? K + 4 * (K / U) : 0);               /* K / unit */
    float *red = xsum + K / U;                                     /* ng × S × 16 */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int Gb = gridDim.x, ntl = a.ntiles > (int)blockIdx.x ? (a.ntiles - 1 - (int)blockIdx.x) / Gb + 1 : 0; /* tiles b, b + Gb, … */
    const uint32_t ring0 = (uint32_t)__cvta_generic_to_shared(tcr_sh);
    const uint32_t fb = (uint32_t)__cvta_generic_to_shared(full), eb = (uint32_t)__cvta_generic_to_shared(empty);
    if (threadIdx.x == 0) {
        for (int s = 0; s < NS; s++) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(fb + 8 * s) : "memory");
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 4;\n" ::"r"(eb + 8 * s) : "memory"); /* a set's 4 warps */
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (!r.trig_end) pdl_trigger(); /* the next kernel (PDL) may start: its blocks fit beside this one's */
    /* The slots in the order the producer fills them: rounds of up to ng tiles (tile group gr takes the round's tile
     * gr), within a round step jj of every group, within that quad qd of the group's S chunks — quad (gr, qd) goes
     * to consumer set gr·nq + qd, none past K's last chunk. Each set's j-th slot is s = set·half + j % half, its
     * (j / half)-th use. */
    if (warp == TCR_NCW) {
        if (r.prod_wait) pdl_wait();
        if (lane == 0) {
            for (int i = 0; i < 3 * a.nseg; i++) /* the maps (global memory) into the tensor-map proxy, once a block */
                asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"((uint64_t)r.tm[i]) : "memory");
            unsigned cnt0 = 0, cnt1 = 0; /* each set's slots so far (scalars: an indexed pair would live in local memory) */
            for (int r0 = 0; r0 < ntl; r0 += ng) {
                const int nr = min(ng, ntl - r0);
                for (int jj = 0; jj < ipt; jj++)
                    for (int gr = 0; gr < nr; gr++)
                        for (int qd = 0; qd < nq; qd++) {
                            const int c0 = jj * S + 4 * qd; /* the quad's first chunk */
                            if (c0 >= nchunks) continue;
                            const int tile = (int)blockIdx.x + (r0 + gr) * Gb, si = tc_seg_of(a, tile), row0 = (tile - a.seg[si].tile0) * 16;
                            const int set = gr * nq + qd;
                            const unsigned j = set ? cnt1++ : cnt0++, use = j / half;
                            const int s = set * half + (int)(j % half);
                            if (use > 0) {
                                tcr_mb_wait(eb + 8 * s, (use - 1) & 1);
                                /* the consumers' generic reads of the slot's last use ordered before this refill's
                                 * async-proxy writes: without it a copy could overwrite a slot whose reads the
                                 * arrive had released but the shared-memory pipe had not yet served — with two
                                 * ring blocks on one SM, the first tiles of a block came out wrong (session 60) */
                                if (!r.nofence) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
                            }
                            const uint32_t dst = ring0 + (uint32_t)(s * slot), mb = fb + 8 * s;
                            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(mb), "r"(slot) : "memory");
                            tcr_tma(dst, r.tm[3 * si], c0 * (256 / 8), row0, mb);
                            tcr_tma(dst + scb, r.tm[3 * si + 1], c0 * (SBR / 2), row0, mb);
                            tcr_tma(dst + scb + 64 * SBR, r.tm[3 * si + 2], c0 * (SBR / 2), row0, mb);
                        }
            }
        }
        return;
    }
    pdl_wait();
    /* x → shared memory: gemv_tc_kernel's plain (MODE 0) preparation over the consumers' threads and their named
     * barrier. Kept apart from it until the ring is measured: the two folded into shared inline helpers changed the
     * default kernel's PTX (branch layout, registers; session 56's review), which no device has timed */
    const int NT = TCR_NCW * 32;
    const float4 *x4 = (const float4 *)a.x;
    float4 *xf4 = (float4 *)xf;
    float m = 0.f;
    for (int i0 = threadIdx.x; i0 < K / 4; i0 += 4 * NT) {
        float4 v[4];
#pragma unroll
        for (int b = 0; b < 4; b++) {
            const int i = i0 + b * NT;
            if (i < K / 4) v[b] = __ldcg(x4 + i);
        }
#pragma unroll
        for (int b = 0; b < 4; b++) {
            const int i = i0 + b * NT;
            if (i >= K / 4) break;
            m = fmaxf(m, fmaxf(fmaxf(fabsf(v[b].x), fabsf(v[b].y)), fmaxf(fabsf(v[b].z), fabsf(v[b].w))));
            if (a.xf) xf4[i + (i / (U / 4))] = v[b];
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) smax[warp] = m;
    tcr_bar();
    m = smax[0];
    for (int i = 1; i < TCR_NCW; i++) m = fmaxf(m, smax[i]);
    int ex = 0;
    if (m > 0.f && m <= 3.0e38f) { frexpf(m, &ex); ex = 22 - ex; ex = ex > 120 ? 120 : ex < -120 ? -120 : ex; }
    const float up = __int_as_float((127 + ex) << 23), inv_scale = __int_as_float((127 - ex) << 23);
    for (int ob = threadIdx.x; ob < (nspans + 1) * G::NOCT; ob += NT) {
        float xv[8];
        const bool in = ob * 8 < K;
        const int i0 = 2 * ob, ix = a.xf ? i0 + i0 / (U / 4) : i0;
        const float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
        const float4 v0 = in ? (a.xf ? xf4[ix] : __ldcg(x4 + ix)) : z, v1 = in ? (a.xf ? xf4[ix + 1] : __ldcg(x4 + ix + 1)) : z;
        xv[0] = v0.x; xv[1] = v0.y; xv[2] = v0.z; xv[3] = v0.w; xv[4] = v1.x; xv[5] = v1.y; xv[6] = v1.z; xv[7] = v1.w;
        uint32_t pl[3][2];
        xp_octet_planes<BITS>(xv, up, pl); /* the digits gemv_tc_kernel gathers (both of its paths give these) */
        uint2 *dst = (uint2 *)(xsh + (size_t)(ob / G::NOCT) * G::SPAN_B + (ob % G::NOCT) * 24);
#pragma unroll
        for (int p = 0; p < 3; p++) dst[p] = make_uint2(pl[p][0], pl[p][1]);
    }
    for (int u = threadIdx.x; u < K / U; u += NT) {
        float4 v[U / 4];
#pragma unroll
        for (int j = 0; j < U / 4; j++) v[j] = a.xf ? xf4[u * (U / 4 + 1) + j] : __ldcg(x4 + u * (U / 4) + j);
        float s = 0.f;
#pragma unroll
        for (int j = 0; j < U / 4; j++) s = __fadd_rn(__fadd_rn(__fadd_rn(__fadd_rn(s, v[j].x), v[j].y), v[j].z), v[j].w);
        xsum[u] = s;
    }
    tcr_bar();

    const char *zero = xsh + (size_t)nspans * G::SPAN_B;
    const bool act1 = (g >> 1) == q, act2 = g == 2 * q;
    const int off1 = act1 ? 8 * (g & 1) : 0, off2 = act2 ? 16 : 0;
    const int grp = warp / S, w = warp % S, set = warp >> 2, wq = warp & 3; /* wq: this warp's chunk in a quad */
    const uint32_t ebs = eb + 8 * (set * half), fbs = fb + 8 * (set * half);
    const char *ring = tcr_sh + (size_t)(set * half) * slot;
    unsigned j = 0; /* this set's slots so far */
    for (int r0 = 0; r0 < ntl; r0 += ng) {
        if (grp >= min(ng, ntl - r0)) break; /* the last round has fewer tiles: this group has none (and no slots) */
        float acc[2] = {0.f, 0.f};
        for (int jj = 0; jj < ipt; jj++) {
            const int chunk = w + jj * S;
            if (chunk - wq >= nchunks) break; /* the quad lies past K: never filled */
            const unsigned use = j / half, sj = j % half;
            j++;
            tcr_mb_wait(fbs + 8 * sj, use & 1);
            const bool live = chunk < nchunks;
            tc_buf B;
            if (live) {
                const char *sl = ring + (size_t)sj * slot, *cd = sl + wq * 256 + q * 64;
                const char *sc = sl + scb + g * (4 * SBR) + wq * SBR + ((q * G::SPAN) >> a.lg_group) * 2, *bi = sc + 64 * SBR;
#pragma unroll
                for (int rr = 0; rr < 2; rr++) {
#pragma unroll
                    for (int jv = 0; jv < 4; jv++) B.c[rr][jv] = *(const uint4 *)(cd + (g + 8 * rr) * TCR_QB + 16 * jv);
                    tcr_ld_sb<NU>(B.s[rr], sc + rr * 8 * (4 * SBR));
                    tcr_ld_sb<NU>(B.b[rr], bi + rr * 8 * (4 * SBR));
                }
            }
            __syncwarp(); /* the warp's reads of the slot issued (the arrive releases them) */
            if (lane == 0) asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(ebs + 8 * sj) : "memory");
            if (live) {
                const int span = chunk * 4 + q, col0 = span * G::SPAN;
                const char *sp = xsh + (size_t)span * G::SPAN_B;
                tc_compute<BITS, NU, SBF>(B, acc, col0, col0 < K, (act1 ? sp : zero) + off1, (act2 ? sp : zero) + off2, xsum, inv_scale);
            }
        }
        /* this group's tile of the round: lanes q, then warps in order (gemv_tc_kernel's tile end) */
#pragma unroll
        for (int rr = 0; rr < 2; rr++) {
            acc[rr] = __fadd_rn(acc[rr], __shfl_xor_sync(0xffffffffu, acc[rr], 1));
            acc[rr] = __fadd_rn(acc[rr], __shfl_xor_sync(0xffffffffu, acc[rr], 2));
        }
        float *rg = red + grp * S * 16;
        if (q == 0) { rg[w * 16 + g] = acc[0]; rg[w * 16 + g + 8] = acc[1]; }
        tc_bar(grp, S);
        if (w == 0 && lane < 16) {
            float v = rg[lane];
            for (int i = 1; i < S; i++) v = __fadd_rn(v, rg[i * 16 + lane]);
            const int tile = (int)blockIdx.x + (r0 + grp) * Gb;
            const tc_seg &sg = a.seg[tc_seg_of(a, tile)];
            const int row = (tile - sg.tile0) * 16 + lane;
            if (row < sg.rows) sg.y[row] = v;
        }
        tc_bar(grp, S);
    }
    if (r.trig_end) pdl_trigger();
}

/* the trace buffer (KILN_CUDA_GEMV_TC_TRACE=FILE; KILN_CUDA_GEMV_TC_TRACE_SKIP launches skipped, then
 * KILN_CUDA_GEMV_TC_TRACE_N recorded, default 600): then the stream is synchronized, FILE written (one
 * line a block: launch K ntiles nseg rows0 grid G S mode block t0..t5 smid items) and tracing stops.
 * bench/cuda/gemv_tc_trace.py summarizes it. */
static struct {
    int on, n, max, skip;
    unsigned long long *dev;
    size_t used, cap;
    struct { size_t off; int grid, K, ntiles, nseg, rows0, G, S, mode; } rec[4096];
} tc_tr = {-1};
static void tc_trace_init(void) {
    if (tc_tr.on < 0) {
        tc_tr.on = getenv("KILN_CUDA_GEMV_TC_TRACE") != NULL;
        const char *e = getenv("KILN_CUDA_GEMV_TC_TRACE_N"), *k = getenv("KILN_CUDA_GEMV_TC_TRACE_SKIP");
        tc_tr.max = e && atoi(e) > 0 ? atoi(e) : 600;
        if (tc_tr.max > 4096) tc_tr.max = 4096;
        tc_tr.skip = k ? atoi(k) : 0;
        tc_tr.cap = (size_t)1 << 22; /* 4M words: 32 MB */
        if (tc_tr.on && cudaMalloc((void **)&tc_tr.dev, tc_tr.cap * 8) != cudaSuccess) tc_tr.on = 0;
    }
}
static unsigned long long *tc_trace_slot(cudaStream_t st, int grid) {
    tc_trace_init();
    if (!tc_tr.on || tc_tr.n >= tc_tr.max || tc_tr.used + (size_t)grid * 8 > tc_tr.cap) return NULL;
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(st, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone) {
        fprintf(stderr, "kiln: KILN_CUDA_GEMV_TC_TRACE needs KILN_CUDA_GRAPH=0; tracing off\n");
        tc_tr.on = 0;
        return NULL;
    }
    if (tc_tr.skip > 0) { tc_tr.skip--; return NULL; }
    return tc_tr.dev + tc_tr.used;
}
static void tc_trace_done(cudaStream_t st, const tc_args &a, int grid) {
    if (!a.trace) return;
    const int i = tc_tr.n++;
    tc_tr.rec[i].off = tc_tr.used; tc_tr.rec[i].grid = grid; tc_tr.rec[i].K = a.K; tc_tr.rec[i].ntiles = a.ntiles;
    tc_tr.rec[i].nseg = a.nseg; tc_tr.rec[i].rows0 = a.seg[0].rows; tc_tr.rec[i].G = a.G; tc_tr.rec[i].S = a.S; tc_tr.rec[i].mode = a.mode;
    tc_tr.used += (size_t)grid * 8;
    if (tc_tr.n < tc_tr.max && tc_tr.used + 132 * 8 * 4 <= tc_tr.cap) return;
    cudaCheck(cudaStreamSynchronize(st));
    unsigned long long *h = (unsigned long long *)malloc(tc_tr.used * 8);
    FILE *f = fopen(getenv("KILN_CUDA_GEMV_TC_TRACE"), "w");
    if (h && f && cudaMemcpy(h, tc_tr.dev, tc_tr.used * 8, cudaMemcpyDeviceToHost) == cudaSuccess) {
        for (int l = 0; l < tc_tr.n; l++)
            for (int b = 0; b < tc_tr.rec[l].grid; b++) {
                const unsigned long long *t = h + tc_tr.rec[l].off + (size_t)b * 8;
                fprintf(f, "%d %d %d %d %d %d %d %d %d %d", l, tc_tr.rec[l].K, tc_tr.rec[l].ntiles, tc_tr.rec[l].nseg, tc_tr.rec[l].rows0,
                        tc_tr.rec[l].grid, tc_tr.rec[l].G, tc_tr.rec[l].S, tc_tr.rec[l].mode, b);
                for (int k = 0; k < 8; k++) fprintf(f, " %llu", t[k]);
                fputc('\n', f);
            }
        fprintf(stderr, "kiln: gemv_tc trace of %d launches written to %s\n", tc_tr.n, getenv("KILN_CUDA_GEMV_TC_TRACE"));
    }
    if (f) fclose(f);
    free(h);
    tc_tr.on = 0;
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

/* 2..cuda_gemv_tc_max_t() tokens: 4-bit weights of K >= KILN_CUDA_GEMV_TC_T_MINK (default 4096) only. Since the
 * 3..8-token steps moved to matmul_wgmma.cu's 16-token bucket (one multi launch for q/k/v and for gate/up, the GLU
 * in its reduce, x prepared by the norm), that path also wins at two tokens on small or 8-bit weights — H100, 2-row
 * steps, steady tok/s against this kernel in two calls: qwen3-0.6b q4 (K 1024..3072) +4..19 %, llama-3-8b q8 +3..4 %,
 * qwen3-0.6b q8 even (-4..+1.5 %) — while llama-3-8b q4 (K 4096/14336) stays ~4 % faster here (bench/cuda/RESULTS.md
 * session 47). Read per call (the tests change it). */
static int tcm_shape_ok(int bits, int K) {
    const char *e = getenv("KILN_CUDA_GEMV_TC_T_MINK");
    return bits == 4 && K >= (e && *e ? atoi(e) : 4096);
}
int cuda_gemv_tc_takes(const dweight_t *w, int T) { return tc_ok(w) && (T == 1 || tcm_shape_ok(w->bits, w->cols)); }

/* blocks of kern an SM at thr threads and sm bytes of dynamic shared memory (the kernel's limit raised
 * first where sm needs it), cached per (sm, thr): the launchers run on every decode step's capture */
struct tc_occ {
    size_t attr_set;
    struct { size_t smem; int thr, blocks; } e[16];
    int n;
};
template <class Kern>
static int tc_blocks_per_sm(Kern kern, tc_occ &o, int thr, size_t sm) {
    if (sm > 48 * 1024 && sm > o.attr_set) {
        cudaCheck(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
        o.attr_set = sm;
    }
    for (int i = 0; i < o.n; i++)
        if (o.e[i].smem == sm && o.e[i].thr == thr) return o.e[i].blocks;
    int b = 0;
    cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kern, thr, sm));
    if (b < 1) b = 1;
    if (o.n < 16) { o.e[o.n].smem = sm; o.e[o.n].thr = thr; o.e[o.n].blocks = b; o.n++; }
    return b;
}

template <int BITS, int NU, int SBF, int MODE>
static int tc_launch(cuda_impl_t *c, tc_args a) {
    using G = tc_geo<BITS>;
    /* warps per tile by K only (a row's sum order must not depend on the launch): 8 from
     * K = 8192 (llama-3-8b down_proj: 256 tiles would leave ~8 warps per SM at 4). 8 from K = 4096
     * and a grid of as few groups as give the same rounds were measured not faster (session 55,
     * bench/cuda/gemv_tail_s55.patch) */
    const int S = a.K >= 8192 ? 8 : 4;
    const int nchunks = (a.K + G::CHUNK - 1) / G::CHUNK;
    constexpr int U = G::SPAN / NU;
    size_t smem = (size_t)(nchunks * 4 + 1) * G::SPAN_B + sizeof(float) * (a.K / U); /* + G·S·16 floats of red */
    if constexpr ((MODE & TC_PREP) != 0) { smem += sizeof(float) * nchunks * 4; a.xf = 0; } /* 2^-e per span, no f32 x */
    if (smem + sizeof(float) * S * 16 > c->smem_optin) return -1;
    if (MODE & TC_PREP) {
    } else if (a.xf && smem + sizeof(float) * (S * 16 + a.K + 4 * (a.K / U)) <= c->smem_optin) smem += sizeof(float) * (a.K + 4 * (a.K / U));
    else if (MODE & TC_NORM) return -1; /* the norm needs x in shared memory */
    else a.xf = 0;
    static tc_occ occ;
    auto kern = gemv_tc_kernel<BITS, NU, SBF, MODE>;
    auto per_sm_of = [&](int thr, size_t sm) { return tc_blocks_per_sm(kern, occ, thr, sm); };
    const int sms = c->sm_count > 0 ? c->sm_count : 132;
    /* G tile groups per block share one x preparation: as many as blocks of one group would
     * fit on an SM, no more than the tiles need to cover every SM (G = 1: a block per group) */
    static int gmax = -1; /* KILN_CUDA_GEMV_TC_GROUPS=N: at most N groups a block where the tiles need more than one wave
                           * (one-wave launches: below; 0 or 1: a block per group always, as
                           * before); 2 by default (llama-3-8b q4: 347 tok/s at 2, 345 at 4, ncu: gate/up slower at 4) */
    if (gmax < 0) { const char *e = getenv("KILN_CUDA_GEMV_TC_GROUPS"); gmax = e ? atoi(e) : 2; gmax = gmax < 1 ? 1 : gmax; }
    int Gn = 1;
    if (gmax > 1) {
        const int per1 = per_sm_of(S * 32, smem + sizeof(float) * S * 16), want = (a.ntiles + sms - 1) / sms;
        Gn = per1 < want ? per1 : want;
        /* one wave, one block an SM: a launch whose tiles fit one block of `want` groups an SM (want ≤ per1) takes
         * them past the cap — llama-3-8b's q+k+v (384 tiles) at the cap of 2 was 192 blocks, two on 60 SMs and one
         * on 72; now 128 blocks of 3 groups, one an SM (the same warps; a row's sums do not depend on the groups a
         * block holds: bitwise). H200, ncu: that launch 14.6 → 12.7 µs; llama-3-8b q4 batch-1 +0.5..+0.8 % (inside
         * the runs' spread; bench/cuda/RESULTS.md, session 43). KILN_CUDA_GEMV_TC_WAVE1=0: the cap always */
        static int wave1 = -1;
        if (wave1 < 0) { const char *e = getenv("KILN_CUDA_GEMV_TC_WAVE1"); wave1 = !(e && !strcmp(e, "0")); }
        if (Gn > gmax && !(wave1 && want <= per1)) Gn = gmax;
        if (Gn > TC_MAXT / (32 * S)) Gn = TC_MAXT / (32 * S);
        while (Gn > 1 && smem + sizeof(float) * Gn * S * 16 > c->smem_optin) Gn--;
        if (Gn < 1) Gn = 1;
    }
    smem += sizeof(float) * Gn * S * 16;
    const int per_sm = per_sm_of(Gn * S * 32, smem), nblk = (a.ntiles + Gn - 1) / Gn;
    const int grid = nblk < sms * per_sm ? nblk : sms * per_sm;
    a.S = S;
    a.G = Gn;
    if constexpr ((MODE & TC_TRACE) != 0) {
        a.trace = tc_trace_slot(c->stream, grid);
        if (!a.trace) return -2; /* tracing over: the untraced kernel */
    }
    cuda_launch_pdl(c->stream, kern, grid, Gn * S * 32, smem, a);
    if constexpr ((MODE & TC_TRACE) != 0) tc_trace_done(c->stream, a, grid);
    return 0;
}
/* the kernel of a.mode (TC_TRACE while KILN_CUDA_GEMV_TC_TRACE records) */
template <int BITS, int NU, int SBF>
static int tc_launch_m(cuda_impl_t *c, const tc_args &a) {
    if (tc_tr.on != 0) {
        int r = -2;
        switch (a.mode) {
        case 0: r = tc_launch<BITS, NU, SBF, TC_TRACE>(c, a); break;
        case TC_NORM: r = tc_launch<BITS, NU, SBF, TC_TRACE | TC_NORM>(c, a); break;
        case TC_ACC: r = tc_launch<BITS, NU, SBF, TC_TRACE | TC_ACC>(c, a); break;
        case TC_GLU: r = tc_launch<BITS, NU, SBF, TC_TRACE | TC_GLU>(c, a); break;
        case TC_NORM | TC_GLU: r = tc_launch<BITS, NU, SBF, TC_TRACE | TC_NORM | TC_GLU>(c, a); break;
        case TC_PREP: r = tc_launch<BITS, NU, SBF, TC_TRACE | TC_PREP>(c, a); break;
        default: return -1;
        }
        if (r != -2) return r;
    }
    switch (a.mode) {
    case 0: return tc_launch<BITS, NU, SBF, 0>(c, a);
    case TC_NORM: return tc_launch<BITS, NU, SBF, TC_NORM>(c, a);
    case TC_ACC: return tc_launch<BITS, NU, SBF, TC_ACC>(c, a);
    case TC_GLU: return tc_launch<BITS, NU, SBF, TC_GLU>(c, a);
    case TC_NORM | TC_GLU: return tc_launch<BITS, NU, SBF, TC_NORM | TC_GLU>(c, a);
    case TC_PREP: return tc_launch<BITS, NU, SBF, TC_PREP>(c, a);
    default: return -1;
    }
}

/* gemv_tcm_kernel's launch: S by K as one token (a row's sum order), up to two tile groups a block
 * (256 threads) where the tiles need more than one wave of one-group blocks */
template <int BITS, int NU, int SBF, int NT>
static int tcm_launch(cuda_impl_t *c, tc_args a) {
    using G = tc_geo<BITS>;
    using H = tcm_geo<BITS, NT>;
    const int S = a.K >= 8192 ? 8 : 4;
    const int nchunks = (a.K + G::CHUNK - 1) / G::CHUNK;
    constexpr int U = G::SPAN / NU;
    size_t smem = (size_t)(nchunks * 4 + 1) * H::SPAN_B + sizeof(float) * NT * (a.K / U);
    const size_t red1 = sizeof(float) * S * NT * 16; /* a tile group's reduction */
    if (smem + red1 > c->smem_optin) return -1;
    static tc_occ occ;
    auto kern = gemv_tcm_kernel<BITS, NU, SBF, NT>;
    auto per_sm_of = [&](int thr, size_t sm) { return tc_blocks_per_sm(kern, occ, thr, sm); };
    const int sms = c->sm_count > 0 ? c->sm_count : 132;
    int Gn = TCM_MAXT / (32 * S);
    const int want = (a.ntiles + sms - 1) / sms;
    if (Gn > 1) {
        const int per1 = per_sm_of(S * 32, smem + red1);
        if (Gn > per1) Gn = per1;
        if (Gn > want) Gn = want;
        while (Gn > 1 && smem + red1 * Gn > c->smem_optin) Gn--;
        if (Gn < 1) Gn = 1;
        /* not where fewer groups stay resident that way (NT = 3, 4: ~170 registers, one 256-thread block an
         * SM against three of 128) */
        if (Gn > 1 && per_sm_of(Gn * S * 32, smem + red1 * Gn) * Gn < per1) Gn = 1;
    }
    smem += red1 * Gn;
    const int per_sm = per_sm_of(Gn * S * 32, smem), nblk = (a.ntiles + Gn - 1) / Gn;
    const int grid = nblk < sms * per_sm ? nblk : sms * per_sm;
    a.S = S;
    a.G = Gn;
    cuda_launch_pdl(c->stream, kern, grid, Gn * S * 32, smem, a);
    return 0;
}
template <int BITS, int NU, int SBF>
static int tcm_launch_t(cuda_impl_t *c, const tc_args &a, int T) {
    switch (T) {
    case 2: return tcm_launch<BITS, NU, SBF, 2>(c, a);
    case 3: return tcm_launch<BITS, NU, SBF, 3>(c, a);
    case 4: return tcm_launch<BITS, NU, SBF, 4>(c, a);
    default: return -1;
    }
}

/* tokens up to which a step takes this file's kernels (KILN_CUDA_GEMV_TC_T=N, at most TCM_MAXNT;
 * 1: one token only, 2..8 rows on matmul_wgmma.cu as in session 45). Default 2: measured on an H100
 * (bench/cuda/RESULTS.md session 46, engine 128 + 128, steady tok/s against N = 1) 2-row steps +12..21 %
 * (llama-3-8b q4 c=2 453-459 → 522-524, qwen3-0.6b q4 +12.5 %, q8 +21 %; llama-3-8b q8 even), but 3- and
 * 4-row steps 9..27 % slower than the wgmma kernel: per matmul call 17.4 µs at one token, 25.5 at two,
 * 34.6 at three — x's three passes over L2 per token and the larger MMA count, not the weight stream */
int cuda_gemv_tc_max_t(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("KILN_CUDA_GEMV_TC_T");
        v = e ? atoi(e) : 2;
        v = v < 1 ? 1 : v > TCM_MAXNT ? TCM_MAXNT : v;
    }
    return v;
}

/* ---- gemv_tcr_kernel's launch (KILN_CUDA_GEMV_RING=1, read per call) ---- */
extern "C" int kiln_cuda_gemv_ring_calls; /* launches of the ring kernel (the tests check the path ran) */
int kiln_cuda_gemv_ring_calls;
static int tcr_wanted(void) {
    const char *e = getenv("KILN_CUDA_GEMV_RING");
    return e && *e == '1';
}
/* which launches take the ring (read once; 0 or unset: any), diagnosis for bisecting a model's launches:
 * KILN_CUDA_GEMV_RING_K=N only launches of that K, KILN_CUDA_GEMV_RING_NSEG=N only launches of N weights
 * (KILN_CUDA_GEMV_RING_MINT: tcr_launch, which knows the grid) */
static int tcr_scope(const tc_args &a) {
    static int k = -1, ns;
    if (k < 0) {
        const char *ek = getenv("KILN_CUDA_GEMV_RING_K"), *en = getenv("KILN_CUDA_GEMV_RING_NSEG");
        k = ek ? atoi(ek) : 0;
        ns = en ? atoi(en) : 0;
        k = k < 0 ? 0 : k;
    }
    return (!k || a.K == k) && (ns <= 0 || a.nseg == ns);
}
/* A [rows][cols] matrix of elements of es bytes (8: uint64, else uint16) as a 2-D tensor map with boxes of bx × 16,
 * in device memory: the map's address (NULL: not encodable, or the table is full — gemv_tc_kernel runs).
 *
 * Why device memory, not the kernel's parameters (__grid_constant__, as session 58 had them): measured, H100, the same
 * kernel otherwise (call_s59b/c.sh): batch-1 llama-3-8b q4 278–281 tok/s with the maps in parameter space against
 * 343–345 in device memory (gemv_tc_kernel 358–361), and under PDL its logits differed in every run with the former.
 * A guess at why, not verified: launches of one kernel see their parameters at the same address, and the copy
 * engine's descriptor cache keyed on it had to be refetched (or served a neighbour's map). Here every weight's maps
 * have addresses of their own, written once (on first use, a 128-byte copy on a stream of their own and a wait for
 * it — outside any capture of the step's stream) and never rewritten; each block fences its maps into the
 * tensor-map proxy before its first copy.
 * Kept for the process: TCR_MAPCACHE maps (a weight takes three; llama-3-8b ~680). A map depends only on the
 * address, shape and box, so a reused address of the same shape gets the same map. */
#define TCR_MAPCACHE 4096
static struct tcr_mapent { const void *p; size_t cols, rows; int es, bx, slot; } tcr_maps[TCR_MAPCACHE];
static CUtensorMap *tcr_dmaps; /* TCR_MAPCACHE maps on the device */
static int tcr_nmaps;
/* splitmix64's finalizer: every input bit moves every output bit. Session 59's hash, (p >> 4) · φ xor the shape, kept
 * only the product's low 12 bits — which depend only on p's low 16 — and weights of one shape sit at the same offset
 * modulo 64 KB: llama-3-8b's 64 gate/up weights shared one 16-probe neighbourhood per map kind, so the ring took
 * gate/up in 4 of 32 layers (the in-chain check compared 160 launches of 40 steps' 1280, session 60) */
static uint64_t tcr_mix(uint64_t x) {
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27; x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
static const CUtensorMap *tcr_map(const void *p, int es, size_t cols, size_t rows, int bx) {
    if (((uintptr_t)p & 15) || (cols * es) % 16) return NULL;
    const uint64_t h = tcr_mix((uintptr_t)p ^ tcr_mix(((uint64_t)cols << 32) ^ ((uint64_t)rows << 8) ^ (uint64_t)(es * 1024 + bx)));
    tcr_mapent *e = NULL;
    for (int i = 0; i < 16; i++) { /* open addressing, 16 probes; a full neighbourhood: not this kernel */
        tcr_mapent *c = &tcr_maps[(h + (uint64_t)i) % TCR_MAPCACHE];
        if (c->p == p && c->cols == cols && c->rows == rows && c->es == es && c->bx == bx) return tcr_dmaps + c->slot;
        if (!c->p) { e = c; break; }
    }
    const cuda_tmap_encode_fn enc = cuda_tmap_encoder();
    if (!e) { /* said once: gemv_tc_kernel then runs for the weights whose maps find no room */
        static int told;
        if (!told++) fprintf(stderr, "kiln: ring GEMV: the tensor-map table has no room near a weight's maps; gemv_tc_kernel runs for it\n");
        return NULL;
    }
    if (!enc || tcr_nmaps >= TCR_MAPCACHE) return NULL;
    static cudaStream_t st;
    if (!tcr_dmaps && (cudaMalloc((void **)&tcr_dmaps, sizeof(CUtensorMap) * TCR_MAPCACHE) != cudaSuccess ||
                       cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess)) {
        cudaGetLastError();
        if (tcr_dmaps) cudaFree(tcr_dmaps);
        tcr_dmaps = NULL;
        tcr_nmaps = TCR_MAPCACHE; /* no table: never again */
        return NULL;
    }
    CUtensorMap m;
    const cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows}, strides[1] = {(cuuint64_t)(cols * es)};
    const cuuint32_t box[2] = {(cuuint32_t)bx, 16}, el[2] = {1, 1};
    if (enc(&m, es == 8 ? CU_TENSOR_MAP_DATA_TYPE_UINT64 : CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, (void *)p, dims, strides, box, el,
            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
        return NULL;
    /* its own non-blocking stream: not captured with the step (which may be recording now), and waited for here —
     * the copy from pageable memory is complete before any launch can read the map */
    if (cudaMemcpyAsync(tcr_dmaps + tcr_nmaps, &m, sizeof m, cudaMemcpyHostToDevice, st) != cudaSuccess || cudaStreamSynchronize(st) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    e->p = p; e->cols = cols; e->rows = rows; e->es = es; e->bx = bx; e->slot = tcr_nmaps++;
    return tcr_dmaps + e->slot;
}
/* 0: launched; -1: not this kernel's weights (gemv_tc_kernel runs) */
template <int BITS, int NU, int SBF>
static int tcr_launch(cuda_impl_t *c, const tc_args &a0) {
    using G = tc_geo<BITS>;
    tcr_args r;
    memset(&r, 0, sizeof r);
    r.a = a0;
    const int K = a0.K, S = K >= 8192 ? 8 : 4, ng = TCR_NCW / S, nchunks = (K + G::CHUNK - 1) / G::CHUNK;
    /* KILN_CUDA_GEMV_RING_GRID=N (diagnosis and test_gemv_ring_stress, read per call): at most N blocks instead of one
     * an SM — N > SMs puts two on one SM, which session 60's race needed */
    const int gmax = getenv("KILN_CUDA_GEMV_RING_GRID") ? atoi(getenv("KILN_CUDA_GEMV_RING_GRID")) : 0;
    const int sms = gmax > 0 ? gmax : c->sm_count > 0 ? c->sm_count : 132, nblk = (a0.ntiles + ng - 1) / ng, grid = nblk < sms ? nblk : sms;
    /* KILN_CUDA_GEMV_RING_MINT=N (read once): only launches whose blocks get at least N tiles each — alone, session
     * 59's ncu had the ring ahead where a block has many tiles (gate/up's 14) and behind at 1–3 */
    static int mint = -1;
    if (mint < 0) mint = getenv("KILN_CUDA_GEMV_RING_MINT") ? atoi(getenv("KILN_CUDA_GEMV_RING_MINT")) : 0;
    if (mint > 0 && (a0.ntiles + grid - 1) / grid < mint) return -1;
    r.a.S = S;
    r.a.G = ng;
    r.SBR = (G::CHUNK >> a0.lg_group) * 2; /* 4 · SBR: a slot's row of scales, at least 16 bytes for every group size */
    const size_t ngr = (size_t)K >> a0.lg_group, wrow = (size_t)K * BITS / 8;
    if (wrow % 16) return -1;
    for (int i = 0; i < a0.nseg; i++) {
        const tc_seg &sg = a0.seg[i];
        if (!(r.tm[3 * i] = tcr_map(sg.data, 8, wrow / 8, sg.rows, TCR_QB / 8)) || !(r.tm[3 * i + 1] = tcr_map(sg.scales, 2, ngr, sg.rows, 2 * r.SBR)) ||
            !(r.tm[3 * i + 2] = tcr_map(sg.biases, 2, ngr, sg.rows, 2 * r.SBR)))
            return -1;
    }
    constexpr int U = G::SPAN / NU;
    const size_t slot = 16 * TCR_QB + 2 * 16 * 4 * (size_t)r.SBR;
    size_t xpart = (size_t)(nchunks * 4 + 1) * G::SPAN_B + sizeof(float) * (K / U) + sizeof(float) * ng * S * 16;
    const size_t xfb = sizeof(float) * (K + 4 * (K / U));
    /* shared memory: KILN_CUDA_GEMV_RING_SMEM bytes (default 100 KB: two such blocks and a small kernel fit an SM),
     * or what two slots a consumer set need where x's digits leave less (K = 14336: ~120 KB) */
    const char *be = getenv("KILN_CUDA_GEMV_RING_SMEM");
    size_t budget = be && *be ? (size_t)atol(be) : (size_t)100 * 1024;
    if (budget < xpart + 4 * slot) budget = xpart + 4 * slot;
    if (budget > c->smem_optin - 1024) budget = c->smem_optin - 1024; /* the kernel's static shared memory beside it */
    r.a.xf = a0.xf && xpart + xfb + 4 * slot <= budget; /* x's f32 copy only where the ring keeps two slots a set */
    if (r.a.xf) xpart += xfb;
    if (xpart + 4 * slot > budget) return -1;
    int NS = (int)((budget - xpart) / slot) & ~1; /* two sets: an even count */
    NS = NS > TCR_NSMAX ? TCR_NSMAX : NS;
    /* KILN_CUDA_GEMV_RING_NS=N (diagnosis, read once): at most N slots (even, >= 4) whatever the budget leaves room for */
    static int nsmax = -1;
    if (nsmax < 0) { const char *en = getenv("KILN_CUDA_GEMV_RING_NS"); nsmax = en && atoi(en) >= 4 ? atoi(en) & ~1 : 0; }
    if (nsmax && NS > nsmax) NS = nsmax;
    r.NS = NS;
    /* How it is launched: by PDL (what the ring is for), KILN_CUDA_GEMV_RING_PDL=0 plain (read per call; the stress test
     * runs both). Session 59 launched it plain because PDL-launched it made llama-3-8b q4's logits differ run to run;
     * session 60 found why: PDL-launched beside the kernels before it, two of its blocks shared an SM, and there a
     * slot's refill could overwrite reads the consumers' arrive had already released — the write-after-read across
     * proxies that the producer's fence.proxy.async now orders (KILN_CUDA_GEMV_RING_FENCE=0 leaves it out: the stress
     * test's two-blocks-an-SM repetitions then differ). bench/cuda/RESULTS.md sessions 59 and 60. */
    static int trig_end = -1, prod_wait; /* read once */
    if (trig_end < 0) {
        prod_wait = getenv("KILN_CUDA_GEMV_RING_PREWAIT") && *getenv("KILN_CUDA_GEMV_RING_PREWAIT") == '0';
        trig_end = getenv("KILN_CUDA_GEMV_RING_TRIG") && !strcmp(getenv("KILN_CUDA_GEMV_RING_TRIG"), "end");
    }
    const char *pe = getenv("KILN_CUDA_GEMV_RING_PDL");
    const int nopdl = pe && *pe == '0';
    r.trig_end = trig_end;
    r.prod_wait = prod_wait;
    static int nofence = -1;
    if (nofence < 0) nofence = getenv("KILN_CUDA_GEMV_RING_FENCE") && *getenv("KILN_CUDA_GEMV_RING_FENCE") == '0';
    r.nofence = nofence;
    const size_t smem = xpart + (size_t)NS * slot;
    static size_t attr;
    auto kern = gemv_tcr_kernel<BITS, NU, SBF>;
    if (smem > 46 * 1024 && smem > attr) { /* (the default 48 KB holds static and dynamic together) */
        cudaCheck(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        attr = smem;
    }
    if (nopdl) kern<<<grid, 32 * (TCR_NCW + 1), smem, c->stream>>>(r);
    else cuda_launch_pdl(c->stream, kern, grid, 32 * (TCR_NCW + 1), smem, r);
    kiln_cuda_gemv_ring_calls++;
    return 0;
}
static int tcr_run(cuda_impl_t *c, const tc_args &a, int bits, int nu, int sbf) {
#define TCR_L(B, N) (sbf ? tcr_launch<B, N, 1>(c, a) : tcr_launch<B, N, 0>(c, a))
    if (bits == 4) return nu == 4 ? TCR_L(4, 4) : nu == 2 ? TCR_L(4, 2) : TCR_L(4, 1);
    return nu == 2 ? TCR_L(8, 2) : TCR_L(8, 1);
#undef TCR_L
}

/* KILN_CUDA_GEMV_RING_CHECK=1 (diagnosis, read once; eager runs only, KILN_CUDA_GRAPH=0): after each ring launch,
 * gemv_tc_kernel computes the same rows into a scratch buffer and a plain-launched kernel compares the two bitwise,
 * counting launches that differ; the counts are printed at exit. Tells a ring that computes wrong rows in the chain
 * (it alone is bitwise: test_gemv_ring) from one whose presence makes another kernel misread. */
static int tcr_check_on(void) {
    static int v = -1;
    if (v < 0) v = getenv("KILN_CUDA_GEMV_RING_CHECK") && *getenv("KILN_CUDA_GEMV_RING_CHECK") == '1';
    return v;
}
static float *tcr_chk;
static size_t tcr_chk_n;
static unsigned *tcr_chk_cnt; /* [0] launches compared, [1] launches differing, [2] first differing launch + 1, [3] rows
                               * differing, [4] how many of the first such launch's rows follow, [5..] (seg << 24 | row) each */
#define TCR_CHK_ROWS 16
static void tcr_check_report(void) {
    unsigned h[5 + TCR_CHK_ROWS] = {0};
    if (!tcr_chk_cnt || cudaMemcpy(h, tcr_chk_cnt, sizeof h, cudaMemcpyDeviceToHost) != cudaSuccess) return;
    fprintf(stderr, "kiln: ring check: %u launches compared, %u differ (first: launch %u), %u rows differ; rows of the first:", h[0], h[1],
            h[2] ? h[2] - 1 : 0, h[3]);
    for (unsigned i = 0; i < h[4] && i < TCR_CHK_ROWS; i++) fprintf(stderr, " %u:%u", h[5 + i] >> 24, h[5 + i] & 0xffffff);
    fprintf(stderr, "\n");
}
static float *tcr_check_buf(const tc_args &a) {
    const size_t n = (size_t)a.ntiles * 16;
    if (!tcr_chk_cnt) {
        if (cudaMalloc((void **)&tcr_chk_cnt, (5 + TCR_CHK_ROWS) * sizeof(unsigned)) != cudaSuccess) return NULL;
        cudaMemset(tcr_chk_cnt, 0, (5 + TCR_CHK_ROWS) * sizeof(unsigned));
        atexit(tcr_check_report);
    }
    if (n > tcr_chk_n) {
        if (tcr_chk) cudaFree(tcr_chk);
        if (cudaMalloc((void **)&tcr_chk, n * sizeof(float)) != cudaSuccess) { tcr_chk = NULL; tcr_chk_n = 0; return NULL; }
        tcr_chk_n = n;
    }
    return tcr_chk;
}
__global__ void tcr_cmp_kernel(tc_args a, const float *chk, unsigned *cnt) {
    __shared__ unsigned bad, nrow, rows[TCR_CHK_ROWS];
    if (threadIdx.x == 0) bad = nrow = 0;
    __syncthreads();
    for (int i = 0; i < a.nseg; i++)
        for (int r = threadIdx.x; r < a.seg[i].rows; r += blockDim.x)
            if (__float_as_uint(__ldcg(a.seg[i].y + r)) != __float_as_uint(__ldcg(chk + (size_t)a.seg[i].tile0 * 16 + r))) {
                atomicAdd(&bad, 1u);
                const unsigned k = atomicAdd(&nrow, 1u);
                if (k < TCR_CHK_ROWS) rows[k] = (unsigned)i << 24 | (unsigned)r;
            }
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned k = atomicAdd(&cnt[0], 1u);
        if (bad) {
            atomicAdd(&cnt[1], 1u);
            atomicAdd(&cnt[3], bad);
            if (atomicCAS(&cnt[2], 0u, k + 1) == 0u) {
                cnt[4] = nrow;
                for (unsigned j = 0; j < nrow && j < TCR_CHK_ROWS; j++) cnt[5 + j] = rows[j];
            }
        }
    }
}
/* gemv_tc_kernel (tc_launch_m) for a's bits, unit and scale dtype: gemv_tc_run's launch and the check's */
static int tc_run_m(cuda_impl_t *c, const tc_args &a, int bits, int nu, int sbf) {
    tc_trace_init(); /* reads KILN_CUDA_GEMV_TC_TRACE once */
#define TC_L(B, N) (sbf ? tc_launch_m<B, N, 1>(c, a) : tc_launch_m<B, N, 0>(c, a))
    if (bits == 4) return nu == 4 ? TC_L(4, 4) : nu == 2 ? TC_L(4, 2) : TC_L(4, 1);
    return nu == 2 ? TC_L(8, 2) : TC_L(8, 1);
#undef TC_L
}
/* after a ring launch of a: gemv_tc_kernel into the scratch rows, then the bitwise comparison */
static void tcr_check(cuda_impl_t *c, const tc_args &a, int bits, int nu, int sbf) {
    float *chk = tcr_check_buf(a);
    if (!chk) return;
    tc_args b = a;
    for (int i = 0; i < a.nseg; i++) b.seg[i].y = chk + (size_t)a.seg[i].tile0 * 16;
    if (tc_run_m(c, b, bits, nu, sbf) == 0) tcr_cmp_kernel<<<1, 1024, 0, c->stream>>>(a, chk, tcr_chk_cnt);
}

/* y[i] = x · w[i]ᵀ for n ≤ TC_MAXSEG weights of the same K, bits, group and scale dtype, T tokens
 * (1, or 2..cuda_gemv_tc_max_t() on gemv_tcm_kernel), in one launch. Returns -1 (nothing launched)
 * when they do not suit the kernel. ext (NULL: plain; one token only): the fused ops' mode, norm
 * and activation (tc_args). */
static int gemv_tc_run(cuda_impl_t *c, int n, float *const *y, const float *x, int T, const dweight_t *const *w, const tc_args *ext) {
    if (!gemv_tc_enabled() || n < 1 || n > TC_MAXSEG || ((uintptr_t)x & 15)) return -1;
    /* 2..NT tokens: plain matmuls only, and not where x is forced to bf16 (KILN_CUDA_ACT=bf16: qmma's single
     * rounding, as the wgmma kernel also declines it) */
    if (T < 1 || T > cuda_gemv_tc_max_t() || (T > 1 && (ext || c->act_bf16 == 1))) return -1;
    tc_args a;
    memset(&a, 0, sizeof a);
    if (ext) { a.mode = ext->mode; a.gelu = ext->gelu; a.nw = ext->nw; a.off = ext->off; a.eps = ext->eps; }
    const dweight_t *w0 = w[0];
    if (!tc_ok(w0) || (T > 1 && !tcm_shape_ok(w0->bits, w0->cols))) return -1;
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
    if ((a.mode & TC_GLU) && (n != 2 || w[1]->rows != w0->rows)) return -1;
    if ((a.mode & TC_NORM) && (a.K <= 256 || a.K > 8192 || ((uintptr_t)a.nw & 15))) return -1; /* rms_norm4_kernel's sizes */
    a.ng = w0->cols / group;
    a.lg_group = group == 32 ? 5 : group == 64 ? 6 : 7;
    a.x = x;
    if (T > 1) {
#define TCM_L(B, N) (sbf ? tcm_launch_t<B, N, 1>(c, a, T) : tcm_launch_t<B, N, 0>(c, a, T))
        if (bits == 4) return nu == 4 ? TCM_L(4, 4) : nu == 2 ? TCM_L(4, 2) : TCM_L(4, 1);
        return nu == 2 ? TCM_L(8, 2) : TCM_L(8, 1);
#undef TCM_L
    }
    static int xf = -1;
    if (xf < 0) xf = !(getenv("KILN_CUDA_GEMV_TC_XF") && !strcmp(getenv("KILN_CUDA_GEMV_TC_XF"), "0"));
    a.xf = xf;
    static int pre = -1;
    if (pre < 0) { const char *e = getenv("KILN_CUDA_GEMV_TC_PRE"); pre = e && (*e == '1' || *e == '3') ? *e - '0' : 2; }
    a.pre = pre == 3 && (a.mode & TC_NORM) ? 2 : pre; /* PRE=3's cp.async of x is not the norm's read */
    /* the ring kernel (KILN_CUDA_GEMV_RING=1): plain one-token launches of the weights it takes
     * (KILN_CUDA_GEMV_RING_CHECK=1: each checked against gemv_tc_kernel) */
    if (a.mode == 0 && tcr_wanted() && tcr_scope(a) && tcr_run(c, a, bits, nu, sbf) == 0) {
        if (tcr_check_on()) tcr_check(c, a, bits, nu, sbf);
        return 0;
    }
    /* x prepared by the kernel that wrote it (xprep.cu, KILN_CUDA_XPREP): this K's format noted for
     * the producers, and taken where the record is x's own (plain launches only) */
    cuda_xp_note(c, a.K, bits, nu);
    if (a.mode == 0 && (a.xp = cuda_xp_get(c, x, a.K, bits, nu)) != NULL) a.mode = TC_PREP;
    return tc_run_m(c, a, bits, nu, sbf);
}

int cuda_gemv_tc(cuda_impl_t *c, int n, float *const *y, const float *x, int T, const dweight_t *const *w) { return gemv_tc_run(c, n, y, x, T, w, NULL); }

/* --- the fused decode ops (backend.h) for MLX 4/8-bit weights at one token on "cuda": the kernel
 * above with the rms_norm in its prologue (TC_NORM), y += in its stores (TC_ACC), the GLU of each
 * gate/up row pair in its epilogue (TC_GLU) — each bitwise the separate ops (rms_norm4_kernel,
 * matmul_multi, glu_kernel, add; test_cuda_kernels test_fused_gemv_tc). Per layer of llama the
 * add_rms_norm (twice) and glu launches go, and with them three PDL hops. Where these decline, the
 * bf16/f16 versions of matmul_gemv.cu get the call (they decline for MLX weights in turn).
 * Opt-in, KILN_CUDA_TC_FUSE=1 (default 0: the separate kernels): +6-8 % llama-3-8b q4 decode against
 * the same binary without it, but that binary's kernel (runtime mode branches then) ran the plain
 * GEMV ~8 % slower than the session-8 one; with the modes as template parameters (this code) the
 * plain kernel is the old one, and against it the fused variants measured +1.0 % (375.5 vs 371.7
 * tok/s, one pair: within run-to-run noise; bench/cuda/RESULTS.md, session 10, helper-62 and lead). KILN_CUDA_TC_FUSE_MIN_K=N: only where K (norm,
 * GLU) / the residual's rows (add) >= N, default 4096 like the bf16 fusions. */

static int tc_fuse_min_k(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("KILN_CUDA_TC_FUSE"), *k = getenv("KILN_CUDA_TC_FUSE_MIN_K");
        v = !(e && atoi(e) > 0) ? 1 << 30 : k ? atoi(k) : 4096;
    }
    return v;
}
static int tc_fuse(backend_t *be, int n, float *const *y, const float *x, int T, const weight_t *const *wt, int size, int mode,
                   const float *nw, float off, float eps, int gelu) {
    cuda_impl_t *c = cuda_impl(be);
    if (T != 1 || c->qmma < 2 || n < 1 || n > TC_MAXSEG || size < tc_fuse_min_k()) return -1;
    const dweight_t *w[TC_MAXSEG];
    for (int i = 0; i < n; i++) {
        w[i] = (const dweight_t *)wt[i]->device;
        if (w[i]->dtype != DT_U32) return -1;
    }
    tc_args e;
    memset(&e, 0, sizeof e);
    e.mode = mode; e.nw = nw; e.off = off; e.eps = eps; e.gelu = gelu;
    if (gemv_tc_run(c, n, y, x, 1, w, &e)) return -1;
    cuda_capture_tick(c);
    return 0;
}
int cuda_tc_matmul_add(backend_t *be, float *y, const float *x, int T, const weight_t *w) {
    const weight_t *const wp[1] = {w};
    if (tc_fuse(be, 1, &y, x, T, wp, ((const dweight_t *)w->device)->rows, TC_ACC, NULL, 0.f, 0.f, 0) == 0) return 0;
    return cuda_matmul_add(be, y, x, T, w);
}
int cuda_qd_rms_matmul_multi(cuda_impl_t *c, int n, float *const *y, const float *x, const float *nw, float off, float eps, int T,
                             const dweight_t *const *w); /* matmul_dequant.cu */
int cuda_tc_rms_matmul_multi(backend_t *be, int n, float *const *y, const float *x, const float *nw, float off, float eps, int T,
                             const weight_t *const *w) {
    cuda_impl_t *c = cuda_impl(be);
    if (c->dra.x) { /* an rms_mlp's deferred residual add (matmul_dequant.cu KILN_CUDA_QD_DEFER): taken by the dequantizing
                     * path's norm where x is its x, else launched before anything reads x */
        if (c->dra.x == x && c->dra.T == T && n >= 1 && n <= 4) {
            const dweight_t *dw[4];
            for (int i = 0; i < n; i++) dw[i] = (const dweight_t *)w[i]->device;
            if (cuda_qd_rms_matmul_multi(c, n, y, x, nw, off, eps, T, dw) == 0) return 0;
        }
        cuda_defer_flush(c);
    }
    if (n >= 1 && tc_fuse(be, n, y, x, T, w, ((const dweight_t *)w[0]->device)->cols, TC_NORM, nw, off, eps, 0) == 0) return 0;
    return cuda_rms_matmul_multi(be, n, y, x, nw, off, eps, T, w);
}
int cuda_tc_rms_matmul_glu(backend_t *be, float *y, const float *x, const float *nw, float off, float eps, int T, const weight_t *wg,
                           const weight_t *wu, act_t act) {
    const weight_t *const wp[2] = {wg, wu};
    float *const yy[2] = {y, y}; /* only seg 0's y is written (the GLU) */
    if (tc_fuse(be, 2, yy, x, T, wp, ((const dweight_t *)wg->device)->cols, TC_NORM | TC_GLU, nw, off, eps, act == ACT_GELU_TANH) == 0) return 0;
    return cuda_rms_matmul_glu(be, y, x, nw, off, eps, T, wg, wu, act);
}
void cuda_tc_matmul_glu(backend_t *be, float *y, float *g, float *u, const float *x, int T, const weight_t *wg, const weight_t *wu, act_t act) {
    const weight_t *const wp[2] = {wg, wu};
    float *const yy[2] = {y, y};
    if (T > 0 && tc_fuse(be, 2, yy, x, T, wp, ((const dweight_t *)wg->device)->cols, TC_GLU, NULL, 0.f, 0.f, act == ACT_GELU_TANH) == 0) return;
    cuda_matmul_glu(be, y, g, u, x, T, wg, wu, act);
}
