/* backend.h — the op vtable every compute backend implements (DESIGN §4).
 *
 * Models are written once against these ops; a backend (cpu/, later cuda/) supplies them.
 * Activations are f32 buffers the backend allocates (host memory on the CPU, device
 * memory on a GPU). Weights are weight_t views uploaded once (a no-op on the CPU).
 *
 * Shapes are in the comments. T is the number of tokens in the step (all rows of a
 * ragged batch together). Every op computes each token independently of how many other
 * tokens share the step, in a fixed reduction order: that is what makes a request give
 * bitwise the same logits alone or inside any batch (DESIGN §1.6, §7).
 *
 * The KV cache is paged: for each layer, K and V live in blocks of `block_size` tokens,
 * layout [n_blocks][block_size][n_kv_heads][head_dim] in the cache dtype (int8 codes plus a
 * scale per row for q8: kv_view_t). A token's slot
 * is block_table[pos / block_size] * block_size + pos % block_size.
 *
 * Memory: float tensors passed to ops live in backend memory (alloc/upload); integer
 * arrays (token ids, positions, slots, row offsets, block tables) are host memory, which
 * a device backend copies in itself. Results come back to the host through download. */
#ifndef KILN_BACKEND_H
#define KILN_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include "base/err.h"
#include "tensor/dtype.h"
#include "tensor/weight.h"

typedef struct backend backend_t;

typedef enum act { ACT_SILU, ACT_GELU_TANH } act_t;

/* One layer's K/V storage, as the ops see it. */
typedef struct kv_view {
    void *k, *v;          /* [n_blocks][block_size][n_kv_heads][head_dim] */
    dtype_t dtype;
    int block_size, n_kv_heads, head_dim;
    /* 1: K is stored transposed per block, [n_blocks][n_kv_heads][head_dim][block_size] (the
     * pool asks backend_ops.kv_k_transposed; only the CPU backend says yes), so a block's keys
     * of one (head, d) are contiguous; V keeps the row layout. 0 (zero-initialized views):
     * rows. kv_k_at gives an element's index in either layout. */
    int k_t;
    /* dtype DT_I8 (`--kv-dtype q8`): K and V hold int8 codes and these their scales, one f32 per
     * (slot, KV head) row of head_dim codes, laid out [n_blocks][n_kv_heads][block_size] (kv_s_at):
     * a block's scales of one head are contiguous, in position order. An element's value is
     * (float)code · scale, the same f32 product on every path (kv_q8_row writes them). NULL for
     * the other dtypes. */
    float *ks, *vs;
} kv_view_t;

/* Index of the scale of slot `slot`, KV head kvh, in kv_view_t.ks / .vs. */
static inline size_t kv_s_at(const kv_view_t *kv, size_t slot, size_t kvh) {
    size_t bs = (size_t)kv->block_size;
    return (slot / bs * (size_t)kv->n_kv_heads + kvh) * bs + slot % bs;
}

/* int8 KV rows: x[0, n) → codes[i·stride] and *scale = max|x| / 127, code = round-to-nearest-even
 * of x · (127 / max|x|) (one division per row, then products: every writer rounds alike). An
 * all-zero row: scale 0, codes 0. A row with a NaN or infinity: scale NaN (attention over it
 * gives NaN, as an f16 cache's inf/NaN would), codes 0. |code · scale − x| ≤ scale / 2 + a few
 * ulps of max|x|. */
static inline void kv_q8_row(int8_t *codes, size_t stride, float *scale, const float *x, size_t n) {
    float amax = 0.f;
    for (size_t i = 0; i < n; i++) {
        float a = x[i] < 0 ? -x[i] : x[i];
        if (!(a <= amax) && amax == amax) amax = a; /* a NaN, once met, sticks */
    }
    int finite = amax <= 3.4028234e38f;
    float inv = finite && amax > 0 ? 127.f / amax : 0.f;
    for (size_t i = 0; i < n; i++) {
        /* |x·inv| <= 127 (+ an ulp): adding and taking away 1.5·2^23 rounds it to an integer,
         * nearest-even (the build keeps C arithmetic as written: -ffp-contract=off, no fast-math),
         * without a libm nearbyintf call per element (the x86-64 baseline has no roundss) */
        float r = (x[i] * inv + 12582912.f) - 12582912.f;
        codes[i * stride] = (int8_t)(finite ? (r > 127.f ? 127 : r < -127.f ? -127 : (int)r) : 0);
    }
    *scale = finite ? amax / 127.f : __builtin_nanf("");
}

/* Index (in elements) of K element e = kvh·head_dim + d of cache slot `slot`. */
static inline size_t kv_k_at(const kv_view_t *kv, size_t slot, size_t e) {
    size_t per = (size_t)kv->n_kv_heads * kv->head_dim, bs = (size_t)kv->block_size;
    return kv->k_t ? slot / bs * bs * per + e * bs + slot % bs : slot * per + e;
}

/* K element e = kvh·head_dim + d of slot `slot` as f32, in any cache dtype (the reference's read). */
static inline float kv_load_k(const kv_view_t *kv, size_t slot, size_t e) {
    size_t i = kv_k_at(kv, slot, e);
    if (kv->dtype == DT_I8) return (float)((const int8_t *)kv->k)[i] * kv->ks[kv_s_at(kv, slot, e / (size_t)kv->head_dim)];
    return load_as_f32(kv->k, kv->dtype, i);
}

/* V element e of slot `slot` as f32, in any cache dtype. */
static inline float kv_load_v(const kv_view_t *kv, size_t slot, size_t e) {
    size_t i = slot * (size_t)kv->n_kv_heads * kv->head_dim + e;
    if (kv->dtype == DT_I8) return (float)((const int8_t *)kv->v)[i] * kv->vs[kv_s_at(kv, slot, e / (size_t)kv->head_dim)];
    return load_as_f32(kv->v, kv->dtype, i);
}

typedef struct attn_args {
    int n_rows;
    const int32_t *row_start;             /* [n_rows+1] token offsets of each row          */
    const int32_t *pos;                   /* [T] absolute position of each token           */
    const int32_t *const *block_tables;   /* [n_rows] the row's physical block ids         */
    int n_heads, n_kv_heads, head_dim;
    float scale;                          /* usually 1/sqrt(head_dim)                      */
    float softcap;                        /* 0: none; else cap*tanh(s/cap) on the scores   */
    int window;                           /* 0: full causal; else attend to pos-window+1.. */
    kv_view_t kv;
} attn_args_t;

/* Gated DeltaNet arguments. qkv is the conv output [T, stride]: q at column q_off
 * ([n_k_heads, dk]), k at k_off ([n_k_heads, dk]), v at v_off ([n_v_heads, dv]). Value head h
 * reads key/query head h / (n_v_heads / n_k_heads). Per token and value head:
 *   q, k = l2norm(q), l2norm(k) (eps 1e-6, inside the sqrt);  q *= q_scale
 *   g = -exp(A_log[h]) · softplus(a[t, h] + dt_bias[h]);  β = sigmoid(b[t, h])
 *   S = S · exp(g);  δ = β · (v − Sᵀk);  S = S + k δᵀ;  out[t, h] = Sᵀq
 * S is state[r] + h·dk·dv, [dk][dv] f32, row-major. out: [T, n_v_heads, dv]. */
typedef struct delta_args {
    int n_rows;
    const int32_t *row_start;             /* [n_rows+1]                                    */
    int n_k_heads, n_v_heads, dk, dv;
    int stride, q_off, k_off, v_off;      /* columns of qkv                                */
    float q_scale;                        /* usually dk^-0.5                               */
    const float *A_log, *dt_bias;         /* [n_v_heads], backend memory                   */
    float *const *state;                  /* [n_rows] → [n_v_heads][dk][dv], backend memory */
    /* Chunk-parallel prefill: with pos (the step's positions, [T]) and chunk C > 0, a row's
     * tokens that fill a whole aligned chunk [k·C, (k+1)·C) of absolute positions run in the
     * chunk-parallel (WY) form; every other token runs token by token. pos NULL or chunk 0:
     * token by token everywhere. The split depends on absolute positions and on where the
     * row starts and ends, never on other rows (the engine aligns its steps: architecture.md). */
    const int32_t *pos;
    int chunk;
} delta_args_t;

/* The chunk size C qwen3_5 uses on the CPU, and the one the engine aligns hybrid steps to.
 * (A test build may set another, e.g. -DDELTA_CHUNK=16, to run the chunk-parallel path on
 * the 40-token parity fixtures.) */
#ifndef DELTA_CHUNK
#define DELTA_CHUNK 64
#endif

/* One row of device sampling (the optional op `sample`): sample_token's parameters
 * (engine/sampler.h) flattened, with this row's slices of the step's bias and penalty
 * arrays. pen: the row's distinct history tokens in [0, vocab) (prompt and output), each
 * with its count among the output tokens: the repetition penalty applies to all of them,
 * presence/frequency to those with a count > 0 (n_pen 0 when no penalty is on). */
typedef struct sample_row {
    float temperature;                    /* 0: greedy                                     */
    float top_p, min_p;                   /* 1: off; 0: off                                */
    float repetition_penalty;             /* 1: off                                        */
    float presence_penalty, frequency_penalty;
    int top_k;                            /* 0: off                                        */
    int bias_off, n_bias;                 /* bias_ids/bias_vals[bias_off ..]               */
    int pen_off, n_pen;                   /* pen_ids/pen_counts[pen_off ..]                */
    uint64_t seed, step;                  /* the draw: kiln_rng_uniform(seed, step)        */
} sample_row_t;

typedef struct sample_args {
    int rows, vocab;
    const sample_row_t *row;              /* [rows], host                                  */
    const int32_t *bias_ids;              /* host                                          */
    const float *bias_vals;
    const int32_t *pen_ids, *pen_counts;  /* host                                          */
} sample_args_t;

typedef struct backend_ops {
    const char *name;
    void *(*alloc)(backend_t *, size_t bytes);       /* zeroed */
    void (*free)(backend_t *, void *p);
    /* A new backend buffer holding a copy of host[bytes]. */
    void *(*upload)(backend_t *, const void *host, size_t bytes);
    /* host[bytes] = src (backend memory). */
    void (*download)(backend_t *, void *host, const void *src, size_t bytes);
    /* Makes a weight usable by this backend (a device copy in w->device); CPU: nothing. */
    int (*prepare_weight)(backend_t *, weight_t *w, err_t *e);
    /* Optional (NULL: nothing to do): forgets a prepared weight before its host memory goes
     * away, for callers that free weights while the backend lives on (tests). A device
     * backend recognizes a weight lying inside an already prepared one by its host address
     * and hands out a view; without this, a new weight malloc'd at a freed one's address
     * would get the stale copy. Views of a weight are released before it. Models never need
     * it: their weights are mapped for the backend's whole life. */
    void (*release_weight)(backend_t *, weight_t *w);
    /* y[T, w.rows] = x[T, w.cols] · Wᵀ, any weight dtype (dense or MLX-quantized). */
    void (*matmul)(backend_t *, float *y, const float *x, int T, const weight_t *w);
    /* y[T, n] = x[T, n] / rms(x) * (w_offset + w[n]); w NULL means no weight. */
    void (*rms_norm)(backend_t *, float *y, const float *x, const float *w, float w_offset, int T, int n, float eps);
    /* In place on x[T, n_heads, head_dim]: rotate the first rot_dim dims of each head
     * (rotate-half pairing i, i+rot_dim/2) by pos[t] * inv_freq[i]; cos/sin scaled by mscale. */
    void (*rope)(backend_t *, float *x, const int32_t *pos, int T, int n_heads, int head_dim, int rot_dim,
                 const float *inv_freq, float mscale);
    /* y[n] = act(gate[n]) * up[n]. */
    void (*glu)(backend_t *, float *y, const float *gate, const float *up, size_t n, act_t act);
    /* y[n] += x[n]. */
    void (*add)(backend_t *, float *y, const float *x, size_t n);
    /* y[T, n] += bias[n]. */
    void (*add_bias)(backend_t *, float *y, const float *bias, int T, int n);
    /* y[n, width] = x[idx[i], width] for i < n (idx on the host). */
    void (*gather_rows)(backend_t *, float *y, const float *x, const int32_t *idx, int n, int width);
    /* y[T, w.cols] = row ids[t] of w, times scale. */
    void (*embed)(backend_t *, float *y, const int32_t *ids, int T, const weight_t *w, float scale);
    /* Writes k, v [T, n_kv_heads, head_dim] into the cache at slots[T]. */
    void (*kv_write)(backend_t *, const kv_view_t *kv, const float *k, const float *v, const int32_t *slots, int T);
    /* out[T, n_heads, head_dim] = softmax(q·Kᵀ·scale [causal, window]) · V over each
     * token's own row, reading K/V from the paged cache (already holding this step). */
    void (*attention)(backend_t *, float *out, const float *q, int T, const attn_args_t *a);

    /* --- hybrid and MoE families (qwen3_5, gemma3/4): ops appended below --- */
    /* Causal depthwise conv1d with carried state, per row of the batch. For token t of row
     * r and channel c: y[t, c] = act(Σ_k w[c, k] · u[t-K+1+k, c]), where u is the row's
     * inputs x[.., c] preceded by state[r] ([K-1, C], oldest first). state[r] is then
     * replaced by the row's last K-1 inputs. y and x are [T, C] (distinct); w is [C, K] f32. */
    void (*conv1d_causal)(backend_t *, float *y, const float *x, int n_rows, const int32_t *row_start,
                          float *const *state, const float *w, int C, int K, act_t act);
    /* Gated delta rule (gated DeltaNet) within each row: token by token, or chunk-parallel
     * over whole aligned chunks (d->pos, d->chunk); see delta_args_t. */
    void (*gated_delta)(backend_t *, float *out, const float *qkv, const float *a, const float *b, int T,
                        const struct delta_args *d);
    /* y[T, n] *= sigmoid(g): g is [T, n] (g_width n) or one gate per token (g_width 1). */
    void (*sigmoid_mul)(backend_t *, float *y, const float *g, int T, int n, int g_width);
    /* y[n] *= s. */
    void (*scale)(backend_t *, float *y, float s, size_t n);
    /* y[idx[i], width] += wt[i] · x[i, width] for i < n, in order (idx, wt on the host). */
    void (*add_rows_scaled)(backend_t *, float *y, const float *x, const int32_t *idx, const float *wt, int n, int width);

    /* --- step boundary (optional: NULL on the CPU) --- */
    /* model_forward calls step_begin before a forward step of n_tokens tokens in n_rows rows
     * and step_end after it (also on error). A device backend may record the ops in between
     * and replay them as one unit (CUDA graphs); results must not change. */
    void (*step_begin)(backend_t *, int n_tokens, int n_rows);
    void (*step_end)(backend_t *);

    /* --- sampling on the device (optional: NULL on the CPU, where the engine downloads the
     * logits and samples on the host) --- */
    /* tokens[rows] (host) = the token sample_token (engine/sampler.c) draws from each row of
     * logits[rows, vocab] (backend memory, changed in place as the host sampler changes it);
     * only the token ids come back. Same tokens as the host except where the device's float
     * exp or summation order moves a draw across a boundary by an ulp (docs/cuda.md). */
    void (*sample)(backend_t *, int32_t *tokens, float *logits, const sample_args_t *a);

    /* --- fused ops (optional: NULL, as on the CPU, means the model calls the separate ops;
     * a backend that has them gives bitwise the results of the separate ops, in one launch) --- */
    /* x[T, n] += d[T, n] (add), then y[T, n] = rms_norm(x) as rms_norm does; y may be d, not x. */
    void (*add_rms_norm)(backend_t *, float *x, float *y, const float *d, const float *w, float w_offset, int T, int n, float eps);
    /* rope(q: nh heads) and rope(k: nkv heads) as rope does, then kv_write(kv, k, v, slots, T). */
    void (*rope_kv_write)(backend_t *, float *q, float *k, const float *v, const int32_t *pos, int T, int nh, int nkv, int head_dim,
                          int rot_dim, const float *inv_freq, float mscale, const kv_view_t *kv, const int32_t *slots);
    /* q[T, nh·hd], k[T, nkv·hd] = rms_norm per head with qn, kn ([hd] each; NULL: no norm), then
     * rope_kv_write(q, k, v, a->pos, ..., &a->kv, slots), then attention(out, q, T, a): out, k
     * and the cache bitwise what the separate ops give; q is scratch afterwards (left as they leave
     * it, or as it was: CUDA's fused decode kernel and its prefill fold into the attention do not
     * write it back). The CPU runs a step of decode
     * rows as one pool pass: each (row, KV-head group) item first does its own heads' norms,
     * rope and cache write, then attends; other steps run the separate ops. */
    void (*norm_rope_kv_attention)(backend_t *, float *out, float *q, float *k, const float *v, const float *qn,
                                   const float *kn, float eps, int rot_dim, const float *inv_freq, float mscale,
                                   const int32_t *slots, int T, const attn_args_t *a);
    /* y[i][T, w[i].rows] = x[T, cols] · w[i]ᵀ for i < n, as n matmul calls give them (one x,
     * several weights: q/k/v, gate/up), in one dispatch. */
    void (*matmul_multi)(backend_t *, int n, float *const *y, const float *x, int T, const weight_t *const *w);

    /* --- MoE on the device (optional: NULL, as on the CPU, means the model downloads the router
     * logits and routes on the host; ref_moe_route / ref_moe_experts in cpu/moe.c are the
     * references). ids, wts and logits are backend memory. --- */
    /* Per token t: p = softmax(logits[t, E]); ids[t, k] = the k largest p, descending, ties to
     * the lower id; wts[t, k] = their p, divided by their sum when renorm, then times escale[id]
     * when escale ([E], backend memory) is not NULL — bitwise what moe_topk gives on the host
     * (same expf, same summation order). Returns nonzero, doing nothing, where the backend
     * leaves a step of T tokens to the host path. */
    int (*moe_route)(backend_t *, int32_t *ids, float *wts, const float *logits, int T, int E, int k, int renorm, const float *escale);
    /* out[t, H] = Σ_j wts[t, j] · down[e](act(gate[e] · x[t]) ⊙ (up[e] · x[t])), e = ids[t, j],
     * summed over the token's k experts in ascending id (the host loop's order); gate/up/down:
     * [E] weights ([Ie, H], [Ie, H], [H, Ie]). Returns nonzero, doing nothing, where the backend
     * has no kernel for these weights at T tokens: the model then downloads ids and wts (they
     * are moe_route's, bitwise the host's) and runs its per-expert loop. */
    int (*moe_experts)(backend_t *, float *out, const float *x, int T, int k, const int32_t *ids, const float *wts,
                        const weight_t *gate, const weight_t *up, const weight_t *down, int E, act_t act);

    /* --- fused (optional, as above: NULL means the separate ops) --- */
    /* y[T, I] = act(x · wgᵀ) ⊙ (x · wuᵀ) (I = wg.rows = wu.rows): bitwise what matmul_multi (or
     * the two matmuls) into g and u followed by glu(y, g, u) give. g and u are [T, I] scratch the
     * backend may use for that (their contents afterwards are unspecified); y may be g. */
    void (*matmul_glu)(backend_t *, float *y, float *g, float *u, const float *x, int T, const weight_t *wg, const weight_t *wu, act_t act);
    /* Each returns nonzero, doing nothing, where the backend has no fused kernel for the call (the
     * caller then runs the separate ops); when done, bitwise the separate ops' results.
     * matmul_add: y[T, w.rows] += x · wᵀ (matmul into a scratch, then add).
     * rms_matmul_multi: matmul_multi(n, y, h, T, w) of h = rms_norm(x[T, cols], nw, w_offset, eps)
     * (h is not written).  rms_matmul_glu: matmul_glu of that h. */
    int (*matmul_add)(backend_t *, float *y, const float *x, int T, const weight_t *w);
    int (*rms_matmul_multi)(backend_t *, int n, float *const *y, const float *x, const float *nw, float w_offset, float eps, int T,
                            const weight_t *const *w);
    int (*rms_matmul_glu)(backend_t *, float *y, const float *x, const float *nw, float w_offset, float eps, int T, const weight_t *wg,
                          const weight_t *wu, act_t act);
    /* rms_mlp: the whole MLP block, x[T, H] += g · wdᵀ with g = act(h · wgᵀ) ⊙ (h · wuᵀ) and h =
     * rms_norm(x, nw, w_offset, eps) (neither h nor g is written): bitwise rms_norm, matmul_glu, then
     * matmul_add of g. Lets a backend keep g only in the form its down projection reads. */
    int (*rms_mlp)(backend_t *, float *x, const float *nw, float w_offset, float eps, int T, const weight_t *wg, const weight_t *wu,
                   const weight_t *wd, act_t act);
    /* delta_decode: a decode step (every row one token) of the gated DeltaNet's core, conv to gate:
     *   conv1d_causal(c, qkv, rows, conv_state, conv_w, d->stride, K, ACT_SILU), gated_delta(o, c, a, b, T, d),
     *   rms_norm(o, o, nw, 0, T·nv, dv, eps), glu(y[T, nv·dv], z, o, ACT_SILU)
     * — bitwise those ops' y and both states (c and o, their scratch, are not written). conv_state as
     * conv1d_causal's; d->row_start must be 0, 1, ..., T. */
    int (*delta_decode)(backend_t *, float *y, const float *qkv, float *const *conv_state, const float *conv_w, int K, const float *a,
                        const float *b, const float *z, const float *nw, float eps, int T, const struct delta_args *d);
    /* post_norm_add: Gemma's post-norm residual and the next pre-norm, x[T, n] += rms_norm(d, w1) then
     * y = rms_norm(x, w2) (both with w_offset, eps) — bitwise rms_norm(d, d, w1), add(x, d), rms_norm(y, x, w2).
     * d is scratch (its contents afterwards unspecified); y may be d. */
    int (*post_norm_add)(backend_t *, float *x, float *y, float *d, const float *w1, const float *w2, float w_offset, int T, int n, float eps);
    /* Optional (NULL: 0): 1 where the backend wants K stored transposed per block (kv_view_t.k_t)
     * in a pool of this block size and dtype. */
    int (*kv_k_transposed)(backend_t *, int block_size, int head_dim, dtype_t dtype);
    /* Optional (NULL: no): 1 where the backend's kv_write and attention ops support an int8 cache
     * (DT_I8 with kv_view_t.ks/vs: `--kv-dtype q8`); the pool refuses q8 otherwise. */
    int (*kv_q8)(backend_t *);
    /* Optional (NULL: nothing to do): n bytes of this backend's memory at p are about to be written —
     * make them resident now (a hint; the contents stay as they are). The KV pool calls it for each
     * block the first time it hands the block out, so a decode step does not fault its pages in. */
    void (*touch)(backend_t *, void *p, size_t n);
    /* Optional (NULL: the backend computes in host memory): the backend's own memory, bytes free
     * and in all right now; 0 when known. The engine sizes its automatic KV cache from it after
     * the weights are uploaded (engine/kv_budget.c). */
    int (*mem_info)(backend_t *, size_t *free_bytes, size_t *total_bytes);
    /* Optional (NULL: no such cache): the budget of the backend's weight cache — quantized weights
     * kept dequantized after their first prefill, so later prefills skip the conversion (CUDA:
     * matmul_dequant.cu). gb > 0: that many GB; < 0: the backend's automatic choice; 0: off. Called
     * once the model's weights are prepared; returns the device bytes the cache may still take, which
     * the engine keeps out of its automatic KV cache. */
    size_t (*weight_cache)(backend_t *, double gb);
} backend_ops_t;

struct backend {
    const backend_ops_t *ops;
    int n_threads;
    void *impl;
    /* Set by model_load from the architecture: 1 where the model's matmuls may take their
     * activations rounded once to bf16 (a GPU backend's fast path) and still meet the 1e-2
     * bf16-path parity bar on the fixtures of that architecture (dense llama / qwen3: 6.8e-3 to
     * 9.4e-3 on the H200; the hybrid and gemma4 fixtures move 0.03-0.27 and keep 0). Backends
     * without such a path ignore it; docs/cuda.md, Numerics. */
    int act_bf16_ok;
};

/* Creates a backend by name: "cpu" (n_threads 0 = all cores), or "cpu-ref" (the scalar
 * reference kernels only, one thread: what tests compare against). */
backend_t *backend_create(const char *name, int n_threads, err_t *e);
void backend_destroy(backend_t *be);
/* The kernel family in use ("avx512", "avx2", "scalar"). */
const char *backend_simd_name(const backend_t *be);

#endif
