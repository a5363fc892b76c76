/* swa.h — the KV group of sliding-window layers (DESIGN §5).
 *
 * A model whose sliding layers keep their KV apart (model_init_kv_groups) has a second pool,
 * m->kv_swa, holding only those layers, and each sequence a second block table into it. The
 * table is indexed like the full group's (entry j holds positions [j·bs, (j+1)·bs)), but the
 * entries of blocks that lie entirely before the window of the next query are released and
 * set to -1: a query at position p reads positions >= p - w + 1 only, so a sequence standing
 * at n computed tokens keeps blocks from (n - w + 1) / bs on, at most ceil(w/bs) + 1 of them
 * between steps (a prefill chunk of c tokens needs ceil(c/bs) more while it runs).
 *
 * Released blocks that were full carry the same chained hash as the full group's block at the
 * same index (hashes live in each pool's own index), so they park on the sliding pool's LRU
 * and a later request with the same prefix can take them back. A prefix hit of k blocks is
 * only usable when the sliding pool still holds the blocks the window at k·bs reads. */
#ifndef KILN_KV_SWA_H
#define KILN_KV_SWA_H

#include "kv/kv_pool.h"

/* The first block a query at position pos reads through a window of w tokens. */
static inline int kv_window_first_block(int pos, int w, int bs) {
    int lo = pos - w + 1;
    return lo > 0 ? lo / bs : 0;
}

/* Releases the blocks of s that lie entirely before position lo (entries become -1); returns
 * the blocks s still holds. */
int kv_seq_release_before(kv_seq_t *s, kv_pool_t *p, int lo);
/* Blocks s holds (entries >= 0). */
int kv_seq_held(const kv_seq_t *s);
/* kv_seq_truncate / kv_seq_free for tables with released (-1) entries. */
void kv_seq_truncate_sparse(kv_seq_t *s, kv_pool_t *p, int n_tokens);
void kv_seq_free_sparse(kv_seq_t *s, kv_pool_t *p);

/* Prefix reuse. h[0..k) are the chained hashes of the first k blocks. Whether p holds the
 * blocks a continuation at position k·bs reads through window w (none are needed for k = 0). */
int kv_swa_window_cached(const kv_pool_t *p, const uint64_t *h, int k, int w);
/* Makes the empty table s cover k blocks: -1 before the window, references to the cached
 * blocks within it. Call only after kv_swa_window_cached said yes (and nothing allocated
 * since); returns -1 (s left empty) if a block is missing after all. */
int kv_swa_attach(kv_seq_t *s, kv_pool_t *p, const uint64_t *h, int k, int w);

#endif
