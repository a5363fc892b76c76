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
 *  - Or (default where the cache allows: block_size 8-64 dividing 64, no window; session 17,
 *    helper-h100) one producer warp has the copy engine gather them: per tile lane 0 arms the
 *    stage's `full` with the tile's bytes and 16 lanes each issue one tensor-map bulk copy (a
 *    page of block_size slots × 64 columns of one KV head, K or V), which also applies the
 *    128-byte swizzle; pages past the key range are not copied (the V ring starts zeroed, so
 *    P = 0 never meets NaN bits; K there is masked). KILN_CUDA_FA_WG_TMA=0: the cp.async warps.
 *  - The grid runs a host-sorted piece list (fw_plan): every KV head's tiles longest key range
 *    first, so the longest start in the first wave (KILN_CUDA_FA_WG_SPLIT=0: the old grid of
 *    tiles × heads; =2/3 also cut long tiles in two halves merged by the later one: slower).
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
 * page gathers, are what is left. Session 17 (helper-h100, same shapes, ncu, µs for the two
 * layers): old 87-94; TMA gathers on the old grid 76-83; sorted list + TMA (default) 58-63;
 * split halves 68-76 with cp.async, 63-72 with TMA. Session 48 (H100, ncu at base clocks, 2-layer synths at 2048
 * tokens): the overlapped loop had been compiled with every wgmma serialized (ptxas C7520) until its loop was
 * peeled (below) — 2 warpgroups overlapped 97-101 → 73-79 µs, the default 76-80; llama-3-8b shapes 142-155 against
 * the default's 129-141 — so the default stays. PyTorch's cuDNN attention (bench/cuda/peer_attn.py, free clocks)
 * takes 52 µs (qwen3-0.6b) and 84 µs (llama-3-8b) where this kernel takes 63-66 and 110-121.
 * Precision: K and V exact, Q·scale and P one rounding each (11 significant bits with the
 * f16 cache, 8 with bf16), f32 sums in another order than attention_mma.cu: not bitwise to it;
 * the single-rounding tolerance of test_attention_mma (1e-2 of max |ref|; worst 1.8e-3). */
#include <math.h>
#include "backend/cuda/tmap.cuh" /* CUtensorMap and its encoder (the TMA gathers) */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/mma_util.cuh"
#include "backend/cuda/wgmma_util.cuh"
#include "backend/cuda/fa_args.cuh" /* fa_dev_t, fa_args_fill */
#include "backend/cuda/rope_pair.cuh" /* rope_cs, rope_rot2: the q fold */

/* attention_mma.cu's arguments (fa_args.cuh), then the diagnosis switches */
/* a block's work when the grid runs a piece list (KILN_CUDA_FA_WG_SPLIT, fw_plan): tile `tile`,
 * key tiles [it0, it0 + n_it) of its range; pair >= 0: one of the two halves of a split tile,
 * whose partial sums meet in the epilogue of the later half (pair: its slot among the step's split tiles) */
typedef struct fw_piece { int tile, it0, n_it, pair; } fw_piece_t;

typedef struct fa_wg {
    FA_ARGS_FIELDS
    const fw_piece_t *pieces; /* NULL: grid (tiles, KV heads × chunks), tile n_tiles-1-x (the old order); else grid
                               * (KV heads × chunks, pieces), piece y (sorted longest first) */
    float4 *part;             /* split tiles: the first half's O, m and l per (pair, head block, warpgroup, thread) */
    int *cnt;                 /* ... and its arrival counter (zeroed before the launch) */
    int tma;                  /* KILN_CUDA_FA_WG_TMA: K/V pages by tensor-map bulk copies (fw_tma_maps), one producer warp */
    int dbg; /* KILN_CUDA_FA_WG_DBG (diagnosis, one-tile loop only): bit 0: O += P·V by mma.sync, bit 1: S by mma.sync */
    int fix; /* KILN_CUDA_FA_WG_FIX (diagnosis): bit 0: consumers fence.proxy.async after each full wait; bit 1: the
              * producer completes each tile before the next (no LAG); bit 2: a warpgroup barrier after each full
              * wait and before each release */
} fa_wg_t;

/* q's per-head RMSNorm (qwen3) and rope folded into the Q load (session 65, KILN_CUDA_QFOLD=1, opt-in; rope.cu's
 * cuda_norm_rope_kv_attention takes it at prefill): on = 0 the plain load of q as stored; 1 q as it comes from
 * the q projection — normalized with qn when qn is not NULL (norm_rope_kv_warp_kernel's arithmetic: lane l
 * holds elements l + 32j, the fmaf chains over even and odd j, the xor trees, (0 + even) + odd, the same
 * inverse and (x·r)·(off + w)), then rotated pair (i, i + half) by rope_cs / rope_rot with these frequencies
 * (rope_pair.cuh: the bits rope_kv_kernel and norm_rope_kv_warp_kernel give) — so the Q tile is bitwise the
 * one the separate pass would leave, and q's f32 write and re-read (16 MB a qwen3-0.6b layer at 2048 tokens)
 * are gone. Only where rot = head_dim (half = HD / 2: a lane's pair is its own j and j + HD / 64). The
 * frequencies travel in the parameter (__grid_constant__: no host ring upload that a later one could clobber). */
typedef struct fw_qp {
    const float *qn; /* the head norm's weight [HD], or NULL: rope only */
    float off, eps, ms;
    int on;
    float inv[64]; /* rope_cs's inverse frequencies, HD / 2 of them */
} fw_qp_t;

template <typename T16> __device__ __forceinline__ T16 fw_cvt(float x);
template <> __device__ __forceinline__ __half fw_cvt<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 fw_cvt<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

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

/* the fold's Q load (fw_qp_t): warp wl of warpgroup wg takes rows wl·16 .. +15 of the warpgroup's 64, four at a time,
 * their loads first. Not inlined: inside the kernel its registers pushed ptxas into serializing the main loop's
 * wgmmas (C7512) — a call once a block costs nothing next to the key loop. */
template <int HD, typename T16>
__device__ __noinline__ void fw_q_fold(unsigned char *qd, const float *q, const int32_t *pos, int n_heads, float scale, const fw_qp_t &qp, int t0,
                                       int h0, int nh_here, int nq, int wg, int wl, int lane) {
    constexpr int NJ = HD / 32;
    float wv[NJ];
#pragma unroll
    for (int j = 0; j < NJ; j++) wv[j] = qp.qn ? qp.off + qp.qn[lane + 32 * j] : 0.f;
    for (int r0 = wl * 16; r0 < wl * 16 + 16; r0 += 4) {
        float xv[4][NJ];
        int pp[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int qi = wg * 64 + r0 + u;
            pp[u] = -1;
#pragma unroll
            for (int j = 0; j < NJ; j++) xv[u][j] = 0.f;
            if (qi < nq) {
                const int t = t0 + qi / nh_here, hh = h0 + qi % nh_here;
                const float *src = q + ((size_t)t * n_heads + hh) * HD;
#pragma unroll
                for (int j = 0; j < NJ; j++) xv[u][j] = src[lane + 32 * j];
                pp[u] = pos[t];
            }
        }
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int r = r0 + u;
            if (qp.qn) {
                float sa = 0.f, sb = 0.f;
#pragma unroll
                for (int j = 0; j < NJ; j += 2) sa = fmaf(xv[u][j], xv[u][j], sa);
#pragma unroll
                for (int j = 1; j < NJ; j += 2) sb = fmaf(xv[u][j], xv[u][j], sb);
                for (int o = 16; o > 0; o >>= 1) sa += __shfl_xor_sync(0xffffffffu, sa, o);
                for (int o = 16; o > 0; o >>= 1) sb += __shfl_xor_sync(0xffffffffu, sb, o);
                float tot = 0.f;
                tot += sa;
                tot += sb;
                const float rr = 1.0f / sqrtf(tot / (float)HD + qp.eps);
#pragma unroll
                for (int j = 0; j < NJ; j++) xv[u][j] = (xv[u][j] * rr) * wv[j];
            }
            if (pp[u] >= 0) /* element lane + 32j pairs with lane + 32j + HD/2: the same lane's j + NJ/2 */
#pragma unroll
                for (int j = 0; j < NJ / 2; j++) {
                    float cs, sn;
                    rope_cs(lane + 32 * j, pp[u], qp.inv, qp.ms, cs, sn);
                    rope_rot2(xv[u][j], xv[u][j + NJ / 2], cs, sn, xv[u][j], xv[u][j + NJ / 2]);
                }
#pragma unroll
            for (int j = 0; j < NJ; j++) {
                const int d = lane + 32 * j;
                *(T16 *)(qd + fw_off(r, d / 8, 64) + 2 * (d % 8)) = fw_cvt<T16>(xv[u][j] * scale);
            }
        }
    }
}

template <int HD, int NWG> struct fw_cfg {
    static constexpr int NS = NWG == 1 ? 3 : 4;  /* ring stages (NWG = 1: two blocks an SM share the 227 KB) */
    static constexpr int LAG = NS - 1;           /* tiles in flight per producer lane before it waits */
    static constexpr int TILE = 64 * HD * 2;     /* bytes of a K or a V tile */
    static constexpr int QB = 64 * HD * 2;       /* bytes of one warpgroup's Q */
    static constexpr int SMEM = 1024 + NWG * QB + NS * 2 * TILE; /* + 1 KB to align to the swizzle's 1024-byte atoms */
    static constexpr int MAXT = 128 * NWG + 128; /* + 1, 2 or 4 producer warps (KILN_CUDA_FA_WG_PW, a launch-time choice) */
};

template <int HD, typename T16, int NWG, bool PIPE, bool QF>
__global__ void __launch_bounds__(fw_cfg<HD, NWG>::MAXT, 1)
    attn_wg_kernel(fa_wg_t a, const __grid_constant__ CUtensorMap tmk, const __grid_constant__ CUtensorMap tmv,
                   const __grid_constant__ fw_qp_t qp) {
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

    /* the old grid: tile x from the end (longest key ranges first within a KV head); the piece list:
     * the y-th longest piece of every KV head in a row of the grid (longest first over all heads) */
    const fw_piece_t pc = a.pieces ? a.pieces[blockIdx.y] : fw_piece_t{a.n_tiles - 1 - (int)blockIdx.x, 0, -1, -1};
    const int hb = a.pieces ? blockIdx.x : blockIdx.y;
    const int kvh = hb / a.n_chunks, chunk = hb % a.n_chunks;
    const attn_tile_t tile = a.tiles[pc.tile];
    const int h0 = kvh * a.group + chunk * a.hc;
    const int nh_here = min(a.hc, a.group - chunk * a.hc);
    const int nq = tile.n * nh_here;
    const int *bt = a.tables + (size_t)tile.row * a.max_blocks;
    const int p_first = a.pos[tile.t0], p_last = a.pos[tile.t0 + tile.n - 1];
    const int kv_lo = a.window > 0 ? max(0, p_first - a.window + 1) : 0, kv_hi = p_last + 1;
    const int nkt = pc.n_it < 0 ? (kv_hi - kv_lo + 63) / 64 : pc.n_it; /* key tiles of this block */
    const int jb = kv_lo + 64 * pc.it0;                                /* its first key */

    const int npw = (int)(blockDim.x >> 5) - 4 * NWG, PT = 32 * npw; /* producer warps, threads */
    if (tid == 0) {
        for (int i = 0; i < NS; i++) {
            mb_init_n(full + 8 * i, a.tma ? 1 : PT); /* every producer thread (TMA: lane 0's expect_tx) */
            mb_init_n(empty + 8 * i, 4 * NWG); /* one per consumer warp */
        }
    }
    if (a.tma) { /* V stages zeroed: pages past the key range are not copied, and P = 0 times stale NaN bits would not be 0 */
        for (int i = tid; i < NS * C::TILE / 16; i += blockDim.x)
            *(uint4 *)(sm + (s_kv - s_q) + (i / (C::TILE / 16)) * 2 * C::TILE + C::TILE + (i % (C::TILE / 16)) * 16) = make_uint4(0, 0, 0, 0);
        wg_proxy_fence();
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    __syncthreads();

    if (warp >= 4 * NWG && a.tma) {
        /* TMA: one warp; per tile, lane 0 expects the bytes, then lane l < 2·pages·NB copies page
         * (l / NB) % pages, column block l % NB, of K (l < pages·NB) or V: a box of block_size rows
         * × 64 columns, 128-byte swizzled by the copy engine into fw_off's layout (its rows 1024-byte
         * aligned: block_size a multiple of 8). Pages from kv_hi on are skipped (the host takes this
         * path for window 0 only, so tiles start on pages). */
        if (warp != 4 * NWG) return;
        const int bs = a.block_size, pages = 64 / bs, nl = 2 * pages * NB;
        const int kv = lane / (pages * NB), pg = (lane / NB) % pages, cb = lane % NB;
        const uint64_t tm = (uint64_t)(kv ? &tmv : &tmk);
        for (int it = 0; it < nkt; it++) {
            const int s = it % NS, j0 = jb + 64 * it;
            if (it >= NS) mb_wait(empty + 8 * s, ((it / NS) - 1) & 1);
            const int nv = min(pages, (kv_hi - j0 + bs - 1) / bs); /* pages holding keys of the range */
            if (lane == 0)
                asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(full + 8 * s), "r"((uint32_t)(nv * 2 * NB * bs * 128))
                             : "memory");
            __syncwarp();
            if (lane < nl && pg < nv) {
                const int blk = bt[j0 / bs + pg];
                const uint32_t dst = s_kv + s * 2 * C::TILE + kv * C::TILE + cb * 64 * 128 + pg * bs * 128;
                asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
                             "l"(tm), "r"(cb * 64), "r"(kvh), "r"(blk * bs), "r"(full + 8 * s)
                             : "memory");
            }
        }
        return;
    }
    if (warp >= 4 * NWG) { /* the producer warps: PT threads share each tile's 2 × 64 × HD/8 copies */
        const size_t per_tok = (size_t)a.n_kv_heads * HD;
        const unsigned short *kg = (const unsigned short *)a.k + (size_t)kvh * HD, *vg = (const unsigned short *)a.v + (size_t)kvh * HD;
        for (int it = 0; it < nkt; it++) {
            const int s = it % NS, j0 = jb + 64 * it, nk = min(64, kv_hi - j0);
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
    if (QF) {
        fw_q_fold<HD, T16>(sm + wg * C::QB, a.q, a.pos, a.n_heads, a.scale, qp, tile.t0, h0, nh_here, nq, wg, wl, lane);
        wg_proxy_fence();
        asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
    } else {
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
            const int s = it % NS, j0 = jb + 64 * it;
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
         * it; the softmax of tile j runs while that P·V does; then O is rescaled. The warpgroup's
         * tiles are one run [ilo, ihi) of the block's (a window cuts the front, the causal diagonal
         * the back), so the loop is peeled — the first tile's S alone, the steady tiles, the last P·V
         * alone — and no wgmma sits in a branch that depends on the loop's state: the first form
         * (`if (sp >= 0)` around the pending P·V, a drain in the skip branch) made ptxas serialize
         * every wgmma of the kernel (C7520: WG.AR in a divergent path). The bounds go through a
         * shuffle so that ptxas can see they are warp-uniform. */
        int ilo = 0, ihi = 0;
        if (wpmax >= jb) ihi = min(nkt, (wpmax - jb) / 64 + 1);
        if (wlmin > jb + 63) ilo = (wlmin - jb) / 64;
        ilo = __shfl_sync(0xffffffffu, ilo, 0);
        ihi = __shfl_sync(0xffffffffu, max(ilo, ihi), 0);
        for (int it = 0; it < ilo; it++) { /* before the window: the ring only */
            wait_full(it % NS, (it / NS) & 1);
            release(it % NS);
        }
        if (ilo < ihi) {
            uint32_t pp[4][4];
            int sp = ilo % NS; /* the stage whose P·V is pending (pp) */
            {
                float sc[32], corr[2];
                wait_full(sp, (ilo / NS) & 1);
                wg_fence();
                issue_s(sc, sp);
                wg_wait<0>();
#pragma unroll
                for (int i = 0; i < 32; i++) wg_reg_fence(sc[i]);
                softmax(sc, jb + 64 * ilo, corr);
                rescale(corr);
                pack_p(sc, pp);
            }
            for (int it = ilo + 1; it < ihi; it++) {
                const int s = it % NS;
                float sc[32], corr[2];
                wait_full(s, (it / NS) & 1);
                wg_fence();
                issue_s(sc, s);
                issue_pv(pp, sp);
                wg_wait<1>();
#pragma unroll
                for (int i = 0; i < 32; i++) wg_reg_fence(sc[i]);
                softmax(sc, jb + 64 * it, corr);
                wg_wait<0>();
                fence_o();
                fence_p(pp);
                release(sp);
                rescale(corr);
                pack_p(sc, pp); /* after tile j-1's P·V has read the old pp */
                sp = s;
            }
            wg_fence();
            issue_pv(pp, sp);
            wg_wait<0>();
            fence_o();
            release(sp);
        }
        for (int it = ihi; it < nkt; it++) { /* past the warpgroup's last position: the ring only */
            wait_full(it % NS, (it / NS) & 1);
            release(it % NS);
        }
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    }
    /* a split tile: the warpgroup that ends first leaves its O, m, l (every thread its own
     * registers, the same layout in both halves) and returns; the second waits for them and
     * merges: m = max, each half scaled by exp2((m_half − m)·log2 e), the same form as the loop's
     * corr. Only a warpgroup that has counted itself in spins, so the one it waits for runs. */
    /* the piece's pair read again here (and the head block from blockIdx), not kept live across the
     * loop: the 3-warpgroup kernel sits at 128 registers, and 2-3 more made ptxas serialize its
     * wgmmas (C7512) */
    int pair = -1;
    if (a.pieces) asm volatile("ld.global.nc.b32 %0, [%1];\n" : "=r"(pair) : "l"(&a.pieces[blockIdx.y].pair));
    if (pair >= 0) {
        __shared__ int fw_order[NWG];
        const size_t slot = ((size_t)pair * gridDim.x + blockIdx.x) * NWG + wg;
        int *cnt = a.cnt + slot;
        /* [NB·16 float2 of O: (b, i, h), as the output stores pair them][m, l float4] × 128 threads: a
         * float4 of O (4 accumulators of two rows) instead made ptxas serialize the loop's wgmmas */
        float2 *pp = (float2 *)(a.part + slot * 128 * (NB * 8 + 1)) + tw;
        float4 *pml = a.part + slot * 128 * (NB * 8 + 1) + NB * 8 * 128 + tw;
        if (tw == 0) fw_order[wg] = atomicAdd(cnt, 1);
        asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
        if (fw_order[wg] == 0) { /* first: leave the partial sums (unnormalized O) */
#pragma unroll
            for (int b = 0; b < NB; b++)
#pragma unroll
                for (int i = 0; i < 8; i++)
#pragma unroll
                    for (int h = 0; h < 2; h++) __stcg(pp + ((b * 8 + i) * 2 + h) * 128, make_float2(o[b][4 * i + 2 * h], o[b][4 * i + 2 * h + 1]));
            __stcg(pml, make_float4(m[0], m[1], l[0], l[1]));
            __threadfence();
            asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
            if (tw == 0) atomicAdd(cnt, 1); /* 2 before the other half counts itself, 3 after */
            return;
        }
        if (tw == 0) {
            int v;
            do {
                asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(cnt) : "memory");
            } while (v < 3);
        }
        asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
        const float4 ml = __ldcg(pml);
        const float m2[2] = {ml.x, ml.y}, l2[2] = {ml.z, ml.w};
        float f1[2], f2[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const float mn = fmaxf(m[h], m2[h]), mu = (mn == -INFINITY ? 0.f : mn) * LOG2E;
            f1[h] = exp2f(fmaf(m[h], LOG2E, -mu)); /* a half without a valid key (m = -inf): 0 */
            f2[h] = exp2f(fmaf(m2[h], LOG2E, -mu));
            l[h] = l[h] * f1[h] + l2[h] * f2[h];
            m[h] = mn;
        }
#pragma unroll
        for (int b = 0; b < NB; b++)
#pragma unroll
            for (int i = 0; i < 8; i++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const float2 x = __ldcg(pp + ((b * 8 + i) * 2 + h) * 128);
                    o[b][4 * i + 2 * h] = o[b][4 * i + 2 * h] * f1[h] + x.x * f2[h];
                    o[b][4 * i + 2 * h + 1] = o[b][4 * i + 2 * h + 1] * f1[h] + x.y * f2[h];
                }
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
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
        if (a.out16 && a.out16_half) {
            __half *o16 = (__half *)a.out16 + ((size_t)t * a.n_heads + hh) * HD;
#pragma unroll
            for (int b = 0; b < NB; b++)
#pragma unroll
                for (int i = 0; i < 8; i++)
                    *(__half2 *)(o16 + b * 64 + i * 8 + 2 * c4) = __floats2half2_rn(o[b][4 * i + 2 * h] * inv, o[b][4 * i + 2 * h + 1] * inv);
        } else if (a.out16) {
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

template <int HD, typename T16, int NWG, bool PIPE, bool QF>
static void fw_launch_q(cuda_impl_t *c, const fa_wg_t &a, dim3 grid, int pw, const CUtensorMap &tk, const CUtensorMap &tv, const fw_qp_t &qp) {
    using C = fw_cfg<HD, NWG>;
    static bool set = false;
    if (!set) {
        cudaCheck(cudaFuncSetAttribute(attn_wg_kernel<HD, T16, NWG, PIPE, QF>, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM));
        set = true;
    }
    attn_wg_kernel<HD, T16, NWG, PIPE, QF><<<grid, 128 * NWG + 32 * pw, C::SMEM, c->stream>>>(a, tk, tv, qp);
    cudaLaunchCheck();
}
/* the fold is a template bit (QF): the plain kernel stays the code it was (at 3 warpgroups it sits at the 128-register
 * cap, where any added branch tipped ptxas into serializing its wgmmas) */
template <int HD, typename T16, int NWG, bool PIPE>
static void fw_launch(cuda_impl_t *c, const fa_wg_t &a, dim3 grid, int pw, const CUtensorMap &tk, const CUtensorMap &tv, const fw_qp_t &qp) {
    if (qp.on) fw_launch_q<HD, T16, NWG, PIPE, true>(c, a, grid, pw, tk, tv, qp);
    else fw_launch_q<HD, T16, NWG, PIPE, false>(c, a, grid, pw, tk, tv, qp);
}

/* the defaults (unset env), the fastest measured (qwen3-0.6b / llama-3-8b, 2048 tokens): 3
 * consumer warpgroups a block, one tile at a time (1-2 warpgroups: the loop without the
 * overlap too), 4 producer warps (one a scheduler) */
#define FW_NWG_DEFAULT 3
#define FW_PIPE_DEFAULT false
#define FW_PW_DEFAULT 4

/* The grid's work order (KILN_CUDA_FA_WG_SPLIT). One block an SM (180 KB of shared memory), and
 * a causal prefill's tiles cost in proportion to their key ranges (qwen3-0.6b at 2048 tokens: 22
 * tiles of 2-32 key tiles × 8 KV heads = 176 blocks on 132 SMs). The old grid ran tile x from
 * the end within each KV head, head after head, so the last heads' longest tiles started late;
 * the piece list (default) sorts every head's pieces longest first (an LPT order). Opt-in (=2/3),
 * each tile longer than half the longest is also cut in two (key tiles [0, n/2) and [n/2, n)),
 * merged by the later half in the kernel. A greedy model of the qwen3-0.6b grid (a block costs 2
 * + its key tiles) gave 42 → 34 (sorted) → 29 (split) key-tile times, but measured (ncu, H200,
 * session 17) the split was slower than sorting alone: 63-72 µs against 58-63 (the halves' own
 * fills and Q loads, the merge through L2, a counter memset a launch). */
static int fw_piece_cmp(const void *x, const void *y) {
    const fw_piece_t *a = (const fw_piece_t *)x, *b = (const fw_piece_t *)y;
    if (a->n_it != b->n_it) return b->n_it - a->n_it;
    if (a->tile != b->tile) return b->tile - a->tile; /* a causal row's later tile first, as the old grid */
    return a->it0 - b->it0;
}
/* the step's pieces (host), longest first; returns their count, *n_pairs the split tiles */
static int fw_plan(const attn_args_t *aa, int TQ, int n_tiles, int split, fw_piece_t **out, int *n_pairs) {
    static fw_piece_t *buf;
    static int cap;
    if (2 * n_tiles > cap) {
        free(buf);
        cap = 4 * n_tiles;
        buf = (fw_piece_t *)malloc(sizeof(fw_piece_t) * cap);
        if (!buf) { fprintf(stderr, "kiln cuda: out of host memory (attention pieces)\n"); abort(); }
    }
    int *nkt = (int *)malloc(sizeof(int) * n_tiles), ti = 0, max_nkt = 1, np = 0, pairs = 0;
    if (!nkt) { fprintf(stderr, "kiln cuda: out of host memory (attention pieces)\n"); abort(); }
    for (int r = 0; r < aa->n_rows; r++) /* the tiles in attn_tiles_upload's order */
        for (int tt = aa->row_start[r]; tt < aa->row_start[r + 1]; tt += TQ, ti++) {
            const int n = aa->row_start[r + 1] - tt < TQ ? aa->row_start[r + 1] - tt : TQ;
            const int pf = aa->pos[tt], pl = aa->pos[tt + n - 1];
            const int lo = aa->window > 0 ? (pf - aa->window + 1 > 0 ? pf - aa->window + 1 : 0) : 0;
            nkt[ti] = (pl + 1 - lo + 63) / 64;
            if (nkt[ti] > max_nkt) max_nkt = nkt[ti];
        }
    for (int i = 0; i < n_tiles; i++) {
        if (split && nkt[i] >= 2 && 2 * nkt[i] > max_nkt + 1) {
            buf[np++] = (fw_piece_t){i, 0, nkt[i] / 2, pairs};
            buf[np++] = (fw_piece_t){i, nkt[i] / 2, nkt[i] - nkt[i] / 2, pairs};
            pairs++;
        } else
            buf[np++] = (fw_piece_t){i, 0, nkt[i], -1};
    }
    free(nkt);
    qsort(buf, np, sizeof *buf, fw_piece_cmp);
    *out = buf;
    *n_pairs = pairs;
    return np;
}

/* The K and V caches as 3-D tensors for the copy engine: (head_dim, KV heads, cache slots), 16-bit
 * elements, boxes of 64 columns × 1 head × block_size slots (one page of one head), 128-byte
 * swizzle; the slot extent from the allocation's range (cuMemGetAddressRange), so a stray
 * block index reads zeros rather than past it. 0: not available (the cp.async producers run). */
typedef CUresult (*fw_range_fn)(CUdeviceptr *, size_t *, CUdeviceptr);
static int fw_tma_maps(const kv_view_t *kv, CUtensorMap *tk, CUtensorMap *tv) {
    static fw_range_fn range;
    static int tried;
    if (!tried) {
        tried = 1;
        range = (fw_range_fn)cuda_driver_entry("cuMemGetAddressRange");
    }
    const cuda_tmap_encode_fn enc = cuda_tmap_encoder();
    if (!enc || !range) return 0;
    /* no memo of the maps: a freed cache and a new one of another size may share an address; the
     * host work (two driver calls, two encodes) overlaps the GPU's */
    const size_t row = (size_t)kv->n_kv_heads * kv->head_dim * 2;
    void *ptr[2] = {kv->k, kv->v};
    CUtensorMap *tm[2] = {tk, tv};
    for (int i = 0; i < 2; i++) {
        CUdeviceptr base = 0;
        size_t size = 0;
        if (range(&base, &size, (CUdeviceptr)ptr[i]) != CUDA_SUCCESS) return 0;
        const cuuint64_t slots = (cuuint64_t)((base + size - (CUdeviceptr)ptr[i]) / row);
        const cuuint64_t dims[3] = {(cuuint64_t)kv->head_dim, (cuuint64_t)kv->n_kv_heads, slots};
        const cuuint64_t strides[2] = {(cuuint64_t)kv->head_dim * 2, (cuuint64_t)row};
        const cuuint32_t box[3] = {64, 1, (cuuint32_t)kv->block_size}, es[3] = {1, 1, 1};
        if (enc(tm[i], CU_TENSOR_MAP_DATA_TYPE_UINT16, 3, ptr[i], dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
            static int said;
            if (!said++) fprintf(stderr, "kiln cuda: attention K/V tensor map not encoded; cp.async gathers\n");
            return 0;
        }
    }
    return 1;
}

extern "C" int kiln_cuda_attn_wg_calls; /* steps this kernel ran (the tests check the path ran) */
int kiln_cuda_attn_wg_calls;
extern "C" int kiln_cuda_attn_qfold_calls; /* ... of them with q's norm and rope in the Q load */
int kiln_cuda_attn_qfold_calls;

/* 1 if the step ran here; 0: not for this kernel (attention_mma.cu's takes it). qp: how Q is loaded. */
static int fw_run(backend_t *be, float *out, const float *q, int T, const attn_args_t *aa, const fw_qp_t &qp) {
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
    const int hd = aa->head_dim;
    if ((kv->dtype != DT_F16 && kv->dtype != DT_BF16) || (hd != 64 && hd != 128)) return 0;
    attn_tiles_t tl;
    int hc, n_chunks, TQ;
    if (!fa_tiles_plan(c, aa, T, 64 * nwg, tl, hc, n_chunks, TQ)) return 0;
    fa_wg_t a;
    fa_args_fill(a, c, q, out, T, aa, tl, hc, n_chunks);
    const char *denv = getenv("KILN_CUDA_FA_WG_DBG");
    a.dbg = denv ? atoi(denv) : 0;
    const char *fenv = getenv("KILN_CUDA_FA_WG_FIX");
    a.fix = fenv ? atoi(fenv) : 0;
    /* KILN_CUDA_FA_WG_TMA (default 1): the K/V pages by the copy engine where the cache allows it
     * (block_size 8-64 dividing 64, no window, 16-byte-aligned rows); 0: the cp.async producers */
    CUtensorMap tmk, tmv;
    memset(&tmk, 0, sizeof tmk);
    memset(&tmv, 0, sizeof tmv);
    const char *tenv = getenv("KILN_CUDA_FA_WG_TMA");
    const int bs = kv->block_size;
    a.tma = !(tenv && *tenv && !strcmp(tenv, "0")) && aa->window == 0 && bs % 8 == 0 && 64 % bs == 0 && !kv->k_t &&
            (((uintptr_t)kv->k | (uintptr_t)kv->v) & 15) == 0 && fw_tma_maps(kv, &tmk, &tmv);
    /* KILN_CUDA_FA_WG_SPLIT: 0 the old grid; 1 (default) the sorted piece list, no tile split; 2
     * split too where the unsplit grid is under two waves; 3 split at any size (tests). Measured
     * (qwen3-0.6b, 2048 tokens, with TMA): 1 → 58-63 µs, 2 → 63-72, 0 → 76-83 */
    const char *senv = getenv("KILN_CUDA_FA_WG_SPLIT");
    const int smode = senv && *senv ? atoi(senv) : 1, hbn = aa->n_kv_heads * n_chunks;
    a.pieces = NULL; a.part = NULL; a.cnt = NULL;
    dim3 grid(tl.n_tiles, hbn);
    if (smode > 0) {
        fw_piece_t *hp;
        int n_pairs;
        const int split = smode >= 3 || (smode == 2 && tl.n_tiles * hbn < 2 * c->sm_count);
        const int np = fw_plan(aa, TQ, tl.n_tiles, split, &hp, &n_pairs);
        a.pieces = (const fw_piece_t *)cuda_host_to_dev(c, hp, sizeof(fw_piece_t) * np); /* one ring restart at most (cuda_common.cuh) */
        grid = dim3(hbn, np);
        if (n_pairs) {
            /* [counters, 256-byte aligned][partials: NWG × 128 threads × (HD/8 + 1) float4 a (pair, head block)] */
            const size_t slots = (size_t)n_pairs * hbn * nwg, cb = (sizeof(int) * slots + 255) & ~(size_t)255;
            /* attention.cu's split-K partials' scratch (one attention a step at a time on the stream); the
             * counters zeroed each launch since attention.cu writes there too (a ~1 KB memset) */
            char *d = (char *)cuda_scratch(c, (void **)&c->part, &c->part_bytes, cb + slots * 128 * (hd / 8 + 1) * sizeof(float4));
            cudaCheck(cudaMemsetAsync(d, 0, sizeof(int) * slots, c->stream));
            a.cnt = (int *)d;
            a.part = (float4 *)(d + cb);
        }
    }
    const bool f16 = kv->dtype == DT_F16;
    const char *penv = getenv("KILN_CUDA_FA_WG_PIPE");
    const bool pipe = penv && *penv ? strcmp(penv, "0") != 0 : FW_PIPE_DEFAULT; /* three warpgroups: never (128 registers) */
#define FW_GO(HD_, NWG_)                                                                        \
    do {                                                                                        \
        if (f16) pipe ? fw_launch<HD_, __half, NWG_, true>(c, a, grid, pw, tmk, tmv, qp) : fw_launch<HD_, __half, NWG_, false>(c, a, grid, pw, tmk, tmv, qp); \
        else pipe ? fw_launch<HD_, __nv_bfloat16, NWG_, true>(c, a, grid, pw, tmk, tmv, qp) : fw_launch<HD_, __nv_bfloat16, NWG_, false>(c, a, grid, pw, tmk, tmv, qp); \
    } while (0)
#define FW_NWG(HD_)                                                                             \
    do {                                                                                        \
        if (nwg == 1) FW_GO(HD_, 1);                                                            \
        else if (nwg == 2) FW_GO(HD_, 2);                                                       \
        else {                                                                                  \
            if (f16) fw_launch<HD_, __half, 3, false>(c, a, grid, pw, tmk, tmv, qp);                              \
            else fw_launch<HD_, __nv_bfloat16, 3, false>(c, a, grid, pw, tmk, tmv, qp);                           \
        }                                                                                       \
    } while (0)
    if (hd == 64) FW_NWG(64);
    else FW_NWG(128);
#undef FW_NWG
#undef FW_GO
    if (a.out16 && a.out16_half) cuda_x16h_set(c, out, (size_t)T * aa->n_heads * hd);
    else if (a.out16) cuda_x16_set(c, out, (size_t)T * aa->n_heads * hd);
    kiln_cuda_attn_wg_calls++;
    if (qp.on) kiln_cuda_attn_qfold_calls++;
    return 1;
}

/* Called by cuda_attention_mma for the single-rounding form only: q as stored. */
int cuda_attention_wg(backend_t *be, float *out, const float *q, int T, const attn_args_t *aa) {
    fw_qp_t qp;
    memset(&qp, 0, sizeof qp);
    return fw_run(be, out, q, T, aa, qp);
}

/* KILN_CUDA_QFOLD=1: read per call (the tests switch it); opt-in until it has run on a GPU (written in session 65, whose
 * device starts were all refused). rope.cu asks before it splits its pass and calls the entry below. */
int cuda_qfold_on(void) {
    const char *e = getenv("KILN_CUDA_QFOLD");
    return e && atoi(e) > 0;
}

/* norm_rope_kv_attention's prefill with q as the projection left it (rope.cu: the k heads and the cache
 * written already): the step here with q's head norm (qn, or NULL) and rope done in the Q load — 1; 0 when
 * this kernel does not take the step (the caller then normalizes and rotates q itself and calls
 * cuda_attention) or the fold does not apply (rot ≠ head_dim). The same test as cuda_attention_mma's before it calls
 * cuda_attention_wg (fa_form), so a step goes to the same kernel either way. */
int cuda_attention_wg_qfold(backend_t *be, float *out, const float *q, int T, const attn_args_t *aa, const float *qn, float eps, int rot,
                            const float *inv, float ms) {
    cuda_impl_t *c = cuda_impl(be);
    if (fa_form(be) != 0 || c->gemm_min_t == 0x7fffffff || rot != aa->head_dim || rot / 2 > 64) return 0;
    fw_qp_t qp;
    memset(&qp, 0, sizeof qp);
    qp.on = 1;
    qp.qn = qn; qp.off = 0.f; qp.eps = eps; qp.ms = ms;
    memcpy(qp.inv, inv, sizeof(float) * (rot / 2));
    return fw_run(be, out, q, T, aa, qp);
}
