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
 * A step of decode rows only (one token each) has one item per row and group of
 * ceil(n_kv_heads / threads) KV heads, walked together block by block (the tile body's
 * _group): each thread then reads contiguous runs of K/V instead of 256-byte rows a
 * position apart. A head's arithmetic is the same in a group or alone.
 *
 * With more than one thread a decode step also cuts each row's context at multiples of
 * attn_seg() positions (attention_tile.h; KILN_ATTN_SEG, off by default): items are (row, group of KV heads, run of
 * segments), each writes its segments' softmax states, and simd_attention_finish folds
 * them in segment order (attention_tile_body.h _merge) — the bits of the unsplit tile, so
 * neither the items nor the thread that ran them show in the result. Many equal items
 * taken from the counter let the faster vCPU take more of them (2 head-group items, one
 * per thread, left the faster one waiting 10-25% of the op). */
#include <stdlib.h>
#include <string.h>
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
    d->floats = attn_tile_floats(a, n_tokens, 1);
}

size_t attn_tile_floats(const attn_args_t *a, int n_tokens, int n_heads) {
    int group = a->n_heads / a->n_kv_heads, nq = n_tokens * group;
    size_t nqp = (size_t)(nq + 15) / 16 * 16, hdp = (size_t)(a->head_dim + 15) / 16 * 16;
    /* shared: K block, V block, scores, corr, lo/hi; per head: Qt, acc, m/l, and the folded
     * segments' acc, m/l; + alignment slack */
    return 2 * (size_t)AT_KB * hdp + (size_t)AT_KB * nqp + 3 * nqp +
           (size_t)n_heads * ((size_t)a->head_dim * nqp + 2 * ((size_t)nq * hdp + 2 * nqp)) + 16;
}

/* Decode tiles (one token) walk this many KV heads together (attention_tile_body.h): one
 * group per thread, so each thread reads contiguous runs of K/V rows */
static int decode_heads(const attn_args_t *a, int n_threads) {
    int g = (a->n_kv_heads + n_threads - 1) / (n_threads > 0 ? n_threads : 1);
    return g < 1 ? 1 : g;
}

/* A step of one-token tiles only (decode rows): items are (tile, group of KV heads);
 * otherwise (tile, KV head) */
static int heads_per_item(const attn_args_t *a, const attn_tile_t *tiles, int n_tiles, int n_threads) {
    for (int i = 0; i < n_tiles; i++)
        if (tiles[i].t1 - tiles[i].t0 != 1) return 1;
    return decode_heads(a, n_threads);
}

size_t simd_attention_scratch(const attn_args_t *a) {
    attn_tile_dims_t d;
    attn_tile_dims(a, attn_tile_tokens(a), &d);
    size_t dec = attn_tile_floats(a, 1, a->n_kv_heads); /* any group size up to all heads */
    return d.floats > dec ? d.floats : dec;
}

int simd_attention_tiles(const attn_args_t *a, int t0, int t1, attn_tile_t *tiles) {
    int tt = attn_tile_tokens(a), n = 0;
    for (int r = 0; r < a->n_rows; r++) {
        int s = a->row_start[r] > t0 ? a->row_start[r] : t0, e = a->row_start[r + 1] < t1 ? a->row_start[r + 1] : t1;
        for (int t = s; t < e; t += tt) tiles[n++] = (attn_tile_t){r, t, t + tt < e ? t + tt : e};
    }
    return n;
}

static int env_int(const char *name, int def) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : def;
}

static int seg = -1;

void simd_attention_set_seg(int positions) {
    seg = positions >= 0 ? (positions + AT_KB - 1) / AT_KB * AT_KB : -1;
}

int attn_seg(void) {
    if (seg < 0) {
        int v = env_int("KILN_ATTN_SEG", 0);
        seg = v > 0 ? (v + AT_KB - 1) / AT_KB * AT_KB : 0;
    }
    return seg;
}

/* The keys [klo, khi] of a one-token tile */
static void tile_keys(const attn_args_t *a, const attn_tile_t *t, int *klo, int *khi) {
    int p = a->pos[t->t0];
    *klo = a->window > 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0;
    *khi = p;
}

/* The items of a split plan (items == NULL: only counted). A split row's KV-head groups
 * first get big runs: the first big% of its segments cut into n_threads runs, all rows'
 * big runs before any small item; then the rest in runs of spi segments, which the
 * faster thread takes more of. */
static int plan_items(attn_item_t *items, const attn_args_t *a, const attn_tile_t *tiles, int n_tiles, int n_threads, int seg,
                      int hg, int shg, int spi, int big) {
    int n = 0, nkv = a->n_kv_heads;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n_tiles; i++) {
            int klo, khi;
            tile_keys(a, &tiles[i], &klo, &khi);
            int k0 = klo / seg, nseg = khi / seg - k0 + 1, nb = nseg * big / 100;
            if (nseg <= 1) { /* not split: groups of hg heads */
                if (pass == 0)
                    for (int h = 0; h < nkv; h += hg, n++)
                        if (items) items[n] = (attn_item_t){i, h, h + hg < nkv ? h + hg : nkv, 0, 0};
                continue;
            }
            for (int h = 0; h < nkv; h += shg) {
                int h1 = h + shg < nkv ? h + shg : nkv;
                if (pass == 0)
                    for (int t = 0; t < n_threads; t++) {
                        int a0 = nb * t / n_threads, a1 = nb * (t + 1) / n_threads;
                        if (a0 < a1 && items) items[n] = (attn_item_t){i, h, h1, k0 + a0, k0 + a1};
                        n += a0 < a1;
                    }
                else
                    for (int k = nb; k < nseg; k += spi, n++)
                        if (items) items[n] = (attn_item_t){i, h, h1, k0 + k, k0 + (k + spi < nseg ? k + spi : nseg)};
            }
        }
    return n;
}

static int big_test = -1; /* simd_attention_split's big% for the plan */

int simd_attention_plan(attn_split_t *sp, const attn_args_t *a, const attn_tile_t *tiles, int n_tiles, int n_threads) {
    memset(sp, 0, sizeof *sp);
    int hg = heads_per_item(a, tiles, n_tiles, n_threads), ng = (a->n_kv_heads + hg - 1) / hg;
    /* KILN_ATTN_SPLIT=0: no split; _HEADS: KV heads per split item; _SEGS: segments per
     * small item; _BIG: percent of a row's segments in the big runs */
    static int on = -1, sh, ss, sb;
    if (on < 0) {
        sh = env_int("KILN_ATTN_SPLIT_HEADS", 0);
        ss = env_int("KILN_ATTN_SPLIT_SEGS", 1);
        sb = env_int("KILN_ATTN_SPLIT_BIG", 0);
        on = env_int("KILN_ATTN_SPLIT", 1) != 0;
    }
    int seg = attn_seg();
    if (!on || !seg || n_threads < 2 || hg == 1) return n_tiles * ng; /* not a decode step (or one thread) */
    int shg = sh > 0 && sh < a->n_kv_heads ? sh : a->n_kv_heads, spi = ss > 0 ? ss : 1, big = big_test >= 0 ? big_test : sb;
    big = big < 0 ? 0 : big > 100 ? 100 : big;
    int group = a->n_heads / a->n_kv_heads, hdp = (a->head_dim + 15) / 16 * 16, any = 0;
    size_t floats = 0, rec = ((size_t)(group + 15) / 16 * 32 + (size_t)group * hdp) * a->n_kv_heads;
    for (int i = 0; i < n_tiles; i++) {
        int klo, khi;
        tile_keys(a, &tiles[i], &klo, &khi);
        int nseg = khi / seg - klo / seg + 1;
        if (nseg > 1) floats += (size_t)nseg * rec, any = 1;
    }
    if (!any) return n_tiles * ng;
    int n_items = plan_items(NULL, a, tiles, n_tiles, n_threads, seg, hg, shg, spi, big);
    /* one allocation: part_off (size_t first: aligned), items, nseg */
    sp->part_off = malloc(sizeof(size_t) * (size_t)n_tiles + sizeof(attn_item_t) * (size_t)n_items + sizeof(int) * (size_t)n_tiles);
    sp->part = aligned_alloc(64, sizeof(float) * (floats + 16) / 64 * 64 + 64);
    if (!sp->part_off || !sp->part) abort();
    sp->items = (attn_item_t *)(sp->part_off + n_tiles);
    sp->nseg = (int *)(sp->items + n_items);
    floats = 0;
    for (int i = 0; i < n_tiles; i++) {
        int klo, khi;
        tile_keys(a, &tiles[i], &klo, &khi);
        int nseg = khi / seg - klo / seg + 1;
        sp->nseg[i] = nseg > 1 ? nseg : 0;
        sp->part_off[i] = floats;
        if (nseg > 1) floats += (size_t)nseg * rec;
    }
    sp->n_items = plan_items(sp->items, a, tiles, n_tiles, n_threads, seg, hg, shg, spi, big);
    return sp->n_items;
}

void simd_attention_finish(const simd_kernels_t *s, float *out, const attn_args_t *a, const attn_tile_t *tiles, int n_tiles,
                           attn_split_t *sp) {
    if (!sp->items) return;
    attn_merge_fn mfn = s == &simd_avx512 ? attn_tile_avx512_merge : attn_tile_avx2_merge;
    for (int i = 0; i < n_tiles; i++)
        if (sp->nseg[i]) mfn(out, a, tiles[i].t0, sp->nseg[i], sp->part + sp->part_off[i]);
    free(sp->part_off);
    free(sp->part);
    memset(sp, 0, sizeof *sp);
}

void simd_attention_run(const simd_kernels_t *s, float *out, const float *q, const attn_args_t *a,
                        const attn_tile_t *tiles, int n_tiles, const attn_split_t *sp, atomic_int *next, float *scratch,
                        int n_threads) {
    attn_tile_fn fn = s == &simd_avx512 ? attn_tile_avx512 : attn_tile_avx2;
    attn_group_fn gfn = s == &simd_avx512 ? attn_tile_avx512_group : attn_tile_avx2_group;
    if (sp && sp->items) { /* a split decode step: the plan's items */
        attn_part_fn pfn = s == &simd_avx512 ? attn_tile_avx512_part : attn_tile_avx2_part;
        for (;;) {
            int k = atomic_fetch_add_explicit(next, 1, memory_order_relaxed);
            if (k >= sp->n_items) break;
            const attn_item_t *it = &sp->items[k];
            const attn_tile_t *t = &tiles[it->tile];
            if (sp->nseg[it->tile]) pfn(q, a, t->r, t->t0, it->h0, it->h1, it->s0, it->s1, sp->part + sp->part_off[it->tile], scratch);
            else gfn(out, q, a, t->r, t->t0, t->t1, it->h0, it->h1, scratch);
        }
        return;
    }
    int hg = heads_per_item(a, tiles, n_tiles, n_threads), ng = (a->n_kv_heads + hg - 1) / hg, items = n_tiles * ng;
    for (;;) {
        int k = atomic_fetch_add_explicit(next, 1, memory_order_relaxed);
        if (k >= items) break;
        /* head-major: consecutive items read the same head's K/V (one head of a 2k context is
         * 1 MB in f16: it stays in L2 across the head's tiles); each head latest tiles first */
        int g = k / n_tiles, it = n_tiles - 1 - k % n_tiles;
        const attn_tile_t *t = &tiles[it];
        int h0 = g * hg, h1 = (g + 1) * hg < a->n_kv_heads ? (g + 1) * hg : a->n_kv_heads;
        if (sp && sp->pre) sp->pre(sp->pre_ctx, t->t0, h0, h1);
        if (hg == 1) fn(out, q, a, t->r, t->t0, t->t1, g, scratch);
        else gfn(out, q, a, t->r, t->t0, t->t1, h0, h1, scratch);
    }
}


void simd_attention(const simd_kernels_t *s, float *out, const float *q, int t0, int t1, const attn_args_t *a, float *scratch) {
    attn_tile_t *tiles = malloc(sizeof(attn_tile_t) * (size_t)(t1 - t0 > 0 ? t1 - t0 : 1));
    if (!tiles) abort();
    atomic_int next = 0;
    simd_attention_run(s, out, q, a, tiles, simd_attention_tiles(a, t0, t1, tiles), NULL, &next, scratch, 1);
    free(tiles);
}

void simd_attention_split(const simd_kernels_t *s, float *out, const float *q, int t0, int t1, const attn_args_t *a,
                          float *scratch, int n_threads, int big) {
    attn_tile_t *tiles = malloc(sizeof(attn_tile_t) * (size_t)(t1 - t0 > 0 ? t1 - t0 : 1));
    if (!tiles) abort();
    int n_tiles = simd_attention_tiles(a, t0, t1, tiles);
    attn_split_t sp;
    big_test = big;
    int items = simd_attention_plan(&sp, a, tiles, n_tiles, n_threads);
    big_test = -1;
    if (sp.items) /* the items in reverse order: their order does not matter */
        for (int i = 0; i < items / 2; i++) {
            attn_item_t x = sp.items[i];
            sp.items[i] = sp.items[items - 1 - i];
            sp.items[items - 1 - i] = x;
        }
    atomic_int next = 0;
    simd_attention_run(s, out, q, a, tiles, n_tiles, &sp, &next, scratch, n_threads);
    simd_attention_finish(s, out, a, tiles, n_tiles, &sp);
    free(tiles);
}
