/* attention_cpu.c — paged attention on the CPU: tiles, their order over threads, scratch.
 *
 * A work item is a tile — up to attn_tile_tokens() consecutive tokens of one row — and
 * one KV head. The tile kernel (attention_tile_body.h, one copy per SIMD family) puts the
 * tile's query vectors (tokens × the GQA group's heads) in vector lanes, converts each
 * block of AT_KB keys of the head's K/V to f32 once for the whole tile and runs an online
 * softmax over the blocks. Prefill used to convert a token's whole context once per token
 * and head (quadratic conversion work); now a row's context is converted once per tile.
 *
 * A query's arithmetic depends only on its own q, position and window and on the
 * absolute block boundaries (attention_tile_body.h), never on the tile, the step or the
 * thread: tiles can be cut anywhere and handed out in any order. Items are taken from a
 * shared counter, one KV head after another (its K/V stay in cache) and within a head the
 * latest tiles first (they attend over the most keys), so a causal prefill spreads evenly
 * over the threads; each thread uses the scratch of its own task.
 * Decode (one token per row) is one item per row and KV head. */
#include <stdlib.h>
#include "backend/cpu/attention_tile.h"
#include "backend/cpu/cpu_kernels.h"

int attn_tile_tokens(const attn_args_t *a) {
    int group = a->n_heads / a->n_kv_heads, tt = AT_QMAX / group;
    return tt > 0 ? tt : 1;
}

void attn_tile_dims(const attn_args_t *a, int n_tokens, attn_tile_dims_t *d) {
    int group = a->n_heads / a->n_kv_heads, nq = n_tokens * group;
    d->nqp = (nq + 15) / 16 * 16;
    d->hdp = (a->head_dim + 15) / 16 * 16;
    /* Qt, K block, V block, scores, acc, m/l/corr, lo/hi */
    d->floats = (size_t)a->head_dim * d->nqp + 2 * (size_t)AT_KB * d->hdp + (size_t)AT_KB * d->nqp +
                (size_t)nq * d->hdp + 5 * (size_t)d->nqp + 16; /* + alignment slack */
}

size_t simd_attention_scratch(const attn_args_t *a) {
    attn_tile_dims_t d;
    attn_tile_dims(a, attn_tile_tokens(a), &d);
    return d.floats;
}

int simd_attention_tiles(const attn_args_t *a, int t0, int t1, attn_tile_t *tiles) {
    int tt = attn_tile_tokens(a), n = 0;
    for (int r = 0; r < a->n_rows; r++) {
        int s = a->row_start[r] > t0 ? a->row_start[r] : t0, e = a->row_start[r + 1] < t1 ? a->row_start[r + 1] : t1;
        for (int t = s; t < e; t += tt) tiles[n++] = (attn_tile_t){r, t, t + tt < e ? t + tt : e};
    }
    return n;
}

void simd_attention_run(const simd_kernels_t *s, float *out, const float *q, const attn_args_t *a,
                        const attn_tile_t *tiles, int n_tiles, atomic_int *next, float *scratch) {
    attn_tile_fn fn = s == &simd_avx512 ? attn_tile_avx512 : attn_tile_avx2;
    int items = n_tiles * a->n_kv_heads;
    for (;;) {
        int k = atomic_fetch_add_explicit(next, 1, memory_order_relaxed);
        if (k >= items) break;
        /* head-major: consecutive items read the same head's K/V (one head of a 2k context is
         * 1 MB in f16: it stays in L2 across the head's tiles); each head latest tiles first */
        int kvh = k / n_tiles, it = n_tiles - 1 - k % n_tiles;
        const attn_tile_t *t = &tiles[it];
        fn(out, q, a, t->r, t->t0, t->t1, kvh, scratch);
    }
}

void simd_attention(const simd_kernels_t *s, float *out, const float *q, int t0, int t1, const attn_args_t *a, float *scratch) {
    attn_tile_t *tiles = malloc(sizeof(attn_tile_t) * (size_t)(t1 - t0 > 0 ? t1 - t0 : 1));
    if (!tiles) abort();
    atomic_int next = 0;
    simd_attention_run(s, out, q, a, tiles, simd_attention_tiles(a, t0, t1, tiles), &next, scratch);
    free(tiles);
}
