/* cuda_backend.h — the CUDA backend's entry points, called by backend.c when kiln is built
 * with KILN_CUDA (plain C; the implementation is in cuda_backend.cu).
 *
 * Names: "cuda" (f32 activations; matmuls with T >= KILN_CUDA_GEMM_MIN_T, default 64,
 * run on tensor cores through cuBLASLt with bf16/f16 activations) and "cuda-f32" (every
 * matmul in f32 on CUDA cores: the path that matches the CPU reference to 1e-4). */
#ifndef KILN_CUDA_BACKEND_H
#define KILN_CUDA_BACKEND_H

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif
backend_t *cuda_backend_create(const char *name, int n_threads, err_t *e);
void cuda_backend_destroy(backend_t *be);
const char *cuda_backend_kernel_name(const backend_t *be);
#ifdef __cplusplus
}
#endif

#endif
