/* matmul_q8ril_avx512.c — 8-bit MLX weights (w = s·code + b per group of G columns) in the
 * rows-in-lanes layout WL_Q_RIL16, on CPUs with AVX512-VNNI: y[T, N] = x[T, K] · Wᵀ.
 *
 * Why. The row-major q8 kernels (q8tile / gemm_fk in matmul_avx512.c) turn every 16 codes
 * into floats (vpmovzxbd, cvt, mul, fma: 4 ops per 16 bytes of one row) and at decode are
 * bound by those ops, not by memory (27.7 GB/s one thread from L2 against 50.8 for the
 * prototype, bench/cpu/RESULTS.md session 8, helper-53). Here the codes go into vpdpbusd as
 * they are stored: the packer (cpu_pack.c) put, per 4-byte code word, the same word of 16
 * consecutive rows side by side (64 bytes), so lane r of a zmm holds 4 codes of row 16t + r
 * and a broadcast x word meets all 16 rows at once:
 *
 *   codes  [tile t][word wi][row r][4 B]   (tile: 16 rows x K bytes, contiguous, in place)
 *   scales/biases [tile t][group g][row r] (sb_dtype as stored)
 *
 * x per row (token) and group, as q4i_prepare does it (matmul_avx512.c) but in column order:
 *
 *     x ≈ p · xi,  p = 2^(E-22) with max|x| < 2^E,  xi = round(x / p),  |xi| ≤ 2^22,
 *     xi = d0·2^16 + d1·2^8 + d2 (three signed bytes, exact)
 *
 * stored as [token][group][digit][G] bytes, with p and the group's f32 sum (16-lane partial
 * sums + one horizontal sum) per (token, group). Per (token, 16-row tile), lane r = row 16t + r:
 *
 *     acc = 0; acc = fma(bias[g][r], xsum[g], acc)        for g = 0 .. ng-1 (the bias term)
 *     per group g:  S_d = Σ code·d over the group's G columns (exact int32: |S_d| < 2^22),
 *                   a01 = 256·S0 + S1 (exact, < 2^31),  tv = fma(f32(a01), 256, f32(S2)),
 *                   acc = fma(s[g][r]·p[g], tv, acc)     (s·p exact but in under/overflow)
 *     y = acc                                              (no horizontal sum at all)
 *
 * The integer sums are exact, so how the words are chained (one chain per digit here) never
 * changes a bit; the float steps are the same in decode (one token, W streamed once with
 * prefetch) and in the GEMM (T > 1: 1..4 tokens share each W load, each token's ops in the
 * decode order), so a row alone is bitwise the same row in any batch, on any thread, in any
 * slice (a tile cut by a slice is computed whole and stored masked). Numerics: x rounded to 23
 * bits per group (as the q4 VNNI path: test_kernels holds it to the same 2e-6), one rounding
 * of a01 to f32 and one in tv. NaN or Inf in a group: p = NaN, the row's result is NaN.
 * Not bitwise the row-major q8 path (KILN_PACK_Q8=0 / KILN_PACK=0).
 *
 * The N % 16 tail rows stay row-major (the layout's rule) and go through matmul_avx512.c's
 * decode row kernel q8tile at every T (avx512_q8_rows): the same code in decode and GEMM.
 *
 * Trade-offs: ~3 vpdpbusd + 1 load per 64 B of codes (16 rows x 4 columns) instead of 16
 * vector ops; per group and tile a fold of ~6 ops. The GEMM does 3 vpdpbusd per 64 MACs
 * (vs 4 FMAs + the panel conversion in gemm_fk), x digits read as m32{1to16} broadcasts.
 * The x preparation (3 bytes + per-group scalars per element) is made by every call (each
 * thread of a matmul), O(T·K) against the O(T·K·N/threads) of the products. */
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/avx512_common.h"
#include "backend/cpu/cpu_scratch.h"
#include "backend/cpu/q8ril.h"

#pragma GCC push_options
#pragma GCC target("avx512vnni")
#define AI static inline __attribute__((always_inline))

/* Prepared x rows: digits [t][g][d][G] (row stride xs bytes), p and group sums [t][g]. */
typedef struct { int8_t *xd; float *pv, *xg; int K, ng; size_t xs; } q8r_x_t;

/* x rows [0, T) into q (in this thread's scratch, cpu_scratch.h: valid until its next prepare). */
static int q8r_prepare(q8r_x_t *q, const float *x, int T, int K, int G) {
    int ng = K / G;
    size_t xs = ((size_t)3 * K + 63) & ~(size_t)63, fl = (size_t)T * ng * 2 * sizeof(float);
    int8_t *xd = cpu_scratch(CPU_SCRATCH_XPREP, (size_t)T * xs + fl);
    if (!xd) return -1;
    float *pv = (float *)(xd + (size_t)T * xs), *xg = pv + (size_t)T * ng;
    for (size_t t = 0; t < (size_t)T; t++)
        for (int g = 0; g < ng; g++) {
            const float *xt = x + t * K + (size_t)g * G;
            __m512 mx = _mm512_setzero_ps(), sx = _mm512_setzero_ps();
            for (int i = 0; i < G; i += 16) {
                __m512 xv = _mm512_loadu_ps(xt + i);
                mx = _mm512_max_ps(mx, _mm512_abs_ps(xv));
                sx = _mm512_add_ps(sx, xv);
            }
            xg[t * ng + g] = _mm512_reduce_add_ps(sx); /* the group's sum for the bias term */
            float m = _mm512_reduce_max_ps(mx), p;
            int E = 0;
            if (!(m <= 3.4028235e38f)) p = NAN; /* NaN or Inf (max_ps drops a NaN operand: also checked below) */
            else if (m == 0.f) p = 1.f;
            else {
                frexpf(m, &E);
                if (E < -126) E = -126; /* p = 2^-148 stays a (denormal) float */
                p = ldexpf(1.f, E - 22);
            }
            __m512 ev = _mm512_set1_ps((float)(22 - E));
            int8_t *o = xd + t * xs + (size_t)g * 3 * G;
            for (int i = 0; i < G; i += 16) {
                __m512 xv = _mm512_loadu_ps(xt + i);
                if (_mm512_cmp_ps_mask(xv, xv, _CMP_UNORD_Q)) p = NAN;
                __m512i xi = _mm512_cvtps_epi32(_mm512_scalef_ps(xv, ev)); /* x · 2^(22-E), exact; then round to nearest even */
                __m512i d2 = _mm512_srai_epi32(_mm512_slli_epi32(xi, 24), 24);
                __m512i r = _mm512_srai_epi32(_mm512_sub_epi32(xi, d2), 8);
                __m512i d1 = _mm512_srai_epi32(_mm512_slli_epi32(r, 24), 24);
                __m512i d0 = _mm512_srai_epi32(_mm512_sub_epi32(r, d1), 8);
                _mm_storeu_si128((__m128i *)(o + i), _mm512_cvtepi32_epi8(d0));
                _mm_storeu_si128((__m128i *)(o + G + i), _mm512_cvtepi32_epi8(d1));
                _mm_storeu_si128((__m128i *)(o + 2 * G + i), _mm512_cvtepi32_epi8(d2));
            }
            pv[t * ng + g] = p;
        }
    q->xd = xd; q->pv = pv; q->xg = xg; q->K = K; q->ng = ng; q->xs = xs;
    return 0;
}

/* acc += per lane the dot product of its 4 unsigned code bytes with the 4 signed x digits
 * at p, broadcast by the instruction (m32{1to16}: the compiler's _mm512_set1_epi32 of a load
 * stayed a separate vpbroadcastd per vpdpbusd) */
typedef int32_t __attribute__((may_alias)) i32a_t;
AI __m512i dpb(__m512i acc, __m512i v, const int8_t *p) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(v), "m"(*(const i32a_t *)p));
    return acc;
}

/* Decode prefetch distance in the tile stream (bytes): W is read once, in address order. */
#define Q8R_PF 8192
/* into L1 (an A/B knob at build time, as matmul_q4ril_avx512.c's Q4R_HINT — where L2 won): prefetcht1 measured
 * -7 % (fast memory windows) / -5 % (slow) on the Zen 4 VM's llama-3.2-1b q8 decode, bench/cpu/RESULTS.md session 61 */
#ifndef Q8R_HINT
#define Q8R_HINT _MM_HINT_T0
#endif

/* x rows t .. t+NT-1 against tile `tile` (W rows 16·tile + lane); lanes in m stored to
 * y + row·ys + 16·tile. PF: decode (prefetch the stream and the next tile's scales/biases). */
AI void q8r_tile(float *y, size_t ys, __mmask16 m, const q8r_x_t *q, int t, const weight_t *w, int tile, const int NT,
                 const int G, const int PF) {
    const int K = q->K, ng = q->ng, nwg = G / 4;
    const uint8_t *c = (const uint8_t *)w->data + (size_t)tile * 16 * K;
    const size_t sb0 = (size_t)tile * ng * 16;
    const int8_t *xd[4];
    const float *pv[4], *xg[4];
    __m512 acc[4];
#pragma GCC unroll 4
    for (int a = 0; a < NT; a++) {
        xd[a] = q->xd + (size_t)(t + a) * q->xs;
        pv[a] = q->pv + (size_t)(t + a) * ng;
        xg[a] = q->xg + (size_t)(t + a) * ng;
        acc[a] = _mm512_setzero_ps();
    }
    if (PF) { /* the next tile's scales and biases: a separate stream nothing else fetches early */
        size_t sz = w->sb_dtype == DT_F32 ? 4 : 2, o0 = (sb0 + (size_t)ng * 16) * sz;
        for (size_t o = 0; o < (size_t)ng * 16 * sz; o += 64) {
            _mm_prefetch((const char *)w->scales + o0 + o, _MM_HINT_T0);
            _mm_prefetch((const char *)w->biases + o0 + o, _MM_HINT_T0);
        }
    }
    for (int g = 0; g < ng; g++) { /* the bias term: one chain over the groups, per lane */
        __m512 b16 = sb16(w->biases, w->sb_dtype, sb0 + (size_t)g * 16, 16);
#pragma GCC unroll 4
        for (int a = 0; a < NT; a++) acc[a] = _mm512_fmadd_ps(b16, _mm512_set1_ps(xg[a][g]), acc[a]);
    }
    for (int g = 0; g < ng; g++) {
        const uint8_t *cg = c + (size_t)g * nwg * 64;
        __m512i a0[4], a1[4], a2[4];
#pragma GCC unroll 4
        for (int a = 0; a < NT; a++) a0[a] = a1[a] = a2[a] = _mm512_setzero_si512();
#pragma GCC unroll 32
        for (int i = 0; i < nwg; i++) {
            if (PF) _mm_prefetch((const char *)cg + i * 64 + Q8R_PF, Q8R_HINT);
            __m512i v = _mm512_loadu_si512(cg + i * 64);
#pragma GCC unroll 4
            for (int a = 0; a < NT; a++) {
                const int8_t *e = xd[a] + (size_t)g * 3 * G + 4 * i;
                a0[a] = dpb(a0[a], v, e);
                a1[a] = dpb(a1[a], v, e + G);
                a2[a] = dpb(a2[a], v, e + 2 * G);
            }
        }
        __m512 s16 = sb16(w->scales, w->sb_dtype, sb0 + (size_t)g * 16, 16);
#pragma GCC unroll 4
        for (int a = 0; a < NT; a++) {
            __m512i a01 = _mm512_add_epi32(_mm512_slli_epi32(a0[a], 8), a1[a]);
            __m512 tv = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a01), _mm512_set1_ps(256.f), _mm512_cvtepi32_ps(a2[a]));
            acc[a] = _mm512_fmadd_ps(_mm512_mul_ps(s16, _mm512_set1_ps(pv[a][g])), tv, acc[a]);
        }
    }
#pragma GCC unroll 4
    for (int a = 0; a < NT; a++) _mm512_mask_storeu_ps(y + (size_t)(t + a) * ys + (size_t)tile * 16, m, acc[a]);
}

/* The lanes of tile tt inside columns [j0, j1). */
static inline __mmask16 tile_mask(int tt, int j0, int j1) {
    int base = tt * 16, lo = j0 > base ? j0 - base : 0, hi = j1 < base + 16 ? j1 - base : 16;
    return (__mmask16)(((1u << hi) - 1) & ~((1u << lo) - 1));
}

/* One token, the tiles holding rows [j0, j1) (j1 <= 16·⌊N/16⌋). */
AI void q8r_dec(float *y, const q8r_x_t *q, const weight_t *w, int j0, int j1, const int G) {
    for (int tt = j0 / 16; tt * 16 < j1; tt++) q8r_tile(y, 0, tile_mask(tt, j0, j1), q, 0, w, tt, 1, G, 1);
}

/* T > 1: x in chunks whose prepared form stays near 256 KB (L2); per chunk each tile of rows
 * [j0, j1) is read once from memory and then from L1/L2 by every 4 tokens of the chunk. */
AI void q8r_gemm(float *y, const q8r_x_t *q, int T, const weight_t *w, int j0, int j1, const int G) {
    size_t per = q->xs + (size_t)q->ng * 2 * sizeof(float);
    int tc = (int)(262144 / per) & ~3, N = w->rows;
    if (tc < 4) tc = 4;
    for (int t0 = 0; t0 < T; t0 += tc) {
        int t1 = t0 + tc < T ? t0 + tc : T;
        for (int tt = j0 / 16; tt * 16 < j1; tt++) {
            __mmask16 m = tile_mask(tt, j0, j1);
            int t = t0;
            for (; t + 4 <= t1; t += 4) q8r_tile(y, N, m, q, t, w, tt, 4, G, 0);
            if (t1 - t == 3) q8r_tile(y, N, m, q, t, w, tt, 3, G, 0);
            else if (t1 - t == 2) q8r_tile(y, N, m, q, t, w, tt, 2, G, 0);
            else if (t1 - t == 1) q8r_tile(y, N, m, q, t, w, tt, 1, G, 0);
        }
    }
}

static void dec32(float *y, const q8r_x_t *q, const weight_t *w, int j0, int j1) { q8r_dec(y, q, w, j0, j1, 32); }
static void dec64(float *y, const q8r_x_t *q, const weight_t *w, int j0, int j1) { q8r_dec(y, q, w, j0, j1, 64); }
static void dec128(float *y, const q8r_x_t *q, const weight_t *w, int j0, int j1) { q8r_dec(y, q, w, j0, j1, 128); }
static void gemm32(float *y, const q8r_x_t *q, int T, const weight_t *w, int j0, int j1) { q8r_gemm(y, q, T, w, j0, j1, 32); }
static void gemm64(float *y, const q8r_x_t *q, int T, const weight_t *w, int j0, int j1) { q8r_gemm(y, q, T, w, j0, j1, 64); }
static void gemm128(float *y, const q8r_x_t *q, int T, const weight_t *w, int j0, int j1) { q8r_gemm(y, q, T, w, j0, j1, 128); }

static void tiles(float *y, const q8r_x_t *q, int T, const weight_t *w, int j0, int j1) {
    int G = w->group;
    if (T == 1) (G == 32 ? dec32 : G == 64 ? dec64 : dec128)(y, q, w, j0, j1);
    else (G == 32 ? gemm32 : G == 64 ? gemm64 : gemm128)(y, q, T, w, j0, j1);
}

/* Whether these kernels take w (a CPU with AVX512-VNNI; pack_layout adds KILN_PACK_Q8) */
int q8ril_ok(const weight_t *w) {
    static int vnni = -1;
    if (vnni < 0) vnni = __builtin_cpu_supports("avx512vnni");
    int G = w->group;
    return vnni && weight_is_quantized(w) && w->bits == 8 && (G == 32 || G == 64 || G == 128) && w->cols % G == 0 &&
           w->rows >= 16;
}

void q8ril_matmul(float *y, const float *x, int T, const weight_t *w, int j0, int j1) {
    if (T <= 0) return; /* llama.c asks for no logits in some engine steps */
    int nt16 = w->rows & ~15, a1 = j1 < nt16 ? j1 : nt16, b0 = j0 > nt16 ? j0 : nt16;
    if (j0 < a1) {
        q8r_x_t q;
        if (q8r_prepare(&q, x, T, w->cols, w->group)) abort();
        tiles(y, &q, T, w, j0, a1);
    }
    if (b0 < j1) avx512_q8_rows(y, x, T, w, b0, j1);
}

void q8ril_rows(float *y, const float *x, const weight_t *w, mm_rows_t *r) {
    int nt16 = w->rows & ~15, j0, j1;
    q8r_x_t q;
    if (q8r_prepare(&q, x, 1, w->cols, w->group)) abort();
    while (mm_rows_next(r, &j0, &j1)) {
        int a1 = j1 < nt16 ? j1 : nt16, b0 = j0 > nt16 ? j0 : nt16;
        if (j0 < a1) tiles(y, &q, 1, w, j0, a1);
        if (b0 < j1) avx512_q8_rows(y, x, 1, w, b0, j1);
    }
}
#pragma GCC pop_options
