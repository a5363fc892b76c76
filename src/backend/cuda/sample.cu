/* sample.cu — sampling on the device: the backend op `sample` (backend.h), the twin of
 * sample_token in engine/sampler.c, so that a decode step copies back token ids instead
 * of the [rows, vocab] logits (39 MB at 64 rows of a 152k vocabulary).
 *
 * One block per row. The steps and their order are the host's: logit bias (one thread, in
 * the order given, as duplicates add up there) → repetition / presence / frequency
 * penalties over the row's distinct history tokens (listed by the engine) → greedy, or
 * temperature → top-k → top-p → min-p → the draw with the same counter-based RNG
 * (engine/sample_rng.h). Every float operation the host rounds is rounded here the same
 * way (__f*_rn: no contraction into FMAs).
 *
 * How the host's sorted walk is reproduced without sorting. The host orders candidates by
 * (logit desc, id asc) and walks them accumulating probabilities. Each element gets a 64-bit
 * key in that order, (ordered float bits << 32) | ~id, and every cut becomes "the first
 * element, in key order, at which a running sum crosses T": top-k counts (T = k-1), top-p
 * and the draw sum probability mass (T from top_p or u times the total). That element is
 * found by radix select over the key, 11 bits a pass, MSB first: a pass histograms the
 * weight of the elements that match the digits chosen so far, a warp scans the 2048 bins
 * from the top and fixes the next digit; a bin holding one element ends the search. The
 * chosen element becomes the lower bound of the candidate set for the next cut. Without
 * top-k/top-p/min-p the host walks in index order instead: a warp-segmented scan does that.
 *
 * Masses are summed in 64-bit fixed point (p·2^s, s = 63 - ceil(log2 vocab)): integer sums
 * are exact and associative, so the result does not depend on the order in which threads
 * and atomics add them (no run-to-run variation). The host sums doubles in its walk order.
 * Both are within ~1e-9 of the exact sum; what differs more is expf: CUDA's is within 2 ulp,
 * glibc's within 1, so a probability may differ by an ulp or two. A draw therefore gives the
 * host's token except when u lands within ~1e-7 (relative) of a boundary between two
 * tokens' cumulative mass, or a top-p / min-p cut sits that close to its threshold: then the
 * neighbour may come out. tests/cuda/test_cuda_sample.c checks exact agreement away from
 * boundaries and counts the rest.
 *
 * NaN: greedy follows argmax_first (NaNs skipped; NaN at index 0 gives 0). A sampled row
 * holding a NaN gives vocab-1, as the host's unordered walk does (its sum is NaN, so no
 * u < cum holds and the walk falls through to the last token); the host's ordered path
 * sorts with a comparator that NaN makes inconsistent, so there is no answer to match.
 * +inf, an all -inf row, or a temperature whose inverse is inf make the top probability
 * NaN; the host then keeps the top-k cut, skips top-p, keeps one token under min-p and
 * falls through to the last candidate, and so does this file. */
#include "backend/cuda/cuda_common.cuh"
#include "engine/sample_rng.h"

#define SNT 512                 /* threads per row */
#define SNW (SNT / 32)
#define SBITS 11
#define SNBIN (1 << SBITS)      /* 2048 bins: 40 KB of histograms in shared memory */

typedef unsigned long long u64;

struct samp_smem {
    u64 hw[SNBIN];              /* weight of each digit's elements */
    u64 hk[SNBIN];              /* the largest key in the bin (the element, when alone) */
    unsigned hc[SNBIN];         /* elements in the bin */
    u64 prefix, base, key, wsum[SNW];
    int found, done, tok;
    float rf[SNW];
    int ri[SNW];
    float tmax[SNT];            /* each thread's largest value (the top-k prefilter) */
    float cut;
};

/* A row as the cuts see it. */
struct srow {
    const float *x;
    int n;
    float mx, inv_t, thr;       /* max logit; 1/temperature; min-p threshold */
    int minp;                   /* min-p on: candidates need p >= thr */
    u64 bound;                  /* candidates have key >= bound */
    float cut;                  /* and value >= cut (a lower bound on the k-th largest: the top-k prefilter) */
    float fxs;                  /* 2^s: probability to fixed point */
};

/* Float bits as an unsigned key in the order of the values (-0 as +0: they compare equal
 * on the host, and ties go to the lower id). */
__device__ __forceinline__ unsigned ord_bits(float v) {
    if (v == 0.f) v = 0.f;
    unsigned u = __float_as_uint(v);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ u64 skey(float v, int i) { return ((u64)ord_bits(v) << 32) | (u64)(0xffffffffu - (unsigned)i); }
__device__ __forceinline__ int key_id(u64 k) { return (int)(0xffffffffu - (unsigned)(k & 0xffffffffu)); }
/* expf((x - mx) / T) as the host computes it: (x - mx) * (1/T), each rounded */
__device__ __forceinline__ float sprob(const srow &c, float v) { return expf(__fmul_rn(__fsub_rn(v, c.mx), c.inv_t)); }
__device__ __forceinline__ u64 sfix(const srow &c, float p) { return __float2ull_rn(__fmul_rn(p, c.fxs)); }

/* f(v, i) for this thread's elements of x[0..n) (i = threadIdx.x + j·SNT), loading SU of them
 * before using any: a row is one block's, so with one load in flight per iteration a pass
 * would wait on memory latency ~300 times per thread. Every use below is order-free (max,
 * integer sums, atomics, ties broken by index), so the grouping changes no result. */
#define SU 8
template <typename F> __device__ __forceinline__ void for_row(const float *x, int n, F f) {
    int i = threadIdx.x;
    for (; i + (SU - 1) * SNT < n; i += SU * SNT) {
        float v[SU];
#pragma unroll
        for (int u = 0; u < SU; u++) v[u] = x[i + u * SNT];
#pragma unroll
        for (int u = 0; u < SU; u++) f(v[u], i + u * SNT);
    }
    for (; i < n; i += SNT) f(x[i], i);
}

/* Block-wide: the largest non-NaN value (-inf if none) and whether any NaN was seen. */
__device__ static void block_max_nan(samp_smem &s, const float *x, int n, float *mx, int *has_nan) {
    float m = -INFINITY;
    int nan = 0;
    for_row(x, n, [&](float v, int i) {
        m = v > m ? v : m;
        nan |= v != v;
    });
    s.tmax[threadIdx.x] = m;
    for (int o = 16; o; o >>= 1) {
        float t = __shfl_xor_sync(~0u, m, o);
        m = t > m ? t : m;
        nan |= __shfl_xor_sync(~0u, nan, o);
    }
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (!lane) { s.rf[w] = m; s.ri[w] = nan; }
    __syncthreads();
    m = -INFINITY; nan = 0;
    for (int j = 0; j < SNW; j++) { m = s.rf[j] > m ? s.rf[j] : m; nan |= s.ri[j]; }
    __syncthreads();
    *mx = m;
    *has_nan = nan;
}

/* A value at or below the k-th largest (k <= SNT), from the threads' maxima (block_max_nan):
 * k threads hold k distinct elements >= the k-th largest of their maxima, so the top k of
 * the row all lie at or above it. Filtering by it leaves the top-k select a few dozen
 * elements instead of the whole vocabulary (whose histogram atomics would contend). */
__device__ static float block_topk_cut(samp_smem &s, int k) {
    const int t = threadIdx.x;
    const float v = s.tmax[t];
    int rank = 0;
    for (int u = 0; u < SNT; u++) {
        const float x = s.tmax[u];
        rank += x > v || (x == v && u < t);
    }
    if (rank == k - 1) s.cut = v;
    __syncthreads();
    const float c = s.cut;
    __syncthreads();
    return c;
}

/* argmax_first: the first index of the largest non-NaN value; 0 when x[0] is NaN. */
__device__ static int block_argmax(samp_smem &s, const float *x, int n) {
    float bv = -INFINITY;
    int bi = INT_MAX;
    for_row(x, n, [&](float v, int i) {
        if (v > bv || (v == bv && i < bi)) { bv = v; bi = i; }
    });
    for (int o = 16; o; o >>= 1) {
        float tv = __shfl_xor_sync(~0u, bv, o);
        int ti = __shfl_xor_sync(~0u, bi, o);
        if (tv > bv || (tv == bv && ti < bi)) { bv = tv; bi = ti; }
    }
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (!lane) { s.rf[w] = bv; s.ri[w] = bi; }
    __syncthreads();
    bv = -INFINITY; bi = INT_MAX;
    for (int j = 0; j < SNW; j++)
        if (s.rf[j] > bv || (s.rf[j] == bv && s.ri[j] < bi)) { bv = s.rf[j]; bi = s.ri[j]; }
    __syncthreads();
    return x[0] != x[0] || bi == INT_MAX ? 0 : bi;
}

/* Number of candidates. */
__device__ static int block_count(samp_smem &s, const srow &c) {
    int k = 0;
    for_row(c.x, c.n, [&](float v, int i) { k += skey(v, i) >= c.bound && (!c.minp || sprob(c, v) >= c.thr); });
    for (int o = 16; o; o >>= 1) k += __shfl_xor_sync(~0u, k, o);
    if (threadIdx.x % 32 == 0) s.ri[threadIdx.x / 32] = k;
    __syncthreads();
    k = 0;
    for (int j = 0; j < SNW; j++) k += s.ri[j];
    __syncthreads();
    return k;
}

enum { SEL_RANK, SEL_TOPP, SEL_DRAW };

/* One element into a select pass's shared histogram (block_select, m_select): a candidate
 * whose key still matches prefix above bit hi lands in digit (key >> sh) & dmask with weight
 * 1, or with its fixed-point probability on the mass passes (zero mass: skipped). */
__device__ __forceinline__ void hist_add(samp_smem &s, const srow &c, float v, int i, u64 prefix, int sh, int hi, u64 dmask,
                                         bool mass) {
    if (v < c.cut) return;
    const u64 k = skey(v, i);
    if (k < c.bound || (hi < 64 && (k >> hi) != (prefix >> hi))) return;
    u64 w = 1;
    if (mass || c.minp) {
        const float p = sprob(c, v);
        if (c.minp && !(p >= c.thr)) return;
        if (mass && !(w = sfix(c, p))) return;
    }
    const int d = (int)((k >> sh) & dmask);
    atomicAdd(&s.hw[d], w);
    atomicAdd(&s.hc[d], 1u);
    atomicMax(&s.hk[d], k);
}

/* A select pass's scan of the finished histogram by warp 0: lane l holds bins top-down
 * (SNBIN-1-64l-j for j < 64); the lane where the running weight passes T walks its bins to
 * the digit, extends s.prefix by it and says whether the element is known (s.done, s.key).
 * Pass 0 turns frac into T from the total for the mass kinds. */
__device__ __forceinline__ void hist_pick(samp_smem &s, int lane, int pass, int kind, double frac, u64 &T, u64 prefix, int sh) {
    u64 loc = 0;
    for (int j = 0; j < SNBIN / 32; j++) loc += s.hw[SNBIN - 1 - lane * (SNBIN / 32) - j];
    u64 inc = loc;
    for (int o = 1; o < 32; o <<= 1) {
        u64 t = __shfl_up_sync(~0u, inc, o);
        if (lane >= o) inc += t;
    }
    if (pass == 0) {
        const u64 tot = __shfl_sync(~0u, inc, 31);
        if (kind == SEL_TOPP) { double t = ceil(frac * (double)tot); T = t >= 1 ? (u64)t - 1 : 0; }
        else if (kind == SEL_DRAW) T = (u64)(frac * (double)tot);
        if (!lane) s.base = 0;
    }
    __syncwarp();
    const u64 base = s.base;
    const unsigned hit = __ballot_sync(~0u, base + inc > T);
    if (!hit) {
        if (!lane) { s.found = 0; s.done = 1; }
    } else if (lane == __ffs(hit) - 1) {
        u64 cum = base + inc - loc;
        int d = SNBIN - 1 - lane * (SNBIN / 32);
        for (int j = 0; j < SNBIN / 32; j++, d--) {
            if (cum + s.hw[d] > T) break;
            cum += s.hw[d];
        }
        s.prefix = prefix | ((u64)d << sh);
        s.base = cum;
        s.found = 1;
        s.done = s.hc[d] == 1 || sh == 0;
        s.key = s.hc[d] == 1 ? s.hk[d] : s.prefix;
    }
}

/* The first candidate, in key order (logit desc, id asc), at which the running weight
 * exceeds T: weight 1 per element (SEL_RANK: T = rank, the element of that rank) or its
 * fixed-point probability (SEL_TOPP: T = ceil(frac·total) - 1, i.e. cum >= frac·total;
 * SEL_DRAW: T = floor(frac·total), i.e. u·total < cum). Returns 0 when the total never
 * exceeds T; else 1 and the element's key. Elements of zero mass cannot be where a mass sum
 * crosses, so mass passes skip them. */
__device__ static int block_select(samp_smem &s, const srow &c, int kind, u64 rank, double frac, u64 *key) {
    const int tid = threadIdx.x, lane = tid % 32;
    const bool mass = kind != SEL_RANK;
    /* 64 key bits in 11/11/10 digits: the value half, then the id half for ties */
    const int SH[6] = {53, 42, 32, 21, 10, 0}, WD[6] = {11, 11, 10, 11, 11, 10};
    u64 prefix = 0, T = rank;
    for (int pass = 0; pass < 6; pass++) {
        const int sh = SH[pass], hi = sh + WD[pass];
        const u64 dmask = (1ull << WD[pass]) - 1;
        for (int b = tid; b < SNBIN; b += SNT) { s.hw[b] = 0; s.hk[b] = 0; s.hc[b] = 0; }
        __syncthreads();
        for_row(c.x, c.n, [&](float v, int i) {
            hist_add(s, c, v, i, prefix, sh, hi, dmask, mass);
        });
        __syncthreads();
        if (tid < 32) hist_pick(s, lane, pass, kind, frac, T, prefix, sh);
        __syncthreads();
        prefix = s.prefix;
        const int done = s.done;
        __syncthreads();
        if (done) break;
    }
    *key = s.key;
    return s.found;
}

/* The host's unordered draw: the first index i with u·total < Σ_{j<=i} p_j, index order.
 * Each warp owns a contiguous segment; the warp whose segment holds the crossing walks it
 * 32 elements at a time (SU·32 loaded at once). vocab-1 when nothing crosses (as the host
 * falls through). */
__device__ static int block_draw_index(samp_smem &s, const srow &c, double u) {
    const int tid = threadIdx.x, w = tid / 32, lane = tid % 32;
    const int seg = ((c.n + SNW - 1) / SNW + 31) & ~31;
    const int lo = w * seg, hi = min(c.n, lo + seg);
    u64 sum = 0;
    int i = lo + lane;
    for (; i + (SU - 1) * 32 < hi; i += SU * 32) {
        float v[SU];
#pragma unroll
        for (int k = 0; k < SU; k++) v[k] = c.x[i + k * 32];
#pragma unroll
        for (int k = 0; k < SU; k++) sum += sfix(c, sprob(c, v[k]));
    }
    for (; i < hi; i += 32) sum += sfix(c, sprob(c, c.x[i]));
    for (int o = 16; o; o >>= 1) sum += __shfl_xor_sync(~0u, sum, o);
    if (!lane) s.wsum[w] = sum;
    __syncthreads();
    if (tid == 0) {
        u64 tot = 0;
        for (int j = 0; j < SNW; j++) tot += s.wsum[j];
        const u64 T = (u64)(u * (double)tot);
        u64 cum = 0;
        int ws = -1;
        for (int j = 0; j < SNW; j++) {
            if (cum + s.wsum[j] > T) { ws = j; break; }
            cum += s.wsum[j];
        }
        s.ri[0] = ws;
        s.base = cum;
        s.key = T;
        s.tok = c.n - 1;
    }
    __syncthreads();
    if (w == s.ri[0]) {
        const u64 T = s.key;
        u64 base = s.base;
        bool found = false;
        for (int i0 = lo; i0 < hi && !found; i0 += SU * 32) {
            float v[SU];
#pragma unroll
            for (int k = 0; k < SU; k++) v[k] = i0 + k * 32 + lane < hi ? c.x[i0 + k * 32 + lane] : 0.f;
#pragma unroll
            for (int k = 0; k < SU; k++) {
                if (found) break;
                const int j = i0 + k * 32 + lane;
                u64 inc = j < hi ? sfix(c, sprob(c, v[k])) : 0;
                for (int o = 1; o < 32; o <<= 1) {
                    u64 t = __shfl_up_sync(~0u, inc, o);
                    if (lane >= o) inc += t;
                }
                const unsigned hit = __ballot_sync(~0u, base + inc > T);
                if (hit) {
                    if (lane == __ffs(hit) - 1) s.tok = j;
                    found = true;
                }
                base += __shfl_sync(~0u, inc, 31);
            }
        }
    }
    __syncthreads();
    return s.tok;
}

__global__ void __launch_bounds__(SNT) sample_kernel(int32_t *out, float *logits, int V, int fx_shift, const sample_row_t *rows,
                                                     const int32_t *bias_ids, const float *bias_vals, const int32_t *pen_ids,
                                                     const int32_t *pen_counts) {
    __shared__ samp_smem s;
    const sample_row_t R = rows[blockIdx.x];
    float *x = logits + (size_t)blockIdx.x * V;
    const int tid = threadIdx.x;
    /* logit bias, in order (a repeated id adds twice, in the same order as the host) */
    if (tid == 0)
        for (int j = 0; j < R.n_bias; j++) x[bias_ids[R.bias_off + j]] = __fadd_rn(x[bias_ids[R.bias_off + j]], bias_vals[R.bias_off + j]);
    __syncthreads();
    /* penalties: each distinct history token once (the list is distinct, so threads touch
     * different logits) */
    const bool rep = R.repetition_penalty != 1.0f, pf = R.presence_penalty != 0 || R.frequency_penalty != 0;
    for (int j = tid; j < R.n_pen; j += SNT) {
        const int t = pen_ids[R.pen_off + j], cnt = pen_counts[R.pen_off + j];
        float v = x[t];
        if (rep) v = v > 0 ? __fdiv_rn(v, R.repetition_penalty) : __fmul_rn(v, R.repetition_penalty);
        if (pf && cnt > 0) v = __fsub_rn(v, __fadd_rn(__fmul_rn(R.frequency_penalty, (float)cnt), R.presence_penalty));
        x[t] = v;
    }
    __syncthreads();
    if (R.temperature == 0) {
        const int t = block_argmax(s, x, V);
        if (tid == 0) out[blockIdx.x] = t;
        return;
    }
    srow c;
    c.x = x; c.n = V;
    c.inv_t = __fdiv_rn(1.0f, R.temperature);
    c.minp = 0; c.thr = 0; c.bound = 0; c.cut = -INFINITY;
    c.fxs = ldexpf(1.0f, fx_shift);
    int has_nan;
    block_max_nan(s, x, V, &c.mx, &has_nan);
    const double u = kiln_rng_uniform(R.seed, R.step);
    const float ptop = expf(__fmul_rn(__fsub_rn(c.mx, c.mx), c.inv_t)); /* the top candidate's probability: 1, or NaN */
    const bool ordered = R.top_k > 0 || R.top_p < 1.0f || R.min_p > 0;
    int tok;
    if (has_nan) tok = V - 1;
    else if (!ordered) tok = ptop != ptop ? V - 1 : block_draw_index(s, c, u);
    else {
        const int k = R.top_k > 0 && R.top_k < V ? R.top_k : V;
        u64 key;
        if (k < V) {
            c.cut = k <= SNT ? block_topk_cut(s, k) : -INFINITY;
            block_select(s, c, SEL_RANK, (u64)k - 1, 0, &key);
            c.bound = key;
            c.cut = -INFINITY;
        }
        if (ptop != ptop) {
            /* the host's NaN sum: top-p keeps all, min-p keeps one, the walk falls through */
            if (R.min_p > 0) block_select(s, c, SEL_RANK, 0, 0, &key);
            else if (k == V) block_select(s, c, SEL_RANK, (u64)V - 1, 0, &key);
            tok = key_id(key);
        } else {
            if (R.top_p < 1.0f && block_select(s, c, SEL_TOPP, 0, R.top_p, &key)) c.bound = key;
            if (R.min_p > 0) { c.minp = 1; c.thr = __fmul_rn(R.min_p, ptop); }
            if (block_select(s, c, SEL_DRAW, 0, u, &key)) tok = key_id(key);
            else { /* u·total rounded up to the total: the last candidate, as on the host */
                const int nc = block_count(s, c);
                block_select(s, c, SEL_RANK, (u64)nc - 1, 0, &key);
                tok = key_id(key);
            }
        }
    }
    if (tid == 0) out[blockIdx.x] = tok;
}

/* --- Several blocks per row (KILN_CUDA_SAMPLE_MB; the batch-1 decode case) ---
 * One block per row leaves all but one SM idle at batch 1: a greedy row of 128k logits took
 * 21.7 us, an ordered mix hundreds. Here G blocks of a launch share a row (grid G x rows), each
 * owning a contiguous chunk, and the steps above run unchanged inside a block; where a step
 * needs the whole row (max, counts, a mass total, a radix pass's histogram) the blocks meet:
 * each writes its part to global memory, a per-row barrier (all G blocks are resident: G x rows
 * is capped by the occupancy), then every block combines the G parts itself, in the same way,
 * so every block takes the same decisions. Every combined quantity is a max, an OR or an
 * integer sum (the masses are fixed point), so no result depends on G or on which block adds
 * first: the tokens are bitwise those of the one-block kernel (and the host's). The only
 * block-dependent value is the top-k prefilter cut: each block takes the k-th largest of its
 * own threads' maxima, also a lower bound of the row's k-th value (k threads of the block hold
 * k distinct elements at or above it), so the select sees all of the top k as before.
 *
 * Global state per row (sample_ws, zeroed once): an arrival counter, a generation, the
 * number of barriers passed so far (kept across launches), per-block slots for two phases (a
 * phase is the stretch between two barriers: a slot written in phase p is read in p + 1, so
 * phase p + 2 may overwrite it) and three histograms (phase p accumulates into H[p % 3],
 * p + 1 reads it, and each barrier ending phase p clears H[(p + 1) % 3], read in p - 1). */
#define SGMAX 64                                /* blocks per row at most (two slots per lane in a warp) */
#define SPHB (SNBIN * 20)                       /* a global histogram: weights and keys (u64), counts (u32) */
struct mslot { float f; int i; u64 u; };
#define SROWB (64 + 2 * SGMAX * sizeof(mslot) + 3 * SPHB)

struct rctx {
    int G, b, lo, hi;                           /* blocks of the row, this block, its chunk [lo, hi) */
    unsigned *bar;                              /* [0] arrivals, [1] generation, [2] barriers passed */
    mslot *slot;                                /* [2][SGMAX] */
    char *hist;                                 /* [3][SPHB] */
    unsigned n;                                 /* barriers passed = the phase */
};
__device__ __forceinline__ u64 *g_hw(const rctx &r, unsigned p) { return (u64 *)(r.hist + (p % 3) * SPHB); }
__device__ __forceinline__ u64 *g_hk(const rctx &r, unsigned p) { return (u64 *)(r.hist + (p % 3) * SPHB + SNBIN * 8); }
__device__ __forceinline__ unsigned *g_hc(const rctx &r, unsigned p) { return (unsigned *)(r.hist + (p % 3) * SPHB + SNBIN * 16); }
__device__ __forceinline__ mslot *g_slot(const rctx &r) { return r.slot + (r.n & 1) * SGMAX; }

/* The row's barrier; clears this block's share of the histogram the next phase fills. Data
 * other blocks wrote is read after it with ld.global.cg (L2: L1 is not coherent). */
__device__ static void row_sync(rctx &r) {
    {
        const unsigned q = r.n + 1;
        u64 *w = g_hw(r, q), *k = g_hk(r, q);
        unsigned *c = g_hc(r, q);
        for (int j = r.b * SNT + threadIdx.x; j < SNBIN; j += r.G * SNT) { w[j] = 0; k[j] = 0; c[j] = 0; }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        volatile unsigned *gen = r.bar + 1;
        const unsigned g = *gen;
        __threadfence();
        if (atomicAdd(r.bar, 1u) == (unsigned)r.G - 1) {
            atomicExch(r.bar, 0u);
            __threadfence();
            atomicAdd(r.bar + 1, 1u);
        } else
            while (*gen == g) {}
        __threadfence();
    }
    __syncthreads();
    r.n++;
}

/* for_row over the chunk [lo, hi): SU loads in flight per thread (predicated), through L2. */
template <typename F> __device__ __forceinline__ void for_range(const float *x, int lo, int hi, F f) {
    for (int i = lo + threadIdx.x; i < hi; i += SU * SNT) {
        float v[SU];
#pragma unroll
        for (int u = 0; u < SU; u++) v[u] = i + u * SNT < hi ? __ldcg(x + i + u * SNT) : 0.f;
#pragma unroll
        for (int u = 0; u < SU; u++)
            if (i + u * SNT < hi) f(v[u], i + u * SNT);
    }
}

/* Greedy: each block's first max, the last block to arrive combines them (no barrier). */
__device__ static void m_argmax(samp_smem &s, rctx &r, const float *x, int32_t *out) {
    const int tid = threadIdx.x, w = tid / 32, lane = tid % 32;
    float bv = -INFINITY;
    int bi = INT_MAX;
    for_range(x, r.lo, r.hi, [&](float v, int i) {
        if (v > bv || (v == bv && i < bi)) { bv = v; bi = i; }
    });
    for (int o = 16; o; o >>= 1) {
        float tv = __shfl_xor_sync(~0u, bv, o);
        int ti = __shfl_xor_sync(~0u, bi, o);
        if (tv > bv || (tv == bv && ti < bi)) { bv = tv; bi = ti; }
    }
    if (!lane) { s.rf[w] = bv; s.ri[w] = bi; }
    __syncthreads();
    mslot *sl = g_slot(r);
    if (tid == 0) {
        bv = -INFINITY; bi = INT_MAX;
        for (int j = 0; j < SNW; j++)
            if (s.rf[j] > bv || (s.rf[j] == bv && s.ri[j] < bi)) { bv = s.rf[j]; bi = s.ri[j]; }
        sl[r.b].f = bv;
        sl[r.b].i = bi;
        __threadfence();
        s.done = atomicAdd(r.bar, 1u) == (unsigned)r.G - 1;
    }
    __syncthreads();
    if (s.done && tid < 32) {
        __threadfence();
        bv = -INFINITY; bi = INT_MAX;
        for (int j = lane; j < r.G; j += 32) {
            const float tv = __ldcg(&sl[j].f);
            const int ti = __ldcg(&sl[j].i);
            if (tv > bv || (tv == bv && ti < bi)) { bv = tv; bi = ti; }
        }
        for (int o = 16; o; o >>= 1) {
            float tv = __shfl_xor_sync(~0u, bv, o);
            int ti = __shfl_xor_sync(~0u, bi, o);
            if (tv > bv || (tv == bv && ti < bi)) { bv = tv; bi = ti; }
        }
        if (lane == 0) {
            atomicExch(r.bar, 0u);
            const float x0 = __ldcg(x);
            *out = x0 != x0 || bi == INT_MAX ? 0 : bi;
        }
    }
}

/* block_max_nan over the row (s.tmax keeps this block's thread maxima for block_topk_cut). */
__device__ static void m_max_nan(samp_smem &s, rctx &r, const float *x, float *mx, int *has_nan) {
    const int tid = threadIdx.x, w = tid / 32, lane = tid % 32;
    float m = -INFINITY;
    int nan = 0;
    for_range(x, r.lo, r.hi, [&](float v, int i) {
        m = v > m ? v : m;
        nan |= v != v;
    });
    s.tmax[tid] = m;
    for (int o = 16; o; o >>= 1) {
        float t = __shfl_xor_sync(~0u, m, o);
        m = t > m ? t : m;
        nan |= __shfl_xor_sync(~0u, nan, o);
    }
    if (!lane) { s.rf[w] = m; s.ri[w] = nan; }
    __syncthreads();
    mslot *sl = g_slot(r);
    if (tid == 0) {
        m = -INFINITY; nan = 0;
        for (int j = 0; j < SNW; j++) { m = s.rf[j] > m ? s.rf[j] : m; nan |= s.ri[j]; }
        sl[r.b].f = m;
        sl[r.b].i = nan;
    }
    row_sync(r);
    if (tid < 32) {
        m = -INFINITY; nan = 0;
        for (int j = lane; j < r.G; j += 32) {
            const float t = __ldcg(&sl[j].f);
            m = t > m ? t : m;
            nan |= __ldcg(&sl[j].i);
        }
        for (int o = 16; o; o >>= 1) {
            float t = __shfl_xor_sync(~0u, m, o);
            m = t > m ? t : m;
            nan |= __shfl_xor_sync(~0u, nan, o);
        }
        if (!lane) { s.rf[0] = m; s.ri[0] = nan; }
    }
    __syncthreads();
    *mx = s.rf[0];
    *has_nan = s.ri[0];
    __syncthreads();
}

__device__ static int m_count(samp_smem &s, rctx &r, const srow &c) {
    const int tid = threadIdx.x, lane = tid % 32;
    int k = 0;
    for_range(c.x, r.lo, r.hi, [&](float v, int i) { k += skey(v, i) >= c.bound && (!c.minp || sprob(c, v) >= c.thr); });
    for (int o = 16; o; o >>= 1) k += __shfl_xor_sync(~0u, k, o);
    if (!lane) s.ri[tid / 32] = k;
    __syncthreads();
    mslot *sl = g_slot(r);
    if (tid == 0) {
        k = 0;
        for (int j = 0; j < SNW; j++) k += s.ri[j];
        sl[r.b].i = k;
    }
    row_sync(r);
    if (tid < 32) {
        k = 0;
        for (int j = lane; j < r.G; j += 32) k += __ldcg(&sl[j].i);
        for (int o = 16; o; o >>= 1) k += __shfl_xor_sync(~0u, k, o);
        if (!lane) s.ri[0] = k;
    }
    __syncthreads();
    k = s.ri[0];
    __syncthreads();
    return k;
}

/* block_select over the row: each pass's chunk histograms are added into the phase's global
 * histogram (non-empty bins only), and after the barrier every block scans the sum. */
__device__ static int m_select(samp_smem &s, rctx &r, const srow &c, int kind, u64 rank, double frac, u64 *key) {
    const int tid = threadIdx.x, lane = tid % 32;
    const bool mass = kind != SEL_RANK;
    const int SH[6] = {53, 42, 32, 21, 10, 0}, WD[6] = {11, 11, 10, 11, 11, 10};
    u64 prefix = 0, T = rank;
    for (int pass = 0; pass < 6; pass++) {
        const int sh = SH[pass], hi = sh + WD[pass];
        const u64 dmask = (1ull << WD[pass]) - 1;
        for (int b = tid; b < SNBIN; b += SNT) { s.hw[b] = 0; s.hk[b] = 0; s.hc[b] = 0; }
        __syncthreads();
        for_range(c.x, r.lo, r.hi, [&](float v, int i) {
            hist_add(s, c, v, i, prefix, sh, hi, dmask, mass);
        });
        __syncthreads();
        u64 *gw = g_hw(r, r.n), *gk = g_hk(r, r.n);
        unsigned *gc = g_hc(r, r.n);
        for (int b = tid; b < SNBIN; b += SNT) {
            const unsigned cnt = s.hc[b];
            if (cnt) { atomicAdd(gw + b, s.hw[b]); atomicAdd(gc + b, cnt); atomicMax(gk + b, s.hk[b]); }
        }
        row_sync(r);
        for (int b = tid; b < SNBIN; b += SNT) { s.hw[b] = __ldcg(gw + b); s.hc[b] = __ldcg(gc + b); s.hk[b] = __ldcg(gk + b); }
        __syncthreads();
        if (tid < 32) hist_pick(s, lane, pass, kind, frac, T, prefix, sh);
        __syncthreads();
        prefix = s.prefix;
        const int done = s.done;
        __syncthreads();
        if (done) break;
    }
    *key = s.key;
    return s.found;
}

/* block_draw_index over the row: the blocks' chunk totals are scanned in block order; the block
 * whose chunk holds the crossing walks it as before. Returns 1 in the block that knows the
 * token (that one, or block 0 when nothing crosses: vocab-1). */
__device__ static int m_draw_index(samp_smem &s, rctx &r, const srow &c, double u, int *tok) {
    const int tid = threadIdx.x, w = tid / 32, lane = tid % 32;
    const int seg = ((r.hi - r.lo + SNW - 1) / SNW + 31) & ~31;
    const int lo = r.lo + w * seg, hi = min(r.hi, lo + seg);
    u64 sum = 0;
    int i = lo + lane;
    for (; i + (SU - 1) * 32 < hi; i += SU * 32) {
        float v[SU];
#pragma unroll
        for (int k = 0; k < SU; k++) v[k] = __ldcg(c.x + i + k * 32);
#pragma unroll
        for (int k = 0; k < SU; k++) sum += sfix(c, sprob(c, v[k]));
    }
    for (; i < hi; i += 32) sum += sfix(c, sprob(c, __ldcg(c.x + i)));
    for (int o = 16; o; o >>= 1) sum += __shfl_xor_sync(~0u, sum, o);
    if (!lane) s.wsum[w] = sum;
    __syncthreads();
    mslot *sl = g_slot(r);
    if (tid == 0) {
        u64 bs = 0;
        for (int j = 0; j < SNW; j++) bs += s.wsum[j];
        sl[r.b].u = bs;
    }
    row_sync(r);
    if (tid < 32) {
        /* lane l holds blocks 2l and 2l + 1 (SGMAX = 64) */
        const int b0 = 2 * lane, b1 = b0 + 1;
        const u64 v0 = b0 < r.G ? __ldcg(&sl[b0].u) : 0, v1 = b1 < r.G ? __ldcg(&sl[b1].u) : 0;
        const u64 loc = v0 + v1;
        u64 inc = loc;
        for (int o = 1; o < 32; o <<= 1) {
            u64 t = __shfl_up_sync(~0u, inc, o);
            if (lane >= o) inc += t;
        }
        const u64 tot = __shfl_sync(~0u, inc, 31);
        const u64 T = (u64)(u * (double)tot);
        const unsigned hit = __ballot_sync(~0u, inc > T);
        const int L = hit ? __ffs(hit) - 1 : 0;
        const u64 pre = __shfl_sync(~0u, inc - loc, L), a0 = __shfl_sync(~0u, v0, L);
        if (!lane) {
            s.ri[1] = !hit ? -1 : pre + a0 > T ? 2 * L : 2 * L + 1;
            s.base = !hit || pre + a0 > T ? pre : pre + a0;
            s.key = T;
        }
    }
    __syncthreads();
    const int jb = s.ri[1];
    if (jb != r.b) {
        *tok = c.n - 1;
        return jb < 0 && r.b == 0;
    }
    if (tid == 0) {
        const u64 T = s.key;
        u64 cum = s.base;
        int ws = -1;
        for (int j = 0; j < SNW; j++) {
            if (cum + s.wsum[j] > T) { ws = j; break; }
            cum += s.wsum[j];
        }
        s.ri[0] = ws;
        s.base = cum;
        s.tok = c.n - 1;
    }
    __syncthreads();
    if (w == s.ri[0]) {
        const u64 T = s.key;
        u64 base = s.base;
        bool found = false;
        for (int i0 = lo; i0 < hi && !found; i0 += SU * 32) {
            float v[SU];
#pragma unroll
            for (int k = 0; k < SU; k++) v[k] = i0 + k * 32 + lane < hi ? __ldcg(c.x + i0 + k * 32 + lane) : 0.f;
#pragma unroll
            for (int k = 0; k < SU; k++) {
                if (found) break;
                const int j = i0 + k * 32 + lane;
                u64 inc = j < hi ? sfix(c, sprob(c, v[k])) : 0;
                for (int o = 1; o < 32; o <<= 1) {
                    u64 t = __shfl_up_sync(~0u, inc, o);
                    if (lane >= o) inc += t;
                }
                const unsigned hit = __ballot_sync(~0u, base + inc > T);
                if (hit) {
                    if (lane == __ffs(hit) - 1) s.tok = j;
                    found = true;
                }
                base += __shfl_sync(~0u, inc, 31);
            }
        }
    }
    __syncthreads();
    *tok = s.tok;
    return 1;
}

/* sample_kernel with G = gridDim.x blocks per row (row = blockIdx.y); ws: the rows' state. */
__global__ void __launch_bounds__(SNT) sample_mb_kernel(int32_t *out, float *logits, int V, int fx_shift, const sample_row_t *rows,
                                                        const int32_t *bias_ids, const float *bias_vals, const int32_t *pen_ids,
                                                        const int32_t *pen_counts, char *ws) {
    __shared__ samp_smem s;
    const int row = blockIdx.y, tid = threadIdx.x;
    const sample_row_t R = rows[row];
    float *x = logits + (size_t)row * V;
    rctx r;
    r.G = gridDim.x;
    r.b = blockIdx.x;
    const int per = ((V + r.G - 1) / r.G + 31) & ~31;
    r.lo = min(V, r.b * per);
    r.hi = min(V, r.lo + per);
    char *rb = ws + (size_t)row * SROWB;
    r.bar = (unsigned *)rb;
    r.slot = (mslot *)(rb + 64);
    r.hist = rb + 64 + 2 * SGMAX * sizeof(mslot);
    r.n = *(volatile unsigned *)(r.bar + 2);
    const unsigned n0 = r.n;
    if (R.n_bias > 0 || R.n_pen > 0) {
        if (r.b == 0) { /* block 0 edits the row as sample_kernel does; the others wait at the barrier */
            if (tid == 0)
                for (int j = 0; j < R.n_bias; j++) x[bias_ids[R.bias_off + j]] = __fadd_rn(x[bias_ids[R.bias_off + j]], bias_vals[R.bias_off + j]);
            __syncthreads();
            const bool rep = R.repetition_penalty != 1.0f, pf = R.presence_penalty != 0 || R.frequency_penalty != 0;
            for (int j = tid; j < R.n_pen; j += SNT) {
                const int t = pen_ids[R.pen_off + j], cnt = pen_counts[R.pen_off + j];
                float v = x[t];
                if (rep) v = v > 0 ? __fdiv_rn(v, R.repetition_penalty) : __fmul_rn(v, R.repetition_penalty);
                if (pf && cnt > 0) v = __fsub_rn(v, __fadd_rn(__fmul_rn(R.frequency_penalty, (float)cnt), R.presence_penalty));
                x[t] = v;
            }
        }
        row_sync(r);
    }
    if (R.temperature == 0) m_argmax(s, r, x, out + row);
    else {
        srow c;
        c.x = x; c.n = V;
        c.inv_t = __fdiv_rn(1.0f, R.temperature);
        c.minp = 0; c.thr = 0; c.bound = 0; c.cut = -INFINITY;
        c.fxs = ldexpf(1.0f, fx_shift);
        int has_nan;
        m_max_nan(s, r, x, &c.mx, &has_nan);
        const double u = kiln_rng_uniform(R.seed, R.step);
        const float ptop = expf(__fmul_rn(__fsub_rn(c.mx, c.mx), c.inv_t));
        const bool ordered = R.top_k > 0 || R.top_p < 1.0f || R.min_p > 0;
        int tok = V - 1, own = r.b == 0;
        if (has_nan) tok = V - 1;
        else if (!ordered) {
            if (ptop != ptop) tok = V - 1;
            else own = m_draw_index(s, r, c, u, &tok);
        } else {
            const int k = R.top_k > 0 && R.top_k < V ? R.top_k : V;
            u64 key;
            if (k < V) {
                c.cut = k <= SNT ? block_topk_cut(s, k) : -INFINITY;
                m_select(s, r, c, SEL_RANK, (u64)k - 1, 0, &key);
                c.bound = key;
                c.cut = -INFINITY;
            }
            if (ptop != ptop) {
                if (R.min_p > 0) m_select(s, r, c, SEL_RANK, 0, 0, &key);
                else if (k == V) m_select(s, r, c, SEL_RANK, (u64)V - 1, 0, &key);
                tok = key_id(key);
            } else {
                if (R.top_p < 1.0f && m_select(s, r, c, SEL_TOPP, 0, R.top_p, &key)) c.bound = key;
                if (R.min_p > 0) { c.minp = 1; c.thr = __fmul_rn(R.min_p, ptop); }
                if (m_select(s, r, c, SEL_DRAW, 0, u, &key)) tok = key_id(key);
                else {
                    const int nc = m_count(s, r, c);
                    m_select(s, r, c, SEL_RANK, (u64)nc - 1, 0, &key);
                    tok = key_id(key);
                }
            }
        }
        if (own && tid == 0) out[row] = tok;
    }
    if (r.b == 0 && tid == 0 && r.n != n0) r.bar[2] = r.n; /* every block read the count before the first barrier */
}

/* Blocks per row for the multi-block kernel, 0 for the one-block kernel. KILN_CUDA_SAMPLE_MB=0:
 * always one block (the old kernel); KILN_CUDA_SAMPLE_G=N: N blocks per row (N = 1 runs the
 * multi-block code in one block: for tests). Default: a block per 2048 logits up to SGMAX,
 * where the rows x G blocks can all be resident (the barriers need it), and at least 2. */
static int sample_blocks(cuda_impl_t *c, int rows, int V) {
    static int init, mode, forced, occ;
    if (!init) {
        init = 1;
        const char *e = getenv("KILN_CUDA_SAMPLE_MB");
        mode = !(e && !strcmp(e, "0"));
        const char *g = getenv("KILN_CUDA_SAMPLE_G");
        forced = g ? atoi(g) : 0;
        cuda_capture_flush(c);
        cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, sample_mb_kernel, SNT, 0));
    }
    if (!mode) return 0;
    const int cap = occ * c->sm_count / rows;
    int G = forced > 0 ? forced : (V + 2047) / 2048;
    if (G > SGMAX) G = SGMAX;
    if (G > cap) G = cap;
    return G >= (forced > 0 ? 1 : 2) ? G : 0;
}

/* The multi-block rows' state for backend c, at least `rows` rows, zeroed when (re)allocated (the
 * kernels leave it consistent between launches). Kept per backend in a small table rather than in
 * cuda_impl_t (not freed at destroy: a few MB; a later backend at the same address reuses it, which
 * is safe: the state is valid at every kernel boundary, and one backend's launches are serial). */
static char *sample_ws(cuda_impl_t *c, int rows) {
    static struct { cuda_impl_t *c; char *p; size_t bytes; } tab[8];
    static int next;
    int i = 0;
    while (i < 8 && tab[i].c != c) i++;
    if (i == 8) { i = next; next = (next + 1) % 8; tab[i].c = c; tab[i].p = NULL; tab[i].bytes = 0; }
    const size_t need = SROWB * (size_t)(rows > 8 ? rows : 8);
    if (need > tab[i].bytes) {
        cuda_sync(c);
        if (tab[i].p) cudaCheck(cudaFree(tab[i].p));
        cudaCheck(cudaMalloc((void **)&tab[i].p, need));
        cudaCheck(cudaMemsetAsync(tab[i].p, 0, need, c->stream));
        tab[i].bytes = need;
    }
    return tab[i].p;
}

/* The op: packs the host arrays into one upload, runs a block (or G) per row, downloads the ids. */
void cuda_sample(backend_t *be, int32_t *tokens, float *logits, const sample_args_t *a) {
    cuda_impl_t *c = cuda_impl(be);
    if (a->rows <= 0) return;
    size_t nb = 0, np = 0;
    for (int r = 0; r < a->rows; r++) {
        const sample_row_t *R = &a->row[r];
        if (R->bias_off + R->n_bias > (int)nb) nb = (size_t)(R->bias_off + R->n_bias);
        if (R->pen_off + R->n_pen > (int)np) np = (size_t)(R->pen_off + R->n_pen);
    }
    const size_t rb = sizeof(sample_row_t) * a->rows, ob = (sizeof(int32_t) * a->rows + 15) & ~(size_t)15;
    const size_t bb = (sizeof(int32_t) * nb + 15) & ~(size_t)15, vb = (sizeof(float) * nb + 15) & ~(size_t)15;
    const size_t pb = (sizeof(int32_t) * np + 15) & ~(size_t)15;
    /* [rows][tokens out][bias ids][bias values][pen ids][pen counts]: one copy, so the ring
     * cannot restart between two of them; the kernel writes the tokens into their slot */
    char *hb = (char *)cuda_host_buf(c, 1, rb + ob + bb + vb + 2 * pb);
    memcpy(hb, a->row, rb);
    memset(hb + rb, 0xff, ob);
    if (nb) { memcpy(hb + rb + ob, a->bias_ids, sizeof(int32_t) * nb); memcpy(hb + rb + ob + bb, a->bias_vals, sizeof(float) * nb); }
    if (np) { memcpy(hb + rb + ob + bb + vb, a->pen_ids, sizeof(int32_t) * np); memcpy(hb + rb + ob + bb + vb + pb, a->pen_counts, sizeof(int32_t) * np); }
    char *db = (char *)cuda_host_to_dev(c, hb, rb + ob + bb + vb + 2 * pb);
    int lg = 0;
    while ((1ll << lg) < (long long)a->vocab) lg++;
    const int G = sample_blocks(c, a->rows, a->vocab);
    if (G > 0) {
        char *ws = sample_ws(c, a->rows);
        sample_mb_kernel<<<dim3(G, a->rows), SNT, 0, c->stream>>>((int32_t *)(db + rb), logits, a->vocab, 63 - lg, (const sample_row_t *)db,
                                                                  (const int32_t *)(db + rb + ob), (const float *)(db + rb + ob + bb),
                                                                  (const int32_t *)(db + rb + ob + bb + vb),
                                                                  (const int32_t *)(db + rb + ob + bb + vb + pb), ws);
    } else
    sample_kernel<<<a->rows, SNT, 0, c->stream>>>((int32_t *)(db + rb), logits, a->vocab, 63 - lg, (const sample_row_t *)db,
                                                  (const int32_t *)(db + rb + ob), (const float *)(db + rb + ob + bb),
                                                  (const int32_t *)(db + rb + ob + bb + vb),
                                                  (const int32_t *)(db + rb + ob + bb + vb + pb));
    cudaLaunchCheck();
    be->ops->download(be, tokens, db + rb, sizeof(int32_t) * a->rows);
}
