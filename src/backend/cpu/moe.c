/* moe.c — the MoE combine: each expert's outputs, weighted by the router, added into the
 * token rows they came from. The model calls it once per expert in expert order, so a
 * token's sum runs over its experts in ascending id, as transformers' index_add_ loop does,
 * whatever else shares the step. */
#include "backend/cpu/cpu_hybrid.h"

void ref_add_rows_scaled(float *y, const float *x, const int32_t *idx, const float *wt, int n, int width) {
    for (int i = 0; i < n; i++) {
        float *yr = y + (size_t)idx[i] * width;
        const float *xr = x + (size_t)i * width;
        for (int j = 0; j < width; j++) yr[j] += xr[j] * wt[i];
    }
}
