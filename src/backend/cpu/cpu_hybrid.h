/* cpu_hybrid.h — the CPU reference kernels of the hybrid and MoE ops (backend.h, the ops
 * after `attention`): causal conv1d with carried state (conv1d.c), the gated delta rule
 * (deltanet_ref.c), sigmoid gating and scaling (gate.c), and the MoE combine (moe.c).
 *
 * Each computes a token from its own row only, in a fixed order, so results never depend on
 * what else shares the step. The gated delta rule has two forms: per token (recurrent,
 * deltanet_ref.c: decode and partial chunks) and chunk-parallel (deltanet_chunk.c: whole
 * aligned chunks of prefill, mostly small matrix products); they agree within float rounding,
 * and which one a token gets depends only on its absolute position and its row's extent. */
#ifndef KILN_CPU_HYBRID_H
#define KILN_CPU_HYBRID_H

/* Per-ISA clones of the scalar hybrid loops (gcc's target_clones; clang 14 emits the clones
 * without the plain symbol, so clang builds — the fuzz builds — get the one default copy). */
#if defined(__clang__)
#define KILN_TARGET_CLONES
#else
#define KILN_TARGET_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#include "backend/backend.h"

void ref_conv1d_causal(float *y, const float *x, int n_rows, const int32_t *row_start, float *const *state,
                       const float *w, int C, int K, act_t act);
/* The same for channels [c0, c1) only (outputs and state); the CPU backend splits C. */
void ref_conv1d_causal_cols(float *y, const float *x, int n_rows, const int32_t *row_start, float *const *state,
                            const float *w, int C, int K, act_t act, int c0, int c1);
/* Value heads [h0, h1) of every row (the CPU backend splits heads over threads). */
void ref_gated_delta(float *out, const float *qkv, const float *a, const float *b, int T, const delta_args_t *d,
                     int h0, int h1);
/* The same, for tokens [t0, t1) of one row whose state is `state` (all value heads' [dk][dv]). */
void ref_gated_delta_tokens(float *out, const float *qkv, const float *a, const float *b, const delta_args_t *d,
                            float *state, int t0, int t1, int h0, int h1);
/* Chunk-parallel gated delta rule (deltanet_chunk.c): one value head h over the d->chunk
 * tokens at step indices [t0, t0 + chunk) of one row, on the head's state S [dk][dv];
 * ws holds delta_chunk_floats(d) floats. One per kernel family, the same math. */
typedef void (*delta_chunk_fn)(float *out, const float *qkv, const float *a, const float *b, const delta_args_t *d,
                               float *S, int t0, int h, float *ws);
void delta_chunk_scalar(float *out, const float *qkv, const float *a, const float *b, const delta_args_t *d, float *S,
                        int t0, int h, float *ws);
void delta_chunk_avx2(float *out, const float *qkv, const float *a, const float *b, const delta_args_t *d, float *S,
                      int t0, int h, float *ws);
void delta_chunk_avx512(float *out, const float *qkv, const float *a, const float *b, const delta_args_t *d, float *S,
                        int t0, int h, float *ws);
size_t delta_chunk_floats(const delta_args_t *d);
/* Value heads [h0, h1) of every row: whole aligned chunks (d->pos, d->chunk) through fn, the
 * other tokens token by token (ref_gated_delta_tokens). fn NULL: token by token. */
void gated_delta_rows(float *out, const float *qkv, const float *a, const float *b, const delta_args_t *d, int h0, int h1,
                      delta_chunk_fn fn);
void ref_sigmoid_mul(float *y, const float *g, int T, int n, int g_width);
void ref_scale(float *y, float s, size_t n);
void ref_add_rows_scaled(float *y, const float *x, const int32_t *idx, const float *wt, int n, int width);
/* MoE on the device, its references (backend.h, moe_route / moe_experts): the host routing of
 * moe_topk (plus escale), and the experts of each token one (token, expert) pair at a time. */
void ref_moe_route(int32_t *ids, float *wts, const float *logits, int T, int E, int k, int renorm, const float *escale);
void ref_moe_experts(float *out, const float *x, int T, int k, const int32_t *ids, const float *wts, const weight_t *gate,
                     const weight_t *up, const weight_t *down, act_t act);

#endif
