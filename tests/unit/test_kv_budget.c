/* test_kv_budget.c — the automatic KV cache size (engine/kv_budget.c) and the CPU backend's
 * lazily mapped buffers that make a context-sized pool cheap until used.
 *
 * - device: free memory less the reserve (6 % of the device, at least 2 GiB, twice a step's
 *   activations, each row's logits and state, the weight cache's budget); nothing left → 0;
 *   snapshots capped by the host; the weight cache's room once a pool of a given size exists;
 *   at most 4 × max_batch full contexts (a tiny model on a big GPU);
 * - host: one full context, at least 1 GB, at most a quarter of physical memory;
 * - an engine started with the defaults on llama-tiny holds the 1 GB floor; an explicit
 *   --kv-cache-gb still wins;
 * - cpu backend: a 256 MB buffer is zero, costs no resident memory until touched, and
 *   frees (a small one still comes from malloc). */
#include <unistd.h>
#include "../common/test_util.h"
#include "backend/backend.h"
#include "engine/kv_budget.h"
#include "kiln.h"

#define MODEL "tests/fixtures/models/llama-tiny"
#define GiB 1073741824.0

static kv_budget_in_t h200_llama8b(void) {
    kv_budget_in_t in = {0};
    in.device = 1;
    in.dev_total = 150.0e9;
    in.dev_free = 140.0e9;
    in.host_total = 128.0 * GiB;
    in.token_bytes = 131072; /* 32 layers x 2 x 8 heads x 128 x f16 */
    in.ctx_len = 8192;
    in.step_bytes = 0.5e9;
    in.row_bytes = 3 * 4.0 * 128256;
    in.max_batch = 64;
    return in;
}

static void test_device(void **st) {
    (void)st;
    kv_budget_in_t in = h200_llama8b();
    kv_budget_t b = kv_auto_budget(&in);
    double reserve = 0.06 * 150.0e9 + 2 * 0.5e9 + 64 * in.row_bytes;
    assert_true(fabs(b.reserve_bytes - reserve) < 1);
    assert_true(fabs(b.kv_bytes - (140.0e9 - reserve)) < 1);
    assert_true(fabs(b.snap_cap - 0.10 * 128.0 * GiB) < 1);
    assert_non_null(strstr(b.why, "140.0 GB free"));
    assert_null(strstr(b.why, "weight cache"));
    /* the weight cache's still unallocated budget (quantized weights kept as f16 for prefill) comes out of
     * the pool, not out of the margin, and the log line says how much */
    kv_budget_in_t wc = h200_llama8b();
    wc.cache_bytes = 13.9e9;
    kv_budget_t bw = kv_auto_budget(&wc);
    assert_true(fabs(bw.reserve_bytes - (reserve + 13.9e9)) < 1);
    assert_true(fabs(bw.kv_bytes - (140.0e9 - reserve - 13.9e9)) < 1);
    assert_non_null(strstr(bw.why, "13.9 GB of it for the weight cache"));
    /* after an automatic pool, the room for the cache is what it was given; after a pool of a given size
     * (20 GB free left), the free memory less the steps' reserve; nothing left: 0 */
    kv_budget_in_t after = wc;
    after.dev_free = 140.0e9 - bw.kv_bytes;
    assert_true(fabs(kv_weight_cache_room(&after) - 13.9e9) < 1);
    after.dev_free = 20e9;
    assert_true(fabs(kv_weight_cache_room(&after) - (20e9 - reserve)) < 1);
    after.dev_free = 5e9;
    assert_true(kv_weight_cache_room(&after) == 0);
    /* a tiny model on a big device: at most 4 x max_batch full contexts */
    kv_budget_in_t tiny = h200_llama8b();
    tiny.token_bytes = 256;
    tiny.ctx_len = 256;
    b = kv_auto_budget(&tiny);
    assert_true(fabs(b.kv_bytes - 4.0 * 64 * 256 * 256) < 1);
    assert_non_null(strstr(b.why, "capped"));
    /* a small device: the 2 GiB floor of the margin applies */
    in.dev_total = 16e9;
    in.dev_free = 10e9;
    b = kv_auto_budget(&in);
    assert_true(fabs(b.reserve_bytes - (2 * GiB + 1e9 + 64 * in.row_bytes)) < 1);
    /* nothing left after the weights: 0, never negative */
    in.dev_free = 2e9;
    b = kv_auto_budget(&in);
    assert_true(b.kv_bytes == 0);
}

static void test_host(void **st) {
    (void)st;
    kv_budget_in_t in = {0};
    in.host_total = 24 * GiB;
    in.token_bytes = 114688; /* qwen3-0.6b: 28 layers x 2 x 8 x 128 x f16 */
    in.ctx_len = 40960;
    kv_budget_t b = kv_auto_budget(&in);
    assert_true(fabs(b.kv_bytes - 114688.0 * 40960) < 1); /* one whole context: 4.7 GB */
    in.ctx_len = 512; /* a short context: the 1 GB floor */
    b = kv_auto_budget(&in);
    assert_true(b.kv_bytes == 1e9);
    in.ctx_len = 1 << 20; /* more than a quarter of the host: capped */
    b = kv_auto_budget(&in);
    assert_true(fabs(b.kv_bytes - 6 * GiB) < 1);
    in.host_total = 2 * GiB; /* a tiny host: the cap wins over the floor */
    in.ctx_len = 512;
    b = kv_auto_budget(&in);
    assert_true(fabs(b.kv_bytes - 0.5 * GiB) < 1);
}

static int blocks_of(double gb, int kv_tokens) {
    kiln_engine_opts_t o;
    kiln_engine_opts_default(&o);
    o.model_dir = MODEL;
    o.threads = 1;
    o.load_tokenizer = 0;
    o.kv_cache_gb = gb;
    o.kv_tokens = kv_tokens;
    err_t e = {0};
    kiln_engine_t *eng = kiln_engine_start(&o, &e);
    if (!eng) fail_msg("engine: %s", e.msg);
    kiln_stats_t s;
    kiln_stats(eng, &s);
    kiln_engine_stop(eng);
    return s.kv_blocks_total;
}

static void test_engine_default(void **st) {
    (void)st;
    /* llama-tiny: 2 layers x 2 x 2 heads x 16 x f16 = 256 bytes a token, 4 KB a block */
    long phys = sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGESIZE);
    double expect = 1e9 < phys * 0.25 ? 1e9 : phys * 0.25;
    assert_int_equal(blocks_of(0, 0), (int)(expect / 4096));
    assert_int_equal(blocks_of(0.001, 0), (int)(1e6 / 4096)); /* explicit size wins */
    assert_int_equal(blocks_of(0, 100), 7);                   /* so do tokens */
}

static long rss_kb(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, res = 0;
    if (!f) return -1;
    if (fscanf(f, "%ld %ld", &size, &res) != 2) res = -1;
    fclose(f);
    return res * (sysconf(_SC_PAGESIZE) / 1024);
}

static void test_cpu_lazy_buffers(void **st) {
    (void)st;
    err_t e = {0};
    backend_t *be = backend_create("cpu", 1, &e);
    assert_non_null(be);
    const size_t n = (size_t)256 << 20;
    long before = rss_kb();
    unsigned char *p = be->ops->alloc(be, n);
    assert_non_null(p);
    long after = rss_kb();
    assert_true(before > 0 && after > 0);
    assert_true(after - before < 32 * 1024); /* not 256 MB resident */
    for (size_t i = 0; i < n; i += 4096 * 97) assert_int_equal(p[i], 0);
    p[n - 1] = 7;
    assert_int_equal(p[n - 1], 7);
    be->ops->free(be, p);
    float *small = be->ops->alloc(be, 1000);
    assert_non_null(small);
    for (int i = 0; i < 250; i++) assert_true(small[i] == 0.0f);
    be->ops->free(be, small);
    void *left = be->ops->alloc(be, (size_t)4 << 20); /* never freed: backend_destroy unmaps it */
    assert_non_null(left);
    backend_destroy(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device),
        cmocka_unit_test(test_host),
        cmocka_unit_test(test_engine_default),
        cmocka_unit_test(test_cpu_lazy_buffers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
