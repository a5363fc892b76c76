/* test_fused_attn.c — the CPU backend's norm_rope_kv_attention (q/k norms, rope, the cache
 * write and attention in one op; a decode step in one pool pass, each item doing its own
 * heads' pre-work) must leave bitwise what the separate ops leave: out, q, k and the whole
 * K/V cache. Shapes: qwen3-like (16/8 heads, hd 128, q/k norms), GQA 4 without norms, hd 80
 * (not a multiple of 16), one KV head (MQA), partial rope, GQA 7 and 8; KV f16/bf16/f32; decode steps of
 * 1 and 3 rows (positions across block edges), a prefill row, a step with an empty row and a
 * two-token row (the same row count as tokens, not all decode), a window, the split decode
 * (KILN_ATTN_SEG-style segments: the pre-work then runs first, on the caller); 1, 2 and 3
 * threads, and cpu-ref. Each step also runs on a cache with K transposed per block
 * (kv_view_t.k_t, the layout the CPU backend's pool asks for; also with 32-position blocks)
 * holding the same values: the separate ops and the fused op there must give bitwise the
 * row-layout out, q and k, and the same cache element by element. The int8 cache (q8) too:
 * its codes and per-row scales. */
#include <math.h>
#include "../common/test_util.h"
#include "backend/backend.h"
#include "backend/cpu/cpu_kernels.h"

typedef struct { int nh, nkv, hd, rot, norm; } shape_t;

static float rope_base = 10000.f; /* changed between calls at the same position: the cos/sin kept per thread must follow */
static int g_bs = 16;              /* the cache block size */

/* one step: rows of n[r] tokens, the last at position last[r] (tokens last - n + 1 .. last) */
static void check_step(backend_t *be, const shape_t *s, dtype_t dt, int n_rows, const int *n, const int *last, int window,
                       const char *what) {
    const int bs = g_bs;
    int nh = s->nh, nkv = s->nkv, hd = s->hd, T = 0, nb = 0;
    int32_t rs[8], pos[64], slots[64];
    const int32_t *tables[8];
    int32_t tab[8][64];
    rs[0] = 0;
    for (int r = 0; r < n_rows; r++) {
        int blocks = (last[r] + bs) / bs;
        for (int b = 0; b < blocks; b++) tab[r][b] = nb + blocks - 1 - b; /* blocks out of order */
        nb += blocks;
        tables[r] = tab[r];
        for (int i = 0; i < n[r]; i++, T++) {
            pos[T] = last[r] - n[r] + 1 + i;
            slots[T] = tab[r][pos[T] / bs] * bs + pos[T] % bs;
        }
        rs[r + 1] = T;
    }
    size_t per = (size_t)nkv * hd, cache_n = (size_t)nb * bs * per, esz = dtype_size(dt);
    uint64_t seed = 77 + (uint64_t)T * 13 + (uint64_t)hd;
    /* 0, 1: rows (separate ops, fused op); 2, 3: the same with K transposed per block */
    void *kc[4], *vc[4];
    float *ksc[4] = {0}, *vsc[4] = {0}; /* q8: the scales, [block][kv head][position] whatever K's layout */
    size_t sn = (size_t)nb * bs * nkv;
    for (int i = 0; i < 4; i++) {
        kc[i] = malloc(cache_n * esz);
        vc[i] = malloc(cache_n * esz);
        if (dt == DT_I8) ksc[i] = malloc(sizeof(float) * sn), vsc[i] = malloc(sizeof(float) * sn);
    }
    for (size_t i = 0; i < cache_n; i++) {
        if (dt == DT_I8) {
            ((int8_t *)kc[0])[i] = (int8_t)(127.f * tu_rand(&seed));
            ((int8_t *)vc[0])[i] = (int8_t)(127.f * tu_rand(&seed));
            continue;
        }
        store_from_f32(kc[0], dt, i, tu_rand(&seed));
        store_from_f32(vc[0], dt, i, tu_rand(&seed));
    }
    for (size_t i = 0; dt == DT_I8 && i < sn; i++) ksc[0][i] = 0.02f + 0.01f * tu_rand(&seed), vsc[0][i] = 0.01f + 0.005f * tu_rand(&seed);
    for (int i = 1; dt == DT_I8 && i < 4; i++) memcpy(ksc[i], ksc[0], sizeof(float) * sn), memcpy(vsc[i], vsc[0], sizeof(float) * sn);
    kv_view_t kvt = {kc[2], vc[2], dt, bs, nkv, hd, 1};
    for (size_t sl = 0; sl < (size_t)nb * bs; sl++)
        for (size_t e = 0; e < per; e++) memcpy((char *)kc[2] + kv_k_at(&kvt, sl, e) * esz, (char *)kc[0] + (sl * per + e) * esz, esz);
    memcpy(kc[1], kc[0], cache_n * esz);
    memcpy(kc[3], kc[2], cache_n * esz);
    for (int i = 1; i < 4; i++) memcpy(vc[i], vc[0], cache_n * esz);
    size_t qn_ = (size_t)T * nh * hd, kn_ = (size_t)T * per;
    float *q[4], *k[4], *out[4], *v = malloc(sizeof(float) * kn_), *qw = malloc(sizeof(float) * hd), *kw = malloc(sizeof(float) * hd);
    for (int i = 0; i < 4; i++) {
        q[i] = malloc(sizeof(float) * qn_);
        k[i] = malloc(sizeof(float) * kn_);
        out[i] = malloc(sizeof(float) * qn_);
    }
    for (size_t i = 0; i < qn_; i++) q[0][i] = 3.0f * tu_rand(&seed);
    for (size_t i = 0; i < kn_; i++) k[0][i] = 3.0f * tu_rand(&seed), v[i] = tu_rand(&seed);
    for (int i = 0; i < hd; i++) qw[i] = 1.0f + 0.5f * tu_rand(&seed), kw[i] = 1.0f + 0.5f * tu_rand(&seed);
    for (int i = 1; i < 4; i++) {
        memcpy(q[i], q[0], sizeof(float) * qn_);
        memcpy(k[i], k[0], sizeof(float) * kn_);
    }
    float inv[128];
    for (int i = 0; i < s->rot / 2; i++) inv[i] = powf(rope_base, -2.0f * i / s->rot);
    const float eps = 1e-6f, ms = 1.0f;
    for (int i = 0; i < 4; i++) {
        attn_args_t a = {n_rows, rs, pos, tables, nh, nkv, hd, 1.0f / sqrtf((float)hd), 0.f, window, {kc[i], vc[i], dt, bs, nkv, hd, i >= 2, ksc[i], vsc[i]}};
        if (i % 2 == 0) { /* the separate ops */
            if (s->norm) {
                be->ops->rms_norm(be, q[i], q[i], qw, 0.f, T * nh, hd, eps);
                be->ops->rms_norm(be, k[i], k[i], kw, 0.f, T * nkv, hd, eps);
            }
            be->ops->rope(be, q[i], pos, T, nh, hd, s->rot, inv, ms);
            be->ops->rope(be, k[i], pos, T, nkv, hd, s->rot, inv, ms);
            be->ops->kv_write(be, &a.kv, k[i], v, slots, T);
            be->ops->attention(be, out[i], q[i], T, &a);
        } else
            be->ops->norm_rope_kv_attention(be, out[i], q[i], k[i], v, s->norm ? qw : NULL, s->norm ? kw : NULL, eps, s->rot, inv, ms,
                                            slots, T, &a);
    }
    /* the transposed caches: the same out, q, k, V cache and K values as the rows' */
    for (int i = 2; i < 4; i++) {
        const char *bt = memcmp(out[0], out[i], sizeof(float) * qn_) ? "out"
                       : memcmp(q[0], q[i], sizeof(float) * qn_) ? "q"
                       : memcmp(k[0], k[i], sizeof(float) * kn_) ? "k"
                       : memcmp(vc[0], vc[i], cache_n * esz) ? "V cache"
                       : dt == DT_I8 && memcmp(ksc[0], ksc[i], sizeof(float) * sn) ? "K scales"
                       : dt == DT_I8 && memcmp(vsc[0], vsc[i], sizeof(float) * sn) ? "V scales" : NULL;
        for (size_t sl = 0; !bt && sl < (size_t)nb * bs; sl++)
            for (size_t e = 0; !bt && e < per; e++)
                if (memcmp((char *)kc[i] + kv_k_at(&kvt, sl, e) * esz, (char *)kc[0] + (sl * per + e) * esz, esz)) bt = "K cache";
        if (bt)
            fail_msg("%s (%s, %d threads, %s KV, block %d, heads %d/%d, hd %d, T %d, rows %d, window %d): %s with K transposed (%s) differs from rows",
                     what, be->ops->name, be->n_threads, dtype_name(dt), bs, nh, nkv, hd, T, n_rows, window, bt, i == 2 ? "separate ops" : "fused");
    }
    const char *bad = memcmp(out[0], out[1], sizeof(float) * qn_) ? "out"
                    : memcmp(q[0], q[1], sizeof(float) * qn_) ? "q"
                    : memcmp(k[0], k[1], sizeof(float) * kn_) ? "k"
                    : memcmp(kc[0], kc[1], cache_n * esz) ? "K cache"
                    : memcmp(vc[0], vc[1], cache_n * esz) ? "V cache"
                    : dt == DT_I8 && memcmp(ksc[0], ksc[1], sizeof(float) * sn) ? "K scales"
                    : dt == DT_I8 && memcmp(vsc[0], vsc[1], sizeof(float) * sn) ? "V scales" : NULL;
    if (bad)
        fail_msg("%s (%s, %d threads, %s KV, heads %d/%d, hd %d, rot %d, norm %d, T %d, rows %d, window %d): %s differs from the separate ops",
                 what, be->ops->name, be->n_threads, dtype_name(dt), nh, nkv, hd, s->rot, s->norm, T, n_rows, window, bad);
    for (int i = 0; i < 4; i++) {
        free(kc[i]); free(vc[i]); free(ksc[i]); free(vsc[i]); free(q[i]); free(k[i]); free(out[i]);
    }
    free(v); free(qw); free(kw);
}

static void run_all(backend_t *be) {
    const shape_t shapes[] = {{16, 8, 128, 128, 1}, {8, 2, 64, 64, 0}, {6, 3, 80, 80, 1}, {4, 1, 64, 32, 1}, {8, 8, 32, 32, 0},
                              {14, 2, 64, 64, 1}, {16, 2, 128, 128, 0}}; /* (GQA 7 and 8: the decode walk in two query passes) */
    const dtype_t dts[] = {DT_F16, DT_BF16, DT_F32, DT_I8};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int d = 0; d < 4; d++) {
            const shape_t *s = &shapes[si];
            int n1[] = {1}, l1[] = {543};
            check_step(be, s, dts[d], 1, n1, l1, 0, "decode, 1 row");
            rope_base = 500000.f;
            check_step(be, s, dts[d], 1, n1, l1, 0, "decode, 1 row, another rope base");
            rope_base = 10000.f;
            int n3[] = {1, 1, 1}, l3[] = {0, 47, 300};
            check_step(be, s, dts[d], 3, n3, l3, 0, "decode, 3 rows");
            check_step(be, s, dts[d], 3, n3, l3, 40, "decode, 3 rows, window");
            int np[] = {5}, lp[] = {36};
            check_step(be, s, dts[d], 1, np, lp, 0, "prefill row");
            int nm[] = {0, 2}, lm[] = {10, 20};
            check_step(be, s, dts[d], 2, nm, lm, 0, "empty row + 2 tokens");
        }
    /* the split decode (segments of 64 positions): the pre-work first, then the split items */
    simd_attention_set_seg(64);
    for (size_t si = 0; si < 2; si++) {
        int n3[] = {1, 1, 1}, l3[] = {5, 130, 700};
        check_step(be, &shapes[si], DT_F16, 3, n3, l3, 0, "split decode");
        check_step(be, &shapes[si], DT_I8, 3, n3, l3, 0, "split decode");
    }
    simd_attention_set_seg(-1);
    /* 32-position blocks (the transposed K's runs of 16 keys start inside a block) */
    g_bs = 32;
    for (size_t si = 0; si < 3; si++)
        for (int d = 0; d < 4; d += d == 0 ? 2 : 1) {
            int n1[] = {1}, l1[] = {543}, n3[] = {1, 1, 1}, l3[] = {0, 47, 300}, np[] = {5}, lp[] = {36};
            check_step(be, &shapes[si], dts[d], 1, n1, l1, 0, "decode, 1 row, block 32");
            check_step(be, &shapes[si], dts[d], 3, n3, l3, 40, "decode, 3 rows, window, block 32");
            check_step(be, &shapes[si], dts[d], 1, np, lp, 0, "prefill row, block 32");
        }
    g_bs = 16;
}

static void test_fused_attn(void **st) {
    const int threads[] = {1, 2, 3};
    for (int ti = 0; ti < 3; ti++) {
        err_t e = {0};
        backend_t *be = backend_create("cpu", threads[ti], &e);
        assert_non_null(be);
        assert_non_null(be->ops->norm_rope_kv_attention);
        run_all(be);
        backend_destroy(be);
    }
    err_t e = {0};
    backend_t *ref = backend_create("cpu-ref", 1, &e);
    assert_non_null(ref);
    run_all(ref);
    backend_destroy(ref);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_fused_attn)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
