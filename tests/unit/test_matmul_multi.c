/* test_matmul_multi.c — the CPU backend's matmul_multi (one x times several weights in one
 * pool dispatch, x prepared once per AMX kernel) must give bitwise what separate matmul calls
 * give: q/k/v- and gate/up-like sets in f32, f16, bf16 and MLX 8- and 4-bit, a mixed set
 * (different dtypes, bits, groups: each weight keeps its own kernel and prepared x), and a
 * weight too small for the pool next to big ones; T = 1, 2, 17, 33 (a one-row last AMX
 * block), odd row counts, 1, 2 and 3 threads, with AMX on and off where the CPU has it. */
#include "../common/test_util.h"
#include "backend/backend.h"
#include "backend/cpu/cpu_kernels.h"
#include "../common/test_weights.h"

#define MAXW 4

/* One weight of a set: kind 'f' dense (dt), 'q' quantized (bits, group). */
typedef struct { char kind; dtype_t dt; int bits, group, rows; } spec_t;

/* matmul_multi over the set vs one matmul per weight, on backend be, every T. */
static void check_set(backend_t *be, const spec_t *sp, int n, int cols, const char *what) {
    weight_t w[MAXW];
    void *bufs[MAXW][3] = {{0}};
    for (int k = 0; k < n; k++)
        w[k] = sp[k].kind == 'f' ? make_dense(sp[k].rows, cols, sp[k].dt, 11 + k, &bufs[k][0])
                                 : make_quant(sp[k].rows, cols, sp[k].bits, sp[k].group, 23 + k, bufs[k]);
    const int Ts[] = {1, 2, 17, 33};
    for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++) {
        int T = Ts[ti];
        uint64_t seed = 5 + T;
        float *x = malloc(sizeof(float) * T * cols);
        for (int i = 0; i < T * cols; i++) x[i] = tu_rand(&seed);
        float *want[MAXW], *got[MAXW];
        const weight_t *wp[MAXW];
        for (int k = 0; k < n; k++) {
            size_t len = (size_t)T * w[k].rows;
            want[k] = malloc(sizeof(float) * len);
            got[k] = malloc(sizeof(float) * len);
            for (size_t i = 0; i < len; i++) got[k][i] = NAN;
            be->ops->matmul(be, want[k], x, T, &w[k]);
            wp[k] = &w[k];
        }
        be->ops->matmul_multi(be, n, got, x, T, wp);
        for (int k = 0; k < n; k++) {
            if (memcmp(got[k], want[k], sizeof(float) * T * w[k].rows) != 0)
                fail_msg("%s (%d threads%s) T=%d: weight %d of %d (%dx%d) differs from its own matmul", what,
                         be->n_threads, amx_enabled() ? ", amx" : "", T, k, n, w[k].rows, cols);
            free(want[k]); free(got[k]);
        }
        free(x);
    }
    for (int k = 0; k < n; k++)
        for (int b = 0; b < 3; b++) free(bufs[k][b]);
}

static void run_sets(backend_t *be) {
    /* rows like q/k/v (odd, one well under the pool's 65536-element threshold at T = 1) */
    const dtype_t dts[] = {DT_F32, DT_F16, DT_BF16};
    for (int d = 0; d < 3; d++) {
        spec_t s[3] = {{'f', dts[d], 0, 0, 131}, {'f', dts[d], 0, 0, 45}, {'f', dts[d], 0, 0, 45}};
        check_set(be, s, 3, 512, dtype_name(dts[d]));
    }
    const int bits[] = {8, 4}, groups[] = {32, 64};
    for (int b = 0; b < 2; b++)
        for (int g = 0; g < 2; g++) {
            char what[32];
            snprintf(what, sizeof what, "q%d/g%d", bits[b], groups[g]);
            spec_t qkv[3] = {{'q', 0, bits[b], groups[g], 133}, {'q', 0, bits[b], groups[g], 37}, {'q', 0, bits[b], groups[g], 37}};
            check_set(be, qkv, 3, 512, what);
            spec_t gu[2] = {{'q', 0, bits[b], groups[g], 261}, {'q', 0, bits[b], groups[g], 261}};
            check_set(be, gu, 2, 256, what);
        }
    /* mixed: each weight its own kernel; two q4 weights of different groups between them, a
     * tiny one (one thread) before a big one of the same kind */
    spec_t mix[4] = {{'q', 0, 4, 64, 3}, {'q', 0, 8, 64, 141}, {'q', 0, 4, 32, 77}, {'f', DT_BF16, 0, 0, 139}};
    check_set(be, mix, 4, 512, "mixed");
    spec_t mix2[4] = {{'q', 0, 4, 64, 141}, {'q', 0, 4, 32, 141}, {'q', 0, 8, 32, 79}, {'q', 0, 4, 64, 93}};
    check_set(be, mix2, 4, 512, "mixed groups");
}

static void test_matmul_multi(void **st) {
    const int threads[] = {1, 2, 3};
    for (int ti = 0; ti < 3; ti++) {
        err_t e = {0};
        backend_t *be = backend_create("cpu", threads[ti], &e);
        assert_non_null(be);
        assert_non_null(be->ops->matmul_multi);
        int amx = amx_enabled();
        for (int a = 0; a <= amx; a++) { /* amx = 1: without AMX, then with it */
            if (amx) amx_set(a);
            run_sets(be);
        }
        backend_destroy(be);
    }
    err_t e = {0};
    backend_t *ref = backend_create("cpu-ref", 1, &e);
    assert_non_null(ref);
    spec_t s[2] = {{'q', 0, 4, 64, 45}, {'f', DT_F16, 0, 0, 37}};
    check_set(ref, s, 2, 128, "cpu-ref");
    backend_destroy(ref);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_matmul_multi)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
