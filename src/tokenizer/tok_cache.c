/* tok_cache.c — pre-token → ids cache shared by all threads that encode with one tokenizer.
 *
 * Text repeats words all the time, so caching the model's output per pre-token skips most BPE
 * work (HF does the same, capped at 10k entries). The cache is split into 16 shards chosen by
 * hash, each a small open-addressing table behind its own mutex, so concurrent encoders
 * rarely wait on each other. A shard that fills up is simply emptied: no LRU bookkeeping on
 * the hot path, and the working set refills within a few hundred words. Keys and id lists are
 * one malloc each. Only keys shorter than 256 bytes are cached (as in HF).
 */
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>

#define N_SHARDS 16
#define SHARD_CAP 4096 /* slots per shard; emptied at 3/4 full */

typedef struct entry {
    uint64_t h; /* 0 = empty slot */
    char *blob; /* key bytes followed by the ids (aligned) */
    uint32_t klen;
    int32_t n;
} entry_t;

typedef struct shard {
    pthread_mutex_t mu;
    entry_t *slot;
    int used;
} shard_t;

struct word_cache {
    shard_t sh[N_SHARDS];
};

struct word_cache *tk_wc_new(void) {
    struct word_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    for (int i = 0; i < N_SHARDS; i++) {
        pthread_mutex_init(&c->sh[i].mu, NULL);
        c->sh[i].slot = calloc(SHARD_CAP, sizeof(entry_t));
        if (!c->sh[i].slot) { tk_wc_free(c); return NULL; }
    }
    return c;
}

static void shard_clear(shard_t *s) {
    for (int i = 0; i < SHARD_CAP; i++) {
        free(s->slot[i].blob);
        s->slot[i] = (entry_t){0};
    }
    s->used = 0;
}

void tk_wc_free(struct word_cache *c) {
    if (!c) return;
    for (int i = 0; i < N_SHARDS; i++) {
        if (c->sh[i].slot) shard_clear(&c->sh[i]);
        free(c->sh[i].slot);
        pthread_mutex_destroy(&c->sh[i].mu);
    }
    free(c);
}

static inline size_t ids_off(uint32_t klen) { return (klen + 3) & ~(size_t)3; }

int tk_wc_get(struct word_cache *c, const char *s, size_t n, ivec_t *out) {
    if (!c || n >= 256) return 0;
    uint64_t h = tk_tok_hash(s, n) | 1;
    shard_t *sh = &c->sh[h >> 60];
    int hit = 0;
    pthread_mutex_lock(&sh->mu);
    for (size_t i = (h >> 8) & (SHARD_CAP - 1);; i = (i + 1) & (SHARD_CAP - 1)) {
        entry_t *en = &sh->slot[i];
        if (!en->h) break;
        if (en->h == h && en->klen == n && !memcmp(en->blob, s, n)) {
            hit = tk_iv_append(out, (const int32_t *)(en->blob + ids_off(en->klen)), en->n) == 0;
            break;
        }
    }
    pthread_mutex_unlock(&sh->mu);
    return hit;
}

void tk_wc_put(struct word_cache *c, const char *s, size_t n, const int32_t *ids, int n_ids) {
    if (!c || n >= 256) return;
    uint64_t h = tk_tok_hash(s, n) | 1;
    char *blob = malloc(ids_off((uint32_t)n) + sizeof(int32_t) * (n_ids ? n_ids : 1));
    if (!blob) return; /* a cache miss next time, nothing worse */
    if (n) memcpy(blob, s, n);
    if (n_ids) memcpy(blob + ids_off((uint32_t)n), ids, sizeof(int32_t) * n_ids); /* (ids may be NULL when a word has none) */
    shard_t *sh = &c->sh[h >> 60];
    pthread_mutex_lock(&sh->mu);
    if (sh->used >= SHARD_CAP * 3 / 4) shard_clear(sh);
    size_t i = (h >> 8) & (SHARD_CAP - 1);
    while (sh->slot[i].h) {
        entry_t *en = &sh->slot[i];
        if (en->h == h && en->klen == n && !memcmp(en->blob, s, n)) { /* raced with another thread */
            pthread_mutex_unlock(&sh->mu);
            free(blob);
            return;
        }
        i = (i + 1) & (SHARD_CAP - 1);
    }
    sh->slot[i] = (entry_t){h, blob, (uint32_t)n, n_ids};
    sh->used++;
    pthread_mutex_unlock(&sh->mu);
}
