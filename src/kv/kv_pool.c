/* kv_pool.c — see kv_pool.h. */
#include "kv/kv_pool.h"
#include <stdlib.h>
#include <string.h>

size_t kv_pool_block_bytes(int n_layers, int block_size, int n_kv_heads, int head_dim, dtype_t dtype) {
    return 2 * (size_t)n_layers * block_size * n_kv_heads * head_dim * dtype_size(dtype);
}

int kv_pool_init(kv_pool_t *p, backend_t *be, int n_layers, int n_blocks, int block_size, int n_kv_heads, int head_dim,
                 dtype_t dtype, err_t *e) {
    memset(p, 0, sizeof *p);
    if (n_blocks <= 0 || block_size <= 0) return err_set(e, "KV pool: need at least one block (got %d of %d tokens)", n_blocks, block_size);
    if (dtype != DT_F32 && dtype != DT_F16 && dtype != DT_BF16) return err_set(e, "KV pool: dtype %s unsupported (f32, f16, bf16)", dtype_name(dtype));
    p->be = be;
    p->n_layers = n_layers;
    p->n_blocks = n_blocks;
    p->block_size = block_size;
    p->n_kv_heads = n_kv_heads;
    p->head_dim = head_dim;
    p->dtype = dtype;
    p->k = calloc((size_t)n_layers, sizeof(void *));
    p->v = calloc((size_t)n_layers, sizeof(void *));
    size_t layer_bytes = (size_t)n_blocks * block_size * n_kv_heads * head_dim * dtype_size(dtype);
    for (int l = 0; l < n_layers; l++) {
        p->k[l] = be->ops->alloc(be, layer_bytes);
        p->v[l] = be->ops->alloc(be, layer_bytes);
        if (!p->k[l] || !p->v[l]) {
            kv_pool_free(p);
            return err_set(e, "KV pool: cannot allocate %d blocks (%.1f MB); lower --kv-cache-gb", n_blocks,
                           2.0 * n_layers * layer_bytes / 1e6);
        }
    }
    p->refcount = calloc((size_t)n_blocks, sizeof(int32_t));
    p->free_list = malloc(sizeof(int32_t) * n_blocks);
    for (int i = 0; i < n_blocks; i++) p->free_list[i] = n_blocks - 1 - i;
    p->n_free = n_blocks;
    return 0;
}

void kv_pool_free(kv_pool_t *p) {
    if (p->be) {
        for (int l = 0; l < p->n_layers; l++) {
            if (p->k) p->be->ops->free(p->be, p->k[l]);
            if (p->v) p->be->ops->free(p->be, p->v[l]);
        }
    }
    free(p->k);
    free(p->v);
    free(p->refcount);
    free(p->free_list);
    memset(p, 0, sizeof *p);
}

kv_view_t kv_pool_view(const kv_pool_t *p, int layer) {
    kv_view_t v = {p->k[layer], p->v[layer], p->dtype, p->block_size, p->n_kv_heads, p->head_dim};
    return v;
}

void kv_seq_init(kv_seq_t *s) { memset(s, 0, sizeof *s); }

int kv_seq_reserve(kv_seq_t *s, kv_pool_t *p, int n_tokens, err_t *e) {
    int need = (n_tokens + p->block_size - 1) / p->block_size;
    if (need <= s->n_blocks) return 0;
    if (need - s->n_blocks > p->n_free)
        return err_set(e, "KV cache full: need %d more blocks of %d tokens, %d free", need - s->n_blocks, p->block_size, p->n_free);
    if (need > s->cap_blocks) {
        int cap = s->cap_blocks ? s->cap_blocks : 8;
        while (cap < need) cap *= 2;
        int32_t *nb = realloc(s->blocks, sizeof(int32_t) * cap);
        if (!nb) return err_set(e, "out of memory growing a block table");
        s->blocks = nb;
        s->cap_blocks = cap;
    }
    while (s->n_blocks < need) {
        int32_t b = p->free_list[--p->n_free];
        p->refcount[b] = 1;
        s->blocks[s->n_blocks++] = b;
    }
    return 0;
}

static void block_release(kv_pool_t *p, int32_t b) {
    if (--p->refcount[b] == 0) {
        /* keep the free stack ordered so the lowest id is handed out next: O(n_free),
         * fine at the pool sizes a run uses; the prefix cache replaces this with LRU. */
        int i = p->n_free;
        while (i > 0 && p->free_list[i - 1] < b) { p->free_list[i] = p->free_list[i - 1]; i--; }
        p->free_list[i] = b;
        p->n_free++;
    }
}

void kv_seq_truncate(kv_seq_t *s, kv_pool_t *p, int n_tokens) {
    int keep = (n_tokens + p->block_size - 1) / p->block_size;
    while (s->n_blocks > keep) block_release(p, s->blocks[--s->n_blocks]);
    if (s->n_tokens > n_tokens) s->n_tokens = n_tokens;
}

void kv_seq_free(kv_seq_t *s, kv_pool_t *p) {
    kv_seq_truncate(s, p, 0);
    free(s->blocks);
    memset(s, 0, sizeof *s);
}
