/* test_mm_rows.c — decode matmul rows shared between threads (mm_rows_next, cpu_backend.c):
 *   1. every row is handed out exactly once, in chunks that start on multiples of 16, with
 *      2-5 threads hammering the ranges (one of them slowed down so the others steal from it);
 *   2. the CPU backend's decode matmul (T = 1, 2 and 3 threads: rows taken through the
 *      ranges) is bitwise the SIMD kernel's own matmul over all rows on one thread, for f32,
 *      f16, bf16 and MLX 2/3/4/5/6/8-bit weights, row counts that are not multiples of 16, and
 *      through matmul_multi too. */
#include <pthread.h>
#include <sched.h>
#include "../common/test_util.h"
#include "backend/backend.h"
#include "backend/cpu/cpu_kernels.h"
#include "../common/test_weights.h"

typedef struct { mm_rows_t r; atomic_int *count; int slow, bad; } worker_t;

static void *take_rows(void *p) {
    worker_t *w = p;
    int j0, j1;
    while (mm_rows_next(&w->r, &j0, &j1)) {
        if (j0 >= j1 || (j0 & 15)) w->bad = 1;
        for (int j = j0; j < j1; j++) atomic_fetch_add(&w->count[j], 1);
        if (w->slow)
            for (int s = 0; s < 4; s++) sched_yield();
    }
    return NULL;
}

static void test_rows_once(void **st) {
    const int Ns[] = {17, 1000, 4099}, chunks[] = {16, 64};
    for (int nt = 2; nt <= 5; nt++)
        for (int ni = 0; ni < 3; ni++)
            for (int ci = 0; ci < 2; ci++)
                for (int rep = 0; rep < 3; rep++) {
                    int N = Ns[ni], per = (((N + nt - 1) / nt + 15) & ~15);
                    mm_range_t rg[MM_ROWS_MAX];
                    for (int i = 0; i < nt; i++) {
                        uint32_t lo = (uint32_t)(i * per < N ? i * per : N), hi = (uint32_t)((i + 1) * per < N ? (i + 1) * per : N);
                        atomic_init(&rg[i].v, lo | (uint64_t)hi << 32);
                    }
                    atomic_int *count = calloc((size_t)N, sizeof *count);
                    worker_t w[5];
                    pthread_t th[5];
                    for (int i = 0; i < nt; i++) {
                        w[i] = (worker_t){{rg, nt, i, chunks[ci]}, count, i == rep % nt, 0};
                        pthread_create(&th[i], NULL, take_rows, &w[i]);
                    }
                    for (int i = 0; i < nt; i++) pthread_join(th[i], NULL);
                    for (int i = 0; i < nt; i++)
                        if (w[i].bad) fail_msg("nt=%d N=%d: a chunk not starting on a multiple of 16", nt, N);
                    for (int j = 0; j < N; j++)
                        if (atomic_load(&count[j]) != 1)
                            fail_msg("nt=%d N=%d chunk=%d: row %d handed out %d times", nt, N, chunks[ci], j, atomic_load(&count[j]));
                    free(count);
                }
}

static void test_decode_matmul_rows(void **st) {
    const simd_kernels_t *simd = simd_detect();
    if (!simd) skip();
    typedef struct { char kind; dtype_t dt; int bits, group, rows, cols; } spec_t;
    const spec_t sp[] = {
        {'f', DT_F32, 0, 0, 1001, 256},  {'f', DT_F16, 0, 0, 2051, 256},  {'f', DT_BF16, 0, 0, 4099, 512},
        {'q', 0, 8, 64, 3001, 512},      {'q', 0, 8, 32, 1037, 1024},     {'q', 0, 4, 64, 4099, 512},
        {'q', 0, 4, 32, 2049, 1024},     {'q', 0, 4, 128, 1029, 1024},    {'q', 0, 3, 64, 1003, 256},
        {'q', 0, 2, 32, 1001, 512},      {'q', 0, 5, 128, 1009, 1024},    {'q', 0, 6, 64, 2003, 512},
    };
    const int nsp = (int)(sizeof sp / sizeof sp[0]);
    for (int th = 2; th <= 3; th++) {
        err_t e = {0};
        backend_t *be = backend_create("cpu", th, &e);
        assert_non_null(be);
        for (int rep = 0; rep < 3; rep++)
            for (int i = 0; i < nsp; i++) {
                void *bufs[3] = {0};
                weight_t w = sp[i].kind == 'f' ? make_dense(sp[i].rows, sp[i].cols, sp[i].dt, 7 + i, &bufs[0])
                                               : make_quant(sp[i].rows, sp[i].cols, sp[i].bits, sp[i].group, 7 + i, bufs);
                uint64_t seed = 99 + i;
                float *x = malloc(sizeof(float) * w.cols), *want = malloc(sizeof(float) * w.rows);
                float *got = malloc(sizeof(float) * w.rows), *got2 = malloc(sizeof(float) * w.rows);
                for (int k = 0; k < w.cols; k++) x[k] = tu_rand(&seed);
                simd->matmul(want, x, 1, &w, 0, w.rows);
                memset(got, 0xff, sizeof(float) * w.rows);
                be->ops->matmul(be, got, x, 1, &w);
                if (memcmp(got, want, sizeof(float) * w.rows))
                    fail_msg("spec %d (%d threads): decode matmul over shared rows differs from the kernel on one thread", i, th);
                /* matmul_multi: the same weight twice */
                float *ys[2] = {got, got2};
                const weight_t *ws[2] = {&w, &w};
                memset(got, 0xff, sizeof(float) * w.rows);
                memset(got2, 0xff, sizeof(float) * w.rows);
                be->ops->matmul_multi(be, 2, ys, x, 1, ws);
                if (memcmp(got, want, sizeof(float) * w.rows) || memcmp(got2, want, sizeof(float) * w.rows))
                    fail_msg("spec %d (%d threads): matmul_multi over shared rows differs", i, th);
                free(x); free(want); free(got); free(got2);
                for (int b = 0; b < 3; b++) free(bufs[b]);
            }
        backend_destroy(be);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_rows_once), cmocka_unit_test(test_decode_matmul_rows)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
