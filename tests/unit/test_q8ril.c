/* test_q8ril.c — 8-bit MLX weights in the rows-in-lanes layout WL_Q_RIL16 on AVX512-VNNI
 * (matmul_q8ril_avx512.c): against the scalar reference (ref_matmul over the stored weight,
 * and the same rows accumulated in double) at the q8 kernels' tolerance 2e-6, on odd sizes
 * (N % 16 != 0: tail rows; several K and G; T = 1 and 2..37); every token of a T-token call
 * bitwise its T = 1 call; slices cut inside a tile; the AVX-512 family's dispatch; NaN/Inf in
 * x; the CPU backend (prepare_weight packs; 1-3 threads; matmul and matmul_multi) bitwise. */
#include "../common/test_util.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/q8ril.h"
#include "backend/cpu/cpu_pack.h"
#include "backend/backend.h"
#include "../common/test_weights.h"

/* A copy of w packed in place by cpu_pack (WL_Q_RIL16); bufs as make_quant. */
static weight_t pack_copy(const weight_t *w, void **bufs) {
    size_t sz = dtype_size(w->sb_dtype), nsb = (size_t)w->rows * (w->cols / w->group) * sz, nc = (size_t)w->rows * w->cols * w->bits / 8;
    bufs[0] = malloc(nc); bufs[1] = malloc(nsb); bufs[2] = malloc(nsb);
    memcpy(bufs[0], w->data, nc); memcpy(bufs[1], w->scales, nsb); memcpy(bufs[2], w->biases, nsb);
    weight_t p = *w;
    p.data = bufs[0]; p.scales = bufs[1]; p.biases = bufs[2];
    assert_int_equal(pack_weight(&p, WL_Q_RIL16), 0);
    assert_int_equal(p.layout, WL_Q_RIL16);
    return p;
}

static int have_vnni(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512vnni");
}

/* w stored, p packed; x [T, K]. */
static void check(const weight_t *w, const weight_t *p, int T, const float *x, const char *what) {
    int N = w->rows, K = w->cols;
    float *want = malloc(sizeof(float) * T * N), *got = malloc(sizeof(float) * T * N), *alone = malloc(sizeof(float) * N);
    float *exact = malloc(sizeof(float) * T * N), *row = malloc(sizeof(float) * K);
    ref_matmul(want, x, T, w, 0, N);
    for (int j = 0; j < N; j++) {
        weight_row_f32(w, j, row);
        for (int t = 0; t < T; t++) {
            double acc = 0;
            for (int k = 0; k < K; k++) acc += (double)x[(size_t)t * K + k] * row[k];
            exact[(size_t)t * N + j] = (float)acc;
        }
    }
    /* slices that start and end inside tiles, as a static split of 3 threads might */
    int cut[] = {0, (N / 3) & ~3, (2 * N / 3) | 1, N};
    for (int s = 0; s < 3; s++) q8ril_matmul(got, x, T, p, cut[s], cut[s + 1]);
    double err = tu_rel_err(got, want, (size_t)T * N), err_exact = tu_rel_err(got, exact, (size_t)T * N);
    if (K <= 512 && err > 2e-6) fail_msg("%s T=%d %dx%d: rel err %g", what, T, N, K, err);
    if (err_exact > 2e-6) fail_msg("%s T=%d %dx%d: rel err %g from the exact product", what, T, N, K, err_exact);
    /* the AVX-512 family's dispatch (matmul) gives the same bits, also sliced */
    float *fam = malloc(sizeof(float) * T * N);
    simd_avx512.matmul(fam, x, T, p, 0, cut[1]);
    simd_avx512.matmul(fam, x, T, p, cut[1], N);
    if (memcmp(fam, got, sizeof(float) * T * N)) fail_msg("%s T=%d %dx%d: simd_avx512.matmul differs from q8ril_matmul", what, T, N, K);
    free(fam);
    for (int t = 0; t < T; t++) {
        q8ril_matmul(alone, x + (size_t)t * K, 1, p, 0, N);
        if (memcmp(alone, got + (size_t)t * N, sizeof(float) * N) != 0)
            fail_msg("%s %dx%d: token %d alone differs from token %d in a batch of %d", what, N, K, t, t, T);
    }
    free(want); free(got); free(alone); free(exact); free(row);
}

static void test_q8ril_vs_ref(void **st) {
    if (!have_vnni()) skip();
    const int Ns[] = {16, 33, 48, 100}, Ks[] = {64, 192, 1024}, Gs[] = {32, 64, 128}, Ts[] = {1, 2, 5, 17, 37};
    uint64_t seed = 1234;
    int n = 0;
    for (int ni = 0; ni < 4; ni++)
        for (int ki = 0; ki < 3; ki++)
            for (int gi = 0; gi < 3; gi++) {
                int N = Ns[ni], K = Ks[ki], G = Gs[gi];
                if (K % G) continue;
                void *qb[3], *pb[3];
                weight_t w = make_quant(N, K, 8, G, 17 + ni * 9 + ki * 3 + gi, qb);
                weight_t p = pack_copy(&w, pb);
                for (int ti = 0; ti < 5; ti++) {
                    int T = Ts[ti];
                    float *x = malloc(sizeof(float) * T * K);
                    for (int i = 0; i < T * K; i++) x[i] = tu_rand(&seed);
                    char what[64];
                    snprintf(what, sizeof what, "q8/g%d ril16", G);
                    check(&w, &p, T, x, what);
                    free(x);
                    n++;
                }
                free_quant(pb);
                free_quant(qb);
            }
    printf("# %d shape/T cases\n", n);
}

/* Scales and biases as f16 and f32 too (make_quant writes bf16); x with a wide range of
 * magnitudes per group (small groups, zero groups: p's edge cases). */
static void test_q8ril_sb_dtypes(void **st) {
    if (!have_vnni()) skip();
    const dtype_t dts[] = {DT_F16, DT_F32};
    uint64_t seed = 77;
    for (int d = 0; d < 2; d++) {
        int N = 37, K = 256, G = 64, ng = K / G;
        void *qb[3], *pb[3];
        weight_t w = make_quant(N, K, 8, G, 500 + d, qb);
        size_t sz = dtype_size(dts[d]);
        void *s = malloc((size_t)N * ng * sz), *b = malloc((size_t)N * ng * sz);
        for (int i = 0; i < N * ng; i++) {
            store_from_f32(s, dts[d], i, load_as_f32(w.scales, DT_BF16, i));
            store_from_f32(b, dts[d], i, load_as_f32(w.biases, DT_BF16, i));
        }
        free(qb[1]); free(qb[2]);
        qb[1] = s; qb[2] = b;
        w.scales = s; w.biases = b; w.sb_dtype = dts[d];
        weight_t p = pack_copy(&w, pb);
        int T = 5;
        float *x = malloc(sizeof(float) * T * K);
        for (int i = 0; i < T * K; i++) x[i] = tu_rand(&seed) * ldexpf(1.f, (i / G) % 7 * 9 - 30);
        for (int i = 0; i < G; i++) x[K + G + i] = 0.f; /* token 1, group 1: all zeros */
        check(&w, &p, T, x, dts[d] == DT_F16 ? "q8/g64 ril16 f16 sb" : "q8/g64 ril16 f32 sb");
        free(x);
        free_quant(pb);
        free_quant(qb);
    }
}

/* NaN or Inf in one token's x: that token's outputs NaN (every row: tiles and tail), the
 * others exactly their T = 1 results. */
static void test_q8ril_nan(void **st) {
    if (!have_vnni()) skip();
    int N = 35, K = 192, G = 64, T = 3;
    void *qb[3], *pb[3];
    weight_t w = make_quant(N, K, 8, G, 900, qb);
    weight_t p = pack_copy(&w, pb);
    uint64_t seed = 3;
    float *x = malloc(sizeof(float) * T * K), *y = malloc(sizeof(float) * T * N), *alone = malloc(sizeof(float) * N);
    for (int v = 0; v < 2; v++) {
        for (int i = 0; i < T * K; i++) x[i] = tu_rand(&seed);
        x[K + 70] = v ? INFINITY : NAN;
        q8ril_matmul(y, x, T, &p, 0, N);
        /* tile rows: p = NaN; the tail rows (q8tile's float chain) NaN or, with an Inf, maybe ±Inf */
        for (int j = 0; j < N; j++)
            if (j < (N & ~15) ? !isnan(y[N + j]) : isfinite(y[N + j]))
                fail_msg("%s in x: row %d of that token is %g", v ? "Inf" : "NaN", j, y[N + j]);
        for (int t = 0; t < T; t += 2) {
            q8ril_matmul(alone, x + (size_t)t * K, 1, &p, 0, N);
            if (memcmp(alone, y + (size_t)t * N, sizeof(float) * N)) fail_msg("NaN in token 1 changed token %d", t);
        }
    }
    q8ril_matmul(y, x, 0, &p, 0, N); /* T = 0: nothing (an engine step without logits) */
    simd_avx512.matmul(y, x, 0, &p, 0, N);
    free(x); free(y); free(alone);
    free_quant(pb);
    free_quant(qb);
}

/* Through the CPU backend on 1, 2 and 3 threads: prepare_weight packs an 8-bit weight (the
 * family's pack_layout), decode (rows shared out by mm_rows_next: q8ril_rows), T > 1 (static
 * slices) and matmul_multi give bitwise the single-thread kernel's results. */
static void test_q8ril_backend(void **st) {
    if (!have_vnni()) skip();
    const char *e8 = getenv("KILN_PACK_Q8"), *ep = getenv("KILN_PACK"), *es = getenv("KILN_SIMD");
    if ((e8 && *e8 == '0') || (ep && *ep == '0')) skip();
    if (es && *es && strcmp(es, "avx512")) skip(); /* the backend runs another family (the AVX2 one packs 8-bit weights its own way) */
    const int Ns[] = {1000, 37, 2051}, Ks[] = {1024, 192, 256}, Gs[] = {64, 32, 128};
    uint64_t seed = 55;
    for (int nt = 1; nt <= 3; nt++) {
        err_t e = {0};
        backend_t *be = backend_create("cpu", nt, &e);
        assert_non_null(be);
        if (amx_enabled()) amx_set(0);
        void *qb[3][3];
        weight_t w[3];
        for (int i = 0; i < 3; i++) {
            w[i] = make_quant(Ns[i], Ks[i], 8, Gs[i], 700 + i, qb[i]);
            assert_int_equal(be->ops->prepare_weight(be, &w[i], &e), 0);
            if (w[i].layout != WL_Q_RIL16) fail_msg("prepare_weight left an 8-bit %dx%d weight in layout %d", Ns[i], Ks[i], w[i].layout);
        }
        const int Ts[] = {1, 5, 37};
        for (int ti = 0; ti < 3; ti++) {
            int T = Ts[ti];
            for (int i = 0; i < 3; i++) {
                int N = Ns[i], K = Ks[i];
                float *x = malloc(sizeof(float) * T * K), *y = malloc(sizeof(float) * T * N), *want = malloc(sizeof(float) * T * N);
                for (int k = 0; k < T * K; k++) x[k] = tu_rand(&seed);
                q8ril_matmul(want, x, T, &w[i], 0, N);
                be->ops->matmul(be, y, x, T, &w[i]);
                if (memcmp(y, want, sizeof(float) * T * N)) fail_msg("threads %d T=%d %dx%d: backend matmul differs", nt, T, N, K);
                free(x); free(y); free(want);
            }
            /* matmul_multi over the two weights of the same K (1024 and 256 differ: each its own x) */
            int K = 256;
            float *x = malloc(sizeof(float) * T * 1024), *ya = malloc(sizeof(float) * T * Ns[0]), *yb = malloc(sizeof(float) * T * Ns[2]);
            float *wa = malloc(sizeof(float) * T * Ns[0]), *wb = malloc(sizeof(float) * T * Ns[2]), *xb = malloc(sizeof(float) * T * K);
            for (int k = 0; k < T * 1024; k++) x[k] = tu_rand(&seed);
            for (int k = 0; k < T * K; k++) xb[k] = tu_rand(&seed);
            float *ys[2] = {ya, wa};
            const weight_t *ws[2] = {&w[0], &w[0]};
            be->ops->matmul_multi(be, 2, ys, x, T, ws);
            q8ril_matmul(yb, x, T, &w[0], 0, Ns[0]);
            if (memcmp(ya, yb, sizeof(float) * T * Ns[0]) || memcmp(wa, yb, sizeof(float) * T * Ns[0]))
                fail_msg("threads %d T=%d: matmul_multi differs", nt, T);
            float *ys2[1] = {wb};
            const weight_t *ws2[1] = {&w[2]};
            be->ops->matmul_multi(be, 1, ys2, xb, T, ws2);
            float *ref = malloc(sizeof(float) * T * Ns[2]);
            q8ril_matmul(ref, xb, T, &w[2], 0, Ns[2]);
            if (memcmp(ref, wb, sizeof(float) * T * Ns[2])) fail_msg("threads %d T=%d: matmul_multi (one weight) differs", nt, T);
            free(ref); free(x); free(ya); free(yb); free(wa); free(wb); free(xb);
        }
        for (int i = 0; i < 3; i++) {
            if (be->ops->release_weight) be->ops->release_weight(be, &w[i]);
            free_quant(qb[i]);
        }
        backend_destroy(be);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_q8ril_vs_ref),
        cmocka_unit_test(test_q8ril_sb_dtypes),
        cmocka_unit_test(test_q8ril_nan),
        cmocka_unit_test(test_q8ril_backend),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
