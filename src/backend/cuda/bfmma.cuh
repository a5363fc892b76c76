/* bfmma.cuh — matmul_bfmma.cu's entry with the fused decode ops' extras (used by matmul_gemv.cu) */
#pragma once
#include "backend/cuda/cuda_common.cuh"

/* matmul_bfmma.cu: bf16 at 3..64 tokens on mma.sync; ex: the fused decode ops' norm / residual add */
typedef struct bfm_ext {
    const float *nw; /* norm: rms_norm's weight (NULL: none), offset and eps */
    float off, eps;
    int norm, acc;   /* acc: y += x·Wᵀ */
} bfm_ext_t;
int cuda_bfmma_ex(cuda_impl_t *c, int n, float *const *y, const float *x, int T, const dweight_t *const *w, int split, int glu, int gelu,
                  const bfm_ext_t *ex);
int cuda_bfmma_fuse_on(void);
