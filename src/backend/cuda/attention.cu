/* attention.cu — paged attention over ragged rows: decode, prefill and mixed steps.
 *
 * Reference: ref_attention (backend/cpu/ref.c): for each token and head, softmax over the
 * row's cached positions [lo, pos] (lo = pos - window + 1 with a sliding window), scores
 * q·k·scale, optionally soft-capped cap·tanh(s/cap), then the weighted sum of V.
 *
 * Here (flash attention on CUDA cores, f32 math over any cache dtype):
 *  - A block owns a tile of a row's consecutive tokens times the query heads that share one
 *    KV head (GQA), at most 16 query vectors; four per warp. K/V for 32 positions at a time
 *    are read once through the block table into shared memory (converted to f32) and used
 *    by all of them, so a prefill tile reads the cache once, not once per token.
 *  - Scores: lane j takes key j of the tile (K rows padded to hd+1 floats: no bank
 *    conflicts) and sums over d in order. Softmax is online (running max and sum).
 *    P·V: lane l owns dims l, l+32, ... of the output.
 *  - Split-K (flash-decoding): when tiles × KV heads would not fill the GPU (decode), each
 *    tile's key range is cut into n_splits pieces run by different blocks; a second kernel
 *    merges the partial (max, sum, o) triples. The split count depends on the step's shape,
 *    so on the GPU a token's result can change in the last bits with batch composition
 *    (docs/cuda.md).
 *  - Decode steps (one token per row, head_dim 64/128/256) take attn_decode_kernel instead:
 *    the group's queries and the keys spread over all four warps (KILN_CUDA_ATTN=tiled
 *    keeps the tiled kernel, for comparison). */
#include <math.h>
#include <cooperative_groups.h>
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/mma_util.cuh"
#include "backend/cuda/rope_pair.cuh"
#include "backend/cuda/x16.cuh"

#define KT 32  /* keys per shared-memory tile */
#define QPW 4  /* query vectors per warp      */
#define QMAX 16

typedef struct attn_dev {
    const float *q;
    float *out, *part;         /* part: [n_splits][T * n_heads][hd + 2] when n_splits > 1 */
    __nv_bfloat16 *out16;      /* attn_dec_mma_kernel: NULL, or out rounded to bf16 as well (x16.cuh: the o projection's x) */
    const int32_t *pos, *tables;
    const attn_tile_t *tiles;
    const void *k, *v;
    int kv_dtype, block_size, max_blocks;
    int T, n_heads, n_kv_heads, hd, group, hc, n_chunks, n_splits, window;
    int vec;                   /* head rows are whole 16-byte pieces: vector loads    */
    float scale, softcap;
    /* attn_dec_mma_kernel<.., ROPE = true> (cuda_rope_attention_decode): q, k, v as the QKV
     * matmul left them (q = rq), rotated here by rope_pair with inv[half] and ms */
    float *rq, *rk;
    const float *rv, *inv;
    float ms;
    int half;
    /* ROPE with qwen3's per-head q/k RMSNorm (cuda_rope_attention_decode with norm weights): qn, kn
     * (NULL: no head norms, llama), the norm's offset (0) and eps */
    const float *qn, *kn;
    float noff, neps;
    int kv_prewait; /* attn_dec_mma_kernel's first K/V tile before pdl_wait: 2 prefetched into L2 (default), 1 loaded (KILN_CUDA_ATTN_PREWAIT=1: racy), 0 neither */
    int q_keep;     /* ROPE: leave q as rope_kv_write leaves it (KILN_CUDA_ATTN_QKEEP=1); 0 (default): q is scratch, left as the QKV matmul wrote it */
} attn_dev_t;

template <int DPL>
__global__ void attn_kernel(attn_dev_t a) {
    extern __shared__ float smem[];
    const int hd = a.hd, hd1 = hd + 1;
    float *Ks = smem, *Vs = Ks + KT * hd1, *qs = Vs + KT * hd;
    const int tile_i = blockIdx.x / a.n_splits, split = blockIdx.x % a.n_splits;
    const int kvh = blockIdx.y / a.n_chunks, chunk = blockIdx.y % a.n_chunks;
    const attn_tile_t tile = a.tiles[tile_i];
    const int h0 = kvh * a.group + chunk * a.hc;
    const int nh_here = min(a.hc, a.group - chunk * a.hc);
    const int nq = tile.n * nh_here;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int *bt = a.tables + (size_t)tile.row * a.max_blocks;
    const size_t per_tok = (size_t)a.n_kv_heads * hd;

    for (int i = threadIdx.x; i < nq * hd; i += blockDim.x) {
        int qi = i / hd, d = i % hd, t = tile.t0 + qi / nh_here, h = h0 + qi % nh_here;
        qs[qi * hd + d] = a.q[((size_t)t * a.n_heads + h) * hd + d];
    }
    /* the block's key range: positions are consecutive within a row */
    const int p_first = a.pos[tile.t0], p_last = a.pos[tile.t0 + tile.n - 1];
    int kv_lo = a.window > 0 ? max(0, p_first - a.window + 1) : 0, kv_hi = p_last + 1;
    int span = (kv_hi - kv_lo + a.n_splits - 1) / a.n_splits;
    span = (span + KT - 1) / KT * KT;
    const int s_lo = kv_lo + split * span, s_hi = min(kv_hi, s_lo + span);

    float o[QPW][DPL], m[QPW], l[QPW];
    int pq[QPW], lq[QPW];
#pragma unroll
    for (int k = 0; k < QPW; k++) {
        m[k] = -INFINITY;
        l[k] = 0.f;
#pragma unroll
        for (int i = 0; i < DPL; i++) o[k][i] = 0.f;
        int qi = warp * QPW + k;
        int t = tile.t0 + (qi < nq ? qi / nh_here : 0);
        pq[k] = a.pos[t];
        lq[k] = a.window > 0 ? max(0, pq[k] - a.window + 1) : 0;
    }
    for (int j0 = s_lo; j0 < s_hi; j0 += KT) {
        __syncthreads(); /* previous tile fully used (and qs written on the first pass) */
        const int nk = min(KT, s_hi - j0);
        if (a.vec) {
            /* 16-byte pieces, all of a thread's loads issued before any is used: a tile
             * costs about one memory round trip, not one per element */
            const int es = a.kv_dtype == DT_F32 ? 4 : 2, epp = 16 / es, ppk = hd / epp;
#pragma unroll 4
            for (int i = threadIdx.x; i < nk * ppk; i += blockDim.x) {
                const int kk = i / ppk, d0 = (i % ppk) * epp, kp = j0 + kk;
                const size_t off = ((size_t)bt[kp / a.block_size] * a.block_size + kp % a.block_size) * per_tok + (size_t)kvh * hd + d0;
                const uint4 kr = __ldg((const uint4 *)((const char *)a.k + off * es));
                const uint4 vr = __ldg((const uint4 *)((const char *)a.v + off * es));
                const uint32_t kw[4] = {kr.x, kr.y, kr.z, kr.w}, vw[4] = {vr.x, vr.y, vr.z, vr.w};
                float *kd = Ks + kk * hd1 + d0, *vd = Vs + kk * hd + d0;
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    if (es == 4) { kd[j] = __uint_as_float(kw[j]); vd[j] = __uint_as_float(vw[j]); }
                    else if (a.kv_dtype == DT_BF16) {
                        kd[2 * j] = __uint_as_float(kw[j] << 16); kd[2 * j + 1] = __uint_as_float(kw[j] & 0xffff0000u);
                        vd[2 * j] = __uint_as_float(vw[j] << 16); vd[2 * j + 1] = __uint_as_float(vw[j] & 0xffff0000u);
                    } else {
                        kd[2 * j] = __half2float(__ushort_as_half((unsigned short)(kw[j] & 0xffffu)));
                        kd[2 * j + 1] = __half2float(__ushort_as_half((unsigned short)(kw[j] >> 16)));
                        vd[2 * j] = __half2float(__ushort_as_half((unsigned short)(vw[j] & 0xffffu)));
                        vd[2 * j + 1] = __half2float(__ushort_as_half((unsigned short)(vw[j] >> 16)));
                    }
                }
            }
        } else
            for (int i = threadIdx.x; i < nk * hd; i += blockDim.x) {
                int kk = i / hd, d = i % hd, kp = j0 + kk;
                size_t off = ((size_t)bt[kp / a.block_size] * a.block_size + kp % a.block_size) * per_tok + (size_t)kvh * hd + d;
                Ks[kk * hd1 + d] = ld_f(a.k, a.kv_dtype, off);
                Vs[kk * hd + d] = ld_f(a.v, a.kv_dtype, off);
            }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < QPW; k++) {
            const int qi = warp * QPW + k;
            if (qi >= nq) break;
            const int kp = j0 + lane;
            const bool valid = lane < nk && kp >= lq[k] && kp <= pq[k];
            float s = -INFINITY;
            if (valid) {
                const float *qv = qs + qi * hd, *kv = Ks + lane * hd1;
                float acc = 0.f;
                for (int d = 0; d < hd; d++) acc += qv[d] * kv[d];
                s = acc * a.scale;
                if (a.softcap > 0.f) s = a.softcap * tanhf(s / a.softcap);
            }
            float mt = s;
            for (int off = 16; off > 0; off >>= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, off));
            if (mt == -INFINITY) continue;
            const float m_new = fmaxf(m[k], mt), corr = expf(m[k] - m_new);
            const float p = valid ? expf(s - m_new) : 0.f;
            float ps = p;
            for (int off = 16; off > 0; off >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, off);
            l[k] = l[k] * corr + ps;
            m[k] = m_new;
#pragma unroll
            for (int i = 0; i < DPL; i++) o[k][i] *= corr;
            for (int jj = 0; jj < nk; jj++) {
                const float pj = __shfl_sync(0xffffffffu, p, jj);
#pragma unroll
                for (int i = 0; i < DPL; i++) {
                    const int d = lane + 32 * i;
                    if (d < hd) o[k][i] = fmaf(pj, Vs[jj * hd + d], o[k][i]);
                }
            }
        }
    }
#pragma unroll
    for (int k = 0; k < QPW; k++) {
        const int qi = warp * QPW + k;
        if (qi >= nq) break;
        const int t = tile.t0 + qi / nh_here, h = h0 + qi % nh_here;
        const size_t qidx = (size_t)t * a.n_heads + h;
        if (a.n_splits == 1) {
            const float inv = 1.0f / l[k];
#pragma unroll
            for (int i = 0; i < DPL; i++) {
                const int d = lane + 32 * i;
                if (d < hd) a.out[qidx * hd + d] = o[k][i] * inv;
            }
        } else {
            float *pp = a.part + ((size_t)split * a.T * a.n_heads + qidx) * (hd + 2);
#pragma unroll
            for (int i = 0; i < DPL; i++) {
                const int d = lane + 32 * i;
                if (d < hd) pp[d] = o[k][i];
            }
            if (lane == 0) { pp[hd] = m[k]; pp[hd + 1] = l[k]; }
        }
    }
}

/* Merges the splits of one (token, head): o = Σ o_s·e^(m_s−M) / Σ l_s·e^(m_s−M). Splits ≤ 64
 * (both callers cap them): the split weights e^(m_s−M) are computed once, in parallel, into
 * shared memory, and the per-element sums issue their loads unconditionally (the old loops
 * were chains of dependent loads: ~9 us per call at 33 splits, ncu); sums in split order. */
__global__ void attn_combine_kernel(float *out, const float *part, int n_splits, size_t nq, int hd) {
    __shared__ float f[64], lw[64], red[2];
    const size_t qidx = blockIdx.x;
    const int tid = threadIdx.x;
    pdl_trigger(); /* the o-projection GEMV (PDL, matmul_gemv.cu) may start loading its weights */
    pdl_wait();    /* if launched with PDL after the decode kernel (opt-in): its partials are complete */
    /* head_dim <= threads: each thread's o values of every split are loaded FIRST, before the
     * max / weights / sum phases, so the whole kernel is about one memory round trip (ncu,
     * llama-3-8b batch 1 at 2048 positions, 33 splits: ~16 us when the loads waited behind
     * the three phases). Same sums in the same order as the loop below. */
    const bool pre = hd <= (int)blockDim.x;
    float pv[64];
    if (pre && tid < hd) {
#pragma unroll
        for (int s = 0; s < 64; s++) pv[s] = s < n_splits ? part[((size_t)s * nq + qidx) * (hd + 2) + tid] : 0.f;
    }
    if (tid < 32) { /* the max over splits (≤ 64): lane i looks at splits i and i + 32 */
        float mm = -INFINITY;
        if (tid < n_splits) mm = part[((size_t)tid * nq + qidx) * (hd + 2) + hd];
        if (tid + 32 < n_splits) mm = fmaxf(mm, part[((size_t)(tid + 32) * nq + qidx) * (hd + 2) + hd]);
        for (int o = 16; o > 0; o >>= 1) mm = fmaxf(mm, __shfl_xor_sync(0xffffffffu, mm, o));
        if (tid == 0) red[0] = mm;
    }
    __syncthreads();
    const float M = red[0];
    for (int s = tid; s < n_splits; s += blockDim.x) { /* an empty split (max -inf) weighs 0 */
        const float *pp = part + ((size_t)s * nq + qidx) * (hd + 2);
        const float ms = pp[hd], ls = pp[hd + 1];
        const float fs = ms == -INFINITY ? 0.f : expf(ms - M);
        f[s] = fs;
        lw[s] = fs != 0.f ? ls * fs : 0.f;
    }
    __syncthreads();
    if (tid == 0) { /* split order, from shared memory */
        float L = 0.f;
        for (int s = 0; s < n_splits; s++) L += lw[s];
        red[1] = L;
    }
    __syncthreads();
    const float L = red[1];
    if (pre) {
        if (tid < hd) {
            float acc = 0.f;
#pragma unroll
            for (int s = 0; s < 64; s++)
                if (s < n_splits) acc += f[s] != 0.f ? pv[s] * f[s] : 0.f;
            out[qidx * hd + tid] = acc / L;
        }
        return;
    }
    for (int d = tid; d < hd; d += blockDim.x) {
        float acc = 0.f;
        /* loads unconditional (an empty split's o may be anything: selected away), so
         * sixteen are in flight at a time instead of one dependent load per split */
#pragma unroll 16
        for (int s = 0; s < n_splits; s++) {
            const float pv = part[((size_t)s * nq + qidx) * (hd + 2) + d];
            acc += f[s] != 0.f ? pv * f[s] : 0.f;
        }
        out[qidx * hd + d] = acc / L;
    }
}

/* --- decode: every row one token (T == n_rows) ---
 * The tiled kernel above gives each block one KV head and lets one warp walk all of the
 * GQA group's queries over the keys: at batch-1 decode that is one busy warp per block and
 * ~0.25 TB/s of K/V. Here a block owns (row, KV head, up to DQB query heads of the group,
 * key split) and its four warps take a quarter of the split's keys each. In a warp, 16
 * lanes share a key (lane s holds dims s·DPL.. of it: one coalesced 16·DPL-element read of
 * the K or V row) and two keys go per step; a tile of DTK keys is scored for every query
 * (a 16-lane shuffle sum), then softmax-rescaled once, then accumulated into V. The warps'
 * (max, sum, o) are merged in shared memory; with n_splits > 1 the merged partials go to
 * attn_combine_kernel like the tiled kernel's. K/V are read from the cache once per block,
 * every query of the group uses them. */
#define DLPK 16  /* lanes per key            */
#define DTK 16   /* keys per warp tile (8 for head_dim 256: registers) */
#define DQB 4    /* query heads per block    */
#define DWARPS 4

/* CG: coherent ld.global.cg instead of ld.global.nc, for a row the kernel before (PDL) wrote */
template <int DPL, bool CG = false>
__device__ __forceinline__ void ld_row(float *f, const void *base, size_t off, int dt) {
    if (dt == DT_F32) {
        const float4 *p = (const float4 *)((const float *)base + off);
#pragma unroll
        for (int i = 0; i < DPL / 4; i++) {
            const float4 v = CG ? __ldcg(p + i) : __ldg(p + i);
            f[4 * i] = v.x; f[4 * i + 1] = v.y; f[4 * i + 2] = v.z; f[4 * i + 3] = v.w;
        }
    } else {
        /* DPL 16-bit values: 16-byte pieces (8 bytes when DPL is 4) */
        constexpr int W = DPL / 2 < 4 ? DPL / 2 : 4, N = DPL / (2 * W);
        const unsigned short *p = (const unsigned short *)base + off;
#pragma unroll
        for (int i = 0; i < N; i++) {
            uint32_t w[4];
            if (W == 4) {
                const uint4 v = CG ? __ldcg((const uint4 *)p + i) : __ldg((const uint4 *)p + i);
                w[0] = v.x; w[1] = v.y; w[2] = v.z; w[3] = v.w;
            } else {
                const uint2 v = CG ? __ldcg((const uint2 *)p + i) : __ldg((const uint2 *)p + i);
                w[0] = v.x; w[1] = v.y;
            }
#pragma unroll
            for (int j = 0; j < W; j++) {
                if (dt == DT_BF16) {
                    f[2 * W * i + 2 * j] = __uint_as_float(w[j] << 16);
                    f[2 * W * i + 2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
                } else {
                    f[2 * W * i + 2 * j] = __half2float(__ushort_as_half((unsigned short)(w[j] & 0xffffu)));
                    f[2 * W * i + 2 * j + 1] = __half2float(__ushort_as_half((unsigned short)(w[j] >> 16)));
                }
            }
        }
    }
}

/* 16-bit caches: a lane's DPL values of one K or V row kept as they are in memory (DPL/2
 * words: one 16-byte load for head_dim 128) and widened only when used, so a warp tile
 * holds twice the keys of the f32 tile in the same registers. */
template <int DPL, bool CG = false>
__device__ __forceinline__ void ld_raw(uint32_t *w, const void *base, size_t off) {
    const unsigned short *p = (const unsigned short *)base + off;
    if (DPL == 4) {
        const uint2 v = CG ? __ldcg((const uint2 *)p) : __ldg((const uint2 *)p);
        w[0] = v.x; w[1] = v.y;
    } else {
#pragma unroll
        for (int i = 0; i < DPL / 8; i++) {
            const uint4 v = CG ? __ldcg((const uint4 *)p + i) : __ldg((const uint4 *)p + i);
            w[4 * i] = v.x; w[4 * i + 1] = v.y; w[4 * i + 2] = v.z; w[4 * i + 3] = v.w;
        }
    }
}
template <int DPL>
__device__ __forceinline__ void widen(float *f, const uint32_t *w, bool bf) {
#pragma unroll
    for (int j = 0; j < DPL / 2; j++) {
        if (bf) {
            f[2 * j] = __uint_as_float(w[j] << 16);
            f[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
        } else {
            f[2 * j] = __half2float(__ushort_as_half((unsigned short)(w[j] & 0xffffu)));
            f[2 * j + 1] = __half2float(__ushort_as_half((unsigned short)(w[j] >> 16)));
        }
    }
}

/* A warp tile's K and V rows (key 2·st + kg of the tile for this lane's key group kg), zero
 * past w_hi and at position skip (-1: none). */
template <int DPL, bool RAW, int TK, int NW>
__device__ __forceinline__ void ld_tile(uint32_t (*kw)[NW], uint32_t (*vw)[NW], float (*kf)[DPL], float (*vf)[DPL], const attn_dev_t &a,
                                        const int *bt, size_t per_tok, size_t hoff, int k0, int kg, int w_hi, int skip) {
#pragma unroll
    for (int st = 0; st < TK / 2; st++) {
        const int kp = k0 + 2 * st + kg;
        if (RAW) {
#pragma unroll
            for (int i = 0; i < NW; i++) { kw[st][i] = 0u; vw[st][i] = 0u; }
        } else {
#pragma unroll
            for (int i = 0; i < DPL; i++) { kf[st][i] = 0.f; vf[st][i] = 0.f; }
        }
        if (kp < w_hi && kp != skip) {
            const size_t off = ((size_t)bt[kp / a.block_size] * a.block_size + kp % a.block_size) * per_tok + hoff;
            if (RAW) {
                ld_raw<DPL>(kw[st], a.k, off);
                ld_raw<DPL>(vw[st], a.v, off);
            } else {
                ld_row<DPL>(kf[st], a.k, off, a.kv_dtype);
                ld_row<DPL>(vf[st], a.v, off, a.kv_dtype);
            }
        }
    }
}

/* RAW = false: K/V rows widened to f32 at load (any cache dtype), TK·DPL = 64 floats.
 * RAW = true (f16/bf16 caches): rows kept as loaded, TK·DPL = 128 — a warp's 16 keys at
 * head_dim 128 (split-K gives each warp ~16 keys at batch 1) arrive in ONE memory round trip
 * instead of two; same math, but the tile boundaries (where the softmax rescales) move, so
 * the last bits differ from RAW = false. KILN_CUDA_ATTN_RAW=0: the f32 tiles, for A/B.
 * Measured (H200, ncu cold cache, llama-3-8b f16 cache at 2048 positions): batch 1 (33
 * splits) 16.0 -> 12.2 us per call; 62 rows x 1 split 645 -> 430 us; but 47 rows 333 -> 419
 * us: 202 registers instead of 167 leave 2 blocks per SM instead of 3, so 376 blocks take two
 * waves instead of one. A split count that fills whole waves (or 3 blocks per SM) is next. */
template <int DPL, bool RAW>
__global__ void __launch_bounds__(32 * DWARPS) attn_decode_kernel(attn_dev_t a) {
    /* keys per warp tile: every K and V row of a tile is loaded before any is used (one
     * memory round trip per tile) */
    constexpr int HD = DPL * DLPK, TK = (RAW ? 128 : 64) / DPL, NW = RAW ? DPL / 2 : 1;
    const bool bf = a.kv_dtype == DT_BF16;
    __shared__ float sm[DWARPS][DQB][HD + 2];
    const int ti = blockIdx.x / a.n_splits, split = blockIdx.x % a.n_splits;
    const int n_qc = (a.group + DQB - 1) / DQB, kvh = blockIdx.y / n_qc, qc = blockIdx.y % n_qc;
    const int h0 = kvh * a.group + qc * DQB, nqh = min(DQB, a.group - qc * DQB);
    const attn_tile_t tile = a.tiles[ti];
    const int t = tile.t0, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, sub = lane % DLPK, kg = lane / DLPK;
    const int *bt = a.tables + (size_t)tile.row * a.max_blocks;
    const size_t per_tok = (size_t)a.n_kv_heads * HD;
    pdl_trigger(); /* the merge / o-projection GEMV (PDL) may start */

    /* Before pdl_wait (launched with PDL: the kernel before, rope_kv_write, may still run):
     * the tile list, positions and block tables (host uploads) and the warp's first K/V tile —
     * every cached position but the step's own, p, which that kernel writes. Row p, q and
     * every later tile are read after the wait (row p with coherent .cg loads). Without PDL
     * the wait is a no-op: the same loads in the same order, the same result. */
    const int p = a.pos[t], lo = a.window > 0 ? max(0, p - a.window + 1) : 0, hi = p + 1;
    const int span = (hi - lo + a.n_splits - 1) / a.n_splits, s_lo = lo + split * span, s_hi = min(hi, s_lo + span);
    const int wspan = (max(0, s_hi - s_lo) + DWARPS - 1) / DWARPS, w_lo = s_lo + warp * wspan, w_hi = min(s_hi, w_lo + wspan);
    const size_t hoff = (size_t)kvh * HD + sub * DPL;
    /* K and V rows of a tile are loaded in one go (one memory round trip per tile); V waits
     * in registers while the scores and the softmax rescale are computed */
    float vf[RAW ? 1 : TK / 2][DPL], kf[RAW ? 1 : TK / 2][DPL];
    uint32_t kw[RAW ? TK / 2 : 1][NW], vw[RAW ? TK / 2 : 1][NW];
    /* f32 tiles (RAW = false): no prefetch, the loop as before (the prefetch cost 27
     * registers: 3 -> 2 blocks per SM, and the f32 tiles are taken where that matters) */
    if (RAW) ld_tile<DPL, RAW, TK, NW>(kw, vw, kf, vf, a, bt, per_tok, hoff, w_lo, kg, w_hi, p);
    pdl_wait();
#pragma unroll
    for (int st = 0; st < TK / 2; st++) { /* row p: written by the kernel before */
        const int kp = w_lo + 2 * st + kg;
        if (RAW && kp == p && kp < w_hi) {
            const size_t off = ((size_t)bt[kp / a.block_size] * a.block_size + kp % a.block_size) * per_tok + hoff;
            ld_raw<DPL, true>(kw[RAW ? st : 0], a.k, off);
            ld_raw<DPL, true>(vw[RAW ? st : 0], a.v, off);
        }
    }

    float q[DQB][DPL], o[DQB][DPL], m[DQB], l[DQB];
#pragma unroll
    for (int qi = 0; qi < DQB; qi++) {
        m[qi] = -INFINITY;
        l[qi] = 0.f;
#pragma unroll
        for (int i = 0; i < DPL; i++) {
            o[qi][i] = 0.f;
            q[qi][i] = qi < nqh ? a.q[((size_t)t * a.n_heads + h0 + qi) * HD + sub * DPL + i] : 0.f;
        }
    }
    for (int k0 = w_lo; k0 < w_hi;) {
        float s[TK / 2][DQB], mt[DQB];
#pragma unroll
        for (int qi = 0; qi < DQB; qi++) mt[qi] = -INFINITY;
        if (!RAW) ld_tile<DPL, RAW, TK, NW>(kw, vw, kf, vf, a, bt, per_tok, hoff, k0, kg, w_hi, -1);
#pragma unroll
        for (int st = 0; st < TK / 2; st++) {
            const bool valid = k0 + 2 * st + kg < w_hi;
            float kx[DPL];
            if (RAW) widen<DPL>(kx, kw[st], bf);
            else {
#pragma unroll
                for (int i = 0; i < DPL; i++) kx[i] = kf[st][i];
            }
#pragma unroll
            for (int qi = 0; qi < DQB; qi++) {
                float acc = 0.f;
#pragma unroll
                for (int i = 0; i < DPL; i++) acc = fmaf(q[qi][i], kx[i], acc);
#pragma unroll
                for (int off = 1; off < DLPK; off <<= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
                float sc = acc * a.scale;
                if (a.softcap > 0.f) sc = a.softcap * tanhf(sc / a.softcap);
                s[st][qi] = valid ? sc : -INFINITY;
                mt[qi] = fmaxf(mt[qi], s[st][qi]);
            }
        }
#pragma unroll
        for (int qi = 0; qi < DQB; qi++) {
            mt[qi] = fmaxf(mt[qi], __shfl_xor_sync(0xffffffffu, mt[qi], DLPK));
            const float m_new = fmaxf(m[qi], mt[qi]), corr = expf(m[qi] - m_new); /* the tile has a valid key: m_new finite */
            m[qi] = m_new;
            l[qi] *= corr;
#pragma unroll
            for (int i = 0; i < DPL; i++) o[qi][i] *= corr;
        }
#pragma unroll
        for (int st = 0; st < TK / 2; st++) {
            if (k0 + 2 * st + kg >= w_hi) continue;
            float vx[DPL];
            if (RAW) widen<DPL>(vx, vw[st], bf);
            else {
#pragma unroll
                for (int i = 0; i < DPL; i++) vx[i] = vf[st][i];
            }
#pragma unroll
            for (int qi = 0; qi < DQB; qi++) {
                const float pj = expf(s[st][qi] - m[qi]);
                l[qi] += pj;
#pragma unroll
                for (int i = 0; i < DPL; i++) o[qi][i] = fmaf(pj, vx[i], o[qi][i]);
            }
        }
        /* the next tile (loaded here, not at the loop's top: the registers of this one are
         * dead by now, none is live around the loop) */
        k0 += TK;
        if (RAW && k0 < w_hi) ld_tile<DPL, RAW, TK, NW>(kw, vw, kf, vf, a, bt, per_tok, hoff, k0, kg, w_hi, -1);
    }
    /* the two key lanes of the warp hold partial l and o with the same m: add them */
#pragma unroll
    for (int qi = 0; qi < DQB; qi++) {
        l[qi] += __shfl_xor_sync(0xffffffffu, l[qi], DLPK);
#pragma unroll
        for (int i = 0; i < DPL; i++) o[qi][i] += __shfl_xor_sync(0xffffffffu, o[qi][i], DLPK);
        if (kg == 0) {
#pragma unroll
            for (int i = 0; i < DPL; i++) sm[warp][qi][sub * DPL + i] = o[qi][i];
            if (sub == 0) { sm[warp][qi][HD] = m[qi]; sm[warp][qi][HD + 1] = l[qi]; }
        }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < nqh * HD; e += blockDim.x) {
        const int qi = e / HD, dd = e % HD;
        float M = -INFINITY;
        for (int w = 0; w < DWARPS; w++) M = fmaxf(M, sm[w][qi][HD]);
        float L = 0.f, acc = 0.f;
        if (M != -INFINITY)
            for (int w = 0; w < DWARPS; w++) {
                if (sm[w][qi][HD] == -INFINITY) continue;
                const float f = expf(sm[w][qi][HD] - M);
                L += sm[w][qi][HD + 1] * f;
                acc += sm[w][qi][dd] * f;
            }
        const size_t qidx = (size_t)t * a.n_heads + h0 + qi;
        if (a.n_splits == 1) a.out[qidx * HD + dd] = acc / L;
        else {
            float *pp = a.part + ((size_t)split * a.T * a.n_heads + qidx) * (HD + 2);
            pp[dd] = acc;
            if (dd == 0) { pp[HD] = M; pp[HD + 1] = L; }
        }
    }
}

/* --- decode on tensor cores: attn_dec_mma_kernel ("cuda" backend, f16/bf16 cache, head_dim 64/128) ---
 * A block = 8 warps over one (row, KV head, ≤ 8 query heads of the group, key split); the
 * splits of a (row, KV head) are one thread-block cluster and merge through distributed shared
 * memory at the end, so there is no second kernel (attn_combine_kernel) and no partials in
 * global memory. A warp takes 16-key tiles (tiles warp, warp + 8, ... of the block's range):
 *  - S^T = K·Q^T by mma.sync m16n8k16: the 16 keys are M, the ≤ 8 query heads N, head_dim K.
 *    Lane (g, c) loads the contiguous quarter c of K rows g and g + 8 straight into A fragments
 *    (the dims of each k-step are permuted the same way in Q's B fragments, which the block
 *    builds once in shared memory): no shared-memory staging of K/V, one memory round trip for
 *    the tile. K and V enter as stored (exact); Q·scale is split into two 16-bit terms, hi =
 *    r(q) and lo = r(q − hi) (two MMAs: 22 significant bits with f16, 16 with bf16).
 *  - Online softmax in base 2 per query column; P = exp2(s − m) split the same way.
 *  - O^T += V^T·P^T: V's rows (loaded like K's) become A fragments by movmatrix (an 8×8
 *    transpose in registers), P's C-fragment layout becomes the B fragment by movmatrix too.
 *  - Warps merge (max, sum, o) in shared memory (padded: conflict-free fragment stores), then
 *    each block stores its partial of every output into the shared memory of the block that
 *    owns it (rank e mod S; distributed shared memory), one cluster barrier, and each block
 *    merges its outputs from its own shared memory.
 * Precision: the class of attention_mma.cu's split path (bound 1e-4 relative in the tests),
 * not the CUDA-core kernels' 1e-5; "cuda-f32" keeps attn_decode_kernel. Split count and
 * cluster size by shape (and device) only. Taken at every decode step (session 14: also where
 * rows × KV heads × query chunks >= SMs, one split per block — qwen3-0.6b bf16 at 64 rows, ~190
 * positions, ~1.1 ms less GPU time per step than attn_decode_kernel, bench/cuda/RESULTS.md);
 * KILN_CUDA_ATTN_DEC=split: only the split steps (batch-1 decode; the default before), =old: never
 * (attn_decode_kernel + attn_combine_kernel, A/B); =all: every step (the default; the tests set it);
 * KILN_CUDA_ATTN_CLUSTER=N: at most N splits. */
#define MWARPS 8
#define MTK 16 /* keys per warp tile: the m16 of S^T */
#define MQ 8   /* query heads per block: the n8       */
#define MSMAX 16
/* TAB (KILN_CUDA_ATTN_TAB, default on): the step's positions and block tables as a kernel parameter
 * (pos[T], then tables[T][max_blocks]) where they fit, instead of the uploaded copies in device
 * memory — read through the constant cache, so the first K/V tile's addresses do not wait on two
 * dependent loads from DRAM (between two layers' attentions ~0.5 GB of weights pass through L2) */
#define DM_TAB 520
template <bool TAB> struct dm_tab { int v[TAB ? DM_TAB : 1]; };

/* the transpose of an 8×8 16-bit matrix held one 32-bit word per lane (row lane/4, cols 2(lane%4)..) */
__device__ __forceinline__ uint32_t dm_trans(uint32_t x) {
    uint32_t y;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
    return y;
}
/* quarter c of a K or V row (HD/4 16-bit values, HD/8 words) */
template <int HD, bool CG>
__device__ __forceinline__ void dm_ld_row(uint32_t *w, const void *base, size_t off) {
    const uint4 *p = (const uint4 *)((const unsigned short *)base + off);
#pragma unroll
    for (int i = 0; i < HD / 32; i++) {
        const uint4 v = CG ? __ldcg(p + i) : __ldg(p + i);
        w[4 * i] = v.x; w[4 * i + 1] = v.y; w[4 * i + 2] = v.z; w[4 * i + 3] = v.w;
    }
}
template <typename T16> __device__ __forceinline__ T16 dm_cvt(float x);
template <> __device__ __forceinline__ __half dm_cvt<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 dm_cvt<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
/* rows kb + g and kb + g + 8 of K (KV & 1) and V (KV & 2); zero at or past end. mode 0: skip
 * row p (before pdl_wait: the kernel before writes it); 1: every row, row p coherent (.cg);
 * 2: row p only (.cg), the rest left as they are */
template <int HD, int KV>
__device__ __forceinline__ void dm_ld_tile(uint32_t (*kr)[HD / 8], uint32_t (*vr)[HD / 8], const attn_dev_t &a, const int *bt,
                                           size_t per_tok, size_t hoff, int kb, int g, int end, int p, int mode) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int kp = kb + g + 8 * h;
        if (mode != 2) {
#pragma unroll
            for (int i = 0; i < HD / 8; i++) {
                if (KV & 1) kr[h][i] = 0u;
                if (KV & 2) vr[h][i] = 0u;
            }
        }
        const bool want = kp < end && (mode == 0 ? kp != p : mode == 2 ? kp == p : true);
        if (want) {
            const size_t off = ((size_t)bt[kp / a.block_size] * a.block_size + kp % a.block_size) * per_tok + hoff;
            if (kp == p) {
                if (KV & 1) dm_ld_row<HD, true>(kr[h], a.k, off);
                if (KV & 2) dm_ld_row<HD, true>(vr[h], a.v, off);
            } else {
                if (KV & 1) dm_ld_row<HD, false>(kr[h], a.k, off);
                if (KV & 2) dm_ld_row<HD, false>(vr[h], a.v, off);
            }
        }
    }
}

/* the same rows as dm_ld_tile(mode 0) into L2 only (prefetch.global.L2: no data reaches a register or
 * L1, so a row some earlier kernel still writes is read after pdl_wait as it then is — the race that
 * kv_prewait's register loads had cannot happen); the loads after the wait then hit L2 */
template <int HD>
__device__ __forceinline__ void dm_pf_tile(const attn_dev_t &a, const int *bt, size_t per_tok, size_t hoff, int kb, int g, int end, int p) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int kp = kb + g + 8 * h;
        if (kp < end && kp != p) {
            const size_t off = ((size_t)bt[kp / a.block_size] * a.block_size + kp % a.block_size) * per_tok + hoff;
            asm volatile("prefetch.global.L2 [%0];\n" ::"l"((const unsigned short *)a.k + off));
            asm volatile("prefetch.global.L2 [%0];\n" ::"l"((const unsigned short *)a.v + off));
        }
    }
}

/* ROPE: the block's nqh raw q heads (token t, from head h0) into shared memory dst[nqh][HD], float4 by float4
 * through L2 (the QKV matmul before this kernel wrote them); the start and, with head norms, the end use it */
template <int HD>
__device__ __forceinline__ void dm_ld_q(float *dst, const attn_dev_t &a, int t, int h0, int nqh) {
    for (int e = threadIdx.x; e < nqh * (HD / 4); e += blockDim.x) {
        const int n = e / (HD / 4), d4 = e % (HD / 4);
        *(float4 *)(dst + n * HD + 4 * d4) = __ldcg((const float4 *)(a.rq + ((size_t)t * a.n_heads + h0 + n) * HD) + d4);
    }
}

/* One warp: head vector x[HD] (shared memory) RMS-normalized in place as rope.cu's norm_rope_kv_kernel
 * does it (rms_norm_kernel<64>'s bits): its thread t (0..63) sums x[i]² for i = t, t + 64, ... by
 * fmaf, each 32-thread half reduces by the xor tree and lane 0's sum is taken, tot = (0 + half 0) +
 * half 1, then x·(1/sqrt(tot/HD + eps))·(off + w). Here lane l carries threads l and l + 32. */
template <int HD>
__device__ __forceinline__ void dm_head_norm(float *x, const float *w, float off, float eps, int lane) {
    float s0 = 0.f, s1 = 0.f;
    for (int i = lane; i < HD; i += 64) s0 = fmaf(x[i], x[i], s0);
    for (int i = lane + 32; i < HD; i += 64) s1 = fmaf(x[i], x[i], s1);
    for (int o = 16; o > 0; o >>= 1) {
        s0 += __shfl_xor_sync(0xffffffffu, s0, o);
        s1 += __shfl_xor_sync(0xffffffffu, s1, o);
    }
    s0 = __shfl_sync(0xffffffffu, s0, 0);
    s1 = __shfl_sync(0xffffffffu, s1, 0);
    float tot = 0.f;
    tot += s0;
    tot += s1;
    const float r = 1.0f / sqrtf(tot / (float)HD + eps);
    __syncwarp();
    for (int i = lane; i < HD; i += 32) x[i] = (x[i] * r) * (off + w[i]);
    __syncwarp();
}

template <int HD, typename T16, bool ROPE, bool TAB = false>
__global__ void __launch_bounds__(32 * MWARPS, 2) attn_dec_mma_kernel(attn_dev_t a, const __grid_constant__ dm_tab<TAB> tb) {
    constexpr int NW = HD / 8;  /* words of a lane's quarter row            */
    constexpr int KB = HD / 16; /* k-steps of S^T = m-tiles of O^T          */
    /* the warps' o: query n, dim d = ch·HD/4 + r at n·RS + ch·CS + r — CS ≡ 2 and RS ≡ 12 (mod 16)
     * make a warp's fragment stores conflict-free (unpadded they were 16-way: 4.3 us per call
     * at 2 blocks per SM, ncu) */
    constexpr int CS = HD / 4 + 2, RS = 4 * CS + (12 - (4 * CS) % 16 + 16) % 16;
    __shared__ uint4 qs[KB][32]; /* Q B fragments: hi b0, hi b1, lo b0, lo b1 */
    __shared__ __align__(16) float wo[MWARPS][MQ * RS];
    __shared__ float wm[MWARPS][MQ], wl[MWARPS][MQ];
    /* split merge: rank r owns outputs e ≡ r (mod S); every block stores its partial of each
     * output into the owner's ro[src][e / S] and its (max, sum) into every rank's rm/rl[src] */
    __shared__ float ro[MQ * HD + MSMAX], rm[MSMAX][MQ], rl[MSMAX][MQ];
    __shared__ float rcs[ROPE ? HD : 1]; /* ROPE: cos and sin of pair i's angle at [i], [HD/2 + i] */
    __shared__ float hnw[ROPE ? 2 * HD : 1]; /* ROPE with head norms: the q and k norm weights, read before pdl_wait */
    const int S = a.n_splits;
    const int ti = blockIdx.x / S, split = blockIdx.x % S;
    const int n_qc = (a.group + MQ - 1) / MQ, kvh = blockIdx.y / n_qc, qc = blockIdx.y % n_qc;
    const int h0 = kvh * a.group + qc * MQ, nqh = min(MQ, a.group - qc * MQ);
    /* decode (the launcher's shape check): row r is token r and tile r, no tile list to read */
    const int t = ti, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    const int *bt = TAB ? tb.v + a.T + (size_t)ti * a.max_blocks : a.tables + (size_t)ti * a.max_blocks;
    const size_t per_tok = (size_t)a.n_kv_heads * HD, hoff = (size_t)kvh * HD + c * (HD / 4);
    TL_STAMPS(5); /* KILN_CUDA_TIMELINE builds: the phase stamps below (timeline.cuh) */
    pdl_trigger(); /* the o-projection GEMV (PDL) may start loading its weights */
    /* every block of the cluster has started before any stores into another's shared memory
     * (the wait is before the split merge, long after every block arrived) */
    if (S > 1) asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");

    /* before pdl_wait: host uploads (positions, block tables) and the warp's first tile
     * but row p (written by rope_kv_write, the kernel before); q and row p after */
    const int p = TAB ? tb.v[t] : a.pos[t], lo = a.window > 0 ? max(0, p - a.window + 1) : 0, hi = p + 1;
    int span = (hi - lo + S - 1) / S;
    span = (span + MTK - 1) / MTK * MTK;
    const int s_lo = lo + split * span, s_hi = min(hi, s_lo + span);
    uint32_t kr[2][NW], vr[2][NW];
    int kb = s_lo + warp * MTK;
    if (kb < s_hi && a.kv_prewait == 1) dm_ld_tile<HD, 3>(kr, vr, a, bt, per_tok, hoff, kb, g, s_hi, p, 0);
    if (kb < s_hi && a.kv_prewait == 2) dm_pf_tile<HD>(a, bt, per_tok, hoff, kb, g, s_hi, p);
    if (ROPE && threadIdx.x < a.half) rope_cs(threadIdx.x, p, a.inv, a.ms, rcs[threadIdx.x], rcs[HD / 2 + threadIdx.x]);
    /* qwen3's head-norm weights: no kernel writes them, and read inside dm_head_norm after the wait they were one more
     * memory round trip on the step's critical path (session 62; read after the __syncthreads below) */
    if (ROPE && a.qn && threadIdx.x < HD) { hnw[threadIdx.x] = a.qn[threadIdx.x]; hnw[HD + threadIdx.x] = a.kn ? a.kn[threadIdx.x] : 0.f; }
    pdl_wait();
    if (kb < s_hi && a.kv_prewait != 1) dm_ld_tile<HD, 3>(kr, vr, a, bt, per_tok, hoff, kb, g, s_hi, p, 0); /* the same rows, after the wait */
    /* ROPE: rope_kv_write's work for this block, before the wait on nothing but the QKV matmul:
     * the block's q heads rotated in shared memory (wo, free until the warp merge); the block
     * whose range holds row p (one per row and KV head: the launcher takes group <= MQ) rotates
     * k in place, stores k and v in the cache (the bits rope_kv_kernel stores) and hands row p to
     * the warp whose first tile holds it from shared memory (a later tile reads the cache, which
     * this block wrote before a barrier). q is rotated in place at the end (the cluster's other
     * blocks read it until their merge). */
    float *const qsc = &wo[0][0];
    const bool own = ROPE && p >= s_lo && p < s_hi;
    if (ROPE) {
        uint32_t *const kvs = (uint32_t *)(qsc + MQ * HD); /* row p: K's HD 16-bit values, then V's */
        float *const ksc = qsc + MQ * HD + HD;               /* head norms: the own block's k head */
        const size_t ho = ((size_t)t * a.n_kv_heads + kvh) * HD;
        const bool hn = a.qn != NULL; /* qwen3's head norms first (norm_rope_kv_kernel's bits) */
        dm_ld_q<HD>(qsc, a, t, h0, nqh);
        if (hn) {
            if (own)
                for (int d = threadIdx.x; d < HD; d += blockDim.x) ksc[d] = __ldcg(a.rk + ho + d);
            __syncthreads();
            for (int h = warp; h < nqh + (own ? 1 : 0); h += MWARPS)
                dm_head_norm<HD>(h < nqh ? qsc + h * HD : ksc, h < nqh ? hnw : hnw + HD, a.noff, a.neps, lane);
            __syncthreads();
        }
        if (own && threadIdx.x < HD) {
            const int d = threadIdx.x, half = a.half;
            const size_t dst = ((size_t)bt[p / a.block_size] * a.block_size + p % a.block_size) * per_tok + (size_t)kvh * HD;
            T16 *const k16 = (T16 *)kvs, *const kc = (T16 *)a.k, *const vc = (T16 *)a.v;
            if (d < half) {
                float ra, rb;
                if (hn) { /* the normalized head rotated in shared memory, k as norm_rope_kv_kernel leaves it */
                    rope_rot(ksc, d, half, rcs[d], rcs[HD / 2 + d], ra, rb);
                    a.rk[ho + d] = ra;
                    a.rk[ho + d + half] = rb;
                } else
                    rope_rot(a.rk + ho, d, half, rcs[d], rcs[HD / 2 + d], ra, rb); /* rcs: its own thread wrote [d] */
                const T16 x0 = dm_cvt<T16>(ra), x1 = dm_cvt<T16>(rb);
                k16[d] = x0; k16[d + half] = x1;
                kc[dst + d] = x0; kc[dst + d + half] = x1;
            } else if (d >= 2 * half) {
                const float kx = hn ? ksc[d] : a.rk[ho + d]; /* not rotated */
                if (hn) a.rk[ho + d] = kx;
                const T16 x0 = dm_cvt<T16>(kx);
                k16[d] = x0; kc[dst + d] = x0;
            }
            const T16 y = dm_cvt<T16>(__ldcg(a.rv + ho + d));
            k16[HD + d] = y; vc[dst + d] = y;
        }
        __syncthreads();
        for (int e = threadIdx.x; e < nqh * a.half; e += blockDim.x) {
            float ra, rb;
            rope_rot(qsc + (e / a.half) * HD, e % a.half, a.half, rcs[e % a.half], rcs[HD / 2 + e % a.half], ra, rb);
        }
        if (kb < s_hi && p >= kb && p < kb + MTK) {
            const int r = p - kb;
            if (r == g) {
#pragma unroll
                for (int i = 0; i < NW; i++) { kr[0][i] = kvs[c * NW + i]; vr[0][i] = kvs[HD / 2 + c * NW + i]; }
            } else if (r == g + 8) {
#pragma unroll
                for (int i = 0; i < NW; i++) { kr[1][i] = kvs[c * NW + i]; vr[1][i] = kvs[HD / 2 + c * NW + i]; }
            }
        }
        __syncthreads();
    } else if (kb < s_hi) dm_ld_tile<HD, 3>(kr, vr, a, bt, per_tok, hoff, kb, g, s_hi, p, 2);
    for (int e = threadIdx.x; e < KB * 32; e += blockDim.x) {
        const int j = e >> 5, l = e & 31, gg = l >> 2, cc = l & 3;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (gg < nqh)
            v = ROPE ? *(const float4 *)(qsc + gg * HD + cc * (HD / 4) + 4 * j)
                     : __ldcg((const float4 *)(a.q + ((size_t)t * a.n_heads + h0 + gg) * HD + cc * (HD / 4) + 4 * j));
        uint4 u;
        mma16_split2<T16>(v.x * a.scale, v.y * a.scale, u.x, u.z);
        mma16_split2<T16>(v.z * a.scale, v.w * a.scale, u.y, u.w);
        qs[j][l] = u;
    }
    __syncthreads();
    TL_STAMP(1); /* KILN_CUDA_TIMELINE builds: q's fragments ready (the first K/V tile in flight) */

    float o[KB][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
#pragma unroll
    for (int i = 0; i < KB; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    const float LOG2E = 1.4426950408889634f;
    while (kb < s_hi) {
        /* S^T: c0 = (key g, query 2c), c1 = (g, 2c + 1), c2 = (g + 8, 2c), c3 = (g + 8, 2c + 1) */
        float s[4] = {0.f, 0.f, 0.f, 0.f}, sl[4] = {0.f, 0.f, 0.f, 0.f}; /* hi and lo: two chains of MMAs */
#pragma unroll
        for (int j = 0; j < KB; j++) {
            const uint4 qf = qs[j][lane];
            const uint32_t af[4] = {kr[0][2 * j], kr[1][2 * j], kr[0][2 * j + 1], kr[1][2 * j + 1]};
            mma16_t<T16>::mma(s, af, qf.x, qf.y);
            mma16_t<T16>::mma(sl, af, qf.z, qf.w);
        }
#pragma unroll
        for (int r = 0; r < 4; r++) s[r] += sl[r];
        const int kn = kb + MWARPS * MTK; /* this warp's next tile: K now, V after P·V */
        if (kn < s_hi) dm_ld_tile<HD, 1>(kr, vr, a, bt, per_tok, hoff, kn, g, s_hi, p, 1);
        float mt[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int r = 0; r < 4; r++) {
            float v = s[r];
            if (a.softcap > 0.f) v = a.softcap * tanhf(v / a.softcap);
            s[r] = kb + g + 8 * (r >> 1) < s_hi ? v * LOG2E : -INFINITY;
            mt[r & 1] = fmaxf(mt[r & 1], s[r]);
        }
        float mu[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            mt[h] = fmaxf(mt[h], __shfl_xor_sync(0xffffffffu, mt[h], 4));
            mt[h] = fmaxf(mt[h], __shfl_xor_sync(0xffffffffu, mt[h], 8));
            mt[h] = fmaxf(mt[h], __shfl_xor_sync(0xffffffffu, mt[h], 16));
            const float mn = fmaxf(m[h], mt[h]);
            mu[h] = mn == -INFINITY ? 0.f : mn;
            const float corr = exp2f(m[h] - mu[h]);
            m[h] = mn;
            l[h] *= corr;
#pragma unroll
            for (int i = 0; i < KB; i++) { o[i][h] *= corr; o[i][h + 2] *= corr; }
        }
        const float p0 = exp2f(s[0] - mu[0]), p1 = exp2f(s[1] - mu[1]), p2 = exp2f(s[2] - mu[0]), p3 = exp2f(s[3] - mu[1]);
        l[0] += p0 + p2;
        l[1] += p1 + p3;
        uint32_t y0h, y0l, y1h, y1l;
        mma16_split2<T16>(p0, p1, y0h, y0l);
        mma16_split2<T16>(p2, p3, y1h, y1l);
        /* B = P^T: b0 = (keys 2c, 2c + 1; query g), b1 = (keys 2c + 8, 2c + 9; query g) */
        const uint32_t b0h = dm_trans(y0h), b1h = dm_trans(y1h), b0l = dm_trans(y0l), b1l = dm_trans(y1l);
#pragma unroll
        for (int i = 0; i < KB; i++) {
            /* A = V^T rows d(g, 2i) and d(g, 2i + 1), d(g, w) = (g/2)·HD/4 + 2w + g%2 */
            const uint32_t af[4] = {dm_trans(vr[0][2 * i]), dm_trans(vr[0][2 * i + 1]), dm_trans(vr[1][2 * i]), dm_trans(vr[1][2 * i + 1])};
            mma16_t<T16>::mma(o[i], af, b0h, b1h);
            mma16_t<T16>::mma(o[i], af, b0l, b1l);
        }
        if (kn < s_hi) dm_ld_tile<HD, 2>(kr, vr, a, bt, per_tok, hoff, kn, g, s_hi, p, 1);
        kb = kn;
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 4);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 8);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 16);
        if (g == 0) { wm[warp][2 * c + h] = m[h]; wl[warp][2 * c + h] = l[h]; }
    }
    /* ROPE: query columns past nqh (padding of the n8) are never merged: not stored (the
     * kernel without ROPE is left as it was: the A of KILN_CUDA_ATTN_ROPE=0) */
#pragma unroll
    for (int i = 0; i < KB; i++) {
        const int da = (g >> 1) * CS + 4 * i + (g & 1), db = da + 2;
        if (!ROPE || 2 * c < nqh) {
            wo[warp][2 * c * RS + da] = o[i][0];
            wo[warp][2 * c * RS + db] = o[i][2];
        }
        if (!ROPE || 2 * c + 1 < nqh) {
            wo[warp][(2 * c + 1) * RS + da] = o[i][1];
            wo[warp][(2 * c + 1) * RS + db] = o[i][3];
        }
    }
    __syncthreads();
    TL_STAMP(2); /* every warp's tiles done */
    if (S > 1) asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
    TL_STAMP(3); /* every block of the cluster has started */
    const int E = nqh * HD, J = (E + S - 1) / S, r = S > 1 ? (int)cooperative_groups::this_cluster().block_rank() : 0;
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        const int n = e / HD, d = e % HD, wi = n * RS + (d / (HD / 4)) * CS + d % (HD / 4);
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < MWARPS; w++) M = fmaxf(M, wm[w][n]);
        float L = 0.f, acc = 0.f;
        if (M != -INFINITY)
#pragma unroll
            for (int w = 0; w < MWARPS; w++) {
                const float f = wm[w][n] == -INFINITY ? 0.f : exp2f(wm[w][n] - M);
                L += wl[w][n] * f;
                acc += wo[w][wi] * f;
            }
        if (S == 1) {
            const size_t oi = ((size_t)t * a.n_heads + h0 + n) * HD + d;
            a.out[oi] = acc / L;
            if (a.out16) a.out16[oi] = __float2bfloat16_rn(acc / L);
        } else {
            cooperative_groups::cluster_group cl = cooperative_groups::this_cluster();
            *cl.map_shared_rank(&ro[r * J + e / S], e % S) = acc;
            if (d == 0)
                for (int o2 = 0; o2 < S; o2++) {
                    *cl.map_shared_rank(&rm[r][n], o2) = M;
                    *cl.map_shared_rank(&rl[r][n], o2) = L;
                }
        }
    }
    if (S > 1) {
        /* after the barrier (release/acquire at cluster scope) only this block's shared memory
         * is read: a block may leave while others still merge */
        cooperative_groups::this_cluster().sync();
        TL_STAMP(4); /* the cluster's partials exchanged */
        for (int jj = threadIdx.x; jj < J; jj += blockDim.x) {
            const int e = r + S * jj;
            if (e >= E) break;
            const int n = e / HD, d = e % HD;
            float M = -INFINITY;
#pragma unroll
            for (int s2 = 0; s2 < MSMAX; s2++)
                if (s2 < S) M = fmaxf(M, rm[s2][n]);
            float L = 0.f, acc = 0.f;
#pragma unroll
            for (int s2 = 0; s2 < MSMAX; s2++)
                if (s2 < S && rm[s2][n] != -INFINITY) {
                    const float f = exp2f(rm[s2][n] - M);
                    L += rl[s2][n] * f;
                    acc += ro[s2 * J + jj] * f;
                }
            const size_t oi = ((size_t)t * a.n_heads + h0 + n) * HD + d;
            a.out[oi] = acc / L;
            if (a.out16) a.out16[oi] = __float2bfloat16_rn(acc / L);
        }
    }
    TL_STAMP(5); /* thread 0's outputs stored */
    /* ROPE with q_keep: q as rope_kv_write leaves it (every block of the cluster has read it: past the cluster
     * barrier). Off by default (session 55): nothing reads q after the attention, and this tail — an L2 round trip
     * for llama, a reload, the head norm and four block barriers for qwen3 — runs in the one block a cluster that
     * holds row p after everything else, so the o projection's PDL wait waited for it */
    if (own && a.q_keep) {
        if (a.qn) {
            /* head norms: q as norm_rope_kv_kernel leaves it — normalized again from the raw q (the same bits
             * as at the start) in shared memory (wo: free past the cluster barrier), rotated, stored whole */
            float *const qsc2 = &wo[0][0];
            __syncthreads(); /* without a cluster (one split) the warp merge above may still read wo */
            dm_ld_q<HD>(qsc2, a, t, h0, nqh);
            __syncthreads();
            for (int h = warp; h < nqh; h += MWARPS) dm_head_norm<HD>(qsc2 + h * HD, a.qn, a.noff, a.neps, lane);
            __syncthreads();
            for (int e = threadIdx.x; e < nqh * a.half; e += blockDim.x) {
                float ra, rb;
                rope_rot(qsc2 + (e / a.half) * HD, e % a.half, a.half, rcs[e % a.half], rcs[HD / 2 + e % a.half], ra, rb);
            }
            __syncthreads();
            for (int e = threadIdx.x; e < nqh * HD; e += blockDim.x) a.rq[((size_t)t * a.n_heads + h0 + e / HD) * HD + e % HD] = qsc2[e];
        } else
            for (int e = threadIdx.x; e < nqh * a.half; e += blockDim.x) {
                float ra, rb;
                rope_rot(a.rq + ((size_t)t * a.n_heads + h0 + e / a.half) * HD, e % a.half, a.half, rcs[e % a.half], rcs[HD / 2 + e % a.half], ra, rb);
            }
    }
}

extern "C" int kiln_cuda_attn_rope_calls; /* fused rope + attention launches (the tests check the path ran) */
int kiln_cuda_attn_rope_calls;

template <bool TAB> using dm_kern_t = void (*)(attn_dev_t, dm_tab<TAB>);
template <bool TAB> static dm_kern_t<TAB> dm_pick(int hd, bool f16, bool rope) {
    return rope ? (hd == 64 ? (f16 ? attn_dec_mma_kernel<64, __half, true, TAB> : attn_dec_mma_kernel<64, __nv_bfloat16, true, TAB>)
                            : (f16 ? attn_dec_mma_kernel<128, __half, true, TAB> : attn_dec_mma_kernel<128, __nv_bfloat16, true, TAB>))
                : (hd == 64 ? (f16 ? attn_dec_mma_kernel<64, __half, false, TAB> : attn_dec_mma_kernel<64, __nv_bfloat16, false, TAB>)
                            : (f16 ? attn_dec_mma_kernel<128, __half, false, TAB> : attn_dec_mma_kernel<128, __nv_bfloat16, false, TAB>));
}
/* matmul_gemv.cu: the next bf16 GEMV that reads x (the o-projection) prefetches its weight into L2 */
void cuda_gemv_prefetch_hint(cuda_impl_t *c, const float *x);

/* Decode steps on tensor cores: true if handled here. aa: the step's host-side positions and
 * block tables (the TAB parameter; NULL: the uploaded copies only). */
static bool attention_decode_mma(cuda_impl_t *c, attn_dev_t &a, int n_rows, int max_len, bool rope = false, const attn_args_t *aa = NULL) {
    /* 2: every decode step (default, =all); 1: KILN_CUDA_ATTN_DEC=split; 0: =old (read per call: the tests change it) */
    const char *de = getenv("KILN_CUDA_ATTN_DEC");
    const int mode = de && !strcmp(de, "old") ? 0 : de && !strcmp(de, "split") ? 1 : 2;
    const int hd = a.hd;
    if (!mode || c->gemm_min_t == 0x7fffffff || (a.kv_dtype != DT_F16 && a.kv_dtype != DT_BF16) || (hd != 64 && hd != 128)) return false;
    const bool f16 = a.kv_dtype == DT_F16;
    /* the largest cluster: 16 (non-portable) where clusters of 16 can cover >= 3/4 of the SMs,
     * else 8; KILN_CUDA_ATTN_CLUSTER=N forces N (1..16) */
    static int cauto = 0;
    if (!cauto) {
        for (int i = 0; i < 8; i++) {
            cudaFuncSetAttribute(dm_pick<false>(i & 1 ? 128 : 64, i & 2, i & 4), cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
            cudaFuncSetAttribute(dm_pick<true>(i & 1 ? 128 : 64, i & 2, i & 4), cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
        }
        {
            cudaLaunchConfig_t cfg = {};
            cudaLaunchAttribute at[2];
            cfg.numAttrs = cuda_pdl_cluster_attrs(NULL, at, false, 16);
            cfg.gridDim = dim3(16 * 16, 1); cfg.blockDim = dim3(32 * MWARPS); cfg.attrs = at;
            int n16 = 0;
            if (cudaOccupancyMaxActiveClusters(&n16, (void *)attn_dec_mma_kernel<128, __nv_bfloat16, false, false>, &cfg) != cudaSuccess) {
                cudaGetLastError();
                n16 = 0;
            }
            const int sms = c->sm_count > 0 ? c->sm_count : 132;
            cauto = n16 * 16 * 4 >= sms * 3 ? 16 : 8;
            if (getenv("KILN_CUDA_ATTN_SHOW"))
                fprintf(stderr, "kiln cuda: decode attention on tensor cores: %d active clusters of 16, clusters of up to %d\n", n16, cauto);
        }
    }
    const char *ce = getenv("KILN_CUDA_ATTN_CLUSTER"); /* read per call: the tests change it */
    const int cmax = ce && atoi(ce) > 0 ? (atoi(ce) > MSMAX ? MSMAX : atoi(ce)) : cauto;
    const int n_qc = (a.group + MQ - 1) / MQ, sms = c->sm_count > 0 ? c->sm_count : 132;
    const int base = n_rows * a.n_kv_heads * n_qc;
    /* KILN_CUDA_ATTN_DEC=split: only steps whose (row, KV head) blocks alone would not fill the
     * GPU (split decode: batch 1); by default bigger batches too (one split per block; tested with
     * =all at 47 and 64 rows) */
    if (mode == 1 && base >= sms) return false;
    int splits = base >= sms ? 1 : (sms + base - 1) / base;
    const int max_splits = (max_len + MTK * MWARPS - 1) / (MTK * MWARPS);
    if (splits > max_splits) splits = max_splits;
    if (splits > cmax) splits = cmax;
    if (splits < 1) splits = 1;
    while (splits & (splits - 1)) splits &= splits - 1; /* a power of two: cluster shapes as commonly used */
    a.n_splits = splits;
    { /* the first K/V tile: prefetched into L2 before pdl_wait and loaded after it (default, =2, since session
       * 18); KILN_CUDA_ATTN_PREWAIT=0: loaded after the wait only (session 17); =1: loaded into registers before
       * the wait, as sessions 12-16 did — NOT deterministic: test_x16_decode's un-synced chain (two backends
       * doing the same work, compared bitwise at the end) differed in 3-6 of 24 runs with it (3 of 16 in
       * session 18), 0 of 48 with =0 and 0 of 16 with =2: some row of the first tile is read before the kernel
       * that writes it is done (which one: not found; an L2 prefetch returns no data, so it cannot read a stale
       * row). Same call, H200, 2048 + 128 tokens, two rounds: llama-3-8b bf16 decode 225.2/224.4 (=0) ->
       * 226.6/226.4 tok/s (=2), qwen3-0.6b bf16 968/972 -> 964/969, llama-3-8b q4 even. Read per call. */
        const char *pw = getenv("KILN_CUDA_ATTN_PREWAIT");
        /* with qwen3's head norms in the kernel (a.qn, the ROPE variant) no prefetch (=2 forces it): session
         * 20 measured qwen3-0.6b bf16 +3.4 % at =0 (four pairs) and llama-3-8b bf16 -1.4 % (llama has no head
         * norms); session 21, this rule against =2 in one call: qwen3-0.6b bf16 1005-1039 vs 954 tok/s */
        a.kv_prewait = pw && !strcmp(pw, "1") ? 1 : pw && !strcmp(pw, "0") ? 0 : pw && !strcmp(pw, "2") ? 2 : rope && a.qn ? 0 : 2;
    }
    { /* read per call: the tests change it */
        const char *qk = getenv("KILN_CUDA_ATTN_QKEEP");
        a.q_keep = qk && !strcmp(qk, "1");
    }
    a.part = NULL;
    /* KILN_CUDA_ATTN_X16=1 (opt-in): a producer of the o projection's x (x16.cuh) — where a matmul of
     * this many floats rounded its x to bf16 before (matmul_bfmma at 3..64 rows, cuBLASLt beyond), the
     * merge stores bf16(out) too, the value that matmul's own rounding gives. Off by default: in the
     * lead's session-16 call it took the 64-row qwen3-0.6b step's forward 2.50-2.61 -> 2.45 ms; session 17's
     * engine A/B: no difference (1.62 vs 1.63 ms a step). test_x16_decode's differences were not the copy's:
     * they came from the first K/V tile loaded before pdl_wait (kv_prewait, above: now only prefetched) */
    static int ax16 = -1;
    if (ax16 < 0) { const char *e = getenv("KILN_CUDA_ATTN_X16"); ax16 = e && !strcmp(e, "1"); }
    const size_t n_out = (size_t)a.T * a.n_heads * hd;
    a.out16 = ax16 ? cuda_x16_want(c, n_out) : NULL;
    static int apdl = -1;
    if (apdl < 0) { const char *e = getenv("KILN_CUDA_ATTN_PDL"); apdl = !(e && !strcmp(e, "0")); }
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[2];
    const int na = cuda_pdl_cluster_attrs(c, at, apdl, splits);
    cfg.gridDim = dim3(n_rows * splits, a.n_kv_heads * n_qc);
    cfg.blockDim = dim3(32 * MWARPS);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = c->stream;
    cfg.attrs = at;
    cfg.numAttrs = na;
    const char *te = getenv("KILN_CUDA_ATTN_TAB"); /* =0: positions and tables from device memory only (A/B; read per call: the tests change it) */
    if (!(te && !strcmp(te, "0")) && aa && a.T == n_rows && (size_t)n_rows * (1 + a.max_blocks) <= DM_TAB) {
        dm_tab<true> tb;
        memset(&tb, 0, sizeof tb); /* as attn_tiles_upload: zero past a row's table */
        for (int r = 0; r < n_rows; r++) {
            tb.v[r] = aa->pos[r];
            const int nb = aa->pos[r] / a.block_size + 1;
            memcpy(tb.v + n_rows + (size_t)r * a.max_blocks, aa->block_tables[r], sizeof(int32_t) * (nb < a.max_blocks ? nb : a.max_blocks));
        }
        cudaCheck(cudaLaunchKernelEx(&cfg, dm_pick<true>(hd, f16, rope), a, tb));
    } else {
        dm_tab<false> tb = {};
        cudaCheck(cudaLaunchKernelEx(&cfg, dm_pick<false>(hd, f16, rope), a, tb));
    }
    if (a.out16) cuda_x16_set(c, a.out, n_out);
    if (na && at[0].id == cudaLaunchAttributeProgrammaticStreamSerialization && n_rows == 1) cuda_gemv_prefetch_hint(c, a.out);
    if (rope) kiln_cuda_attn_rope_calls++;
    return true;
}

/* Decode steps with head_dim 64/128/256: true if handled here. */
static bool attention_decode(cuda_impl_t *c, attn_dev_t &a, int n_rows, int n_tiles, int max_n, int max_len, const attn_args_t *aa) {
    const int hd = a.hd;
    if (a.T != n_rows || n_tiles != n_rows || max_n != 1 || (hd != 64 && hd != 128 && hd != 256)) return false;
    if (attention_decode_mma(c, a, n_rows, max_len, false, aa)) return true;
    const int n_qc = (a.group + DQB - 1) / DQB;
    /* split-K so the GPU is busy (~2 blocks per SM), each warp keeping >= 16 keys */
    int base = n_rows * a.n_kv_heads * n_qc, want = c->attn_want * c->sm_count;
    int splits = base >= want ? 1 : (want + base - 1) / base;
    int max_splits = (max_len + DWARPS * DTK - 1) / (DWARPS * DTK);
    if (splits > max_splits) splits = max_splits;
    if (splits > 64) splits = 64;
    if (splits < 1) splits = 1;
    a.n_splits = splits;
    a.part = NULL;
    if (splits > 1)
        a.part = (float *)cuda_scratch(c, (void **)&c->part, &c->part_bytes, sizeof(float) * splits * (size_t)a.T * a.n_heads * (hd + 2));
    dim3 grid(n_rows * splits, a.n_kv_heads * n_qc);
    static int raw = -1; /* KILN_CUDA_ATTN_RAW=0: f32 tiles for 16-bit caches too (A/B) */
    if (raw < 0) { const char *e = getenv("KILN_CUDA_ATTN_RAW"); raw = !(e && !strcmp(e, "0")); }
    /* RAW holds more registers (202 vs 167 at head_dim 128: 2 blocks per SM instead of 3): where
     * that costs a whole extra wave of blocks (47 rows x 8 KV heads: 376 blocks, 2 waves instead
     * of 1; 333 -> 419 us, helper-30's ncu), the f32 tiles. By shape only. KILN_CUDA_ATTN_RAW=1: always RAW. */
    bool use_raw = raw && a.kv_dtype != DT_F32;
    if (use_raw && !(getenv("KILN_CUDA_ATTN_RAW") && !strcmp(getenv("KILN_CUDA_ATTN_RAW"), "1"))) {
        static int occ[3][2]; /* blocks per SM: [hd 64/128/256][raw] */
        const int hi = hd == 64 ? 0 : hd == 128 ? 1 : 2;
        if (!occ[hi][0]) {
            if (hi == 0) {
                cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ[0][0], attn_decode_kernel<4, false>, 32 * DWARPS, 0);
                cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ[0][1], attn_decode_kernel<4, true>, 32 * DWARPS, 0);
            } else if (hi == 1) {
                cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ[1][0], attn_decode_kernel<8, false>, 32 * DWARPS, 0);
                cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ[1][1], attn_decode_kernel<8, true>, 32 * DWARPS, 0);
            } else {
                cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ[2][0], attn_decode_kernel<16, false>, 32 * DWARPS, 0);
                cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ[2][1], attn_decode_kernel<16, true>, 32 * DWARPS, 0);
            }
            if (occ[hi][0] < 1) occ[hi][0] = 1;
            if (occ[hi][1] < 1) occ[hi][1] = 1;
        }
        const long blocks = (long)grid.x * grid.y, sms = c->sm_count > 0 ? c->sm_count : 132;
        const long w_raw = (blocks + occ[hi][1] * sms - 1) / (occ[hi][1] * sms), w_f32 = (blocks + occ[hi][0] * sms - 1) / (occ[hi][0] * sms);
        if (w_raw > w_f32) use_raw = false;
    }
    /* PDL: the decode kernel issues its first K/V tile while rope_kv_write finishes (bit 1;
     * the default), the merge launches while the decode kernel runs (bit 2: opt-in, it made
     * llama-3-8b q4 slower, 317 -> 308 tok/s, 304 with both; the decode kernel alone faster,
     * 317 -> 328; bench/cuda/RESULTS.md). KILN_CUDA_ATTN_PDL=0: plain launches (A/B), =merge: the merge
     * only, =both. */
    static int apdl = -1;
    if (apdl < 0) {
        const char *e = getenv("KILN_CUDA_ATTN_PDL");
        apdl = !e ? 1 : !strcmp(e, "0") ? 0 : !strcmp(e, "merge") ? 2 : !strcmp(e, "both") ? 3 : 1;
    }
    void (*kern)(attn_dev_t) = use_raw ? (hd == 64 ? attn_decode_kernel<4, true> : hd == 128 ? attn_decode_kernel<8, true> : attn_decode_kernel<16, true>)
                                       : (hd == 64 ? attn_decode_kernel<4, false> : hd == 128 ? attn_decode_kernel<8, false> : attn_decode_kernel<16, false>);
    if (apdl & 1) cuda_launch_pdl(c->stream, kern, grid, dim3(32 * DWARPS), 0, a);
    else {
        kern<<<grid, 32 * DWARPS, 0, c->stream>>>(a);
        cudaLaunchCheck();
    }
    if (splits > 1) {
        const int th = hd < 32 ? 32 : hd < 128 ? hd : 128;
        if (apdl & 2) cuda_launch_pdl(c->stream, attn_combine_kernel, dim3(a.T * a.n_heads), dim3(th), 0, a.out, (const float *)a.part, splits, (size_t)a.T * a.n_heads, hd);
        else {
            attn_combine_kernel<<<a.T * a.n_heads, th, 0, c->stream>>>(a.out, a.part, splits, (size_t)a.T * a.n_heads, hd);
            cudaLaunchCheck();
        }
    }
    return true;
}

template <int DPL>
static void launch(cuda_impl_t *c, const attn_dev_t &a, dim3 grid, int threads) {
    size_t smem = sizeof(float) * ((size_t)KT * (a.hd + 1) + (size_t)KT * a.hd + (size_t)QMAX * a.hd);
    static size_t set = 48 * 1024;
    if (smem > set) {
        if (smem > c->smem_optin) {
            fprintf(stderr, "kiln cuda: attention with head_dim %d needs %zu bytes of shared memory (device allows %zu)\n", a.hd,
                    smem, c->smem_optin);
            abort();
        }
        cudaCheck(cudaFuncSetAttribute(attn_kernel<DPL>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        set = smem;
    }
    attn_kernel<DPL><<<grid, threads, smem, c->stream>>>(a);
    cudaLaunchCheck();
}

int cuda_attention_mma(backend_t *be, float *out, const float *q, int T, const attn_args_t *aa); /* attention_mma.cu */

void attn_tiles_count(const attn_args_t *aa, int TQ, attn_tiles_t *t) {
    const int bs = aa->kv.block_size;
    memset(t, 0, sizeof *t);
    t->max_blocks = t->max_n = t->max_len = 1;
    for (int r = 0; r < aa->n_rows; r++) {
        int t0 = aa->row_start[r], t1 = aa->row_start[r + 1];
        if (t1 <= t0) continue;
        if (t1 - t0 > 1) t->multi = 1;
        int nb = aa->pos[t1 - 1] / bs + 1;
        if (nb > t->max_blocks) t->max_blocks = nb;
        t->n_tiles += (t1 - t0 + TQ - 1) / TQ;
        int n = t1 - t0 < TQ ? t1 - t0 : TQ;
        if (n > t->max_n) t->max_n = n;
        int len = aa->pos[t1 - 1] + 1 - (aa->window > 0 ? (aa->pos[t0] - aa->window + 1 > 0 ? aa->pos[t0] - aa->window + 1 : 0) : 0);
        if (len > t->max_len) t->max_len = len;
    }
}

void attn_tiles_upload(cuda_impl_t *c, const attn_args_t *aa, int T, int TQ, attn_tiles_t *t) {
    const int bs = aa->kv.block_size, max_blocks = t->max_blocks;
    size_t pos_bytes = (sizeof(int32_t) * (size_t)T + 15) & ~(size_t)15;
    size_t tb_bytes = (sizeof(int32_t) * (size_t)aa->n_rows * max_blocks + 15) & ~(size_t)15;
    size_t tl_bytes = sizeof(attn_tile_t) * (size_t)t->n_tiles;
    char *hb = (char *)cuda_host_buf(c, 0, pos_bytes + tb_bytes + tl_bytes);
    memset(hb, 0, pos_bytes + tb_bytes); /* padding and short tables: same bytes every call */
    memcpy(hb, aa->pos, sizeof(int32_t) * T);
    int32_t *tables = (int32_t *)(hb + pos_bytes);
    attn_tile_t *tiles = (attn_tile_t *)(hb + pos_bytes + tb_bytes);
    int ti = 0;
    for (int r = 0; r < aa->n_rows; r++) {
        int t0 = aa->row_start[r], t1 = aa->row_start[r + 1];
        if (t1 <= t0) continue;
        int nb = aa->pos[t1 - 1] / bs + 1;
        memcpy(tables + (size_t)r * max_blocks, aa->block_tables[r], sizeof(int32_t) * nb);
        for (int tt = t0; tt < t1; tt += TQ) {
            tiles[ti].t0 = tt;
            tiles[ti].n = t1 - tt < TQ ? t1 - tt : TQ;
            tiles[ti].row = r;
            tiles[ti].pad = 0;
            ti++;
        }
    }
    const char *d = (const char *)cuda_host_to_dev(c, hb, pos_bytes + tb_bytes + tl_bytes);
    t->pos = (const int32_t *)d;
    t->tables = (const int32_t *)(d + pos_bytes);
    t->tiles = (const attn_tile_t *)(d + pos_bytes + tb_bytes);
}

void cuda_attention(backend_t *be, float *out, const float *q, int T, const attn_args_t *aa) {
    if (T <= 0) return;
    if (cuda_attention_mma(be, out, q, T, aa)) return; /* prefill / mixed steps on tensor cores ("cuda", f16/bf16 cache) */
    cuda_impl_t *c = cuda_impl(be);
    const kv_view_t *kv = &aa->kv;
    const int G = aa->n_heads / aa->n_kv_heads, hd = aa->head_dim, bs = kv->block_size;
    const int hc = G < QMAX ? G : QMAX, n_chunks = (G + hc - 1) / hc, TQ = QMAX / hc;
    attn_tiles_t tl;
    attn_tiles_count(aa, TQ, &tl);
    attn_tiles_upload(c, aa, T, TQ, &tl);
    const int n_tiles = tl.n_tiles, max_blocks = tl.max_blocks, max_n = tl.max_n, max_len = tl.max_len;
    attn_dev_t a;
    a.q = q; a.out = out; a.part = NULL; a.out16 = NULL;
    a.qn = a.kn = NULL; /* no head norms here (the ROPE variant of cuda_rope_attention_decode has them) */
    a.pos = tl.pos; a.tables = tl.tables; a.tiles = tl.tiles;
    a.k = kv->k; a.v = kv->v; a.kv_dtype = kv->dtype; a.block_size = bs; a.max_blocks = max_blocks;
    a.T = T; a.n_heads = aa->n_heads; a.n_kv_heads = aa->n_kv_heads; a.hd = hd; a.group = G; a.hc = hc; a.n_chunks = n_chunks;
    a.window = aa->window; a.scale = aa->scale; a.softcap = aa->softcap;
    a.vec = (hd * (int)dtype_size(kv->dtype)) % 16 == 0;
    if (!c->attn_tiled && attention_decode(c, a, aa->n_rows, n_tiles, max_n, max_len, aa)) return;
    /* split-K when the tiles alone leave SMs idle; keep >= 64 keys per split */
    int base = n_tiles * aa->n_kv_heads * n_chunks, want = 2 * c->sm_count;
    int splits = base >= want ? 1 : (want + base - 1) / base;
    int max_splits = (max_len + 63) / 64;
    if (splits > max_splits) splits = max_splits;
    if (splits > 64) splits = 64;
    if (splits < 1) splits = 1;
    a.n_splits = splits;
    if (splits > 1)
        a.part = (float *)cuda_scratch(c, (void **)&c->part, &c->part_bytes, sizeof(float) * splits * (size_t)T * aa->n_heads * (hd + 2));
    int nq_max = max_n * hc;
    /* at least four warps: the extra ones only help load K/V (decode has 1-2 queries) */
    int threads = 32 * ((nq_max + QPW - 1) / QPW);
    if (threads < 128) threads = 128;
    dim3 grid(n_tiles * splits, aa->n_kv_heads * n_chunks);
    if (hd <= 32) launch<1>(c, a, grid, threads);
    else if (hd <= 64) launch<2>(c, a, grid, threads);
    else if (hd <= 128) launch<4>(c, a, grid, threads);
    else if (hd <= 256) launch<8>(c, a, grid, threads);
    else if (hd <= 512) launch<16>(c, a, grid, threads);
    else {
        fprintf(stderr, "kiln cuda: attention head_dim %d > 512 is not supported\n", hd);
        abort();
    }
    if (splits > 1) {
        attn_combine_kernel<<<T * aa->n_heads, hd < 32 ? 32 : hd < 128 ? hd : 128, 0, c->stream>>>(out, a.part, splits, (size_t)T * aa->n_heads, hd);
        cudaLaunchCheck();
    }
}

/* norm_rope_kv_attention at a decode step that attn_dec_mma_kernel takes: rope_kv_write's rotation,
 * cache write and the attention in that one kernel (its ROPE variant) — one PDL hop less after the
 * QKV matmul, and bitwise the two ops (the same rope_pair, roundings, tiles and splits). With qwen3's
 * q/k head norms (qn, kn; session 19) the kernel also normalizes its q heads and, in the block that
 * writes row p, the k head first (dm_head_norm: norm_rope_kv_kernel's sums, order and roundings), and
 * leaves q and k as that kernel does — bitwise rms_norm ×2 + rope_kv_write + attention, and the third
 * kernel of qwen3's decode attention gone. Taken for rows of one token whose slot is the block table's
 * (so the kernel finds row p where rope_kv_write would have put it), group <= MQ (one block of a split
 * rotates k), a rotation within the head. KILN_CUDA_ATTN_ROPE=0 (read once): the separate ops, for A/B;
 * KILN_CUDA_ATTN_NORM=0 (read once): with head norms, the separate norm_rope_kv_kernel as before. */
int cuda_rope_attention_decode(backend_t *be, float *out, float *q, float *k, const float *v, const float *qn, const float *kn, float eps,
                               int rot, const float *inv, float ms, const int32_t *slots, int T, const attn_args_t *aa) {
    static int off = -1, noff = -1; /* read once: this runs per layer and step while the host records the graph */
    if (off < 0) { const char *re = getenv("KILN_CUDA_ATTN_ROPE"); off = re && !strcmp(re, "0"); }
    if (noff < 0) { const char *re = getenv("KILN_CUDA_ATTN_NORM"); noff = re && !strcmp(re, "0"); }
    if (off || !qn != !kn || (qn && noff)) return 0;
    cuda_impl_t *c = cuda_impl(be);
    const kv_view_t *kv = &aa->kv;
    const int nh = aa->n_heads, nkv = aa->n_kv_heads, hd = aa->head_dim, half = rot / 2, bs = kv->block_size;
    if (c->attn_tiled || T <= 0 || aa->n_rows != T || half <= 0 || 2 * half > hd || (hd != 64 && hd != 128) || nkv <= 0 || nh % nkv ||
        nh / nkv > MQ || kv->n_kv_heads != nkv || kv->head_dim != hd || (kv->dtype != DT_F16 && kv->dtype != DT_BF16))
        return 0;
    for (int r = 0; r < T; r++) {
        if (aa->row_start[r] != r || aa->row_start[r + 1] != r + 1) return 0;
        const int p = aa->pos[r];
        if (p < 0 || slots[r] != aa->block_tables[r][p / bs] * bs + p % bs) return 0;
    }
    const int G = nh / nkv, hc = G < QMAX ? G : QMAX, n_chunks = (G + hc - 1) / hc, TQ = QMAX / hc;
    attn_tiles_t tl;
    attn_tiles_count(aa, TQ, &tl);
    if (tl.n_tiles != T || tl.max_n != 1) return 0;
    attn_tiles_upload(c, aa, T, TQ, &tl);
    attn_dev_t a;
    a.q = q; a.out = out; a.part = NULL; a.out16 = NULL;
    a.pos = tl.pos; a.tables = tl.tables; a.tiles = tl.tiles;
    a.k = kv->k; a.v = kv->v; a.kv_dtype = kv->dtype; a.block_size = bs; a.max_blocks = tl.max_blocks;
    a.T = T; a.n_heads = nh; a.n_kv_heads = nkv; a.hd = hd; a.group = G; a.hc = hc; a.n_chunks = n_chunks;
    a.window = aa->window; a.scale = aa->scale; a.softcap = aa->softcap;
    a.vec = (hd * (int)dtype_size(kv->dtype)) % 16 == 0;
    a.rq = q; a.rk = k; a.rv = v; a.ms = ms; a.half = half;
    a.qn = qn; a.kn = kn; a.noff = 0.f; a.neps = eps;
    const size_t ib = sizeof(float) * half;
    char *hb = (char *)cuda_host_buf(c, 1, ib); /* as rope_kv_write uploads it */
    memcpy(hb, inv, ib);
    a.inv = (const float *)cuda_host_to_dev(c, hb, ib);
    return attention_decode_mma(c, a, T, tl.max_len, true, aa) ? 1 : 0;
}
