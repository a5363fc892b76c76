/* kv_pool.c — see kv_pool.h. */
#include "kv/kv_pool.h"
#include <stdlib.h>
#include <string.h>

/* an int8 cache's scales: one f32 per (position, KV head) for K and for V */
static size_t scale_bytes(int block_size, int n_kv_heads, dtype_t dtype) {
    return dtype == DT_I8 ? (size_t)block_size * n_kv_heads * sizeof(float) : 0;
}

size_t kv_pool_block_bytes(int n_layers, int block_size, int n_kv_heads, int head_dim, dtype_t dtype) {
    return 2 * (size_t)n_layers * ((size_t)block_size * n_kv_heads * head_dim * dtype_size(dtype) + scale_bytes(block_size, n_kv_heads, dtype));
}

int kv_pool_init(kv_pool_t *p, backend_t *be, int n_layers, int n_blocks, int block_size, int n_kv_heads, int head_dim,
                 dtype_t dtype, err_t *e) {
    memset(p, 0, sizeof *p);
    if (n_blocks <= 0 || block_size <= 0) return err_set(e, "KV pool: need at least one block (got %d of %d tokens)", n_blocks, block_size);
    if (dtype == DT_I8 && !(be->ops->kv_q8 && be->ops->kv_q8(be)))
        return err_set(e, "KV pool: --kv-dtype q8 is not supported by the %s backend (only the CPU's); use f16 or bf16", be->ops->name);
    if (dtype != DT_F32 && dtype != DT_F16 && dtype != DT_BF16 && dtype != DT_I8)
        return err_set(e, "KV pool: dtype %s unsupported (f32, f16, bf16, q8)", dtype_name(dtype));
    p->be = be;
    p->n_layers = n_layers;
    p->n_blocks = n_blocks;
    p->block_size = block_size;
    p->n_kv_heads = n_kv_heads;
    p->head_dim = head_dim;
    p->dtype = dtype;
    p->k_t = be->ops->kv_k_transposed ? be->ops->kv_k_transposed(be, block_size, head_dim, dtype) : 0;
    p->k = calloc((size_t)n_layers, sizeof(void *));
    p->v = calloc((size_t)n_layers, sizeof(void *));
    size_t layer_bytes = (size_t)n_blocks * block_size * n_kv_heads * head_dim * dtype_size(dtype);
    size_t layer_sbytes = (size_t)n_blocks * scale_bytes(block_size, n_kv_heads, dtype);
    if (layer_sbytes) {
        p->ks = calloc((size_t)n_layers, sizeof(float *));
        p->vs = calloc((size_t)n_layers, sizeof(float *));
    }
    for (int l = 0; l < n_layers; l++) {
        p->k[l] = be->ops->alloc(be, layer_bytes);
        p->v[l] = be->ops->alloc(be, layer_bytes);
        int ok = p->k[l] && p->v[l];
        if (layer_sbytes && ok) {
            p->ks[l] = be->ops->alloc(be, layer_sbytes);
            p->vs[l] = be->ops->alloc(be, layer_sbytes);
            ok = p->ks[l] && p->vs[l];
        }
        if (!ok) {
            kv_pool_free(p);
            return err_set(e, "KV pool: cannot allocate %d blocks (%.1f MB); lower --kv-cache-gb", n_blocks,
                           2.0 * n_layers * (layer_bytes + layer_sbytes) / 1e6);
        }
    }
    p->hash = calloc((size_t)n_blocks, sizeof(uint64_t));
    p->hashed = calloc((size_t)n_blocks, 1);
    p->lru_prev = malloc(sizeof(int32_t) * n_blocks);
    p->lru_next = malloc(sizeof(int32_t) * n_blocks);
    p->lru_head = p->lru_tail = -1;
    p->index_cap = 16;
    while (p->index_cap < 2 * n_blocks) p->index_cap *= 2;
    p->index_keys = calloc((size_t)p->index_cap, sizeof(uint64_t));
    p->index_vals = calloc((size_t)p->index_cap, sizeof(int32_t));
    p->refcount = calloc((size_t)n_blocks, sizeof(int32_t));
    p->free_list = malloc(sizeof(int32_t) * n_blocks);
    p->touched = calloc((size_t)n_blocks, 1);
    for (int i = 0; i < n_blocks; i++) p->free_list[i] = n_blocks - 1 - i;
    p->n_free = n_blocks;
    return 0;
}

void kv_pool_free(kv_pool_t *p) {
    if (p->be) {
        for (int l = 0; l < p->n_layers; l++) {
            if (p->k) p->be->ops->free(p->be, p->k[l]);
            if (p->v) p->be->ops->free(p->be, p->v[l]);
            if (p->ks) p->be->ops->free(p->be, p->ks[l]);
            if (p->vs) p->be->ops->free(p->be, p->vs[l]);
        }
    }
    free(p->k);
    free(p->v);
    free(p->ks);
    free(p->vs);
    free(p->refcount);
    free(p->free_list);
    free(p->touched);
    free(p->hash);
    free(p->hashed);
    free(p->lru_prev);
    free(p->lru_next);
    free(p->index_keys);
    free(p->index_vals);
    memset(p, 0, sizeof *p);
}

kv_view_t kv_pool_view(const kv_pool_t *p, int layer) {
    kv_view_t v = {p->k[layer], p->v[layer], p->dtype, p->block_size, p->n_kv_heads, p->head_dim, p->k_t,
                   p->ks ? p->ks[layer] : NULL, p->vs ? p->vs[layer] : NULL};
    return v;
}

void kv_seq_init(kv_seq_t *s) { memset(s, 0, sizeof *s); }

int kv_seq_reserve(kv_seq_t *s, kv_pool_t *p, int n_tokens, err_t *e) {
    int need = (n_tokens + p->block_size - 1) / p->block_size;
    if (need <= s->n_blocks) return 0;
    if (need - s->n_blocks > kv_pool_available(p))
        return err_set(e, "KV cache full: need %d more blocks of %d tokens, %d available", need - s->n_blocks, p->block_size,
                       kv_pool_available(p));
    if (need > s->cap_blocks) {
        int cap = s->cap_blocks ? s->cap_blocks : 8;
        while (cap < need) cap *= 2;
        int32_t *nb = realloc(s->blocks, sizeof(int32_t) * cap);
        if (!nb) return err_set(e, "out of memory growing a block table");
        s->blocks = nb;
        s->cap_blocks = cap;
    }
    while (s->n_blocks < need) s->blocks[s->n_blocks++] = kv_block_alloc(p);
    return 0;
}

int kv_seq_append_block(kv_seq_t *s, int32_t b) {
    if (s->n_blocks == s->cap_blocks) {
        int cap = s->cap_blocks ? s->cap_blocks * 2 : 8;
        int32_t *nb = realloc(s->blocks, sizeof(int32_t) * cap);
        if (!nb) return -1;
        s->blocks = nb;
        s->cap_blocks = cap;
    }
    s->blocks[s->n_blocks++] = b;
    return 0;
}

/* --- the hash index: open addressing with linear probing; key 0 empty, 1 tombstone --- */
static uint64_t mix64(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static int index_find(const kv_pool_t *p, uint64_t h) {
    uint32_t mask = (uint32_t)p->index_cap - 1;
    for (uint32_t i = (uint32_t)mix64(h) & mask;; i = (i + 1) & mask) {
        uint64_t k = p->index_keys[i];
        if (k == 0) return -1;
        if (k == h) return (int)i;
    }
}

static void index_put(kv_pool_t *p, uint64_t h, int32_t b) {
    uint32_t mask = (uint32_t)p->index_cap - 1;
    uint32_t i = (uint32_t)mix64(h) & mask;
    while (p->index_keys[i] > 1) i = (i + 1) & mask;
    if (p->index_keys[i] == 0) p->index_used++;
    p->index_keys[i] = h;
    p->index_vals[i] = b;
}

/* Live keys never exceed n_blocks (half the slots); tombstones are swept by a rebuild
 * once live + dead pass 3/4, so a probe always meets an empty slot. O(n) per rebuild,
 * amortized over the n/4 removals that caused it. */
static void index_insert(kv_pool_t *p, uint64_t h, int32_t b) {
    if ((p->index_used + 1) * 4 > p->index_cap * 3) {
        memset(p->index_keys, 0, sizeof(uint64_t) * p->index_cap);
        p->index_used = 0;
        for (int32_t x = 0; x < p->n_blocks; x++)
            if (p->hashed[x]) index_put(p, p->hash[x], x);
    }
    index_put(p, h, b);
}

static void index_remove(kv_pool_t *p, uint64_t h) {
    int i = index_find(p, h);
    if (i >= 0) p->index_keys[i] = 1;
}

uint64_t kv_block_hash(uint64_t parent, const int32_t *tokens, int n, uint64_t ns) {
    uint64_t h = mix64(parent ^ 0x9e3779b97f4a7c15ull) ^ mix64(ns + 0x632be59bd9b4e019ull);
    for (int i = 0; i < n; i++) h = mix64(h ^ ((uint64_t)(uint32_t)tokens[i] * 0x9e3779b97f4a7c15ull + (uint64_t)i));
    return h < 2 ? h + 2 : h;
}

static void lru_unlink(kv_pool_t *p, int32_t b) {
    int32_t pr = p->lru_prev[b], nx = p->lru_next[b];
    if (pr >= 0) p->lru_next[pr] = nx; else p->lru_head = nx;
    if (nx >= 0) p->lru_prev[nx] = pr; else p->lru_tail = pr;
    p->n_cached--;
}

static void lru_push(kv_pool_t *p, int32_t b) {
    p->lru_prev[b] = p->lru_tail;
    p->lru_next[b] = -1;
    if (p->lru_tail >= 0) p->lru_next[p->lru_tail] = b; else p->lru_head = b;
    p->lru_tail = b;
    p->n_cached++;
}

int32_t kv_block_alloc(kv_pool_t *p) {
    int32_t b;
    if (p->n_free > 0) b = p->free_list[--p->n_free];
    else if (p->lru_head >= 0) {
        b = p->lru_head; /* evict the least recently used cached block */
        lru_unlink(p, b);
        index_remove(p, p->hash[b]);
        p->hashed[b] = 0;
        p->evictions++;
    } else return -1;
    p->refcount[b] = 1;
    if (!p->touched[b] && p->be->ops->touch) { /* its first use: the memory resident before a step writes it */
        const size_t bb = (size_t)p->block_size * p->n_kv_heads * p->head_dim * dtype_size(p->dtype);
        for (int l = 0; l < p->n_layers; l++) {
            p->be->ops->touch(p->be, (char *)p->k[l] + (size_t)b * bb, bb);
            p->be->ops->touch(p->be, (char *)p->v[l] + (size_t)b * bb, bb);
            if (p->ks) { /* and its scales (a few hundred bytes: the page holding them is made resident) */
                const size_t sb = scale_bytes(p->block_size, p->n_kv_heads, p->dtype);
                p->be->ops->touch(p->be, (char *)p->ks[l] + (size_t)b * sb, sb);
                p->be->ops->touch(p->be, (char *)p->vs[l] + (size_t)b * sb, sb);
            }
        }
        p->touched[b] = 1;
    }
    return b;
}

void kv_block_release(kv_pool_t *p, int32_t b) {
    if (--p->refcount[b] > 0) return;
    if (p->hashed[b]) { lru_push(p, b); return; }
    /* keep the free stack ordered so the lowest id is handed out next: O(n_free), fine
     * next to a forward pass */
    int i = p->n_free;
    while (i > 0 && p->free_list[i - 1] < b) { p->free_list[i] = p->free_list[i - 1]; i--; }
    p->free_list[i] = b;
    p->n_free++;
}

void kv_block_set_hash(kv_pool_t *p, int32_t b, uint64_t h) {
    if (p->hashed[b] || index_find(p, h) >= 0) return;
    index_insert(p, h, b); /* before marking b hashed: a rebuild inside must not put it in too */
    p->hash[b] = h;
    p->hashed[b] = 1;
}

int kv_prefix_has(const kv_pool_t *p, uint64_t h) { return index_find(p, h) >= 0; }

int32_t kv_prefix_acquire(kv_pool_t *p, uint64_t h) {
    int i = index_find(p, h);
    if (i < 0) return -1;
    int32_t b = p->index_vals[i];
    if (p->refcount[b] == 0) lru_unlink(p, b);
    p->refcount[b]++;
    return b;
}

void kv_seq_truncate(kv_seq_t *s, kv_pool_t *p, int n_tokens) {
    int keep = (n_tokens + p->block_size - 1) / p->block_size;
    while (s->n_blocks > keep) kv_block_release(p, s->blocks[--s->n_blocks]);
    if (s->n_tokens > n_tokens) s->n_tokens = n_tokens;
}

void kv_seq_free(kv_seq_t *s, kv_pool_t *p) {
    kv_seq_truncate(s, p, 0);
    free(s->blocks);
    memset(s, 0, sizeof *s);
}
