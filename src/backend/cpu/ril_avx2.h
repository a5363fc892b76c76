/* ril_avx2.h — what the AVX2 family's rows-in-lanes kernels (matmul_q4ril_avx2.c,
 * matmul_q8ril_avx2.c) share: x's per-group scale and digits, scale/bias loads, the x digit
 * broadcast, the affine fold and the store masks. Include only from *_avx2.c files. */
#ifndef KILN_RIL_AVX2_H
#define KILN_RIL_AVX2_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include "backend/cpu/cpu_kernels.h"

#define AI static inline __attribute__((always_inline))

/* 2^e as a float for e in [-149, 127] (subnormal below -126), built from its bits: ldexpf
 * went through libm's scalbnf, ~1 % of an AVX2 decode's samples (three calls a group) */
AI float pow2f(int e) {
    union { uint32_t u; float f; } v;
    v.u = e >= -126 ? (uint32_t)(e + 127) << 23 : 1u << (e + 149);
    return v.f;
}

/* One group of G columns of x (G % 8 == 0): its f32 sum (8-lane partial sums, then a fixed tree)
 * into *xs, and p = 2^(E-22) with max|x| < 2^E (NaN if the group holds a NaN or Inf, 1 if all
 * zero; E = 0 then), E clamped to -126 so that p stays a (denormal) float. */
AI float ril_group_scan(const float *xg, int G, float *xs, int *Eo) {
    __m256 mx = _mm256_setzero_ps(), sx = _mm256_setzero_ps();
    int nan = 0;
    for (int i = 0; i < G; i += 8) {
        __m256 v = _mm256_loadu_ps(xg + i);
        nan |= _mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        mx = _mm256_max_ps(mx, _mm256_andnot_ps(_mm256_set1_ps(-0.f), v));
        sx = _mm256_add_ps(sx, v);
    }
    float lane[8], mval = 0.f;
    _mm256_storeu_ps(lane, mx);
    for (int i = 0; i < 8; i++) mval = lane[i] > mval ? lane[i] : mval;
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(sx), _mm256_extractf128_ps(sx, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    *xs = _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
    int E = 0;
    float p;
    if (nan || !(mval <= 3.4028235e38f)) p = NAN;
    else if (mval == 0.f) p = 1.f;
    else {
        frexpf(mval, &E);
        if (E < -126) E = -126;
        p = pow2f(E - 22);
    }
    *Eo = E;
    return p;
}

/* 8 columns of x as xi = round(x / p) (x · 2^(22-E) as two exact power-of-two products: 2^(22-E)
 * may pass f32's range), split exactly into signed bytes xi = d0·2^16 + d1·2^8 + d2; a NaN group
 * (p NaN) gets digits 0 */
AI void ril_digits8(__m256i d[3], const float *x, float p, int E) {
    int s = 22 - E, s1 = s / 2;
    __m256i v = isnan(p) ? _mm256_setzero_si256()
                         : _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x), _mm256_set1_ps(pow2f(s1))),
                                                            _mm256_set1_ps(pow2f(s - s1))));
    __m256i d2 = _mm256_srai_epi32(_mm256_slli_epi32(v, 24), 24);
    __m256i r = _mm256_srai_epi32(_mm256_sub_epi32(v, d2), 8);
    __m256i d1 = _mm256_srai_epi32(_mm256_slli_epi32(r, 24), 24);
    d[0] = _mm256_srai_epi32(_mm256_sub_epi32(r, d1), 8);
    d[1] = d1;
    d[2] = d2;
}

/* 32 int32 values (four vectors, columns in order; each fits a byte) as 32 bytes in column order */
AI __m256i pack32b(__m256i v0, __m256i v1, __m256i v2, __m256i v3) {
    __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(v0, v1), _mm256_packs_epi32(v2, v3));
    return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* 8 consecutive scales (or biases) as f32 */
AI __m256 sb8f(const void *p, dtype_t t, size_t i) {
    if (t == DT_F32) return _mm256_loadu_ps((const float *)p + i);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + i));
    if (t == DT_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* the 4 x digits at p broadcast to every lane */
typedef int32_t i32_alias __attribute__((may_alias));
AI __m256i bc(const int8_t *p) { return _mm256_set1_epi32(*(const i32_alias *)p); }

/* The fold of one (token, group, 8 rows): see the top. */
AI __m256 fold8(__m256 acc, __m256i a0, __m256i a1, __m256i a2, __m256 bias, __m256 scale, float xs, float pv) {
    __m256i a01 = _mm256_add_epi32(_mm256_slli_epi32(a0, 8), a1);
    __m256 tv = _mm256_fmadd_ps(_mm256_cvtepi32_ps(a01), _mm256_set1_ps(256.f), _mm256_cvtepi32_ps(a2));
    acc = _mm256_fmadd_ps(bias, _mm256_set1_ps(xs), acc);
    return _mm256_fmadd_ps(_mm256_mul_ps(scale, _mm256_set1_ps(pv)), tv, acc);
}

/* v & 0x0F in every byte, the mask a memory operand: decode's twelve chains, two code vectors and
 * a broadcast then fit the 16 ymm registers (with the mask in one, gcc spilled three chains) */
static const uint8_t nib_mask[32] __attribute__((aligned(32))) = {15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15,
                                                                  15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15};
AI __m256i and_m4(__m256i v) {
    __m256i r;
    __asm__("vpand %1, %2, %0" : "=x"(r) : "m"(*(const __m256i *)nib_mask), "x"(v));
    return r;
}

/* lanes [l0, l1) of 8 as a maskstore mask */
AI __m256i lanes8(int l0, int l1) {
    __m256i i = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_and_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(l1), i), _mm256_cmpgt_epi32(i, _mm256_set1_epi32(l0 - 1)));
}

#endif
