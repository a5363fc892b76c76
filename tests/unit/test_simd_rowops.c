/* test_simd_rowops.c — the SIMD families' optional per-row ops on the decode path
 * (simd_kernels_t.rms_norm, .silu_glu) against the scalar reference (ref_rms_norm, ref_glu)
 * and against double precision; a row (rms_norm) or a slice (silu_glu) computed alone is
 * bitwise the same as inside the whole call. */
#include "../common/test_util.h"
#include "backend/cpu/cpu_kernels.h"

static const simd_kernels_t *fam[2];
static int nf;

static void families(void) {
    nf = 0;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")) fam[nf++] = &simd_avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) fam[nf++] = &simd_avx2;
}

static void test_rms_norm(void **st) {
    (void)st;
    families();
    int tested = 0;
    const int ns[] = {17, 128, 1000, 1024, 3072};
    uint64_t seed = 5;
    for (int f = 0; f < nf; f++) {
        if (!fam[f]->rms_norm) continue;
        tested++;
        for (int ni = 0; ni < 5; ni++)
            for (int variant = 0; variant < 3; variant++) {
                int n = ns[ni], T = 5;
                float off = variant == 2 ? 1.f : 0.f;
                float *x = malloc(sizeof(float) * T * n), *w = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * T * n),
                      *r = malloc(sizeof(float) * T * n), *z = malloc(sizeof(float) * n);
                for (int i = 0; i < T * n; i++) x[i] = tu_rand(&seed) * (i % 7 == 0 ? 40.f : 2.f);
                for (int i = 0; i < n; i++) w[i] = tu_rand(&seed);
                const float *wp = variant == 0 ? NULL : w;
                fam[f]->rms_norm(y, x, wp, off, T, n, 1e-6f);
                ref_rms_norm(r, x, wp, off, T, n, 1e-6f);
                for (int t = 0; t < T; t++) {
                    double ss = 0, mx = 0;
                    for (int i = 0; i < n; i++) ss += (double)x[t * n + i] * x[t * n + i];
                    double inv = 1.0 / sqrt(ss / n + 1e-6);
                    for (int i = 0; i < n; i++) mx = fmax(mx, fabs(r[t * n + i]));
                    for (int i = 0; i < n; i++) {
                        double want = x[t * n + i] * inv * (wp ? off + wp[i] : 1.0);
                        /* against double to 1e-6 of the row's max; against ref_rms_norm, whose serial f32
                         * sum of n squares is itself off by up to ~1e-6 relative at n = 3072, to 2e-5 */
                        if (fabs(y[t * n + i] - want) > 1e-6 * mx || fabs(y[t * n + i] - r[t * n + i]) > 2e-5 * mx)
                            fail_msg("%s rms_norm n=%d row %d [%d]: %.9g, double %.9g, ref %.9g", fam[f]->name, n, t, i, y[t * n + i], want, r[t * n + i]);
                    }
                    fam[f]->rms_norm(z, x + t * n, wp, off, 1, n, 1e-6f); /* the row alone */
                    assert_memory_equal(z, y + t * n, sizeof(float) * n);
                }
                free(x); free(w); free(y); free(r); free(z);
            }
    }
    if (!tested) skip();
}

static void test_silu_glu(void **st) {
    (void)st;
    families();
    int tested = 0;
    size_t n = 1000;
    uint64_t seed = 9;
    float *g = malloc(sizeof(float) * n), *u = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n), *r = malloc(sizeof(float) * n),
          *z = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) {
        g[i] = i < 600 ? -30.f + 60.f * (float)i / 600.f : 8.f * tu_rand(&seed);
        u[i] = tu_rand(&seed) * 3.f;
    }
    const float special[] = {0.f, -0.f, 1e-30f, -1e-30f, 50.f, -50.f, 1e20f, -1e20f, -87.5f, 88.5f, -103.9f, -110.f, INFINITY, NAN};
    for (int i = 0; i < 14; i++) g[600 + i] = special[i];
    ref_glu(r, g, u, n, ACT_SILU);
    double mx = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(r[i])) mx = fmax(mx, fabs(r[i]));
    for (int f = 0; f < nf; f++) {
        if (!fam[f]->silu_glu) continue;
        tested++;
        fam[f]->silu_glu(y, g, u, n);
        double worst = 0;
        for (size_t i = 0; i < n; i++) {
            if (isnan(g[i]) || !isfinite(r[i])) { /* NaN in, NaN out; Inf as the reference */
                if (isnan(r[i])) assert_true(isnan(y[i]));
                else assert_true(y[i] == r[i]);
                continue;
            }
            double want = (double)g[i] / (1.0 + exp(-(double)g[i])) * (double)u[i], err = fabs(y[i] - want);
            if (fabs(want) > 1e-30) worst = fmax(worst, err / fabs(want));
            if (err > 4e-7 * fabs(want) + 1e-37 || fabs(y[i] - r[i]) > 1e-6 * mx)
                fail_msg("%s silu_glu(%g) * %g = %.9g, double %.9g, ref %.9g", fam[f]->name, g[i], u[i], y[i], want, r[i]);
        }
        printf("# %s silu_glu: worst relative error %.3g\n", fam[f]->name, worst);
        for (size_t a = 0; a < 40; a += 3)
            for (size_t len = 1; a + len <= n; len = len * 2 + 5) {
                fam[f]->silu_glu(z, g + a, u + a, len);
                assert_memory_equal(z, y + a, sizeof(float) * len);
            }
    }
    free(g); free(u); free(y); free(r); free(z);
    if (!tested) skip();
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_rms_norm), cmocka_unit_test(test_silu_glu)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
