/* conv1d.c — causal depthwise conv1d with a carried state (gated DeltaNet's short conv).
 *
 * transformers runs F.conv1d over [state ++ row inputs] (zeros for a fresh sequence) and
 * keeps the last K-1 inputs as the next state; we do the same one token at a time, so a
 * row fed in chunks of any size computes the same sums in the same order:
 *
 *   y[t, c] = act(((0 + w[c, 0]·u[t-H, c]) + w[c, 1]·u[t-H+1, c]) + … + w[c, H]·x[t, c])
 *
 * with H = K-1 and u the row's inputs, or the state for offsets before the row's start.
 * The loops run tap by tap over a contiguous range of channels (the inner loop is
 * element-wise over c, so the compiler vectorizes it without changing any sum), with the
 * kernel transposed to [K][C] once per call. Channels are independent: the CPU backend
 * splits [c0, c1) over threads, each computing its channels whole. */
/* -O3 for this file: the Release build's -O2 (GCC 12: the "very cheap" vectorizer cost
 * model) leaves these loops scalar, since their trip counts are runtime values, even in the
 * avx512f clone. The loops are element-wise over j (or c), so vectorizing them changes no
 * result; sums over i stay in index order (no -ffast-math, contraction still off). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/cpu_hybrid.h"

static float act_apply(float v, act_t act) {
    if (act == ACT_SILU) return v / (1.0f + expf(-v));
    return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
}

KILN_TARGET_CLONES
void ref_conv1d_causal_cols(float *y, const float *x, int n_rows, const int32_t *row_start, float *const *state,
                            const float *w, int C, int K, act_t act, int c0, int c1) {
    int H = K - 1, n_c = c1 - c0; /* history length; channels of this call */
    if (n_c <= 0) return;
    float *wt = malloc(sizeof(float) * (size_t)K * n_c); /* [K][n_c]: tap k of channel c0 + c */
    if (!wt) abort();
    for (int c = 0; c < n_c; c++)
        for (int k = 0; k < K; k++) wt[(size_t)k * n_c + c] = w[(size_t)(c0 + c) * K + k];
    for (int r = 0; r < n_rows; r++) {
        int t0 = row_start[r], n = row_start[r + 1] - t0;
        float *st = state[r];
        for (int i = 0; i < n; i++) {
            float *yt = y + (size_t)(t0 + i) * C + c0;
            for (int c = 0; c < n_c; c++) yt[c] = 0.f;
            for (int k = 0; k <= H; k++) { /* input at offset k-H from the current token */
                int j = i - H + k;         /* index into this row's tokens; < 0: the state */
                const float *u = (j >= 0 ? x + (size_t)(t0 + j) * C : st + (size_t)(H + j) * C) + c0;
                const float *wk = wt + (size_t)k * n_c;
                for (int c = 0; c < n_c; c++) yt[c] += wk[c] * u[c];
            }
            for (int c = 0; c < n_c; c++) yt[c] = act_apply(yt[c], act);
        }
        /* new state: the last H inputs of [state ++ row], channels [c0, c1) */
        size_t bytes = sizeof(float) * n_c;
        if (n >= H) {
            for (int k = 0; k < H; k++) memcpy(st + (size_t)k * C + c0, x + (size_t)(t0 + n - H + k) * C + c0, bytes);
        } else {
            for (int k = 0; k < H - n; k++) memmove(st + (size_t)k * C + c0, st + (size_t)(k + n) * C + c0, bytes);
            for (int k = 0; k < n; k++) memcpy(st + (size_t)(H - n + k) * C + c0, x + (size_t)(t0 + k) * C + c0, bytes);
        }
    }
    free(wt);
}

void ref_conv1d_causal(float *y, const float *x, int n_rows, const int32_t *row_start, float *const *state,
                       const float *w, int C, int K, act_t act) {
    ref_conv1d_causal_cols(y, x, n_rows, row_start, state, w, C, K, act, 0, C);
}
