/* hyb_util.h — helpers the hybrid/MoE families share (qwen35.c, gemma.c): tensors of any
 * shape as f32 vectors, stacked expert weights ([E, rows, cols], dense or MLX-quantized) as
 * per-expert weight_t views, row slices of a weight, one run-state arena so each family
 * allocates its step buffers in one place, and projections through the backend's fused ops. */
#ifndef KILN_HYB_UTIL_H
#define KILN_HYB_UTIL_H

#include "backend/moe_route.h" /* moe_topk: the MoE router's softmax + top-k on the host */
#include "model/model.h"

/* A stored tensor by family name, under the usual prefixes; NULL when absent. */
const st_tensor_t *hyb_find(model_t *m, const char *name);
/* Any-shaped float tensor of n elements, converted to f32 into backend memory. */
int hyb_get_f32(model_t *m, const char *name, size_t n, float **out, err_t *e);
/* hyb_get_f32 with `add` added to every element in f32 on the host (a (w_offset + w) norm weight
 * folded once: rms_norm with it and offset 0 gives the same floats as with w and w_offset) */
int hyb_get_f32_plus(model_t *m, const char *name, size_t n, float add, float **out, err_t *e);
/* Optional 1-D vector: *out NULL (and 0 returned) when absent. */
int hyb_get_opt(model_t *m, const char *name, int n, float **out, err_t *e);
/* Experts stacked in one tensor `name` (or `name`.weight): [E, rows, cols] dense, or MLX
 * codes [E, rows, cols·bits/32] with .scales/.biases [E, rows, cols/group]. Fills w[E]. */
int hyb_get_experts(model_t *m, const char *name, int E, int rows, int cols, weight_t *w, err_t *e);
/* Rows [r0, r0+n) of w as a weight of its own (no copy). */
weight_t hyb_rows(const weight_t *w, int r0, int n);
/* Tensors of multimodal towers a text-only load skips (vision_tower., visual., audio_tower.,
 * multi_modal_projector., embed_vision., embed_audio., under any prefix); the count. */
int hyb_tower_tensors(const st_archive_t *ar);
/* Logs, once at load, that such tensors are present and not loaded (see above). */
void hyb_note_towers(model_t *m);
/* Rounds a constant the way transformers does when it lives in a model-dtype buffer. */
float hyb_round(const model_config_t *c, float v);

/* Forward helpers over the backend's optional fused ops (backend.h: bitwise the separate ops).
 * hyb_multi: y[i] = x · w[i]ᵀ for i < n, one matmul_multi where the backend has it.
 * hyb_proj: y[i] = rms_norm(x[T, H], nw, no, eps) · w[i]ᵀ, the norm inside the matmuls where the
 * backend fuses it (rms_matmul_multi; h is then not written), else h = the norm and hyb_multi. */
void hyb_multi(backend_t *be, int n, float *const *y, const float *x, int T, const weight_t *const *w);
/* g[T, I] = act(h·wgᵀ) ⊙ (h·wuᵀ) of h = rms_norm(x, nw, no, eps): the norm inside gate/up/GLU where the
 * backend fuses it (rms_matmul_glu), else into h (not with h_ready: h holds it already) and gate/up/GLU
 * as one op (matmul_glu) or three. u (and g) are the GLU's scratch. */
void hyb_glu(backend_t *be, float *g, float *u, float *h, const float *x, int h_ready, const float *nw, float no, float eps, int T, int H,
             const weight_t *wg, const weight_t *wu, act_t act);
void hyb_proj(backend_t *be, int n, float *const *y, float *h, const float *x, const float *nw, float no, float eps, int T, int H,
              const weight_t *const *w);

/* Step buffers: n named widths, grown to the largest T seen (backend memory). */
#define HYB_MAX_BUFS 40
typedef struct hyb_arena {
    int n, cap_T;
    size_t width[HYB_MAX_BUFS];
    float **ptr[HYB_MAX_BUFS];
} hyb_arena_t;
void hyb_arena_add(hyb_arena_t *a, float **p, size_t width);
int hyb_arena_ensure(hyb_arena_t *a, backend_t *be, int T, err_t *e);
void hyb_arena_free(hyb_arena_t *a, backend_t *be);

#endif
