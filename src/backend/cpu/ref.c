/* ref.c — the scalar reference kernels of the CPU backend.
 *
 * Plain loops in the order the math is written. They are what every fast path is
 * tested against, and what `--backend cpu-ref` runs. Accumulation is f32, in index
 * order, one token at a time, so results never depend on batch composition. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/cpu_kernels.h"

void ref_matmul(float *y, const float *x, int T, const weight_t *w, int j0, int j1) {
    int K = w->cols, N = w->rows;
    float *row = malloc(sizeof(float) * K);
    for (int j = j0; j < j1; j++) {
        weight_row_f32(w, j, row);
        for (int t = 0; t < T; t++) {
            const float *xt = x + (size_t)t * K;
            float acc = 0.f;
            for (int k = 0; k < K; k++) acc += xt[k] * row[k];
            y[(size_t)t * N + j] = acc;
        }
    }
    free(row);
}

void ref_rms_norm(float *y, const float *x, const float *w, float w_offset, int T, int n, float eps) {
    for (int t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * n;
        float *yt = y + (size_t)t * n;
        float ss = 0.f;
        for (int i = 0; i < n; i++) ss += xt[i] * xt[i];
        float inv = 1.0f / sqrtf(ss / (float)n + eps);
        for (int i = 0; i < n; i++) yt[i] = (xt[i] * inv) * (w ? (w_offset + w[i]) : 1.0f);
    }
}

/* rotate-half RoPE (transformers' apply_rotary_pos_emb): pairs (i, i + rot/2). */
void ref_rope(float *x, const int32_t *pos, int T, int n_heads, int head_dim, int rot_dim, const float *inv_freq, float mscale) {
    int half = rot_dim / 2;
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < half; i++) {
            float ang = (float)pos[t] * inv_freq[i];
            float c = cosf(ang) * mscale, s = sinf(ang) * mscale;
            for (int h = 0; h < n_heads; h++) {
                float *v = x + ((size_t)t * n_heads + h) * head_dim;
                float a = v[i], b = v[i + half];
                v[i] = a * c - b * s;
                v[i + half] = b * c + a * s;
            }
        }
    }
}

void ref_glu(float *y, const float *gate, const float *up, size_t n, act_t act) {
    for (size_t i = 0; i < n; i++) {
        float g = gate[i], a;
        if (act == ACT_SILU) a = g / (1.0f + expf(-g));
        else a = 0.5f * g * (1.0f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g)));
        y[i] = a * up[i];
    }
}

void ref_embed(float *y, const int32_t *ids, int T, const weight_t *w, float scale) {
    for (int t = 0; t < T; t++) {
        float *yt = y + (size_t)t * w->cols;
        weight_row_f32(w, ids[t], yt);
        if (scale != 1.0f)
            for (int i = 0; i < w->cols; i++) yt[i] *= scale;
    }
}

void ref_kv_write(const kv_view_t *kv, const float *k, const float *v, const int32_t *slots, int T) {
    size_t per = (size_t)kv->n_kv_heads * kv->head_dim, hd = (size_t)kv->head_dim;
    for (int t = 0; t < T; t++) {
        size_t base = (size_t)slots[t] * per;
        if (kv->dtype == DT_I8) { /* per (slot, KV head) row: codes and a scale */
            for (size_t h = 0; h < (size_t)kv->n_kv_heads; h++) {
                size_t sl = (size_t)slots[t], si = kv_s_at(kv, sl, h);
                kv_q8_row((int8_t *)kv->k + kv_k_at(kv, sl, h * hd), kv->k_t ? (size_t)kv->block_size : 1, kv->ks + si,
                          k + (size_t)t * per + h * hd, hd);
                kv_q8_row((int8_t *)kv->v + base + h * hd, 1, kv->vs + si, v + (size_t)t * per + h * hd, hd);
            }
            continue;
        }
        for (size_t i = 0; i < per; i++) {
            store_from_f32(kv->k, kv->dtype, kv_k_at(kv, (size_t)slots[t], i), k[(size_t)t * per + i]);
            store_from_f32(kv->v, kv->dtype, base + i, v[(size_t)t * per + i]);
        }
    }
}

/* Finds the row a token belongs to (rows are few; linear scan is fine). */
static int row_of(const attn_args_t *a, int t) {
    int r = 0;
    while (r + 1 < a->n_rows && a->row_start[r + 1] <= t) r++;
    return r;
}

void ref_attention(float *out, const float *q, int t0, int t1, const attn_args_t *a, float *scratch) {
    const kv_view_t *kv = &a->kv;
    int hd = a->head_dim, group = a->n_heads / a->n_kv_heads, bs = kv->block_size;
    for (int t = t0; t < t1; t++) {
        int r = row_of(a, t), p = a->pos[t];
        const int32_t *bt = a->block_tables[r];
        int lo = a->window > 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0;
        for (int h = 0; h < a->n_heads; h++) {
            int kvh = h / group;
            const float *qh = q + ((size_t)t * a->n_heads + h) * hd;
            float mx = -INFINITY;
            for (int j = lo; j <= p; j++) {
                size_t slot = (size_t)bt[j / bs] * bs + j % bs;
                float s = 0.f;
                for (int d = 0; d < hd; d++) s += qh[d] * kv_load_k(kv, slot, (size_t)kvh * hd + d);
                s *= a->scale;
                if (a->softcap > 0) s = a->softcap * tanhf(s / a->softcap);
                scratch[j - lo] = s;
                if (s > mx) mx = s;
            }
            float sum = 0.f;
            for (int j = lo; j <= p; j++) { scratch[j - lo] = expf(scratch[j - lo] - mx); sum += scratch[j - lo]; }
            float *o = out + ((size_t)t * a->n_heads + h) * hd;
            for (int d = 0; d < hd; d++) o[d] = 0.f;
            for (int j = lo; j <= p; j++) {
                size_t slot = (size_t)bt[j / bs] * bs + j % bs;
                float pj = scratch[j - lo] / sum;
                for (int d = 0; d < hd; d++) o[d] += pj * kv_load_v(kv, slot, (size_t)kvh * hd + d);
            }
        }
    }
}
