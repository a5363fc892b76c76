/* snap_store.c — see snap_store.h. */
#include "kv/snap_store.h"
#include <stdlib.h>
#include <string.h>

void snap_init(snap_store_t *s, size_t blob_bytes, size_t budget_bytes) {
    memset(s, 0, sizeof *s);
    s->blob_bytes = blob_bytes;
    s->budget = budget_bytes;
    s->n_buckets = 256;
    s->buckets = calloc((size_t)s->n_buckets, sizeof(snap_entry_t *));
}

static void lru_unlink(snap_store_t *s, snap_entry_t *x) {
    if (x->lru_prev) x->lru_prev->lru_next = x->lru_next; else s->lru_head = x->lru_next;
    if (x->lru_next) x->lru_next->lru_prev = x->lru_prev; else s->lru_tail = x->lru_prev;
    x->lru_prev = x->lru_next = NULL;
}

static void lru_push(snap_store_t *s, snap_entry_t *x) {
    x->lru_prev = s->lru_tail;
    x->lru_next = NULL;
    if (s->lru_tail) s->lru_tail->lru_next = x; else s->lru_head = x;
    s->lru_tail = x;
}

static snap_entry_t **slot(snap_store_t *s, uint64_t h) {
    snap_entry_t **pp = &s->buckets[(h ^ (h >> 29)) % (uint64_t)s->n_buckets];
    while (*pp && (*pp)->hash != h) pp = &(*pp)->chain;
    return pp;
}

static void drop(snap_store_t *s, snap_entry_t *x) {
    snap_entry_t **pp = slot(s, x->hash);
    *pp = x->chain;
    lru_unlink(s, x);
    free(x->blob);
    free(x);
    s->used -= s->blob_bytes;
    s->count--;
}

void snap_free(snap_store_t *s) {
    while (s->lru_head) drop(s, s->lru_head);
    free(s->buckets);
    memset(s, 0, sizeof *s);
}

void snap_put(snap_store_t *s, uint64_t hash, const void *blob) {
    if (!s->buckets || s->blob_bytes == 0 || s->blob_bytes > s->budget) return;
    snap_entry_t **pp = slot(s, hash);
    if (*pp) { /* same prefix, same state: refresh */
        memcpy((*pp)->blob, blob, s->blob_bytes);
        lru_unlink(s, *pp);
        lru_push(s, *pp);
        return;
    }
    while (s->used + s->blob_bytes > s->budget && s->lru_head) { drop(s, s->lru_head); s->evictions++; }
    snap_entry_t *x = calloc(1, sizeof *x);
    x->blob = malloc(s->blob_bytes);
    if (!x->blob) { free(x); return; }
    memcpy(x->blob, blob, s->blob_bytes);
    x->hash = hash;
    pp = slot(s, hash);
    x->chain = *pp;
    *pp = x;
    lru_push(s, x);
    s->used += s->blob_bytes;
    s->count++;
    s->saves++;
}

const void *snap_get(snap_store_t *s, uint64_t hash) {
    if (!s->buckets) return NULL;
    snap_entry_t *x = *slot(s, hash);
    if (!x) return NULL;
    lru_unlink(s, x);
    lru_push(s, x);
    s->hits++;
    return x->blob;
}
