/* moe_route.c — the MoE router's softmax + top-k (moe_route.h). */
#include "backend/moe_route.h"
#include <math.h>

void moe_topk(const float *logits, int E, int k, int renorm, int32_t *idx, float *wt) {
    float mx = -INFINITY, sum = 0.f;
    for (int i = 0; i < E; i++) if (logits[i] > mx) mx = logits[i];
    float p[1024];
    for (int i = 0; i < E; i++) { p[i] = expf(logits[i] - mx); sum += p[i]; }
    for (int i = 0; i < E; i++) p[i] /= sum;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int i = 0; i < E; i++) {
            int used = 0;
            for (int q = 0; q < j; q++) used |= idx[q] == i;
            if (!used && (best < 0 || p[i] > p[best])) best = i;
        }
        idx[j] = best;
        wt[j] = p[best];
    }
    if (renorm) {
        float s = 0.f;
        for (int j = 0; j < k; j++) s += wt[j];
        for (int j = 0; j < k; j++) wt[j] /= s;
    }
}
