/* moe_gemm.cu — a MoE layer's routed experts as grouped GEMMs on tensor cores, for steps of
 * more tokens than moe.cu's per-pair kernels suit (prefill, batched decode). Before it, such
 * steps downloaded the routing and ran six ops per expert from the host (gather, three
 * matmuls, GLU, scatter: ~1500 launches a layer for 256 experts, and a sync).
 *
 * Six launches a layer (eight where BN >= 64: each gemm then also runs the tail list), no host
 * round trip (capturable like the rest of a step):
 *
 *   mg_sort_kernel     one block: per-expert counts of the step's (token, expert) pairs, each
 *                      expert's segment of slots (its start a multiple of 8: the Σx̂ loads below
 *                      are 16-byte cp.async), the work lists of tiles (expert, first slot,
 *                      end: BN slots, and the tails' BN/2), each pair's slot and each slot's
 *                      token (-1: padding)
 *   mg_prep_kernel     x̂[slot] = x[token] as bf16 hi + lo planes in qgemm's column order
 *                      (0 4 1 5 2 6 3 7 per 8 columns), Σx̂ per group and slot; for the down
 *                      projection its input is act(g)·u of the gate/up output (glu_act.cuh)
 *   mg_gemm_kernel     a block = 128 weight rows × one tile of BN ≤ 128 slots of one expert:
 *                      matmul_qgemm.cu's main loop (codes exact in bf16, x̂ = hi + lo, two
 *                      m16n8k16 MMAs, each group's partial scaled into the f32 accumulator:
 *                      acc = bias·Σx̂ + (scale·partial + acc)), the weight from the layer's
 *                      expert table; bf16 experts take the same loop with the weight's own
 *                      bf16 pairs as A (byte permutes into the x̂ order, no groups). Gate and up
 *                      are one launch (grid.y spans both), written side by side [slot, 2·Ie]
 *   mg_gemm_kernel     again for down, [slot, H]
 *   mg_combine_kernel  out[t] = Σ over the token's experts in ascending id of wts · y[slot]
 *                      (fmaf from 0: the order of the host loop's add_rows_scaled), a block a token
 *
 * Numerics: x is split into bf16 hi + lo (16 significant bits) as the precision policy asks
 * for every MoE architecture; codes and bf16 weights are exact; sums in f32: 1.4-5.1e-6 of
 * ref_moe_experts (tested at 2e-5), closer than the host loop's per-expert MLX matmuls of 9..64
 * rows (x as f16 per token there: 1.5-3.2e-4). A slot's
 * column of an MMA is its own dot product (k, group and stage order fixed), so a token's output
 * does not depend on which other tokens share its tiles, the tile size or the slot order the
 * sort's atomics give: bitwise the same alone or in any batch that takes this path (tested).
 *
 * Trade-offs: a tile's slots past its expert's segment are computed and dropped (at most BN/2
 * per expert: BN is picked from the mean pairs per expert, 32/64/128, and a remainder of at
 * most half a tile goes to a second launch of BN/2-slot tiles: +1-3 % on the moe synth's
 * prefill); two blocks an SM (registers capped at 128) where they fit: +11 %; the weight of an expert
 * with more than BN pairs is read once per tile (L2 keeps it for the neighbouring tiles, which
 * run together); the outputs are f32 [slots, ·] scratch rather than fused into the combine. */
#include "backend/cuda/mma_util.cuh"
#include "backend/cuda/glu_act.cuh"
#include "backend/cuda/moe_util.cuh"

namespace {

constexpr int MG_BM = 128; /* weight rows per block */
constexpr int MG_BK = 64;  /* columns per stage     */
constexpr int MG_S = 4;    /* stages in the ring    */
constexpr int MG_THREADS = 256;
constexpr int MG_ALIGN = 8; /* slots: each expert's segment starts at a multiple of this */

template <int BITS, int GROUP, int BN> struct mg {
    static constexpr int CB = MG_BK * BITS / 8;                                /* weight bytes per row per stage: 32/64/128 */
    static constexpr int CSTR = BITS == 4 ? 48 : BITS == 8 ? 96 : 192;         /* padded row stride: conflict-free loads  */
    static constexpr int GPT = BITS == 16 ? 0 : GROUP < MG_BK ? MG_BK / GROUP : 1; /* groups a stage touches */
    static constexpr int XT = BN * MG_BK * 2;                                  /* one x̂ plane of a stage                 */
    static constexpr int XB = 2 * XT;                                          /* hi and lo                              */
    static constexpr int CBY = MG_BM * CSTR;
    static constexpr int SBB = GPT * 2 * MG_BM * 4; /* [GPT][scale, bias][128 rows] words */
    static constexpr int XSB = GPT * BN * 4;        /* [GPT][BN slots] Σx̂                 */
    static constexpr int STAGE = XB + CBY + SBB + XSB;
    static constexpr int JT = BN / 16;              /* 8-slot MMA tiles per warp (2 warps across the slots) */
};

/* d (+)= A·(hi + lo) over two k-steps: four MMAs; fresh: d starts from zero */
__device__ __forceinline__ void mg_mma(float (&d)[4], const uint32_t (&a)[2][4], uint4 xv, uint4 xl, bool fresh) {
    if (fresh) mma_bf16_z(d, a[0], xv.x, xv.y);
    else mma_bf16(d, a[0], xv.x, xv.y);
    mma_bf16(d, a[1], xv.z, xv.w);
    mma_bf16(d, a[0], xl.x, xl.y);
    mma_bf16(d, a[1], xl.z, xl.w);
}

/* y[slot, ycol + n] = w · x̂[slot] for the block's tile and rows; w = tab[(which + wi)·E + e]. */
template <int BITS, int GROUP, int BN, int MINB>
__global__ void __launch_bounds__(MG_THREADS, MINB)
    mg_gemm_kernel(float *__restrict__ y, int ldy, const __nv_bfloat16 *__restrict__ xq, const float *__restrict__ xsum, int Sp,
                   const int4 *__restrict__ tiles, const int *__restrict__ ntiles, const dweight_t *__restrict__ tab, int E, int which,
                   int nrb) {
    if ((int)blockIdx.x >= *ntiles) return;
    extern __shared__ __align__(128) unsigned char smem[];
    using C = mg<BITS, GROUP, BN>;
    constexpr int CSTR = C::CSTR, CB = C::CB, GPT = C::GPT, UPR = CB / 16, JT = C::JT;
    const int4 tile = tiles[blockIdx.x];
    const int wi = blockIdx.y / nrb, r0 = (blockIdx.y % nrb) * MG_BM, t0 = tile.y, t1 = tile.z;
    const dweight_t w = tab[(size_t)(which + wi) * E + tile.x];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
    const int N = w.rows, K = w.cols, ng = BITS == 16 ? 1 : K / GROUP, nk = K / MG_BK;
    const int wr = (warp & 3) * 32, wt = (warp >> 2) * (BN / 2); /* the warp's rows and slots in the block */
    const size_t rowb = (size_t)K * BITS / 8;                      /* weight bytes per row */
    const unsigned char *codes = (const unsigned char *)w.data;

    auto load = [&](int s, int kt) {
        unsigned char *st = smem + (size_t)s * C::STAGE;
        const int k0 = kt * MG_BK;
#pragma unroll
        for (int p = 0; p < 2; p++)
#pragma unroll
            for (int i = 0; i < BN * 8 / MG_THREADS; i++) { /* BN slots × 8 units of 16 bytes */
                const int id = tid + i * MG_THREADS, row = id >> 3, u = id & 7;
                cp_async16(st + p * C::XT + row * 128 + ((u ^ ((row & 1) << 2)) << 4), xq + (size_t)p * Sp * K + (size_t)(t0 + row) * K + k0 + u * 8);
            }
#pragma unroll
        for (int i = 0; i < MG_BM * UPR / MG_THREADS; i++) {
            const int id = tid + i * MG_THREADS, row = id / UPR, u = id % UPR, r = min(r0 + row, N - 1);
            cp_async16(st + C::XB + row * CSTR + u * 16, codes + (size_t)r * rowb + (size_t)k0 * BITS / 8 + u * 16);
        }
        if constexpr (BITS != 16) {
            const int gi0 = k0 / GROUP;
            unsigned char *sb = st + C::XB + C::CBY;
#pragma unroll
            for (int i = 0; i < GPT; i++) { /* thread: row tid & 127, scale (tid < 128) or bias word */
                const int row = tid & (MG_BM - 1), wh = tid >> 7, r = min(r0 + row, N - 1);
                const size_t idx = (size_t)r * ng + gi0 + i;
                const unsigned char *base = (const unsigned char *)(wh ? w.biases : w.scales);
                const uintptr_t a = w.sb_dtype == DT_F32 ? (uintptr_t)(base + idx * 4) : (uintptr_t)(base + idx * 2) & ~(uintptr_t)3;
                cp_async4(sb + ((i * 2 + wh) * MG_BM + row) * 4, (const void *)a);
            }
            constexpr int PARTS = BN / 4;
            if (tid < GPT * PARTS) {
                const int i = tid / PARTS, part = tid % PARTS;
                cp_async16(st + C::XB + C::CBY + C::SBB + (i * BN + part * 4) * 4, xsum + (size_t)(gi0 + i) * Sp + t0 + part * 4);
            }
        }
    };

    /* which half of a 16-bit scale/bias word holds row r's value of group gi (qgemm's rule) */
    int sodd[2][2] = {{0, 0}, {0, 0}}, bodd[2][2] = {{0, 0}, {0, 0}};
    if constexpr (BITS != 16) {
#pragma unroll
        for (int m = 0; m < 2; m++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const size_t ri = (size_t)min(r0 + wr + 16 * m + 8 * h + g, N - 1) * ng;
                sodd[m][h] = (int)((((uintptr_t)w.scales >> 1) + ri) & 1);
                bodd[m][h] = (int)((((uintptr_t)w.biases >> 1) + ri) & 1);
            }
    }

    float acc[2][JT][4], part[2][JT][4];
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int j = 0; j < JT; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[m][j][i] = part[m][j][i] = 0.f;

#pragma unroll
    for (int s = 0; s < MG_S - 1; s++) {
        if (s < nk) load(s, s);
        cp_commit();
    }
    for (int kt = 0; kt < nk; kt++) {
        cp_wait<MG_S - 2>();
        __syncthreads(); /* stage kt visible to all; stage kt-1 free for the copy below */
        if (kt + MG_S - 1 < nk) load((kt + MG_S - 1) % MG_S, kt + MG_S - 1);
        cp_commit();
        const unsigned char *st = smem + (size_t)(kt % MG_S) * C::STAGE;
        const unsigned char *cs = st + C::XB;
#pragma unroll
        for (int c = 0; c < 2; c++) { /* 32 columns: two k-steps */
            uint32_t a[2][2][4];      /* [m tile][k-step][fragment] */
#pragma unroll
            for (int m = 0; m < 2; m++) {
                const unsigned char *ra = cs + (wr + 16 * m + g) * CSTR, *rb = ra + 8 * CSTR;
                if constexpr (BITS != 16) qg_afrag<BITS>(a[m], ra, rb, c, q);
                else { /* bf16: columns 8q..8q+7 of the 32 as (0,4) (1,5) | (2,6) (3,7), x̂'s order */
                    const uint4 va = ((const uint4 *)ra)[4 * c + q], vb = ((const uint4 *)rb)[4 * c + q];
                    a[m][0][0] = __byte_perm(va.x, va.z, 0x5410); a[m][0][1] = __byte_perm(vb.x, vb.z, 0x5410);
                    a[m][0][2] = __byte_perm(va.x, va.z, 0x7632); a[m][0][3] = __byte_perm(vb.x, vb.z, 0x7632);
                    a[m][1][0] = __byte_perm(va.y, va.w, 0x5410); a[m][1][1] = __byte_perm(vb.y, vb.w, 0x5410);
                    a[m][1][2] = __byte_perm(va.y, va.w, 0x7632); a[m][1][3] = __byte_perm(vb.y, vb.w, 0x7632);
                }
            }
            /* a group's first columns: its partial sums start from zero (GROUP 128: zeroed at the flush) */
            const bool fresh = BITS != 16 && GROUP <= 64 && (32 * c) % GROUP == 0;
#pragma unroll
            for (int j = 0; j < JT; j++) {
                const int row = wt + 8 * j + g;
                const unsigned char *xp = st + row * 128 + (((4 * c + q) ^ ((row & 1) << 2)) << 4);
                const uint4 xv = *(const uint4 *)xp, xl = *(const uint4 *)(xp + C::XT);
#pragma unroll
                for (int m = 0; m < 2; m++) {
                    if constexpr (BITS == 16) mg_mma(acc[m][j], a[m], xv, xl, false); /* no groups: straight into acc */
                    else mg_mma(part[m][j], a[m], xv, xl, fresh);
                }
            }
            if constexpr (BITS != 16) {
                /* end of a group: acc = bias·Σx̂ + (scale·partial + acc) */
                if ((kt * MG_BK + 32 * c + 32) % GROUP == 0) {
                    const uint32_t *sbw = (const uint32_t *)(st + C::XB + C::CBY);
                    const float *xsm = (const float *)(st + C::XB + C::CBY + C::SBB);
                    const int gg = GROUP == 32 ? c : 0, gi = (kt * MG_BK + 32 * c) / GROUP;
                    float sc[2][2], bi[2][2];
#pragma unroll
                    for (int m = 0; m < 2; m++)
#pragma unroll
                        for (int h = 0; h < 2; h++) {
                            const int row = wr + 16 * m + 8 * h + g;
                            sc[m][h] = sb_word_val(sbw[(gg * 2) * MG_BM + row], w.sb_dtype, sodd[m][h] ^ (gi & 1));
                            bi[m][h] = sb_word_val(sbw[(gg * 2 + 1) * MG_BM + row], w.sb_dtype, bodd[m][h] ^ (gi & 1));
                        }
#pragma unroll
                    for (int j = 0; j < JT; j++) {
                        const float2 xs = *(const float2 *)(xsm + gg * BN + wt + 8 * j + 2 * q);
#pragma unroll
                        for (int m = 0; m < 2; m++)
#pragma unroll
                            for (int i = 0; i < 4; i++) {
                                acc[m][j][i] = __fmaf_rn(bi[m][i >> 1], (i & 1) ? xs.y : xs.x, __fmaf_rn(sc[m][i >> 1], part[m][j][i], acc[m][j][i]));
                                if (GROUP > 64) part[m][j][i] = 0.f;
                            }
                    }
                }
            }
        }
    }
    cp_wait<0>();
    const int ycol = wi * N;
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int j = 0; j < JT; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int n = r0 + wr + 16 * m + g + 8 * (i >> 1), t = t0 + wt + 8 * j + 2 * q + (i & 1);
                if (n < N && t < t1) y[(size_t)t * ldy + ycol + n] = acc[m][j][i];
            }
}

/* The step's pairs sorted into expert segments (one block of 1024 threads, E <= 1024). Slot
 * order inside a segment comes from shared-memory atomics: arbitrary, and harmless (above).
 * Tiles: an expert's n pairs make n / BN tiles of BN slots; a remainder of more than half a
 * tile makes one more, a smaller one (tail = 1, BN >= 64) a tile of BN/2 slots in the second
 * list (tiles + tail_at) — the half-empty last tiles cost half. ntiles[0], [1]: the lists' lengths. */
__global__ void __launch_bounds__(1024) mg_sort_kernel(int *__restrict__ pos, int *__restrict__ tok, int4 *__restrict__ tiles, int *__restrict__ ntiles,
                                                       const int32_t *__restrict__ ids, int P, int k, int E, int BN, int tail, int tail_at, int Sp) {
    __shared__ int cnt[1024], off[1024], wsum[3][32];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    cnt[tid] = 0;
    __syncthreads();
    for (int p = tid; p < P; p += 1024) {
        const int e = ids[p];
        if (e >= 0 && e < E) atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    /* exclusive scans of the aligned segment sizes and of the two lists' tile counts */
    const int n = tid < E ? cnt[tid] : 0, rem = n % BN;
    const int small = tail && rem > 0 && rem <= BN / 2;
    int v[3] = {(n + MG_ALIGN - 1) / MG_ALIGN * MG_ALIGN, n / BN + (rem > 0 && !small), small}, x[3];
#pragma unroll
    for (int q = 0; q < 3; q++) {
        x[q] = v[q];
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int u = __shfl_up_sync(0xffffffffu, x[q], o);
            if (lane >= o) x[q] += u;
        }
        if (lane == 31) wsum[q][warp] = x[q];
    }
    __syncthreads();
    if (warp == 0) {
#pragma unroll
        for (int q = 0; q < 3; q++) {
            int y = wsum[q][lane];
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const int u = __shfl_up_sync(0xffffffffu, y, o);
                if (lane >= o) y += u;
            }
            wsum[q][lane] = y; /* inclusive over warps */
        }
    }
    __syncthreads();
    int ex[3];
#pragma unroll
    for (int q = 0; q < 3; q++) ex[q] = x[q] - v[q] + (warp ? wsum[q][warp - 1] : 0);
    const int used = wsum[0][31];
    if (tid < E) {
        const int ea = ex[0];
        off[tid] = ea;
        for (int i = 0; i < v[1]; i++) tiles[ex[1] + i] = make_int4(tid, ea + i * BN, min(ea + (i + 1) * BN, ea + n), 0);
        if (small) tiles[tail_at + ex[2]] = make_int4(tid, ea + n - rem, ea + n, 0);
        for (int s = ea + n; s < ea + v[0]; s++) tok[s] = -1;
    }
    if (tid == 0) { ntiles[0] = wsum[1][31]; ntiles[1] = wsum[2][31]; }
    for (int s = used + tid; s < Sp; s += 1024) tok[s] = -1;
    __syncthreads();
    for (int p = tid; p < P; p += 1024) {
        const int e = ids[p];
        int s = -1;
        if (e >= 0 && e < E) { s = atomicAdd(&off[e], 1); tok[s] = p / k; }
        pos[p] = s;
    }
}

/* x̂ [2][Sp, K] bf16 (hi, then lo) in qgemm's column order and Σx̂ [K/group][Sp]; slot s's row
 * is x[tok[s]] (GLU = 0) or act(g)·u of src[s] = [g | u] (GLU = 1, rows of 2K); zeros where
 * tok[s] < 0. A thread per 8-column unit, a group's units on adjacent lanes (Sp·K/8 % 32 == 0). */
template <int GLU>
__global__ void mg_prep_kernel(__nv_bfloat16 *__restrict__ xq, float *__restrict__ xsum, const float *__restrict__ src, const int *__restrict__ tok,
                               int Sp, int K, int group, int gelu) {
    const int upr = K / 8, gl = group / 8;
    const size_t n = (size_t)Sp * upr;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const int s = (int)(i / upr), u = (int)(i % upr), t = tok[s];
        float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        if (t >= 0) {
            if (!GLU) {
                const float4 a = __ldg((const float4 *)(src + (size_t)t * K + 8 * u)), b = __ldg((const float4 *)(src + (size_t)t * K + 8 * u + 4));
                v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
            } else {
                const float *gr = src + (size_t)s * 2 * K + 8 * u, *ur = gr + K;
#pragma unroll
                for (int j = 0; j < 8; j++) v[j] = glu_act(gr[j], ur[j], gelu);
            }
        }
        /* hi = bf16(v), lo = bf16(v - hi); stored pairs (0,4) (1,5) (2,6) (3,7) */
        uint32_t hw[4], lw[4];
        float s8 = 0.f, f[8];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const __nv_bfloat162 h = __floats2bfloat162_rn(v[j], v[j + 4]);
            const float2 hf = __bfloat1622float2(h);
            const __nv_bfloat162 l = __floats2bfloat162_rn(__fsub_rn(v[j], hf.x), __fsub_rn(v[j + 4], hf.y));
            const float2 lf = __bfloat1622float2(l);
            hw[j] = bf2_bits(h); lw[j] = bf2_bits(l);
            f[2 * j] = __fadd_rn(hf.x, lf.x); f[2 * j + 1] = __fadd_rn(hf.y, lf.y); /* x̂ as the MMAs see it */
        }
        ((uint4 *)xq)[i] = make_uint4(hw[0], hw[1], hw[2], hw[3]);
        ((uint4 *)xq)[n + i] = make_uint4(lw[0], lw[1], lw[2], lw[3]);
        /* f = (x̂0, x̂4, x̂1, x̂5, ...): qgemm's prep order of the sum */
        s8 = __fadd_rn(__fadd_rn(__fadd_rn(f[0], f[2]), __fadd_rn(f[4], f[6])), __fadd_rn(__fadd_rn(f[1], f[3]), __fadd_rn(f[5], f[7])));
        for (int o = 1; o < gl; o <<= 1) s8 = __fadd_rn(s8, __shfl_xor_sync(0xffffffffu, s8, o));
        if (u % gl == 0) xsum[(size_t)(u / gl) * Sp + s] = s8;
    }
}

/* out[t, c] = Σ over the token's pairs in ascending expert id of wts · y[slot] (moe.cu's scatter
 * order; pairs without a slot — an id outside [0, E) — add nothing). A block per token: one
 * thread puts its pairs in that order (k ≤ MOE_MAX_K), then the block walks the columns. */
__global__ void mg_combine_kernel(float *__restrict__ out, const float *__restrict__ y, const int *__restrict__ pos, const int32_t *__restrict__ ids,
                                  const float *__restrict__ wts, int k, int H) {
    __shared__ int sp[MOE_MAX_K];
    __shared__ float sw[MOE_MAX_K];
    __shared__ int nn;
    const int t = blockIdx.x;
    if (threadIdx.x == 0) {
        const int32_t *id = ids + (size_t)t * k;
        int last = -1, m = 0;
        for (int n = 0; n < k; n++) {
            const int j = moe_next(id, k, last);
            if (j < 0) break;
            last = id[j];
            const int s = pos[(size_t)t * k + j];
            if (s >= 0) { sp[m] = s; sw[m] = wts[(size_t)t * k + j]; m++; }
        }
        nn = m;
    }
    __syncthreads();
    const int m = nn;
    for (int c = threadIdx.x; c < H; c += blockDim.x) {
        float acc = 0.f;
        for (int n = 0; n < m; n++) acc = fmaf(sw[n], y[(size_t)sp[n] * H + c], acc);
        out[(size_t)t * H + c] = acc;
    }
}

template <int BITS, int GROUP, int BN, int MINB>
void launch_gemm1(cuda_impl_t *c, float *y, int ldy, const __nv_bfloat16 *xq, const float *xs, int Sp, const int4 *tiles, const int *ntiles,
                  int max_tiles, const dweight_t *tab, int E, int which, int nw, int rows) {
    constexpr size_t smem = (size_t)MG_S * mg<BITS, GROUP, BN>::STAGE;
    static bool attr;
    if (!attr) {
        cudaCheck(cudaFuncSetAttribute(mg_gemm_kernel<BITS, GROUP, BN, MINB>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        attr = true;
    }
    const int nrb = cdiv(rows, MG_BM);
    mg_gemm_kernel<BITS, GROUP, BN, MINB><<<dim3(max_tiles, nrb * nw), MG_THREADS, smem, c->stream>>>(y, ldy, xq, xs, Sp, tiles, ntiles, tab, E, which, nrb);
    cudaLaunchCheck();
}

/* two blocks an SM (registers capped at 128) where their shared memory fits — the default
 * (session 23: moe synth prefill +11 % at BN 64, c=64 even); KILN_CUDA_MOE_MINB=1: one */
template <int BITS, int GROUP, int BN>
void launch_gemm(cuda_impl_t *c, float *y, int ldy, const __nv_bfloat16 *xq, const float *xs, int Sp, const int4 *tiles, const int *ntiles,
                 int max_tiles, const dweight_t *tab, int E, int which, int nw, int rows) {
    const char *e = getenv("KILN_CUDA_MOE_MINB");
    constexpr bool fits2 = 2 * (size_t)MG_S * mg<BITS, GROUP, BN>::STAGE <= 220 * 1024 && BN <= 64;
    if (fits2 && !(e && atoi(e) == 1)) launch_gemm1<BITS, GROUP, BN, fits2 ? 2 : 1>(c, y, ldy, xq, xs, Sp, tiles, ntiles, max_tiles, tab, E, which, nw, rows);
    else launch_gemm1<BITS, GROUP, BN, 1>(c, y, ldy, xq, xs, Sp, tiles, ntiles, max_tiles, tab, E, which, nw, rows);
}

template <int BN>
void launch_bn(cuda_impl_t *c, int bits, int group, float *y, int ldy, const __nv_bfloat16 *xq, const float *xs, int Sp, const int4 *tiles,
               const int *ntiles, int max_tiles, const dweight_t *tab, int E, int which, int nw, int rows) {
#define MG_L(B, G) launch_gemm<B, G, BN>(c, y, ldy, xq, xs, Sp, tiles, ntiles, max_tiles, tab, E, which, nw, rows)
    if (bits == 16) MG_L(16, 64);
    else if (bits == 4) { if (group == 32) MG_L(4, 32); else if (group == 64) MG_L(4, 64); else MG_L(4, 128); }
    else { if (group == 32) MG_L(8, 32); else if (group == 64) MG_L(8, 64); else MG_L(8, 128); }
#undef MG_L
}

} // namespace

/* 0 when every expert weight of the layer suits the grouped kernels: MLX 4/8-bit with groups
 * 32/64/128 or bf16, one format for all of gate/up and one for down, K % 64 == 0, 16-byte
 * aligned data, aligned scales/biases (w: the table's host copy, [3E]). */
int cuda_moe_gemm_ok(const dweight_t *w, int E) {
    for (int q = 0; q < 3; q++)
        for (int e = 0; e < E; e++) {
            const dweight_t *a = &w[q * E + e], *f = &w[(q == 2 ? 2 : 0) * E];
            if (a->dtype != f->dtype || a->bits != f->bits || a->group != f->group || a->sb_dtype != f->sb_dtype || a->rows != f->rows ||
                a->cols != f->cols)
                return -1;
            if (a->cols % MG_BK || ((uintptr_t)a->data & 15)) return -1;
            if (a->dtype == DT_BF16) continue;
            if (a->dtype != DT_U32 || (a->bits != 4 && a->bits != 8) || (a->group != 32 && a->group != 64 && a->group != 128)) return -1;
            const uintptr_t am = a->sb_dtype == DT_F32 ? 3 : 1;
            if (((uintptr_t)a->scales & am) || ((uintptr_t)a->biases & am)) return -1;
        }
    return 0;
}

/* The grouped path (moe.cu decides when): out [T, H] from x [T, H], the step's ids/wts [T, k],
 * the layer's expert table tab (device, [gate E][up E][down E]) and its host copy hw. Scratch
 * grows in *bufs (moe.cu's state); H/Ie from the weights. */
void cuda_moe_gemm(cuda_impl_t *c, void **bufs, size_t *bytes, float *out, const float *x, int T, int k, const int32_t *ids, const float *wts,
                   const dweight_t *tab, const dweight_t *hw, int E, int gelu) {
    const int P = T * k, Ie = hw[0].rows, H = hw[0].cols;
    const char *bne = getenv("KILN_CUDA_MOE_BN"); /* a tile size forced, for measuring */
    const int bnf = bne ? atoi(bne) : 0;
    const int BN = bnf == 32 || bnf == 64 || bnf == 128 ? bnf : P <= 32 * E ? 32 : P <= 64 * E ? 64 : 128;
    /* slots: every pair, each segment padded to MG_ALIGN, then rounded to 32 (the prep's warps);
     * the tiles may read BN rows past the last segment */
    const int used_max = (P + E * (MG_ALIGN - 1) + 31) / 32 * 32, Sp = used_max + 128;
    /* the tail list (tiles of BN/2 for remainders of at most half a tile): BN >= 64, KILN_CUDA_MOE_TAIL=0 off */
    const char *te = getenv("KILN_CUDA_MOE_TAIL");
    const int tail = BN >= 64 && !(te && !strcmp(te, "0"));
    const int max_tiles = (P + BN - 1) / BN + E, tail_at = max_tiles;
    const int Kmax = H > Ie ? H : Ie;
    int *pos = (int *)cuda_scratch(c, &bufs[0], &bytes[0], sizeof(int) * ((size_t)P + Sp + 2));
    int *tok = pos + P, *ntiles = tok + Sp;
    int4 *tiles = (int4 *)cuda_scratch(c, &bufs[1], &bytes[1], sizeof(int4) * (size_t)(max_tiles + E));
    __nv_bfloat16 *xq = (__nv_bfloat16 *)cuda_scratch(c, &bufs[2], &bytes[2], (size_t)2 * Sp * Kmax * 2);
    float *xs = (float *)cuda_scratch(c, &bufs[3], &bytes[3], sizeof(float) * (size_t)(Kmax / 32) * Sp);
    float *gu = (float *)cuda_scratch(c, &bufs[4], &bytes[4], sizeof(float) * (size_t)Sp * 2 * Ie);
    float *yd = (float *)cuda_scratch(c, &bufs[5], &bytes[5], sizeof(float) * (size_t)Sp * H);

    mg_sort_kernel<<<1, 1024, 0, c->stream>>>(pos, tok, tiles, ntiles, ids, P, k, E, BN, tail, tail_at, Sp);
    cudaLaunchCheck();
    const int g1 = hw[0].dtype == DT_BF16 ? 64 : hw[0].group, g2 = hw[2 * E].dtype == DT_BF16 ? 64 : hw[2 * E].group;
    auto prep = [&](const float *src, int K, int group, int glu) {
        const size_t units = (size_t)Sp * K / 8;
        const int pg = (int)(units / 256 < 8192 ? (units + 255) / 256 : 8192);
        if (glu) mg_prep_kernel<1><<<pg, 256, 0, c->stream>>>(xq, xs, src, tok, Sp, K, group, gelu);
        else mg_prep_kernel<0><<<pg, 256, 0, c->stream>>>(xq, xs, src, tok, Sp, K, group, gelu);
        cudaLaunchCheck();
    };
    auto gemm = [&](const dweight_t &f, float *y, int ldy, int which, int nw) {
        const int bits = f.dtype == DT_BF16 ? 16 : f.bits;
        if (BN == 32) launch_bn<32>(c, bits, f.group, y, ldy, xq, xs, Sp, tiles, ntiles, max_tiles, tab, E, which, nw, f.rows);
        else if (BN == 64) launch_bn<64>(c, bits, f.group, y, ldy, xq, xs, Sp, tiles, ntiles, max_tiles, tab, E, which, nw, f.rows);
        else launch_bn<128>(c, bits, f.group, y, ldy, xq, xs, Sp, tiles, ntiles, max_tiles, tab, E, which, nw, f.rows);
        if (!tail) return; /* the tail list: at most one tile per expert */
        if (BN == 64) launch_bn<32>(c, bits, f.group, y, ldy, xq, xs, Sp, tiles + tail_at, ntiles + 1, E, tab, E, which, nw, f.rows);
        else launch_bn<64>(c, bits, f.group, y, ldy, xq, xs, Sp, tiles + tail_at, ntiles + 1, E, tab, E, which, nw, f.rows);
    };
    prep(x, H, g1, 0);
    gemm(hw[0], gu, 2 * Ie, 0, 2); /* gate and up: [slot, 2·Ie] */
    prep(gu, Ie, g2, 1);
    gemm(hw[2 * E], yd, H, 2, 1);  /* down: [slot, H] */
    mg_combine_kernel<<<T, 256, 0, c->stream>>>(out, yd, pos, ids, wts, k, H);
    cudaLaunchCheck();
}
