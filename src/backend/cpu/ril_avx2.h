/* ril_avx2.h — what the AVX2 family's rows-in-lanes kernels (matmul_q4ril_avx2.c,
 * matmul_q8ril_avx2.c) share: x's per-group scale and digits (the group scan also serves the
 * row-major integer paths, matmul_qi_avx2.c), scale/bias loads, the x digit broadcast, the affine
 * fold, the stores and the GEMM's walk. Include only from *_avx2.c files. */
#ifndef KILN_RIL_AVX2_H
#define KILN_RIL_AVX2_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_scratch.h"

#define AI static inline __attribute__((always_inline))

/* x prepared for one weight: per token the digits of its nw code words (wb bytes a word: 24 for
 * 4-bit words of 8 columns, 12 for 8-bit words of 4), and p and the group sum per group */
typedef struct {
    int8_t *xd;     /* [T][nw][wb] */
    float *pv, *xs; /* [T][ng] */
    int K, G, nw, ng;
} ril_x_t;

/* The header and the arrays of a ril_x_t for T tokens, in the thread's XPREP scratch (cpu_scratch.h:
 * valid until the thread's next prepare); NULL when out of memory. */
static inline ril_x_t *ril_x_alloc(int T, const weight_t *w, int nw, int wb) {
    int ng = w->cols / w->group;
    size_t hs = (sizeof(ril_x_t) + 63) & ~(size_t)63, xdb = ((size_t)T * nw * wb + 63) & ~(size_t)63;
    char *m = cpu_scratch(CPU_SCRATCH_XPREP, hs + xdb + sizeof(float) * 2 * (size_t)T * ng);
    if (!m) return NULL;
    ril_x_t *q = (ril_x_t *)m;
    q->xd = (int8_t *)(m + hs);
    q->pv = (float *)((char *)q->xd + xdb);
    q->xs = q->pv + (size_t)T * ng;
    q->K = w->cols, q->G = w->group, q->nw = nw, q->ng = ng;
    return q;
}


/* 2^e as a float for e in [-149, 127] (subnormal below -126), built from its bits: ldexpf
 * went through libm's scalbnf, ~1 % of an AVX2 decode's samples (three calls a group) */
AI float pow2f(int e) {
    union { uint32_t u; float f; } v;
    v.u = e >= -126 ? (uint32_t)(e + 127) << 23 : 1u << (e + 149);
    return v.f;
}

/* A weight the rows-in-lanes kernels take (any width they handle): one full tile at least, groups of
 * 32/64/128 dividing K (so K % 32 == 0: whole 32-column chunks) */
static inline int ril_shape_ok(const weight_t *w) {
    return weight_is_quantized(w) && w->rows >= 16 && (w->group == 32 || w->group == 64 || w->group == 128) && w->cols % w->group == 0;
}

/* One group of G columns of x (G % 8 == 0): its f32 sum (8-lane partial sums, then a fixed tree)
 * into *xs, and p = 2^(E-XB) with max|x| < 2^E, so that xi = round(x / p) has at most XB + 1 bits
 * (NaN if the group holds a NaN or Inf, 1 if all zero; E = 0 then), E clamped to -126 so that p
 * stays a (denormal) float. The row-major integer paths (matmul_qi_avx2.c, XB 22 or 21) and the
 * rows-in-lanes ones (XB 22) share it. */
AI float ril_group_scan(const float *xg, int G, float *xs, int *Eo, const int XB) {
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
        p = pow2f(E - XB);
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

/* one token's results for a tile (acc[0]: rows 0-7, acc[1]: 8-15), lanes [l0, l1) of its 16 */
AI void ril_store16(float *yt, const __m256 *acc, int l0, int l1) {
    if (l0 == 0 && l1 == 16) {
        _mm256_storeu_ps(yt, acc[0]);
        _mm256_storeu_ps(yt + 8, acc[1]);
        return;
    }
    if (l0 < 8) _mm256_maskstore_ps(yt, lanes8(l0, l1 < 8 ? l1 : 8), acc[0]);
    if (l1 > 8) _mm256_maskstore_ps(yt + 8, lanes8(l0 > 8 ? l0 - 8 : 0, l1 - 8), acc[1]);
}

/* NT tokens' results for half a tile (8 rows from yt, token stride N), lanes [l0, l1) */
AI void ril_store(float *yt, size_t N, const __m256 *acc, int l0, int l1, const int NT) {
#pragma GCC unroll 4
    for (int a = 0; a < NT; a++) {
        if (l0 == 0 && l1 == 8) _mm256_storeu_ps(yt + (size_t)a * N, acc[a]);
        else _mm256_maskstore_ps(yt + (size_t)a * N, lanes8(l0, l1), acc[a]);
    }
}

/* The GEMM's walk over T tokens and rows [j0, j1) in full tiles: tokens in chunks whose prepared
 * x (xtok bytes a token) stays near 256 KB, per chunk every half tile (h: rows 8h..8h+7, lanes
 * [l0, l1) of it) against 4 tokens at a time, then the 1-3 left; TILE(a, t, h, l0, l1, NT)
 * computes tokens a.. of one (a macro: TILE is inlined with NT a constant). */
#define RIL_GEMM_WALK(T, j0, j1, xtok, TILE)                                                         \
    do {                                                                                              \
        int tc_ = (int)(262144 / (xtok)) & ~3;                                                        \
        if (tc_ < 4) tc_ = 4;                                                                         \
        for (int t0_ = 0; t0_ < (T); t0_ += tc_) {                                                    \
            int t1_ = t0_ + tc_ < (T) ? t0_ + tc_ : (T);                                              \
            for (int t = (j0) / 16; t * 16 < (j1); t++)                                               \
                for (int h = 0; h < 2; h++) {                                                         \
                    int r0_ = t * 16 + 8 * h, l0 = (j0) > r0_ ? (j0) - r0_ : 0, l1 = (j1) < r0_ + 8 ? (j1) - r0_ : 8; \
                    if (l0 >= l1) continue;                                                           \
                    int a = t0_;                                                                      \
                    for (; a + 4 <= t1_; a += 4) TILE(a, t, h, l0, l1, 4);                           \
                    switch (t1_ - a) {                                                                \
                    case 3: TILE(a, t, h, l0, l1, 3); break;                                          \
                    case 2: TILE(a, t, h, l0, l1, 2); break;                                          \
                    case 1: TILE(a, t, h, l0, l1, 1); break;                                          \
                    }                                                                                 \
                }                                                                                     \
        }                                                                                             \
    } while (0)

/* x rows [0, T) prepared for w (ril_x_t in the thread's scratch; NULL: out of memory). W8 0: the
 * 4-bit layout, per 8-column code word 24 bytes [d0 even 4][d0 odd 4][d1 even][d1 odd][d2 even]
 * [d2 odd] (even: columns 0, 2, 4, 6 = the words' low nibbles); W8 1: the 8-bit layout, per
 * 4-column word 12 bytes [d0 4][d1 4][d2 4]. p and the group sums from ril_group_scan. */
static inline ril_x_t *ril_prepare(const float *x, int T, const weight_t *w, const int W8) {
    int K = w->cols, G = w->group, nw = W8 ? K / 4 : K / 8, wb = W8 ? 12 : 24, ng = K / G;
    ril_x_t *q = ril_x_alloc(T, w, nw, wb);
    if (!q) return NULL;
    /* per 128-bit lane: bytes in column order -> per 8 columns [even 4][odd 4] */
    const __m256i eo = _mm256_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15, 0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12,
                                        14, 9, 11, 13, 15);
    for (size_t t = 0; t < (size_t)T; t++) {
        const float *xt = x + t * K;
        int8_t *xd = q->xd + t * nw * wb;
        for (int g = 0; g < ng; g++) {
            const float *xg = xt + (size_t)g * G;
            int E;
            float p = ril_group_scan(xg, G, &q->xs[t * ng + g], &E, 22);
            q->pv[t * ng + g] = p;
            for (int i = 0; i < G; i += 32) { /* 32 columns: four 4-bit words, eight 8-bit ones */
                __m256i d[4][3];
                for (int k = 0; k < 4; k++) ril_digits8(d[k], xg + i + 8 * k, p, E);
                int8_t *o = xd + (size_t)(g * G + i) / (W8 ? 4 : 8) * wb;
                for (int k = 0; k < 3; k++) {
                    __m256i b = pack32b(d[0][k], d[1][k], d[2][k], d[3][k]); /* digit k of the 32 columns in order */
                    uint8_t u[32];
                    _mm256_storeu_si256((__m256i *)u, W8 ? b : _mm256_shuffle_epi8(b, eo));
                    for (int wd = 0; wd < (W8 ? 8 : 4); wd++) memcpy(o + wd * wb + (W8 ? 4 : 8) * k, u + wd * (W8 ? 4 : 8), W8 ? 4 : 8);
                }
            }
        }
    }
    return q;
}

#endif
