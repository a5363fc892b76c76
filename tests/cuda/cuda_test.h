/* cuda_test.h — tiny helpers for the GPU tests (plain C, no cmocka: the GPU machine has
 * only the libraries kiln itself needs). A failed CHECK prints where and why, counts the
 * failure and the test goes on, so one run reports everything. */
#ifndef KILN_CUDA_TEST_H
#define KILN_CUDA_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int ct_failures, ct_checks;

#define CHECK(cond, ...) do { ct_checks++; if (!(cond)) { ct_failures++; printf("FAIL %s:%d: ", __FILE__, __LINE__); \
    printf(__VA_ARGS__); printf("\n"); } } while (0)

/* max |a-b| / max |b| */
static inline double ct_rel_err(const float *a, const float *b, size_t n) {
    double md = 0, mb = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > md || isnan(d)) md = isnan(d) ? INFINITY : d;
        if (fabs(b[i]) > mb) mb = fabs(b[i]);
    }
    return mb > 0 ? md / mb : md;
}

static inline float ct_rand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

static inline int ct_done(const char *name) {
    printf("%s: %d checks, %d failed\n", name, ct_checks, ct_failures);
    return ct_failures ? 1 : 0;
}

#endif
