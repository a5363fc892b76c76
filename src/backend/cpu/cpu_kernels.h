/* cpu_kernels.h — the CPU backend's kernels: a scalar reference for each op (ref.c) and
 * SIMD fast paths (matmul_avx2.c, matmul_avx512.c) chosen at run time by cpuid.
 *
 * SIMD kernels work on a slice of output columns [j0, j1) so the caller can spread
 * columns over threads; each output element is one dot product whose reduction order
 * depends only on the kernel family, never on T, the slice or the thread. */
#ifndef KILN_CPU_KERNELS_H
#define KILN_CPU_KERNELS_H

#include <stdint.h>
#include "backend/backend.h"

/* --- scalar reference (ref.c) --- */
void ref_matmul(float *y, const float *x, int T, const weight_t *w, int j0, int j1);
void ref_rms_norm(float *y, const float *x, const float *w, float w_offset, int T, int n, float eps);
void ref_rope(float *x, const int32_t *pos, int T, int n_heads, int head_dim, int rot_dim, const float *inv_freq, float mscale);
void ref_glu(float *y, const float *gate, const float *up, size_t n, act_t act);
void ref_embed(float *y, const int32_t *ids, int T, const weight_t *w, float scale);
void ref_kv_write(const kv_view_t *kv, const float *k, const float *v, const int32_t *slots, int T);
/* Attention for tokens [t0, t1) of the step (all heads). scratch: >= max context floats. */
void ref_attention(float *out, const float *q, int t0, int t1, const attn_args_t *a, float *scratch);

/* --- SIMD families: a dot product and axpy for attention, and matmul --- */
typedef struct simd_kernels {
    const char *name;
    void (*matmul)(float *y, const float *x, int T, const weight_t *w, int j0, int j1);
    float (*dot)(const float *a, const float *b, int n);             /* fixed lane order */
    void (*axpy)(float *y, float a, const float *x, int n);          /* y += a * x       */
    void (*to_f32)(float *dst, const void *src, dtype_t t, int n);   /* f16/bf16/f32 row */
} simd_kernels_t;

extern const simd_kernels_t simd_avx2, simd_avx512;
/* The best family this CPU supports (NULL: scalar only). KILN_SIMD=off|avx2|avx512 overrides. */
const simd_kernels_t *simd_detect(void);

/* Attention over tokens [t0, t1) using a SIMD family's dot/axpy (attention_cpu.c).
 * scratch: group * (context + 1) floats; kbuf: head_dim floats. */
void simd_attention(const simd_kernels_t *s, float *out, const float *q, int t0, int t1, const attn_args_t *a,
                    float *scratch, float *kbuf);
/* The same over (token, KV head) items [i0, i1), item = t * n_kv_heads + kvh. */
void simd_attention_items(const simd_kernels_t *s, float *out, const float *q, int i0, int i1, const attn_args_t *a,
                          float *scratch, float *kbuf);

#endif
