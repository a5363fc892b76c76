/* conv1d.c — causal depthwise conv1d with a carried state (gated DeltaNet's short conv).
 *
 * transformers runs F.conv1d over [state ++ row inputs] (zeros for a fresh sequence) and
 * keeps the last K-1 inputs as the next state; we do the same one token at a time, so a
 * row fed in chunks of any size computes the same sums in the same order. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/cpu_hybrid.h"

static float act_apply(float v, act_t act) {
    if (act == ACT_SILU) return v / (1.0f + expf(-v));
    return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
}

void ref_conv1d_causal(float *y, const float *x, int n_rows, const int32_t *row_start, float *const *state,
                       const float *w, int C, int K, act_t act) {
    int H = K - 1; /* history length */
    for (int r = 0; r < n_rows; r++) {
        int t0 = row_start[r], n = row_start[r + 1] - t0;
        float *st = state[r];
        for (int i = 0; i < n; i++) {
            const float *xt = x + (size_t)(t0 + i) * C;
            float *yt = y + (size_t)(t0 + i) * C;
            for (int c = 0; c < C; c++) {
                const float *wc = w + (size_t)c * K;
                float acc = 0.f;
                for (int k = 0; k < H; k++) { /* input at offset k-H from the current token */
                    int j = i - H + k;        /* index into this row's tokens; < 0: the state */
                    float u = j >= 0 ? x[(size_t)(t0 + j) * C + c] : st[(size_t)(H + j) * C + c];
                    acc += wc[k] * u;
                }
                acc += wc[H] * xt[c];
                yt[c] = act_apply(acc, act);
            }
        }
        /* new state: the last H inputs of [state ++ row] */
        if (H > 0) {
            if (n >= H) {
                memcpy(st, x + (size_t)(t0 + n - H) * C, sizeof(float) * H * C);
            } else {
                memmove(st, st + (size_t)n * C, sizeof(float) * (H - n) * C);
                memcpy(st + (size_t)(H - n) * C, x + (size_t)t0 * C, sizeof(float) * n * C);
            }
        }
    }
}
