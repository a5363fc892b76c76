/* gate.c — elementwise gating and scaling: sigmoid gates (Qwen3.5's attention output gate
 * and shared-expert gate) and a plain scale (Gemma's per-layer scalars). */
#include <math.h>
#include "backend/cpu/cpu_hybrid.h"

void ref_sigmoid_mul(float *y, const float *g, int T, int n, int g_width) {
    for (int t = 0; t < T; t++) {
        float *yt = y + (size_t)t * n;
        const float *gt = g + (size_t)t * g_width;
        for (int i = 0; i < n; i++) yt[i] *= 1.0f / (1.0f + expf(-gt[g_width == 1 ? 0 : i]));
    }
}

void ref_scale(float *y, float s, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] *= s;
}
