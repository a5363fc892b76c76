/* kv_pool.h — the paged KV cache: one pool of fixed-size blocks per device, and
 * sequences that hold block tables into it (DESIGN §5).
 *
 * Storage: for each attention layer, K and V arrays of [n_blocks][block_size][n_kv][hd]
 * in the cache dtype, allocated through the backend (host or device memory). The pool
 * only does bookkeeping on the host: reference counts and a free list. A sequence owns
 * one reference to each block in its table; kv_seq_free gives them back. Blocks are
 * handed out lowest-id first so runs are reproducible. Prefix hashing and LRU eviction
 * of cached blocks (issue 5) build on the refcounts here. */
#ifndef KILN_KV_POOL_H
#define KILN_KV_POOL_H

#include <stdint.h>
#include "backend/backend.h"

typedef struct kv_pool {
    backend_t *be;
    int n_layers, n_blocks, block_size, n_kv_heads, head_dim;
    dtype_t dtype;
    void **k, **v;            /* [n_layers] */
    int32_t *refcount;        /* [n_blocks] */
    int32_t *free_list;       /* stack of free block ids, lowest on top */
    int n_free;
} kv_pool_t;

typedef struct kv_seq {
    int32_t *blocks;          /* block table */
    int n_blocks, cap_blocks;
    int n_tokens;             /* positions [0, n_tokens) hold valid K/V */
} kv_seq_t;

int kv_pool_init(kv_pool_t *p, backend_t *be, int n_layers, int n_blocks, int block_size, int n_kv_heads, int head_dim,
                 dtype_t dtype, err_t *e);
void kv_pool_free(kv_pool_t *p);
/* Bytes one block takes over all layers (K and V). */
size_t kv_pool_block_bytes(int n_layers, int block_size, int n_kv_heads, int head_dim, dtype_t dtype);
kv_view_t kv_pool_view(const kv_pool_t *p, int layer);

void kv_seq_init(kv_seq_t *s);
/* Makes room for positions [0, n_tokens): allocates blocks as needed. Fails without
 * side effects when the pool has too few free blocks. */
int kv_seq_reserve(kv_seq_t *s, kv_pool_t *p, int n_tokens, err_t *e);
/* Drops positions >= n_tokens, freeing whole blocks past the end. */
void kv_seq_truncate(kv_seq_t *s, kv_pool_t *p, int n_tokens);
void kv_seq_free(kv_seq_t *s, kv_pool_t *p);
/* Slot of position pos (a row index into the layer arrays). */
static inline int32_t kv_seq_slot(const kv_seq_t *s, int block_size, int pos) {
    return s->blocks[pos / block_size] * block_size + pos % block_size;
}

#endif
