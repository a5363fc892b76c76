/* probe.cu — the ceilings kiln's CUDA numbers are measured against (bench/cuda/RESULTS.md).
 *
 *   copy:  cudaMemcpy device→device of 2 GiB; bandwidth counts bytes read + written
 *   read:  a streaming kernel reading 4 GiB with 16-byte loads (what a decode step does)
 *   gemm:  cuBLASLt bf16 × bf16 → f32 (f32 accumulation), the shapes kiln's prefill uses
 *          (y[T,N] = x[T,K]·Wᵀ with T = 2048) plus a square 8192³; TFLOP/s = 2·T·N·K/time
 * Prints one JSON object per line. */
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cublasLt.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)
#define BK(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { fprintf(stderr, "%s:%d %s: status %d\n", __FILE__, __LINE__, #x, (int)s_); exit(1); } } while (0)

__global__ void read_kernel(const uint4 *p, size_t n, unsigned *sink) {
    unsigned acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint4 v = __ldg(p + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x12345678u) *sink = acc;
}

__global__ void fill_bf16(__nv_bfloat16 *p, size_t n, unsigned seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ seed;
        p[i] = __float2bfloat16((float)(h & 0xffff) / 65536.0f - 0.5f);
    }
}

static float time_ms(cudaEvent_t a, cudaEvent_t b) { float ms; CK(cudaEventElapsedTime(&ms, a, b)); return ms; }

static void gemm(cublasLtHandle_t lt, void *ws, size_t wsb, int T, int N, int K, const char *what) {
    __nv_bfloat16 *A, *B;
    float *D;
    CK(cudaMalloc(&A, (size_t)N * K * 2));
    CK(cudaMalloc(&B, (size_t)T * K * 2));
    CK(cudaMalloc(&D, (size_t)T * N * 4));
    fill_bf16<<<4096, 256>>>(A, (size_t)N * K, 1);
    fill_bf16<<<4096, 256>>>(B, (size_t)T * K, 2);
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d;
    BK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    BK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    BK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    BK(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, K, N, K));
    BK(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, K, T, K));
    BK(cublasLtMatrixLayoutCreate(&d, CUDA_R_32F, N, T, N));
    cublasLtMatmulPreference_t pref;
    BK(cublasLtMatmulPreferenceCreate(&pref));
    BK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
    cublasLtMatmulHeuristicResult_t res;
    int nres = 0;
    BK(cublasLtMatmulAlgoGetHeuristic(lt, op, a, b, d, d, pref, 1, &res, &nres));
    float alpha = 1, beta = 0;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    for (int i = 0; i < 3; i++) BK(cublasLtMatmul(lt, op, &alpha, A, a, B, b, &beta, D, d, D, d, &res.algo, ws, wsb, 0));
    int iters = 20;
    CK(cudaEventRecord(e0));
    for (int i = 0; i < iters; i++) BK(cublasLtMatmul(lt, op, &alpha, A, a, B, b, &beta, D, d, D, d, &res.algo, ws, wsb, 0));
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    double s = time_ms(e0, e1) / 1e3 / iters;
    printf("{\"probe\": \"gemm_bf16\", \"what\": \"%s\", \"T\": %d, \"N\": %d, \"K\": %d, \"ms\": %.4f, \"tflops\": %.1f}\n", what, T, N, K,
           s * 1e3, 2.0 * T * N * K / s / 1e12);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(a); cublasLtMatrixLayoutDestroy(b); cublasLtMatrixLayoutDestroy(d);
    cublasLtMatmulDescDestroy(op);
    CK(cudaFree(A)); CK(cudaFree(B)); CK(cudaFree(D));
}

int main(void) {
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    printf("{\"probe\": \"device\", \"name\": \"%s\", \"sms\": %d, \"mem_gb\": %.1f}\n", p.name, p.multiProcessorCount,
           p.totalGlobalMem / 1e9);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    size_t bytes = (size_t)2 << 30;
    void *src, *dst;
    CK(cudaMalloc(&src, 2 * bytes));
    CK(cudaMalloc(&dst, bytes));
    CK(cudaMemset(src, 1, 2 * bytes));
    for (int i = 0; i < 2; i++) CK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
    int iters = 10;
    CK(cudaEventRecord(e0));
    for (int i = 0; i < iters; i++) CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice));
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    double s = time_ms(e0, e1) / 1e3 / iters;
    printf("{\"probe\": \"copy\", \"bytes\": %zu, \"gb_s\": %.1f, \"note\": \"read+write bytes\"}\n", bytes, 2.0 * bytes / s / 1e9);
    unsigned *sink;
    CK(cudaMalloc(&sink, 4));
    size_t n16 = 2 * bytes / 16;
    read_kernel<<<p.multiProcessorCount * 8, 512>>>((const uint4 *)src, n16, sink);
    CK(cudaEventRecord(e0));
    for (int i = 0; i < iters; i++) read_kernel<<<p.multiProcessorCount * 8, 512>>>((const uint4 *)src, n16, sink);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    s = time_ms(e0, e1) / 1e3 / iters;
    printf("{\"probe\": \"read\", \"bytes\": %zu, \"gb_s\": %.1f}\n", 2 * bytes, 2.0 * bytes / s / 1e9);
    CK(cudaFree(src)); CK(cudaFree(dst));

    cublasLtHandle_t lt;
    BK(cublasLtCreate(&lt));
    size_t wsb = 64u << 20;
    void *ws;
    CK(cudaMalloc(&ws, wsb));
    gemm(lt, ws, wsb, 8192, 8192, 8192, "square");
    gemm(lt, ws, wsb, 2048, 4096, 4096, "llama-3-8b q/o");
    gemm(lt, ws, wsb, 2048, 1024, 4096, "llama-3-8b k/v");
    gemm(lt, ws, wsb, 2048, 14336, 4096, "llama-3-8b gate/up");
    gemm(lt, ws, wsb, 2048, 4096, 14336, "llama-3-8b down");
    gemm(lt, ws, wsb, 2048, 2048, 1024, "qwen3-0.6b q");
    gemm(lt, ws, wsb, 2048, 3072, 1024, "qwen3-0.6b gate/up");
    gemm(lt, ws, wsb, 2048, 1024, 3072, "qwen3-0.6b down");
    return 0;
}
