/* kv_pool.h — the paged KV cache: one pool of fixed-size blocks per device, and
 * sequences that hold block tables into it (DESIGN §5).
 *
 * Storage: for each attention layer, K and V arrays of [n_blocks][block_size][n_kv][hd]
 * in the cache dtype (K transposed per block, [n_blocks][n_kv][hd][block_size], where the
 * backend asks for it: k_t), allocated through the backend (host or device memory); an
 * int8 cache (`--kv-dtype q8`, backends with kv_q8) also holds per-row scales, ks and vs of
 * [n_blocks][n_kv][block_size] f32 per layer (kv_view_t). The pool
 * only does bookkeeping on the host: reference counts and a free list. A sequence owns
 * one reference to each block in its table; kv_seq_free gives them back. Blocks are
 * handed out lowest-id first so runs are reproducible.
 *
 * Prefix cache (DESIGN §5): a full block can be given its chained hash (parent hash,
 * its tokens, the namespace). Hashed blocks enter an index; when their last reference
 * goes they are not freed but parked on an LRU list, still findable, and only evicted
 * (oldest first) when an allocation finds the free list empty. A 64-bit hash is the
 * identity: with a well-mixed hash the chance of any collision among a billion blocks
 * is ~3e-2 / 2^32, which we accept in exchange for not storing tokens per block. */
#ifndef KILN_KV_POOL_H
#define KILN_KV_POOL_H

#include <stdint.h>
#include "backend/backend.h"

typedef struct kv_pool {
    backend_t *be;
    int n_layers, n_blocks, block_size, n_kv_heads, head_dim;
    dtype_t dtype;
    int k_t;                  /* K transposed per block (kv_view_t.k_t; the backend's choice) */
    void **k, **v;            /* [n_layers] */
    float **ks, **vs;         /* [n_layers] per-row scales (DT_I8 only; else NULL) */
    int32_t *refcount;        /* [n_blocks] */
    int32_t *free_list;       /* stack of free block ids, lowest on top */
    uint8_t *touched;         /* [n_blocks] 1 once backend_ops.touch made the block's memory resident */
    int n_free;
    /* prefix cache */
    uint64_t *hash;           /* [n_blocks] valid when hashed[b]          */
    uint8_t *hashed;
    int32_t *lru_prev, *lru_next; /* unreferenced hashed blocks, head = oldest */
    int32_t lru_head, lru_tail;
    int n_cached;             /* blocks on the LRU list                    */
    uint64_t *index_keys;     /* open addressing: hash -> block; 0 = empty, 1 = tombstone */
    int32_t *index_vals;
    int index_cap, index_used;  /* used = live keys + tombstones */
    uint64_t evictions;
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

/* Blocks an allocation could get now: free ones plus evictable cached ones. */
static inline int kv_pool_available(const kv_pool_t *p) { return p->n_free + p->n_cached; }
/* Takes a block (free first, else evicts the least recently used cached one); -1 if none.
 * The block comes back with refcount 1 and no hash. */
int32_t kv_block_alloc(kv_pool_t *p);
void kv_block_release(kv_pool_t *p, int32_t b);
/* Gives a full block its chained hash and indexes it. If another block already has that
 * hash (two requests computed the same prefix at once), the block stays unhashed. */
void kv_block_set_hash(kv_pool_t *p, int32_t b, uint64_t h);
/* Whether a block with this hash is indexed (no reference taken). */
int kv_prefix_has(const kv_pool_t *p, uint64_t h);
/* Finds a cached block by hash and takes a reference to it; -1 if none. */
int32_t kv_prefix_acquire(kv_pool_t *p, uint64_t h);
/* The chained block hash: (parent, tokens[n], namespace) -> 64 bits, never 0 or 1. */
uint64_t kv_block_hash(uint64_t parent, const int32_t *tokens, int n, uint64_t ns);
/* Appends an already-referenced block to a sequence's table (prefix attach). */
int kv_seq_append_block(kv_seq_t *s, int32_t b);

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
