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

/* K/V row as f32: f32 rows are used in place, f16/bf16 rows converted with the SIMD family. */
static const float *kv_row(const simd_kernels_t *s, const kv_view_t *kv, const void *base, size_t off, int hd, float *buf) {
    if (kv->dtype == DT_F32) return (const float *)base + off;
    s->to_f32(buf, (const char *)base + off * dtype_size(kv->dtype), kv->dtype, hd);
    return buf;
}

/* Per token, per KV head: each cached K row is converted once and scored against every
 * query head of its GQA group, then each V row is converted once and accumulated into
 * all of their outputs. A query head's arithmetic (its dot products, softmax and sums,
 * in position order) is the same as attending alone: only the conversions are shared. */
void simd_attention(const simd_kernels_t *s, float *out, const float *q, int t0, int t1, const attn_args_t *a,
                    float *scratch, float *kbuf) {
    simd_attention_items(s, out, q, t0 * a->n_kv_heads, t1 * a->n_kv_heads, a, scratch, kbuf);
}

/* Work items are (token, KV head) pairs, item = t * n_kv_heads + kvh, so a decode step
 * (one token) still spreads over the threads by head. */
void simd_attention_items(const simd_kernels_t *s, float *out, const float *q, int i0, int i1, const attn_args_t *a,
                          float *scratch, float *kbuf) {
    const kv_view_t *kv = &a->kv;
    int hd = a->head_dim, group = a->n_heads / a->n_kv_heads, bs = kv->block_size;
    size_t per_tok = (size_t)kv->n_kv_heads * hd;
    for (int item = i0; item < i1; item++) {
        int t = item / a->n_kv_heads, kvh = item % a->n_kv_heads;
        int r = row_of(a, t), p = a->pos[t];
        const int32_t *bt = a->block_tables[r];
        int lo = a->window > 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0, n = p - lo + 1;
        {
            const float *q0 = q + ((size_t)t * a->n_heads + (size_t)kvh * group) * hd;
            float *o0 = out + ((size_t)t * a->n_heads + (size_t)kvh * group) * hd;
            for (int j = lo; j <= p; j++) {
                size_t off = ((size_t)bt[j / bs] * bs + j % bs) * per_tok + (size_t)kvh * hd;
                const float *k = kv_row(s, kv, kv->k, off, hd, kbuf);
                for (int g = 0; g < group; g++) {
                    float sc = s->dot(q0 + (size_t)g * hd, k, hd) * a->scale;
                    if (a->softcap > 0) sc = a->softcap * tanhf(sc / a->softcap);
                    scratch[(size_t)g * n + (j - lo)] = sc;
                }
            }
            for (int g = 0; g < group; g++) {
                float *sg = scratch + (size_t)g * n, mx = -INFINITY, sum = 0.f;
                for (int j = 0; j < n; j++) if (sg[j] > mx) mx = sg[j];
                for (int j = 0; j < n; j++) { sg[j] = expf(sg[j] - mx); sum += sg[j]; }
                float inv = 1.0f / sum;
                for (int j = 0; j < n; j++) sg[j] *= inv;
                float *o = o0 + (size_t)g * hd;
                for (int d = 0; d < hd; d++) o[d] = 0.f;
            }
            for (int j = lo; j <= p; j++) {
                size_t off = ((size_t)bt[j / bs] * bs + j % bs) * per_tok + (size_t)kvh * hd;
                const float *v = kv_row(s, kv, kv->v, off, hd, kbuf);
                for (int g = 0; g < group; g++) s->axpy(o0 + (size_t)g * hd, scratch[(size_t)g * n + (j - lo)], v, hd);
            }
        }
    }
}
