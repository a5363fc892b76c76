/* swa.c — see swa.h. */
#include "kv/swa.h"
#include <stdlib.h>
#include <string.h>

int kv_seq_release_before(kv_seq_t *s, kv_pool_t *p, int lo) {
    int end = lo > 0 ? lo / p->block_size : 0; /* blocks [0, end) end at or before lo */
    if (end > s->n_blocks) end = s->n_blocks;
    for (int j = 0; j < end; j++)
        if (s->blocks[j] >= 0) {
            kv_block_release(p, s->blocks[j]);
            s->blocks[j] = -1;
        }
    return kv_seq_held(s);
}

int kv_seq_held(const kv_seq_t *s) {
    int n = 0;
    for (int j = 0; j < s->n_blocks; j++) n += s->blocks[j] >= 0;
    return n;
}

void kv_seq_truncate_sparse(kv_seq_t *s, kv_pool_t *p, int n_tokens) {
    int keep = (n_tokens + p->block_size - 1) / p->block_size;
    while (s->n_blocks > keep) {
        int32_t b = s->blocks[--s->n_blocks];
        if (b >= 0) kv_block_release(p, b);
    }
    if (s->n_tokens > n_tokens) s->n_tokens = n_tokens;
}

void kv_seq_free_sparse(kv_seq_t *s, kv_pool_t *p) {
    if (s->n_blocks) kv_seq_truncate_sparse(s, p, 0);
    free(s->blocks);
    memset(s, 0, sizeof *s);
}

int kv_swa_window_cached(const kv_pool_t *p, const uint64_t *h, int k, int w) {
    for (int j = kv_window_first_block(k * p->block_size, w, p->block_size); j < k; j++)
        if (!kv_prefix_has(p, h[j])) return 0;
    return 1;
}

int kv_swa_attach(kv_seq_t *s, kv_pool_t *p, const uint64_t *h, int k, int w) {
    int first = kv_window_first_block(k * p->block_size, w, p->block_size);
    for (int j = 0; j < k; j++) {
        int32_t b = j < first ? -1 : kv_prefix_acquire(p, h[j]);
        if ((j >= first && b < 0) || kv_seq_append_block(s, b) != 0) {
            if (b >= 0) kv_block_release(p, b);
            kv_seq_free_sparse(s, p);
            return -1;
        }
    }
    s->n_tokens = k * p->block_size;
    return 0;
}
