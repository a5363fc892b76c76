/* matmul_avx2.c — AVX2+FMA kernels: the same contract as matmul_avx512.c with 8 lanes.
 *
 * Each output element is one 8-lane accumulator over K in chunks of 8, then a fixed
 * horizontal sum. The last partial chunk is copied into a zero-padded buffer (AVX2 has
 * no masked 16-bit loads); the copy converts exactly as the vector path does, so values
 * do not depend on where a chunk falls. Tiles are 2 x rows × 4 W rows (8 accumulators
 * + 6 operands in the 16 ymm registers). */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include "backend/cpu/cpu_kernels.h"

#define L 8
#define AI static inline __attribute__((always_inline))
/* Decode (one x row): each W row's line PF_AHEAD bytes on (cpu_kernels.h) is asked for as a line
 * is started. Without it the 4-row tiles waited on their loads: qwen3-0.6b bf16 decode read ~23
 * GB/s of a ~48 GB/s machine. */

typedef __m256 (*ldw_fn)(const weight_t *w, int r, int k);

AI __m256 ld_f32(const weight_t *w, int r, int k) { return _mm256_loadu_ps((const float *)w->data + (size_t)r * w->cols + k); }
AI __m256 ld_bf16(const weight_t *w, int r, int k) {
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w->data + (size_t)r * w->cols + k));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
AI __m256 ld_f16(const weight_t *w, int r, int k) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)w->data + (size_t)r * w->cols + k)));
}
AI float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The partial last chunk of a W row, zero padded, as f32. Dense tails only: quantized
 * rows are whole groups (multiples of 32). */
static __m256 tail_w(const weight_t *w, int r, int k) {
    float buf[L] = {0};
    const char *base = (const char *)w->data + (size_t)r * w->cols * dtype_size(w->dtype);
    for (int i = 0; k + i < w->cols; i++) buf[i] = load_as_f32(base, w->dtype, k + i);
    return _mm256_loadu_ps(buf);
}
static __m256 tail_x(const float *x, int k, int K) {
    float buf[L] = {0};
    for (int i = 0; k + i < K; i++) buf[i] = x[k + i];
    return _mm256_loadu_ps(buf);
}

AI void tile(float *y, const float *x, const weight_t *w, int t, int j, const int NT, const int NJ, ldw_fn ld) {
    int K = w->cols, N = w->rows, nfull = K / L, rem = K % L;
    size_t esz = w->dtype == DT_F32 ? 4 : 2, rb = (size_t)K * esz, pfd = PF_AHEAD(rb);
    const char *pr[4];
    #pragma GCC unroll 4
    for (int b = 0; b < NJ; b++) pr[b] = (const char *)w->data + (size_t)(j + b) * rb;
    __m256 acc[2][4];
    #pragma GCC unroll 4
    for (int a = 0; a < NT; a++)
        #pragma GCC unroll 4
        for (int b = 0; b < NJ; b++) acc[a][b] = _mm256_setzero_ps();
    for (int c = 0; c < nfull; c++) {
        __m256 wv[4];
        size_t o = (size_t)c * L * esz;
        #pragma GCC unroll 4
        for (int b = 0; b < NJ; b++) {
            if (NT == 1 && !(o & 63)) _mm_prefetch(pr[b] + o + pfd, _MM_HINT_T0);
            wv[b] = ld(w, j + b, c * L);
        }
        #pragma GCC unroll 4
        for (int a = 0; a < NT; a++) {
            __m256 xv = _mm256_loadu_ps(x + (size_t)(t + a) * K + c * L);
            #pragma GCC unroll 4
            for (int b = 0; b < NJ; b++) acc[a][b] = _mm256_fmadd_ps(xv, wv[b], acc[a][b]);
        }
    }
    if (rem) {
        __m256 wv[4];
        #pragma GCC unroll 4
        for (int b = 0; b < NJ; b++) wv[b] = tail_w(w, j + b, nfull * L);
        #pragma GCC unroll 4
        for (int a = 0; a < NT; a++) {
            __m256 xv = tail_x(x + (size_t)(t + a) * K, nfull * L, K);
            #pragma GCC unroll 4
            for (int b = 0; b < NJ; b++) acc[a][b] = _mm256_fmadd_ps(xv, wv[b], acc[a][b]);
        }
    }
    #pragma GCC unroll 4
    for (int a = 0; a < NT; a++)
        #pragma GCC unroll 4
        for (int b = 0; b < NJ; b++) y[(size_t)(t + a) * N + j + b] = hsum(acc[a][b]);
}

static int t_chunk(int K) {
    int c = (65536 / (K > 0 ? K : 1)) & ~1;
    return c < 2 ? 2 : c;
}

AI void run(float *y, const float *x, int T, const weight_t *w, int j0, int j1, ldw_fn ld) {
    int tc = t_chunk(w->cols);
    for (int t0 = 0; t0 < T; t0 += tc) {
        int t1 = t0 + tc < T ? t0 + tc : T;
        int j = j0;
        for (; j + 4 <= j1; j += 4) {
            int t = t0;
            for (; t + 2 <= t1; t += 2) tile(y, x, w, t, j, 2, 4, ld);
            for (; t < t1; t++) tile(y, x, w, t, j, 1, 4, ld);
        }
        for (; j < j1; j++) {
            int t = t0;
            for (; t + 2 <= t1; t += 2) tile(y, x, w, t, j, 2, 1, ld);
            for (; t < t1; t++) tile(y, x, w, t, j, 1, 1, ld);
        }
    }
}


/* Codes only (the affine step is applied by qtile with per-group scale and bias). */
AI __m256 codes_q4(const uint8_t *row, int k) {
    uint32_t word;
    __builtin_memcpy(&word, row + k / 2, 4);
    __m128i b = _mm_cvtsi32_si128((int)word);
    __m128i lo = _mm_and_si128(b, _mm_set1_epi8(15));
    __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(15));
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi)));
}
AI __m256 codes_q8(const uint8_t *row, int k) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(row + k))));
}
/* 8 codes of B bits (a constant, 1..8) of a row's little-endian bit stream, codes k..k+7 (k % 8
 * == 0: they start on a byte): their B bytes (8 read while inside the row; nothing past it) to both 128-bit
 * lanes; lane i takes the two bytes holding code i with vpshufb, shifts right by i·B % 8, masks
 * (as the AVX-512 codes_bits) */
#define CB_IX(i, B) ((int)((unsigned)((i) * (B) >> 3) | (unsigned)(((i) * (B) >> 3) + 1) << 8 | 0x80800000u))
AI __m256 codes_bits(const uint8_t *row, int k, int K, const int B) {
    const uint8_t *p = row + (size_t)k * B / 8;
    uint64_t u = 0;
    if ((size_t)k * B / 8 + 8 <= (size_t)K * B / 8) __builtin_memcpy(&u, p, 8); /* (one load, inside the row) */
    else __builtin_memcpy(&u, p, (size_t)B);
    const __m256i idx = _mm256_setr_epi32(CB_IX(0, B), CB_IX(1, B), CB_IX(2, B), CB_IX(3, B), CB_IX(4, B), CB_IX(5, B), CB_IX(6, B),
                                          CB_IX(7, B));
    const __m256i sh = _mm256_setr_epi32(0, B & 7, 2 * B & 7, 3 * B & 7, 4 * B & 7, 5 * B & 7, 6 * B & 7, 7 * B & 7);
    __m256i v = _mm256_broadcastsi128_si256(_mm_cvtsi64_si128((long long)u));
    v = _mm256_srlv_epi32(_mm256_shuffle_epi8(v, idx), sh);
    return _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32((1 << B) - 1)));
}
#undef CB_IX
/* any width at run time (widths MLX does not write): the reference's extraction */
AI __m256 codes_any(const uint8_t *row, int k, int bits) {
    int32_t c[8];
    for (int i = 0; i < 8; i++) c[i] = (int32_t)weight_code((const uint32_t *)row, bits, k + i);
    return _mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)c));
}

/* A tile over a quantized W: walks K group by group so each row's scale and bias are
 * read once per group (not per chunk), then dequantizes 8 codes at a time in registers:
 * w = fma(code, scale, bias), acc = fma(x, w, acc) — the same per-element arithmetic as
 * ld_q*, just without a division per chunk. BITS is a constant after inlining. */
AI void qtile(float *y, const float *x, const weight_t *w, int t, int j, const int NT, const int NJ, const int BITS) {
    int K = w->cols, N = w->rows, G = w->group, ng = K / G, bits = BITS ? BITS : w->bits;
    size_t row_bytes = (size_t)K * bits / 8;
    const uint8_t *rows[4];
    /* decode of 5..8-bit codes: prefetched (q8 +70-90 %, q6 +20-70 %; 2..4 bits are bound by
     * their extraction, and the prefetches cost q3 ~5-10 %: bench/cpu/RESULTS.md, session 36) */
    size_t pfd = PF_AHEAD(row_bytes);
    int pf = NT == 1 && bits >= 5;
    #pragma GCC unroll 4
    for (int b = 0; b < NJ; b++) {
        rows[b] = (const uint8_t *)w->data + (size_t)(j + b) * row_bytes;
        if (pf) { /* the scales and biases of the row the codes prefetch reaches */
            size_t sz = w->sb_dtype == DT_F32 ? 4 : 2, ahead = pfd / row_bytes + 1, o0 = (j + b + ahead) * ng * sz;
            for (size_t o = 0; o < (size_t)ng * sz; o += 64) {
                _mm_prefetch((const char *)w->scales + o0 + o, _MM_HINT_T0);
                _mm_prefetch((const char *)w->biases + o0 + o, _MM_HINT_T0);
            }
        }
    }
    __m256 acc[2][4];
    #pragma GCC unroll 4
    for (int a = 0; a < NT; a++)
        #pragma GCC unroll 4
        for (int b = 0; b < NJ; b++) acc[a][b] = _mm256_setzero_ps();
    for (int g = 0; g < ng; g++) {
        __m256 sv[4], bv[4];
        #pragma GCC unroll 4
        for (int b = 0; b < NJ; b++) {
            size_t gi = (size_t)(j + b) * ng + g;
            sv[b] = _mm256_set1_ps(load_as_f32(w->scales, w->sb_dtype, gi));
            bv[b] = _mm256_set1_ps(load_as_f32(w->biases, w->sb_dtype, gi));
        }
        if (BITS == 4) { /* 16 codes per step from 8 bytes: one nibble split for two vectors (the same chain) */
            for (int k = g * G; k < (g + 1) * G; k += 16) {
                __m256 x0[2], x1[2];
                #pragma GCC unroll 2
                for (int a = 0; a < NT; a++) {
                    x0[a] = _mm256_loadu_ps(x + (size_t)(t + a) * K + k);
                    x1[a] = _mm256_loadu_ps(x + (size_t)(t + a) * K + k + 8);
                }
                #pragma GCC unroll 4
                for (int b = 0; b < NJ; b++) {
                    __m128i by = _mm_loadl_epi64((const __m128i *)(rows[b] + k / 2));
                    __m128i cb = _mm_unpacklo_epi8(_mm_and_si128(by, _mm_set1_epi8(15)), _mm_and_si128(_mm_srli_epi16(by, 4), _mm_set1_epi8(15)));
                    __m256 w0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(cb)), sv[b], bv[b]);
                    __m256 w1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpackhi_epi64(cb, cb))), sv[b], bv[b]);
                    #pragma GCC unroll 2
                    for (int a = 0; a < NT; a++) acc[a][b] = _mm256_fmadd_ps(x1[a], w1, _mm256_fmadd_ps(x0[a], w0, acc[a][b]));
                }
            }
            continue;
        }
        for (int k = g * G; k < (g + 1) * G; k += 8) {
            __m256 wv[4];
            #pragma GCC unroll 4
            for (int b = 0; b < NJ; b++) {
                size_t o = (size_t)k * bits / 8;
                if (pf && (o & 63) < (size_t)bits) _mm_prefetch((const char *)rows[b] + o + pfd, _MM_HINT_T0); /* once per line */
                __m256 c = BITS == 4 ? codes_q4(rows[b], k) : BITS == 8 ? codes_q8(rows[b], k)
                         : BITS ? codes_bits(rows[b], k, K, BITS) : codes_any(rows[b], k, bits);
                wv[b] = _mm256_fmadd_ps(c, sv[b], bv[b]);
            }
            #pragma GCC unroll 4
            for (int a = 0; a < NT; a++) {
                __m256 xv = _mm256_loadu_ps(x + (size_t)(t + a) * K + k);
                #pragma GCC unroll 4
                for (int b = 0; b < NJ; b++) acc[a][b] = _mm256_fmadd_ps(xv, wv[b], acc[a][b]);
            }
        }
    }
    #pragma GCC unroll 4
    for (int a = 0; a < NT; a++)
        #pragma GCC unroll 4
        for (int b = 0; b < NJ; b++) y[(size_t)(t + a) * N + j + b] = hsum(acc[a][b]);
}

AI void qrun(float *y, const float *x, int T, const weight_t *w, int j0, int j1, const int BITS) {
    int tc = t_chunk(w->cols);
    for (int t0 = 0; t0 < T; t0 += tc) {
        int t1 = t0 + tc < T ? t0 + tc : T;
        int j = j0;
        for (; j + 4 <= j1; j += 4) {
            int t = t0;
            for (; t + 2 <= t1; t += 2) qtile(y, x, w, t, j, 2, 4, BITS);
            for (; t < t1; t++) qtile(y, x, w, t, j, 1, 4, BITS);
        }
        for (; j < j1; j++) {
            int t = t0;
            for (; t + 2 <= t1; t += 2) qtile(y, x, w, t, j, 2, 1, BITS);
            for (; t < t1; t++) qtile(y, x, w, t, j, 1, 1, BITS);
        }
    }
}

/* --- Quantized weights at T >= GP_MIN: qtile's chains through panels. The tiles dequantize each
 * W chunk for every pair of x rows — ~4-7 ops per 8 codes against 8 FMAs — so 4/8-bit prefill
 * ran at ~30-45 % of the FMA rate and 2/3/5/6-bit lower. Here a panel of GP_J W rows ×
 * GP_KC columns is dequantized once per block of GP_B x rows into an L1 buffer, exactly as qtile
 * does it (fma(code, scale, bias)), and 2 x rows × 4 panel rows walk it with their accumulators
 * carried across panels (A): per element acc = 0, acc = fma(x, w, acc) per 8 columns in order,
 * one hsum — qtile's chain, so a row alone (decode, T = 1) is bitwise the row in any batch. */
#define GP_J 4
#define GP_KC 512
#define GP_B 64
#define GP_MIN 4

/* P[b·kc + (k − k0)] = qtile's w = fma(code, scale, bias) of row j + b, columns [k0, k1) in chunks of 8 */
AI void gp_panel(float *P, int kc, const weight_t *w, int j, int nj, int k0, int k1, const int BITS) {
    int K = w->cols;
    for (int b = 0; b < nj; b++) {
        int G = w->group, ng = K / G, bits = BITS > 0 ? BITS : w->bits;
        const uint8_t *row = (const uint8_t *)w->data + (size_t)(j + b) * ((size_t)K * bits / 8);
        for (int k = k0; k < k1;) { /* (a panel's columns are whole chunks of 8 inside groups: G % 8 == 0) */
            size_t gi = (size_t)(j + b) * ng + (size_t)(k / G);
            __m256 sv = _mm256_set1_ps(load_as_f32(w->scales, w->sb_dtype, gi)), bv = _mm256_set1_ps(load_as_f32(w->biases, w->sb_dtype, gi));
            int ke = (k / G + 1) * G < k1 ? (k / G + 1) * G : k1;
            for (; k < ke; k += L) {
                __m256 c = BITS == 4 ? codes_q4(row, k) : BITS == 8 ? codes_q8(row, k) : BITS > 0 ? codes_bits(row, k, K, BITS > 0 ? BITS : 8)
                         : codes_any(row, k, bits);
                _mm256_store_ps(P + (size_t)b * kc + (k - k0), _mm256_fmadd_ps(c, sv, bv));
            }
        }
    }
}

/* NT x rows (from t) × NJ panel rows over columns [k0, k1): accumulators from A (x row a, W row b
 * at A[a·GP_J + b]), back to A, or at k1 == K summed into y */
AI void gp_tile(float *y, __m256 *A, const float *x, int K, int N, const float *P, int kc, int t, int j, int k0, int k1, const int NT,
                const int NJ) {
    __m256 acc[2][4];
    #pragma GCC unroll 2
    for (int a = 0; a < NT; a++)
        #pragma GCC unroll 4
        for (int b = 0; b < NJ; b++) acc[a][b] = A[a * GP_J + b];
    for (int k = k0; k < k1; k += L) {
        __m256 wv[4];
        #pragma GCC unroll 4
        for (int b = 0; b < NJ; b++) wv[b] = _mm256_load_ps(P + (size_t)b * kc + (k - k0));
        #pragma GCC unroll 2
        for (int a = 0; a < NT; a++) {
            const float *xr = x + (size_t)(t + a) * K;
            __m256 xv = _mm256_loadu_ps(xr + k); /* (quantized rows are whole groups: K % 8 == 0) */
            #pragma GCC unroll 4
            for (int b = 0; b < NJ; b++) acc[a][b] = _mm256_fmadd_ps(xv, wv[b], acc[a][b]);
        }
    }
    #pragma GCC unroll 2
    for (int a = 0; a < NT; a++)
        #pragma GCC unroll 4
        for (int b = 0; b < NJ; b++) {
            if (k1 == K) y[(size_t)(t + a) * N + j + b] = hsum(acc[a][b]);
            else A[a * GP_J + b] = acc[a][b];
        }
}

/* BITS: 4/8/2/3/5/6 the width, -1 any width at run time */
AI void gemm_p(float *y, const float *x, int T, const weight_t *w, int j0, int j1, const int BITS) {
    int K = w->cols, N = w->rows, kc = K < GP_KC ? (K + L - 1) / L * L : GP_KC;
    float *P = aligned_alloc(32, sizeof(float) * GP_J * (size_t)kc);
    __m256 *A = aligned_alloc(32, sizeof(__m256) * GP_B * GP_J);
    if (!P || !A) abort();
    for (int t0 = 0; t0 < T; t0 += GP_B) {
        int tn = T - t0 < GP_B ? T - t0 : GP_B;
        for (int jb = j0; jb < j1; jb += GP_J) {
            int nj = j1 - jb < GP_J ? j1 - jb : GP_J;
            for (int i = 0; i < tn * GP_J; i++) A[i] = _mm256_setzero_ps();
            for (int k0 = 0; k0 < K; k0 += kc) {
                int k1 = k0 + kc < K ? k0 + kc : K;
                gp_panel(P, kc, w, jb, nj, k0, k1, BITS);
                int a = 0;
                for (; a + 2 <= tn; a += 2) {
                    if (nj == GP_J) gp_tile(y, A + a * GP_J, x, K, N, P, kc, t0 + a, jb, k0, k1, 2, 4);
                    else
                        for (int b = 0; b < nj; b++) gp_tile(y, A + a * GP_J + b, x, K, N, P + (size_t)b * kc, kc, t0 + a, jb + b, k0, k1, 2, 1);
                }
                for (; a < tn; a++) {
                    if (nj == GP_J) gp_tile(y, A + a * GP_J, x, K, N, P, kc, t0 + a, jb, k0, k1, 1, 4);
                    else
                        for (int b = 0; b < nj; b++) gp_tile(y, A + a * GP_J + b, x, K, N, P + (size_t)b * kc, kc, t0 + a, jb + b, k0, k1, 1, 1);
                }
            }
        }
    }
    free(P);
    free(A);
}

/* dense weights stay on the tiles: their convert is 0-3 ops per 8 weights, and the panels' store,
 * reload and accumulator round trip cost more (qwen3-0.6b bf16 prefill 130-144 → 110-125 tok/s
 * through gemm_p; bench/cpu/RESULTS.md, session 36) */
static void mm_f32(float *y, const float *x, int T, const weight_t *w, int j0, int j1) { run(y, x, T, w, j0, j1, ld_f32); }
static void mm_bf16(float *y, const float *x, int T, const weight_t *w, int j0, int j1) { run(y, x, T, w, j0, j1, ld_bf16); }
static void mm_f16(float *y, const float *x, int T, const weight_t *w, int j0, int j1) { run(y, x, T, w, j0, j1, ld_f16); }
/* one out-of-line GEMM per width: inlined beside qrun, it changed how the compiler laid out the
 * decode tile (AVX2 q4 decode 31 → 21 tok/s) */
#define GP_FN(N, B) \
    static __attribute__((noinline)) void gemm_p##N(float *y, const float *x, int T, const weight_t *w, int j0, int j1) { gemm_p(y, x, T, w, j0, j1, B); }
GP_FN(4, 4)
GP_FN(8, 8)
GP_FN(2, 2)
GP_FN(3, 3)
GP_FN(5, 5)
GP_FN(6, 6)
GP_FN(any, -1)
#undef GP_FN
#define MMQ(N, B)                                              \
    if (T >= GP_MIN) gemm_p##N(y, x, T, w, j0, j1);            \
    else qrun(y, x, T, w, j0, j1, B);
static void mm_q4(float *y, const float *x, int T, const weight_t *w, int j0, int j1) {
    if (avx2_qi_matmul(y, x, T, w, j0, j1)) return; /* integer dot products (matmul_qi_avx2.c) */
    MMQ(4, 4)
}
static void mm_q8(float *y, const float *x, int T, const weight_t *w, int j0, int j1) {
    if (avx2_qi_matmul(y, x, T, w, j0, j1)) return; /* AVX-VNNI (matmul_qi_avx2.c) */
    MMQ(8, 8)
}
/* 2, 3, 5 and 6 bits: the width a constant (codes_bits) */
static void mm_qany(float *y, const float *x, int T, const weight_t *w, int j0, int j1) {
    if (avx2_qi_matmul(y, x, T, w, j0, j1)) return; /* integer dot products (matmul_qi_avx2.c, codes_lb) */
    switch (w->bits) {
    case 2: MMQ(2, 2) break;
    case 3: MMQ(3, 3) break;
    case 5: MMQ(5, 5) break;
    case 6: MMQ(6, 6) break;
    default: MMQ(any, 0)
    }
}
#undef MMQ

/* 2-8-bit in WL_Q_RIL16: rows in full tiles through matmul_q4ril_avx2.c (8-bit:
 * matmul_q8ril_avx2.c), the N % 16 tail rows (stored row-major) through mm_q4 / mm_qany / mm_q8 —
 * the same code at any T for every row */
static void mm_qril(float *y, const float *x, int T, const weight_t *w, int j0, int j1) {
    int nr = w->rows & ~15;
    if (T <= 0) return;
    if (j0 < nr) (w->bits == 8 ? avx2_q8ril_matmul : avx2_q4ril_matmul)(y, x, T, w, j0, j1 < nr ? j1 : nr);
    if (j1 > nr) (w->bits == 8 ? mm_q8 : w->bits == 4 ? mm_q4 : mm_qany)(y, x, T, w, j0 > nr ? j0 : nr, j1);
}

static void matmul(float *y, const float *x, int T, const weight_t *w, int j0, int j1) {
    if (weight_is_quantized(w)) {
        if (w->layout == WL_Q_RIL16) mm_qril(y, x, T, w, j0, j1);
        else if (w->bits == 4) mm_q4(y, x, T, w, j0, j1);
        else if (w->bits == 8) mm_q8(y, x, T, w, j0, j1);
        else mm_qany(y, x, T, w, j0, j1);
    } else if (w->dtype == DT_BF16) mm_bf16(y, x, T, w, j0, j1);
    else if (w->dtype == DT_F16) mm_f16(y, x, T, w, j0, j1);
    else mm_f32(y, x, T, w, j0, j1);
}

static float dot(const float *a, const float *b, int n) {
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + L <= n; i += L) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    if (i < n) acc = _mm256_fmadd_ps(tail_x(a, i, n), tail_x(b, i, n), acc);
    return hsum(acc);
}

static void axpy(float *y, float a, const float *x, int n) {
    __m256 av = _mm256_set1_ps(a);
    int i = 0;
    for (; i + L <= n; i += L) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] = fmaf(a, x[i], y[i]);
}

static void to_f32(float *dst, const void *src, dtype_t t, int n) {
    int i = 0;
    if (t == DT_F16)
        for (; i + L <= n; i += L) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)src + i))));
    else if (t == DT_BF16)
        for (; i + L <= n; i += L)
            _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)src + i))), 16)));
    for (; i < n; i++) dst[i] = load_as_f32(src, t, i);
}

/* gelu_glu: see cpu_kernels.h. exp(x) = 2^n · e^r, n = round(x·log2 e), r = x - n·ln2 (two
 * parts), e^r by Cephes expf's polynomial; x clamped to [-87.3, 88.3] so 2^n is a normal
 * float (below, 1 + e rounds to 1 anyway; above, e is set to inf: the result is ±0). */
/* exp(x0) for 8 lanes, x0 clamped to [-87.3, 88.3] first and +Inf past 88.3: 2^n · e^r with
 * n = round(x·log2 e), r = x - n·ln2 (two parts), e^r by Cephes expf's polynomial (gelu_glu and
 * silu_glu; NaN: max/min return the bound) */
AI __m256 exp8(__m256 x0) {
    const __m256 one = _mm256_set1_ps(1.f);
    __m256 x = _mm256_min_ps(_mm256_max_ps(x0, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
    __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, one));
    __m256 e = _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23)));
    return _mm256_blendv_ps(e, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x0, _mm256_set1_ps(88.3f), _CMP_GT_OQ));
}

/* the lanes of 8 from i that a row of n has */
AI __m256i tail8(size_t n, size_t i) {
    int left = n - i >= 8 ? 8 : (int)(n - i);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(left), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static void gelu_glu(float *y, const float *gate, const float *up, size_t n) {
    const __m256 c0 = _mm256_set1_ps(0.7978845608028654f), c1 = _mm256_set1_ps(0.044715f), one = _mm256_set1_ps(1.f);
    for (size_t i = 0; i < n; i += 8) {
        __m256i m = tail8(n, i);
        __m256 g = _mm256_maskload_ps(gate + i, m);
        __m256 u = _mm256_mul_ps(c0, _mm256_add_ps(g, _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(c1, g), g), g)));
        __m256 a = _mm256_div_ps(g, _mm256_add_ps(one, exp8(_mm256_mul_ps(u, _mm256_set1_ps(-2.f)))));
        a = _mm256_blendv_ps(a, u, _mm256_cmp_ps(u, u, _CMP_UNORD_Q)); /* NaN in, NaN out */
        _mm256_maskstore_ps(y + i, m, _mm256_mul_ps(a, _mm256_maskload_ps(up + i, m)));
    }
}

/* silu_glu: see cpu_kernels.h; g / (1 + exp8(-g)) (NaN g: NaN) */
static void silu_glu(float *y, const float *gate, const float *up, size_t n) {
    const __m256 one = _mm256_set1_ps(1.f);
    for (size_t i = 0; i < n; i += 8) {
        __m256i m = tail8(n, i);
        __m256 g = _mm256_maskload_ps(gate + i, m);
        __m256 a = _mm256_div_ps(g, _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), g))));
        _mm256_maskstore_ps(y + i, m, _mm256_mul_ps(a, _mm256_maskload_ps(up + i, m)));
    }
}

/* rms_norm: see cpu_kernels.h; the sum of squares in 8 lanes + one fixed horizontal sum per row */
static void rms_norm(float *y, const float *x, const float *w, float w_offset, int T, int n, float eps) {
    const __m256 ov = _mm256_set1_ps(w_offset);
    for (int t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * n;
        float *yt = y + (size_t)t * n;
        __m256 ss = _mm256_setzero_ps();
        for (int i = 0; i < n; i += 8) {
            __m256 v = _mm256_maskload_ps(xt + i, tail8((size_t)n, (size_t)i));
            ss = _mm256_fmadd_ps(v, v, ss);
        }
        __m256 iv = _mm256_set1_ps(1.0f / sqrtf(hsum(ss) / (float)n + eps));
        for (int i = 0; i < n; i += 8) {
            __m256i m = tail8((size_t)n, (size_t)i);
            __m256 r = _mm256_mul_ps(_mm256_maskload_ps(xt + i, m), iv);
            if (w) r = _mm256_mul_ps(r, _mm256_add_ps(ov, _mm256_maskload_ps(w + i, m)));
            _mm256_maskstore_ps(yt + i, m, r);
        }
    }
}

/* from_f32: see cpu_kernels.h; F16C's conversion rounds to nearest even as f32_to_f16 does, NaNs
 * rewritten to its sign | 0x7e00, the last n % 8 through f32_to_f16 itself */
static int from_f32(void *dst, dtype_t t, const float *src, int n) {
    if (t != DT_F16) return 0;
    uint16_t *d = dst;
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(src + i);
        __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
        if (_mm256_movemask_ps(nan)) {
            __m256i sg = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(v), 16), _mm256_set1_epi32(0x8000)),
                                         _mm256_set1_epi32(0x7e00));
            __m128i sg16 = _mm_packus_epi32(_mm256_castsi256_si128(sg), _mm256_extracti128_si256(sg, 1));
            __m128i nm = _mm_packs_epi32(_mm256_castsi256_si128(_mm256_castps_si256(nan)), _mm256_extracti128_si256(_mm256_castps_si256(nan), 1));
            h = _mm_blendv_epi8(h, sg16, nm);
        }
        _mm_storeu_si128((__m128i *)(d + i), h);
    }
    for (; i < n; i++) d[i] = f32_to_f16(src[i]);
    return 1;
}

/* One int8 KV row as kv_q8_row (backend.h), 8 lanes at a time: max |x| (exact in any order; NaN
 * tracked apart), then the same product with 127 / max, the same 1.5·2^23 rounding and clamp. */
static void q8_row(int8_t *codes, float *scale, const float *x, int n) {
    const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 mx = _mm256_setzero_ps();
    int nan = 0;
    for (int i = 0; i < n; i += 8) {
        int left = n - i >= 8 ? 8 : n - i;
        __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(left), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        __m256 v = _mm256_maskload_ps(x + i, m); /* (masked lanes read 0) */
        nan |= _mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        mx = _mm256_max_ps(mx, _mm256_and_ps(v, sign));
    }
    float lane[8], amax = 0.f;
    _mm256_storeu_ps(lane, mx);
    for (int i = 0; i < 8; i++) amax = lane[i] > amax ? lane[i] : amax;
    if (nan) amax = __builtin_nanf("");
    int finite = amax <= 3.4028234e38f;
    float inv = finite && amax > 0 ? 127.f / amax : 0.f;
    const __m256 iv = _mm256_set1_ps(inv), mg = _mm256_set1_ps(12582912.f), hi = _mm256_set1_ps(127.f), lo = _mm256_set1_ps(-127.f);
    int32_t c[8];
    for (int i = 0; i < n; i += 8) {
        int left = n - i >= 8 ? 8 : n - i;
        __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(left), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        __m256 r = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(_mm256_maskload_ps(x + i, m), iv), mg), mg);
        _mm256_storeu_si256((__m256i *)c, _mm256_cvttps_epi32(_mm256_max_ps(_mm256_min_ps(r, hi), lo)));
        for (int k = 0; k < left; k++) codes[i + k] = (int8_t)(finite ? c[k] : 0);
    }
    *scale = finite ? amax / 127.f : __builtin_nanf("");
}

/* The packed layout each weight kind's kernels want (cpu_pack.h), asked once per weight at load:
 * 4-bit weights in WL_Q_RIL16 and 2/3/5/6-bit ones in its planes (matmul_q4ril_avx2.c) unless the
 * integer paths are off (KILN_AVX2_INT=off: the float tiles read rows), 8-bit ones
 * (matmul_q8ril_avx2.c) where AVX-VNNI runs them; KILN_PACK_Q4=0 / KILN_PACK_QB=0 / KILN_PACK_Q8=0
 * keep a kind row-major (A/B). */
static int pack_on(const char *name) {
    const char *e = getenv(name);
    return !(e && *e == '0');
}
static int pack_layout(const weight_t *w) {
    if (avx2_qi_mode() == 0) return WL_ROWS;
    if (avx2_q4ril_ok(w) && w->bits == 4 && pack_on("KILN_PACK_Q4")) return WL_Q_RIL16;
    if (avx2_q4ril_ok(w) && w->bits != 4 && pack_on("KILN_PACK_QB")) return WL_Q_RIL16; /* in planes */
    /* 8-bit only with AVX-VNNI: without it the packed tiles split each code into nibbles
     * (vpmaddubsw's pair sums would saturate), ~33 ops a 64-code word, and decode read the model's
     * weights no faster than the float tiles (12.6-14.5 against 13.7 GB/s a core) while prefill
     * halved (30-33 against 66-71 GFLOP/s) — they stay for a weight packed before a switch */
    if (avx2_q8ril_ok(w) && avx2_qi_mode() == 2 && pack_on("KILN_PACK_Q8")) return WL_Q_RIL16;
    return WL_ROWS;
}

const simd_kernels_t simd_avx2 = {"avx2", matmul, dot, axpy, to_f32, gelu_glu, NULL, from_f32, rms_norm, silu_glu, pack_layout, q8_row};
