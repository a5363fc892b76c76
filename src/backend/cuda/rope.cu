/* rope.cu — rotate-half RoPE in place on x[T, n_heads, head_dim].
 *
 * Reference: ref_rope in backend/cpu/ref.c. One thread per (token, frequency i) computes
 * cos/sin once (full-precision cosf/sinf, as the CPU does) and rotates the pair
 * (i, i + rot/2) in every head. The frequencies come from the host (the model recomputes
 * them per row for dynamic NTK scaling), so they travel like the positions do. */
#include "backend/cuda/cuda_common.cuh"

/* A thread per (token, head, rotated pair): at batch-1 decode the old thread-per-pair loop
 * over heads was a chain of dependent loads (~10 us per call for 32 heads). */
__global__ void rope_kernel(float *x, const int32_t *pos, int T, int nh, int hd, int half, const float *inv, float ms) {
    const size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (idx >= (size_t)T * nh * half) return;
    const int i = (int)(idx % half);
    const size_t th = idx / half; /* t * nh + h */
    const int t = (int)(th / nh);
    const float ang = (float)pos[t] * inv[i];
    const float c = cosf(ang) * ms, s = sinf(ang) * ms;
    float *v = x + th * hd;
    const float a = v[i], b = v[i + half];
    v[i] = a * c - b * s;
    v[i + half] = b * c + a * s;
}

void cuda_rope(backend_t *be, float *x, const int32_t *pos, int T, int nh, int hd, int rot, const float *inv, float ms) {
    int half = rot / 2;
    if (T <= 0 || half <= 0) return;
    cuda_impl_t *c = cuda_impl(be);
    size_t pb = sizeof(int32_t) * T, ib = sizeof(float) * half;
    char *hb = (char *)cuda_host_buf(c, 1, pb + ib);
    memcpy(hb, pos, pb);
    memcpy(hb + pb, inv, ib);
    const char *d = (const char *)cuda_host_to_dev(c, hb, pb + ib);
    const int32_t *dpos = (const int32_t *)d;
    const float *dinv = (const float *)(d + pb);
    const size_t n = (size_t)T * nh * half;
    rope_kernel<<<cdiv((long)n, 128), 128, 0, c->stream>>>(x, dpos, T, nh, hd, half, dinv, ms);
    cudaLaunchCheck();
}
