/* embed.cu — token embeddings: y[T, cols] = row ids[t] of W (any stored dtype) * scale.
 *
 * Reference: ref_embed (backend/cpu/ref.c) over weight_row_f32. One block per token; the
 * element decode is wload(), the device twin of weight_row_f32, so quantized embeddings
 * (MLX q4 tied embeddings) are dequantized a row at a time, never as a whole. */
#include "backend/cuda/cuda_common.cuh"

__global__ void embed_kernel(float *y, const int32_t *ids, dweight_t w, float scale) {
    int r = ids[blockIdx.x];
    float *yt = y + (size_t)blockIdx.x * w.cols;
    for (int c = threadIdx.x; c < w.cols; c += blockDim.x) {
        float v = wload(w, r, c);
        yt[c] = scale != 1.0f ? v * scale : v;
    }
}

void cuda_embed(backend_t *be, float *y, const int32_t *ids, int T, const weight_t *w, float scale) {
    if (T <= 0) return;
    cuda_impl_t *c = cuda_impl(be);
    const int32_t *d = (const int32_t *)cuda_host_to_dev(c, ids, sizeof(int32_t) * T);
    embed_kernel<<<T, 256, 0, c->stream>>>(y, d, *(const dweight_t *)w->device, scale);
    cudaLaunchCheck();
}
