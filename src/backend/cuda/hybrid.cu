/* hybrid.cu — ops the hybrid and MoE families (qwen3_5, gemma3/4) appended to backend.h.
 *
 * References: ref_sigmoid_mul, ref_scale, ref_add_rows_scaled (backend/cpu). The three
 * element-wise ones are here; the causal conv1d and the gated delta rule are not ported yet:
 * they stop with a message naming the op rather than crash (docs/cuda.md, "missing"). */
#include "backend/cuda/cuda_common.cuh"

__global__ void sigmoid_mul_kernel(float *y, const float *g, size_t total, int n, int gw) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        float gv = gw == 1 ? g[i / n] : g[i];
        y[i] *= 1.0f / (1.0f + expf(-gv));
    }
}

__global__ void scale_kernel(float *y, float s, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) y[i] *= s;
}

/* One thread per column walks i in order, so repeated indices add in the CPU's order. */
__global__ void add_rows_scaled_kernel(float *y, const float *x, const int32_t *idx, const float *wt, int n, int width) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= width) return;
    for (int i = 0; i < n; i++) y[(size_t)idx[i] * width + c] += wt[i] * x[(size_t)i * width + c];
}

static int grid_for(size_t n) { size_t b = (n + 255) / 256; return (int)(b < 65535 * 4 ? b : 65535 * 4); }

void cuda_sigmoid_mul(backend_t *be, float *y, const float *g, int T, int n, int g_width) {
    size_t total = (size_t)T * n;
    if (!total) return;
    sigmoid_mul_kernel<<<grid_for(total), 256, 0, cuda_impl(be)->stream>>>(y, g, total, n, g_width);
    cudaLaunchCheck();
}

void cuda_scale(backend_t *be, float *y, float s, size_t n) {
    if (!n) return;
    scale_kernel<<<grid_for(n), 256, 0, cuda_impl(be)->stream>>>(y, s, n);
    cudaLaunchCheck();
}

void cuda_add_rows_scaled(backend_t *be, float *y, const float *x, const int32_t *idx, const float *wt, int n, int width) {
    if (n <= 0) return;
    cuda_impl_t *c = cuda_impl(be);
    size_t ib = ((sizeof(int32_t) * n + 15) & ~(size_t)15), wb = sizeof(float) * n;
    char *hb = (char *)cuda_host_buf(c, 1, ib + wb);
    memcpy(hb, idx, sizeof(int32_t) * n);
    memcpy(hb + ib, wt, wb);
    const char *d = (const char *)cuda_host_to_dev(c, hb, ib + wb);
    add_rows_scaled_kernel<<<cdiv(width, 128), 128, 0, c->stream>>>(y, x, (const int32_t *)d, (const float *)(d + ib), n, width);
    cudaLaunchCheck();
}

void cuda_conv1d_causal(backend_t *be, float *y, const float *x, int n_rows, const int32_t *row_start, float *const *state,
                        const float *w, int C, int K, act_t act) {
    fprintf(stderr, "kiln cuda: conv1d_causal (qwen3_5 linear attention) is not implemented on the CUDA backend yet; use --backend cpu\n");
    abort();
}

void cuda_gated_delta(backend_t *be, float *out, const float *qkv, const float *a, const float *b, int T, const struct delta_args *d) {
    fprintf(stderr, "kiln cuda: gated_delta (qwen3_5 linear attention) is not implemented on the CUDA backend yet; use --backend cpu\n");
    abort();
}
