/* rope_pair.cuh — the RoPE rotation shared by rope.cu's kernels and attention.cu's fused decode
 * kernel (attn_dec_mma_kernel<.., ROPE>), and the fused op's entry. */
#ifndef KILN_ROPE_PAIR_CUH
#define KILN_ROPE_PAIR_CUH
#include "backend/cuda/cuda_common.cuh"

/* Rotates pair (i, i + half) of head vector v in place by position p (rotate-half RoPE,
 * ref_rope): the one formula rope.cu's kernels and attention.cu's fused decode kernel use, so
 * their q, k and cache values are the same bits. The roundings are spelled out (intrinsics
 * ptxas does not contract): a·c − b·s with both products rounded, b·c + a·s as one fma on the
 * rounded b·c (what nvvm emitted for the plain expressions; the subtraction was left to ptxas,
 * whose choice could differ between kernels). rope_cs + rope_rot = rope_pair: the fused kernel
 * takes the angles' cos/sin before it waits for q and k. */
__device__ __forceinline__ void rope_cs(int i, int p, const float *inv, float ms, float &c, float &s) {
    const float ang = (float)p * inv[i];
    c = cosf(ang) * ms;
    s = sinf(ang) * ms;
}
/* the pair (a, b) in registers: ra, rb (may alias a, b) */
__device__ __forceinline__ void rope_rot2(float a, float b, float c, float s, float &ra, float &rb) {
    const float x = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
    rb = __fmaf_rn(s, a, __fmul_rn(c, b));
    ra = x;
}
__device__ __forceinline__ void rope_rot(float *v, int i, int half, float c, float s, float &ra, float &rb) {
    rope_rot2(v[i], v[i + half], c, s, ra, rb);
    v[i] = ra;
    v[i + half] = rb;
}
__device__ __forceinline__ void rope_pair(float *v, int i, int half, int p, const float *inv, float ms, float &ra, float &rb) {
    float c, s;
    rope_cs(i, p, inv, ms, c, s);
    rope_rot(v, i, half, c, s, ra, rb);
}

/* norm_rope_kv_attention as one decode kernel (attention.cu; qn/kn: qwen3's head norms, NULL: none): 1 if
 * it ran, 0 if the step is not one it takes (the caller runs the separate ops) */
int cuda_rope_attention_decode(backend_t *be, float *out, float *q, float *k, const float *v, const float *qn, const float *kn, float eps,
                               int rot, const float *inv, float ms, const int32_t *slots, int T, const attn_args_t *a);

#endif
