/* matmul_gemv.cu — y[T, N] = x[T, K] · Wᵀ for small T (decode): one warp per output row.
 *
 * Reference: ref_matmul (backend/cpu/ref.c). Batch-1 decode reads every weight once per
 * token, so this kernel is about bandwidth: each lane streams 16-byte pieces of its row
 * (8 bf16/f16 values, 4 f32, or one 32-column unit of packed MLX codes: `bits` words)
 * and uses each piece for all T ≤ 8 tokens of the step. x stays f32 and is read through
 * L1 (it is tiny and shared by the warps of a block). Quantized values are dequantized in
 * registers, w = scale * code + bias, exactly as weight_row_f32 does.
 *
 * Order: lane l accumulates units l, l+32, ... in order, then a fixed xor-shuffle tree;
 * nothing depends on T, so a token's outputs are bitwise the same alone or with others. */
#include "backend/cuda/cuda_common.cuh"

#define GEMV_TMAX 8
#define GEMV_WARPS 4

enum { K_F32, K_F16, K_BF16, K_QUANT };

template <int BITS>
__device__ __forceinline__ void load_words(const uint32_t *p, uint32_t *w) {
    if constexpr (BITS % 4 == 0) {
#pragma unroll
        for (int i = 0; i < BITS / 4; i++) {
            uint4 v = __ldg((const uint4 *)p + i);
            w[4 * i] = v.x; w[4 * i + 1] = v.y; w[4 * i + 2] = v.z; w[4 * i + 3] = v.w;
        }
    } else if constexpr (BITS == 2 || BITS == 6) {
#pragma unroll
        for (int i = 0; i < BITS / 2; i++) {
            uint2 v = __ldg((const uint2 *)p + i);
            w[2 * i] = v.x; w[2 * i + 1] = v.y;
        }
    } else {
#pragma unroll
        for (int i = 0; i < BITS; i++) w[i] = __ldg(p + i);
    }
}

/* Code j (0..31) of a 32-column unit held in BITS words; j and BITS are compile-time. */
template <int BITS>
__device__ __forceinline__ uint32_t unit_code(const uint32_t *w, int j) {
    const int bit = j * BITS, word = bit >> 5, off = bit & 31;
    uint32_t v = w[word] >> off;
    if (off + BITS > 32) v |= w[word + 1] << (32 - off);
    return v & ((1u << BITS) - 1);
}

__device__ __forceinline__ void fma_tokens(float (&acc)[GEMV_TMAX], const float *x, size_t K, int T, int col, const float (&wv)[4]) {
#pragma unroll
    for (int t = 0; t < GEMV_TMAX; t++)
        if (t < T) {
            float4 xv = __ldg((const float4 *)(x + t * K + col));
            acc[t] = fmaf(wv[0], xv.x, acc[t]);
            acc[t] = fmaf(wv[1], xv.y, acc[t]);
            acc[t] = fmaf(wv[2], xv.z, acc[t]);
            acc[t] = fmaf(wv[3], xv.w, acc[t]);
        }
}

template <int KIND, int BITS>
__global__ void __launch_bounds__(GEMV_WARPS * 32) gemv_kernel(float *__restrict__ y, const float *__restrict__ x, int T, dweight_t w) {
    const int lane = threadIdx.x & 31, n = blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    if (n >= w.rows) return;
    const size_t K = (size_t)w.cols;
    float acc[GEMV_TMAX];
#pragma unroll
    for (int t = 0; t < GEMV_TMAX; t++) acc[t] = 0.f;
    if constexpr (KIND == K_QUANT) {
        const uint32_t *row = (const uint32_t *)w.data + (size_t)n * (K / 32) * BITS;
        const int units = (int)(K / 32), ng = (int)(K / w.group);
        const size_t sb = (size_t)n * ng;
#pragma unroll 2
        for (int u = lane; u < units; u += 32) {
            uint32_t words[BITS];
            load_words<BITS>(row + (size_t)u * BITS, words);
            const int g = u * 32 / w.group;
            const float s = ld_f(w.scales, w.sb_dtype, sb + g), b = ld_f(w.biases, w.sb_dtype, sb + g);
#pragma unroll
            for (int q = 0; q < 8; q++) {
                float wv[4];
#pragma unroll
                for (int j = 0; j < 4; j++) wv[j] = s * (float)unit_code<BITS>(words, 4 * q + j) + b;
                fma_tokens(acc, x, K, T, u * 32 + 4 * q, wv);
            }
        }
    } else if constexpr (KIND == K_F32) {
        const float *row = (const float *)w.data + (size_t)n * K;
        const int units = (int)(K / 4);
#pragma unroll 4
        for (int u = lane; u < units; u += 32) {
            float4 v = __ldg((const float4 *)row + u);
            float wv[4] = {v.x, v.y, v.z, v.w};
            fma_tokens(acc, x, K, T, u * 4, wv);
        }
    } else {
        const uint16_t *row = (const uint16_t *)w.data + (size_t)n * K;
        const int units = (int)(K / 8);
#pragma unroll 4
        for (int u = lane; u < units; u += 32) {
            uint4 v = __ldg((const uint4 *)row + u);
            const uint32_t pk[4] = {v.x, v.y, v.z, v.w};
            float wv[8];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                if constexpr (KIND == K_BF16) {
                    wv[2 * i] = __uint_as_float(pk[i] << 16);
                    wv[2 * i + 1] = __uint_as_float(pk[i] & 0xffff0000u);
                } else {
                    wv[2 * i] = __half2float(__ushort_as_half((unsigned short)(pk[i] & 0xffffu)));
                    wv[2 * i + 1] = __half2float(__ushort_as_half((unsigned short)(pk[i] >> 16)));
                }
            }
            const float lo[4] = {wv[0], wv[1], wv[2], wv[3]}, hi[4] = {wv[4], wv[5], wv[6], wv[7]};
            fma_tokens(acc, x, K, T, u * 8, lo);
            fma_tokens(acc, x, K, T, u * 8 + 4, hi);
        }
    }
#pragma unroll
    for (int t = 0; t < GEMV_TMAX; t++) {
        float v = acc[t];
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0 && t < T) y[(size_t)t * w.rows + n] = v;
    }
}

/* Returns 0 when the shape/alignment suits the GEMV kernels (and launches), -1 otherwise. */
int cuda_gemv(cuda_impl_t *c, float *y, const float *x, int T, const dweight_t *w) {
    if (T > GEMV_TMAX || ((uintptr_t)x & 15)) return -1;
    dim3 grid(cdiv(w->rows, GEMV_WARPS)), block(GEMV_WARPS * 32);
    cudaStream_t s = c->stream;
    switch (w->dtype) {
    case DT_F32: if (w->cols % 4) return -1; gemv_kernel<K_F32, 0><<<grid, block, 0, s>>>(y, x, T, *w); break;
    case DT_F16: if (w->cols % 8) return -1; gemv_kernel<K_F16, 0><<<grid, block, 0, s>>>(y, x, T, *w); break;
    case DT_BF16: if (w->cols % 8) return -1; gemv_kernel<K_BF16, 0><<<grid, block, 0, s>>>(y, x, T, *w); break;
    case DT_U32:
        switch (w->bits) {
        case 2: gemv_kernel<K_QUANT, 2><<<grid, block, 0, s>>>(y, x, T, *w); break;
        case 3: gemv_kernel<K_QUANT, 3><<<grid, block, 0, s>>>(y, x, T, *w); break;
        case 4: gemv_kernel<K_QUANT, 4><<<grid, block, 0, s>>>(y, x, T, *w); break;
        case 5: gemv_kernel<K_QUANT, 5><<<grid, block, 0, s>>>(y, x, T, *w); break;
        case 6: gemv_kernel<K_QUANT, 6><<<grid, block, 0, s>>>(y, x, T, *w); break;
        case 8: gemv_kernel<K_QUANT, 8><<<grid, block, 0, s>>>(y, x, T, *w); break;
        default: return -1;
        }
        break;
    default: return -1;
    }
    cudaLaunchCheck();
    return 0;
}
