/* matmul_avx512.c — AVX-512 kernels: y[T, N] = x[T, K] · Wᵀ for every weight dtype.
 *
 * The hot spot of the whole program. Each output element is one 16-lane accumulator
 * walked over K in chunks of 16 (the last chunk masked), then one fixed horizontal sum:
 * so an element's value depends only on its x row and W row, never on T, on the tile it
 * fell in, or on the thread. Tiles give the speed: 4 x rows × 4 W rows share their loads
 * (16 accumulators + 8 operands fit in the 32 zmm registers), and T is walked in chunks
 * sized so the x chunk stays in L2 while W streams through once per chunk. Weights are
 * converted (bf16/f16) or dequantized (MLX affine: w = scale*code + bias) 16 at a time
 * in registers; there is never a dequantized copy in memory. */
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_scratch.h"
#include "backend/cpu/avx512_common.h"
#include "backend/cpu/q8ril.h"
#include "backend/cpu/q4ril.h"

#define L 16
#define AI static inline __attribute__((always_inline))

/* Decode: the scales and biases of the row the codes prefetch is reaching (as many rows
 * ahead as PF_AHEAD bytes of codes), one line at a time. They are a separate stream of
 * 2 x ng x 2 bytes per row that nothing fetched early: the first use in a tile stalled. */
AI void pf_sb(const weight_t *w, int r, size_t row_bytes) {
    /* f32, f16 or bf16 (what sb16 reads); inline: dtype_size is a call in another unit, per row */
    size_t ng = (size_t)(w->cols / w->group), sz = w->sb_dtype == DT_F32 ? 4 : 2, ahead = PF_AHEAD(row_bytes) / row_bytes + 1;
    size_t o0 = (r + ahead) * ng * sz;
    for (size_t o = 0; o < ng * sz; o += 64) {
        _mm_prefetch((const char *)w->scales + o0 + o, _MM_HINT_T0);
        _mm_prefetch((const char *)w->biases + o0 + o, _MM_HINT_T0);
    }
}

typedef __m512 (*ldw_fn)(const weight_t *w, int r, int k, __mmask16 m);

AI __m512 ld_f32(const weight_t *w, int r, int k, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, (const float *)w->data + (size_t)r * w->cols + k);
}
AI __m512 ld_bf16(const weight_t *w, int r, int k, __mmask16 m) {
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)w->data + (size_t)r * w->cols + k);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
AI __m512 ld_f16(const weight_t *w, int r, int k, __mmask16 m) {
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)w->data + (size_t)r * w->cols + k);
    return _mm512_cvtph_ps(h);
}
/* One tile: NT x rows (from t) by NJ W rows (from j), over all of K. */
AI void tile(float *y, const float *x, const weight_t *w, int t, int j, const int NT, const int NJ, ldw_fn ld) {
    int K = w->cols, N = w->rows, nfull = K / L, rem = K % L;
    __m512 acc[4][4];
    #pragma GCC unroll 4
    for (int a = 0; a < NT; a++)
        #pragma GCC unroll 4
        for (int b = 0; b < NJ; b++) acc[a][b] = _mm512_setzero_ps();
    size_t esz = dtype_size(w->dtype), pfd = PF_AHEAD((size_t)K * esz);
    for (int c = 0; c < nfull; c++) {
        __m512 wv[4];
        if (NT == 1 && !(((size_t)c * L * esz) & 63)) /* decode: the weights stream once; ask for each line early */
            #pragma GCC unroll 4
            for (int b = 0; b < NJ; b++)
                _mm_prefetch((const char *)w->data + ((size_t)(j + b) * K + (size_t)c * L) * esz + pfd, _MM_HINT_T0);
        #pragma GCC unroll 4
        for (int b = 0; b < NJ; b++) wv[b] = ld(w, j + b, c * L, 0xffff);
        #pragma GCC unroll 4
        for (int a = 0; a < NT; a++) {
            __m512 xv = _mm512_loadu_ps(x + (size_t)(t + a) * K + c * L);
            #pragma GCC unroll 4
            for (int b = 0; b < NJ; b++) acc[a][b] = _mm512_fmadd_ps(xv, wv[b], acc[a][b]);
        }
    }
    if (rem) {
        __mmask16 m = (__mmask16)((1u << rem) - 1);
        __m512 wv[4];
        #pragma GCC unroll 4
        for (int b = 0; b < NJ; b++) wv[b] = ld(w, j + b, nfull * L, m);
        #pragma GCC unroll 4
        for (int a = 0; a < NT; a++) {
            __m512 xv = _mm512_maskz_loadu_ps(m, x + (size_t)(t + a) * K + nfull * L);
            #pragma GCC unroll 4
            for (int b = 0; b < NJ; b++) acc[a][b] = _mm512_fmadd_ps(xv, wv[b], acc[a][b]);
        }
    }
    #pragma GCC unroll 4
    for (int a = 0; a < NT; a++)
        #pragma GCC unroll 4
        for (int b = 0; b < NJ; b++) y[(size_t)(t + a) * N + j + b] = _mm512_reduce_add_ps(acc[a][b]);
}

/* Rows of x per chunk: keep the chunk near 256 KB so it stays in L2. */
static int t_chunk(int K) {
    int c = (65536 / (K > 0 ? K : 1)) & ~3;
    return c < 4 ? 4 : c;
}

AI void run(float *y, const float *x, int T, const weight_t *w, int j0, int j1, ldw_fn ld) {
    int tc = t_chunk(w->cols);
    for (int t0 = 0; t0 < T; t0 += tc) {
        int t1 = t0 + tc < T ? t0 + tc : T;
        int j = j0;
        for (; j + 4 <= j1; j += 4) {
            int t = t0;
            for (; t + 4 <= t1; t += 4) tile(y, x, w, t, j, 4, 4, ld);
            for (; t < t1; t++) tile(y, x, w, t, j, 1, 4, ld);
        }
        for (; j < j1; j++) {
            int t = t0;
            for (; t + 4 <= t1; t += 4) tile(y, x, w, t, j, 4, 1, ld);
            for (; t < t1; t++) tile(y, x, w, t, j, 1, 1, ld);
        }
    }
}


/* Codes only (the affine step is applied by qtile with per-group scale and bias). */
AI __m512 codes_q4(const uint8_t *row, int k) {
    __m128i b = _mm_loadl_epi64((const __m128i *)(row + k / 2));
    __m128i lo = _mm_and_si128(b, _mm_set1_epi8(15));
    __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(15));
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi)));
}
AI __m512 codes_q8(const uint8_t *row, int k) {
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(row + k))));
}
/* any width at run time (2, 3, 5 and 6 bits have their own tile, qbtile): the reference's extraction */
AI __m512 codes_any(const uint8_t *row, int k, int bits) {
    int32_t c[16];
    for (int i = 0; i < 16; i++) c[i] = (int32_t)weight_code((const uint32_t *)row, bits, k + i);
    return _mm512_cvtepi32_ps(_mm512_loadu_si512(c));
}

/* A tile over a quantized W: walks K group by group so each row's scale and bias are
 * read once per group (not per chunk), then dequantizes 16 codes at a time in registers:
 * w = fma(code, scale, bias), acc = fma(x, w, acc) — the same per-element arithmetic as
 * ld_q*, just without a division per chunk. BITS is a constant after inlining. */
AI void qtile(float *y, const float *x, const weight_t *w, int t, int j, const int NT, const int NJ, const int BITS) {
    int K = w->cols, N = w->rows, G = w->group, ng = K / G, bits = BITS ? BITS : w->bits;
    size_t row_bytes = (size_t)K * bits / 8;
    const uint8_t *rows[4];
    #pragma GCC unroll 4
    for (int b = 0; b < NJ; b++) rows[b] = (const uint8_t *)w->data + (size_t)(j + b) * row_bytes;
    __m512 acc[4][4];
    #pragma GCC unroll 4
    for (int a = 0; a < NT; a++)
        #pragma GCC unroll 4
        for (int b = 0; b < NJ; b++) acc[a][b] = _mm512_setzero_ps();
    for (int g = 0; g < ng; g++) {
        __m512 sv[4], bv[4];
        #pragma GCC unroll 4
        for (int b = 0; b < NJ; b++) {
            size_t gi = (size_t)(j + b) * ng + g;
            sv[b] = _mm512_set1_ps(load_as_f32(w->scales, w->sb_dtype, gi));
            bv[b] = _mm512_set1_ps(load_as_f32(w->biases, w->sb_dtype, gi));
        }
        for (int k = g * G; k < (g + 1) * G; k += 16) {
            __m512 wv[4];
            #pragma GCC unroll 4
            for (int b = 0; b < NJ; b++) {
                __m512 c = BITS == 4 ? codes_q4(rows[b], k) : BITS == 8 ? codes_q8(rows[b], k) : codes_any(rows[b], k, bits);
                wv[b] = _mm512_fmadd_ps(c, sv[b], bv[b]);
            }
            #pragma GCC unroll 4
            for (int a = 0; a < NT; a++) {
                __m512 xv = _mm512_loadu_ps(x + (size_t)(t + a) * K + k);
                #pragma GCC unroll 4
                for (int b = 0; b < NJ; b++) acc[a][b] = _mm512_fmadd_ps(xv, wv[b], acc[a][b]);
            }
        }
    }
    #pragma GCC unroll 4
    for (int a = 0; a < NT; a++)
        #pragma GCC unroll 4
        for (int b = 0; b < NJ; b++) y[(size_t)(t + a) * N + j + b] = _mm512_reduce_add_ps(acc[a][b]);
}

AI void qrun(float *y, const float *x, int T, const weight_t *w, int j0, int j1, const int BITS) {
    int tc = t_chunk(w->cols);
    for (int t0 = 0; t0 < T; t0 += tc) {
        int t1 = t0 + tc < T ? t0 + tc : T;
        int j = j0;
        for (; j + 4 <= j1; j += 4) {
            int t = t0;
            for (; t + 4 <= t1; t += 4) qtile(y, x, w, t, j, 4, 4, BITS);
            for (; t < t1; t++) qtile(y, x, w, t, j, 1, 4, BITS);
        }
        for (; j < j1; j++) {
            int t = t0;
            for (; t + 4 <= t1; t += 4) qtile(y, x, w, t, j, 4, 1, BITS);
            for (; t < t1; t++) qtile(y, x, w, t, j, 1, 1, BITS);
        }
    }
}

/* 4-bit codes, the fast way. A row's codes are read as 32-bit words: word i of a block
 * of 128 columns holds codes 8i..8i+7 (one nibble each). Loaded 16 words at a time, lane
 * i of (words >> 4n) has code 8i+n in its low nibble — and vpermps reads only bits 3:0 of
 * its index, so a permute of the constant [0, 1, ..., 15] turns it into the float code
 * with no mask and no conversion. 128 weights cost one load, 7 shifts and 8 permutes.
 * x is regrouped once per call to meet them: xq[b][n][i] = x[128b + 8i + n].
 *
 * The affine step is folded per lane, without horizontal sums: lane i's 8 columns lie in
 * one group, so the block's partial products (gacc, a plain chain over n) are scaled by a
 * vector of the lanes' group scales, acc = fma(svec, gacc, acc), after the bias term
 * dot(bias, group sums of x), 16 groups per fma. Per element: the same operations in the
 * same order in decode (q4tile) and in the GEMM for T > 1 (q4gemm); only the final lane
 * sum is horizontal. */

/* The bias term of one (x row, W row) pair, the first thing its accumulator gets. */
AI __m512 bias_term(const weight_t *w, int r, const float *xg) {
    int ng = w->cols / w->group;
    __m512 acc = _mm512_setzero_ps();
    for (int g0 = 0; g0 < ng; g0 += 16)
        acc = _mm512_fmadd_ps(sb16(w->biases, w->sb_dtype, (size_t)r * ng + g0, ng - g0), _mm512_loadu_ps(xg + g0), acc);
    return acc;
}

typedef struct { const float *xq, *xg; int K, nbt, ng, ngp, gshift; } q4x_t;

AI void q4tile(float *y, const q4x_t *q, const weight_t *w, int t, int j, const int NT, const int NJ) {
    int K = q->K, N = w->rows, ng = q->ng, bpsb = 16 * w->group / 128; /* blocks per 16 groups */
    size_t row_bytes = (size_t)K / 2, xstride = (size_t)q->nbt * 128;
    const uint8_t *rows[4];
    for (int b = 0; b < NJ; b++) rows[b] = (const uint8_t *)w->data + (size_t)(j + b) * row_bytes;
    const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i lane_grp = _mm512_srli_epi32(_mm512_setr_epi32(0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120), q->gshift);
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int a = 0; a < NT; a++)
#pragma GCC unroll 4
        for (int b = 0; b < NJ; b++) acc[a][b] = bias_term(w, j + b, q->xg + (size_t)(t + a) * q->ngp);
    if (NT == 1)
        for (int b = 0; b < NJ; b++) pf_sb(w, j + b, row_bytes);
    for (int g0 = 0, blk = 0; g0 < ng; g0 += 16) {
        __m512 s16[4];
#pragma GCC unroll 4
        for (int b = 0; b < NJ; b++) s16[b] = sb16(w->scales, w->sb_dtype, (size_t)(j + b) * ng + g0, ng - g0);
        int bend = blk + bpsb < q->nbt ? blk + bpsb : q->nbt;
        for (int bi = 0; blk < bend; blk++, bi++) {
            int cols = K - blk * 128 < 128 ? K - blk * 128 : 128;
            __mmask16 m = cols == 128 ? (__mmask16)0xffff : (__mmask16)((1u << (cols / 8)) - 1);
            __m512i gidx = _mm512_add_epi32(_mm512_set1_epi32(bi * 128 >> q->gshift), lane_grp);
            __m512i v[4];
            __m512 svec[4], gacc[4][4];
#pragma GCC unroll 4
            for (int b = 0; b < NJ; b++) {
                if (NT == 1) _mm_prefetch((const char *)rows[b] + (size_t)blk * 64 + PF_AHEAD(row_bytes), _MM_HINT_T0);
                v[b] = _mm512_maskz_loadu_epi32(m, rows[b] + (size_t)blk * 64);
                svec[b] = _mm512_permutexvar_ps(gidx, s16[b]);
            }
            const float *xb = q->xq + (size_t)t * xstride + (size_t)blk * 128;
#pragma GCC unroll 8
            for (int n = 0; n < 8; n++) {
                __m512 c[4];
#pragma GCC unroll 4
                for (int b = 0; b < NJ; b++) c[b] = _mm512_permutexvar_ps(n ? _mm512_srli_epi32(v[b], 4 * n) : v[b], iota);
#pragma GCC unroll 4
                for (int a = 0; a < NT; a++) {
                    __m512 xv = _mm512_loadu_ps(xb + (size_t)a * xstride + n * 16);
#pragma GCC unroll 4
                    for (int b = 0; b < NJ; b++) gacc[a][b] = n ? _mm512_fmadd_ps(xv, c[b], gacc[a][b]) : _mm512_mul_ps(xv, c[b]);
                }
            }
#pragma GCC unroll 4
            for (int a = 0; a < NT; a++)
#pragma GCC unroll 4
                for (int b = 0; b < NJ; b++) acc[a][b] = _mm512_fmadd_ps(svec[b], gacc[a][b], acc[a][b]);
        }
    }
#pragma GCC unroll 4
    for (int a = 0; a < NT; a++)
#pragma GCC unroll 4
        for (int b = 0; b < NJ; b++) y[(size_t)(t + a) * N + j + b] = _mm512_reduce_add_ps(acc[a][b]);
}

/* Regroups x for q4tile: per row, blocks of 128 columns as [nibble n][lane i] (a short
 * last block zero-padded), and the group sums of x in column order (zero-padded to 16). */
static int q4_prepare(q4x_t *q, const float *x, int T, const weight_t *w) {
    int K = w->cols, G = w->group;
    q->K = K; q->nbt = (K + 127) / 128; q->ng = K / G; q->ngp = (q->ng + 15) & ~15;
    q->gshift = G == 32 ? 5 : G == 64 ? 6 : 7;
    size_t xs = (size_t)q->nbt * 128;
    float *xq = aligned_alloc(64, sizeof(float) * ((size_t)T * xs + (size_t)T * q->ngp));
    if (!xq) return -1;
    float *xg = xq + (size_t)T * xs;
    for (size_t t = 0; t < (size_t)T; t++) {
        const float *xt = x + t * K;
        float *o = xq + t * xs;
        for (int b = 0; b < q->nbt; b++)
            for (int n = 0; n < 8; n++)
                for (int i = 0; i < 16; i++) {
                    int k = b * 128 + 8 * i + n;
                    o[b * 128 + n * 16 + i] = k < K ? xt[k] : 0.f;
                }
        for (int g = 0; g < q->ngp; g++) {
            float sum = 0.f;
            if (g < q->ng)
                for (int k = g * G; k < (g + 1) * G; k++) sum += xt[k];
            xg[t * q->ngp + g] = sum;
        }
    }
    q->xq = xq; q->xg = xg;
    return 0;
}

/* T > 1: the blocked GEMM's structure (see gemm below) with q4's per-element steps. A
 * panel is one block of 128 columns of GJ rows: its codes as floats [row][n][lane] and
 * each row's lane scales; the register tile is 4x4 partial sums (gacc) per block, folded
 * into the in-memory accumulators exactly as q4tile folds them. */
#define Q4GT 128 /* the most x rows per block (q4gemm picks 32 or 128) */
#define Q4GJ 8
AI void q4gemm_tile(__m512 *A, const float *xc, const float *P, const float *S, const int NT, const int NJ) {
    __m512 gacc[4][4];
#pragma GCC unroll 8
    for (int n = 0; n < 8; n++) {
        __m512 c[4];
#pragma GCC unroll 4
        for (int b = 0; b < NJ; b++) c[b] = _mm512_load_ps(P + b * 128 + n * 16);
#pragma GCC unroll 4
        for (int a = 0; a < NT; a++) {
            __m512 xv = _mm512_load_ps(xc + a * 128 + n * 16);
#pragma GCC unroll 4
            for (int b = 0; b < NJ; b++) gacc[a][b] = n ? _mm512_fmadd_ps(xv, c[b], gacc[a][b]) : _mm512_mul_ps(xv, c[b]);
        }
    }
#pragma GCC unroll 4
    for (int a = 0; a < NT; a++)
#pragma GCC unroll 4
        for (int b = 0; b < NJ; b++) A[a * Q4GJ + b] = _mm512_fmadd_ps(_mm512_load_ps(S + b * 16), gacc[a][b], A[a * Q4GJ + b]);
}

static void q4gemm(float *y, const q4x_t *q, int T, const weight_t *w, int j0, int j1) {
    int K = q->K, N = w->rows, ng = q->ng, nbt = q->nbt, bpsb = 16 * w->group / 128;
    size_t row_bytes = (size_t)K / 2, xstride = (size_t)nbt * 128;
    /* x rows per block: W is read once per block, so a slice of W too big for this core's
     * L2 gets 128 (Zen 5, llama-3.2-1b-q4 prefill 512: 67-71 -> 73-74 tok/s), a smaller one
     * 32 (qwen3-0.6b-q4: 128 measured 136-140 against 143-151) */
    int gt = (size_t)(j1 - j0) * row_bytes >= (1u << 20) ? Q4GT : 32;
    const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i lane_grp = _mm512_srli_epi32(_mm512_setr_epi32(0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120), q->gshift);
    __m512 *A = aligned_alloc(64, sizeof(__m512) * Q4GT * Q4GJ);
    float *P = aligned_alloc(64, sizeof(float) * Q4GJ * 128), *S = aligned_alloc(64, sizeof(float) * Q4GJ * 16);
    float *xp = aligned_alloc(64, sizeof(float) * (size_t)nbt * gt * 128); /* per block: rows contiguous */
    if (!A || !P || !S || !xp) abort();
    for (int t0 = 0; t0 < T; t0 += gt) {
        int tn = T - t0 < gt ? T - t0 : gt;
        for (int blk = 0; blk < nbt; blk++)
            for (int a = 0; a < tn; a++)
                memcpy(xp + ((size_t)blk * gt + a) * 128, q->xq + (size_t)(t0 + a) * xstride + (size_t)blk * 128, sizeof(float) * 128);
        for (int jb = j0; jb < j1; jb += Q4GJ) {
            int nj = j1 - jb < Q4GJ ? j1 - jb : Q4GJ;
            for (int a = 0; a < tn; a++)
                for (int b = 0; b < nj; b++) A[a * Q4GJ + b] = bias_term(w, jb + b, q->xg + (size_t)(t0 + a) * q->ngp);
            for (int blk = 0; blk < nbt; blk++) {
                int cols = K - blk * 128 < 128 ? K - blk * 128 : 128, g0 = blk / bpsb * 16;
                __mmask16 m = cols == 128 ? (__mmask16)0xffff : (__mmask16)((1u << (cols / 8)) - 1);
                __m512i gidx = _mm512_add_epi32(_mm512_set1_epi32((blk % bpsb) * 128 >> q->gshift), lane_grp);
                for (int b = 0; b < nj; b++) {
                    __m512i v = _mm512_maskz_loadu_epi32(m, (const uint8_t *)w->data + (size_t)(jb + b) * row_bytes + (size_t)blk * 64);
                    for (int n = 0; n < 8; n++)
                        _mm512_store_ps(P + b * 128 + n * 16, _mm512_permutexvar_ps(n ? _mm512_srli_epi32(v, 4 * n) : v, iota));
                    __m512 s16 = sb16(w->scales, w->sb_dtype, (size_t)(jb + b) * ng + g0, ng - g0);
                    _mm512_store_ps(S + b * 16, _mm512_permutexvar_ps(gidx, s16));
                }
                const float *xc = xp + (size_t)blk * gt * 128;
                int b = 0;
                for (; b + 4 <= nj; b += 4) {
                    int a = 0;
                    for (; a + 4 <= tn; a += 4) q4gemm_tile(A + a * Q4GJ + b, xc + a * 128, P + b * 128, S + b * 16, 4, 4);
                    for (; a < tn; a++) q4gemm_tile(A + a * Q4GJ + b, xc + a * 128, P + b * 128, S + b * 16, 1, 4);
                }
                for (; b < nj; b++) {
                    int a = 0;
                    for (; a + 4 <= tn; a += 4) q4gemm_tile(A + a * Q4GJ + b, xc + a * 128, P + b * 128, S + b * 16, 4, 1);
                    for (; a < tn; a++) q4gemm_tile(A + a * Q4GJ + b, xc + a * 128, P + b * 128, S + b * 16, 1, 1);
                }
            }
            for (int a = 0; a < tn; a++)
                for (int b = 0; b < nj; b++) y[(size_t)(t0 + a) * N + jb + b] = _mm512_reduce_add_ps(A[a * Q4GJ + b]);
        }
    }
    free(A); free(P); free(S); free(xp);
}

static void mm_q4_lut(float *y, const float *x, int T, const weight_t *w, int j0, int j1) {
    q4x_t q;
    if (q4_prepare(&q, x, T, w)) abort();
    if (T == 1) {
        int j = j0;
        for (; j + 4 <= j1; j += 4) q4tile(y, &q, w, 0, j, 1, 4);
        for (; j < j1; j++) q4tile(y, &q, w, 0, j, 1, 1);
    } else q4gemm(y, &q, T, w, j0, j1);
    free((void *)q.xq);
}

/* --- 4-bit weights with AVX512-VNNI (Zen 4/5, Ice Lake on): integer dot products.
 * On Zen 5 the float path above is bound by its vector ops (per 128 codes and W row: 8
 * vpermps, 7 shifts and 9 FMAs, sharing 4 pipes), not by memory. vpdpbusd multiplies 64
 * unsigned bytes by 64 signed bytes and adds each 4 into an int32 lane, so the codes can
 * go in as they are (low nibbles = even columns, high nibbles = odd columns, one vpand and
 * one shift) if x is written as integers. Per x row and group of G columns (the layout of
 * the AMX twins in matmul_amx_avx512.c):
 *
 *     x ≈ p · xi,  p = 2^(E-22) with max|x| < 2^E,  xi = round(x / p),  |xi| ≤ 2^22
 *
 * (each x off by at most 2^-23 of its group's largest |x|), split exactly into three
 * signed bytes xi = d0·2^16 + d1·2^8 + d2, stored per block of 128 columns as digit planes
 * [d][even | odd columns] of 64 bytes. Lane i of a block then gets, from 6 vpdpbusd, the
 * exact integer a = Σ c·xi over its 8 columns (8i..8i+7, one group: |a| < 2^30, the shifts
 * between digits included), and per (x row, W row), in this order:
 *
 *     acc = bias term (dot(bias row, f32 group sums of x) as in q4tile; the sums here
 *           are 16-lane partial sums then one horizontal sum, not a serial chain)
 *     acc = fma(svec, f32(a), acc)            per block, svec: the lanes' s·p (p a power of
 *                                             2, so s·p is exact but in under/overflow: the
 *                                             same as fma(s, f32(a)·p, acc) — one mul less)
 *     y   = horizontal sum of acc
 *
 * Decode and the GEMM (T > 1) run this same tile per (x row, W rows) pair, so a row
 * alone is bitwise the row in any batch; the results are not bitwise those of the float
 * path (x is rounded to 23 bits per group) and are held to the same 2e-6 by
 * test_kernels. A group with a NaN or Inf gets p = NaN, so the row's result is NaN. */
#pragma GCC push_options
#pragma GCC target("avx512vnni")
/* bits: the weight's width — 4, or 2/3/5/6 through lb512_codes (lbc: its shuffles and multipliers) */
typedef struct { int8_t *xd; float *pv, *xg; int K, nbt, ng, ngp, gshift, bits; size_t xds, pvs; uint8_t lbc[4][64]; } q4i_t;
static void lb512_consts(q4i_t *q, int B);

/* One group of G columns of an x row for the integer paths (q4i, qbi): its sum (16 lanes, then one
 * horizontal sum) into *sum, 22 - E into *ev (x · 2^ev, by scalef, is xi exactly before rounding) and
 * the return value p = 2^(E-22), max|x| < 2^E: 1 for an all-zero group (E = 0), NaN if the group holds a
 * NaN or an Inf (max_ps drops a NaN operand: checked apart). */
AI float x_group(const float *xs, int G, float *sum, float *ev) {
    __m512 mx = _mm512_setzero_ps(), sx = _mm512_setzero_ps();
    __mmask16 nan = 0;
    for (int i = 0; i < G; i += 16) {
        __m512 v = _mm512_loadu_ps(xs + i);
        nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        mx = _mm512_max_ps(mx, _mm512_abs_ps(v));
        sx = _mm512_add_ps(sx, v);
    }
    *sum = _mm512_reduce_add_ps(sx);
    float m = _mm512_reduce_max_ps(mx), p;
    int E = 0;
    if (!(m <= 3.4028235e38f)) p = NAN;
    else if (m == 0.f) p = 1.f;
    else {
        frexpf(m, &E);
        if (E < -126) E = -126; /* p = 2^-148 stays a (denormal) float */
        p = ldexpf(1.f, E - 22);
    }
    *ev = (float)(22 - E);
    return nan ? NAN : p;
}

/* x rows [0, T) into q: 4-bit weights allocate it here (free q->xd with q4i_free: the 4-bit tail rows of
 * a q4ril weight come here while q4ril's prepared x holds the thread's XPREP scratch); 2/3/5/6-bit ones
 * (lb512_codes, never inside q4ril) use XPREP, as qbi does — a per-call allocation re-faulted its pages
 * (bench/cpu/RESULTS.md, session 37). */
static void q4i_free(q4i_t *q) {
    if (q->bits == 4) free(q->xd);
}
static int q4i_prepare(q4i_t *q, const float *x, int T, const weight_t *w) {
    int K = w->cols, G = w->group, ng = K / G, nbt = (K + 127) / 128, ngp = (ng + 15) & ~15;
    q->K = K; q->nbt = nbt; q->ng = ng; q->ngp = ngp; q->gshift = G == 32 ? 5 : G == 64 ? 6 : 7;
    q->bits = w->bits;
    if (w->bits != 4) lb512_consts(q, w->bits);
    q->xds = (size_t)nbt * 384; q->pvs = (size_t)ngp; /* pv: p per group, 0 past ng */
    size_t bytes = (size_t)T * (q->xds + sizeof(float) * (q->pvs + (size_t)ngp));
    int8_t *xd = w->bits == 4 ? aligned_alloc(64, (bytes + 63) & ~(size_t)63) : cpu_scratch(CPU_SCRATCH_XPREP, bytes);
    if (!xd) return -1;
    float *pv = (float *)(xd + (size_t)T * q->xds), *xg = pv + (size_t)T * q->pvs;
    int8_t tmp[3][128] __attribute__((aligned(64)));
    for (size_t t = 0; t < (size_t)T; t++) {
        const float *xt = x + t * K;
        for (int blk = 0; blk < nbt; blk++) {
            int c0 = blk * 128, cols = K - c0 < 128 ? K - c0 : 128;
            float gp[4];
            memset(tmp, 0, sizeof tmp);
            for (int k = 0; k < cols; k += G) {
                float e;
                gp[k / G] = x_group(xt + c0 + k, G, &xg[t * ngp + (c0 + k) / G], &e); /* p, and the group's sum for the bias term */
                __m512 ev = _mm512_set1_ps(e);
                for (int i = 0; i < G; i += 16) {
                    __m512 xv = _mm512_loadu_ps(xt + c0 + k + i);
                    __m512i xi = _mm512_cvtps_epi32(_mm512_scalef_ps(xv, ev)); /* x · 2^(22-E), exact; then round to nearest even */
                    __m512i d2 = _mm512_srai_epi32(_mm512_slli_epi32(xi, 24), 24);
                    __m512i r = _mm512_srai_epi32(_mm512_sub_epi32(xi, d2), 8);
                    __m512i d1 = _mm512_srai_epi32(_mm512_slli_epi32(r, 24), 24);
                    __m512i d0 = _mm512_srai_epi32(_mm512_sub_epi32(r, d1), 8);
                    _mm_store_si128((__m128i *)&tmp[0][k + i], _mm512_cvtepi32_epi8(d0));
                    _mm_store_si128((__m128i *)&tmp[1][k + i], _mm512_cvtepi32_epi8(d1));
                    _mm_store_si128((__m128i *)&tmp[2][k + i], _mm512_cvtepi32_epi8(d2));
                }
            }
            for (int k = 0; k < cols; k += G) pv[t * q->pvs + (size_t)(c0 + k) / G] = gp[k / G];
            for (int d = 0; d < 3; d++) { /* column order -> even columns, odd columns */
                __m512i a = _mm512_load_si512(&tmp[d][0]), b = _mm512_load_si512(&tmp[d][64]);
                int8_t *o = xd + t * q->xds + (size_t)blk * 384 + d * 128;
                _mm256_store_si256((__m256i *)o, _mm512_cvtepi16_epi8(a));
                _mm256_store_si256((__m256i *)(o + 32), _mm512_cvtepi16_epi8(b));
                _mm256_store_si256((__m256i *)(o + 64), _mm512_cvtepi16_epi8(_mm512_srai_epi16(a, 8)));
                _mm256_store_si256((__m256i *)(o + 96), _mm512_cvtepi16_epi8(_mm512_srai_epi16(b, 8)));
            }
        }
        for (int g = ng; g < ngp; g++) xg[t * ngp + g] = pv[t * q->pvs + g] = 0.f;
    }
    q->xd = xd; q->pv = pv; q->xg = xg;
    return 0;
}

/* Block blk's 64 bytes of one W row: a plain load for whole blocks, a masked one (zeros past
 * K) only for a last block of fewer than 128 columns. A masked load in every block (as
 * before) cost the decode stream 10-15% on Zen 5 (same values). */
AI __m512i q4i_codes(const uint8_t *p, int blk, int nfull, __mmask16 mtail) {
    if (__builtin_expect(blk < nfull, 1)) return _mm512_loadu_si512(p);
    return _mm512_maskz_loadu_epi32(mtail, p);
}

/* 2, 3, 5 and 6-bit codes into the nibble planes above (lo: the block's even columns as bytes, hi:
 * the odd ones), so they meet q4i's x digits through the same vpdpbusd chains — the path of AVX-512
 * CPUs with VNNI but no VBMI (Cascade Lake, Cooper Lake), whose qbi (vpermt2b, vpmultishiftqb) is
 * missing; matmul_qi_avx2.c's codes_lb at 512 bits (read its comment). A block of 128 columns is 16·B
 * bytes; its 16-column windows start at byte 2·B·m; a = windows 0, 2, 4, 6 in the four 128-bit
 * lanes, b = 1, 3, 5, 7, so vpackuswb's per-lane order [a's 8 | b's 8] puts the columns in order.
 * 22 ops per 128 codes (8 loads and inserts, 4 vpshufb, 4 vpmullw, 4 vpsrlw, 2 vpackuswb) against
 * qbi's 6; the float path (qbtile) spent ~56. */
static void lb512_consts(q4i_t *q, int B) {
    for (int o = 0; o < 2; o++) /* even, odd columns */
        for (int k = 0; k < 8; k++) {
            int bit = (2 * k + o) * B, byte = bit >> 3;
            uint16_t mul = (uint16_t)(1u << (16 - B - (bit & 7)));
            for (int l = 0; l < 4; l++) {
                q->lbc[o][16 * l + 2 * k] = (uint8_t)byte, q->lbc[o][16 * l + 2 * k + 1] = (uint8_t)(byte + 1);
                memcpy(&q->lbc[2 + o][16 * l + 2 * k], &mul, 2);
            }
        }
}
/* Block p (cols of its 128 columns exist; past them x's digits are zero) into lo, hi. The windows
 * read up to 14·B + 16 bytes: through a buffer in a short last block or where that would pass the
 * weight's end. */
AI void lb512_codes(__m512i *lo, __m512i *hi, const uint8_t *p, int cols, const uint8_t *end, const q4i_t *q, int B) {
    uint8_t buf[14 * 6 + 16] __attribute__((aligned(16)));
    if (__builtin_expect(cols < 128 || p + 14 * B + 16 > end, 0)) {
        memset(buf, 0, sizeof buf);
        memcpy(buf, p, (size_t)cols * B / 8);
        p = buf;
    }
#define LB_W(o) _mm_loadu_si128((const __m128i *)(p + (o) * 2 * B))
    __m512i a = _mm512_inserti32x4(_mm512_inserti32x4(_mm512_inserti32x4(_mm512_castsi128_si512(LB_W(0)), LB_W(2), 1), LB_W(4), 2), LB_W(6), 3);
    __m512i b = _mm512_inserti32x4(_mm512_inserti32x4(_mm512_inserti32x4(_mm512_castsi128_si512(LB_W(1)), LB_W(3), 1), LB_W(5), 2), LB_W(7), 3);
#undef LB_W
    const __m128i sh = _mm_cvtsi32_si128(16 - B);
#define LB_(v, o) _mm512_srl_epi16(_mm512_mullo_epi16(_mm512_shuffle_epi8((v), _mm512_loadu_si512(q->lbc[o])), _mm512_loadu_si512(q->lbc[2 + (o)])), sh)
    *lo = _mm512_packus_epi16(LB_(a, 0), LB_(b, 0));
    *hi = _mm512_packus_epi16(LB_(a, 1), LB_(b, 1));
#undef LB_
}

/* Block blk of W row `row` as nibble planes: 4-bit codes as they are (LB 0), else lb512_codes, or
 * from the GEMM's unpacked panel pl ([row of the tile][block][lo 64 | hi 64]) when given. */
AI void q4i_planes(__m512i *lo, __m512i *hi, const q4i_t *q, const uint8_t *row, int b, int blk, int nfull, __mmask16 mtail,
                   const uint8_t *wend, const uint8_t *pl, const int LB) {
    if (!LB) {
        __m512i v = q4i_codes(row + (size_t)blk * 64, blk, nfull, mtail), m4 = _mm512_set1_epi8(15);
        *lo = _mm512_and_si512(v, m4), *hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    } else if (pl) {
        *lo = _mm512_load_si512(pl + ((size_t)b * q->nbt + blk) * 128);
        *hi = _mm512_load_si512(pl + ((size_t)b * q->nbt + blk) * 128 + 64);
    } else
        lb512_codes(lo, hi, row + (size_t)blk * 16 * q->bits, blk < nfull ? 128 : q->K % 128, wend, q, q->bits);
}

/* x row t against W rows [j, j + NJ). PF: decode (W streams once: prefetch it). LB: 2/3/5/6 bits (q->bits). */
AI void q4i_tile(float *y, const q4i_t *q, int t, const weight_t *w, int j, const int NJ, const int PF, const int LB, const uint8_t *pl) {
    int K = q->K, N = w->rows, ng = q->ng, bpsb = 16 * w->group / 128; /* blocks per 16 groups */
    size_t row_bytes = (size_t)K * (LB ? q->bits : 4) / 8, blk_bytes = LB ? (size_t)16 * q->bits : 64;
    const uint8_t *wend = (const uint8_t *)w->data + (size_t)N * row_bytes;
    const int8_t *xd = q->xd + (size_t)t * q->xds;
    const float *pv = q->pv + (size_t)t * q->pvs;
    const uint8_t *rows[8];
#pragma GCC unroll 8
    for (int b = 0; b < NJ; b++) rows[b] = (const uint8_t *)w->data + (size_t)(j + b) * row_bytes;
    const __m512i lane_grp = _mm512_srli_epi32(_mm512_setr_epi32(0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120), q->gshift);
    const int nfull = K / 128;                                   /* blocks of 128 columns */
    const __mmask16 mtail = (__mmask16)((1u << (K % 128 / 8)) - 1); /* the last block's lanes when K % 128 */
    __m512 acc[8];
#pragma GCC unroll 8
    for (int b = 0; b < NJ; b++) acc[b] = bias_term(w, j + b, q->xg + (size_t)t * q->ngp);
    if (PF)
        for (int b = 0; b < NJ; b++) pf_sb(w, j + b, row_bytes);
    for (int g0 = 0, blk = 0; g0 < ng; g0 += 16) {
        __m512 s16[8], pg = _mm512_load_ps(pv + g0);
#pragma GCC unroll 8
        for (int b = 0; b < NJ; b++) s16[b] = _mm512_mul_ps(sb16(w->scales, w->sb_dtype, (size_t)(j + b) * ng + g0, ng - g0), pg);
        int bend = blk + bpsb < q->nbt ? blk + bpsb : q->nbt;
        for (int bi = 0; blk < bend; blk++, bi++) {
            __m512i gidx = _mm512_add_epi32(_mm512_set1_epi32(bi * 128 >> q->gshift), lane_grp);
            const int8_t *xb = xd + (size_t)blk * 384;
            __m512i e0 = _mm512_load_si512(xb), o0 = _mm512_load_si512(xb + 64), e1 = _mm512_load_si512(xb + 128);
            __m512i o1 = _mm512_load_si512(xb + 192), e2 = _mm512_load_si512(xb + 256), o2 = _mm512_load_si512(xb + 320);
#pragma GCC unroll 8
            for (int b = 0; b < NJ; b++) {
                if (PF) _mm_prefetch((const char *)rows[b] + (size_t)blk * blk_bytes + PF_AHEAD(row_bytes), _MM_HINT_T0);
                __m512i lo, hi;
                q4i_planes(&lo, &hi, q, rows[b], b, blk, nfull, mtail, wend, pl, LB);
                /* digits 0 and 1 in one chain (a01 = 256·S0 + S1), digit 2 in another */
                __m512i a01 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, e0), hi, o0);
                __m512i a2 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, e2), hi, o2);
                a01 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_slli_epi32(a01, 8), lo, e1), hi, o1);
                __m512 tv = _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_slli_epi32(a01, 8), a2));
                acc[b] = _mm512_fmadd_ps(_mm512_permutexvar_ps(gidx, s16[b]), tv, acc[b]);
            }
        }
    }
#pragma GCC unroll 8
    for (int b = 0; b < NJ; b++) y[(size_t)t * N + j + b] = _mm512_reduce_add_ps(acc[b]);
}

/* The GEMM's tile: x rows t and t + 1 against W rows [j, j + NJ), each (x row, W row)
 * pair with exactly q4i_tile's steps in its order (the W row's nibble planes and scale
 * vector are shared by the two x rows; the x digits are memory operands). */
AI void q4i_tile2(float *y, const q4i_t *q, int t, const weight_t *w, int j, const int NJ, const int LB, const uint8_t *pl) {
    int K = q->K, N = w->rows, ng = q->ng, bpsb = 16 * w->group / 128;
    size_t row_bytes = (size_t)K * (LB ? q->bits : 4) / 8;
    const uint8_t *wend = (const uint8_t *)w->data + (size_t)N * row_bytes;
    const int8_t *xd0 = q->xd + (size_t)t * q->xds, *xd1 = xd0 + q->xds;
    const float *pv0 = q->pv + (size_t)t * q->pvs, *pv1 = pv0 + q->pvs;
    const uint8_t *rows[4];
#pragma GCC unroll 4
    for (int b = 0; b < NJ; b++) rows[b] = (const uint8_t *)w->data + (size_t)(j + b) * row_bytes;
    const __m512i lane_grp = _mm512_srli_epi32(_mm512_setr_epi32(0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120), q->gshift);
    const int nfull = K / 128;
    const __mmask16 mtail = (__mmask16)((1u << (K % 128 / 8)) - 1);
    __m512 acc[2][4];
#pragma GCC unroll 4
    for (int b = 0; b < NJ; b++) {
        acc[0][b] = bias_term(w, j + b, q->xg + (size_t)t * q->ngp);
        acc[1][b] = bias_term(w, j + b, q->xg + (size_t)(t + 1) * q->ngp);
    }
    for (int g0 = 0, blk = 0; g0 < ng; g0 += 16) {
        __m512 s16[4], p0 = _mm512_load_ps(pv0 + g0), p1 = _mm512_load_ps(pv1 + g0);
#pragma GCC unroll 4
        for (int b = 0; b < NJ; b++) s16[b] = sb16(w->scales, w->sb_dtype, (size_t)(j + b) * ng + g0, ng - g0);
        int bend = blk + bpsb < q->nbt ? blk + bpsb : q->nbt;
        for (int bi = 0; blk < bend; blk++, bi++) {
            __m512i gidx = _mm512_add_epi32(_mm512_set1_epi32(bi * 128 >> q->gshift), lane_grp);
            const __m512i *x0 = (const __m512i *)(xd0 + (size_t)blk * 384), *x1 = (const __m512i *)(xd1 + (size_t)blk * 384);
#pragma GCC unroll 4
            for (int b = 0; b < NJ; b++) {
                __m512i lo, hi;
                q4i_planes(&lo, &hi, q, rows[b], b, blk, nfull, mtail, wend, pl, LB);
                __m512 sv0 = _mm512_permutexvar_ps(gidx, _mm512_mul_ps(s16[b], p0)), sv1 = _mm512_permutexvar_ps(gidx, _mm512_mul_ps(s16[b], p1));
#pragma GCC unroll 2
                for (int a = 0; a < 2; a++) {
                    const __m512i *xb = a ? x1 : x0;
                    __m512i a01 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, xb[0]), hi, xb[1]);
                    __m512i a2 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, xb[4]), hi, xb[5]);
                    a01 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_slli_epi32(a01, 8), lo, xb[2]), hi, xb[3]);
                    __m512 tv = _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_slli_epi32(a01, 8), a2));
                    acc[a][b] = _mm512_fmadd_ps(a ? sv1 : sv0, tv, acc[a][b]);
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int b = 0; b < NJ; b++) {
        y[(size_t)t * N + j + b] = _mm512_reduce_add_ps(acc[0][b]);
        y[(size_t)(t + 1) * N + j + b] = _mm512_reduce_add_ps(acc[1][b]);
    }
}

/* x row t, W rows [j0, j1): tiles of 8 rows, then 4, then single rows. */
AI void q4i_rows_lb(float *y, const q4i_t *q, int t, const weight_t *w, int j0, int j1, int pf, const int LB) {
    int j = j0;
    if (pf) {
        for (; j + 8 <= j1; j += 8) q4i_tile(y, q, t, w, j, 8, 1, LB, NULL);
        for (; j + 4 <= j1; j += 4) q4i_tile(y, q, t, w, j, 4, 1, LB, NULL);
        for (; j < j1; j++) q4i_tile(y, q, t, w, j, 1, 1, LB, NULL);
    } else {
        for (; j + 8 <= j1; j += 8) q4i_tile(y, q, t, w, j, 8, 0, LB, NULL);
        for (; j + 4 <= j1; j += 4) q4i_tile(y, q, t, w, j, 4, 0, LB, NULL);
        for (; j < j1; j++) q4i_tile(y, q, t, w, j, 1, 0, LB, NULL);
    }
}
static void q4i_rows(float *y, const q4i_t *q, int t, const weight_t *w, int j0, int j1, int pf) {
    if (q->bits == 4) q4i_rows_lb(y, q, t, w, j0, j1, pf, 0);
    else q4i_rows_lb(y, q, t, w, j0, j1, pf, 1);
}

/* 2/3/5/6 bits: W rows [j, j + nj) unpacked into pl once (lb512_codes), for every x row of the chunk */
static void q4i_lb_panel(uint8_t *pl, const q4i_t *q, const weight_t *w, int j, int nj) {
    size_t row_bytes = (size_t)q->K * q->bits / 8;
    const uint8_t *wend = (const uint8_t *)w->data + (size_t)w->rows * row_bytes;
    int nfull = q->K / 128;
    for (int b = 0; b < nj; b++)
        for (int blk = 0; blk < q->nbt; blk++) {
            __m512i lo, hi;
            lb512_codes(&lo, &hi, (const uint8_t *)w->data + (size_t)(j + b) * row_bytes + (size_t)blk * 16 * q->bits,
                        blk < nfull ? 128 : q->K % 128, wend, q, q->bits);
            _mm512_store_si512(pl + ((size_t)b * q->nbt + blk) * 128, lo);
            _mm512_store_si512(pl + ((size_t)b * q->nbt + blk) * 128 + 64, hi);
        }
}

/* T > 1: chunks of x rows whose prepared form (~3.5 bytes per element) stays near 256 KB,
 * and per chunk W in tiles of 4 rows (from L1) against every pair of rows of the chunk. */
static void q4i_gemm(float *y, const q4i_t *q, int T, const weight_t *w, int j0, int j1) {
    size_t per_row = q->xds + sizeof(float) * (q->pvs + (size_t)q->ngp);
    int tc = (int)(262144 / per_row);
    if (tc < 4) tc = 4;
    uint8_t *pl = NULL; /* 2/3/5/6 bits: the 4-row tile's codes unpacked once (the thread's WPANEL scratch) */
    if (q->bits != 4 && !(pl = cpu_scratch(CPU_SCRATCH_WPANEL, (size_t)4 * q->nbt * 128))) abort();
    for (int t0 = 0; t0 < T; t0 += tc) {
        int t1 = t0 + tc < T ? t0 + tc : T;
        int j = j0;
        for (; j + 4 <= j1; j += 4) {
            int t = t0;
            if (pl) {
                q4i_lb_panel(pl, q, w, j, 4);
                for (; t + 2 <= t1; t += 2) q4i_tile2(y, q, t, w, j, 4, 1, pl);
                for (; t < t1; t++) q4i_tile(y, q, t, w, j, 4, 0, 1, pl);
                continue;
            }
            for (; t + 2 <= t1; t += 2) q4i_tile2(y, q, t, w, j, 4, 0, NULL);
            for (; t < t1; t++) q4i_tile(y, q, t, w, j, 4, 0, 0, NULL);
        }
        if (pl)
            for (; j < j1; j++) {
                q4i_lb_panel(pl, q, w, j, 1);
                for (int t = t0; t < t1; t++) q4i_tile(y, q, t, w, j, 1, 0, 1, pl);
            }
        for (int t = t0; t < t1; t++) q4i_rows(y, q, t, w, j, j1, 0);
    }
}
#pragma GCC pop_options

/* The integer path: a CPU with AVX512-VNNI, 4-bit codes in groups of 32/64/128 that divide
 * K. KILN_Q4_FMA=1 keeps the float path (A/B, tests). */
static int q4i_ok(const weight_t *w) {
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("KILN_Q4_FMA");
        on = __builtin_cpu_supports("avx512vnni") && !(e && *e == '1');
    }
    return on && (w->group == 32 || w->group == 64 || w->group == 128) && w->cols % w->group == 0;
}

static void mm_q4i(float *y, const float *x, int T, const weight_t *w, int j0, int j1) {
    q4i_t q;
    if (q4i_prepare(&q, x, T, w)) abort();
    if (T == 1) q4i_rows(y, &q, 0, w, j0, j1, 1);
    else q4i_gemm(y, &q, T, w, j0, j1);
    q4i_free(&q);
}

/* Group sums of x rows, in column order, zero-padded to a multiple of 16 groups: the
 * bias term of MLX-affine weights is dot(bias row, these), 16 groups per fma. */
static int gsum_serial(void) {
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("KILN_Q8_GSUM_SERIAL");
        on = e && *e == '1';
    }
    return on;
}
/* Each group's sum in 16 lanes (masked tail) + one horizontal sum, as q4i_prepare's: the
 * serial f32 chain (KILN_Q8_GSUM_SERIAL=1 keeps it, A/B) was G dependent adds per group,
 * ~K x 4 cycles on the caller per decode matmul (1.4 us at K = 1024, 4 us at 3072). One
 * function for decode and the GEMM, so a row's bias term is the same in both. */
static float *group_sums(const float *x, int T, int K, int G, int *ngp_out) {
    int ng = K / G, ngp = (ng + 15) & ~15, serial = gsum_serial();
    float *xg = aligned_alloc(64, sizeof(float) * (size_t)T * ngp);
    if (!xg) abort();
    for (size_t t = 0; t < (size_t)T; t++)
        for (int g = 0; g < ngp; g++) {
            float sum = 0.f;
            if (g < ng && serial)
                for (int k = g * G; k < (g + 1) * G; k++) sum += x[t * K + k];
            else if (g < ng) {
                __m512 acc = _mm512_setzero_ps();
                for (int k = g * G; k < (g + 1) * G; k += 16) {
                    int n = (g + 1) * G - k;
                    __mmask16 m = n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
                    acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(m, x + t * K + k));
                }
                sum = _mm512_reduce_add_ps(acc);
            }
            xg[t * ngp + g] = sum;
        }
    *ngp_out = ngp;
    return xg;
}

/* 8-bit codes: w = s*c + b, so dot(x, w) = dot(x, s*c) + dot(bias, group sums of x).
 * s*c is exact in f32 (an 8-bit code times a bf16/f16 scale has at most 19 significant
 * bits), so the first part is a plain dense dot product over exactly-known weights; the
 * second is 16 groups per fma. Per element: acc = bias term, then acc = fma(x, c*s, acc)
 * per 16 columns in order, then one horizontal sum — the same in decode (q8tile, codes
 * converted in registers) and in the GEMM for T > 1 (gemm_fk, codes converted once per
 * panel). */
AI void q8tile(float *y, const float *x, const float *xg, const weight_t *w, int j, const int NJ) {
    int K = w->cols, G = w->group, ng = K / G;
    size_t pfd = PF_AHEAD((size_t)K);
    const uint8_t *rows[4];
    __m512 acc[4];
#pragma GCC unroll 4
    for (int b = 0; b < NJ; b++) {
        rows[b] = (const uint8_t *)w->data + (size_t)(j + b) * K;
        acc[b] = bias_term(w, j + b, xg);
        pf_sb(w, j + b, (size_t)K);
    }
    for (int g0 = 0; g0 < ng; g0 += 16) {
        __m512 s16[4];
#pragma GCC unroll 4
        for (int b = 0; b < NJ; b++) s16[b] = sb16(w->scales, w->sb_dtype, (size_t)(j + b) * ng + g0, ng - g0);
        int gend = g0 + 16 < ng ? g0 + 16 : ng;
        for (int g = g0; g < gend; g++) {
            __m512i lane = _mm512_set1_epi32(g - g0);
            __m512 sv[4];
#pragma GCC unroll 4
            for (int b = 0; b < NJ; b++) sv[b] = _mm512_permutexvar_ps(lane, s16[b]);
            for (int k = g * G; k < (g + 1) * G; k += 16) {
                __m512 xv = _mm512_loadu_ps(x + k);
#pragma GCC unroll 4
                for (int b = 0; b < NJ; b++) {
                    if (!(k & 63)) _mm_prefetch((const char *)rows[b] + k + pfd, _MM_HINT_T0); /* once per line */
                    __m512 c = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(rows[b] + k))));
                    acc[b] = _mm512_fmadd_ps(xv, _mm512_mul_ps(c, sv[b]), acc[b]);
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int b = 0; b < NJ; b++) y[j + b] = _mm512_reduce_add_ps(acc[b]);
}

/* --- T > 1: a blocked GEMM with exactly the per-element arithmetic of the decode tiles.
 * For a block of FB x rows and FJ W rows, W is turned into f32 panels of FKC columns
 * (converted, or codes times scales, once per block; zeros past the last column), and
 * register tiles of FT x rows by 4 panel rows walk a whole panel with their accumulators in
 * registers: stored and reloaded exactly once per FKC columns, and summed into y after the
 * last. x rows are read in place (the tail chunk masked, as in tile). Per element: acc = 0
 * (or the bias term), acc = fma(x, w, acc) per 16 columns in order, one horizontal sum:
 * the chain of the decode tiles. Zen 5 (no AMX), against the previous blocked GEMM (x blocks
 * of 32 rows, panels of 128 columns, accumulators through memory per panel): weight
 * re-reads per x block and the per-panel accumulator round trip were what cost; see
 * bench/cpu/RESULTS.md, session 5, helper-33. */
#define FJ 8
#define FT 4
#ifndef FB
#define FB 128
#endif
#define FKC 512
/* --- 2, 3, 5 and 6 bits (MLX's other widths). A code of B bits sits at bit i·B of its row's
 * stream; 16 codes from k (k % 16 == 0) start on a byte and take 2·B bytes, and lane i needs the
 * two bytes at i·B/8 (vpshufb of the 16 bytes copied to every 128-bit lane) and its field at
 * bit sh(i) = i·B % 8 of them. The field is masked where it lies — c·2^sh(i), an exact integer
 * — and the scale it meets is s·2^-sh(i) (exact: a power of two), so w = c·s comes out of one
 * vpand, vcvtdq2ps and multiply, exactly the q8 path's c·s (8 or fewer bits times a bf16/f16
 * scale: exact in f32). From there the q8 arithmetic: decode q8tile's chain (qbtile), prefill
 * gemm_fk's panels — the same per-element chain, so a row alone is bitwise the row in any
 * batch. Before (weight_code per element): qwen3-0.6b at 3 or 6 bits decoded at ~3 tok/s and
 * prefilled at ~16 (4 and 8 bits: 57–96 / 320–330). */
#define QB_IX(i, B) ((int)((unsigned)((i) * (B) >> 3) | (unsigned)(((i) * (B) >> 3) + 1) << 8 | 0x80800000u))
#define QB_M(i, B) ((int)(((1u << (B)) - 1) << ((i) * (B) & 7)))
/* lane i's shuffle (idx), field mask (msk) and 2^-sh(i) (lsh) for width B */
AI void qb_consts(const int B, __m512i *idx, __m512i *msk, __m512 *lsh) {
    *idx = _mm512_setr_epi32(QB_IX(0, B), QB_IX(1, B), QB_IX(2, B), QB_IX(3, B), QB_IX(4, B), QB_IX(5, B), QB_IX(6, B), QB_IX(7, B),
                             QB_IX(8, B), QB_IX(9, B), QB_IX(10, B), QB_IX(11, B), QB_IX(12, B), QB_IX(13, B), QB_IX(14, B),
                             QB_IX(15, B));
    *msk = _mm512_setr_epi32(QB_M(0, B), QB_M(1, B), QB_M(2, B), QB_M(3, B), QB_M(4, B), QB_M(5, B), QB_M(6, B), QB_M(7, B), QB_M(8, B),
                             QB_M(9, B), QB_M(10, B), QB_M(11, B), QB_M(12, B), QB_M(13, B), QB_M(14, B), QB_M(15, B));
    *lsh = _mm512_setr_ps(1.f, 1.f / (1 << (B & 7)), 1.f / (1 << (2 * B & 7)), 1.f / (1 << (3 * B & 7)), 1.f / (1 << (4 * B & 7)),
                          1.f / (1 << (5 * B & 7)), 1.f / (1 << (6 * B & 7)), 1.f / (1 << (7 * B & 7)), 1.f / (1 << (8 * B & 7)),
                          1.f / (1 << (9 * B & 7)), 1.f / (1 << (10 * B & 7)), 1.f / (1 << (11 * B & 7)), 1.f / (1 << (12 * B & 7)),
                          1.f / (1 << (13 * B & 7)), 1.f / (1 << (14 * B & 7)), 1.f / (1 << (15 * B & 7)));
}
#undef QB_IX
#undef QB_M
/* codes k..k+15 of a row of rb bytes as f32 c·2^sh(i) (a plain 16-byte load while it stays in
 * the row, masked at its end: nothing past the row is read) */
AI __m512 qb_codes(const uint8_t *row, size_t rb, int k, const int B, __m512i idx, __m512i msk) {
    size_t o = (size_t)k * B / 8;
    __m128i c = o + 16 <= rb ? _mm_loadu_si128((const __m128i *)(row + o)) : _mm_maskz_loadu_epi8((__mmask16)((1u << (2 * B)) - 1), row + o);
    return _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_shuffle_epi8(_mm512_broadcast_i32x4(c), idx), msk));
}

/* P[b * ps + (k - k0)] = weight (row j + b, column k) as f32 for k in [k0, k0 + ps), zeros past K.
 * QB: 0 dense (ld), 8 (8-bit codes · scale), 2/3/5/6 (qb_codes · scale·2^-sh) */
AI void panel_full(float *P, int ps, const weight_t *w, int j, int nj, int k0, ldw_fn ld, const int QB) {
    int K = w->cols, G = w->group, ng = QB ? K / G : 0;
    size_t rb = (size_t)K * (QB ? QB : 8) / 8;
    __m512i idx = _mm512_setzero_si512(), msk = idx;
    __m512 lsh = _mm512_set1_ps(1.f);
    if (QB && QB != 8) qb_consts(QB, &idx, &msk, &lsh);
    for (int b = 0; b < nj; b++) {
        const uint8_t *row = QB ? (const uint8_t *)w->data + (size_t)(j + b) * rb : NULL;
        __m512 sv = _mm512_setzero_ps();
        for (int i = 0, left = 0; i < ps; i += 16, left -= 16) {
            int k = k0 + i, n = K - k;
            __mmask16 m = n >= 16 ? (__mmask16)0xffff : n > 0 ? (__mmask16)((1u << n) - 1) : 0;
            __m512 v;
            if (!m) v = _mm512_setzero_ps();
            else if (QB) {
                if (left <= 0) {
                    int g = k / G;
                    left = (g + 1) * G - k;
                    sv = _mm512_mul_ps(_mm512_set1_ps(load_as_f32(w->scales, w->sb_dtype, (size_t)(j + b) * ng + g)), lsh);
                }
                if (QB == 8) v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, row + k))), sv);
                else v = _mm512_mul_ps(qb_codes(row, rb, k, QB, idx, msk), sv); /* (K % G == 0: whole chunks) */
            } else v = ld(w, j + b, k, m);
            _mm512_store_ps(P + (size_t)b * ps + i, v);
        }
    }
}

/* NT x rows (from t) by NJ panel rows over columns [k0, k1): accumulators from A (row a at
 * A + a * FJ), back to A, or, when k1 == K, summed into y. */
AI void fk_tile(float *y, __m512 *A, const float *x, int K, int N, const float *P, int ps, int t, int j, int k0, int k1, const int NT, const int NJ) {
    int nfull = (k1 - k0) / L, rem = (k1 - k0) % L;
    __m512 acc[FT][4];
#pragma GCC unroll 8
    for (int a = 0; a < NT; a++)
#pragma GCC unroll 4
        for (int b = 0; b < NJ; b++) acc[a][b] = A[a * FJ + b];
    const float *xr = x + (size_t)t * K + k0;
    for (int c = 0; c < nfull; c++) {
        __m512 wv[4];
#pragma GCC unroll 4
        for (int b = 0; b < NJ; b++) wv[b] = _mm512_load_ps(P + (size_t)b * ps + c * L);
#pragma GCC unroll 8
        for (int a = 0; a < NT; a++) {
            __m512 xv = _mm512_loadu_ps(xr + (size_t)a * K + c * L);
#pragma GCC unroll 4
            for (int b = 0; b < NJ; b++) acc[a][b] = _mm512_fmadd_ps(xv, wv[b], acc[a][b]);
        }
    }
    if (rem) {
        __mmask16 m = (__mmask16)((1u << rem) - 1);
        __m512 wv[4];
#pragma GCC unroll 4
        for (int b = 0; b < NJ; b++) wv[b] = _mm512_load_ps(P + (size_t)b * ps + nfull * L);
#pragma GCC unroll 8
        for (int a = 0; a < NT; a++) {
            __m512 xv = _mm512_maskz_loadu_ps(m, xr + (size_t)a * K + nfull * L);
#pragma GCC unroll 4
            for (int b = 0; b < NJ; b++) acc[a][b] = _mm512_fmadd_ps(xv, wv[b], acc[a][b]);
        }
    }
    if (k1 == K) {
#pragma GCC unroll 8
        for (int a = 0; a < NT; a++)
#pragma GCC unroll 4
            for (int b = 0; b < NJ; b++) y[(size_t)(t + a) * N + j + b] = _mm512_reduce_add_ps(acc[a][b]);
    } else {
#pragma GCC unroll 8
        for (int a = 0; a < NT; a++)
#pragma GCC unroll 4
            for (int b = 0; b < NJ; b++) A[a * FJ + b] = acc[a][b];
    }
}

AI void gemm_fk(float *y, const float *x, int T, const weight_t *w, int j0, int j1, ldw_fn ld, const int QB, const float *xg, int ngp) {
    int K = w->cols, N = w->rows, kc = K < FKC ? (K + 15) & ~15 : FKC;
    const int fb = FB;
    float *P = aligned_alloc(64, sizeof(float) * FJ * (size_t)kc);
    __m512 *A = aligned_alloc(64, sizeof(__m512) * FB * FJ);
    if (!P || !A) abort();
    for (int t0 = 0; t0 < T; t0 += fb) {
        int tn = T - t0 < fb ? T - t0 : fb;
        for (int jb = j0; jb < j1; jb += FJ) {
            int nj = j1 - jb < FJ ? j1 - jb : FJ;
            for (int a = 0; a < tn; a++)
                for (int b = 0; b < nj; b++) A[a * FJ + b] = xg ? bias_term(w, jb + b, xg + (size_t)(t0 + a) * ngp) : _mm512_setzero_ps();
            for (int k0 = 0; k0 < K; k0 += kc) {
                int k1 = k0 + kc < K ? k0 + kc : K;
                panel_full(P, kc, w, jb, nj, k0, ld, QB);
                int a = 0;
                for (; a + FT <= tn; a += FT) {
                    int b = 0;
                    for (; b + 4 <= nj; b += 4) fk_tile(y, A + a * FJ + b, x, K, N, P + (size_t)b * kc, kc, t0 + a, jb + b, k0, k1, FT, 4);
                    for (; b < nj; b++) fk_tile(y, A + a * FJ + b, x, K, N, P + (size_t)b * kc, kc, t0 + a, jb + b, k0, k1, FT, 1);
                }
                for (; a < tn; a++) {
                    int b = 0;
                    for (; b + 4 <= nj; b += 4) fk_tile(y, A + a * FJ + b, x, K, N, P + (size_t)b * kc, kc, t0 + a, jb + b, k0, k1, 1, 4);
                    for (; b < nj; b++) fk_tile(y, A + a * FJ + b, x, K, N, P + (size_t)b * kc, kc, t0 + a, jb + b, k0, k1, 1, 1);
                }
            }
        }
    }
    free(P);
    free(A);
}

static void mm_q8(float *y, const float *x, int T, const weight_t *w, int j0, int j1) {
    int ngp;
    float *xg = group_sums(x, T, w->cols, w->group, &ngp);
    if (T == 1) {
        int j = j0;
        for (; j + 4 <= j1; j += 4) q8tile(y, x, xg, w, j, 4);
        for (; j < j1; j++) q8tile(y, x, xg, w, j, 1);
    }
    else gemm_fk(y, x, T, w, j0, j1, ld_f32, 8, xg, ngp);
    free(xg);
}

/* --- Dense weights in WL_DENSE_T4 (cpu_pack.h): tiles of 4 rows x 16 columns, element
 * (4t + r, 16c + i) at ((t·nc + c)·4 + r)·16 + i, nc = K/16 (K % 16 == 0); the N % 4 tail
 * rows row-major at their stored place. Decode reads a tile as ONE sequential stream (4
 * rows' 16 columns = 128 B of bf16 per step) instead of 4 row streams, and needs no
 * software prefetch (the hardware's stream prefetch follows it; an explicit one 4-8 KB
 * ahead was slower in bench/cpu/RESULTS.md session 9's harness). Per element the chain is
 * tile()'s: acc = 0, acc = fma(x, w, acc) per 16 columns in order, one horizontal sum — so
 * a packed weight gives the stored weight's bits, at any T (the GEMM's panels read the tiles
 * through ld_*_t4) and for any row range (rows outside whole tiles through tile()). */
AI size_t t4_at(const weight_t *w, int r, int k) {
    size_t K = (size_t)w->cols;
    if (r < (w->rows & ~3)) return (((size_t)(r >> 2) * (K >> 4) + (size_t)(k >> 4)) * 4 + (size_t)(r & 3)) * 16 + (size_t)(k & 15);
    return (size_t)r * K + (size_t)k;
}
AI __m512 ld_f32_t4(const weight_t *w, int r, int k, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, (const float *)w->data + t4_at(w, r, k));
}
AI __m512 ld_bf16_t4(const weight_t *w, int r, int k, __mmask16 m) {
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)w->data + t4_at(w, r, k));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
AI __m512 ld_f16_t4(const weight_t *w, int r, int k, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)w->data + t4_at(w, r, k)));
}
/* 16 stored values at p as f32: what ld_* give with a full mask. */
AI __m512 t4_cvt(const char *p, const int DT) {
    if (DT == DT_F32) return _mm512_loadu_ps((const float *)p);
    __m256i h = _mm256_loadu_si256((const __m256i *)p);
    if (DT == DT_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
/* Rows j..j+3 = tile j/4 (j % 4 == 0, j + 4 <= 4·⌊N/4⌋) for NT (1..4) tokens from t: the tile
 * read as one sequential stream, each 16 columns' 4 weight vectors used by every token. */
AI void t4tile(float *y, const float *x, const weight_t *w, int t, int j, const int NT, const int DT) {
    const size_t esz = DT == DT_F32 ? 4 : 2;
    int nc = w->cols >> 4, K = w->cols, N = w->rows;
    const char *p = (const char *)w->data + (size_t)j * w->cols * esz; /* the tile holds its rows' bytes */
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int a = 0; a < NT; a++)
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) acc[a][r] = _mm512_setzero_ps();
    for (int c = 0; c < nc; c++, p += 64 * esz) {
        __m512 wv[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) wv[r] = t4_cvt(p + (size_t)r * L * esz, DT);
#pragma GCC unroll 4
        for (int a = 0; a < NT; a++) {
            __m512 xv = _mm512_loadu_ps(x + (size_t)(t + a) * K + (size_t)c * L);
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) acc[a][r] = _mm512_fmadd_ps(xv, wv[r], acc[a][r]);
        }
    }
#pragma GCC unroll 4
    for (int a = 0; a < NT; a++)
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) y[(size_t)(t + a) * N + j + r] = _mm512_reduce_add_ps(acc[a][r]);
}
/* A few tokens (2..MM_SMALL_T: a decode batch of a few requests) on dense weights run the
 * decode tiles — run(), and mm_t4's tiles for up to 4 tokens — one pass over the weights,
 * instead of gemm_fk, whose f32 panels cost more than their FMAs when so few tokens share them
 * (kiln-tiny bf16, 2 requests: 0.5 ms a step alone, 3.5-4.2 ms for the two). The chain per
 * element is gemm_fk's and decode's (acc = 0, fma(x, w, acc) per 16 columns in order, the
 * masked tail, one horizontal sum), so a token's outputs are the same bits whichever path, and
 * alone or in any batch. KILN_MM_SMALL_T=0: always gemm_fk. */
#define MM_SMALL_T 8
static atomic_int mm_small_on = -1;
static int mm_small(int T) {
    int on = atomic_load_explicit(&mm_small_on, memory_order_relaxed);
    if (on < 0) {
        const char *e = getenv("KILN_MM_SMALL_T");
        atomic_store_explicit(&mm_small_on, on = !(e && *e == '0'), memory_order_relaxed);
    }
    return on && T >= 2 && T <= MM_SMALL_T;
}
AI void mm_t4(float *y, const float *x, int T, const weight_t *w, int j0, int j1, ldw_fn ld, const int DT) {
    if (T != 1 && !mm_small(T)) { /* T == 0 too (a step with no logits wanted): nothing, as gemm_fk does */
        gemm_fk(y, x, T, w, j0, j1, ld, 0, NULL, 0);
        return;
    }
    int nr = w->rows & ~3, a = (j0 + 3) & ~3;
    for (int t = 0; t < T; t += 4) { /* up to 4 tokens per pass over the tiles */
        int j = j0;
#define T4_PASS(NT)                                                                                         \
    do {                                                                                                    \
        for (; j < j1 && j < a; j++) tile(y, x, w, t, j, NT, 1, ld); /* a range starting inside a tile */   \
        for (; j + 4 <= j1 && j + 4 <= nr; j += 4) t4tile(y, x, w, t, j, NT, DT);                          \
        for (; j < j1; j++) tile(y, x, w, t, j, NT, 1, ld);                                                 \
    } while (0)
        switch (T - t < 4 ? T - t : 4) {
        case 1: T4_PASS(1); break;
        case 2: T4_PASS(2); break;
        case 3: T4_PASS(3); break;
        default: T4_PASS(4); break;
        }
#undef T4_PASS
    }
}

/* q8ril.h: rows [j0, j1) through q8tile token by token (the N % 16 tail of a WL_Q_RIL16
 * weight: the same code at any T). */
void avx512_q8_rows(float *y, const float *x, int T, const weight_t *w, int j0, int j1) {
    int ngp, N = w->rows, K = w->cols;
    float *xg = group_sums(x, T, K, w->group, &ngp);
    for (size_t t = 0; t < (size_t)T; t++) {
        int j = j0;
        for (; j + 4 <= j1; j += 4) q8tile(y + t * N, x + t * K, xg + t * ngp, w, j, 4);
        for (; j < j1; j++) q8tile(y + t * N, x + t * K, xg + t * ngp, w, j, 1);
    }
    free(xg);
}

/* Dense: T == 1 streams W once through the register tiles; larger T goes through the
 * blocked GEMM (same chain per element: acc = 0, fma per 16 columns, masked tail). */
static void mm_f32(float *y, const float *x, int T, const weight_t *w, int j0, int j1) {
    if (w->layout == WL_DENSE_T4) mm_t4(y, x, T, w, j0, j1, ld_f32_t4, DT_F32);
    else if (T == 1 || mm_small(T)) run(y, x, T, w, j0, j1, ld_f32);
    else gemm_fk(y, x, T, w, j0, j1, ld_f32, 0, NULL, 0);
}
static void mm_bf16(float *y, const float *x, int T, const weight_t *w, int j0, int j1) {
    if (w->layout == WL_DENSE_T4) mm_t4(y, x, T, w, j0, j1, ld_bf16_t4, DT_BF16);
    else if (T == 1 || mm_small(T)) run(y, x, T, w, j0, j1, ld_bf16);
    else gemm_fk(y, x, T, w, j0, j1, ld_bf16, 0, NULL, 0);
}
static void mm_f16(float *y, const float *x, int T, const weight_t *w, int j0, int j1) {
    if (w->layout == WL_DENSE_T4) mm_t4(y, x, T, w, j0, j1, ld_f16_t4, DT_F16);
    else if (T == 1 || mm_small(T)) run(y, x, T, w, j0, j1, ld_f16);
    else gemm_fk(y, x, T, w, j0, j1, ld_f16, 0, NULL, 0);
}
static void mm_q4(float *y, const float *x, int T, const weight_t *w, int j0, int j1) {
    if (q4i_ok(w)) mm_q4i(y, x, T, w, j0, j1);
    else if (w->group == 32 || w->group == 64 || w->group == 128) mm_q4_lut(y, x, T, w, j0, j1);
    else qrun(y, x, T, w, j0, j1, 4);
}
/* 2, 3, 5 and 6 bits, decode: q8tile's chain with qb_codes (see panel_full): acc = bias term,
 * acc = fma(x, c·s, acc) per 16 columns in order, one horizontal sum; codes, scales and biases
 * prefetched PF_AHEAD as q8tile's */
AI void qbtile(float *y, const float *x, const float *xg, const weight_t *w, int j, const int NJ, const int B) {
    int K = w->cols, G = w->group, ng = K / G;
    size_t rb = (size_t)K * B / 8, pfd = PF_AHEAD(rb);
    __m512i idx, msk;
    __m512 lsh;
    qb_consts(B, &idx, &msk, &lsh);
    const uint8_t *rows[4];
    __m512 acc[4];
#pragma GCC unroll 4
    for (int b = 0; b < NJ; b++) {
        rows[b] = (const uint8_t *)w->data + (size_t)(j + b) * rb;
        acc[b] = bias_term(w, j + b, xg);
        pf_sb(w, j + b, rb);
    }
    for (int g = 0; g < ng; g++) {
        __m512 sv[4];
#pragma GCC unroll 4
        for (int b = 0; b < NJ; b++) sv[b] = _mm512_mul_ps(_mm512_set1_ps(load_as_f32(w->scales, w->sb_dtype, (size_t)(j + b) * ng + g)), lsh);
        for (int k = g * G; k < (g + 1) * G; k += 16) {
            __m512 xv = _mm512_loadu_ps(x + k);
            size_t o = (size_t)k * B / 8;
#pragma GCC unroll 4
            for (int b = 0; b < NJ; b++) {
                if ((o & 63) < 2 * B) _mm_prefetch((const char *)rows[b] + o + pfd, _MM_HINT_T0); /* once per line */
                acc[b] = _mm512_fmadd_ps(xv, _mm512_mul_ps(qb_codes(rows[b], rb, k, B, idx, msk), sv[b]), acc[b]);
            }
        }
    }
#pragma GCC unroll 4
    for (int b = 0; b < NJ; b++) y[j + b] = _mm512_reduce_add_ps(acc[b]);
}

/* decode rows [j0, j1) of a 2/3/5/6-bit weight (B = w->bits), x's group sums given */
static void qb_rows(float *y, const float *x, const float *xg, const weight_t *w, int j0, int j1, int B) {
#define QB_ROWS(BB)                                                     \
    {                                                                   \
        int j = j0;                                                     \
        for (; j + 4 <= j1; j += 4) qbtile(y, x, xg, w, j, 4, BB);      \
        for (; j < j1; j++) qbtile(y, x, xg, w, j, 1, BB);              \
    }
    switch (B) {
    case 2: QB_ROWS(2) break;
    case 3: QB_ROWS(3) break;
    case 5: QB_ROWS(5) break;
    default: QB_ROWS(6)
    }
#undef QB_ROWS
}

/* --- 2/3/5/6-bit weights with AVX512-VBMI + VNNI (Zen 4/5, Ice Lake on): integer dot products.
 * qbtile above spends ~7 ops per 16 codes and row (a load, broadcast, vpshufb, vpand, convert, scale
 * multiply, FMA): ~13-20 G weights/s a core. Here a block is 128 columns, 16·B bytes of one row's bit
 * stream, and lane n of the block's result covers its columns 8n..8n+7 (one group) as two runs of 4
 * codes: vector A holds columns 8n..8n+3 in lane n, vector B columns 8n+4..8n+7. Each run of 4 codes
 * is 4·B bits starting at bit 0 or 4 of a byte, so a qword (lanes 2k, 2k+1) is two runs' bytes put
 * together by one vpermt2b, vpmultishiftqb takes each code's 8 bits from its offset, one vpand keeps
 * B bits — 128 codes as bytes in 2 × 4 ops. x is q4i's (p = 2^(E-22) per group, xi = round(x / p)
 * split exactly into three signed-byte digits, stored per block as [digit][A quads | B quads]), so
 * lane n gets the exact integer a = Σ c·xi over its 8 columns, |a| <= 8·63·2^22 < 2^31:
 *     a = dpbusd(dpbusd(dpbusd(dpbusd(dpbusd(dpbusd(0, A, d0A), B, d0B) << 8, A, d1A), B, d1B) << 8, A, d2A), B, d2B)
 * and per (x row, W row): acc = bias term, acc = fma(s·p of each lane's group, f32(a), acc) per
 * block, one horizontal sum — decode (T == 1) and the GEMM alike, so a row alone is bitwise the
 * row in any batch. Not bitwise qbtile's float path (x rounded to 23 bits per group): the same
 * 2e-6 in test_kernels. KILN_Q4_FMA=1 keeps the float paths (qbtile / gemm_fk) for these widths too. */
#pragma GCC push_options
#pragma GCC target("avx512vnni,avx512vbmi")
typedef struct { int8_t *xd; float *pv, *xg; int K, nb, ng, ngp; size_t xds; uint8_t cst[4][64]; } qbi_t;
static void qbi_consts(int B, int h, uint8_t *pidx, uint8_t *ctrl);

/* x rows [0, T) into q (in the thread's XPREP scratch: not freed): digits [T][nb][3][A 64 | B 64], p and group sums [T][ngp] */
static int qbi_prepare(qbi_t *q, const float *x, int T, const weight_t *w) {
    int K = w->cols, G = w->group, ng = K / G, nb = (K + 127) / 128, ngp = (ng + 15) & ~15;
    q->K = K; q->nb = nb; q->ng = ng; q->ngp = ngp; q->xds = (size_t)nb * 384;
    qbi_consts(w->bits, 0, q->cst[0], q->cst[1]);
    qbi_consts(w->bits, 1, q->cst[2], q->cst[3]);
    size_t bytes = (size_t)T * (q->xds + 2 * sizeof(float) * (size_t)ngp);
    int8_t *xd = cpu_scratch(CPU_SCRATCH_XPREP, bytes); /* the thread's buffer, kept between calls (cpu_scratch.h) */
    if (!xd) return -1;
    float *pv = (float *)(xd + (size_t)T * q->xds), *xg = pv + (size_t)T * ngp;
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for (size_t t = 0; t < (size_t)T; t++) {
        const float *xt = x + t * K;
        float *pt = pv + t * ngp, *gt = xg + t * ngp;
        int8_t *dt = xd + t * q->xds;
        if (K % 128) memset(dt + (size_t)(nb - 1) * 384, 0, 384); /* a short last block: its digits past K are zero */
        for (int g = 0; g < ng; g++) { /* p, the sum, and the digits in column order: [blk][d][128] */
            float e;
            pt[g] = x_group(xt + (size_t)g * G, G, &gt[g], &e);
            for (int i = 0; i < G; i += 16) {
                int c = g * G + i;
                __m512i xi = _mm512_cvtps_epi32(_mm512_scalef_ps(_mm512_loadu_ps(xt + c), _mm512_set1_ps(e))); /* exact, then round to nearest even */
                __m512i v2 = _mm512_srai_epi32(_mm512_slli_epi32(xi, 24), 24);
                __m512i r = _mm512_srai_epi32(_mm512_sub_epi32(xi, v2), 8);
                __m512i v1 = _mm512_srai_epi32(_mm512_slli_epi32(r, 24), 24);
                int8_t *o = dt + (size_t)(c / 128) * 384 + c % 128;
                _mm_storeu_si128((__m128i *)o, _mm512_cvtepi32_epi8(_mm512_srai_epi32(_mm512_sub_epi32(r, v1), 8)));
                _mm_storeu_si128((__m128i *)(o + 128), _mm512_cvtepi32_epi8(v1));
                _mm_storeu_si128((__m128i *)(o + 256), _mm512_cvtepi32_epi8(v2));
            }
        }
        for (int g = ng; g < ngp; g++) pt[g] = gt[g] = 0.f;
        for (int blk = 0; blk < nb; blk++) /* in place: quads 2n -> A lane n, quads 2n + 1 -> B lane n */
            for (int d = 0; d < 3; d++) {
                int8_t *o = dt + (size_t)blk * 384 + d * 128;
                __m512i lo = _mm512_load_si512(o), hi = _mm512_load_si512(o + 64);
                _mm512_store_si512(o, _mm512_permutex2var_epi32(lo, ev, hi));
                _mm512_store_si512(o + 64, _mm512_permutex2var_epi32(lo, od, hi));
            }
    }
    q->xd = xd; q->pv = pv; q->xg = xg;
    return 0;
}

/* the vpermt2b indexes and vpmultishiftqb offsets of width B for vector A (h = 0) or B (h = 1) */
static void qbi_consts(int B, int h, uint8_t *pidx, uint8_t *ctrl) {
    for (int k = 0; k < 8; k++)
        for (int r = 0; r < 2; r++) { /* run r of qword k: columns 16k + 8r + 4h .. +3 */
            int bit = (16 * k + 8 * r + 4 * h) * B, byte0 = bit / 8, off = bit % 8;
            for (int m = 0; m < 4; m++) {
                pidx[k * 8 + r * 4 + m] = (uint8_t)(byte0 + m);                /* (< 16·B + 4 <= 100: inside the two vectors) */
                ctrl[k * 8 + r * 4 + m] = (uint8_t)(r * 32 + off + m * B);      /* code m of the run */
            }
        }
}

/* the 128 codes of block blk as A (columns 8n..8n+3 in lane n) and B (8n+4..8n+7), bytes; nothing past the row read */
AI void qbi_codes(const uint8_t *row, size_t rb, int blk, const int B, const __m512i *cst, __m512i *ca, __m512i *cb) {
    size_t o = (size_t)blk * 16 * B;
    __m512i lo, hi;
    if (o + 128 <= rb) lo = _mm512_loadu_si512(row + o), hi = _mm512_loadu_si512(row + o + 64);
    else {
        size_t n = rb - o; /* < 128 */
        lo = _mm512_maskz_loadu_epi8(n >= 64 ? ~0ull : (1ull << n) - 1, row + o);
        hi = n > 64 ? _mm512_maskz_loadu_epi8((1ull << (n - 64)) - 1, row + o + 64) : _mm512_setzero_si512();
    }
    const __m512i m = _mm512_set1_epi8((char)((1 << B) - 1));
    *ca = _mm512_and_si512(_mm512_multishift_epi64_epi8(cst[1], _mm512_permutex2var_epi8(lo, cst[0], hi)), m);
    *cb = _mm512_and_si512(_mm512_multishift_epi64_epi8(cst[3], _mm512_permutex2var_epi8(lo, cst[2], hi)), m);
}

/* NT x rows (from t) × W rows [j, j + NJ): groups 16 at a time (16·G / 128 blocks), lane n of block bi of the
 * window taking group (bi·128 + 8n) / G. PF: decode (prefetch the rows ahead). */
AI void qbi_tile(float *y, const qbi_t *q, int t, const weight_t *w, int j, const int NT, const int NJ, const int PF, const int B) {
    int K = q->K, N = w->rows, ng = q->ng, G = w->group, nb = q->nb, bpw = 16 * G / 128;
    size_t rb = (size_t)K * B / 8, pfd = PF_AHEAD(rb);
    const __m512i cst[4] = {_mm512_loadu_si512(q->cst[0]), _mm512_loadu_si512(q->cst[1]), _mm512_loadu_si512(q->cst[2]), _mm512_loadu_si512(q->cst[3])};
    const __m512i lane_grp = _mm512_srli_epi32(_mm512_setr_epi32(0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120),
                                               G == 32 ? 5 : G == 64 ? 6 : 7);
    const uint8_t *rows[4];
    __m512 acc[2][4];
#pragma GCC unroll 4
    for (int b = 0; b < NJ; b++) {
        rows[b] = (const uint8_t *)w->data + (size_t)(j + b) * rb;
        if (PF) pf_sb(w, j + b, rb);
#pragma GCC unroll 2
        for (int a = 0; a < NT; a++) acc[a][b] = bias_term(w, j + b, q->xg + (size_t)(t + a) * q->ngp);
    }
    for (int g0 = 0, blk = 0; g0 < ng; g0 += 16) {
        __m512 s16[4], p16[2];
#pragma GCC unroll 2
        for (int a = 0; a < NT; a++) p16[a] = _mm512_loadu_ps(q->pv + (size_t)(t + a) * q->ngp + g0);
#pragma GCC unroll 4
        for (int b = 0; b < NJ; b++) {
            s16[b] = sb16(w->scales, w->sb_dtype, (size_t)(j + b) * ng + g0, ng - g0);
            if (NT == 1) s16[b] = _mm512_mul_ps(s16[b], p16[0]); /* s·p once per window (the same products as below) */
        }
        int bend = blk + bpw < nb ? blk + bpw : nb;
        for (int bi = 0; blk < bend; blk++, bi++) {
            __m512i gidx = _mm512_add_epi32(_mm512_set1_epi32(bi * 128 / G), lane_grp);
            __m512 pa[2];
            if (NT > 1)
#pragma GCC unroll 2
                for (int a = 0; a < NT; a++) pa[a] = _mm512_permutexvar_ps(gidx, p16[a]);
#pragma GCC unroll 4
            for (int b = 0; b < NJ; b++) {
                if (PF) _mm_prefetch((const char *)rows[b] + (size_t)blk * 16 * B + pfd, _MM_HINT_T0);
                __m512i ca, cb;
                qbi_codes(rows[b], rb, blk, B, cst, &ca, &cb);
                __m512 sv = _mm512_permutexvar_ps(gidx, s16[b]);
#pragma GCC unroll 2
                for (int a = 0; a < NT; a++) {
                    const __m512i *xb = (const __m512i *)(q->xd + (size_t)(t + a) * q->xds + (size_t)blk * 384);
                    __m512i d = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ca, xb[0]), cb, xb[1]);
                    d = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_slli_epi32(d, 8), ca, xb[2]), cb, xb[3]);
                    d = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_slli_epi32(d, 8), ca, xb[4]), cb, xb[5]);
                    acc[a][b] = _mm512_fmadd_ps(NT == 1 ? sv : _mm512_mul_ps(sv, pa[a]), _mm512_cvtepi32_ps(d), acc[a][b]);
                }
            }
        }
    }
#pragma GCC unroll 2
    for (int a = 0; a < NT; a++)
#pragma GCC unroll 4
        for (int b = 0; b < NJ; b++) y[(size_t)(t + a) * N + j + b] = _mm512_reduce_add_ps(acc[a][b]);
}

/* decode rows [j0, j1) in 4-row tiles; the GEMM: chunks of x rows near 128 KB of digits, 2 × 4 tiles */
AI void qbi_run(float *y, const qbi_t *q, int T, const weight_t *w, int j0, int j1, const int B) {
    if (T == 1) {
        int j = j0;
        for (; j + 4 <= j1; j += 4) qbi_tile(y, q, 0, w, j, 1, 4, 1, B);
        for (; j < j1; j++) qbi_tile(y, q, 0, w, j, 1, 1, 1, B);
        return;
    }
    int tc = (int)(131072 / (q->xds + 1)) & ~1;
    if (tc < 2) tc = 2;
    for (int t0 = 0; t0 < T; t0 += tc) {
        int t1 = t0 + tc < T ? t0 + tc : T, j = j0;
        for (; j + 4 <= j1; j += 4) {
            int t = t0;
            for (; t + 2 <= t1; t += 2) qbi_tile(y, q, t, w, j, 2, 4, 0, B);
            for (; t < t1; t++) qbi_tile(y, q, t, w, j, 1, 4, 0, B);
        }
        for (; j < j1; j++)
            for (int t = t0; t < t1; t++) qbi_tile(y, q, t, w, j, 1, 1, 0, B);
    }
}
static __attribute__((noinline)) void qbi_run_w(float *y, const qbi_t *q, int T, const weight_t *w, int j0, int j1) {
    switch (w->bits) {
    case 2: qbi_run(y, q, T, w, j0, j1, 2); break;
    case 3: qbi_run(y, q, T, w, j0, j1, 3); break;
    case 5: qbi_run(y, q, T, w, j0, j1, 5); break;
    default: qbi_run(y, q, T, w, j0, j1, 6);
    }
}
#pragma GCC pop_options

/* the integer path takes w: a CPU with VNNI and VBMI, 2/3/5/6-bit codes in groups of 32/64/128 dividing K
 * (KILN_QB_VBMI=0: as if the CPU had no VBMI — q4i's lb512_codes path below instead, for tests and A/B) */
static int qbi_ok(const weight_t *w) {
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("KILN_Q4_FMA"), *v = getenv("KILN_QB_VBMI");
        on = __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vbmi") && !(e && *e == '1') && !(v && *v == '0');
    }
    return on && (w->bits == 2 || w->bits == 3 || w->bits == 5 || w->bits == 6) && (w->group == 32 || w->group == 64 || w->group == 128) &&
           w->cols % w->group == 0;
}
/* 2/3/5/6 bits where qbi is not: a CPU with VNNI but no VBMI takes q4i with lb512_codes */
static int qlb_ok(const weight_t *w) {
    return (w->bits == 2 || w->bits == 3 || w->bits == 5 || w->bits == 6) && q4i_ok(w);
}
static void mm_qbi(float *y, const float *x, int T, const weight_t *w, int j0, int j1) {
    qbi_t q;
    if (qbi_prepare(&q, x, T, w)) abort();
    qbi_run_w(y, &q, T, w, j0, j1);
}

/* From this many x rows the 2/3/5/6-bit GEMM takes q4i with its unpacked panel even where qbi
 * exists: the two give the same bits (the same x digits, the same exact integer per 8-column lane,
 * the same fold and order: kiln logits md5 equal for qwen3-0.6b q2/q3/q5/q6 with and without
 * KILN_QB_VBMI=0), and qbi unpacks each block again for every pair of x rows (kiln-mm-bench --rows
 * 1024 --cols 1024, GFLOP/s qbi / panel: T=8 103 / 90-108, T=16 104 / 127, T=32 85-104 / 140). */
#define QB_GEMM_T 12
AI void mm_qb(float *y, const float *x, int T, const weight_t *w, int j0, int j1, const int B) {
    if (qbi_ok(w) && T < QB_GEMM_T) {
        mm_qbi(y, x, T, w, j0, j1);
        return;
    }
    if (qlb_ok(w)) {
        mm_q4i(y, x, T, w, j0, j1);
        return;
    }
    int ngp;
    float *xg = group_sums(x, T, w->cols, w->group, &ngp);
    if (T == 1) qb_rows(y, x, xg, w, j0, j1, B);
    else gemm_fk(y, x, T, w, j0, j1, ld_f32, B, xg, ngp);
    free(xg);
}

static void mm_qany(float *y, const float *x, int T, const weight_t *w, int j0, int j1) {
    switch (w->bits) {
    case 2: mm_qb(y, x, T, w, j0, j1, 2); break;
    case 3: mm_qb(y, x, T, w, j0, j1, 3); break;
    case 5: mm_qb(y, x, T, w, j0, j1, 5); break;
    case 6: mm_qb(y, x, T, w, j0, j1, 6); break;
    default: qrun(y, x, T, w, j0, j1, 0); /* (widths MLX does not write) */
    }
}
/* 4-bit in WL_Q_RIL16 (q4ril.h), and 2/3/5/6-bit in its planes: rows in full tiles there, the
 * N % 16 tail rows (stored row-major) through mm_q4 (q4i) or mm_qany — the same code at any T
 * for every row. */
static void mm_q4ril(float *y, const float *x, int T, const weight_t *w, int j0, int j1) {
    int nr = w->rows & ~15;
    if (T <= 0) return; /* llama.c asks for no logits in some engine steps (as q8ril_matmul, mm_t4) */
    if (j0 < nr) {
        void *q = q4ril_prepare(x, T, w);
        if (!q) abort();
        if (T == 1) q4ril_rows(y, q, w, j0, j1 < nr ? j1 : nr);
        else q4ril_gemm(y, q, T, w, j0, j1 < nr ? j1 : nr);
    }
    if (j1 > nr && w->bits == 4) mm_q4(y, x, T, w, j0 > nr ? j0 : nr, j1);
    else if (j1 > nr) mm_qany(y, x, T, w, j0 > nr ? j0 : nr, j1);
}
static void matmul(float *y, const float *x, int T, const weight_t *w, int j0, int j1) {
    if (amx_q8_ok(w)) amx_matmul_q8(y, x, T, w, j0, j1, NULL);
    else if (amx_q4_ok(w)) amx_matmul_q4(y, x, T, w, j0, j1, NULL);
    else if (amx_bf16_ok(w)) amx_matmul_bf16(y, x, T, w, j0, j1, NULL);
    else if (weight_is_quantized(w)) {
        if (w->bits != 8 && w->layout == WL_Q_RIL16) mm_q4ril(y, x, T, w, j0, j1); /* 4-bit, or 2/3/5/6 in planes */
        else if (w->bits == 4) mm_q4(y, x, T, w, j0, j1);
        else if (w->bits == 8 && w->layout == WL_Q_RIL16) q8ril_matmul(y, x, T, w, j0, j1); /* q8ril.h */
        else if (w->bits == 8) mm_q8(y, x, T, w, j0, j1);
        else mm_qany(y, x, T, w, j0, j1);
    } else if (w->dtype == DT_BF16) mm_bf16(y, x, T, w, j0, j1);
    else if (w->dtype == DT_F16) mm_f16(y, x, T, w, j0, j1);
    else mm_f32(y, x, T, w, j0, j1);
}

static float dot(const float *a, const float *b, int n) {
    __m512 acc = _mm512_setzero_ps();
    int i = 0;
    for (; i + L <= n; i += L) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

static void axpy(float *y, float a, const float *x, int n) {
    __m512 av = _mm512_set1_ps(a);
    int i = 0;
    for (; i + L <= n; i += L) _mm512_storeu_ps(y + i, _mm512_fmadd_ps(av, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    for (; i < n; i++) y[i] = fmaf(a, x[i], y[i]);
}

static void to_f32(float *dst, const void *src, dtype_t t, int n) {
    int i = 0;
    if (t == DT_F16)
        for (; i + L <= n; i += L) _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)src + i))));
    else if (t == DT_BF16)
        for (; i + L <= n; i += L)
            _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)src + i))), 16)));
    for (; i < n; i++) dst[i] = load_as_f32(src, t, i);
}

/* exp(x) for x clamped to [-104, 104] first (NaN: max/min return the bound): 2^n · e^r,
 * n = round(x·log2 e), r = x - n·ln2 (two parts), e^r by Cephes expf's polynomial; scalef
 * gives inf/0 past f32's range. gelu_glu and silu_glu share it. */
static inline __m512 exp_clamped(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.f)), _mm512_set1_ps(104.f));
    __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.f)));
    return _mm512_scalef_ps(p, k);
}

/* gelu_glu: see cpu_kernels.h; tanh through exp_clamped(-2u). */
static void gelu_glu(float *y, const float *gate, const float *up, size_t n) {
    const __m512 c0 = _mm512_set1_ps(0.7978845608028654f), c1 = _mm512_set1_ps(0.044715f), one = _mm512_set1_ps(1.f);
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
        __m512 u = _mm512_mul_ps(c0, _mm512_add_ps(g, _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(c1, g), g), g)));
        __m512 e = exp_clamped(_mm512_mul_ps(u, _mm512_set1_ps(-2.f)));
        __m512 a = _mm512_div_ps(g, _mm512_add_ps(one, e));
        a = _mm512_mask_mov_ps(a, _mm512_cmp_ps_mask(u, u, _CMP_UNORD_Q), u); /* NaN in, NaN out */
        _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(a, _mm512_maskz_loadu_ps(m, up + i)));
    }
}

/* T == 1 over the rows r hands out (mm_rows_next), x prepared once: each chunk runs the
 * code matmul runs on a slice (quads from the chunk's start, then single rows). AMX weights
 * are left to the static split (their decode twins prepare x per call). */
static int matmul_rows(float *y, const float *x, const weight_t *w, mm_rows_t *r) {
    if (amx_q8_ok(w) || amx_q4_ok(w) || amx_bf16_ok(w)) return 0;
    int j0, j1;
    if (weight_is_quantized(w) && w->bits == 8 && w->layout == WL_Q_RIL16) q8ril_rows(y, x, w, r); /* q8ril.h */
    else if (weight_is_quantized(w) && w->layout == WL_Q_RIL16) { /* q4ril.h (4-bit; 2/3/5/6 in planes); the tail rows as matmul */
        int nr = w->rows & ~15;
        void *q = q4ril_prepare(x, 1, w);
        if (!q) abort();
        while (mm_rows_next(r, &j0, &j1)) {
            if (j0 < nr) q4ril_rows(y, q, w, j0, j1 < nr ? j1 : nr);
            if (j1 > nr && w->bits == 4) mm_q4(y, x, 1, w, j0 > nr ? j0 : nr, j1);
            else if (j1 > nr) mm_qany(y, x, 1, w, j0 > nr ? j0 : nr, j1);
        }
    } else if (weight_is_quantized(w) && w->bits == 4 && q4i_ok(w)) {
        q4i_t q;
        if (q4i_prepare(&q, x, 1, w)) abort();
        while (mm_rows_next(r, &j0, &j1)) q4i_rows(y, &q, 0, w, j0, j1, 1);
        q4i_free(&q);
    } else if (weight_is_quantized(w) && w->bits == 4 && (w->group == 32 || w->group == 64 || w->group == 128)) {
        q4x_t q;
        if (q4_prepare(&q, x, 1, w)) abort();
        while (mm_rows_next(r, &j0, &j1)) {
            int j = j0;
            for (; j + 4 <= j1; j += 4) q4tile(y, &q, w, 0, j, 1, 4);
            for (; j < j1; j++) q4tile(y, &q, w, 0, j, 1, 1);
        }
        free((void *)q.xq);
    } else if (weight_is_quantized(w) && w->bits == 8) {
        int ngp;
        float *xg = group_sums(x, 1, w->cols, w->group, &ngp);
        while (mm_rows_next(r, &j0, &j1)) {
            int j = j0;
            for (; j + 4 <= j1; j += 4) q8tile(y, x, xg, w, j, 4);
            for (; j < j1; j++) q8tile(y, x, xg, w, j, 1);
        }
        free(xg);
    } else if (weight_is_quantized(w) && qbi_ok(w)) {
        qbi_t q;
        if (qbi_prepare(&q, x, 1, w)) abort();
        while (mm_rows_next(r, &j0, &j1)) qbi_run_w(y, &q, 1, w, j0, j1);
    } else if (weight_is_quantized(w) && qlb_ok(w)) {
        q4i_t q;
        if (q4i_prepare(&q, x, 1, w)) abort();
        while (mm_rows_next(r, &j0, &j1)) q4i_rows(y, &q, 0, w, j0, j1, 1);
        q4i_free(&q);
    } else if (weight_is_quantized(w) && (w->bits == 2 || w->bits == 3 || w->bits == 5 || w->bits == 6)) {
        int ngp, B = w->bits;
        float *xg = group_sums(x, 1, w->cols, w->group, &ngp); /* once, not per hand-out */
        while (mm_rows_next(r, &j0, &j1)) qb_rows(y, x, xg, w, j0, j1, B);
        free(xg);
    } else /* nothing to prepare */
        while (mm_rows_next(r, &j0, &j1)) matmul(y, x, 1, w, j0, j1);
    return 1;
}

/* f32 -> f16 as f32_to_f16 (dtype.h) does it: vcvtps2ph rounds to nearest even like it
 * (subnormal halves and overflow to Inf included); only a NaN's payload differs, so NaN
 * lanes are rewritten to f32_to_f16's sign | 0x7e00. The K/V cache write of every token. */
static int from_f32(void *dst, dtype_t t, const float *src, int n) {
    if (t != DT_F16) return 0;
    uint16_t *d = dst;
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 v = _mm512_maskz_loadu_ps(m, src + i);
        __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        if (nan) {
            __m512i sg = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(v), 16), _mm512_set1_epi32(0x8000)), _mm512_set1_epi32(0x7e00));
            h = _mm256_mask_mov_epi16(h, nan, _mm512_cvtepi32_epi16(sg));
        }
        _mm256_mask_storeu_epi16(d + i, m, h);
    }
    return 1;
}

/* One int8 KV row as kv_q8_row (backend.h): max |x| over 16 lanes (a max is exact in any order;
 * NaN tracked apart, as the scalar loop lets it stick), then per element the same product with
 * 127 / max, the same 1.5·2^23 add-and-subtract rounding and clamp, narrowed to bytes. */
static void q8_row(int8_t *codes, float *scale, const float *x, int n) {
    const __m512 sign = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    __m512 mx = _mm512_setzero_ps();
    __mmask16 nan = 0;
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        mx = _mm512_max_ps(mx, _mm512_and_ps(v, sign));
    }
    float amax = nan ? __builtin_nanf("") : _mm512_reduce_max_ps(mx);
    int finite = amax <= 3.4028234e38f;
    float inv = finite && amax > 0 ? 127.f / amax : 0.f;
    const __m512 iv = _mm512_set1_ps(inv), mg = _mm512_set1_ps(12582912.f), hi = _mm512_set1_ps(127.f), lo = _mm512_set1_ps(-127.f);
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 r = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), iv), mg), mg);
        r = _mm512_max_ps(_mm512_min_ps(r, hi), lo);
        __m128i c = finite ? _mm512_cvtsepi32_epi8(_mm512_cvttps_epi32(r)) : _mm_setzero_si128();
        _mm_mask_storeu_epi8(codes + i, m, c);
    }
    *scale = finite ? amax / 127.f : __builtin_nanf("");
}

/* rms_norm / silu_glu: see cpu_kernels.h. */
static void rms_norm(float *y, const float *x, const float *w, float w_offset, int T, int n, float eps) {
    const __m512 ov = _mm512_set1_ps(w_offset);
    for (int t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * n;
        float *yt = y + (size_t)t * n;
        __m512 ss = _mm512_setzero_ps();
        for (int i = 0; i < n; i += 16) {
            __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
            __m512 v = _mm512_maskz_loadu_ps(m, xt + i);
            ss = _mm512_fmadd_ps(v, v, ss);
        }
        __m512 iv = _mm512_set1_ps(1.0f / sqrtf(_mm512_reduce_add_ps(ss) / (float)n + eps));
        for (int i = 0; i < n; i += 16) {
            __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
            __m512 r = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, xt + i), iv);
            if (w) r = _mm512_mul_ps(r, _mm512_add_ps(ov, _mm512_maskz_loadu_ps(m, w + i)));
            _mm512_mask_storeu_ps(yt + i, m, r);
        }
    }
}

/* silu_glu: see cpu_kernels.h; g / (1 + exp_clamped(-g)). */
static void silu_glu(float *y, const float *gate, const float *up, size_t n) {
    const __m512 one = _mm512_set1_ps(1.f);
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
        __m512 a = _mm512_div_ps(g, _mm512_add_ps(one, exp_clamped(_mm512_sub_ps(_mm512_setzero_ps(), g)))); /* NaN g: NaN */
        _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(a, _mm512_maskz_loadu_ps(m, up + i)));
    }
}

/* The packed layout each weight kind's kernels want (cpu_pack.h); never one an AMX kernel
 * takes (those read the stored order). Asked once per weight at load, so the switches are
 * read here, uncached. Each kind has its own: KILN_PACK_<kind>=0 keeps it row-major (A/B).
 *   Q8    8-bit, VNNI (q8ril.h): decode +16-40 % (qwen3-0.6b), prefill +50-71 %
 *   Q4    4-bit, VNNI: prefill +42-57 %, decode +9 % (qwen3-0.6b) / within noise (llama-3.2-1b)
 *   DENSE bf16 and f16: decode bf16 +7-52 %, f16 +27 %, bitwise; f32 is read by mm_t4 but not
 *         packed (its rows already stream a whole line per 16 columns; A/B B ahead 1 of 3)
 * (bench/cpu/RESULTS.md, session 9: helpers 58/59/60 and the lead's same-binary A/B) */
static int pack_kind_on(const char *name) {
    const char *e = getenv(name);
    return !(e && *e == '0');
}

static int pack_layout(const weight_t *w) {
    if (amx_q8_ok(w) || amx_q4_ok(w) || amx_bf16_ok(w)) return WL_ROWS;
    if (q8ril_ok(w) && pack_kind_on("KILN_PACK_Q8")) return WL_Q_RIL16;
    if (weight_is_quantized(w) && w->bits == 4 && q4i_ok(w) && w->rows >= 16 && pack_kind_on("KILN_PACK_Q4")) return WL_Q_RIL16;
    if (weight_is_quantized(w) && (w->bits == 2 || w->bits == 3 || w->bits == 5 || w->bits == 6) && q4i_ok(w) && w->rows >= 16 &&
        w->cols % 32 == 0 && pack_kind_on("KILN_PACK_QB"))
        return WL_Q_RIL16; /* in planes (weight.h): q4ril's kernels */
    if ((w->dtype == DT_BF16 || w->dtype == DT_F16) && w->rows >= 4 && w->cols % 16 == 0 && pack_kind_on("KILN_PACK_DENSE"))
        return WL_DENSE_T4; /* mm_t4 */
    return WL_ROWS;
}

const simd_kernels_t simd_avx512 = {"avx512", matmul, dot, axpy, to_f32, gelu_glu, matmul_rows, from_f32, rms_norm, silu_glu, pack_layout, q8_row};
