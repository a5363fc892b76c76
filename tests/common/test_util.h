/* test_util.h — small helpers shared by the C tests (header-only: each test is one
 * executable). Paths are relative to the repository root, where ctest runs them. */
#ifndef KILN_TEST_UTIL_H
#define KILN_TEST_UTIL_H

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

static inline json_t *tu_load_json(const char *path) {
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) fail_msg("%s: %s (line %d)", path, je.text, je.line);
    return j;
}

/* Copies a JSON int array into a malloc'd int32 array. */
static inline int32_t *tu_int_array(json_t *a, int *n) {
    *n = (int)json_array_size(a);
    int32_t *v = malloc(sizeof(int32_t) * (*n + 1));
    for (int i = 0; i < *n; i++) v[i] = (int32_t)json_integer_value(json_array_get(a, i));
    return v;
}

/* max |a-b| / max |b| */
static inline double tu_rel_err(const float *a, const float *b, size_t n) {
    double md = 0, mb = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > md || isnan(d)) md = isnan(d) ? INFINITY : d;
        if (fabs(b[i]) > mb) mb = fabs(b[i]);
    }
    return mb > 0 ? md / mb : md;
}

/* A deterministic pseudo-random float in [-1, 1). */
static inline float tu_rand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

#endif
