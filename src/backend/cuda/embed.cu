/* embed.cu — token embeddings: y[T, cols] = row ids[t] of W (any stored dtype) * scale.
 *
 * Reference: ref_embed (backend/cpu/ref.c) over weight_row_f32. The element decode is wload(),
 * the device twin of weight_row_f32, so quantized embeddings (MLX q4 tied embeddings) are
 * dequantized a row at a time, never as a whole. embed_cols_kernel: a thread per element, blocks
 * of 128 columns (x: token, y: column block), so one token's row is spread over the GPU (the
 * one-block-per-token embed_kernel ran a batch-1 row in 12.3 us, each thread's 16 elements one
 * dependent load chain; KILN_CUDA_EMBED_V=1 keeps it). Same element values either way. */
#include "backend/cuda/cuda_common.cuh"

__global__ void embed_kernel(float *y, const int32_t *ids, dweight_t w, float scale) {
    int r = ids[blockIdx.x];
    float *yt = y + (size_t)blockIdx.x * w.cols;
    for (int c = threadIdx.x; c < w.cols; c += blockDim.x) {
        float v = wload(w, r, c);
        yt[c] = scale != 1.0f ? v * scale : v;
    }
}

__global__ void embed_cols_kernel(float *y, const int32_t *ids, dweight_t w, float scale) {
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= w.cols) return;
    const int r = ids[blockIdx.x];
    const float v = wload(w, r, c);
    y[(size_t)blockIdx.x * w.cols + c] = scale != 1.0f ? v * scale : v;
}

void cuda_embed(backend_t *be, float *y, const int32_t *ids, int T, const weight_t *w, float scale) {
    if (T <= 0) return;
    cuda_impl_t *c = cuda_impl(be);
    const int32_t *d = (const int32_t *)cuda_host_to_dev(c, ids, sizeof(int32_t) * T);
    static int v1 = -1;
    if (v1 < 0) { const char *e = getenv("KILN_CUDA_EMBED_V"); v1 = e && !strcmp(e, "1"); }
    const dweight_t *dw = (const dweight_t *)w->device;
    if (v1 || dw->cols > 65535 * 128) embed_kernel<<<T, 256, 0, c->stream>>>(y, d, *dw, scale);
    else embed_cols_kernel<<<dim3(T, (dw->cols + 127) / 128), 128, 0, c->stream>>>(y, d, *dw, scale);
    cudaLaunchCheck();
}
