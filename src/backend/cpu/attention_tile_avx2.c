/* attention_tile_avx2.c — the attention tile (attention_tile_body.h) on AVX2: 8 query
 * lanes per vector, explicit FMA intrinsics (the build keeps -ffp-contract=off). */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/attention_tile.h"
#include "tensor/dtype.h"

/* f16/bf16 row → f32 (any tail scalar) */
static void at_to_f32(float *dst, const void *src, dtype_t t, int n) {
    const uint16_t *s = src;
    int i = 0;
    if (t == DT_F16)
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
    else
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s + i))), 16)));
    for (; i < n; i++) dst[i] = load_as_f32(src, t, i);
}

/* Kt[d·32 + j] = K row j (keys [ja, jb]; the others 0) as f32: the decode tile's transposed block
 * for a cache whose K is not transposed (block sizes not a multiple of 16; the CPU pool transposes
 * K otherwise, and decode then scores from the cache runs themselves) — plain loops */
static void at_kt_block(float *Kt, const void *const *rows, dtype_t t, int hd, int ja, int jb) {
    for (int j = 0; j < 32; j++)
        for (int d = 0; d < hd; d++) Kt[(size_t)d * 32 + j] = j < ja || j > jb ? 0.f : load_as_f32(rows[j], t, (size_t)d);
}
static inline float at_hmax8(__m256 x) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}

/* the decode tiles' direct paths (attention_tile_body.h, AT_LOADH): K/V read from the cache
 * rows, widened in the load — until session 36 only the AVX-512 family had them, and AVX2's
 * decode attention converted every block to f32 scratch first (5x AVX-512's time a layer) */
#define AT_KT at_kt_block
#define AT_HMAX(x) at_hmax8(x)
#define AT_LOADH(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define AT_LOADB(p) _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p))), 16))
#define AT_LOAD16(p, BF) ((BF) ? AT_LOADB(p) : AT_LOADH(p))
#define AT_LOADKV(p, KT) ((KT) == 2 ? _mm256_loadu_ps((const float *)(p)) : (KT) == 3 ? AT_LOADQ8(p) : AT_LOAD16((const uint16_t *)(p), (KT) == 1))
#define AT_NAME attn_tile_avx2
#define AT_VW 8
#define AT_CB 4
#define AT_V __m256
#define AT_VI __m256i
#define AT_M __m256i
#define AT_LOAD(p) _mm256_loadu_ps(p)
#define AT_STORE(p, x) _mm256_storeu_ps(p, x)
#define AT_SET1(x) _mm256_set1_ps(x)
#define AT_ZERO() _mm256_setzero_ps()
#define AT_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define AT_FNMA(a, b, c) _mm256_fnmadd_ps(a, b, c)
#define AT_MUL(a, b) _mm256_mul_ps(a, b)
#define AT_ADD(a, b) _mm256_add_ps(a, b)
#define AT_SUB(a, b) _mm256_sub_ps(a, b)
#define AT_MAX(a, b) _mm256_max_ps(a, b)
#define AT_ROUND(x) _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define AT_POW2I(n) _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23))
#define AT_LOADI(p) _mm256_loadu_si256((const __m256i *)(p))
#define AT_SET1I(x) _mm256_set1_epi32(x)
/* a <= b lane-wise as all-ones lanes */
#define AT_ILE(a, b) _mm256_xor_si256(_mm256_cmpgt_epi32(a, b), _mm256_set1_epi32(-1))
#define AT_MAND(a, b) _mm256_and_si256(a, b)
#define AT_MNONE(m) _mm256_testz_si256(m, m)
#define AT_SEL(m, a, b) _mm256_blendv_ps(b, a, _mm256_castsi256_ps(m))
#define AT_FEQ(a, b) _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_EQ_OQ))
#define AT_TO_F32 at_to_f32
/* 8 int8 codes widened to f32 (exact; the caller multiplies by the scale) */
#define AT_LOADQ8(p) _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p))))
#define AT_DQ 2
#define AT_DEC_PAIR 0 /* one KV head at a time (16 registers: two heads' chains would spill) */
#define AT_IOTA() _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)
#define AT_ADD_I(a, b) _mm256_add_epi32(a, b)
#define AT_MULLO_I(a, b) _mm256_mullo_epi32(a, b)
#define AT_GATHER(p, idx) _mm256_i32gather_ps(p, idx, 4)
#include "backend/cpu/attention_tile_body.h"
