/* test_kv_pool.c — the block pool and its prefix index against a plain model of them.
 *
 * Random operations (allocate, hash, release, look up) on a small pool, checked after
 * each step against arrays that say what every block should be: free, referenced, or
 * cached under a hash. Hashes are full 64-bit values (half have the top bit set: a signed
 * key once made the index drop them). Every cached block must be findable, evictions take
 * the least recently used one, and a released pool is entirely free. */
#include "../common/test_util.h"
#include "kv/kv_pool.h"
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define NB 24

static uint64_t next(uint64_t *s) {
    *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17;
    return *s;
}

static void test_random_ops(void **st) {
    backend_t *be = backend_create("cpu", 1, NULL);
    kv_pool_t p;
    err_t e;
    assert_int_equal(kv_pool_init(&p, be, 1, NB, 4, 1, 8, DT_F32, &e), 0);
    int refs[NB] = {0}, cached[NB] = {0};
    uint64_t hash[NB] = {0}, lru_order[NB] = {0}, clock = 1;
    int32_t held[4 * NB];
    int n_held = 0;
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (int step = 0; step < 20000; step++) {
        int op = (int)(next(&rng) % 4);
        if (n_held == (int)(sizeof held / sizeof held[0]) && (op == 0 || op == 3)) op = 2; /* keep the model's array in bounds */
        if (op == 0) { /* allocate */
            int32_t b = kv_block_alloc(&p);
            int any_free = 0, oldest = -1;
            for (int i = 0; i < NB; i++) {
                if (refs[i] == 0 && !cached[i]) any_free = 1;
                if (refs[i] == 0 && cached[i] && (oldest < 0 || lru_order[i] < lru_order[oldest])) oldest = i;
            }
            if (!any_free && oldest < 0) { assert_int_equal(b, -1); continue; }
            assert_true(b >= 0);
            if (!any_free) assert_int_equal(b, oldest); /* eviction takes the least recently used */
            else assert_false(cached[b] && refs[b] == 0 && 0);
            assert_int_equal(refs[b], 0);
            cached[b] = 0;
            refs[b] = 1;
            held[n_held++] = b;
        } else if (op == 1 && n_held) { /* hash a held block */
            int32_t b = held[next(&rng) % n_held];
            uint64_t h = next(&rng) | (next(&rng) & 1 ? 0x8000000000000000ull : 0);
            if (h < 2) h += 2;
            kv_block_set_hash(&p, b, h);
            if (!cached[b]) { cached[b] = 1; hash[b] = h; }
        } else if (op == 2 && n_held) { /* release */
            int k = (int)(next(&rng) % n_held);
            int32_t b = held[k];
            held[k] = held[--n_held];
            kv_block_release(&p, b);
            if (--refs[b] == 0 && cached[b]) lru_order[b] = clock++;
        } else if (op == 3) { /* look up a cached block by its hash, take it */
            int cands[NB], nc = 0;
            for (int i = 0; i < NB; i++) if (cached[i]) cands[nc++] = i;
            if (!nc) continue;
            int i = cands[next(&rng) % nc];
            assert_true(kv_prefix_has(&p, hash[i]));
            int32_t b = kv_prefix_acquire(&p, hash[i]);
            assert_int_equal(b, i);
            refs[b]++;
            held[n_held++] = b;
        }
        /* every cached block is findable; the counters agree */
        int n_free = 0, n_cached = 0;
        for (int i = 0; i < NB; i++) {
            if (cached[i]) assert_true(kv_prefix_has(&p, hash[i]));
            n_free += refs[i] == 0 && !cached[i];
            n_cached += refs[i] == 0 && cached[i];
        }
        assert_int_equal(p.n_free, n_free);
        assert_int_equal(p.n_cached, n_cached);
    }
    while (n_held) kv_block_release(&p, held[--n_held]);
    assert_int_equal(p.n_free + p.n_cached, NB);
    kv_pool_free(&p);
    backend_destroy(be);
}

/* Regression: a block hashed when the index happened to be rebuilt (tombstones swept) went
 * in twice — the rebuild already re-inserted it, being marked hashed before the insert —
 * so evicting it later removed one entry and left the other pointing at a block that was
 * reused for other tokens: a later prefix hit attached a block held by another sequence
 * (refcounts and the free list corrupted; KV written through block -1 under ASan in the
 * engine stress test). Cycle blocks through hash -> cache -> evict well past several
 * rebuilds; an evicted hash must never be found again. */
static void test_evicted_never_found(void **st) {
    backend_t *be = backend_create("cpu", 1, NULL);
    kv_pool_t p;
    err_t e;
    assert_int_equal(kv_pool_init(&p, be, 1, NB, 4, 1, 8, DT_F32, &e), 0);
    uint64_t hs[2000];
    for (int k = 0; k < 2000; k++) {
        int32_t b = kv_block_alloc(&p); /* evicts the oldest cached block once all are cached */
        assert_true(b >= 0);
        hs[k] = 0x1234567ull + (uint64_t)k * 0x9e3779b97f4a7c15ull;
        if (hs[k] < 2) hs[k] += 2;
        kv_block_set_hash(&p, b, hs[k]);
        kv_block_release(&p, b);
        if (k >= NB) { /* hs[k - NB] was evicted by this allocation */
            if (kv_prefix_has(&p, hs[k - NB])) fail_msg("hash %d found after its block was evicted (step %d)", k - NB, k);
            assert_int_equal(kv_prefix_acquire(&p, hs[k - NB]), -1);
        }
        for (int j = k - NB + 1 > 0 ? k - NB + 1 : 0; j <= k; j++) assert_true(kv_prefix_has(&p, hs[j]));
    }
    assert_int_equal(p.n_cached + p.n_free, NB);
    kv_pool_free(&p);
    backend_destroy(be);
}

/* pages of [p, p + n) resident (mincore), counting the partial pages at both ends */
static int resident(const void *p, size_t n, size_t *pages) {
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)p & ~(pg - 1), b = ((uintptr_t)p + n + pg - 1) & ~(pg - 1);
    unsigned char v[4096];
    *pages = (b - a) / pg;
    if (*pages > sizeof v || mincore((void *)a, b - a, v)) return -1;
    int r = 0;
    for (size_t i = 0; i < *pages; i++) r += v[i] & 1;
    return r;
}

/* backend_ops.touch: the CPU backend's K/V layers of 1 MB or more are lazy mappings (no page is
 * resident until written); the pool's first hand-out of a block makes that block's pages resident
 * in every layer (MADV_POPULATE_WRITE) so a decode step takes no page faults writing it, and a block
 * handed out again keeps what was written in it. */
static void test_touch_resident(void **st) {
    (void)st;
    backend_t *be = backend_create("cpu", 1, NULL);
    kv_pool_t p;
    err_t e;
    const int nb = 64, bs = 16, nkv = 8, hd = 128; /* f16: 32 KB a block, 2 MB a layer's K or V */
    assert_int_equal(kv_pool_init(&p, be, 2, nb, bs, nkv, hd, DT_F16, &e), 0);
    const size_t bb = (size_t)bs * nkv * hd * 2;
    size_t pages;
    assert_int_equal(resident((char *)p.k[1] + 5 * bb, bb, &pages), 0); /* nothing written yet: lazy */
    int32_t b = kv_block_alloc(&p);
    assert_true(b >= 0);
    for (int l = 0; l < 2; l++) {
        assert_int_equal(resident((char *)p.k[l] + (size_t)b * bb, bb, &pages), (int)pages);
        assert_int_equal(resident((char *)p.v[l] + (size_t)b * bb, bb, &pages), (int)pages);
    }
    assert_int_equal(resident((char *)p.k[0] + 5 * bb, bb, &pages), 0); /* other blocks stay lazy */
    memset((char *)p.v[1] + (size_t)b * bb, 0x5a, bb);
    kv_block_release(&p, b);
    int32_t b2 = kv_block_alloc(&p); /* the free list's top: the same block */
    assert_int_equal(b2, b);
    const unsigned char *v = (const unsigned char *)p.v[1] + (size_t)b * bb;
    for (size_t i = 0; i < bb; i++)
        if (v[i] != 0x5a) fail_msg("byte %zu of a block handed out again changed", i);
    kv_pool_free(&p);
    backend_destroy(be);
}

/* The int8 cache (`--kv-dtype q8`): one byte a code plus an f32 scale per (position, KV head) for
 * K and for V in kv_pool_block_bytes and in the allocation; every layer's view carries its scale
 * arrays; a block handed out has its scales resident too; a backend without kv_q8 (CUDA today)
 * refuses the dtype with a message that names it and what to use instead. */
static void test_q8_pool(void **st) {
    (void)st;
    backend_t *be = backend_create("cpu", 1, NULL);
    kv_pool_t p;
    err_t e;
    const int nl = 3, nb = 2048, bs = 16, nkv = 8, hd = 128;
    assert_int_equal(kv_pool_block_bytes(nl, bs, nkv, hd, DT_I8), 2 * (size_t)nl * (bs * nkv * hd + bs * nkv * 4));
    assert_int_equal(kv_pool_block_bytes(nl, bs, nkv, hd, DT_F16), 2 * (size_t)nl * bs * nkv * hd * 2);
    assert_int_equal(kv_pool_init(&p, be, nl, nb, bs, nkv, hd, DT_I8, &e), 0);
    for (int l = 0; l < nl; l++) {
        kv_view_t v = kv_pool_view(&p, l);
        assert_true(v.dtype == DT_I8 && v.ks && v.vs && v.ks == p.ks[l] && v.vs == p.vs[l] && v.k == p.k[l]);
    }
    const size_t sb = (size_t)bs * nkv * 4; /* a block's scales: 512 B, 8 blocks a page */
    size_t pages;
    assert_int_equal(resident((char *)p.ks[2] + 1000 * sb, sb, &pages), 0); /* lazy until handed out */
    int32_t b = kv_block_alloc(&p);
    assert_true(b >= 0);
    for (int l = 0; l < nl; l++) {
        assert_int_equal(resident((char *)p.ks[l] + (size_t)b * sb, sb, &pages), (int)pages);
        assert_int_equal(resident((char *)p.vs[l] + (size_t)b * sb, sb, &pages), (int)pages);
    }
    /* the scales of the last slot of the last block lie inside the allocation (ASan) */
    kv_view_t v = kv_pool_view(&p, nl - 1);
    v.vs[kv_s_at(&v, (size_t)nb * bs - 1, nkv - 1)] = 1.f;
    kv_pool_free(&p);
    backend_ops_t ops = *be->ops; /* a backend without int8 K/V */
    ops.kv_q8 = NULL;
    backend_t be2 = *be;
    be2.ops = &ops;
    assert_int_not_equal(kv_pool_init(&p, &be2, nl, 16, bs, nkv, hd, DT_I8, &e), 0);
    assert_non_null(strstr(e.msg, "q8"));
    assert_non_null(strstr(e.msg, "f16"));
    assert_int_not_equal(kv_pool_init(&p, be, nl, 16, bs, nkv, hd, DT_U8, &e), 0);
    backend_destroy(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_random_ops), cmocka_unit_test(test_evicted_never_found),
                                       cmocka_unit_test(test_touch_resident), cmocka_unit_test(test_q8_pool)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
