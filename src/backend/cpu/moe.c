/* moe.c — the MoE combine: each expert's outputs, weighted by the router, added into the
 * token rows they came from. The model calls it once per expert in expert order, so a
 * token's sum runs over its experts in ascending id, as transformers' index_add_ loop does,
 * whatever else shares the step. */
#include <math.h>
#include <stdlib.h>
#include "backend/cpu/cpu_hybrid.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/moe_route.h"

void ref_add_rows_scaled(float *y, const float *x, const int32_t *idx, const float *wt, int n, int width) {
    for (int i = 0; i < n; i++) {
        float *yr = y + (size_t)idx[i] * width;
        const float *xr = x + (size_t)i * width;
        for (int j = 0; j < width; j++) yr[j] += xr[j] * wt[i];
    }
}

void ref_moe_route(int32_t *ids, float *wts, const float *logits, int T, int E, int k, int renorm, const float *escale) {
    for (int t = 0; t < T; t++) {
        int32_t *id = ids + (size_t)t * k;
        float *w = wts + (size_t)t * k;
        moe_topk(logits + (size_t)t * E, E, k, renorm, id, w);
        if (escale)
            for (int j = 0; j < k; j++) w[j] *= escale[id[j]];
    }
}

/* Each token's experts in ascending id, each one row through ref_matmul (gate, up), ref_glu and
 * ref_matmul (down), added as ref_add_rows_scaled adds: out starts at zero. */
void ref_moe_experts(float *out, const float *x, int T, int k, const int32_t *ids, const float *wts, const weight_t *gate,
                     const weight_t *up, const weight_t *down, act_t act) {
    int H = down[0].rows, Ie = gate[0].rows;
    float *g = malloc(sizeof(float) * Ie), *u = malloc(sizeof(float) * Ie), *y = malloc(sizeof(float) * H);
    for (int t = 0; t < T; t++) {
        float *o = out + (size_t)t * H;
        for (int c = 0; c < H; c++) o[c] = 0.f;
        int last = -1;
        for (int n = 0; n < k; n++) {
            int j = -1; /* the next larger id */
            for (int q = 0; q < k; q++) {
                int e = ids[(size_t)t * k + q];
                if (e > last && (j < 0 || e < ids[(size_t)t * k + j])) j = q;
            }
            if (j < 0) break;
            int e = ids[(size_t)t * k + j];
            last = e;
            ref_matmul(g, x + (size_t)t * H, 1, &gate[e], 0, Ie);
            ref_matmul(u, x + (size_t)t * H, 1, &up[e], 0, Ie);
            ref_glu(g, g, u, (size_t)Ie, act);
            ref_matmul(y, g, 1, &down[e], 0, H);
            int32_t zero = 0;
            ref_add_rows_scaled(o, y, &zero, &wts[(size_t)t * k + j], 1, H);
        }
    }
    free(g); free(u); free(y);
}
