/* attention_wgmma.cu — prefill attention on Hopper's warpgroup MMA (wgmma.mma_async m64n64k16,
 * f32 accumulation) over the paged f16/bf16 KV cache: the FlashAttention-3 shape of
 * attention_mma.cu's kernel, for head_dim 64 and 128 with Q and P rounded once.
 *
 * Why: attention_mma.cu (mma.sync m16n8k16, 16 query vectors a warp) re-reads every K and V
 * tile from shared memory once per warp through ldmatrix — 64 ldmatrix.x4 per 128 MMAs — and
 * ran at ~118 TFLOP/s on the H200 (qwen3-0.6b, 2048 tokens: 143-149 us a layer). A wgmma reads
 * its B operand from shared memory once for 64 query rows, without registers in between.
 *
 * Same contract as attention_mma.cu (ref_attention: per token and head, softmax over the row's
 * cached positions [lo, pos] of q·k·scale, optionally cap·tanh(s/cap), weighted sum of V;
 * GQA heads of one KV head as query vectors, sliding window, soft-cap, the bf16 copy of the
 * output for the o projection). Only the single-rounding form: Q·scale and P rounded once to
 * the cache's 16-bit type (the precision policy's default for llama/qwen3); the split hi/lo
 * form stays on attention_mma.cu.
 *
 *  - A block = NWG consumer warpgroups (64 query vectors each: a tile of a row's consecutive
 *    tokens × the query heads of the GQA group, query qi = token qi / heads × head qi % heads)
 *    + PW producer warps (1, 2 or 4; a launch-time choice: blockDim). The producers gather K
 *    and V of 64 positions at a time through the block table with cp.async (16 bytes a copy,
 *    zeros past the key range) into an NS-stage ring; after its copies of a stage complete
 *    (cp.async.wait_group, LAG stages behind the newest) each producer thread fences them to
 *    the async proxy and arrives on the stage's `full` mbarrier (PW·32 arrivals); consumer
 *    warps arrive on `empty` when their warpgroup's wgmmas have read it.
 *  - Shared memory in the 128-byte-swizzle layout wgmma reads: a tile of R rows × HD columns is
 *    HD/64 column blocks of R rows × 128 bytes; the 16-byte chunk c of row r sits at chunk
 *    c ^ (r % 8) (conflict-free cp.async writes of a row's chunks and conflict-free wgmma
 *    reads). Q (K-major A), K (K-major B) and V (MN-major B, the transpose bit) all use it;
 *    the descriptor's start address steps 32 bytes per k16 within a 128-byte row.
 *  - S = Q·Kᵀ: HD/16 wgmmas m64n64k16 (A = the warpgroup's Q·scale in shared memory, written
 *    once by its threads). Online softmax in base 2 on the accumulator (each thread holds two
 *    rows, lane/4 and lane/4 + 8 of its warp's 16, and 16 keys of each); masks only where a
 *    tile crosses a row's window start, its own position or the key range's end. P = exp2 of
 *    the shifted scores, rounded once, goes to the A registers of O += P·V directly (the
 *    accumulator layout of two n8 blocks is the A fragment of one k16: no shared memory), B =
 *    V; HD/64 wgmmas n64 per k16.
 *  - A warpgroup skips the MMAs of a tile outside all its rows' ranges (the causal diagonal of
 *    the earlier rows of a block) but still takes part in the ring.
 *  - Two loops: one tile at a time (S, wait, softmax, P·V, wait), or PIPE (FA3's overlap in a
 *    warpgroup: S of tile j issued with P·V of tile j-1 behind it, the softmax of j while that
 *    runs). The A operand of an issued P·V is read until its wait: P of tile j is packed into
 *    the A registers only after that wait (helper-h96's first form packed it before, nvcc
 *    gave both tiles' P the same registers, and the softmax overwrote the operand of an
 *    in-flight wgmma: rel err 0.05-0.17, 32 on a window + soft-cap case; helper-h98 found it
 *    in the PTX, with a dataflow check of in-flight wgmma registers).
 *  - On by default for head_dim 128: 3 consumer warpgroups, 4 producer warps, one tile at a
 *    time (KILN_CUDA_FA_WG=0: attention_mma.cu for every step; =1/2/3: that many warpgroups,
 *    head_dim 64 too; KILN_CUDA_FA_WG_PIPE=1 the overlapped loop (not with 3 warpgroups: 128
 *    registers); KILN_CUDA_FA_WG_PW=1/2/4 producer warps). Steps with too few blocks to fill
 *    the GPU fall to attention_mma.cu (smaller tiles), as do head_dim 32 and the split form.
 *    Diagnosis only: KILN_CUDA_FA_WG_DBG (one-tile loop, 1-2 warpgroups): bit 0 does O += P·V,
 *    bit 1 S = Q·Kᵀ by mma.sync + ldmatrix on the same tiles; KILN_CUDA_FA_WG_FIX (see fa_wg).
 * Cost (H200, ncu, qwen3-0.6b bf16 at 2048 tokens, f16 cache; bench/cuda/RESULTS.md session
 * 16, helper-h98): 88-94 us a layer against attention_mma.cu's 141-148 (llama-3-8b shapes:
 * 144-145 against 231-234). The producers' gathers bound it: 3 warpgroups with 2 → 4 producer
 * warps 102-109 → 88-94 us; 2 warpgroups 1 → 2 → 4 (overlapped loop) 171-177 → 128-130 →
 * 106-114. The overlapped loop is slower than one tile at a time (133-137 against 99-101 us,
 * 2 warpgroups), and the grid is 1.33 waves of one block an SM (tensor pipe 21 % busy), so
 * the longest (causal) block sets the time: splitting long key ranges across blocks, or TMA
 * page gathers, are what is left.
 * Precision: K and V exact, Q·scale and P one rounding each (11 significant bits with the
 * f16 cache, 8 with bf16), f32 sums in another order than attention_mma.cu: not bitwise to it;
 * the single-rounding tolerance of test_attention_mma (1e-2 of max |ref|; worst 1.8e-3). */
#include <math.h>
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/mma_util.cuh"
#include "backend/cuda/wgmma_util.cuh"
#include "backend/cuda/fa_args.cuh" /* fa_dev_t, fa_args_fill */

/* attention_mma.cu's arguments (fa_args.cuh), then the diagnosis switches */
typedef struct fa_wg {
    FA_ARGS_FIELDS
    int dbg; /* KILN_CUDA_FA_WG_DBG (diagnosis, one-tile loop only): bit 0: O += P·V by mma.sync, bit 1: S by mma.sync */
    int fix; /* KILN_CUDA_FA_WG_FIX (diagnosis): bit 0: consumers fence.proxy.async after each full wait; bit 1: the
              * producer completes each tile before the next (no LAG); bit 2: a warpgroup barrier after each full
              * wait and before each release */
} fa_wg_t;

/* a 128-byte-swizzle descriptor: start address, LBO, SBO (bytes), swizzle mode 1 (128 B). For
 * the K-major operands (Q, K) LBO is unused; for V (MN-major, one 64-column block per wgmma)
 * the 8-row groups of K sit 1024 bytes apart and there is no second column block: both
 * offsets are 1024 so the pair's order does not matter. */
__device__ __forceinline__ uint64_t fw_desc(uint32_t saddr) {
    return (uint64_t)((saddr & 0x3FFFF) >> 4) | ((uint64_t)(1024 >> 4) << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}
/* byte offset of 16-byte chunk ch (of HD/8) of row r in a tile of `rows` rows */
__device__ __forceinline__ uint32_t fw_off(int r, int ch, int rows) {
    return (uint32_t)((ch >> 3) * rows * 128 + r * 128 + (((ch & 7) ^ (r & 7)) << 4));
}

__device__ __forceinline__ void fw_ldsm(uint32_t *r, const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"((unsigned)__cvta_generic_to_shared(p)));
}
__device__ __forceinline__ void fw_ldsm_t(uint32_t *r, const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"((unsigned)__cvta_generic_to_shared(p)));
}

template <typename T16> struct fw_ops;
#define FW_D32 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}"
#define FW_O32(d)                                                                                                                          \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), \
        "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), \
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), \
        "+f"(d[31])
/* ss: d (= or +=, by acc) A·B with A and B in shared memory, both K-major;
 * rs: d += A·B with A in registers and B MN-major (transposed) in shared memory */
#define FW_OPS(T, TY)                                                                                                                       \
    template <> struct fw_ops<T> {                                                                                                          \
        static __device__ __forceinline__ void ss(float (&d)[32], uint64_t da, uint64_t db, int acc) {                                       \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                                      \
                         "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " " FW_D32 ", %32, %33, p, 1, 1, 0, 0;\n}\n"              \
                         : FW_O32(d)                                                                                                        \
                         : "l"(da), "l"(db), "r"(acc));                                                                                    \
        }                                                                                                                                   \
        static __device__ __forceinline__ void rs(float (&d)[32], const uint32_t (&a)[4], uint64_t db) {                                    \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                                                      \
                         "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " " FW_D32 ", {%32,%33,%34,%35}, %36, p, 1, 1, 1;\n}\n"  \
                         : FW_O32(d)                                                                                                        \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));                                                   \
        }                                                                                                                                   \
    };
FW_OPS(__half, "f16")
FW_OPS(__nv_bfloat16, "bf16")
#undef FW_OPS

template <int HD, int NWG> struct fw_cfg {
    static constexpr int NS = NWG == 1 ? 3 : 4;  /* ring stages (NWG = 1: two blocks an SM share the 227 KB) */
    static constexpr int LAG = NS - 1;           /* tiles in flight per producer lane before it waits */
    static constexpr int TILE = 64 * HD * 2;     /* bytes of a K or a V tile */
    static constexpr int QB = 64 * HD * 2;       /* bytes of one warpgroup's Q */
    static constexpr int SMEM = 1024 + NWG * QB + NS * 2 * TILE; /* + 1 KB to align to the swizzle's 1024-byte atoms */
    static constexpr int MAXT = 128 * NWG + 128; /* + 1, 2 or 4 producer warps (KILN_CUDA_FA_WG_PW, a launch-time choice) */
};

template <int HD, typename T16, int NWG, bool PIPE>
__global__ void __launch_bounds__(fw_cfg<HD, NWG>::MAXT, 1) attn_wg_kernel(fa_wg_t a) {
    using C = fw_cfg<HD, NWG>;
    constexpr int NS = C::NS, LAG = C::LAG, CPR = HD / 8, NB = HD / 64;
    extern __shared__ unsigned char fw_raw[];
    __shared__ __align__(8) uint64_t mbar[2 * NS];
    const uint32_t s_raw = (unsigned)__cvta_generic_to_shared(fw_raw);
    unsigned char *sm = fw_raw + ((1024 - (s_raw & 1023)) & 1023); /* the swizzle's 1024-byte atoms */
    const uint32_t s_q = (unsigned)__cvta_generic_to_shared(sm), s_kv = s_q + NWG * C::QB;
    const uint32_t full = (unsigned)__cvta_generic_to_shared(mbar), empty = full + 8 * NS;
    /* the warp index through a shuffle: provably warp-uniform, so the role branch is not a
     * divergent path for the wgmmas (else ptxas serializes them) */
    const int tid = threadIdx.x, lane = tid & 31, warp = __shfl_sync(0xffffffffu, tid >> 5, 0);

    const int tile_i = a.n_tiles - 1 - blockIdx.x; /* longest key ranges first (causal prefill) */
    const int kvh = blockIdx.y / a.n_chunks, chunk = blockIdx.y % a.n_chunks;
    const attn_tile_t tile = a.tiles[tile_i];
    const int h0 = kvh * a.group + chunk * a.hc;
    const int nh_here = min(a.hc, a.group - chunk * a.hc);
    const int nq = tile.n * nh_here;
    const int *bt = a.tables + (size_t)tile.row * a.max_blocks;
    const int p_first = a.pos[tile.t0], p_last = a.pos[tile.t0 + tile.n - 1];
    const int kv_lo = a.window > 0 ? max(0, p_first - a.window + 1) : 0, kv_hi = p_last + 1;
    const int nkt = (kv_hi - kv_lo + 63) / 64;

    const int npw = (int)(blockDim.x >> 5) - 4 * NWG, PT = 32 * npw; /* producer warps, threads */
    if (tid == 0) {
        for (int i = 0; i < NS; i++) {
            mb_init_n(full + 8 * i, PT);        /* every producer thread */
            mb_init_n(empty + 8 * i, 4 * NWG); /* one per consumer warp */
        }
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    __syncthreads();

    if (warp >= 4 * NWG) { /* the producer warps: PT threads share each tile's 2 × 64 × HD/8 copies */
        const size_t per_tok = (size_t)a.n_kv_heads * HD;
        const unsigned short *kg = (const unsigned short *)a.k + (size_t)kvh * HD, *vg = (const unsigned short *)a.v + (size_t)kvh * HD;
        for (int it = 0; it < nkt; it++) {
            const int s = it % NS, j0 = kv_lo + 64 * it, nk = min(64, kv_hi - j0);
            if (it >= NS) mb_wait(empty + 8 * s, ((it / NS) - 1) & 1);
            /* the cache slots of keys lane and lane + 32 (clamped into the range; copies past it write zeros) */
            const int k0 = j0 + min(lane, nk - 1), k1 = j0 + min(lane + 32, nk - 1);
            const int sl0 = bt[k0 / a.block_size] * a.block_size + k0 % a.block_size;
            const int sl1 = bt[k1 / a.block_size] * a.block_size + k1 % a.block_size;
            const uint32_t ks = s_kv + s * 2 * C::TILE, vs = ks + C::TILE;
            /* a warp's 32 copies: chunks ib..ib+31 (2-4 keys, all below or all from key 32) */
#pragma unroll 4
            for (int ib = 32 * (warp - 4 * NWG); ib < 64 * CPR; ib += PT) {
                const int i = ib + lane, kk = i / CPR, ch = i % CPR;
                const int slot = __shfl_sync(0xffffffffu, ib < 32 * CPR ? sl0 : sl1, kk & 31);
                const size_t off = (size_t)slot * per_tok + ch * 8;
                const int bytes = kk < nk ? 16 : 0;
                const uint32_t o = fw_off(kk, ch, 64);
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(ks + o), "l"(kg + off), "r"(bytes));
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(vs + o), "l"(vg + off), "r"(bytes));
            }
            cp_commit();
            if (a.fix & 2) {
                cp_wait<0>();
                wg_proxy_fence();
                mb_arrive(full + 8 * s);
            } else if (it >= LAG - 1) {
                cp_wait<LAG - 1>();
                wg_proxy_fence();
                mb_arrive(full + 8 * ((it - LAG + 1) % NS));
            }
        }
        if (!(a.fix & 2)) {
            cp_wait<0>();
            wg_proxy_fence();
            for (int it = max(0, nkt - LAG + 1); it < nkt; it++) mb_arrive(full + 8 * (it % NS));
        }
        return;
    }

    /* consumers: warpgroup wg, its warp wl; this thread's rows r (of the warpgroup's 64) */
    const int wg = warp >> 2, wl = warp & 3, g = lane >> 2, c4 = lane & 3, tw = tid & 127;
    const uint32_t qs = s_q + wg * C::QB;
    /* Q·scale rounded once, swizzled (rows past nq: zeros) */
    {
        unsigned char *qd = sm + wg * C::QB;
        for (int i = tw; i < 64 * CPR; i += 128) {
            const int r = i / CPR, ch = i % CPR, qi = wg * 64 + r;
            uint4 w = make_uint4(0, 0, 0, 0);
            if (qi < nq) {
                const int t = tile.t0 + qi / nh_here, hh = h0 + qi % nh_here;
                const float4 *src = (const float4 *)(a.q + ((size_t)t * a.n_heads + hh) * HD + ch * 8);
                const float4 x0 = src[0], x1 = src[1];
                w.x = mma16_t<T16>::pack(x0.x * a.scale, x0.y * a.scale);
                w.y = mma16_t<T16>::pack(x0.z * a.scale, x0.w * a.scale);
                w.z = mma16_t<T16>::pack(x1.x * a.scale, x1.y * a.scale);
                w.w = mma16_t<T16>::pack(x1.z * a.scale, x1.w * a.scale);
            }
            *(uint4 *)(qd + fw_off(r, ch, 64)) = w;
        }
        wg_proxy_fence();
        asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
    }
    /* this thread's two rows: position, window start (an unused row: every key masked) */
    int pq[2], lq[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int qi = wg * 64 + wl * 16 + g + 8 * h;
        const int t = tile.t0 + (qi < nq ? qi / nh_here : 0);
        pq[h] = qi < nq ? a.pos[t] : -1;
        lq[h] = a.window > 0 ? max(0, a.pos[t] - a.window + 1) : 0;
    }
    /* the warpgroup's key range: a tile outside it is skipped (its MMAs only; the ring goes on) */
    const int wq0 = wg * 64, wq1 = min(nq, wq0 + 64) - 1;
    const int wpmax = wq1 >= wq0 ? a.pos[tile.t0 + wq1 / nh_here] : -1;
    const int wlmin = a.window > 0 && wq1 >= wq0 ? max(0, a.pos[tile.t0 + wq0 / nh_here] - a.window + 1) : 0;
    const int pqmin = min(pq[0], pq[1]), lqmax = max(lq[0], lq[1]);

    float o[NB][32], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
#pragma unroll
    for (int b = 0; b < NB; b++)
#pragma unroll
        for (int i = 0; i < 32; i++) o[b][i] = 0.f;
    const float LOG2E = 1.4426950408889634f;

    /* S = Q·Kᵀ of stage st into sc (issued and committed; not waited for) */
    auto issue_s = [&](float (&sc)[32], int st) {
        const uint32_t ks = s_kv + st * 2 * C::TILE;
#pragma unroll
        for (int kq = 0; kq < HD / 16; kq++) {
            const uint32_t ob = (kq >> 2) * 64 * 128 + (kq & 3) * 32;
            fw_ops<T16>::ss(sc, fw_desc(qs + ob), fw_desc(ks + ob), kq);
        }
        wg_commit();
    };
    /* O += P·V of stage st (issued and committed) */
    auto issue_pv = [&](const uint32_t (&pa)[4][4], int st) {
        const uint32_t vs = s_kv + st * 2 * C::TILE + C::TILE;
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
#pragma unroll
            for (int b = 0; b < NB; b++) fw_ops<T16>::rs(o[b], pa[kk], fw_desc(vs + b * 64 * 128 + kk * 16 * 128));
        wg_commit();
    };
    auto fence_o = [&]() {
#pragma unroll
        for (int b = 0; b < NB; b++)
#pragma unroll
            for (int i = 0; i < 32; i++) wg_reg_fence(o[b][i]);
    };
    /* soft-cap, mask where the tile crosses a range edge, the running max and sum; sc becomes
     * P = exp2(s·log2 e − m) (f32; pack_p rounds it once into the A fragments); corr: the factor for O */
    auto softmax = [&](float (&sc)[32], int j0, float (&corr)[2]) {
        const bool whole = j0 + 64 <= kv_hi && j0 >= lqmax && j0 + 63 <= pqmin;
        float mt[2] = {-INFINITY, -INFINITY};
        if (a.softcap > 0.f) /* one test a tile, not one a score */
#pragma unroll
            for (int i = 0; i < 32; i++) sc[i] = a.softcap * tanhf(sc[i] / a.softcap);
        if (!whole)
#pragma unroll
            for (int i = 0; i < 32; i++) {
                const int h = (i >> 1) & 1, kp = j0 + (i >> 2) * 8 + 2 * c4 + (i & 1);
                sc[i] = kp < kv_hi && kp >= lq[h] && kp <= pq[h] ? sc[i] : -INFINITY;
            }
#pragma unroll
        for (int i = 0; i < 32; i++) mt[(i >> 1) & 1] = fmaxf(mt[(i >> 1) & 1], sc[i]);
        float mu[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            mt[h] = fmaxf(mt[h], __shfl_xor_sync(0xffffffffu, mt[h], 1));
            mt[h] = fmaxf(mt[h], __shfl_xor_sync(0xffffffffu, mt[h], 2));
            const float mn = fmaxf(m[h], mt[h]);
            mu[h] = (mn == -INFINITY ? 0.f : mn) * LOG2E; /* nothing valid yet: exp2(-inf - 0) = 0 */
            corr[h] = exp2f(fmaf(m[h], LOG2E, -mu[h]));
            m[h] = mn;
            l[h] *= corr[h];
        }
#pragma unroll
        for (int i = 0; i < 32; i += 2) {
            const int h = (i >> 1) & 1;
            sc[i] = exp2f(fmaf(sc[i], LOG2E, -mu[h]));
            sc[i + 1] = exp2f(fmaf(sc[i + 1], LOG2E, -mu[h]));
            l[h] += sc[i] + sc[i + 1];
        }
    };
    /* P as the A fragments of four k16 steps: accumulator n8 blocks 2kk and 2kk+1 are k16 step kk */
    auto pack_p = [&](const float (&sc)[32], uint32_t (&pa)[4][4]) {
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const int i = 8 * kk + 4 * (r >> 1) + 2 * (r & 1);
                pa[kk][r] = mma16_t<T16>::pack(sc[i], sc[i + 1]);
            }
    };
    auto rescale = [&](const float (&corr)[2]) {
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int b = 0; b < NB; b++)
#pragma unroll
                for (int i = 0; i < 32; i += 4) { o[b][i + 2 * h] *= corr[h]; o[b][i + 2 * h + 1] *= corr[h]; }
    };
    /* The A fragments of an issued O += P·V are read by the tensor cores until its wait. In
     * helper-h96's first form the pipelined loop packed tile j's P while tile j-1's P·V ran,
     * and nvcc gave both the same PTX registers: the softmax overwrote the A operand of an
     * in-flight wgmma (rel err 0.05-0.17; 32 where a row's earlier tile held few valid keys).
     * Now P is packed only after that wait (as FA3 does), and this empty asm "uses" pp after it
     * as well (CUTLASS's warpgroup_fence_operand), so no compiler may reuse those registers early. */
    auto fence_p = [&](uint32_t (&pr)[4][4]) {
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
#pragma unroll
            for (int r = 0; r < 4; r++) asm volatile("" : "+r"(pr[kk][r])::"memory");
    };
    auto wait_full = [&](int st, int par) {
        mb_wait(full + 8 * st, par);
        if (a.fix & 4) asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
        if (a.fix & 1) wg_proxy_fence();
    };
    auto release = [&](int st) {
        if (a.fix & 4) asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
        __syncwarp();
        if (lane == 0) mb_arrive(empty + 8 * st);
    };

    if (!PIPE) {
        /* one tile at a time: S, wait, softmax, O += P·V, wait */
        for (int it = 0; it < nkt; it++) {
            const int s = it % NS, j0 = kv_lo + 64 * it;
            wait_full(s, (it / NS) & 1);
            if (j0 <= wpmax && j0 + 63 >= wlmin) { /* uniform over the warpgroup */
                float sc[32], corr[2];
                uint32_t pa[4][4];
                constexpr bool DBG = NWG < 3; /* the diagnosis paths cost registers: not in the 3-warpgroup kernel */
                if (DBG && (a.dbg & 2)) { /* S by mma.sync: Q and K fragments by ldmatrix from the swizzled tiles */
                    const unsigned char *kt = sm + (s_kv - s_q) + s * 2 * C::TILE;
                    const unsigned char *qt = sm + wg * C::QB;
#pragma unroll
                    for (int i = 0; i < 32; i++) sc[i] = 0.f;
#pragma unroll
                    for (int ks = 0; ks < HD / 16; ks += 2) {
                        uint32_t qa0[4], qa1[4];
                        const int qr = wl * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
                        fw_ldsm(qa0, qt + fw_off(qr, ks * 2 + (lane >> 4), 64));
                        fw_ldsm(qa1, qt + fw_off(qr, ks * 2 + 2 + (lane >> 4), 64));
#pragma unroll
                        for (int nt = 0; nt < 8; nt++) {
                            uint32_t b[4];
                            fw_ldsm(b, kt + fw_off(nt * 8 + (lane & 7), ks * 2 + (lane >> 3), 64));
                            mma16_t<T16>::mma(&sc[4 * nt], qa0, b[0], b[1]);
                            mma16_t<T16>::mma(&sc[4 * nt], qa1, b[2], b[3]);
                        }
                    }
                } else {
                    wg_fence();
                    issue_s(sc, s);
                    wg_wait<0>();
#pragma unroll
                    for (int i = 0; i < 32; i++) wg_reg_fence(sc[i]);
                }
                softmax(sc, j0, corr);
                pack_p(sc, pa);
                rescale(corr);
                if (DBG && (a.dbg & 1)) { /* O += P·V by mma.sync: V fragments by ldmatrix.trans from the swizzled tile */
                    const unsigned char *vt = sm + (s_kv - s_q) + s * 2 * C::TILE + C::TILE;
                    const int mm = lane >> 3;
#pragma unroll
                    for (int kk = 0; kk < 4; kk++)
#pragma unroll
                        for (int dn = 0; dn < HD / 8; dn += 2) {
                            uint32_t b[4];
                            fw_ldsm_t(b, vt + fw_off(kk * 16 + (mm & 1) * 8 + (lane & 7), dn + (mm >> 1), 64));
                            mma16_t<T16>::mma(&o[dn >> 3][4 * (dn & 7)], pa[kk], b[0], b[1]);
                            mma16_t<T16>::mma(&o[(dn + 1) >> 3][4 * ((dn + 1) & 7)], pa[kk], b[2], b[3]);
                        }
                } else {
                    wg_fence();
                    issue_pv(pa, s);
                    wg_wait<0>();
                    fence_o();
                }
            }
            release(s);
        }
    } else {
        /* FA3's overlap within a warpgroup: tile j's S is issued with tile j-1's O += P·V behind
         * it; the softmax of tile j runs while that P·V does; then O is rescaled */
        uint32_t pp[4][4];
        int sp = -1; /* the stage whose P·V is pending (pp), or -1 */
        auto drain_pv = [&]() { /* the pending P·V alone, its stage released */
            if (sp < 0) return;
            wg_fence();
            issue_pv(pp, sp);
            wg_wait<0>();
            fence_o();
            release(sp);
            sp = -1;
        };
        for (int it = 0; it < nkt; it++) {
            const int s = it % NS, j0 = kv_lo + 64 * it;
            wait_full(s, (it / NS) & 1);
            if (j0 <= wpmax && j0 + 63 >= wlmin) {
                float sc[32], corr[2];
                wg_fence();
                issue_s(sc, s);
                if (sp >= 0) {
                    issue_pv(pp, sp);
                    wg_wait<1>();
                } else
                    wg_wait<0>();
#pragma unroll
                for (int i = 0; i < 32; i++) wg_reg_fence(sc[i]);
                softmax(sc, j0, corr);
                wg_wait<0>();
                fence_o();
                fence_p(pp);
                if (sp >= 0) release(sp);
                rescale(corr);
                pack_p(sc, pp); /* after tile j-1's P·V has read the old pp */
                sp = s;
            } else {
                drain_pv();
                release(s);
            }
        }
        drain_pv();
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
        const int qi = wg * 64 + wl * 16 + g + 8 * h;
        if (qi >= nq) continue;
        const int t = tile.t0 + qi / nh_here, hh = h0 + qi % nh_here;
        float *orow = a.out + ((size_t)t * a.n_heads + hh) * HD;
        const float inv = 1.0f / l[h];
#pragma unroll
        for (int b = 0; b < NB; b++)
#pragma unroll
            for (int i = 0; i < 8; i++)
                *(float2 *)(orow + b * 64 + i * 8 + 2 * c4) = make_float2(o[b][4 * i + 2 * h] * inv, o[b][4 * i + 2 * h + 1] * inv);
        if (a.out16) {
            __nv_bfloat16 *o16 = a.out16 + ((size_t)t * a.n_heads + hh) * HD;
#pragma unroll
            for (int b = 0; b < NB; b++)
#pragma unroll
                for (int i = 0; i < 8; i++)
                    *(__nv_bfloat162 *)(o16 + b * 64 + i * 8 + 2 * c4) =
                        __floats2bfloat162_rn(o[b][4 * i + 2 * h] * inv, o[b][4 * i + 2 * h + 1] * inv);
        }
    }
}

template <int HD, typename T16, int NWG, bool PIPE>
static void fw_launch(cuda_impl_t *c, const fa_wg_t &a, dim3 grid, int pw) {
    using C = fw_cfg<HD, NWG>;
    static bool set = false;
    if (!set) {
        cudaCheck(cudaFuncSetAttribute(attn_wg_kernel<HD, T16, NWG, PIPE>, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM));
        set = true;
    }
    attn_wg_kernel<HD, T16, NWG, PIPE><<<grid, 128 * NWG + 32 * pw, C::SMEM, c->stream>>>(a);
    cudaLaunchCheck();
}

/* the defaults (unset env), the fastest measured (qwen3-0.6b / llama-3-8b, 2048 tokens): 3
 * consumer warpgroups a block, one tile at a time (1-2 warpgroups: the loop without the
 * overlap too), 4 producer warps (one a scheduler) */
#define FW_NWG_DEFAULT 3
#define FW_PIPE_DEFAULT false
#define FW_PW_DEFAULT 4

extern "C" int kiln_cuda_attn_wg_calls; /* steps this kernel ran (the tests check the path ran) */
int kiln_cuda_attn_wg_calls;

/* 1 if the step ran here; 0: not for this kernel (attention_mma.cu's takes it). Called by
 * cuda_attention_mma for the single-rounding form only. */
int cuda_attention_wg(backend_t *be, float *out, const float *q, int T, const attn_args_t *aa) {
    cuda_impl_t *c = cuda_impl(be);
    const kv_view_t *kv = &aa->kv;
    const char *env = getenv("KILN_CUDA_FA_WG");
    const bool asked = env && *env;
    const int nwg = asked ? atoi(env) : FW_NWG_DEFAULT; /* =0: attention_mma.cu for every step */
    if (nwg < 1 || nwg > 3) return 0;
    if (!asked && aa->head_dim != 128) return 0; /* the default where measured (head_dim 128); 64 when asked for */
    const char *pwenv = getenv("KILN_CUDA_FA_WG_PW");
    int pw = pwenv && *pwenv ? atoi(pwenv) : FW_PW_DEFAULT;
    pw = pw >= 4 ? 4 : pw >= 2 ? 2 : 1;
    const int hd = aa->head_dim, G = aa->n_heads / aa->n_kv_heads;
    if ((kv->dtype != DT_F16 && kv->dtype != DT_BF16) || (hd != 64 && hd != 128)) return 0;
    const int FQW = 64 * nwg, hc = G < FQW ? G : FQW, n_chunks = (G + hc - 1) / hc, TQ = FQW / hc;
    attn_tiles_t tl;
    attn_tiles_count(aa, TQ, &tl);
    const char *menv = getenv("KILN_CUDA_FA_MIN");
    const int min_blocks = menv && atoi(menv) > 0 ? atoi(menv) : c->sm_count / 2;
    if (!tl.multi || tl.n_tiles * aa->n_kv_heads * n_chunks < min_blocks) return 0;
    attn_tiles_upload(c, aa, T, TQ, &tl);
    fa_wg_t a;
    fa_args_fill(a, c, q, out, T, aa, tl, hc, n_chunks);
    const char *denv = getenv("KILN_CUDA_FA_WG_DBG");
    a.dbg = denv ? atoi(denv) : 0;
    const char *fenv = getenv("KILN_CUDA_FA_WG_FIX");
    a.fix = fenv ? atoi(fenv) : 0;
    const dim3 grid(tl.n_tiles, aa->n_kv_heads * n_chunks);
    const bool f16 = kv->dtype == DT_F16;
    const char *penv = getenv("KILN_CUDA_FA_WG_PIPE");
    const bool pipe = penv && *penv ? strcmp(penv, "0") != 0 : FW_PIPE_DEFAULT; /* three warpgroups: never (128 registers) */
#define FW_GO(HD_, NWG_)                                                                        \
    do {                                                                                        \
        if (f16) pipe ? fw_launch<HD_, __half, NWG_, true>(c, a, grid, pw) : fw_launch<HD_, __half, NWG_, false>(c, a, grid, pw); \
        else pipe ? fw_launch<HD_, __nv_bfloat16, NWG_, true>(c, a, grid, pw) : fw_launch<HD_, __nv_bfloat16, NWG_, false>(c, a, grid, pw); \
    } while (0)
#define FW_NWG(HD_)                                                                             \
    do {                                                                                        \
        if (nwg == 1) FW_GO(HD_, 1);                                                            \
        else if (nwg == 2) FW_GO(HD_, 2);                                                       \
        else {                                                                                  \
            if (f16) fw_launch<HD_, __half, 3, false>(c, a, grid, pw);                              \
            else fw_launch<HD_, __nv_bfloat16, 3, false>(c, a, grid, pw);                           \
        }                                                                                       \
    } while (0)
    if (hd == 64) FW_NWG(64);
    else FW_NWG(128);
#undef FW_NWG
#undef FW_GO
    if (a.out16) cuda_x16_set(c, out, (size_t)T * aa->n_heads * hd);
    kiln_cuda_attn_wg_calls++;
    return 1;
}
