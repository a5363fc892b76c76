/* cuda_backend.h — the CUDA backend's entry points, called by backend.c when kiln is built
 * with KILN_CUDA (plain C; the implementation is in cuda_backend.cu).
 *
 * Names: "cuda" (f32 activations; matmuls with T >= KILN_CUDA_GEMM_MIN_T, default
 * KILN_CUDA_GEMM_MIN_T_DEFAULT, run on tensor cores: bf16 weights through cuBLASLt with x split
 * into bf16 hi + lo, MLX 4/8-bit up to 64 tokens in matmul_qmma.cu, the rest dequantized to
 * TF32) and "cuda-f32" (every matmul in f32 on CUDA cores: the path that matches the CPU
 * reference to 1e-4). */
#ifndef KILN_CUDA_BACKEND_H
#define KILN_CUDA_BACKEND_H

#include "backend/backend.h"

/* Steps of this many tokens and more run their matmuls on tensor cores (cuBLASLt); fewer go
 * through the f32 GEMV (T <= 8). Measured on the H200 (bench/cuda/RESULTS.md): the f32 tiled
 * kernel that used to take 9 <= T < 64 made a 32-row decode step of llama-3-8b 8x slower
 * than cuBLASLt. */
#define KILN_CUDA_GEMM_MIN_T_DEFAULT 9
/* bf16 weights need no dequantization for cuBLASLt: from this many tokens they go there
 * (KILN_CUDA_GEMM_MIN_T_BF16); the GEMV's cost grows with T (x re-read per row). */
#define KILN_CUDA_GEMM_MIN_T_BF16_DEFAULT 3
/* MLX 4/8-bit steps of this many tokens up to 64 run on tensor cores (matmul_qmma.cu,
 * KILN_CUDA_QMMA=N, 0: never); batch-1 decode stays on the GEMV, which measured faster there
 * (llama-3-8b q4 154 against 113 tok/s, bench/cuda/RESULTS.md). */
#define KILN_CUDA_QMMA_MIN_T_DEFAULT 2

#ifdef __cplusplus
extern "C" {
#endif
backend_t *cuda_backend_create(const char *name, int n_threads, err_t *e);
void cuda_backend_destroy(backend_t *be);
const char *cuda_backend_kernel_name(const backend_t *be);
/* GEMV launches that took x as its producer prepared it (KILN_CUDA_XPREP; tests) */
long cuda_xprep_uses(const backend_t *be);
/* how many matmuls took x's bf16 copy from its producer or an earlier conversion (x16.cuh) */
long cuda_x16_uses(const backend_t *be);
/* how many 64-token 4/8-bit matmuls took x prepared by the norm before them (wgx.cuh) */
long cuda_wgx_uses(const backend_t *be);
/* add_rms_norm launches that summed a matmul's deferred split partials (KILN_CUDA_QWG_DEFER; the tests check the path ran) */
long cuda_defer_uses(const backend_t *be);
/* how many matmul_multi calls ran their GEMMs side by side on streams (matmul.cu cuda_mm_conc; tests) */
long cuda_mm_conc_uses(const backend_t *be);
/* how many matmul_add / rms_matmul_multi / rms_matmul_glu calls took matmul.cu's prefill path (tests) */
long cuda_lt_fused_uses(const backend_t *be);
long cuda_qd_fused_uses(const backend_t *be); /* matmul_dequant.cu's fused prefill ops for MLX weights */
/* how many pairs of prefill GEMMs ran as one batched cuBLASLt launch (matmul.cu lt_batch2; tests) */
long cuda_lt_batch_uses(void);
/* how many rms_mlp calls ran as one persistent GEMV launch (matmul_gemv.cu gemvp_mlp_kernel; tests) */
long cuda_mlp_pers_uses(const backend_t *be);
/* the width of a prepared quantized weight's codes on the device (widen.cu may make it wider than
 * the stored one); 0 for a weight not prepared here (tests) */
int cuda_weight_device_bits(const weight_t *w);
#ifdef __cplusplus
}
#endif

#endif
