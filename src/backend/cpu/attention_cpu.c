/* attention_cpu.c — paged attention on the CPU with a SIMD dot/axpy family.
 *
 * For each token and head: scores against every cached position of its row (causal,
 * optionally windowed), a softmax in f32, then the weighted sum of V. Work per token is
 * independent and ordered, so a token's output is the same whatever else is in the step.
 * K/V in f16/bf16 are converted one position at a time into kbuf. O(T · ctx · heads);
 * fine at the context lengths a CPU serves, flash-style tiling is the CUDA backend's job. */
#include <math.h>
#include "backend/cpu/cpu_kernels.h"

static int row_of(const attn_args_t *a, int t) {
    int lo = 0, hi = a->n_rows - 1;
    while (lo < hi) { /* last row whose start <= t */
        int mid = (lo + hi + 1) / 2;
        if (a->row_start[mid] <= t) lo = mid; else hi = mid - 1;
    }
    return lo;
}

static const float *kv_row(const kv_view_t *kv, const void *base, size_t off, int hd, float *buf) {
    if (kv->dtype == DT_F32) return (const float *)base + off;
    for (int d = 0; d < hd; d++) buf[d] = load_as_f32(base, kv->dtype, off + d);
    return buf;
}

void simd_attention(const simd_kernels_t *s, float *out, const float *q, int t0, int t1, const attn_args_t *a,
                    float *scratch, float *kbuf) {
    const kv_view_t *kv = &a->kv;
    int hd = a->head_dim, group = a->n_heads / a->n_kv_heads, bs = kv->block_size;
    size_t per_tok = (size_t)kv->n_kv_heads * hd;
    for (int t = t0; t < t1; t++) {
        int r = row_of(a, t), p = a->pos[t];
        const int32_t *bt = a->block_tables[r];
        int lo = a->window > 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0;
        for (int h = 0; h < a->n_heads; h++) {
            int kvh = h / group;
            const float *qh = q + ((size_t)t * a->n_heads + h) * hd;
            float mx = -INFINITY;
            for (int j = lo; j <= p; j++) {
                size_t off = ((size_t)bt[j / bs] * bs + j % bs) * per_tok + (size_t)kvh * hd;
                float sc = s->dot(qh, kv_row(kv, kv->k, off, hd, kbuf), hd) * a->scale;
                if (a->softcap > 0) sc = a->softcap * tanhf(sc / a->softcap);
                scratch[j - lo] = sc;
                if (sc > mx) mx = sc;
            }
            float sum = 0.f;
            for (int j = lo; j <= p; j++) { scratch[j - lo] = expf(scratch[j - lo] - mx); sum += scratch[j - lo]; }
            float *o = out + ((size_t)t * a->n_heads + h) * hd;
            for (int d = 0; d < hd; d++) o[d] = 0.f;
            float inv = 1.0f / sum;
            for (int j = lo; j <= p; j++) {
                size_t off = ((size_t)bt[j / bs] * bs + j % bs) * per_tok + (size_t)kvh * hd;
                s->axpy(o, scratch[j - lo] * inv, kv_row(kv, kv->v, off, hd, kbuf), hd);
            }
        }
    }
}
