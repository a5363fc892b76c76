/* deltanet_ref.c — the gated delta rule (Qwen3.5 / Qwen3-Next linear attention), recurrent form.
 *
 * Per token and value head, with S the head's [dk][dv] f32 state:
 *   S ← S · exp(g);  δ = β (v − Sᵀk);  S ← S + k δᵀ;  o = Sᵀq
 * with q, k L2-normalized and q scaled by dk^-½ (transformers' torch_recurrent_gated_delta_rule
 * with use_qk_l2norm_in_kernel). The loops run over S row by row (i outer, j inner) so the
 * inner loop is a contiguous axpy the compiler vectorizes; every sum over i runs in index
 * order, the same for every chunking. O(T · heads · dk · dv) time, no extra memory.
 *
 * This is the form decode and partial chunks use, and the reference the chunk-parallel
 * form (deltanet_chunk.c) is tested against. */
/* -O3 for this file: the Release build's -O2 (GCC 12: the "very cheap" vectorizer cost
 * model) leaves these loops scalar, since their trip counts are runtime values, even in the
 * avx512f clone. The loops are element-wise over j (or c), so vectorizing them changes no
 * result; sums over i stay in index order (no -ffast-math, contraction still off). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif
#include <math.h>
#include <stdlib.h>
#include "backend/cpu/cpu_hybrid.h"

static void l2norm(float *y, const float *x, int n, float scale) {
    float ss = 0.f;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    float inv = 1.0f / sqrtf(ss + 1e-6f);
    for (int i = 0; i < n; i++) y[i] = x[i] * inv * scale;
}

/* torch.nn.functional.softplus (beta 1, threshold 20) */
static float softplus(float x) { return x > 20.f ? x : log1pf(expf(x)); }

/* Tokens [t0, t1) of one row (step indices), value heads [h0, h1), on that row's state.
 * Compiled once per ISA (function multiversioning, picked at load by cpuid): the inner loops
 * are element-wise over j, so wider vectors change nothing in the results — each S[i][j],
 * kv[j] and o[j] sees the same multiplies and adds in the same order (no FMA contraction:
 * -ffp-contract=off) — and the cpu-ref backend, which calls the same function, agrees
 * bitwise. The baseline build is SSE2 only; AVX-512 makes decode's recurrence ~4× cheaper. */
KILN_TARGET_CLONES
void ref_gated_delta_tokens(float *out, const float *qkv, const float *a, const float *b, const delta_args_t *d,
                            float *state, int t0, int t1, int h0, int h1) {
    int dk = d->dk, dv = d->dv, nv = d->n_v_heads, group = d->n_v_heads / d->n_k_heads;
    if (t0 >= t1) return;
    float *q = malloc(sizeof(float) * (2 * dk + dv)), *k = q + dk, *kv = k + dk;
    for (int t = t0; t < t1; t++) {
        const float *row = qkv + (size_t)t * d->stride;
        for (int h = h0; h < h1; h++) {
            int kh = h / group;
            l2norm(q, row + d->q_off + (size_t)kh * dk, dk, 1.0f);
            for (int i = 0; i < dk; i++) q[i] *= d->q_scale;
            l2norm(k, row + d->k_off + (size_t)kh * dk, dk, 1.0f);
            const float *v = row + d->v_off + (size_t)h * dv;
            float g = -expf(d->A_log[h]) * softplus(a[(size_t)t * nv + h] + d->dt_bias[h]);
            float beta = 1.0f / (1.0f + expf(-b[(size_t)t * nv + h]));
            float decay = expf(g);
            float *S = state + (size_t)h * dk * dv;
            /* decay, then read the state at k */
            for (int j = 0; j < dv; j++) kv[j] = 0.f;
            for (int i = 0; i < dk; i++) {
                float *Si = S + (size_t)i * dv;
                for (int j = 0; j < dv; j++) {
                    Si[j] *= decay;
                    kv[j] += Si[j] * k[i];
                }
            }
            /* δ = β (v − Sᵀk), written over kv */
            for (int j = 0; j < dv; j++) kv[j] = (v[j] - kv[j]) * beta;
            /* S += k δᵀ, then o = Sᵀq */
            float *o = out + ((size_t)t * nv + h) * dv;
            for (int j = 0; j < dv; j++) o[j] = 0.f;
            for (int i = 0; i < dk; i++) {
                float *Si = S + (size_t)i * dv;
                for (int j = 0; j < dv; j++) {
                    Si[j] += k[i] * kv[j];
                    o[j] += Si[j] * q[i];
                }
            }
        }
    }
    free(q);
}

void ref_gated_delta(float *out, const float *qkv, const float *a, const float *b, int T, const delta_args_t *d,
                     int h0, int h1) {
    for (int r = 0; r < d->n_rows; r++)
        ref_gated_delta_tokens(out, qkv, a, b, d, d->state[r], d->row_start[r], d->row_start[r + 1], h0, h1);
}
