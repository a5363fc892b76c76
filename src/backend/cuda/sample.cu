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
        });
        __syncthreads();
        if (tid < 32) {
            /* lane l holds bins top-down: SNBIN-1-64l-j for j < 64 */
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

/* The op: packs the host arrays into one upload, runs a block per row, downloads the ids. */
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
    sample_kernel<<<a->rows, SNT, 0, c->stream>>>((int32_t *)(db + rb), logits, a->vocab, 63 - lg, (const sample_row_t *)db,
                                                  (const int32_t *)(db + rb + ob), (const float *)(db + rb + ob + bb),
                                                  (const int32_t *)(db + rb + ob + bb + vb),
                                                  (const int32_t *)(db + rb + ob + bb + vb + pb));
    cudaLaunchCheck();
    be->ops->download(be, tokens, db + rb, sizeof(int32_t) * a->rows);
}
