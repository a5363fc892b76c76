/* wgx.cuh — x prepared for the 64-token 4/8-bit matmul (matmul_wgmma.cu) by the norm that produces it.
 *
 * The matmul's x preparation (wg_xprep_kernel) writes f16(x_t·2^e_t) of each token t in the B operand's
 * core-matrix order — [K/64 chunks][4 k-steps][NP/8][2 k-halves][8 tokens][8 columns] — with e_t from
 * max|x_t| (wg_exp) and 1/2^e_t per token, tokens T..NP−1 zero. rms_norm and add_rms_norm (rmsnorm.cu,
 * a block per token) hold a token's whole output row: where the next quantized matmul of 9..64 tokens
 * will take that row (a hint the matmul leaves: its K and NP), the norm writes this form too — the same
 * floats, maximum and roundings, so the matmul's results are bitwise those of its own preparation — and
 * the matmul skips its preparation launch (one kernel and one PDL hop less, twice a llama layer). The
 * record of it lives with the batch-1 GEMV's prepared x in xprep.cu and is forgotten by the same op
 * wrappers (any other op, or a matmul writing over x). */
#pragma once
#include <cuda_fp16.h>
#include "backend/cuda/cuda_common.cuh"

/* the exponent e with m·2^e in [2^14, 2^15) (0 for m = 0, inf or NaN), within ±60 (so 2^-(e+s) stays a normal f32):
 * the 64-token kernels', matmul_dequant.cu's and the fused prefill ops' producers' one definition */
__device__ __forceinline__ int wg_exp(float m) {
    if (!(m > 0.f) || !isfinite(m)) return 0;
    int k;
    frexpf(m, &k);
    const int e = 15 - k;
    return e < -60 ? -60 : e > 60 ? 60 : e;
}
__device__ __forceinline__ float wg_pow2(int e) { return __int_as_float((127 + e) << 23); }

/* the prepared x's tiles of K columns in bucket NP, in bytes (1/2^e per token follows them) */
static inline size_t wgx_xbytes(int K, int NP) { return (size_t)(K / 64) * NP * 128; }
/* where a norm writes the prepared x: xo (the chunk-ordered f16 tiles), inv[NP], the step's T and the bucket NP */
struct wgx_dst {
    __half *xo;
    float *inv;
    int T, NP;
};
/* token t's float4 fi (columns 4·fi .. 4·fi + 3) times px: wg_xprep_kernel's halves for them */
__device__ __forceinline__ void wgx_put(const wgx_dst &d, int t, int fi, float4 o, float px) {
    const int k0 = 8 * (fi >> 1), ch = k0 >> 6, s = (k0 >> 4) & 3, h = (k0 >> 3) & 1;
    const size_t off = (size_t)ch * 64 * d.NP + (size_t)s * 16 * d.NP + (t >> 3) * 128 + h * 64 + (t & 7) * 8 + (fi & 1) * 4;
    __align__(8) __half2 v[2] = {__floats2half2_rn(o.x * px, o.y * px), __floats2half2_rn(o.z * px, o.w * px)};
    *(uint2 *)(d.xo + off) = *(const uint2 *)v;
}

/* host side (xprep.cu): the hint (the matmul's K and bucket), a norm's request for the buffer (NULL: not
 * wanted), the record after its launch, the matmul's lookup (NULL: none for this x, T, K, NP) */
void cuda_wgx_note(cuda_impl_t *c, int K, int NP);
unsigned char *cuda_wgx_want(cuda_impl_t *c, int T, int K, int *NP);
void cuda_wgx_set(cuda_impl_t *c, const float *y, int T, int K, int NP);
const unsigned char *cuda_wgx_get(cuda_impl_t *c, const float *x, int T, int K, int NP);
