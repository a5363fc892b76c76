/* avx512_common.h — small AVX-512 helpers shared by the AVX-512 kernel files
 * (matmul_avx512.c, matmul_amx_avx512.c). Include only from files compiled for AVX-512. */
#ifndef KILN_AVX512_COMMON_H
#define KILN_AVX512_COMMON_H

#include <immintrin.h>
#include <stddef.h>
#include "tensor/dtype.h"

/* Up to 16 consecutive per-group scales (or biases) of one row as f32 lanes, zeros past n. */
static inline __attribute__((always_inline)) __m512 sb16(const void *p, dtype_t t, size_t i, int n) {
    __mmask16 m = n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
    if (t == DT_F32) return _mm512_maskz_loadu_ps(m, (const float *)p + i);
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)p + i);
    if (t == DT_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

#endif
