/* cpu_hybrid.h — the CPU reference kernels of the hybrid and MoE ops (backend.h, the ops
 * after `attention`): causal conv1d with carried state (conv1d.c), the gated delta rule
 * (deltanet_ref.c), sigmoid gating and scaling (gate.c), and the MoE combine (moe.c).
 *
 * Each computes a token from its own row only, in a fixed order, so results never depend on
 * what else shares the step. The gated delta rule is written in the per-token (recurrent)
 * form for prefill too: on a CPU it is as fast as the chunked form at serving sizes and it is
 * exactly chunk-invariant, which the chunked form is not. */
#ifndef KILN_CPU_HYBRID_H
#define KILN_CPU_HYBRID_H

#include "backend/backend.h"

void ref_conv1d_causal(float *y, const float *x, int n_rows, const int32_t *row_start, float *const *state,
                       const float *w, int C, int K, act_t act);
/* Value heads [h0, h1) of every row (the CPU backend splits heads over threads). */
void ref_gated_delta(float *out, const float *qkv, const float *a, const float *b, int T, const delta_args_t *d,
                     int h0, int h1);
void ref_sigmoid_mul(float *y, const float *g, int T, int n, int g_width);
void ref_scale(float *y, float s, size_t n);
void ref_add_rows_scaled(float *y, const float *x, const int32_t *idx, const float *wt, int n, int width);

#endif
