/* snap_store.h — recurrent-state snapshots for prefix reuse on hybrid models (DESIGN §5).
 *
 * Attention layers reuse cached blocks; recurrent layers (gated DeltaNet) fold the whole
 * history into one state, so reusing a prefix needs the state as it stood at the end of
 * that prefix. The engine saves snapshots at block boundaries, keyed by the same chained
 * block hash as the block that ends there, and on a hit restores the snapshot together
 * with the attention blocks up to that boundary. Snapshots live in host memory under a
 * byte budget, least recently used evicted first. O(n) lookups over a small table would
 * do; a hash table keeps admission O(chain length). */
#ifndef KILN_SNAP_STORE_H
#define KILN_SNAP_STORE_H

#include <stddef.h>
#include <stdint.h>

typedef struct snap_entry {
    uint64_t hash;
    void *blob;
    struct snap_entry *lru_prev, *lru_next, *chain;
} snap_entry_t;

typedef struct snap_store {
    size_t blob_bytes, budget, used;
    snap_entry_t **buckets;
    int n_buckets, count;
    snap_entry_t *lru_head, *lru_tail; /* head = least recently used */
    uint64_t hits, saves, evictions;
} snap_store_t;

void snap_init(snap_store_t *s, size_t blob_bytes, size_t budget_bytes);
void snap_free(snap_store_t *s);
/* Copies blob in under hash (replacing an older one); evicts LRU entries to stay in budget.
 * A budget smaller than one blob stores nothing. */
void snap_put(snap_store_t *s, uint64_t hash, const void *blob);
/* The blob stored under hash (and marks it recently used), or NULL. */
const void *snap_get(snap_store_t *s, uint64_t hash);

#endif
