/* kv_cache.cu — writing a step's K and V into the paged cache.
 *
 * Reference: ref_kv_write (backend/cpu/ref.c). Slot s of a layer is the contiguous run
 * [s * n_kv_heads * head_dim, ...); values are rounded to the cache dtype with the same
 * round-to-nearest-even as the CPU's f32_to_bf16/f32_to_f16 (CUDA's __float2*_rn). */
#include "backend/cuda/cuda_common.cuh"

__global__ void kv_write_kernel(void *kc, void *vc, int dt, const float *k, const float *v, const int32_t *slots, int per) {
    size_t dst = (size_t)slots[blockIdx.x] * per, src = (size_t)blockIdx.x * per;
    for (int i = threadIdx.x; i < per; i += blockDim.x) {
        float a = k[src + i], b = v[src + i];
        if (dt == DT_F32) { ((float *)kc)[dst + i] = a; ((float *)vc)[dst + i] = b; }
        else if (dt == DT_F16) { ((__half *)kc)[dst + i] = __float2half_rn(a); ((__half *)vc)[dst + i] = __float2half_rn(b); }
        else { ((__nv_bfloat16 *)kc)[dst + i] = __float2bfloat16_rn(a); ((__nv_bfloat16 *)vc)[dst + i] = __float2bfloat16_rn(b); }
    }
}

void cuda_kv_write(backend_t *be, const kv_view_t *kv, const float *k, const float *v, const int32_t *slots, int T) {
    if (T <= 0) return;
    cuda_impl_t *c = cuda_impl(be);
    const int32_t *d = (const int32_t *)cuda_host_to_dev(c, slots, sizeof(int32_t) * T);
    int per = kv->n_kv_heads * kv->head_dim;
    kv_write_kernel<<<T, per < 256 ? 128 : 256, 0, c->stream>>>(kv->k, kv->v, kv->dtype, k, v, d, per);
    cudaLaunchCheck();
}
