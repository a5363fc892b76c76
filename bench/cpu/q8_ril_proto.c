/* q8_ril_proto.c — a prototype, not used by kiln: 8-bit MLX decode GEMV with W rows in the
 * 16 lanes against the committed q8tile (float: per 16 codes vpmovzxbd, cvt, mul, fma), on the
 * one-token GEMV sequence of qwen3-0.6b / llama-3.2-1b (2 MB pages). Companion of
 * q4_ril_proto.c (same harness).
 *
 * Layout (a repack at load would be needed): tiles of 16 W rows, per 4-byte word (4 codes)
 * the 16 rows side by side; scales/biases [tile][group][16 rows]. x per group as q4i_prepare
 * does it (p = 2^(E-22), three signed-byte digits) but in column order; per word 3 vpdpbusd
 * with m32{1to16} x digits (digit 0 then 1 in one int32 chain: |S0·256 + S1| < 2^31 for G = 64
 * and codes <= 255; digit 2 in another), one fold per (group, 16 rows):
 * tv = fma(f32(a01), 256, f32(a2)), acc = fma(s·p, tv, acc). ~3.3 vector ops per 64 B of
 * codes instead of 16; the same per-group integer fold would serve a GEMM (T > 1) at about
 * gemm_fk's op count (3 dp + a per-group fold per 64 (x row, W row, code) elements vs 4 fma),
 * which is what a real path needs for "row alone = in a batch". Numerics: x rounded to 23
 * bits per group (as the q4 VNNI path), one more rounding in tv. G = 64, N % 16 == 0 here.
 *
 * Build: gcc -O2 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx2 -mfma -mf16c -Isrc \
 *          -o /tmp/q8ril bench/cpu/q8_ril_proto.c build/libkilncore.a -lm -lpthread
 * Run:   /tmp/q8ril THREADS MODEL(0 qwen3-0.6b, 1 llama-3.2-1b, 2 L2-resident 256x1024) TOKENS */
#include <pthread.h>
#include <stdio.h>
#include <math.h>
#include <sys/mman.h>
#define simd_avx512 simd_avx512_proto8
#include "../../src/backend/cpu/matmul_avx512.c"
#undef simd_avx512
#pragma GCC push_options
#pragma GCC target("avx512vnni")
#include "ril_pack.h"
typedef ril_t r8_t;
static void r8_pack(r8_t *r, const weight_t *w) { ril_pack_bits(r, w, 8); }
typedef struct { int8_t *xd; float *pv, *xg; } x8_t; /* xd: [digit][K] column order */
static void x8_prepare(x8_t *q, const float *x, int K, int G) {
    int ng = K / G;
    q->xd = aligned_alloc(64, 3 * (size_t)K + 64); q->pv = aligned_alloc(64, 4 * (size_t)ng + 64); q->xg = aligned_alloc(64, 4 * (size_t)ng + 64);
    for (int g = 0; g < ng; g++) {
        __m512 mx = _mm512_setzero_ps(), sx = _mm512_setzero_ps();
        for (int i = 0; i < G; i += 16) { __m512 xv = _mm512_loadu_ps(x + g * G + i); mx = _mm512_max_ps(mx, _mm512_abs_ps(xv)); sx = _mm512_add_ps(sx, xv); }
        q->xg[g] = _mm512_reduce_add_ps(sx);
        float m = _mm512_reduce_max_ps(mx); int E = 0;
        if (m == 0.f) q->pv[g] = 1.f; else { frexpf(m, &E); if (E < -126) E = -126; q->pv[g] = ldexpf(1.f, E - 22); }
        __m512 ev = _mm512_set1_ps((float)(22 - E));
        for (int i = 0; i < G; i += 16) {
            __m512i xi = _mm512_cvtps_epi32(_mm512_scalef_ps(_mm512_loadu_ps(x + g * G + i), ev));
            __m512i d2 = _mm512_srai_epi32(_mm512_slli_epi32(xi, 24), 24);
            __m512i r = _mm512_srai_epi32(_mm512_sub_epi32(xi, d2), 8);
            __m512i d1 = _mm512_srai_epi32(_mm512_slli_epi32(r, 24), 24);
            __m512i d0 = _mm512_srai_epi32(_mm512_sub_epi32(r, d1), 8);
            _mm_storeu_si128((__m128i *)(q->xd + g * G + i), _mm512_cvtepi32_epi8(d0));
            _mm_storeu_si128((__m128i *)(q->xd + K + g * G + i), _mm512_cvtepi32_epi8(d1));
            _mm_storeu_si128((__m128i *)(q->xd + 2 * K + g * G + i), _mm512_cvtepi32_epi8(d2));
        }
    }
}
#define DPB(acc, u, p) __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u), "m"(*(const int32_t *)(p)))
static inline __m512 bf16x16(const uint16_t *p) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16)); }
static void r8_tile(float *y, const x8_t *q, const r8_t *r, int t) {
    int K = r->K, ng = r->ng, nwd = K / 4;
    const uint8_t *cp = r->codes + (size_t)t * nwd * 64;
    const uint16_t *sp = r->sc + (size_t)t * ng * 16, *bp = r->bi + (size_t)t * ng * 16;
    __m512 acc = _mm512_setzero_ps();
    for (int g = 0; g < ng; g++) acc = _mm512_fmadd_ps(bf16x16(bp + (size_t)g * 16), _mm512_set1_ps(q->xg[g]), acc);
    for (int g = 0; g < ng; g++) { /* G = 64: 16 words */
        const uint8_t *c = cp + (size_t)g * 16 * 64;
        const int8_t *e = q->xd + g * 64;
        __m512i v[16], a0 = _mm512_setzero_si512(), a2 = _mm512_setzero_si512();
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) {
            _mm_prefetch((const char *)c + i * 64 + 8192, _MM_HINT_T0);
            v[i] = _mm512_loadu_si512(c + i * 64);
            DPB(a0, v[i], e + 4 * i);
            DPB(a2, v[i], e + 2 * K + 4 * i);
        }
        a0 = _mm512_slli_epi32(a0, 8);
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) DPB(a0, v[i], e + K + 4 * i);
        __m512 tv = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a0), _mm512_set1_ps(256.f), _mm512_cvtepi32_ps(a2));
        acc = _mm512_fmadd_ps(_mm512_mul_ps(bf16x16(sp + (size_t)g * 16), _mm512_set1_ps(q->pv[g])), tv, acc);
    }
    _mm512_storeu_ps(y + (size_t)t * 16, acc);
}
static void r8_dec(float *y, const float *x, const r8_t *r, const weight_t *w, int j0, int j1) {
    x8_t q; x8_prepare(&q, x, w->cols, w->group);
    for (int t = j0 / 16; t < j1 / 16; t++) r8_tile(y, &q, r, t);
    free(q.xd); free(q.pv); free(q.xg);
}
static void q8dec_committed(float *y, const float *x, const weight_t *w, int j0, int j1) {
    int ngp; float *xg = group_sums(x, 1, w->cols, w->group, &ngp);
    int j = j0;
    for (; j + 4 <= j1; j += 4) q8tile(y, x, xg, w, j, 4);
    for (; j < j1; j++) q8tile(y, x, xg, w, j, 1);
    free(xg);
}
#pragma GCC pop_options
#define RIL_T r8_t
#define RIL_PACK r8_pack
#define RIL_DEC r8_dec
#define RIL_COMMITTED q8dec_committed
#define RIL_BITS 8
#include "ril_harness.h"
