/* elementwise.cu — the small memory-bound ops: GLU, add, add_bias, gather_rows.
 *
 * References: ref_glu (backend/cpu/ref.c) and the loops in cpu_backend.c. One thread per
 * element (grid-stride); the activations use the same full-precision expf/tanhf formulas
 * as the CPU (glu_act.cuh, shared with the GEMV that fuses the GLU: matmul_gemv.cu).
 * gather_rows takes its indices from the host and assumes y and x do not
 * overlap (the CPU's memmove allows it; no model relies on it). */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/glu_act.cuh"

__global__ void glu_kernel(float *y, const float *g, const float *u, size_t n, int gelu) {
    pdl_trigger(); /* PDL (cuda_common.cuh): the next kernel may launch; g, u read after the wait */
    pdl_wait();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) y[i] = glu_act(g[i], u[i], gelu);
}

__global__ void add_kernel(float *y, const float *x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) y[i] += x[i];
}

__global__ void add_bias_kernel(float *y, const float *b, size_t total, int n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) y[i] += b[i % n];
}

__global__ void gather_rows_kernel(float *y, const float *x, const int32_t *idx, int width) {
    const float *src = x + (size_t)idx[blockIdx.x] * width;
    float *dst = y + (size_t)blockIdx.x * width;
    for (int i = threadIdx.x; i < width; i += blockDim.x) dst[i] = src[i];
}

static int grid_for(size_t n) {
    size_t b = (n + 255) / 256;
    return (int)(b < 65535 * 4 ? b : 65535 * 4);
}

void cuda_glu(backend_t *be, float *y, const float *g, const float *u, size_t n, act_t act) {
    if (!n) return;
    cuda_launch_pdl(cuda_impl(be)->stream, glu_kernel, grid_for(n), 256, 0, y, g, u, n, (int)(act == ACT_GELU_TANH));
}

void cuda_add(backend_t *be, float *y, const float *x, size_t n) {
    if (!n) return;
    add_kernel<<<grid_for(n), 256, 0, cuda_impl(be)->stream>>>(y, x, n);
    cudaLaunchCheck();
}

void cuda_add_bias(backend_t *be, float *y, const float *b, int T, int n) {
    size_t total = (size_t)T * n;
    if (!total) return;
    add_bias_kernel<<<grid_for(total), 256, 0, cuda_impl(be)->stream>>>(y, b, total, n);
    cudaLaunchCheck();
}

void cuda_gather_rows(backend_t *be, float *y, const float *x, const int32_t *idx, int n, int width) {
    if (n <= 0) return;
    cuda_impl_t *c = cuda_impl(be);
    const int32_t *d = (const int32_t *)cuda_host_to_dev(c, idx, sizeof(int32_t) * n);
    gather_rows_kernel<<<n, 256, 0, c->stream>>>(y, x, d, width);
    cudaLaunchCheck();
}
