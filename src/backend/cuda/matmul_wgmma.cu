/* matmul_wgmma.cu — y[T, N] = x[T, K] · Wᵀ for MLX 4/8-bit weights at 2..64 tokens (batched
 * decode; from 9 only with KILN_CUDA_QWG=9, the default before session 45) on Hopper's warpgroup MMA (wgmma.mma_async m64nNk16,
 * f16 × f16 → f32), and at 65..128 tokens with the 128-token tile (wgm128_kernel: n = 128, one
 * block a SM; short prompts and 128-row decode steps — see cuda_qwg128_on).
 *
 * The operands are matmul_dequant.cu's (the prefill path's f16 GEMM), without writing f16
 * weights to global memory:
 *   A (weights, from registers): each thread dequantizes its fragment of the 64-row × 16-column
 *     tile as f16(fma(scale·2^s, code, bias·2^s)) — the same expression as qd_convert_kernel —
 *     with 2^s per (row, K split) from the bound B_r = max over the split's groups of
 *     |scale|·(2^bits − 1) + |bias| (B_r·2^s in [2^14, 2^15));
 *   B (x, from shared memory): f16(x·2^e_t) with max|x_t|·2^e_t in [2^14, 2^15) per token t
 *     (wg_xprep_kernel, once per matmul, stored in the wgmma core-matrix order);
 *   one f32 accumulator per output over all the split's columns; y = acc·2^-s·2^-e_t.
 * Precision (docs/cuda.md, Numerics): u = 2^-11 per operand, |ŷ − y| ≤ (2u + u²)·Σ|w·x| +
 * 2^-39·(B_r·Σ|x| + max|x_t|·Σ|w|) + the f32 accumulation — the prefill path's bound with the
 * row's and the token's maxima in place of the matrix's (never looser). Tested against a double
 * reference element by element (test_qwg in test_cuda_kernels).
 *
 * Work split: a block = 128 rows (two warpgroups of 64) × all NP tokens (T rounded up to 8, 16,
 * 32 or 64) × one contiguous range of 64-column chunks (KS splits per matrix, by shape only:
 * about KILN_CUDA_QWG_WAVE (2) blocks per SM; the splits' sums go to a [KS][T][N] scratch and
 * are added in split order by wg_reduce_kernel). Each chunk's codes and scale/bias words stream
 * through an S-stage cp.async ring, its x tile by one bulk copy (TMA, async proxy) completing on
 * the stage's mbarrier (KILN_CUDA_QWG_X=cp: cp.async too, then a fence.proxy.async per chunk,
 * ~5 % slower); a warpgroup converts a chunk's A fragments, issues its four wgmmas and waits for
 * them (two warpgroups per block, two blocks per SM).
 *
 * matmul_multi (q/k/v, gate/up) and matmul_glu: all weights in one launch over a slot table and one
 * split reduce, the GLU in that reduce (the multi section below, session 17: a 64-row qwen3-0.6b
 * layer 23 → 16 launches, bitwise the per-weight launches).
 *
 * Batch invariance: a token's column of B, its 2^e_t, the splits and the chunk order do not
 * depend on the other tokens, and each output of an MMA is the dot product of one B column:
 * a token's outputs are bitwise the same in any batch the kernel takes (tested across NP = 8..64
 * with KILN_CUDA_QWG=2). */
#include "backend/cuda/mma_util.cuh"
#include "backend/cuda/wgmma_util.cuh"
#include "backend/cuda/glu_act.cuh"
#include "backend/cuda/wgx.cuh"
#include <cooperative_groups.h>
#include <type_traits>

#define WG_ROWS 128 /* rows per block: two warpgroups of 64 */
#define WG_KC 64    /* columns per chunk: four k-steps of 16 */

template <int N> __device__ __forceinline__ void wg_mma(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc);
template <> __device__ __forceinline__ void wg_mma<8>(float (&d)[4], const uint32_t (&a)[4], uint64_t desc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1));
}
template <> __device__ __forceinline__ void wg_mma<16>(float (&d)[8], const uint32_t (&a)[4], uint64_t desc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1));
}
template <> __device__ __forceinline__ void wg_mma<32>(float (&d)[16], const uint32_t (&a)[4], uint64_t desc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1));
}
template <> __device__ __forceinline__ void wg_mma<64>(float (&d)[32], const uint32_t (&a)[4], uint64_t desc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1));
}

template <> __device__ __forceinline__ void wg_mma<128>(float (&d)[64], const uint32_t (&a)[4], uint64_t desc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1));
}

/* the x tile by one bulk copy (TMA engine, async proxy: wgmma reads it without a proxy fence),
 * completion counted in bytes on the stage's mbarrier */
__device__ __forceinline__ void bulk_x(void *dst, const void *src, uint32_t bytes, uint32_t mb) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(mb), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                     (unsigned)__cvta_generic_to_shared(dst)),
                 "l"(src), "r"(bytes), "r"(mb)
                 : "memory");
}

/* shared-memory matrix descriptor, no swizzle, K-major: core matrices of 8 rows × 16 bytes;
 * LBO = between the two k-halves of a k-step (128 bytes), SBO = between 8-token groups (256) */
__device__ __forceinline__ uint64_t wg_desc(const void *p, int swap) {
    const uint64_t a = ((uint64_t)__cvta_generic_to_shared(p) & 0x3FFFF) >> 4;
    const uint64_t l = swap ? 256 >> 4 : 128 >> 4, s = swap ? 128 >> 4 : 256 >> 4;
    return a | (l << 16) | (s << 32);
}

/* one or two ring stages' chunks (four k-steps each, A fragments in registers, B = the stage's x
 * tile) into acc, then wait for them: the issue sequence wg2_kernel, wg3_kernel and wgm_kernel share */
template <int NP>
__device__ __forceinline__ void wg_mma_chunks(float (&acc)[NP / 2], const uint32_t (&af0)[4][4], const uint32_t (&af1)[4][4],
                                              const unsigned char *st0, const unsigned char *st1, bool two) {
    /* k-step s's descriptor = the stage's + (s·32·NP) >> 4 in the 14-bit address field: shared addresses stay below
     * 2^18, so the add never carries out of it — the descriptors wg_desc gives, one add each instead of four
     * uniform ops (mask, shift, or, add) per k-step */
    const uint64_t d0 = wg_desc(st0, 0), d1 = wg_desc(st1, 0);
    wg_fence();
#pragma unroll
    for (int s = 0; s < 4; s++) wg_mma<NP>(acc, af0[s], d0 + (uint64_t)((s * 32 * NP) >> 4));
    if (two) {
#pragma unroll
        for (int s = 0; s < 4; s++) wg_mma<NP>(acc, af1[s], d1 + (uint64_t)((s * 32 * NP) >> 4));
    }
    wg_commit();
    wg_wait<0>();
}

/* wg_exp, wg_pow2: wgx.cuh */
/* two rows' bounds ma, mb, each spread over the four lanes q of a quad: the quad's maxima, then
 * pa, pb = 2^s and ia, ib = 2^−s (wg_exp) — the end of wg_row_setup and wgm_row_setup */
__device__ __forceinline__ void wg_row_scales(float ma, float mb, float &pa, float &pb, float &ia, float &ib) {
#pragma unroll
    for (int o = 1; o <= 2; o <<= 1) {
        ma = fmaxf(ma, __shfl_xor_sync(0xffffffffu, ma, o));
        mb = fmaxf(mb, __shfl_xor_sync(0xffffffffu, mb, o));
    }
    const int sa = wg_exp(ma), sb = wg_exp(mb);
    pa = wg_pow2(sa); pb = wg_pow2(sb); ia = wg_pow2(-sa); ib = wg_pow2(-sb);
}

/* A warp's two rows (ra, rb) for a split's groups [gb, ge): 2^s per row, s from max |scale|·(2^BITS − 1) +
 * |bias| (lanes q = 0..3 take every fourth group, then the four lanes agree by shuffles): pa, pb = 2^s;
 * ia, ib = 2^−s. dt: the scales' dtype (a constant where the kernel has SBT). And where a row's 16-bit
 * scales/biases sit in their 32-bit words: psa, psb (scales), pba, pbb (biases) = 1 when the row's first
 * element is the upper half (its index plus the array's 2-byte offset is odd). */
template <int BITS>
__device__ __forceinline__ void wg_row_setup(const dweight_t &w, int dt, int ra, int rb, int ng, int gb, int ge, int q, float &pa, float &pb,
                                             float &ia, float &ib, int &psa, int &psb, int &pba, int &pbb) {
    const float cmax = (float)((1 << BITS) - 1);
    float ma = 0.f, mb = 0.f;
#pragma unroll 8 /* the loads of a lane issued together: one round trip for up to 32 groups */
    for (int gi = gb + q; gi < ge; gi += 4) {
        const size_t xa = (size_t)ra * ng + gi, xb = (size_t)rb * ng + gi;
        ma = fmaxf(ma, fabsf(ld_f(w.scales, dt, xa)) * cmax + fabsf(ld_f(w.biases, dt, xa)));
        mb = fmaxf(mb, fabsf(ld_f(w.scales, dt, xb)) * cmax + fabsf(ld_f(w.biases, dt, xb)));
    }
    wg_row_scales(ma, mb, pa, pb, ia, ib);
    psa = (int)((((uintptr_t)w.scales >> 1) + (size_t)ra * ng) & 1), psb = (int)((((uintptr_t)w.scales >> 1) + (size_t)rb * ng) & 1);
    pba = (int)((((uintptr_t)w.biases >> 1) + (size_t)ra * ng) & 1), pbb = (int)((((uintptr_t)w.biases >> 1) + (size_t)rb * ng) & 1);
}

/* a warp's results: rows ya, yb (= ya + 8) of tokens 8i + 2q + e, acc · 2^−s (ia, ib) · the token's
 * 1/2^e (xinv), into o[t·N + row] (rows past N are the clamped padding rows: not stored) */
template <int NP>
__device__ __forceinline__ void wg_store(float *o, const float *xinv, const float *acc, int T, int N, int ya, int yb, int q, float ia,
                                         float ib) {
    /* every 1/2^e the lane needs first, unconditionally (index clamped to T − 1), so the NP/4 loads are in flight
     * together: loaded inside the t < T branch, each waited for its own L2 round trip before its stores (ncu,
     * session 28: the store loop was ~11 % of a 64-token launch's warp samples). Plain loads (xinv not
     * __restrict__): under PDL its writer ran beside this kernel */
    float xi[NP / 4];
#pragma unroll
    for (int i = 0; i < NP / 8; i++)
#pragma unroll
        for (int e = 0; e < 2; e++) xi[2 * i + e] = xinv[min(8 * i + 2 * q + e, T - 1)];
#pragma unroll
    for (int i = 0; i < NP / 8; i++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int t = 8 * i + 2 * q + e;
            if (t >= T) continue;
            if (ya < N) o[(size_t)t * N + ya] = (acc[4 * i + e] * ia) * xi[2 * i + e];
            if (yb < N) o[(size_t)t * N + yb] = (acc[4 * i + 2 + e] * ib) * xi[2 * i + e];
        }
}

template <int BITS, int NP> struct wgs {
    static constexpr int XB = NP * 128;               /* x tile of a chunk: 4 k-steps × NP/8 × 2 core matrices */
    static constexpr int RB = WG_KC * BITS / 8;       /* code bytes per row per chunk */
    static constexpr int RBP = RB + 16;               /* padded: conflict-free 16-byte loads of 8 rows */
    static constexpr int STG = XB + WG_ROWS * RBP + 2 * WG_ROWS * 2 * 4; /* + scale and bias words (≤ 2 groups per chunk) */
    static constexpr int S = 112640 / STG > 8 ? 8 : 112640 / STG;
    static constexpr int SMEM = S * STG;
};

/* x → f16(x·2^e_t) in chunk order: [K/64][k-step 4][NP/8][k-half 2][token 8][8 columns];
 * tokens T..NP−1 zero; inv[t] = 2^-e_t. Block (t, z): token t's max over all of K (x is in L2),
 * then the z-th of gridDim.y slices of its columns. */
__global__ void __launch_bounds__(256) wg_xprep_kernel(__half *xo, float *inv, const float *x, int T, int K, int NP) {
    __shared__ float sh[8];
    pdl_trigger(); /* launched with PDL (wg_pdl): the matmul's blocks may start loading their weights now */
    pdl_wait();    /* x is the kernel before's, and xo / inv may still be read by the matmul before that */
    const int t = blockIdx.x;
    const float4 *xr = (const float4 *)(x + (size_t)t * K);
    float m = 0.f;
    if (t < T) {
#pragma unroll 8
        for (int i = threadIdx.x; i < K / 4; i += 256) {
            const float4 v = xr[i]; /* plain loads (x not __restrict__): x's writer may have run beside this kernel (PDL) */
            m = fmaxf(m, fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))));
        }
    }
#pragma unroll
    for (int o = 16; o; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = m;
    __syncthreads();
    m = sh[threadIdx.x & 7];
#pragma unroll
    for (int o = 4; o; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    const int e = wg_exp(m);
    const float px = wg_pow2(e);
    if (threadIdx.x == 0 && blockIdx.y == 0) inv[t] = wg_pow2(-e);
    const int j = t >> 3, i = t & 7, nu = K / 8;
    const int u0 = (int)((long)blockIdx.y * nu / gridDim.y), u1 = (int)((long)(blockIdx.y + 1) * nu / gridDim.y);
    for (int m8 = u0 + threadIdx.x; m8 < u1; m8 += 256) {
        const int k0 = 8 * m8, ch = k0 >> 6, s = (k0 >> 4) & 3, h = (k0 >> 3) & 1;
        float4 a = make_float4(0.f, 0.f, 0.f, 0.f), b = a;
        if (t < T) { a = xr[2 * m8]; b = xr[2 * m8 + 1]; }
        __align__(16) __half2 v[4] = {__floats2half2_rn(a.x * px, a.y * px), __floats2half2_rn(a.z * px, a.w * px),
                                      __floats2half2_rn(b.x * px, b.y * px), __floats2half2_rn(b.z * px, b.w * px)};
        const size_t off = (size_t)ch * 64 * NP + (size_t)s * 16 * NP + j * 128 + h * 64 + i * 8;
        *(uint4 *)(xo + off) = *(const uint4 *)v;
    }
}

/* cp.async with an L2 prefetch size (pf 0/64/128/256 bytes; KILN_CUDA_QWG_PF): a chunk reads 32
 * (4-bit) or 64 (8-bit) bytes of each of 128 rows 2..8 KB apart, so without the hint every row's
 * piece is its own DRAM access; with it the next chunks' bytes of the row come with it into L2 */
__device__ __forceinline__ void wg_cp16(void *dst, const void *src, int pf) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    if (pf == 256) asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\n" ::"r"(d), "l"(src));
    else if (pf == 128) asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(d), "l"(src));
    else if (pf == 64) asm volatile("cp.async.cg.shared.global.L2::64B [%0], [%1], 16;\n" ::"r"(d), "l"(src));
    else asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src));
}
__device__ __forceinline__ void wg_cp4(void *dst, const void *src, int pf) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    if (pf == 256) asm volatile("cp.async.ca.shared.global.L2::256B [%0], [%1], 4;\n" ::"r"(d), "l"(src));
    else if (pf == 128) asm volatile("cp.async.ca.shared.global.L2::128B [%0], [%1], 4;\n" ::"r"(d), "l"(src));
    else if (pf == 64) asm volatile("cp.async.ca.shared.global.L2::64B [%0], [%1], 4;\n" ::"r"(d), "l"(src));
    else asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(d), "l"(src));
}

/* one chunk into a stage: the x tile, 128 rows' codes, their scale and bias words (the aligned
 * 32-bit word holding each value; two per row when the group is 32 columns) */
template <int BITS, int NP>
__device__ __forceinline__ void wg_issue(unsigned char *dst, const dweight_t &w, const unsigned char *xg, int r0, int ch, int tid, int wpr,
                                         int ng, int bulk, uint32_t mb, int pf) {
    using P = wgs<BITS, NP>;
    constexpr int PPR = P::RB / 16;
    const unsigned char *xs = xg + (size_t)ch * P::XB;
    if (bulk) { /* bulk copy of the x tile */
        if (tid == 0) bulk_x(dst, xs, P::XB, mb);
    } else {
#pragma unroll
        for (int c = tid; c < P::XB / 16; c += 256) cp_async16(dst + c * 16, xs + c * 16);
    }
    const int N = w.rows;
#pragma unroll
    for (int c = tid; c < WG_ROWS * PPR; c += 256) {
        const int row = c / PPR, part = c % PPR, r = min(r0 + row, N - 1);
        wg_cp16(dst + P::XB + row * P::RBP + part * 16, (const unsigned char *)w.data + (size_t)r * wpr * 4 + (size_t)ch * P::RB + part * 16, pf);
    }
    const int row = tid & (WG_ROWS - 1), r = min(r0 + row, N - 1), gpc = w.group == 32 ? 2 : 1;
    const unsigned char *base = (const unsigned char *)(tid < WG_ROWS ? w.scales : w.biases);
    unsigned char *d = dst + P::XB + WG_ROWS * P::RBP + (tid < WG_ROWS ? 0 : WG_ROWS * 2 * 4) + row * 8;
    for (int j = 0; j < gpc; j++) {
        const size_t idx = (size_t)r * ng + (size_t)ch * WG_KC / w.group + j;
        const uintptr_t a = w.sb_dtype == DT_F32 ? (uintptr_t)(base + idx * 4) : (uintptr_t)(base + idx * 2) & ~(uintptr_t)3;
        wg_cp4(d + j * 4, (const void *)a, pf);
    }
}

/* byte q of word v (4-bit codes of columns 2q, 2q+1) → f16x2 (f16(fma(sc, c, bi)) for both) */
__device__ __forceinline__ uint32_t wg_cvt4(uint32_t v, int sh, float sc, float bi) {
    const uint32_t vq = v >> sh;
    const float c0 = __fsub_rn(__uint_as_float((vq & 0xFu) | 0x4B000000u), 8388608.f);
    const float c1 = __fsub_rn(__uint_as_float(((vq >> 4) & 0xFu) | 0x4B000000u), 8388608.f);
    __half2 h = __floats2half2_rn(__fmaf_rn(sc, c0, bi), __fmaf_rn(sc, c1, bi));
    return *reinterpret_cast<uint32_t *>(&h);
}
/* bytes b, b+1 of word v (8-bit codes) → f16x2 */
__device__ __forceinline__ uint32_t wg_cvt8(uint32_t v, int b, float sc, float bi) {
    const float c0 = __fsub_rn(__uint_as_float(__byte_perm(v, 0x4B000000u, 0x7440u | b)), 8388608.f);
    const float c1 = __fsub_rn(__uint_as_float(__byte_perm(v, 0x4B000000u, 0x7440u | (b + 1))), 8388608.f);
    __half2 h = __floats2half2_rn(__fmaf_rn(sc, c0, bi), __fmaf_rn(sc, c1, bi));
    return *reinterpret_cast<uint32_t *>(&h);
}

/* A chunk's 16 A registers from the lane's code words of rows lr (ca) and lr + 8 (cb): k-step s takes
 * two words per row, cv(word, row lr + 8?, group j of the chunk) converts one. 4-bit: the row's 8 words
 * (32 bytes) loaded first, words 2s and 2s + 1; 8-bit: words 4s + q/2 and 4s + 2 + q/2. Every
 * conversion of a chunk (wg2_cvt's two branches, wgm_body's slab) walks the words this way. */
template <int BITS, typename CV>
__device__ __forceinline__ void wg_words(uint32_t (&af)[4][4], const unsigned char *ca, const unsigned char *cb, int q, CV cv) {
    if constexpr (BITS == 4) {
        const uint4 a0 = *(const uint4 *)ca, a1 = *(const uint4 *)(ca + 16), b0 = *(const uint4 *)cb, b1 = *(const uint4 *)(cb + 16);
        const uint32_t wa[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w}, wb[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
        for (int s = 0; s < 4; s++) {
            const int j = s >> 1;
            af[s][0] = cv(wa[2 * s], false, j);
            af[s][1] = cv(wb[2 * s], true, j);
            af[s][2] = cv(wa[2 * s + 1], false, j);
            af[s][3] = cv(wb[2 * s + 1], true, j);
        }
    } else {
        const uint32_t *pa32 = (const uint32_t *)ca, *pb32 = (const uint32_t *)cb;
        const int wo = q >> 1;
#pragma unroll
        for (int s = 0; s < 4; s++) {
            const int j = s >> 1;
            af[s][0] = cv(pa32[4 * s + wo], false, j);
            af[s][1] = cv(pb32[4 * s + wo], true, j);
            af[s][2] = cv(pa32[4 * s + 2 + wo], false, j);
            af[s][3] = cv(pb32[4 * s + 2 + wo], true, j);
        }
    }
}

/* The exact conversion (wg_cvt4 / wg_cvt8 per word from the rows' f32 scale/bias values: sA, bA row lr,
 * sB, bB row lr + 8, [j] the chunk's j-th group): wg_kernel's, and wg2_cvt's slow branch (bitwise it) */
template <int BITS>
__device__ __forceinline__ void wg_cvt_exact(uint32_t (&af)[4][4], const unsigned char *ca, const unsigned char *cb, int q, const float (&sA)[2],
                                             const float (&bA)[2], const float (&sB)[2], const float (&bB)[2]) {
    if constexpr (BITS == 4) {
        const int sh = 8 * q;
        wg_words<4>(af, ca, cb, q, [&](uint32_t v, bool rb, int j) { return wg_cvt4(v, sh, rb ? sB[j] : sA[j], rb ? bB[j] : bA[j]); });
    } else {
        const int b = 2 * (q & 1);
        wg_words<8>(af, ca, cb, q, [&](uint32_t v, bool rb, int j) { return wg_cvt8(v, b, rb ? sB[j] : sA[j], rb ? bB[j] : bA[j]); });
    }
}


template <int BITS, int NP>
__global__ void __launch_bounds__(256, 2) wg_kernel(float *__restrict__ out, const unsigned char *__restrict__ xg, const float *__restrict__ xinv,
                                                    int T, dweight_t w, int KS, int swap, int bulk, int pf) {
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) uint64_t mbar[8];
    using P = wgs<BITS, NP>;
    constexpr int S = P::S, NR = NP / 2;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
    const int N = w.rows, K = w.cols, r0 = blockIdx.x * WG_ROWS, split = blockIdx.y;
    const int nch = K / WG_KC, c0 = (int)((long)split * nch / KS), n = (int)((long)(split + 1) * nch / KS) - c0;
    const int wpr = K / 32 * BITS, ng = K / w.group, gpc = w.group == 32 ? 2 : 1;
    const int lr = (warp >> 2) * 64 + (warp & 3) * 16 + g; /* this thread's rows lr, lr + 8 of the block */
    const int ra = min(r0 + lr, N - 1), rb = min(r0 + lr + 8, N - 1);
    const uint32_t mb0 = (unsigned)__cvta_generic_to_shared(mbar);
    if (bulk) {
        if (tid == 0)
            for (int i = 0; i < S; i++) mb_init(mb0 + 8 * i);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < S - 1; i++) {
        if (i < n) wg_issue<BITS, NP>(smem + i * P::STG, w, xg, r0, c0 + i, tid, wpr, ng, bulk, mb0 + 8 * i, pf);
        cp_commit();
    }
    /* 2^s per row over this split's groups, and the rows' 16-bit scale/bias halves */
    float pa, pb, ia, ib;
    int psa, psb, pba, pbb;
    wg_row_setup<BITS>(w, w.sb_dtype, ra, rb, ng, c0 * WG_KC / w.group, ((c0 + n) * WG_KC + w.group - 1) / w.group, q, pa, pb, ia, ib, psa, psb,
                       pba, pbb);
    float acc[NR];
#pragma unroll
    for (int i = 0; i < NR; i++) acc[i] = 0.f;
    for (int it = 0; it < n; it++) {
        cp_wait<S - 2>();
        if (bulk) mb_wait(mb0 + 8 * (it % S), (it / S) & 1); /* the x tile (async proxy) */
        else wg_proxy_fence(); /* x by cp.async: generic proxy → wgmma's async proxy */
        __syncthreads(); /* chunk it landed for every thread; chunk it-1's wgmmas are done in both warpgroups */
        if (it + S - 1 < n)
            wg_issue<BITS, NP>(smem + ((it + S - 1) % S) * P::STG, w, xg, r0, c0 + it + S - 1, tid, wpr, ng, bulk, mb0 + 8 * ((it + S - 1) % S), pf);
        cp_commit();
        uint32_t af[4][4];
        const unsigned char *st = smem + (it % S) * P::STG, *cd = st + P::XB;
        const uint32_t *sbw = (const uint32_t *)(cd + WG_ROWS * P::RBP);
        const int gi0 = (c0 + it) * WG_KC / w.group;
        float sA[2], bA[2], sB[2], bB[2];
#pragma unroll
        for (int j = 0; j < 2; j++) {
            if (j >= gpc) { sA[j] = sA[0]; bA[j] = bA[0]; sB[j] = sB[0]; bB[j] = bB[0]; break; }
            const int od = (gi0 + j) & 1;
            sA[j] = sb_word_val(sbw[lr * 2 + j], w.sb_dtype, psa ^ od) * pa;
            sB[j] = sb_word_val(sbw[(lr + 8) * 2 + j], w.sb_dtype, psb ^ od) * pb;
            bA[j] = sb_word_val(sbw[2 * WG_ROWS + lr * 2 + j], w.sb_dtype, pba ^ od) * pa;
            bB[j] = sb_word_val(sbw[2 * WG_ROWS + (lr + 8) * 2 + j], w.sb_dtype, pbb ^ od) * pb;
        }
        const unsigned char *ca = cd + lr * P::RBP, *cb = ca + 8 * P::RBP;
        wg_cvt_exact<BITS>(af, ca, cb, q, sA, bA, sB, bB);
        uint64_t dsc[4];
#pragma unroll
        for (int s = 0; s < 4; s++) dsc[s] = wg_desc(st + s * 32 * NP, swap);
        wg_fence();
#pragma unroll
        for (int s = 0; s < 4; s++) wg_mma<NP>(acc, af[s], dsc[s]);
        wg_commit();
        /* waiting here, not a chunk later: ptxas serializes wgmmas whose A registers are written
         * while an earlier group is in flight (C7513); the other warpgroups of the SM fill the gap */
        wg_wait<0>();
    }
#pragma unroll
    for (int i = 0; i < NR; i++) wg_reg_fence(acc[i]);
    cp_wait<0>();
    const int ya = r0 + lr, yb = ya + 8;
    wg_store<NP>(out + (size_t)split * T * N, xinv, acc, T, N, ya, yb, q, ia, ib);
}

/* ---- v2 (KILN_CUDA_QWG_V=2, the 8-bit default until session 22; =1: wg_kernel above): the same operands, splits, chunk order and
 * accumulators, with fewer instructions and one barrier per two chunks:
 *  - SBT (the scale dtype) is a template parameter, the copy addresses are computed once;
 *  - a warp whose rows' scale·2^s (and scale·2^(s-4) at 4-bit) and bias·2^s are all f16 numbers
 *    (0 or normal: a 16-bit scale times 2^s below 2^15 is then exact) converts a code pair with
 *    PRMT + LOP3 (f16 1024 + c), HADD2 −1024 (exact) and one HFMA2: f16(sc·c + bi) rounded once —
 *    the old path rounds the same exact value to f32 first, so they differ only where that f32
 *    rounding lands on an f16 tie (|bi| below 2^-24 of sc·c); both are within the documented bound
 *    (test_qwg). Otherwise (f32 scales, subnormal or huge values) the warp takes wg_cvt4/wg_cvt8;
 *  - an iteration waits for two chunks, then one __syncthreads, converts both and issues their
 *    eight wgmmas before one wait (ring lookahead S−2 chunks). */
template <int SBT> __device__ __forceinline__ float wg_sbv(uint32_t v, int odd) {
    if constexpr (SBT == 2) return __uint_as_float(v);
    const unsigned short h = (unsigned short)(odd ? v >> 16 : v & 0xffffu);
    if constexpr (SBT == 0) return __half2float(__ushort_as_half(h));
    else return __uint_as_float((uint32_t)h << 16);
}
/* f is an f16 number (0, or normal and below 65504; f came from a 16-bit value times a power of 2) */
__device__ __forceinline__ bool wg_h_ok(float f) { const float a = fabsf(f); return a == 0.f || (a >= 6.103515625e-05f && a <= 65504.f); }
__device__ __forceinline__ uint32_t h2_bits(__half2 h) { return *reinterpret_cast<uint32_t *>(&h); }
__device__ __forceinline__ __half2 bits_h2(uint32_t u) { return *reinterpret_cast<__half2 *>(&u); }
/* 4-bit: byte q of v under the exponent byte 0x64 in both halves (sel = 0x4q4q over (v, 0x64): [bq, 0x64, bq,
 * 0x64]), one AND keeping c_lo in the low half and 16·c_hi in the high one → f16 (1024 + c_lo, 1024 + 16·c_hi),
 * exact → f16(m·c + a). (PRMT + one LOP3: the zero bytes and a separate OR of 0x6400 took a LOP3 more per
 * register — 16 of a chunk's ~170 instructions a thread, ptxas cannot merge two immediates.) */
__device__ __forceinline__ uint32_t wg_f4(uint32_t v, uint32_t sel, __half2 m, __half2 a) {
    const uint32_t x = __byte_perm(v, 0x64u, sel) & 0xFFF0FF0Fu;
    const __half2 c = __hadd2(bits_h2(x), __float2half2_rn(-1024.f));
    return h2_bits(__hfma2(c, m, a));
}
/* 8-bit: bytes b, b+1 of v (sel = [b, 4, b+1, 4] over (v, 0x64)) → f16 1024 + code → exact code */
__device__ __forceinline__ uint32_t wg_f8(uint32_t v, uint32_t sel, __half2 m, __half2 a) {
    const __half2 c = __hadd2(bits_h2(__byte_perm(v, 0x64u, sel)), __float2half2_rn(-1024.f));
    return h2_bits(__hfma2(c, m, a));
}

/* The fast conversion with the rows' f16 factors ready (mA = (scale·2^s, scale·2^(s−4)) at 4-bit,
 * (scale·2^s, scale·2^s) at 8-bit; aA = (bias·2^s, bias·2^s): row lr; mB, aB: row lr + 8; [j]: the
 * chunk's j-th group) — wg2_cvt's fast branch, and wgm_body's where the warp's slab holds those factors
 * (wgm_hslab). 4-bit: byte q of a word (sel 0x4q4q); 8-bit: bytes b, b + 1 (b = 2·(q & 1)). */
template <int BITS>
__device__ __forceinline__ void wg_cvth(uint32_t (&af)[4][4], const unsigned char *ca, const unsigned char *cb, int q, const __half2 (&mA)[2],
                                        const __half2 (&aA)[2], const __half2 (&mB)[2], const __half2 (&aB)[2]) {
    if constexpr (BITS == 4) {
        const uint32_t sel = 0x4040u | (uint32_t)q | ((uint32_t)q << 8);
        wg_words<4>(af, ca, cb, q, [&](uint32_t w, bool rb, int j) { return wg_f4(w, sel, rb ? mB[j] : mA[j], rb ? aB[j] : aA[j]); });
    } else {
        const int b = 2 * (q & 1);
        const uint32_t sel = 0x4040u | (uint32_t)b | ((uint32_t)(b + 1) << 8);
        wg_words<8>(af, ca, cb, q, [&](uint32_t w, bool rb, int j) { return wg_f8(w, sel, rb ? mB[j] : mA[j], rb ? aB[j] : aA[j]); });
    }
}
/* a chunk's A fragments from its codes (cd: the stage's code rows) and the rows' scale/bias values
 * times 2^s (sA, bA: row lr; sB, bB: row lr + 8; [j]: the chunk's j-th group) */
template <int BITS, int NP, int SBT>
__device__ __forceinline__ void wg2_cvt(uint32_t (&af)[4][4], const unsigned char *cd, int lr, int q, const float (&sA)[2], const float (&bA)[2],
                                        const float (&sB)[2], const float (&bB)[2], int slow) {
    using P = wgs<BITS, NP>;
    const unsigned char *ca = cd + lr * P::RBP, *cb = ca + 8 * P::RBP;
    bool fast = SBT != 2 && !slow; /* slow: KILN_CUDA_QWG_V=3, the old conversion everywhere (a test: bitwise wg_kernel) */
    if constexpr (SBT != 2) {
        const float d = BITS == 4 ? 0.0625f : 1.f;
#pragma unroll
        for (int j = 0; j < 2; j++)
            fast = fast && wg_h_ok(sA[j]) && wg_h_ok(sB[j]) && wg_h_ok(bA[j]) && wg_h_ok(bB[j]) && wg_h_ok(sA[j] * d) && wg_h_ok(sB[j] * d);
        fast = __all_sync(0xffffffffu, fast);
    }
    if (fast) {
        __half2 mA[2], mB[2], aA[2], aB[2];
        const float d = BITS == 4 ? 0.0625f : 1.f;
#pragma unroll
        for (int j = 0; j < 2; j++) {
            mA[j] = __floats2half2_rn(sA[j], sA[j] * d); mB[j] = __floats2half2_rn(sB[j], sB[j] * d);
            aA[j] = __floats2half2_rn(bA[j], bA[j]); aB[j] = __floats2half2_rn(bB[j], bB[j]);
        }
        wg_cvth<BITS>(af, ca, cb, q, mA, aA, mB, aB);
    } else
        wg_cvt_exact<BITS>(af, ca, cb, q, sA, bA, sB, bB);
}

/* one chunk's A fragments (16 registers) from its stage */
template <int BITS, int NP, int SBT, int ROWS = WG_ROWS>
__device__ __forceinline__ void wg2_frag(uint32_t (&af)[4][4], const unsigned char *st, int lr, int q, int gi0, int gpc, float pa, float pb, int psa,
                                         int psb, int pba, int pbb, int slow) {
    using P = wgs<BITS, NP>;
    const unsigned char *cd = st + P::XB;
    const uint32_t *sbw = (const uint32_t *)(cd + ROWS * P::RBP);
    float sA[2], bA[2], sB[2], bB[2];
#pragma unroll
    for (int j = 0; j < 2; j++) {
        if (j >= gpc) { sA[j] = sA[0]; bA[j] = bA[0]; sB[j] = sB[0]; bB[j] = bB[0]; break; }
        const int od = (gi0 + j) & 1;
        sA[j] = wg_sbv<SBT>(sbw[lr * 2 + j], psa ^ od) * pa;
        sB[j] = wg_sbv<SBT>(sbw[(lr + 8) * 2 + j], psb ^ od) * pb;
        bA[j] = wg_sbv<SBT>(sbw[2 * ROWS + lr * 2 + j], pba ^ od) * pa;
        bB[j] = wg_sbv<SBT>(sbw[2 * ROWS + (lr + 8) * 2 + j], pbb ^ od) * pb;
    }
    wg2_cvt<BITS, NP, SBT>(af, cd, lr, q, sA, bA, sB, bB, slow);
}

/* the block (bx: 128 rows, by: K split) of one weight: wg2_kernel's (blockIdx) and wg2_multi_kernel's (a slot's) */
template <int BITS, int NP, int SBT, int PRB>
__device__ __forceinline__ void wg2_body(float *__restrict__ out, const unsigned char *__restrict__ xg, const float *__restrict__ xinv, int T,
                                         const dweight_t &w, int KS, int gsh, int slow, int clu, int bx, int by) {
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) uint64_t mbar[8];
    using P = wgs<BITS, NP>;
    constexpr int S = P::S, NR = NP / 2, PPR = P::RB / 16, CPT = WG_ROWS * PPR / 256, EB = SBT == 2 ? 4 : 2;
    static_assert(S >= 4, "two chunks per iteration need S >= 4");
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
    const int N = w.rows, K = w.cols, r0 = bx * WG_ROWS, split = by;
    const int nch = K / WG_KC, c0 = (int)((long)split * nch / KS), n = (int)((long)(split + 1) * nch / KS) - c0;
    const int wpr = K / 32 * BITS, ng = K / w.group, gpc = w.group == 32 ? 2 : 1;
    const int lr = (warp >> 2) * 64 + (warp & 3) * 16 + g;
    const int ra = min(r0 + lr, N - 1), rb = min(r0 + lr + 8, N - 1);
    const uint32_t mb0 = (unsigned)__cvta_generic_to_shared(mbar);
    /* this thread's copies: CPT 16-byte pieces of codes, gpc scale or bias words */
    const unsigned char *csrc[CPT];
    int cdst[CPT];
#pragma unroll
    for (int m = 0; m < CPT; m++) {
        const int c = tid + 256 * m, row = c / PPR, part = c % PPR, r = min(r0 + row, N - 1);
        csrc[m] = (const unsigned char *)w.data + (size_t)r * wpr * 4 + part * 16;
        cdst[m] = P::XB + row * P::RBP + part * 16;
    }
    const int srow = tid & (WG_ROWS - 1);
    const unsigned char *sbase = (const unsigned char *)(tid < WG_ROWS ? w.scales : w.biases) + (size_t)min(r0 + srow, N - 1) * ng * EB;
    const int sdst = P::XB + WG_ROWS * P::RBP + (tid < WG_ROWS ? 0 : WG_ROWS * 2 * 4) + srow * 8;
    auto issue = [&](int i) { /* chunk i (0-based in the split) into stage i % S */
        unsigned char *dst = smem + (i % S) * P::STG;
        const int ch = c0 + i;
        if (tid == 0) bulk_x(dst, xg + (size_t)ch * P::XB, P::XB, mb0 + 8 * (i % S));
#pragma unroll
        for (int m = 0; m < CPT; m++) cp_async16(dst + cdst[m], csrc[m] + (size_t)ch * P::RB);
        const int gi = gsh < 0 ? 2 * ch : ch >> gsh;
        for (int j = 0; j < gpc; j++) {
            const unsigned char *a = sbase + (size_t)(gi + j) * EB;
            if (EB == 2) a = (const unsigned char *)((uintptr_t)a & ~(uintptr_t)3);
            cp_async4(dst + sdst + j * 4, a);
        }
    };
    if (tid == 0)
        for (int i = 0; i < S; i++) mb_init(mb0 + 8 * i);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    __syncthreads();
#pragma unroll
    for (int i = 0; i < S - 2; i++) {
        if (i < n) issue(i);
        cp_commit();
    }
    float pa, pb, ia, ib;
    int psa, psb, pba, pbb;
    wg_row_setup<BITS>(w, SBT == 2 ? DT_F32 : SBT == 0 ? DT_F16 : DT_BF16, ra, rb, ng, c0 * WG_KC / w.group,
                       ((c0 + n) * WG_KC + w.group - 1) / w.group, q, pa, pb, ia, ib, psa, psb, pba, pbb);
    float acc[NR];
#pragma unroll
    for (int i = 0; i < NR; i++) acc[i] = 0.f;
    for (int it = 0; it < n; it += 2) {
        const bool two = it + 1 < n;
        cp_wait<S - 4>();
        mb_wait(mb0 + 8 * (it % S), (it / S) & 1);
        if (two) mb_wait(mb0 + 8 * ((it + 1) % S), ((it + 1) / S) & 1);
        __syncthreads(); /* chunks it, it+1 landed for every thread; chunks it-2, it-1 done in both warpgroups */
        if (it + S - 2 < n) issue(it + S - 2);
        cp_commit();
        if (it + S - 1 < n) issue(it + S - 1);
        cp_commit();
        if constexpr (PRB) continue; /* KILN_CUDA_QWG_PROBE: the copies and barriers alone */
        uint32_t af0[4][4], af1[4][4];
        const unsigned char *st0 = smem + (it % S) * P::STG, *st1 = smem + ((it + 1) % S) * P::STG;
        const int g0 = gsh < 0 ? 2 * (c0 + it) : (c0 + it) >> gsh, g1 = gsh < 0 ? 2 * (c0 + it + 1) : (c0 + it + 1) >> gsh;
        wg2_frag<BITS, NP, SBT>(af0, st0, lr, q, g0, gpc, pa, pb, psa, psb, pba, pbb, slow);
        if (two) wg2_frag<BITS, NP, SBT>(af1, st1, lr, q, g1, gpc, pa, pb, psa, psb, pba, pbb, slow);
        wg_mma_chunks<NP>(acc, af0, af1, st0, st1, two);
    }
#pragma unroll
    for (int i = 0; i < NR; i++) wg_reg_fence(acc[i]);
    cp_wait<0>();
    const int ya = r0 + lr, yb = ya + 8;
    if (clu) {
        /* the KS splits of these 128 rows are one cluster (clu: KILN_CUDA_QWG_CLUSTER): each block
         * puts its partial sums [t][128 rows] in its own shared memory (the ring is done: every
         * wgmma waited for, every copy landed), one cluster barrier, then block k adds elements
         * k·E/KS.. of all KS blocks in split order (v = p0, v += p1, ...: wg_reduce_kernel's sums,
         * bitwise) and stores y; a second barrier keeps each block's memory until all have read it */
        float *red = (float *)smem;
        __syncthreads();
        wg_store<NP>(red, xinv, acc, T, WG_ROWS, lr, lr + 8, q, ia, ib); /* [t][128 rows]: every row < 128 is stored */
        cooperative_groups::cluster_group cl = cooperative_groups::this_cluster();
        cl.sync();
        const int E = T * WG_ROWS, k = (int)cl.block_rank(), e0 = (int)((long)k * E / KS), e1 = (int)((long)(k + 1) * E / KS);
        for (int e = e0 + tid; e < e1; e += 256) {
            float v = *cl.map_shared_rank(red + e, 0);
            for (int j = 1; j < KS; j++) v = __fadd_rn(v, *cl.map_shared_rank(red + e, j));
            const int t = e / WG_ROWS, r = r0 + e % WG_ROWS;
            if (r < N) out[(size_t)t * N + r] = v;
        }
        cl.sync();
        return;
    }
    wg_store<NP>(out + (size_t)split * T * N, xinv, acc, T, N, ya, yb, q, ia, ib);
}
template <int BITS, int NP, int SBT, int PRB = 0>
__global__ void __launch_bounds__(256, 2) wg2_kernel(float *__restrict__ out, const unsigned char *__restrict__ xg, const float *__restrict__ xinv,
                                                     int T, dweight_t w, int KS, int gsh, int slow, int clu) {
    wg2_body<BITS, NP, SBT, PRB>(out, xg, xinv, T, w, KS, gsh, slow, clu, blockIdx.x, blockIdx.y);
}

/* element i of the KS splits' sums p[k][i] (n elements a split), added in split order */
__device__ __forceinline__ float wg_sum(const float *p, int KS, size_t n, size_t i) {
    float v = p[i]; /* plain loads, not ld.global.nc (p not __restrict__): under PDL the matmul that wrote p ran
                     * beside this kernel's start (cuda_common.cuh) */
    for (int k = 1; k < KS; k++) v = __fadd_rn(v, p[(size_t)k * n + i]);
    return v;
}
/* y = part[0] + part[1] + ... + part[KS-1], in split order */
__global__ void wg_reduce_kernel(float *__restrict__ y, const float *part, int KS, size_t n) {
    pdl_trigger(); /* launched with PDL (wg_pdl): the partials are read after the matmul completed */
    pdl_wait();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) y[i] = wg_sum(part, KS, n, i);
}

/* K splits: about KILN_CUDA_QWG_WAVE (default 2) blocks per SM, each at least 4 chunks, ≤ 32.
 * A function of the shape only (a token's sums are the same in any batch). */
static int wg_ks(const cuda_impl_t *c, const dweight_t *w) {
    static int wave = -1;
    if (wave < 0) { const char *e = getenv("KILN_CUDA_QWG_WAVE"); wave = e && atoi(e) > 0 ? atoi(e) : 2; }
    const int sms = c->sm_count > 0 ? c->sm_count : 132, rb = cdiv(w->rows, WG_ROWS), nch = w->cols / WG_KC;
    int ks = wave * sms / rb;
    if (ks > nch / 4) ks = nch / 4;
    if (ks > 32) ks = 32;
    return ks < 1 ? 1 : ks;
}

template <int BITS, int NP, int SBT, int PRB = 0>
static void wg2_launch(cuda_impl_t *c, float *out, const unsigned char *xg, const float *inv, int T, const dweight_t *w, int KS, int gsh, int slow,
                       int clu) {
    using P = wgs<BITS, NP>;
    static_assert(NP * WG_ROWS * 4 <= P::SMEM, "the cluster sums reuse the ring");
    static int attr;
    if (!attr) {
        cudaCheck(cudaFuncSetAttribute(wg2_kernel<BITS, NP, SBT, PRB>, cudaFuncAttributeMaxDynamicSharedMemorySize, P::SMEM));
        attr = 1;
    }
    if (clu) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(cdiv(w->rows, WG_ROWS), KS);
        cfg.blockDim = dim3(256);
        cfg.dynamicSmemBytes = P::SMEM;
        cfg.stream = c->stream;
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeClusterDimension;
        at[0].val.clusterDim.x = 1; at[0].val.clusterDim.y = KS; at[0].val.clusterDim.z = 1;
        cuda_capture_note_cluster(c, 1u, (unsigned)KS);
        cfg.attrs = at;
        cfg.numAttrs = 1;
        cudaCheck(cudaLaunchKernelEx(&cfg, wg2_kernel<BITS, NP, SBT, PRB>, out, xg, inv, T, *w, KS, gsh, slow, 1));
        return;
    }
    wg2_kernel<BITS, NP, SBT, PRB><<<dim3(cdiv(w->rows, WG_ROWS), KS), 256, P::SMEM, c->stream>>>(out, xg, inv, T, *w, KS, gsh, slow, 0);
    cudaLaunchCheck();
}

/* ---- v5 (KILN_CUDA_QWG_V=5, the 4-bit default in session 14): warp-specialized. One producer
 * warp fills an S-stage ring (x tile by bulk copy, codes and scale/bias words by cp.async, each
 * lane's copies signalled with cp.async.mbarrier.arrive.noinc on the stage's "full" mbarrier);
 * WGN consumer warpgroups (64 rows each) wait on "full", convert and run the wgmmas as v2 does
 * (two chunks per wait, the same conversions, wgmmas, order and accumulators: bitwise v2 where
 * the K splits are the same — they are: wg_ks of the 128-row count) and release the stage on its
 * "empty" mbarrier (one arrive per consumer warp). No block barrier in the loop: the warpgroups are
 * coupled only through the ring, and the producer refills a stage as soon as both released it. */
template <int BITS, int NP, int WGN> struct wgs3 {
    static constexpr int ROWS = WGN * 64;
    static constexpr int XB = NP * 128, RB = WG_KC * BITS / 8, RBP = RB + 16;
    static constexpr int STG = XB + ROWS * RBP + 2 * ROWS * 2 * 4;
    /* two blocks a SM (v2's ring; WGN = 4 — 256 rows, one block a SM, 9 stages — and a seventh
     * stage at WGN = 2 were measured slower: bench/cuda/wg3_variants.patch) */
    static constexpr int BUDGET = WGN == 2 ? 112640 : 225280;
    static constexpr int S = BUDGET / STG > 16 ? 16 : BUDGET / STG;
    static constexpr int SMEM = S * STG;
};

template <int BITS, int NP, int SBT, int WGN, int PRB>
__device__ __forceinline__ void wg3_body(float *__restrict__ out, const unsigned char *__restrict__ xg, const float *__restrict__ xinv, int T,
                                         const dweight_t &w, int KS, int gsh) {
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) uint64_t mbar[32];
    using P = wgs3<BITS, NP, WGN>;
    using PF = wgs<BITS, NP>; /* wg2_frag's offsets: XB and RBP are the same */
    static_assert(P::XB == PF::XB && P::RBP == PF::RBP, "stage layout");
    constexpr int S = P::S, NR = NP / 2, ROWS = P::ROWS, PPR = P::RB / 16, EB = SBT == 2 ? 4 : 2;
    static_assert(S >= 2 && S <= 16, "ring");
    /* the warp index through a shuffle: provably warp-uniform, so the role branch below is not a
     * divergent path for the wgmmas (else ptxas serializes them, C7520) */
    const int tid = threadIdx.x, lane = tid & 31, warp = __shfl_sync(0xffffffffu, tid >> 5, 0);
    const int N = w.rows, K = w.cols, r0 = blockIdx.x * ROWS, split = blockIdx.y;
    const int nch = K / WG_KC, c0 = (int)((long)split * nch / KS), n = (int)((long)(split + 1) * nch / KS) - c0;
    const int ng = K / w.group, gpc = w.group == 32 ? 2 : 1;
    const uint32_t full = (unsigned)__cvta_generic_to_shared(mbar), empty = full + 8 * S;
    if (tid == 0) {
        for (int i = 0; i < S; i++) {
            mb_init_n(full + 8 * i, 33);         /* 32 lanes' cp.async arrivals + the x tile's expect_tx */
            mb_init_n(empty + 8 * i, WGN * 4); /* one per consumer warp */
        }
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    __syncthreads();
    if (warp == WGN * 4) { /* the producer warp */
        const int wpr = K / 32 * BITS;
        for (int i = 0; i < n; i++) {
            const int s = i % S, ch = c0 + i;
            if (i >= S) mb_wait(empty + 8 * s, ((i / S) - 1) & 1);
            unsigned char *dst = smem + s * P::STG;
            if (lane == 0) bulk_x(dst, xg + (size_t)ch * P::XB, P::XB, full + 8 * s);
#pragma unroll
            for (int m = 0; m < ROWS * PPR / 32; m++) {
                const int c = lane + 32 * m, row = c / PPR, part = c % PPR, r = min(r0 + row, N - 1);
                cp_async16(dst + P::XB + row * P::RBP + part * 16, (const unsigned char *)w.data + (size_t)r * wpr * 4 + (size_t)ch * P::RB + part * 16);
            }
            const int gi = gsh < 0 ? 2 * ch : ch >> gsh;
#pragma unroll
            for (int m = 0; m < 2 * ROWS / 32; m++) {
                const int c = lane + 32 * m, srow = c % ROWS, isb = c / ROWS, r = min(r0 + srow, N - 1);
                const unsigned char *base = (const unsigned char *)(isb ? w.biases : w.scales) + (size_t)r * ng * EB;
                for (int j = 0; j < gpc; j++) {
                    const unsigned char *a = base + (size_t)(gi + j) * EB;
                    if (EB == 2) a = (const unsigned char *)((uintptr_t)a & ~(uintptr_t)3);
                    cp_async4(dst + P::XB + ROWS * P::RBP + isb * ROWS * 8 + srow * 8 + j * 4, a);
                }
            }
            cp_mb_arrive(full + 8 * s);
        }
        cp_commit();
        cp_wait<0>();
        return;
    }
    const int g = lane >> 2, q = lane & 3;
    const int lr = (warp >> 2) * 64 + (warp & 3) * 16 + g;
    const int ra = min(r0 + lr, N - 1), rb = min(r0 + lr + 8, N - 1);
    float pa, pb, ia, ib;
    int psa, psb, pba, pbb;
    wg_row_setup<BITS>(w, SBT == 2 ? DT_F32 : SBT == 0 ? DT_F16 : DT_BF16, ra, rb, ng, c0 * WG_KC / w.group,
                       ((c0 + n) * WG_KC + w.group - 1) / w.group, q, pa, pb, ia, ib, psa, psb, pba, pbb);
    float acc[NR];
#pragma unroll
    for (int i = 0; i < NR; i++) acc[i] = 0.f;
    for (int it = 0; it < n; it += 2) {
        const bool two = it + 1 < n;
        const int s0 = it % S, s1 = (it + 1) % S;
        mb_wait(full + 8 * s0, (it / S) & 1);
        if (two) mb_wait(full + 8 * s1, ((it + 1) / S) & 1);
        if constexpr (!PRB) {
            uint32_t af0[4][4], af1[4][4];
            const unsigned char *st0 = smem + s0 * P::STG, *st1 = smem + s1 * P::STG;
            const int g0 = gsh < 0 ? 2 * (c0 + it) : (c0 + it) >> gsh, g1 = gsh < 0 ? 2 * (c0 + it + 1) : (c0 + it + 1) >> gsh;
            wg2_frag<BITS, NP, SBT, ROWS>(af0, st0, lr, q, g0, gpc, pa, pb, psa, psb, pba, pbb, 0);
            if (two) wg2_frag<BITS, NP, SBT, ROWS>(af1, st1, lr, q, g1, gpc, pa, pb, psa, psb, pba, pbb, 0);
            wg_mma_chunks<NP>(acc, af0, af1, st0, st1, two);
        }
        __syncwarp();
        if (lane == 0) {
            mb_arrive(empty + 8 * s0);
            if (two) mb_arrive(empty + 8 * s1);
        }
    }
#pragma unroll
    for (int i = 0; i < NR; i++) wg_reg_fence(acc[i]);
    const int ya = r0 + lr, yb = ya + 8;
    wg_store<NP>(out + (size_t)split * T * N, xinv, acc, T, N, ya, yb, q, ia, ib);
}

/* registers: the register file is per SM sub-partition (16384 each, four a SM) and a block's
 * warps are spread over the four: two blocks of 9 warps put 5 warps on some sub-partition, so
 * ≤ 102 registers a thread — 96, what __launch_bounds__(288, 2) gives (8 bytes spilled at 4-bit,
 * n64; a cap of 112 left one block a SM, measured 1.1 ms slower a c=64 step) */
template <int BITS, int NP, int SBT, int PRB>
__global__ void __launch_bounds__(288, 2)
    wg3_kernel(float *__restrict__ out, const unsigned char *__restrict__ xg, const float *__restrict__ xinv, int T, dweight_t w, int KS, int gsh) {
    wg3_body<BITS, NP, SBT, 2, PRB>(out, xg, xinv, T, w, KS, gsh);
}

template <int BITS, int NP, int SBT, int PRB>
static void wg3_launch(cuda_impl_t *c, float *out, const unsigned char *xg, const float *inv, int T, const dweight_t *w, int KS, int gsh) {
    constexpr int WGN = 2;
    using P = wgs3<BITS, NP, WGN>;
    static int attr;
    auto kern = wg3_kernel<BITS, NP, SBT, PRB>;
    if (!attr) {
        cudaCheck(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, P::SMEM));
        attr = 1;
        if (getenv("KILN_CUDA_QWG_DEBUG")) {
            int nb = 0;
            cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, kern, WGN * 128 + 32, P::SMEM));
            fprintf(stderr, "qwg v5 q%d n%d sbt%d probe%d: %d stages of %d B, %d blocks/SM\n", BITS, NP, SBT, PRB, P::S, P::STG, nb);
        }
    }
    kern<<<dim3(cdiv(w->rows, P::ROWS), KS), WGN * 128 + 32, P::SMEM, c->stream>>>(out, xg, inv, T, *w, KS, gsh);
    cudaLaunchCheck();
}
template <int BITS, int NP, int SBT>
static void wg3_pick(cuda_impl_t *c, int prb, float *out, const unsigned char *xg, const float *inv, int T, const dweight_t *w, int KS, int gsh) {
    /* the copies-only probe (KILN_CUDA_QWG_PROBE=1) exists for the benchmark's case alone: 4-bit, 64 tokens, bf16 scales */
    if constexpr (BITS == 4 && NP == 64 && SBT == 1) {
        if (prb) { wg3_launch<BITS, NP, SBT, 1>(c, out, xg, inv, T, w, KS, gsh); return; }
    }
    wg3_launch<BITS, NP, SBT, 0>(c, out, xg, inv, T, w, KS, gsh);
}

/* ---- v8 (KILN_CUDA_QWG_V=8, the default: 4-bit since session 15, 8-bit since 22): v5 with fewer bytes pulled
 * from L2 per weight byte, and (session 22) fewer instructions per chunk.
 * helper-92's probe: v5's copies move 3.4–3.8× the weight bytes from L2 (per 128-row × 64-column
 * chunk an 8-KB x tile, the same for every block of the launch, for 4 KB of codes, plus 256 scale/
 * bias words of 4 bytes, each its own 32-byte sector), and the copies alone take half the kernel.
 *  - the x tile (opt-in, KILN_CUDA_QWG_MC = 2 or 4; default 1: one plain bulk copy per block as in
 *    v5 — MEASURED SLOWER, session 15: gate 41.5 → 59.9 / 81.7 µs at C = 2 / 4, and ncu's L2
 *    bytes did not drop; the cluster-wide release of every stage, with a cluster-scope release per
 *    remote arrive, is the suspect): the blocks of a cluster of C along the
 *    rows (same K split) each load 1/C of it and multicast it to all C (cp.async.bulk
 *    .multicast::cluster: one L2 read, C deliveries). A stage may be refilled only when all C
 *    blocks released it, so every consumer warp arrives on the "empty" mbarrier of each block of
 *    the cluster (count 8·C); each block's "full" mbarrier expects the whole tile's bytes (a
 *    remote slice may land before the local expect_tx: the tx-count goes negative, allowed). The
 *    grid's row blocks are rounded up to a multiple of C (the extra rows clamp to the last row
 *    and are not stored). A producer waits for its stages' last releases before exiting, so no
 *    block leaves while another may still arrive on its barriers.
 *  - the scales/biases: the consumers read their rows' values for the split's groups anyway (the
 *    2^s bound); they keep the raw 16-bit (f32: 32-bit) values in a shared slab [2][G][128 rows]
 *    and read them from there per chunk — no scale/bias copies in the ring at all (the slab costs
 *    2·G·128·2 bytes: gate/up 16 KB, lm_head 32 KB; the ring gets what is left of ~112 KB, ≤
 *    KILN_CUDA_QWG_S stages (default 6), and matrices whose slab leaves < 4 stages take v5).
 *    Measured (H200, ncu, 64 tokens, C = 1): q/o 18.4 → 15.0 µs, k/v 9.3 → 9.3, gate/up 45.3 →
 *    41.5, down 44.1 → 39.5, lm_head 304.9 → 283.5; L2→SM bytes −12..−27 %; the copies-only probe
 *    −5..−28 % (bench/cuda/RESULTS.md, session 15, helper-95).
 *  - the f16 slab (session 22; KILN_CUDA_QWG_HSLAB=0: off): ncu then had the kernel bound by its
 *    instruction stream (issue ~55 % active, tensor pipe ~25 %, DRAM ≤ 25 %), and every chunk rebuilt
 *    its rows' f16 factors from the raw slab. A warp whose values over its whole split are all ones the
 *    fast conversion takes rewrites its slab entries once as f16(value·2^s) and loads them per chunk
 *    (wgm_body): per matmul −5..−12 %, llama-3-8b q4 c=64 steady +7.6 %; at 8-bit (wg_cvth<8>) v8 with it
 *    is +40 % steady at c=64 on llama-3-8b q8 over v2.
 * Values, conversions, wgmmas, chunk order and accumulators are v5's (= v2's): bitwise (tested). */
__device__ __forceinline__ unsigned wgm_rank() { unsigned r; asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r)); return r; }
__device__ __forceinline__ void wgm_cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
/* wait for a phase another block's threads may have completed (their release at cluster scope) */
__device__ __forceinline__ void mb_wait_cl(uint32_t a, int par) {
    asm volatile("{\n.reg .pred p;\nWGM_WAIT_%=:\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%0], %1;\n@!p bra WGM_WAIT_%=;\n}\n" ::"r"(a),
                 "r"(par)
                 : "memory");
}
/* arrive on the mbarrier at the same offset in block `rank` of the cluster */
__device__ __forceinline__ void mb_arrive_cl(uint32_t a, unsigned rank) {
    uint32_t r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(rank));
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(r) : "memory");
}
/* bytes [off, off + n) of the x tile into every block of the cluster (mask), completing on each one's mbarrier at mb's offset */
__device__ __forceinline__ void bulk_x_mc(uint32_t dst, const void *src, uint32_t n, uint32_t mb, uint16_t mask) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], %4;\n" ::"r"(dst),
                 "l"(src), "r"(n), "r"(mb), "h"(mask)
                 : "memory");
}
/* a raw scale/bias value (16 bits: f16 or bf16; 32 bits: f32) as wg_sbv / ld_f read it */
template <int SBT> __device__ __forceinline__ float wgm_val(uint32_t v) {
    if constexpr (SBT == 2) return __uint_as_float(v);
    else if constexpr (SBT == 0) return __half2float(__ushort_as_half((unsigned short)v));
    else return __uint_as_float(v << 16);
}
template <int SBT> __device__ __forceinline__ uint32_t wgm_ld(const void *p, size_t i) {
    if constexpr (SBT == 2) return ((const uint32_t *)p)[i];
    else return ((const unsigned short *)p)[i];
}
template <int SBT> __device__ __forceinline__ void wgm_st(unsigned char *sl, int i, uint32_t v) {
    if constexpr (SBT == 2) ((uint32_t *)sl)[i] = v;
    else ((unsigned short *)sl)[i] = (unsigned short)v;
}
template <int SBT> __device__ __forceinline__ uint32_t wgm_get(const unsigned char *sl, int i) {
    if constexpr (SBT == 2) return ((const uint32_t *)sl)[i];
    else return ((const unsigned short *)sl)[i];
}
/* the slab's stride between groups, in entries: 8 more than the block's rows, so the four lanes q of a row-setup
 * store (groups gi, gi + 1, gi + 2, gi + 3 of the same rows) hit four different bank groups — at 128 they were
 * 256 bytes apart, one bank: 4-way conflicts, ~72 % of the launch's shared-store wavefronts (ncu, session 28) */
constexpr int WGM_SLS = WG_ROWS + 8;
/* wg_row_setup's 2^s for rows ra, rb (block rows lr, lr + 8) over groups [gb, ge), the same loads,
 * values and maxima, and the raw values kept in the slab: scales at [g − gb][row], biases at
 * [G + g − gb][row] (rows of 128: a warp's 8 lanes g read 8 consecutive entries) */
/* the f16-slab test's extremes of one row's raw values over the lane's groups: the largest |scale| and |bias|, the
 * smallest non-zero ones (0: none) and whether any value is NaN or infinite */
struct wgm_ext {
    float smax = 0.f, smin = 0.f, bmax = 0.f, bmin = 0.f;
    bool bad = false;
    __device__ __forceinline__ void add(float sv, float bv) {
        const float a = fabsf(sv), b = fabsf(bv);
        bad = bad || !(a <= 3.402823466e38f) || !(b <= 3.402823466e38f);
        smax = fmaxf(smax, a); bmax = fmaxf(bmax, b);
        if (a != 0.f) smin = smin == 0.f ? a : fminf(smin, a);
        if (b != 0.f) bmin = bmin == 0.f ? b : fminf(bmin, b);
    }
    /* every value v of the row has f16 numbers v·p (and scale·p·d): wg_h_ok at the extremes (p a power of 2, so
     * v·p is monotone in |v|). Stricter than testing each value only where a non-zero v·p underflows f32 to 0
     * (wg_h_ok(0) holds): a stricter answer only sends the warpgroup down the per-chunk path, whose results are
     * bitwise the same */
    __device__ __forceinline__ bool ok(float p, float d) const {
        return !bad && wg_h_ok(smax * p) && wg_h_ok(bmax * p) && wg_h_ok(smax * p * d) && (smin == 0.f || (wg_h_ok(smin * p) && wg_h_ok(smin * p * d))) &&
               (bmin == 0.f || wg_h_ok(bmin * p));
    }
};
/* wg_row_setup's 2^s for rows ra, rb (block rows lr, lr + 8) over groups [gb, ge), the same loads,
 * values and maxima, and the raw values kept in the slab: scales at [g − gb][row], biases at
 * [G + g − gb][row] (a group's entries WGM_SLS apart: a warp's 8 lanes g read 8 consecutive entries); with
 * EXT, the rows' extremes for the f16-slab test (ea, eb) */
template <int BITS, int SBT, bool EXT = false>
__device__ __forceinline__ void wgm_row_setup(const dweight_t &w, unsigned char *sl, int G, int lr, int ra, int rb, int ng, int gb, int ge, int q, float &pa,
                                              float &pb, float &ia, float &ib, wgm_ext *ea = nullptr, wgm_ext *eb = nullptr) {
    const float cmax = (float)((1 << BITS) - 1);
    float ma = 0.f, mb = 0.f;
#pragma unroll 8
    for (int gi = gb + q; gi < ge; gi += 4) {
        const size_t xa = (size_t)ra * ng + gi, xb = (size_t)rb * ng + gi;
        const uint32_t sa = wgm_ld<SBT>(w.scales, xa), ba = wgm_ld<SBT>(w.biases, xa), sb = wgm_ld<SBT>(w.scales, xb), bb = wgm_ld<SBT>(w.biases, xb);
        const int o = (gi - gb) * WGM_SLS + lr, ob = (G + gi - gb) * WGM_SLS + lr;
        wgm_st<SBT>(sl, o, sa); wgm_st<SBT>(sl, o + 8, sb); wgm_st<SBT>(sl, ob, ba); wgm_st<SBT>(sl, ob + 8, bb);
        ma = fmaxf(ma, fabsf(wgm_val<SBT>(sa)) * cmax + fabsf(wgm_val<SBT>(ba)));
        mb = fmaxf(mb, fabsf(wgm_val<SBT>(sb)) * cmax + fabsf(wgm_val<SBT>(bb)));
        if constexpr (EXT) {
            ea->add(wgm_val<SBT>(sa), wgm_val<SBT>(ba));
            eb->add(wgm_val<SBT>(sb), wgm_val<SBT>(bb));
        }
    }
    wg_row_scales(ma, mb, pa, pb, ia, ib);
}

template <int BITS, int NP> struct wgsm {
    static constexpr int XB = NP * 128, RB = WG_KC * BITS / 8, RBP = RB + 16;
    static constexpr int STG = XB + WG_ROWS * RBP; /* x tile + codes; no scale/bias words */
    /* two blocks a SM: 2 × (this + 384 static + 1 KB reserved) ≤ 228 KB: 233 216 ≤ 233 472; the 128-token tile
     * (wgm128_kernel) runs one block a SM and takes twice that */
    static constexpr int BUDGET = NP == 128 ? 230400 : 115200;
};

/* S: ring stages (runtime), G: slab groups (the most any split spans); the cluster's size from
 * the launch (1: no cluster, the x tile by a plain bulk copy); bx, by: the block's 128 rows and K
 * split (wgm_kernel: blockIdx; wgm_multi_kernel: within its slot) */
template <int BITS, int NP, int SBT, int PRB>
__device__ __forceinline__ void wgm_body(float *__restrict__ out, const unsigned char *__restrict__ xg, const float *xinv, int T,
                                         const dweight_t &w, int KS, int gsh, int S, int G, int C, int bx, int by, int clu = 0, int gelu = 0,
                                         __nv_bfloat16 *y16 = nullptr) {
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) uint64_t mbar[32];
    using P = wgsm<BITS, NP>;
    using PF = wgs<BITS, NP>; /* wg2_cvt's offsets: XB and RBP are the same */
    static_assert(P::XB == PF::XB && P::RBP == PF::RBP, "stage layout");
    constexpr int NR = NP / 2, ROWS = WG_ROWS, PPR = P::RB / 16, EB = SBT == 2 ? 4 : 2;
    const int tid = threadIdx.x, lane = tid & 31, warp = __shfl_sync(0xffffffffu, tid >> 5, 0);
    const int hsl = (C >> 8) & 1; /* wgm_hslab(): the warp's slab as f16 factors where they are exact (below) */
    const int l2pf = (C >> 9) & 3 ? 64 << ((C >> 9) & 3) : 0; /* wgm_l2pf(): the code copies' L2 prefetch size (bytes) */
    const int pdl = (C >> 11) & 1; /* launched with PDL (wg_pdl): weights before griddepcontrol.wait, x and the output after */
    C &= 255;
    const int N = w.rows, K = w.cols, r0 = bx * ROWS, split = by;
    const int nch = K / WG_KC, c0 = (int)((long)split * nch / KS), n = (int)((long)(split + 1) * nch / KS) - c0;
    const int ng = K / w.group, gpc = w.group == 32 ? 2 : 1;
    const unsigned rank = C > 1 ? wgm_rank() : 0;
    unsigned char *slab = smem + S * P::STG;
    const uint32_t full = (unsigned)__cvta_generic_to_shared(mbar), empty = full + 8 * S;
    if (tid == 0) {
        for (int i = 0; i < S; i++) {
            mb_init_n(full + 8 * i, 33);        /* 32 lanes' cp.async arrivals + the x tile's expect_tx */
            mb_init_n(empty + 8 * i, 8 * C);   /* one per consumer warp of each block of the cluster */
        }
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    if (C > 1) wgm_cluster_sync(); /* every block's barriers initialized before any remote arrive or multicast */
    else __syncthreads();
    if (warp == 8) { /* the producer warp */
        const int wpr = K / 32 * BITS;
        const uint32_t xs = P::XB / C, sm0 = (unsigned)__cvta_generic_to_shared(smem);
        /* PDL: the first `pre` stages' codes go out before griddepcontrol.wait (weights: nothing an earlier kernel
         * writes), their x tiles after it; a stage's full barrier counts both, in either order */
        const int pre = pdl ? (n < S ? n : S) : 0;
        auto x_tile = [&](int s, int ch) {
            if (lane != 0) return;
            if (C > 1) {
                asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(full + 8 * s), "r"((uint32_t)P::XB) : "memory");
                bulk_x_mc(sm0 + s * P::STG + rank * xs, xg + (size_t)ch * P::XB + rank * xs, xs, full + 8 * s, (uint16_t)((1u << C) - 1));
            } else
                bulk_x(smem + s * P::STG, xg + (size_t)ch * P::XB, P::XB, full + 8 * s);
        };
        int s = 0, ph = 0;
        for (int i = 0; i < n; i++) {
            const int ch = c0 + i;
            if (i >= S) mb_wait_cl(empty + 8 * s, ph ^ 1);
            unsigned char *dst = smem + s * P::STG;
            if (i >= pre) x_tile(s, ch);
#pragma unroll
            for (int m = 0; m < ROWS * PPR / 32; m++) {
                const int c = lane + 32 * m, row = c / PPR, part = c % PPR, r = min(r0 + row, N - 1);
                wg_cp16(dst + P::XB + row * P::RBP + part * 16, (const unsigned char *)w.data + (size_t)r * wpr * 4 + (size_t)ch * P::RB + part * 16,
                        l2pf);
            }
            cp_mb_arrive(full + 8 * s);
            if (i + 1 == pre) {
                pdl_wait();
                for (int j = 0; j < pre; j++) x_tile(j, c0 + j); /* pre ≤ S: stage j holds chunk j */
            }
            if (++s == S) { s = 0; ph ^= 1; }
        }
        cp_commit();
        cp_wait<0>();
        /* the tail: every stage's last release (from all C blocks) has landed before this block may exit */
        if (C > 1)
            for (int i = n > S ? n : S; i < n + S; i++) mb_wait_cl(empty + 8 * (i % S), ((i / S) - 1) & 1);
        if (clu) { wgm_cluster_sync(); wgm_cluster_sync(); } /* the consumers' two cluster barriers below */
        return;
    }
    const int g = lane >> 2, q = lane & 3;
    const int lr = (warp >> 2) * 64 + (warp & 3) * 16 + g;
    const int ra = min(r0 + lr, N - 1), rb = min(r0 + lr + 8, N - 1);
    const int gb = c0 * WG_KC / w.group;
    float pa, pb, ia0, ib0; /* ia0, ib0 (2^−s) not held through the loop: 2^−s from pa, pb after it (registers) */
    const int ge = ((c0 + n) * WG_KC + w.group - 1) / w.group;
    wgm_ext ea, eb; /* the rows' extremes for the f16 slab's test (below) */
    if (SBT != 2 && !PRB && hsl) wgm_row_setup<BITS, SBT, SBT != 2 && !PRB>(w, slab, G, lr, ra, rb, ng, gb, ge, q, pa, pb, ia0, ib0, &ea, &eb);
    else wgm_row_setup<BITS, SBT>(w, slab, G, lr, ra, rb, ng, gb, ge, q, pa, pb, ia0, ib0);
    (void)ia0; (void)ib0;
    /* The f16 slab (wgm_hslab; 16-bit scales): where every one of the warp's slab values over the whole split is
     * one the fast conversion takes (wg2_cvt: scale·2^s, scale·2^(s−4) and bias·2^s f16 numbers), each lane rewrites
     * the entries it wrote as f16(value·2^s) — exact then, the same f16 numbers wg2_cvt makes per chunk — and the
     * loop only loads them: no per-chunk scaling, checks, vote or f32 → f16 conversions (every chunk of such a warp
     * took wg2_cvt's fast branch anyway, so the results are bitwise the same). A warpgroup with any other value keeps
     * the raw slab and wg2_cvt's per-chunk path. */
    bool hs = false;
    if constexpr (SBT != 2 && !PRB) {
        if (hsl) {
            constexpr float d = BITS == 4 ? 0.0625f : 1.f;
            /* the lane's entries of group gi: scales of rows lr, lr + 8 at v[0], v[1], biases at v[2], v[3] (slab offsets
             * o[]) times 2^s */
            auto vals = [&](int gi, int (&o)[4], float (&v)[4]) {
                o[0] = (gi - gb) * WGM_SLS + lr; o[1] = o[0] + 8; o[2] = (G + gi - gb) * WGM_SLS + lr; o[3] = o[2] + 8;
#pragma unroll
                for (int k = 0; k < 4; k++) v[k] = wgm_val<SBT>(wgm_get<SBT>(slab, o[k])) * (k & 1 ? pb : pa);
            };
            /* the test on the extremes the row setup kept (session 28; it was a second pass over the slab, every value
             * loaded back and tested: ~8 % of a 64-token launch's warp samples, ncu) */
            const bool ok = ea.ok(pa, d) && eb.ok(pb, d);
            /* one decision per warpgroup, not per warp: the chunk loop below comes in copies picked by hs, and the
             * four warps of a warpgroup must issue the same wgmma instructions (.sync.aligned) — a warpgroup split
             * between two copies gave wrong sums. The warps' votes meet in shared memory behind named barrier
             * 2 + warpgroup over its 128 threads (1 is the consumers' 256-thread barrier, 0 the block's). */
            __shared__ int hs_vote[8];
            const bool wok = __all_sync(0xffffffffu, ok);
            if (lane == 0) hs_vote[warp] = wok;
            asm volatile("bar.sync %0, 128;\n" ::"r"(2 + (warp >> 2)) : "memory");
            const int w0 = warp & ~3;
            hs = hs_vote[w0] && hs_vote[w0 + 1] && hs_vote[w0 + 2] && hs_vote[w0 + 3];
            /* the rewrite, four of the lane's groups at a time: their 16 loads before any store (one loop of load,
             * convert, store per group waited for each load: stores into the slab kept the next loads behind them) */
            if (hs)
                for (int g0 = gb + q; g0 < ge; g0 += 16) {
                    int o[4][4];
                    float v[4][4];
#pragma unroll
                    for (int u = 0; u < 4; u++)
                        if (g0 + 4 * u < ge) vals(g0 + 4 * u, o[u], v[u]);
#pragma unroll
                    for (int u = 0; u < 4; u++)
                        if (g0 + 4 * u < ge)
#pragma unroll
                            for (int k = 0; k < 4; k++) ((unsigned short *)slab)[o[u][k]] = __half_as_ushort(__float2half_rn(v[u][k]));
                }
        }
    }
    __syncwarp(); /* a warp's slab rows are its own */
    float acc[NR];
#pragma unroll
    for (int i = 0; i < NR; i++) acc[i] = 0.f;
    /* The chunk loop in three copies, picked once per warpgroup: the f16 slab with one group a chunk (HS, !TWO: group ≥ 64),
     * with two (HS, TWO: group 32), and the per-chunk conversion (!HS) — no hs / gpc tests, and neither held in a
     * register, inside a loop whose registers are at the 96 cap (each branch of a loop that tested them per chunk
     * spilled). Every copy converts the same codes into the same f16 values in the same order (bitwise). */
    auto chunk_loop = [&](auto hs_c, auto two_c) {
    constexpr bool HS = decltype(hs_c)::value, TWO = decltype(two_c)::value;
    static_assert(HS || !TWO, "TWO only with the f16 slab");
    int s0 = 0, ph0 = 0;
    for (int it = 0; it < n; it += 2) {
        const bool two = it + 1 < n;
        const int s1 = s0 + 1 == S ? 0 : s0 + 1, ph1 = s1 == 0 ? ph0 ^ 1 : ph0;
        mb_wait(full + 8 * s0, ph0);
        if (two) mb_wait(full + 8 * s1, ph1);
        if constexpr (!PRB) {
            uint32_t af0[4][4], af1[4][4];
            const unsigned char *st0 = smem + s0 * P::STG, *st1 = smem + s1 * P::STG;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                if (h == 1 && !two) break;
                const int ch = c0 + it + h, gi0 = (gsh < 0 ? 2 * ch : ch >> gsh) - gb;
                if constexpr (HS) {
                    { /* the f16 slab: (s, s/16) — 8-bit: (s, s) — and (b, b) from one f16 each, exact */
                        const unsigned short *s16 = (const unsigned short *)slab;
                        const __half2 k16 = __halves2half2(__float2half_rn(1.f), __float2half_rn(BITS == 4 ? 0.0625f : 1.f));
                        const unsigned char *cd = (h == 0 ? st0 : st1) + P::XB, *ca = cd + lr * P::RBP;
                        /* TWO: the chunk spans two groups (group 32); else both halves take group gi0's factors,
                         * loaded once (the duplicate slab loads and products were 6 of a chunk's instructions) */
                        {
                            __half2 mA[2], aA[2], mB[2], aB[2];
#pragma unroll
                            for (int j = 0; j < (TWO ? 2 : 1); j++) {
                                const int o = (gi0 + j) * WGM_SLS + lr, ob = (G + gi0 + j) * WGM_SLS + lr;
                                mA[j] = __hmul2(__half2half2(__ushort_as_half(s16[o])), k16);
                                mB[j] = __hmul2(__half2half2(__ushort_as_half(s16[o + 8])), k16);
                                aA[j] = __half2half2(__ushort_as_half(s16[ob]));
                                aB[j] = __half2half2(__ushort_as_half(s16[ob + 8]));
                            }
                            if constexpr (!TWO) { mA[1] = mA[0]; mB[1] = mB[0]; aA[1] = aA[0]; aB[1] = aB[0]; }
                            if (h == 0) wg_cvth<BITS>(af0, ca, ca + 8 * P::RBP, q, mA, aA, mB, aB);
                            else wg_cvth<BITS>(af1, ca, ca + 8 * P::RBP, q, mA, aA, mB, aB);
                        }
                    }
                } else {
                    float sA[2], bA[2], sB[2], bB[2];
#pragma unroll
                    for (int j = 0; j < 2; j++) {
                        if (j >= gpc) { sA[j] = sA[0]; bA[j] = bA[0]; sB[j] = sB[0]; bB[j] = bB[0]; break; }
                        const int o = (gi0 + j) * WGM_SLS + lr, ob = (G + gi0 + j) * WGM_SLS + lr;
                        sA[j] = wgm_val<SBT>(wgm_get<SBT>(slab, o)) * pa;
                        sB[j] = wgm_val<SBT>(wgm_get<SBT>(slab, o + 8)) * pb;
                        bA[j] = wgm_val<SBT>(wgm_get<SBT>(slab, ob)) * pa;
                        bB[j] = wgm_val<SBT>(wgm_get<SBT>(slab, ob + 8)) * pb;
                    }
                    if (h == 0) wg2_cvt<BITS, NP, SBT>(af0, st0 + P::XB, lr, q, sA, bA, sB, bB, 0);
                    else wg2_cvt<BITS, NP, SBT>(af1, st1 + P::XB, lr, q, sA, bA, sB, bB, 0);
                }
            }
            wg_mma_chunks<NP>(acc, af0, af1, st0, st1, two);
        }
        __syncwarp();
        if (lane == 0) {
            if (C > 1) {
                for (int r = 0; r < C; r++) {
                    mb_arrive_cl(empty + 8 * s0, (unsigned)r);
                    if (two) mb_arrive_cl(empty + 8 * s1, (unsigned)r);
                }
            } else {
                mb_arrive(empty + 8 * s0);
                if (two) mb_arrive(empty + 8 * s1);
            }
        }
        s0 = s1 + 1 == S ? 0 : s1 + 1;
        ph0 = s0 == 0 ? ph1 ^ 1 : ph1;
    }
    };
    bool looped = false;
    if constexpr (SBT != 2 && !PRB) {
        if (hs) {
            if (gpc > 1) chunk_loop(std::true_type(), std::true_type());
            else chunk_loop(std::true_type(), std::false_type());
            looped = true;
        }
    }
    if (!looped) chunk_loop(std::false_type(), std::false_type());
    if (pdl) { /* the split sums (PDL) may launch; our stores wait for the kernels before (they may read out) */
        pdl_trigger();
        pdl_wait();
    }
#pragma unroll
    for (int i = 0; i < NR; i++) wg_reg_fence(acc[i]);
    const int ya = r0 + lr, yb = ya + 8;
    /* 2^−s exactly (pa = 2^s, |s| ≤ 60: 254 − (127 + s) = 127 − s) */
    const float ia = __int_as_float((254 << 23) - __float_as_int(pa)), ib = __int_as_float((254 << 23) - __float_as_int(pb));
    if (clu) {
        /* the multi launch's cluster reduction (KILN_CUDA_QWG_MULTI=2): the cluster is this row block's
         * KS splits (clu 1) or gate's KS splits then up's (clu 2, the GLU). Each block puts its split
         * sums [t][128 rows] — wg_store's values — into its ring (both warpgroups past it: the named
         * barrier of the 256 consumer threads; the producer warp has exited its loop), one cluster
         * barrier, then rank k adds elements k·E/CL.. of all splits in split order (wg_reduce_kernel's
         * sums) and stores y (clu 2: glu_act of the two sums, glu_kernel's); a second barrier keeps
         * each block's memory until every block has read it */
        float *red = (float *)smem;
        asm volatile("bar.sync 1, 256;\n" ::: "memory");
        wg_store<NP>(red, xinv, acc, T, ROWS, lr, lr + 8, q, ia, ib); /* [t][ROWS]: every row < ROWS is stored */
        wgm_cluster_sync();
        cooperative_groups::cluster_group cl = cooperative_groups::this_cluster();
        const int CL = clu == 2 ? 2 * KS : KS, E = T * ROWS, k = (int)wgm_rank();
        const int e0 = (int)((long)k * E / CL), e1 = (int)((long)(k + 1) * E / CL);
        for (int e = e0 + tid; e < e1; e += 256) {
            const int t = e / ROWS, r = r0 + e % ROWS;
            float v = *cl.map_shared_rank(red + e, 0);
            for (int j = 1; j < KS; j++) v = __fadd_rn(v, *cl.map_shared_rank(red + e, j));
            if (clu == 2) {
                float u = *cl.map_shared_rank(red + e, KS);
                for (int j = 1; j < KS; j++) u = __fadd_rn(u, *cl.map_shared_rank(red + e, KS + j));
                v = glu_act(v, u, gelu);
                if (y16 && r < N) y16[(size_t)t * N + r] = __float2bfloat16_rn(v);
            }
            if (r < N) out[(size_t)t * N + r] = v;
        }
        wgm_cluster_sync();
        return;
    }
    wg_store<NP>(out + (size_t)split * T * N, xinv, acc, T, N, ya, yb, q, ia, ib);
    (void)EB;
}
template <int BITS, int NP, int SBT, int PRB>
__global__ void __launch_bounds__(288, 2) wgm_kernel(float *__restrict__ out, const unsigned char *__restrict__ xg, const float *xinv, int T,
                                                     dweight_t w, int KS, int gsh, int S, int G, int C) {
    wgm_body<BITS, NP, SBT, PRB>(out, xg, xinv, T, w, KS, gsh, S, G, C, blockIdx.x, blockIdx.y);
}

/* the 128-token tile (KILN_CUDA_QWG_128, below): wgm_body with twice the accumulators (64 a thread: one
 * m64n128k16 wgmma per k-step on the same converted A fragments, so each weight is converted once for 128
 * tokens instead of once per 64-token slice), one block a SM (up to 224 registers a thread) */
template <int BITS, int SBT, int PRB>
__global__ void __launch_bounds__(288, 1) wgm128_kernel(float *__restrict__ out, const unsigned char *__restrict__ xg, const float *xinv, int T,
                                                        dweight_t w, int KS, int gsh, int S, int G, int C) {
    wgm_body<BITS, 128, SBT, PRB>(out, xg, xinv, T, w, KS, gsh, S, G, C, blockIdx.x, blockIdx.y);
}
template <int BITS, int NP, int SBT, int PRB> static auto wgm_kern() {
    if constexpr (NP == 128) return wgm128_kernel<BITS, SBT, PRB>;
    else return wgm_kernel<BITS, NP, SBT, PRB>;
}

/* v8's launch: the slab's groups G (the most any split spans), the stages S the rest of the budget
 * holds (≤ KILN_CUDA_QWG_S, default 6), the cluster C (KILN_CUDA_QWG_MC, default 1, read per matmul); false
 * (nothing launched) when fewer than 4 stages fit */
/* v8's geometry of one weight (wgm_launch and the multi launch): G, S, the block's dynamic shared bytes
 * (smem) and the slab's (slab); false when fewer than 4 stages fit */
template <int BITS, int NP>
static bool wgm_geom(const dweight_t *w, int KS, int sbt32, int &S, int &G, int &smem, int &slab) {
    using P = wgsm<BITS, NP>;
    const int EB = sbt32 ? 4 : 2;
    const int nch = w->cols / WG_KC;
    G = 1;
    for (int k = 0; k < KS; k++) {
        const int a = (int)((long)k * nch / KS), b = (int)((long)(k + 1) * nch / KS);
        const int gb = a * WG_KC / w->group, ge = (b * WG_KC + w->group - 1) / w->group;
        if (ge - gb > G) G = ge - gb;
    }
    slab = (2 * G * WGM_SLS * EB + 127) & ~127;
    static int smax = -1;
    if (smax < 0) { const char *e = getenv("KILN_CUDA_QWG_S"); smax = e && atoi(e) >= 4 ? atoi(e) : 6; if (smax > 16) smax = 16; }
    S = (P::BUDGET - slab) / P::STG;
    if (S > smax) S = smax;
    smem = S * P::STG + slab;
    return S >= 4;
}
/* a launch in clusters of cl blocks along x (cl <= 1: no cluster attribute), with PDL where pdl (and KILN_CUDA_PDL) */
template <typename... P, typename... A>
static void wg_launch_cl(cuda_impl_t *c, void (*kern)(P...), dim3 grid, int threads, int smem, int cl, bool pdl, A... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = c->stream;
    cudaLaunchAttribute at[2];
    cfg.attrs = at;
    cfg.numAttrs = cuda_pdl_cluster_attrs(c, at, pdl, cl);
    cudaCheck(cudaLaunchKernelEx(&cfg, kern, args...));
}
/* KILN_CUDA_QWG_HSLAB=0 (read per matmul; default 1): v8 without the f16 slab (wgm_body), the per-chunk conversion
 * of every scale/bias as before — bitwise the same; an A/B switch. Passed in bit 8 of wgm_body's C (its cluster
 * size below). */
static int wgm_hslab(void) {
    const char *e = getenv("KILN_CUDA_QWG_HSLAB");
    return e && atoi(e) == 0 ? 0 : 1;
}
/* KILN_CUDA_QWG_PDL=0 (read once; default 1, and KILN_CUDA_PDL=0 turns it off too): the chain x prep → v8
 * matmul → split sums launched with programmatic dependent launch — the matmul's blocks start while the x
 * preparation runs and issue their first ring stages' code copies before griddepcontrol.wait (x tiles after
 * it), the split sums start as the matmul's blocks finish. The same kernels and results (bitwise). Session 11
 * measured PDL only together with v4's per-k-step conversion (slower together; bench/cuda/wg4_pipe_pdl.patch). */
static int wg_pdl(void) {
    static int v = -1;
    if (v < 0) { const char *e = getenv("KILN_CUDA_QWG_PDL"); v = cuda_pdl_on() && !(e && atoi(e) == 0); }
    return v;
}
/* KILN_CUDA_QWG_L2PF=0|128|256 (read per matmul; default 256): the code copies of wgm_body ask L2 for that many
 * bytes of the row (wg_cp16: a chunk reads 32 / 64 bytes of each row 2..8 KB apart, so without the hint every row's
 * piece is its own DRAM access; with it the next chunks' bytes come along). Session 22 found the copies-only probe
 * faster with it and the kernel not — the conversion bounded it then; since the kernel runs at 1.25-1.45x its copies
 * (session 26) 256 B is −4..−8 % a 64-token matmul and +3 % steady at c=64 (llama-3-8b q4; bench/cuda/RESULTS.md
 * session 26, call 8). Bits 9-10 of C: 1 = 128, 2 = 256. A cache hint: results unchanged (test_qwg under each). */
static int wgm_l2pf(void) {
    const char *e = getenv("KILN_CUDA_QWG_L2PF");
    const int v = e ? atoi(e) : 256;
    return v == 256 ? 2 : v == 128 ? 1 : 0;
}
template <int BITS, int NP, int SBT, int PRB>
static bool wgm_launch(cuda_impl_t *c, float *out, const unsigned char *xg, const float *inv, int T, const dweight_t *w, int KS, int gsh) {
    using P = wgsm<BITS, NP>;
    int S, G, smem, slab;
    if (!wgm_geom<BITS, NP>(w, KS, SBT == 2, S, G, smem, slab)) return false;
    const char *me = getenv("KILN_CUDA_QWG_MC");
    int C = me ? atoi(me) : 1;
    C = C >= 4 ? 4 : C >= 2 ? 2 : 1;
    auto kern = wgm_kern<BITS, NP, SBT, PRB>();
    static int attr;
    if (!attr) {
        cudaCheck(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, P::BUDGET));
        if (getenv("KILN_CUDA_QWG_DEBUG")) {
            int nb = 0;
            cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, kern, 288, P::BUDGET));
            fprintf(stderr, "qwg v8 q%d n%d sbt%d probe%d: stage %d B, budget %d B, %d blocks/SM at the budget\n", BITS, NP, SBT, PRB, P::STG, P::BUDGET,
                    nb);
        }
        attr = 1;
    }
    const int rbk = cdiv(w->rows, WG_ROWS);
    if (getenv("KILN_CUDA_QWG_DEBUG") && atoi(getenv("KILN_CUDA_QWG_DEBUG")) >= 2) /* every launch */
        fprintf(stderr, "qwg v8 %dx%d KS=%d: G=%d slab %d B, %d stages, %d B, cluster %d\n", w->rows, w->cols, KS, G, slab, S, smem, C);
    const int pdl = C == 1 && wg_pdl();
    wg_launch_cl(c, kern, dim3(cdiv(rbk, C) * C, KS), 288, smem, C, pdl != 0, out, xg, inv, T, *w, KS, gsh, S, G,
                 C | wgm_hslab() << 8 | wgm_l2pf() << 9 | pdl << 11);
    return true;
}
template <int BITS, int NP, int SBT>
static bool wgm_pick(cuda_impl_t *c, int prb, float *out, const unsigned char *xg, const float *inv, int T, const dweight_t *w, int KS, int gsh) {
    if constexpr (BITS == 4 && NP == 64 && SBT == 1) {
        if (prb) return wgm_launch<BITS, NP, SBT, 1>(c, out, xg, inv, T, w, KS, gsh);
    }
    return wgm_launch<BITS, NP, SBT, 0>(c, out, xg, inv, T, w, KS, gsh);
}

template <int BITS, int NP>
static void wg_launch(cuda_impl_t *c, float *y, const unsigned char *xg, const float *inv, float *part, int T, const dweight_t *w, bool defer) {
    using P = wgs<BITS, NP>;
    static int swap = -1;
    if (swap < 0) swap = getenv("KILN_CUDA_QWG_DESC") && !strcmp(getenv("KILN_CUDA_QWG_DESC"), "swap");
    const int KS = wg_ks(c, w), N = w->rows;
    static int attr, bulk = -1, pf = -1;
    if (bulk < 0) bulk = !(getenv("KILN_CUDA_QWG_X") && !strcmp(getenv("KILN_CUDA_QWG_X"), "cp"));
    if (pf < 0) pf = getenv("KILN_CUDA_QWG_PF") ? atoi(getenv("KILN_CUDA_QWG_PF")) : 0;
    if constexpr (NP <= 64) {
        if (!attr) {
            cudaCheck(cudaFuncSetAttribute(wg_kernel<BITS, NP>, cudaFuncAttributeMaxDynamicSharedMemorySize, P::SMEM));
            attr = 1;
        }
    }
    (void)attr;
    /* read per matmul (test_qwg switches it); default 8 (v5 with the scale/bias slab, bitwise v5;
     * 5: wg3_kernel as before; 2: wg2_kernel, the 8-bit default until session 22) */
    const char *ve = getenv("KILN_CUDA_QWG_V");
    const int v = ve ? atoi(ve) : 8;
    const int gsh = w->group == 32 ? -1 : w->group == 64 ? 0 : w->group == 128 ? 1 : -2;
    /* KILN_CUDA_QWG_CLUSTER=1: the split sums inside a cluster of the KS blocks (≤ 8), no
     * [KS][T][N] scratch or wg_reduce_kernel; read per matmul */
    const char *ce = getenv("KILN_CUDA_QWG_CLUSTER");
    const int clu = v != 1 && KS > 1 && KS <= 8 && ce && atoi(ce) == 1;
    const char *pe = getenv("KILN_CUDA_QWG_PROBE"); /* 1: copies and barriers only (wrong results; a measurement) */
    const int prb = pe && atoi(pe) == 1;
    bool m8 = false; /* v8 (a matrix whose slab leaves too few stages takes v5) */
    if (v == 8 && gsh > -2 && !swap && bulk && pf == 0) {
        float *o = KS > 1 ? part : y;
        if (w->sb_dtype == DT_F16) m8 = wgm_pick<BITS, NP, 0>(c, prb, o, xg, inv, T, w, KS, gsh);
        else if (w->sb_dtype == DT_BF16) m8 = wgm_pick<BITS, NP, 1>(c, prb, o, xg, inv, T, w, KS, gsh);
        else m8 = wgm_pick<BITS, NP, 2>(c, prb, o, xg, inv, T, w, KS, gsh);
    }
    if constexpr (NP == 128) { /* v8 only: wg128_ok checked every condition above before x was prepared */
        if (!m8) {
            fprintf(stderr, "kiln: internal error: the 128-token wgmma tile declined a %dx%d weight it had accepted\n", w->rows, w->cols);
            abort();
        }
    } else if (m8) {
    } else if ((v == 5 || v == 8) && gsh > -2 && !swap && bulk && pf == 0) {
        float *o = KS > 1 ? part : y;
        if (w->sb_dtype == DT_F16) wg3_pick<BITS, NP, 0>(c, prb, o, xg, inv, T, w, KS, gsh);
        else if (w->sb_dtype == DT_BF16) wg3_pick<BITS, NP, 1>(c, prb, o, xg, inv, T, w, KS, gsh);
        else wg3_pick<BITS, NP, 2>(c, prb, o, xg, inv, T, w, KS, gsh);
    } else if (v != 1 && gsh > -2 && !swap && bulk && pf == 0) {
        float *o = clu ? y : KS > 1 ? part : y;
        bool done = false;
        if constexpr (BITS == 4 && NP == 64) {
            if (w->sb_dtype == DT_BF16 && prb && !clu) { wg2_launch<BITS, NP, 1, 1>(c, o, xg, inv, T, w, KS, gsh, 0, 0); done = true; }
        }
        if (done) {
        } else if (w->sb_dtype == DT_F16) wg2_launch<BITS, NP, 0>(c, o, xg, inv, T, w, KS, gsh, v == 3, clu);
        else if (w->sb_dtype == DT_BF16) wg2_launch<BITS, NP, 1>(c, o, xg, inv, T, w, KS, gsh, v == 3, clu);
        else wg2_launch<BITS, NP, 2>(c, o, xg, inv, T, w, KS, gsh, v == 3, clu);
        if (clu) return;
    } else {
        wg_kernel<BITS, NP><<<dim3(cdiv(N, WG_ROWS), KS), 256, P::SMEM, c->stream>>>(KS > 1 ? part : y, xg, inv, T, *w, KS, swap, bulk, pf);
        cudaLaunchCheck();
    }
    if (KS > 1) { /* the split sums: recorded, then reduced now unless the add_rms_norm after it will sum them (or the next op flushes) */
        c->dfr.y = y; c->dfr.part = part; c->dfr.ks = KS; c->dfr.T = T; c->dfr.N = N;
        if (!(defer && cuda_defer_on(c) && N % 4 == 0)) cuda_defer_flush(c);
    }
}

/* KILN_CUDA_QWG_DEFER (default 1 since session 49; 0 = the separate reduce, the A/B): a one-weight matmul of 2..64 tokens
 * leaves its split sums in qpart instead of launching wg_reduce_kernel, and the add_rms_norm after it (llama's o
 * and down: x += y, h = norm(x)) adds them in split order itself — wg_sum's floats, so x and h are bitwise the
 * separate launches' — one launch and one PDL hop less twice a layer at 64 rows. Every other op first flushes
 * (cuda_defer_flush: the reduce, launched then), so nothing reads y or reuses qpart before the sums exist; that
 * needs the op wrappers of xprep.cu, so the switch is off where they are not installed. */
int cuda_defer_on(cuda_impl_t *c) { /* read per call: test_qwg_defer switches it */
    const char *e = getenv("KILN_CUDA_QWG_DEFER");
    return (e ? atoi(e) == 1 : 1) && cuda_xp_wrapped(c);
}
extern "C" long cuda_defer_uses(const backend_t *be) { return ((const cuda_impl_t *)be->impl)->dfr.used; }
void cuda_add_rowscale(cuda_impl_t *c, float *x, const float *d, const float *rs, int T, int n); /* elementwise.cu */
void cuda_defer_flush(cuda_impl_t *c) {
    cuda_defer_flush_sums(c);
    if (c->dra.x) { /* matmul_dequant.cu's deferred residual add: launched as rms_mlp would have */
        cuda_add_rowscale(c, c->dra.x, c->dra.d, c->dra.rs, c->dra.T, c->dra.n);
        c->dra.x = NULL;
    }
}
void cuda_defer_flush_sums(cuda_impl_t *c) {
    if (!c->dfr.y) return;
    const size_t n = (size_t)c->dfr.T * c->dfr.N;
    wg_launch_cl(c, wg_reduce_kernel, dim3(cdiv(n, 256) < 4096 ? cdiv(n, 256) : 4096), 256, 0, 1, wg_pdl() != 0, c->dfr.y, c->dfr.part,
                 c->dfr.ks, n);
    c->dfr.y = NULL;
}

/* ---- the multi launch (KILN_CUDA_QWG_MULTI, default 1; read per call; 0: a launch per weight and,
 * for gate/up, glu_kernel after them — the A/B): the n weights of a matmul_multi (q/k/v, gate/up)
 * in ONE wgm_kernel / wg2_kernel launch over a slot table (per slot: the weight, its output or
 * split partials, its K splits, stages and slab, its first block), every block the block it is
 * in its own launch (same rows, split, chunks, ring and slab sizes: wgm_body / wg2_body with the
 * slot's coordinates), then ONE reduce launch for all slots' split sums (wg_reduce_kernel's sums in
 * split order) — and for matmul_glu the GLU in that reduce's epilogue (glu_act of the two sums: what
 * glu_kernel computes from them). So every output is bitwise the per-weight path's. Measured on the
 * H200 64-row qwen3-0.6b step: bench/cuda/RESULTS.md, session 17, helper-99.
 * Covers v8 (wgm_kernel, the default; no x multicast: KILN_CUDA_QWG_MC ≤ 1) and, at 8-bit, v2 (wg2_kernel,
 * KILN_CUDA_QWG_V=2 or 3; not with KILN_CUDA_QWG_CLUSTER=1), 9..64 tokens, all weights one bits and
 * scale dtype; anything else keeps the per-weight launches (and matmul_glu its glu_kernel).
 * KILN_CUDA_QWG_MULTI=2 (opt-in) also drops the reduce launch: the blocks that share a row block's
 * sums form a thread-block cluster and add them through distributed shared memory in split order
 * (wgm_body's / wg2_body's cluster epilogue; for the GLU at 4-bit, gate's and up's splits in one
 * cluster of 2·KS ≤ 8) — bitwise too, where every slot has one split count. */
#define WG_MAXW 4
typedef struct wg_slot {
    dweight_t w;
    float *out;               /* y (KS = 1, no GLU) or the [KS][T][N] partials */
    int KS, gsh, S, G, rbk, blk0; /* K splits, group shift, wgm ring stages and slab groups, row blocks, first block */
} wg_slot_t;
typedef struct wg_slots {
    wg_slot_t s[WG_MAXW];
    int n;
    int clu;                  /* KILN_CUDA_QWG_MULTI=2: 1 a cluster per (slot, row block) of its KS splits; 2 (GLU) gate's and up's splits of a row block */
    int gelu;                 /* clu 2: the activation, and y16: bf16 of the GLU too (NULL: not) */
    __nv_bfloat16 *y16;
    int hslab;                /* wgm_hslab() | wgm_l2pf() << 1 | wg_pdl() << 3 */
} wg_slots_t;

__device__ __forceinline__ int wg_slot_of(const wg_slots_t &a) {
    int si = 0;
    while (si + 1 < a.n && (int)blockIdx.x >= a.s[si + 1].blk0) si++;
    return si;
}
/* a block's slot and (row block, split): rows fastest as in a launch of its own; with clusters the
 * cluster's blocks consecutive (clu 1: a row block's splits; clu 2: gate's splits then up's) */
__device__ __forceinline__ void wg_slot_block(const wg_slots_t &a, int &si, int &bx, int &by) {
    const int x = (int)blockIdx.x;
    if (a.clu == 2) {
        const int KS = a.s[0].KS, r = x % (2 * KS);
        si = r / KS; bx = x / (2 * KS); by = r % KS;
        return;
    }
    si = wg_slot_of(a);
    const int b = x - a.s[si].blk0, KS = a.s[si].KS, rbk = a.s[si].rbk;
    if (a.clu) { bx = b / KS; by = b % KS; }
    else { bx = b % rbk; by = b / rbk; }
}
template <int BITS, int NP, int SBT>
__global__ void __launch_bounds__(288, 2) wgm_multi_kernel(const unsigned char *__restrict__ xg, const float *xinv, int T, const wg_slots_t a) {
    int si, bx, by;
    wg_slot_block(a, si, bx, by);
    const wg_slot_t &sl = a.s[si];
    wgm_body<BITS, NP, SBT, 0>(sl.out, xg, xinv, T, sl.w, sl.KS, sl.gsh, sl.S, sl.G, 1 | a.hslab << 8, bx, by, a.clu, a.gelu, a.y16);
}
/* the 128-token tile's multi launch (default; KILN_CUDA_QWG128_MULTI=0 off: cuda_qwg128_multi_on): one block a SM
 * as wgm128_kernel, no clusters */
template <int BITS, int SBT>
__global__ void __launch_bounds__(288, 1) wgm128_multi_kernel(const unsigned char *__restrict__ xg, const float *xinv, int T, const wg_slots_t a) {
    int si, bx, by;
    wg_slot_block(a, si, bx, by);
    const wg_slot_t &sl = a.s[si];
    wgm_body<BITS, 128, SBT, 0>(sl.out, xg, xinv, T, sl.w, sl.KS, sl.gsh, sl.S, sl.G, 1 | a.hslab << 8, bx, by, 0, a.gelu, a.y16);
}
template <int BITS, int NP, int SBT> static auto wgm_multi_kern() {
    if constexpr (NP == 128) return wgm128_multi_kernel<BITS, SBT>;
    else return wgm_multi_kernel<BITS, NP, SBT>;
}
template <int BITS, int NP, int SBT>
__global__ void __launch_bounds__(256, 2) wg2_multi_kernel(const unsigned char *__restrict__ xg, const float *__restrict__ xinv, int T, const wg_slots_t a,
                                                           int slow) {
    int si, bx, by;
    wg_slot_block(a, si, bx, by);
    const wg_slot_t &sl = a.s[si];
    wg2_body<BITS, NP, SBT, 0>(sl.out, xg, xinv, T, sl.w, sl.KS, sl.gsh, slow, a.clu, bx, by);
}

/* the reduce of all slots with K splits: y[s][i] = Σ_k part[s][k][i] in split order (element i of
 * the concatenation e0[s] ≤ i < e0[s+1]); glu: one output y[0] = glu_act(Σ gate, Σ up) over e0[1]
 * elements (part[0]: gate, part[1]: up, KS[0], KS[1] their splits; y16: bf16 of it as glu_x16_kernel
 * writes for x16.cuh, NULL: not) */
typedef struct wg_red {
    float *y[WG_MAXW];
    const float *part[WG_MAXW];
    int KS[WG_MAXW];
    size_t e0[WG_MAXW + 1];
    int n, glu, gelu;
    __nv_bfloat16 *y16;
} wg_red_t;
__global__ void wg_reduce_multi_kernel(const wg_red_t a) {
    pdl_trigger(); /* as wg_reduce_kernel */
    pdl_wait();
    const size_t tot = a.e0[a.n];
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < tot; i += (size_t)gridDim.x * blockDim.x) {
        if (a.glu) {
            const float v = glu_act(wg_sum(a.part[0], a.KS[0], tot, i), wg_sum(a.part[1], a.KS[1], tot, i), a.gelu);
            a.y[0][i] = v;
            if (a.y16) a.y16[i] = __float2bfloat16_rn(v);
        } else {
            int s = 0;
            while (s + 1 < a.n && i >= a.e0[s + 1]) s++;
            const size_t j = i - a.e0[s];
            a.y[s][j] = wg_sum(a.part[s], a.KS[s], a.e0[s + 1] - a.e0[s], j);
        }
    }
}

/* does w's v8 ring (wgm_geom at T's token bucket) leave at least 4 stages */
template <int BITS> static bool wgm_fits(cuda_impl_t *c, const dweight_t *w, int T) {
    int S, G, sm, slab;
    const int KS = wg_ks(c, w), f = w->sb_dtype == DT_F32;
    return T <= 16   ? wgm_geom<BITS, 16>(w, KS, f, S, G, sm, slab)
           : T <= 32 ? wgm_geom<BITS, 32>(w, KS, f, S, G, sm, slab)
           : T <= 64 ? wgm_geom<BITS, 64>(w, KS, f, S, G, sm, slab)
                     : wgm_geom<BITS, 128>(w, KS, f, S, G, sm, slab);
}
/* wg_launch's read-once switches at their defaults (no descriptor swap, the x tile by bulk copy, no
 * KILN_CUDA_QWG_PF): the multi launch and the 128-token tile need them */
static int wg_fixed_defaults(void) {
    static int fixed = -1;
    if (fixed < 0) {
        const char *d = getenv("KILN_CUDA_QWG_DESC"), *x = getenv("KILN_CUDA_QWG_X"), *pf = getenv("KILN_CUDA_QWG_PF");
        fixed = !(d && !strcmp(d, "swap")) && !(x && !strcmp(x, "cp")) && !(pf && atoi(pf) != 0);
    }
    return fixed;
}
/* which kernel the multi launch of these n weights takes, as wg_launch would pick it for each: 8
 * (wgm_kernel), 2 or 3 (wg2_kernel; 3: the f32 conversion), 0: none (per-weight launches) */
static int wg_multi_kind(cuda_impl_t *c, int n, const dweight_t *const *w, int T) {
    const char *me = getenv("KILN_CUDA_QWG_MULTI");
    if (n < 2 || n > WG_MAXW || (me && atoi(me) == 0)) return 0;
    const int fixed = wg_fixed_defaults();
    const char *pe = getenv("KILN_CUDA_QWG_PROBE"), *ce = getenv("KILN_CUDA_QWG_CLUSTER"), *mc = getenv("KILN_CUDA_QWG_MC"), *ve = getenv("KILN_CUDA_QWG_V");
    if (!fixed || (pe && atoi(pe) == 1)) return 0;
    const int bits = w[0]->bits, v = ve ? atoi(ve) : 8;
    for (int i = 0; i < n; i++) {
        const int g = w[i]->group;
        if (w[i]->bits != bits || w[i]->sb_dtype != w[0]->sb_dtype || !(g == 32 || g == 64 || g == 128)) return 0;
    }
    if (v == 8) { /* v8, the default */
        if (mc && atoi(mc) >= 2) return 0;
        for (int i = 0; i < n; i++) /* each weight fits v8's ring (else wg_launch takes v5 for it) */
            if (!(bits == 4 ? wgm_fits<4>(c, w[i], T) : wgm_fits<8>(c, w[i], T))) return 0;
        return 8;
    }
    return (v == 2 || v == 3) && T <= 64 && !(ce && atoi(ce) == 1) ? v : 0;
}

/* the multi launch and its reduce; glu: n = 2 (gate, up), y[0] gets the GLU (gelu: GELU-tanh).
 * part: scratch for every slot's partials (wg_multi_part bytes); false: declined (nothing launched) */
static size_t wg_multi_part(cuda_impl_t *c, int n, const dweight_t *const *w, int T, int glu) {
    size_t b = 0;
    for (int i = 0; i < n; i++) {
        const int KS = wg_ks(c, w[i]);
        if (KS > 1 || glu) b += ((sizeof(float) * (size_t)KS * T * w[i]->rows + 255) & ~(size_t)255);
    }
    return b;
}
template <int BITS, int NP, int SBT>
static bool wg_multi_run(cuda_impl_t *c, int kind, int n, float *const *y, const unsigned char *xg, const float *inv, float *part, int T,
                         const dweight_t *const *w, int glu, int gelu, __nv_bfloat16 *y16) {
    wg_slots_t a;
    memset(&a, 0, sizeof a);
    wg_red_t r;
    memset(&r, 0, sizeof r);
    a.n = n;
    a.hslab = wgm_hslab() | wgm_l2pf() << 1;
    /* KILN_CUDA_QWG_MULTI=2: the split sums inside thread-block clusters (≤ 8 blocks) instead of the
     * reduce launch, where every slot has one K split count (≥ 2 without the GLU; the GLU: gate's
     * and up's splits, 2·KS ≤ 8) — 8-bit (wg2_kernel's cluster sums) without the GLU only */
    const char *me = getenv("KILN_CUDA_QWG_MULTI");
    if (NP <= 64 && me && atoi(me) == 2) {
        int ok = 1;
        const int KS0 = wg_ks(c, w[0]);
        for (int i = 1; i < n; i++) ok &= wg_ks(c, w[i]) == KS0;
        if (ok && glu && BITS == 4 && 2 * KS0 <= 8) a.clu = 2;
        else if (ok && !glu && KS0 >= 2 && KS0 <= 8) a.clu = 1;
    }
    int blk = 0, smem = 0;
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        wg_slot_t &sl = a.s[i];
        sl.w = *w[i];
        sl.KS = wg_ks(c, w[i]);
        sl.gsh = w[i]->group == 32 ? -1 : w[i]->group == 64 ? 0 : 1;
        sl.rbk = cdiv(w[i]->rows, WG_ROWS);
        sl.blk0 = blk;
        blk += sl.rbk * sl.KS;
        if (kind == 8) {
            int sm, slab;
            wgm_geom<BITS, NP>(w[i], sl.KS, SBT == 2, sl.S, sl.G, sm, slab); /* fits: wg_multi_kind checked */
            if (sm > smem) smem = sm;
        }
        const size_t ne = (size_t)T * w[i]->rows;
        if (a.clu) sl.out = y[i]; /* the cluster writes y (clu 2: y[0] = y[1], the GLU) */
        else if (sl.KS > 1 || glu) {
            sl.out = (float *)((unsigned char *)part + off);
            off += (sizeof(float) * sl.KS * ne + 255) & ~(size_t)255;
            const int k = glu ? i : r.n;
            r.y[k] = y[i]; r.part[k] = sl.out; r.KS[k] = sl.KS;
            if (!glu) { r.e0[r.n + 1] = r.e0[r.n] + ne; r.n++; }
        } else sl.out = y[i];
    }
    if (kind == 8) {
        using P = wgsm<BITS, NP>;
        static int attr;
        if (!attr) {
            cudaCheck(cudaFuncSetAttribute(wgm_multi_kern<BITS, NP, SBT>(), cudaFuncAttributeMaxDynamicSharedMemorySize, P::BUDGET));
            attr = 1;
        }
        a.hslab |= wg_pdl() << 3; /* bit 11 of wgm_body's C */
        if (a.clu) {
            a.gelu = gelu; a.y16 = y16;
            wg_launch_cl(c, wgm_multi_kern<BITS, NP, SBT>(), blk, 288, smem, a.clu == 2 ? 2 * a.s[0].KS : a.s[0].KS, wg_pdl() != 0, xg, inv, T, a);
        } else
            wg_launch_cl(c, wgm_multi_kern<BITS, NP, SBT>(), blk, 288, smem, 1, wg_pdl() != 0, xg, inv, T, a);
    } else if constexpr (BITS == 8 && NP <= 64) { /* kind 2 or 3 */
        using P = wgs<BITS, NP>;
        static int attr;
        if (!attr) {
            cudaCheck(cudaFuncSetAttribute(wg2_multi_kernel<BITS, NP, SBT>, cudaFuncAttributeMaxDynamicSharedMemorySize, P::SMEM));
            attr = 1;
        }
        if (a.clu) wg_launch_cl(c, wg2_multi_kernel<BITS, NP, SBT>, blk, 256, P::SMEM, a.s[0].KS, false, xg, inv, T, a, (int)(kind == 3));
        else wg2_multi_kernel<BITS, NP, SBT><<<blk, 256, P::SMEM, c->stream>>>(xg, inv, T, a, kind == 3);
    }
    cudaLaunchCheck();
    if (a.clu) return true; /* summed (and the GLU applied) in the clusters */
    if (glu) {
        r.n = 1; r.e0[1] = (size_t)T * w[0]->rows; r.glu = 1; r.gelu = gelu; r.y16 = y16;
    }
    if (r.n) {
        const size_t tot = r.e0[r.n];
        wg_launch_cl(c, wg_reduce_multi_kernel, dim3(cdiv(tot, 256) < 4096 ? cdiv(tot, 256) : 4096), 256, 0, 1, wg_pdl() != 0, r);
    }
    return true;
}
template <int NP>
static bool wg_multi_pick(cuda_impl_t *c, int kind, int n, float *const *y, const unsigned char *xg, const float *inv, float *part, int T,
                          const dweight_t *const *w, int glu, int gelu, __nv_bfloat16 *y16) {
    const int sbt = w[0]->sb_dtype == DT_F16 ? 0 : w[0]->sb_dtype == DT_BF16 ? 1 : 2;
#define WG_MR(B, S) wg_multi_run<B, NP, S>(c, kind, n, y, xg, inv, part, T, w, glu, gelu, y16)
    if (w[0]->bits == 4) return sbt == 0 ? WG_MR(4, 0) : sbt == 1 ? WG_MR(4, 1) : WG_MR(4, 2); /* kind 8 */
    if (w[0]->bits == 8) return sbt == 0 ? WG_MR(8, 0) : sbt == 1 ? WG_MR(8, 1) : WG_MR(8, 2);
#undef WG_MR
    return false;
}

/* x prepared once, then the multi launch (kind != 0) or a launch per weight; glu: the multi launch
 * only (false: declined, nothing launched) */
template <int NP>
static bool wg_run(cuda_impl_t *c, int n, float *const *y, const float *x, int T, const dweight_t *const *w, int kind, int glu, int gelu,
                   __nv_bfloat16 *y16) {
    const int K = w[0]->cols;
    size_t pbytes = 0;
    if (kind) pbytes = wg_multi_part(c, n, w, T, glu);
    else
        for (int i = 0; i < n; i++) {
            const int KS = wg_ks(c, w[i]);
            const size_t b = KS > 1 ? sizeof(float) * (size_t)KS * T * w[i]->rows : 0;
            if (b > pbytes) pbytes = b;
        }
    const size_t xbytes = wgx_xbytes(K, NP), ibytes = NP * 4 > 256 ? NP * 4 : 256; /* 256: wgx.cuh's layout for NP ≤ 64 */
    unsigned char *scr = (unsigned char *)cuda_scratch(c, (void **)&c->qpart, &c->qpart_bytes, xbytes + ibytes + pbytes);
    float *inv = (float *)(scr + xbytes), *part = (float *)(scr + xbytes + ibytes);
    /* x prepared by the norm that wrote it (wgx.cuh): its buffer instead of this launch's preparation */
    /* (not the 128-token tile: the norms prepare x for 16..64-token buckets only) */
    if constexpr (NP >= 16 && NP <= 64) cuda_wgx_note(c, K, NP);
    const unsigned char *pre = NP >= 16 && NP <= 64 ? cuda_wgx_get(c, x, T, K, NP) : nullptr;
    if (pre) {
        scr = (unsigned char *)pre;
        inv = (float *)(scr + xbytes);
    } else
        wg_launch_cl(c, wg_xprep_kernel, dim3(NP, cdiv(K, 2048)), 256, 0, 1, wg_pdl() != 0, (__half *)scr, inv, x, T, K, NP);
    if constexpr (NP >= 16) { /* the 128-token tile: kind 0 (a launch per weight) with KILN_CUDA_QWG128_MULTI=0 */
        if (kind) return wg_multi_pick<NP>(c, kind, n, y, scr, inv, part, T, w, glu, gelu, y16);
    }
    for (int i = 0; i < n; i++) { /* one weight alone may defer its split sums (its partials are the only ones in part) */
        if (w[i]->bits == 4) wg_launch<4, NP>(c, y[i], scr, inv, part, T, w[i], n == 1 && NP <= 64);
        else wg_launch<8, NP>(c, y[i], scr, inv, part, T, w[i], n == 1 && NP <= 64);
    }
    return true;
}

/* KILN_CUDA_QWG=N: the fewest tokens that take this kernel (default 2: every 2..64-token step. Session 8
 * had qmma_kernel as fast per matmul at 2..8 tokens and set 9; by session 45 this kernel had moved on and
 * the engine's 2..8-row decode steps ran 1.1-1.8x faster on it — llama-3-8b q4 c=8 980 -> 1729 tok/s
 * steady on an H100, bench/cuda/RESULTS.md; 9: the old split; 0: never, matmul_qmma.cu for all, A/B).
 * KILN_CUDA_QWG_DESC=swap: the descriptor's two offsets exchanged (a layout probe). Read once. */
static int wg_min_t(void) {
    static int v = -1;
    if (v < 0) { const char *e = getenv("KILN_CUDA_QWG"); v = e ? atoi(e) : 2; if (v <= 0) v = 1 << 30; }
    return v;
}

int cuda_qwg_s16(void) {
    static int v = -1;
    if (v < 0) { const char *e = getenv("KILN_CUDA_QWG_S16"); v = !(e && *e && atoi(e) == 0); }
    return v;
}

static int wg_ok(const float *x, int T, const dweight_t *w) {
    if (T < wg_min_t() || T > 64 || w->dtype != DT_U32 || (w->bits != 4 && w->bits != 8) || w->cols % WG_KC ||
        !(w->group == 32 || w->group % 64 == 0) || ((uintptr_t)x & 15) || ((uintptr_t)w->data & 15))
        return 0;
    return !(((uintptr_t)w->scales & (w->sb_dtype == DT_F32 ? 3 : 1)) || ((uintptr_t)w->biases & (w->sb_dtype == DT_F32 ? 3 : 1)));
}

/* KILN_CUDA_QWG_128 (read per call; default 1, 0: off): MLX 4/8-bit matmuls (and matmul_multi: a launch per
 * weight after one x preparation) of 65..128 tokens through the 128-token tile (wgm128_kernel: v8 with 64
 * accumulators a thread, one block a SM), each weight converted once for all of them instead of once per
 * 64-token slice. Per token bitwise the 64-token launches' (the same splits KS, chunk order and 2^e_t; each
 * output one B column's dot products: test_qwg_128). H200, session 30: prefill +11..+17 % over the 64-token
 * slices at 65..128 tokens on llama-3-8b q4, +8..+29 % on qwen3-0.6b q4, a 128-row decode step's steady rate
 * +18 % (bench/cuda/RESULTS.md). A weight it declines (groups other than 32/64/128, the A/B switches of v8
 * set) takes matmul.cu's other paths: at 65..128 tokens the dequantizing one. */
int cuda_qwg128_on(void) {
    const char *e = getenv("KILN_CUDA_QWG_128");
    return !(e && atoi(e) == 0);
}
/* KILN_CUDA_QWG128_MULTI (read per call; default 1 since session 31, 0: off): the tile's matmul_multi and
 * matmul_glu as one launch over all weights (wgm128_multi_kernel) and one split reduce with the GLU in it, as the
 * 64-token multi launch — instead of a launch and a reduce per weight and glu_kernel (a 128-token llama-3-8b layer:
 * 19 launches → 12). Each output bitwise the per-weight launches' (test_qwg_128 runs its multi / GLU checks both
 * ways; logits md5-identical on three synth checkpoints). H200, session 31 (call_s30h.sh): prefill at 65..128
 * tokens llama-3-8b q4 +3..+5 %, qwen3-0.6b q4 +14..+19 %, qwen3.5-2b q4 +4..+6 %; c=128 steady +3 %. */
static int cuda_qwg128_multi_on(void) {
    const char *e = getenv("KILN_CUDA_QWG128_MULTI");
    return !(e && atoi(e) == 0);
}
/* the 128-token tile takes this weight at T tokens: wg_ok's conditions, the v8 path's read-once defaults and
 * its ring (≥ 4 stages at the 128-token stage size) */
static bool wg128_ok(cuda_impl_t *c, const float *x, int T, const dweight_t *w) {
    if (T > 128 || !cuda_qwg128_on() || !wg_ok(x, 64, w)) return false;
    const int fixed = wg_fixed_defaults();
    const char *ve = getenv("KILN_CUDA_QWG_V"), *pe = getenv("KILN_CUDA_QWG_PROBE");
    const char *mc = getenv("KILN_CUDA_QWG_MC");
    if (!fixed || (ve && atoi(ve) != 8) || (pe && atoi(pe) == 1) || (mc && atoi(mc) >= 2) || !(w->group == 32 || w->group == 64 || w->group == 128))
        return false;
    return w->bits == 4 ? wgm_fits<4>(c, w, 128) : wgm_fits<8>(c, w, 128);
}

/* n weights of one x (q/k/v, gate/up; n = 1: one matmul): 0 when all suit the kernel (MLX
 * 4/8-bit, KILN_CUDA_QWG ≤ T ≤ 64, K % 64 == 0, groups of 32 or a multiple of 64 columns, x and
 * the codes 16-byte aligned, one K) and they were launched — x converted once, from 9 tokens the
 * multi launch where it applies (wg_multi_kind), each y bitwise what its own matmul gives; -1
 * otherwise (the caller takes matmul_qmma.cu). */
int cuda_qwg_multi(cuda_impl_t *c, int n, float *const *y, const float *x, int T, const dweight_t *const *w) {
    if (T > 64) { /* 65..128 tokens: the 128-token tile, where it is on and takes every weight */
        for (int i = 0; i < n; i++)
            if (!wg128_ok(c, x, T, w[i]) || w[i]->cols != w[0]->cols) return -1;
        wg_run<128>(c, n, y, x, T, w, cuda_qwg128_multi_on() ? wg_multi_kind(c, n, w, T) : 0, 0, 0, NULL);
        return 0;
    }
    for (int i = 0; i < n; i++)
        if (!wg_ok(x, T, w[i]) || w[i]->cols != w[0]->cols) return -1;
    /* 2..8 tokens: the 16-token bucket's multi launch (cuda_qwg_s16, the default: +10..13 % llama-3-8b q4 at 3..8 rows,
     * +30..34 % qwen3-0.6b q4; bench/cuda/RESULTS.md session 47), or (KILN_CUDA_QWG_S16=0) a launch per weight in the
     * 8-token bucket */
    const int kind = T > 8 || cuda_qwg_s16() ? wg_multi_kind(c, n, w, T) : 0;
    if (T <= 8 && !cuda_qwg_s16()) wg_run<8>(c, n, y, x, T, w, 0, 0, 0, NULL);
    else if (T <= 16) wg_run<16>(c, n, y, x, T, w, kind, 0, 0, NULL);
    else if (T <= 32) wg_run<32>(c, n, y, x, T, w, kind, 0, 0, NULL);
    else wg_run<64>(c, n, y, x, T, w, kind, 0, 0, NULL);
    return 0;
}

/* matmul_glu's gate/up (wg, wu: one shape) as one multi launch with the GLU in its reduce: 1 where it
 * would run (cuda_qwg_glu then does; nothing launched here) */
int cuda_qwg_glu_ok(cuda_impl_t *c, const float *x, int T, const dweight_t *wg, const dweight_t *wu) {
    const dweight_t *w[2] = {wg, wu};
    /* 65..128 tokens: the 128-token tile's multi launch (KILN_CUDA_QWG128_MULTI=0: off) */
    const bool takes = T > 64 ? T <= 128 && cuda_qwg128_multi_on() && wg128_ok(c, x, T, wg) && wg128_ok(c, x, T, wu)
                              : (T > 8 || cuda_qwg_s16()) && wg_ok(x, T, wg) && wg_ok(x, T, wu);
    return takes && wg->cols == wu->cols && wg->rows == wu->rows && wg_multi_kind(c, 2, w, T) != 0;
}
/* y[T, I] = act(x·wgᵀ) ⊙ (x·wuᵀ), bitwise cuda_qwg_multi into g and u then glu_kernel (y16: bf16(y) as
 * glu_x16_kernel writes it, NULL: not); -1 where it declines (nothing launched) */
int cuda_qwg_glu(cuda_impl_t *c, float *y, const float *x, int T, const dweight_t *wg, const dweight_t *wu, int gelu, __nv_bfloat16 *y16) {
    if (!cuda_qwg_glu_ok(c, x, T, wg, wu)) return -1;
    const dweight_t *w[2] = {wg, wu};
    float *const yy[2] = {y, y};
    const int kind = wg_multi_kind(c, 2, w, T);
    bool ok;
    if (T <= 16) ok = wg_run<16>(c, 2, yy, x, T, w, kind, 1, gelu, y16);
    else if (T <= 32) ok = wg_run<32>(c, 2, yy, x, T, w, kind, 1, gelu, y16);
    else if (T <= 64) ok = wg_run<64>(c, 2, yy, x, T, w, kind, 1, gelu, y16);
    else ok = wg_run<128>(c, 2, yy, x, T, w, kind, 1, gelu, y16);
    return ok ? 0 : -1;
}

int cuda_qwg(cuda_impl_t *c, float *y, const float *x, int T, const dweight_t *w) { return cuda_qwg_multi(c, 1, &y, x, T, &w); }
