/* attention_tile_avx512.c — the attention tile (attention_tile_body.h) on AVX-512: 16
 * query lanes per vector, explicit FMA intrinsics (the build keeps -ffp-contract=off, so
 * nothing fuses unless written as an FMA). */
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
        for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(s + i))));
    else
        for (; i + 16 <= n; i += 16)
            _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(s + i))), 16)));
    for (; i < n; i++) dst[i] = load_as_f32(src, t, i);
}

/* 16×16 transpose in registers: r[i][j] -> r[j][i] */
static inline __attribute__((always_inline)) void at_tr16(__m512 r[16]) {
    __m512 t[16];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        r[4 * i + 0] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++)
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            t[8 * h + i] = _mm512_shuffle_f32x4(r[8 * h + i], r[8 * h + 4 + i], 0x88);
            t[8 * h + 4 + i] = _mm512_shuffle_f32x4(r[8 * h + i], r[8 * h + 4 + i], 0xdd);
        }
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
        r[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xdd);
    }
}

/* Decode tiles (AT_KT): the K rows of keys [ja, jb] of a block (rows[j], any KV dtype),
 * converted to f32 and stored transposed, Kt[d·32 + j] (keys outside [ja, jb]: 0), so the
 * keys-in-lanes scores load K[·][d] for 16 keys with one load instead of a gather. The
 * values are the converted ones, exactly: only their place changes. hd % 16 == 0.
 * Keys outside [ja, jb] read a row of zeros (at_kt_zero, f16/bf16/f32 +0 all convert to
 * +0, as _mm512_setzero_ps gave), so the 16 loads, the transpose and the 16 stores of a
 * 16×16 piece are straight-line code on registers (the per-row branch and dtype test kept
 * r[] on the stack, and the K loads stalled one after another behind them). */
static const float at_kt_zero[512] __attribute__((aligned(64)));

static inline __attribute__((always_inline)) void at_kt_piece(float *Kt, const char *const *rows, int d0, int g, const int T) {
    __m512 r[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) {
        if (T == DT_F16) r[i] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(rows[g + i] + (size_t)d0 * 2)));
        else if (T == DT_BF16)
            r[i] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(rows[g + i] + (size_t)d0 * 2))), 16));
        else r[i] = _mm512_loadu_ps((const float *)(rows[g + i] + (size_t)d0 * 4));
    }
    at_tr16(r);
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) _mm512_store_ps(Kt + (size_t)(d0 + i) * 32 + g, r[i]);
}

/* f16 rows, 32 d at a time: the 16 rows' 64-byte runs transposed as 16×16 32-bit elements (each
 * a pair of halves d, d + 1 of one key), then one vpermw per pair row splits the even and odd d
 * (keys 0..15 of d in the low 256 bits, of d + 1 in the high) and two converts widen them: the
 * same f32 values in the same places as two at_kt_piece calls, with half the shuffles. */
static inline __attribute__((always_inline)) void at_kt_piece2_f16(float *Kt, const char *const *rows, int d0, int g) {
    __m512 r[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) r[i] = _mm512_castsi512_ps(_mm512_loadu_si512((const void *)(rows[g + i] + (size_t)d0 * 2)));
    at_tr16(r);
    const __m512i eo = _mm512_set_epi16(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1,
                                        30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
#pragma GCC unroll 16
    for (int p = 0; p < 16; p++) {
        __m512i h = _mm512_permutexvar_epi16(eo, _mm512_castps_si512(r[p]));
        _mm512_store_ps(Kt + (size_t)(d0 + 2 * p) * 32 + g, _mm512_cvtph_ps(_mm512_castsi512_si256(h)));
        _mm512_store_ps(Kt + (size_t)(d0 + 2 * p + 1) * 32 + g, _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1)));
    }
}

static int kt_pairs = -1; /* KILN_KT_PAIRS=0: the 16×16 f32 pieces for f16 too (A/B) */

static void at_kt_block(float *Kt, const void *const *rows_in, dtype_t t, int hd, int ja, int jb) {
    const char *rows[32];
    int esz = t == DT_F32 ? 4 : 2;
    for (int j = 0; j < 32; j++) rows[j] = j < ja || j > jb ? (const char *)at_kt_zero : (const char *)rows_in[j];
    int z = (size_t)hd * esz > sizeof at_kt_zero && (ja > 0 || jb < 31);
    if (z) /* a row longer than the zero row: zero keys one by one */
        for (int j = 0; j < 32; j++)
            if (j < ja || j > jb) rows[j] = NULL;
    if (kt_pairs < 0) {
        const char *e = getenv("KILN_KT_PAIRS");
        kt_pairs = !(e && *e == '0');
    }
    if (t == DT_F16 && !z && hd % 32 == 0 && kt_pairs) {
        for (int g = 0; g < 32; g += 16)
            for (int d0 = 0; d0 < hd; d0 += 32) at_kt_piece2_f16(Kt, rows, d0, g);
        return;
    }
    for (int g = 0; g < 32; g += 16)
        for (int d0 = 0; d0 < hd; d0 += 16) {
            if (z) { /* (hd > 256 with masked keys only) */
                __m512 r[16];
                for (int i = 0; i < 16; i++) {
                    const char *p = rows[g + i];
                    r[i] = !p ? _mm512_setzero_ps()
                         : t == DT_F32 ? _mm512_loadu_ps((const float *)p + d0)
                         : t == DT_F16 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)p + d0)))
                         : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)p + d0))), 16));
                }
                at_tr16(r);
                for (int i = 0; i < 16; i++) _mm512_store_ps(Kt + (size_t)(d0 + i) * 32 + g, r[i]);
                continue;
            }
            if (t == DT_F16) at_kt_piece(Kt, rows, d0, g, DT_F16);
            else if (t == DT_BF16) at_kt_piece(Kt, rows, d0, g, DT_BF16);
            else at_kt_piece(Kt, rows, d0, g, DT_F32);
        }
}

/* *acc = fma(k, broadcast *q, *acc) with q as the FMA's broadcast memory operand (written
 * out: GCC otherwise hoists the 64 broadcasts of a piece into registers and spills them) */
static inline __attribute__((always_inline)) void at_fma_b(__m512 *acc, __m512 k, const float *q) {
    __asm__("vfmadd231ps %2%{1to16%}, %1, %0" : "+v"(*acc) : "v"(k), "m"(*q));
}

/* Decode scores straight from f16 K rows (AT_KS): the keys-in-lanes scores of _scores_few_n
 * (kt, kl) without the transposed f32 block in between. Each 16-key × 32-d piece is
 * transposed in registers as at_kt_piece2_f16 does and its 32 converted d vectors go
 * straight into the FMA chains: S[i·32 + j] = (Σ_d fma(q_i[d], K[j][d], ·) in d order from
 * +0) · scale — the same operands in the same order, so the same bits as the Kt store and
 * reload it replaces (test_kernels' decode-vs-whole-step tiles are bitwise). The two 16-key
 * groups' pieces alternate, so one's shuffles overlap the other's FMA chains. rows: 32 row pointers (keys outside the block's
 * range: a zero row, as at_kt_block; their scores are masked by the caller). */
static inline __attribute__((always_inline)) void at_ks_f16_n(float *const *S, const float *const *Qt, const char *const *rows,
                                                              size_t hoff, int hd, float scale, const int NQ, const int NH) {
    enum { nqp = 16 }; /* a decode tile's one lane vector: Qt[d·16 + i] (a constant: no per-d offsets) */
    __m512 acc[2][4][2];
    const __m512i eo = _mm512_set_epi16(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1,
                                        30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
#pragma GCC unroll 2
    for (int h = 0; h < NH; h++)
#pragma GCC unroll 4
        for (int i = 0; i < NQ; i++) acc[h][i][0] = acc[h][i][1] = _mm512_setzero_ps();
    for (int d0 = 0; d0 < hd; d0 += 32)
#pragma GCC unroll 2
        for (int g = 0; g < 32; g += 16)
#pragma GCC unroll 2
            for (int h = 0; h < NH; h++) {
                __m512 r[16];
                __asm__ volatile("" ::: "memory"); /* the piece's loads not hoisted above the last piece's FMAs (spills) */
#pragma GCC unroll 16
                for (int i = 0; i < 16; i++)
                    r[i] = _mm512_castsi512_ps(_mm512_loadu_si512((const void *)(rows[g + i] + h * hoff + (size_t)d0 * 2)));
                at_tr16(r);
                const float *qd = Qt[h] + (size_t)d0 * nqp;
#pragma GCC unroll 16
                for (int p = 0; p < 16; p++) {
                    __m512i x = _mm512_permutexvar_epi16(eo, _mm512_castps_si512(r[p]));
                    __m512 k0 = _mm512_cvtph_ps(_mm512_castsi512_si256(x)), k1 = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(x, 1));
#pragma GCC unroll 4
                    for (int i = 0; i < NQ; i++) at_fma_b(&acc[h][i][g / 16], k0, &qd[(2 * p) * nqp + i]);
#pragma GCC unroll 4
                    for (int i = 0; i < NQ; i++) at_fma_b(&acc[h][i][g / 16], k1, &qd[(2 * p + 1) * nqp + i]);
                }
            }
    __m512 sc = _mm512_set1_ps(scale);
#pragma GCC unroll 2
    for (int h = 0; h < NH; h++)
#pragma GCC unroll 4
        for (int i = 0; i < NQ; i++) {
            _mm512_storeu_ps(S[h] + (size_t)i * 32, _mm512_mul_ps(acc[h][i][0], sc));
            _mm512_storeu_ps(S[h] + (size_t)i * 32 + 16, _mm512_mul_ps(acc[h][i][1], sc));
        }
}

static int ks_on = -1; /* KILN_ATTN_KS: 0 (default) the transposed f32 block and _scores_few; 1 one
                        * head per call; 2 two KV heads per call where the item has them. Opt-in:
                        * kiln-attn-bench warm 0.048-0.050 (0) / 0.045-0.046 (1) / 0.043 (2) ms per
                        * layer, cold not resolved, whole-model A/B not resolved (bench/cpu/
                        * RESULTS-attention.md, helper-61) */

/* at_ks serves these K rows: 0 no, 1 one head at a time, 2 also two heads together (f16, hd a
 * multiple of 32; the zero row covers one or two heads' rows) */
static int at_ks_ok(dtype_t t, int hd) {
    if (ks_on < 0) {
        const char *e = getenv("KILN_ATTN_KS");
        ks_on = e && *e ? atoi(e) : 0;
    }
    if (!ks_on || t != DT_F16 || hd % 32 || (size_t)hd * 2 > sizeof at_kt_zero) return 0;
    return ks_on >= 2 && (size_t)hd * 4 <= sizeof at_kt_zero ? 2 : 1;
}

/* scores of a decode block's 32 keys (rows_in[j] for j in [ja, jb]) for nq <= 4 queries,
 * keys layout S[i·32 + j]; with S2/Qt2, the same for the next KV head too (its rows hd
 * elements after rows_in's), both heads' chains interleaved (twice the independent FMA
 * chains: one head's 4 chains of 128 dependent FMAs are the latency floor of a block) */
static __attribute__((noinline)) void at_ks(float *S, const float *Qt, float *S2, const float *Qt2, const void *const *rows_in,
                                            int nqp, int hd, int nq, float scale, int ja, int jb) {
    const char *rows[32];
    for (int j = 0; j < 32; j++) rows[j] = j < ja || j > jb ? (const char *)at_kt_zero : (const char *)rows_in[j];
    if (nqp != 16) abort(); /* (nq <= 4: one lane vector) */
    float *Sv[2] = {S, S2};
    const float *Qv[2] = {Qt, Qt2};
    size_t hoff = (size_t)hd * 2;
    if (S2) switch (nq) {
        case 1: at_ks_f16_n(Sv, Qv, rows, hoff, hd, scale, 1, 2); break;
        case 2: at_ks_f16_n(Sv, Qv, rows, hoff, hd, scale, 2, 2); break;
        case 3: at_ks_f16_n(Sv, Qv, rows, hoff, hd, scale, 3, 2); break;
        case 4: at_ks_f16_n(Sv, Qv, rows, hoff, hd, scale, 4, 2); break;
        }
    else switch (nq) {
        case 1: at_ks_f16_n(Sv, Qv, rows, hoff, hd, scale, 1, 1); break;
        case 2: at_ks_f16_n(Sv, Qv, rows, hoff, hd, scale, 2, 1); break;
        case 3: at_ks_f16_n(Sv, Qv, rows, hoff, hd, scale, 3, 1); break;
        case 4: at_ks_f16_n(Sv, Qv, rows, hoff, hd, scale, 4, 1); break;
        }
}

#define AT_KT at_kt_block
#define AT_KS at_ks
#define AT_KS_OK at_ks_ok
#define AT_NAME attn_tile_avx512
#define AT_VW 16
#define AT_CB 8
#define AT_V __m512
#define AT_VI __m512i
#define AT_M __mmask16
#define AT_LOAD(p) _mm512_loadu_ps(p)
#define AT_STORE(p, x) _mm512_storeu_ps(p, x)
#define AT_SET1(x) _mm512_set1_ps(x)
#define AT_ZERO() _mm512_setzero_ps()
#define AT_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define AT_FNMA(a, b, c) _mm512_fnmadd_ps(a, b, c)
#define AT_MUL(a, b) _mm512_mul_ps(a, b)
#define AT_ADD(a, b) _mm512_add_ps(a, b)
#define AT_SUB(a, b) _mm512_sub_ps(a, b)
#define AT_MAX(a, b) _mm512_max_ps(a, b)
#define AT_ROUND(x) _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define AT_POW2I(n) _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23))
#define AT_LOADI(p) _mm512_loadu_si512((const void *)(p))
#define AT_SET1I(x) _mm512_set1_epi32(x)
#define AT_ILE(a, b) _mm512_cmple_epi32_mask(a, b)
#define AT_MAND(a, b) ((__mmask16)((a) & (b)))
#define AT_MNONE(m) ((m) == 0)
#define AT_SEL(m, a, b) _mm512_mask_blend_ps(m, b, a)
#define AT_FEQ(a, b) _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ)
#define AT_TO_F32 at_to_f32
#define AT_HMAX(x) _mm512_reduce_max_ps(x)
#define AT_LOADH(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
/* 16 elements of a 16-bit cache row widened to f32 in the load: f16 by vcvtph2ps, bf16 (BF, a
 * constant where it is used) by zero-extending and shifting into the high half — both exact */
#define AT_LOADB(p) _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p))), 16))
#define AT_LOAD16(p, BF) ((BF) ? AT_LOADB(p) : AT_LOADH(p))
/* 16 int8 codes widened to f32 (exact; the caller multiplies by the row's scale) */
#define AT_LOADQ8(p) _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(p))))
/* a cache element run of dtype KT (0 f16, 1 bf16, 2 f32, 3 int8 codes; a constant) at byte address p */
#define AT_LOADKV(p, KT) ((KT) == 2 ? _mm512_loadu_ps((const float *)(p)) : (KT) == 3 ? AT_LOADQ8(p) : AT_LOAD16((const uint16_t *)(p), (KT) == 1))
#define AT_DQ 4
#define AT_DEC_PAIR 1 /* the decode walk scores two KV heads at once (32 registers hold both) */
#define AT_IOTA() _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
#define AT_ADD_I(a, b) _mm512_add_epi32(a, b)
#define AT_MULLO_I(a, b) _mm512_mullo_epi32(a, b)
#define AT_GATHER(p, idx) _mm512_i32gather_ps(idx, p, 4)
#include "backend/cpu/attention_tile_body.h"
