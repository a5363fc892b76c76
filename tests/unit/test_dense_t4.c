/* test_dense_t4.c — dense weights in WL_DENSE_T4 (backend/cpu/cpu_pack.h: tiles of 4 rows x 16
 * columns, the N % 4 tail rows row-major):
 *   1. pack_weight / unpack_weight restore every byte, the tail rows never move, and
 *      weight_row_f32 reads every row of a packed weight exactly as before (f32/f16/bf16,
 *      N % 4 = 0..3, several K); pack_fits refuses K % 16 != 0, fewer than 4 rows, quantized;
 *   2. the AVX-512 kernels on a packed weight give BITWISE the outputs of the same kernels on
 *      the stored weight — matmul at T = 1, 2, 5, 37 over the whole range, an uneven split and
 *      ranges starting/ending inside a tile, and matmul_rows (decode over handed-out rows) —
 *      and stay within test_kernels' 2e-6 of the scalar reference over the packed weight;
 *      T = 0 reads nothing (llama.c asks for no logits in some steps);
 *   3. the registry: a view of whole tiles takes the layout, a misaligned view unpacks. */
#include "../common/test_util.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_pack.h"
#include "../common/test_weights.h"

static const dtype_t dts[] = {DT_F32, DT_F16, DT_BF16};
static const char *dtn[] = {"f32", "f16", "bf16"};

static void test_roundtrip(void **st) {
    const int Ns[] = {4, 5, 6, 7, 33, 130}, Ks[] = {16, 48, 256, 1040};
    for (int d = 0; d < 3; d++)
        for (int ni = 0; ni < 6; ni++)
            for (int ki = 0; ki < 4; ki++) {
                int N = Ns[ni], K = Ks[ki];
                void *buf;
                weight_t w = make_dense(N, K, dts[d], 500u + (uint64_t)(d * 100 + ni * 10 + ki), &buf);
                size_t esz = dtype_size(dts[d]), n = (size_t)N * K * esz;
                char *copy = malloc(n);
                memcpy(copy, buf, n);
                float *before = malloc(sizeof(float) * (size_t)N * K), *after = malloc(sizeof(float) * K);
                for (int r = 0; r < N; r++) weight_row_f32(&w, r, before + (size_t)r * K);
                assert_true(pack_fits(&w, WL_DENSE_T4));
                assert_int_equal(pack_weight(&w, WL_DENSE_T4), 0);
                assert_int_equal(w.layout, WL_DENSE_T4);
                if (K > 16) assert_true(memcmp(buf, copy, n) != 0);
                size_t tail = (size_t)(N & ~3) * K * esz;
                assert_memory_equal((char *)buf + tail, copy + tail, n - tail);
                for (int r = 0; r < N; r++) {
                    weight_row_f32(&w, r, after);
                    if (memcmp(after, before + (size_t)r * K, sizeof(float) * K))
                        fail_msg("%s N %d K %d: packed row %d reads differently", dtn[d], N, K, r);
                }
                assert_int_equal(unpack_weight(&w), 0);
                assert_int_equal(w.layout, WL_ROWS);
                assert_memory_equal(buf, copy, n);
                free(before); free(after); free(copy); free(buf);
            }
    void *buf, *qb[3];
    weight_t w = make_dense(16, 40, DT_BF16, 1, &buf);
    assert_false(pack_fits(&w, WL_DENSE_T4)); /* K % 16 */
    free(buf);
    w = make_dense(3, 64, DT_BF16, 1, &buf);
    assert_false(pack_fits(&w, WL_DENSE_T4)); /* no whole tile */
    free(buf);
    w = make_quant(16, 128, 8, 64, 1, qb);
    assert_false(pack_fits(&w, WL_DENSE_T4));
    free_quant(qb);
}

static int have_avx512(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
}

/* every way the kernels are called, into ys[0..5]: [0] whole range, [1] split at an uneven
 * multiple of 4, [2] split inside tiles (1, mid + 2), [3] matmul_rows (T == 1 only, else a
 * copy of [0]) */
static void run_all(const simd_kernels_t *s, float **ys, const float *x, int T, const weight_t *w) {
    int N = w->rows;
    size_t n = (size_t)T * N;
    for (int i = 0; i < 4; i++) memset(ys[i], 0xff, sizeof(float) * n);
    s->matmul(ys[0], x, T, w, 0, N);
    int mid = (N / 3) & ~3;
    s->matmul(ys[1], x, T, w, 0, mid);
    s->matmul(ys[1], x, T, w, mid, N);
    int a = N > 1 ? 1 : 0, b = mid + 2 < N ? mid + 2 : N;
    if (a) s->matmul(ys[2], x, T, w, 0, a);
    if (b > a) s->matmul(ys[2], x, T, w, a, b);
    if (N > b) s->matmul(ys[2], x, T, w, b, N);
    if (T == 1 && s->matmul_rows) {
        mm_range_t rg[1];
        atomic_init(&rg[0].v, 0u | (uint64_t)N << 32);
        mm_rows_t r = {rg, 1, 0, 16};
        if (!s->matmul_rows(ys[3], x, w, &r)) memcpy(ys[3], ys[0], sizeof(float) * n);
    } else memcpy(ys[3], ys[0], sizeof(float) * n);
}

static void test_kernels_bitwise(void **st) {
    if (!have_avx512()) skip();
    if (amx_enable()) amx_set(0); /* the AMX bf16 kernel reads the stored order: never packed */
    const simd_kernels_t *s = &simd_avx512;
    const int Ns[] = {4, 7, 37, 66, 131}, Ks[] = {16, 64, 272, 1024}, Ts[] = {1, 2, 5, 37};
    for (int d = 0; d < 3; d++)
        for (int ni = 0; ni < 5; ni++)
            for (int ki = 0; ki < 4; ki++)
                for (int ti = 0; ti < 4; ti++) {
                    int N = Ns[ni], K = Ks[ki], T = Ts[ti];
                    void *buf;
                    weight_t w = make_dense(N, K, dts[d], 900u + (uint64_t)(d * 1000 + ni * 100 + ki * 10 + ti), &buf);
                    uint64_t seed = 77 + (uint64_t)ti;
                    float *x = malloc(sizeof(float) * (size_t)T * K);
                    for (size_t i = 0; i < (size_t)T * K; i++) x[i] = tu_rand(&seed);
                    size_t n = (size_t)T * N;
                    float *want[4], *got[4], *ref = malloc(sizeof(float) * n);
                    for (int i = 0; i < 4; i++) {
                        want[i] = malloc(sizeof(float) * n);
                        got[i] = malloc(sizeof(float) * n);
                    }
                    run_all(s, want, x, T, &w);
                    for (int i = 1; i < 4; i++)
                        if (memcmp(want[i], want[0], sizeof(float) * n)) fail_msg("%s %dx%d T=%d: stored weight, call %d differs from the whole range", dtn[d], N, K, T, i);
                    assert_int_equal(pack_weight(&w, WL_DENSE_T4), 0);
                    s->matmul(got[0], NULL, 0, &w, 0, N); /* T == 0 (no logits wanted): reads nothing */
                    run_all(s, got, x, T, &w);
                    for (int i = 0; i < 4; i++)
                        if (memcmp(got[i], want[0], sizeof(float) * n)) {
                            size_t e = 0;
                            while (e < n && !memcmp(&got[i][e], &want[0][e], sizeof(float))) e++;
                            fail_msg("%s %dx%d T=%d: packed, call %d differs from the stored weight's bits (first at t %zu row %zu: %g vs %g)", dtn[d], N, K, T, i,
                                     e / N, e % N, got[i][e], want[0][e]);
                        }
                    ref_matmul(ref, x, T, &w, 0, N); /* reads the packed weight through weight_row_f32 */
                    double err = tu_rel_err(got[0], ref, n);
                    if (K <= 512 && err > 2e-6) fail_msg("%s %dx%d T=%d: packed rel err %g from the reference", dtn[d], N, K, T, err);
                    for (int i = 0; i < 4; i++) { free(want[i]); free(got[i]); }
                    free(ref); free(x); free(buf);
                }
}

static int want_t4(const weight_t *w) { (void)w; return WL_DENSE_T4; }

static void test_registry_views(void **st) {
    const int N = 24, K = 64;
    void *buf;
    weight_t w = make_dense(N, K, DT_BF16, 3, &buf);
    size_t rb = (size_t)K * 2;
    char *copy = malloc((size_t)N * rb);
    memcpy(copy, buf, (size_t)N * rb);
    pack_registry_t reg = {0};
    pack_prepare(&reg, &w, want_t4);
    assert_int_equal(w.layout, WL_DENSE_T4);
    weight_t v = w; /* rows [8, 20): whole tiles */
    v.layout = WL_ROWS; v.rows = 12; v.data = (const char *)buf + 8 * rb;
    pack_prepare(&reg, &v, want_t4);
    assert_int_equal(v.layout, WL_DENSE_T4);
    float *a = malloc(sizeof(float) * K), *b = malloc(sizeof(float) * K);
    for (int r = 0; r < 12; r++) {
        weight_row_f32(&v, r, a);
        weight_t o = {N, K, DT_BF16};
        o.data = copy;
        weight_row_f32(&o, r + 8, b);
        assert_memory_equal(a, b, sizeof(float) * K);
    }
    weight_t m = w; /* rows [2, 10): not on tiles -> the region is unpacked */
    m.layout = WL_ROWS; m.rows = 8; m.data = (const char *)buf + 2 * rb;
    pack_prepare(&reg, &m, want_t4);
    assert_int_equal(m.layout, WL_ROWS);
    assert_memory_equal(buf, copy, (size_t)N * rb);
    pack_registry_free(&reg);
    free(a); free(b); free(copy); free(buf);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_roundtrip), cmocka_unit_test(test_kernels_bitwise), cmocka_unit_test(test_registry_views)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
