/* matmul_q4ril_avx2.c — 4-bit MLX-affine weights in the rows-in-lanes layout WL_Q_RIL16 on
 * AVX2 CPUs, and 2/3/5/6-bit ones in its planes: the AVX2 family's twin of
 * matmul_q4ril_avx512.c (read its story first: the layout, the planes, the x digits and the fold
 * are the same; this file keeps them at 8 lanes).
 *
 * Why: the AVX2 family's row-major integer path (matmul_qi_avx2.c) decoded 4-bit weights at
 * ~31 G weights/s a core from L2 (kiln-mm-bench --simd avx2 --bits 4 --rows 256 --cols 1024),
 * below the ~37 G weights/s a core's ~21 GB/s of reads carries: it spends per 64 codes of a row
 * 6 dot-product instructions plus a fold (convert, scale, FMA) and, per row, a horizontal sum.
 * Here a 64-byte code word holds the 16 rows' u32 words side by side (rows 0-7 in its first
 * 32 bytes, 8-15 in the second), lane r of a 256-bit load is row r, the x digits of the word's
 * 8 columns are 4-byte broadcasts, every lane sums whole groups of its own row in int32 and
 * the affine fold runs once per (group, 8 rows, token); no horizontal sums.
 *
 * Per 32 bytes of codes (8 rows × 8 columns) and x digit d (0, 1, 2), lane r:
 *   AVX-VNNI   A_d += dpbusd(lo, even digits) + dpbusd(hi, odd digits)       (int32, exact)
 *   vpmaddubsw s_d += maddubs(lo, even) + maddubs(hi, odd)  (int16: per word |.| <= 4·15·128 =
 *              7680, so four words <= 30720 < 2^15, no saturation), then every four words
 *              A_d += madd(s_d, 1) (the pair of 16-bit halves summed into the lane)
 * — the same integers both ways, so the same bits (lo/hi: the word's low / high nibbles =
 * its even / odd columns). Per (token, group g, 8 rows), in this order at every T:
 *   a01 = (A_0 << 8) + A_1;  tv = fma(f32(a01), 256, f32(A_2))
 *   acc = fma(bias_g, xs_g, acc);  acc = fma(scale_g · p_g, tv, acc)
 * exactly q4ril's fold (the range argument there holds here), so a row alone is bitwise that
 * row in any batch, decode or GEMM, VNNI or not. Not bitwise the AVX-512 kernel: xs, the group
 * sum of x, is summed here in 8 lanes (and the row-major AVX2 path is a different fold).
 *
 * x per token (q4ra_prepare): per group p = 2^(E-22) with max|x| < 2^E (NaN: the group has a
 * NaN or Inf, its digits 0; 1: all zero), xi = round(x / p) as two exact power-of-two products
 * (2^(22-E) may pass f32's range), xi = d0·2^16 + d1·2^8 + d2 in signed bytes, stored per code
 * word as 24 bytes [d0 even 4][d0 odd 4][d1 even][d1 odd][d2 even][d2 odd] — the AVX-512
 * layout — plus p and xs per group.
 *
 * Decode takes both halves of a tile's word in one pass, so each x digit broadcast (AVX2 has
 * no broadcast operand: each is a load of its own) serves 16 rows; the GEMM runs one half
 * against 4 tokens, each code load and its nibble planes shared by them (q4ril_avx2_body.h
 * has the chain layouts and what they measured). Against the row-major integer path, one
 * core (kiln-mm-bench --simd avx2 --bits 4 --group 64 --model qwen3-0.6b, the model's GEMV
 * stream): VNNI 13.1 → 15.4 GB/s, vpmaddubsw 9.9 → 14.1; prefill GEMM (--rows 1024 --cols 1024
 * --T 64/512) VNNI 76 → 93-100 GFLOP/s, vpmaddubsw 48-61 → 66-77 (bench/cpu/RESULTS.md,
 * session 44). 2/3/5/6-bit codes: qb8_word turns each word of a 32-column chunk (B lines) into
 * the same two byte planes (codes <= 63: vpmaddubsw's pair sums, lo + hi, stay <= 4·63·128 <
 * 2^15), then the 4-bit chains; against matmul_qi_avx2.c's codes_lb (18 ops per 64 codes of a
 * row-major block) one core's model stream went q2/q3/q5/q6 4.0/5.3/10.8/11.5 → 10.8/13.6/17.5/
 * 16.9 GB/s with VNNI. The N % 16 tail rows stay row-major and go through matmul_qi_avx2.c (the
 * caller: matmul_avx2.c). */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_scratch.h"
#include "backend/cpu/ril_avx2.h"

/* decode: prefetch distance into the tile's stream (as q4ril's) */
#define Q4RA_PF 8192

typedef ril_x_t q4ra_x_t; /* 24 bytes a code word (8 columns): [d0 even 4][d0 odd 4][d1 ..][d2 ..] */

static void *q4ra_prepare(const float *x, int T, const weight_t *w) { return ril_prepare(x, T, w, 0); }

/* shift each 16-bit lane of v by n bits: left for n > 0, right for n < 0 (a constant) */
AI __m256i sh16(__m256i v, const int n) { return n > 0 ? _mm256_slli_epi16(v, n) : n < 0 ? _mm256_srli_epi16(v, -n) : v; }

/* Word u (0..3) of a 32-column chunk of B-bit codes (B lines of 64 bytes, c already offset to
 * the half: +32 for rows 8-15) as the 4-bit planes: lo = the word's even columns' codes as
 * bytes, hi = the odd ones'. B = 4: the nibbles. B = 2, 3, 5, 6: WL_Q_RIL16's planes (weight.h)
 * — q4ril's qb_codes at 256 bits, a part moved to its place by a 16-bit shift, the bits from the
 * lane's other byte masked off, merged by an or (AVX2 has no vpternlogd). */
AI void qb8_word(__m256i *lo, __m256i *hi, const uint8_t *c, const int u, const int B) {
    if (B == 4 || B >= 5) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(c + 64 * u));
        *lo = and_m4(v), *hi = and_m4(_mm256_srli_epi16(v, 4));
        if (B == 6) { /* P2 (lines 4, 5): word 2m + k's parts at bits 4k (even), 4k + 2 (odd) -> bits 4-5 */
            const __m256i m30 = _mm256_set1_epi8(0x30);
            __m256i v2 = _mm256_loadu_si256((const __m256i *)(c + 256 + 64 * (u >> 1)));
            *lo = _mm256_or_si256(*lo, _mm256_and_si256(sh16(v2, u & 1 ? 0 : 4), m30));
            *hi = _mm256_or_si256(*hi, _mm256_and_si256(sh16(v2, u & 1 ? -2 : 2), m30));
        } else if (B == 5) { /* P1 (line 4): word u's parts at bits 2u (even), 2u + 1 (odd) -> bit 4 */
            const __m256i m10 = _mm256_set1_epi8(0x10);
            __m256i v1 = _mm256_loadu_si256((const __m256i *)(c + 256));
            *lo = _mm256_or_si256(*lo, _mm256_and_si256(sh16(v1, 4 - 2 * u), m10));
            *hi = _mm256_or_si256(*hi, _mm256_and_si256(sh16(v1, 3 - 2 * u), m10));
        }
        return;
    }
    /* B = 2, 3: P2 (lines 0, 1): word 2m + k's parts at bits 4k (even), 4k + 2 (odd) */
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256i v2 = _mm256_loadu_si256((const __m256i *)(c + 64 * (u >> 1)));
    *lo = _mm256_and_si256(sh16(v2, u & 1 ? -4 : 0), m3);
    *hi = _mm256_and_si256(sh16(v2, u & 1 ? -6 : -2), m3);
    if (B == 3) { /* P1 (line 2): word u's parts at bits 2u (even), 2u + 1 (odd) -> bit 2 */
        const __m256i m04 = _mm256_set1_epi8(0x04);
        __m256i v1 = _mm256_loadu_si256((const __m256i *)(c + 128));
        *lo = _mm256_or_si256(*lo, _mm256_and_si256(sh16(v1, 2 - 2 * u), m04));
        *hi = _mm256_or_si256(*hi, _mm256_and_si256(sh16(v1, 1 - 2 * u), m04));
    }
}

/* The kernels, written once and compiled twice: RA_VNNI 1 (AVX-VNNI's vpdpbusd) and 0
 * (vpmaddubsw + vpmaddwd: any AVX2 CPU). */
#define RA_VNNI 0
#define RA_(name) q4ra_##name##_madd
#include "backend/cpu/q4ril_avx2_body.h"
#undef RA_VNNI
#undef RA_

#ifdef __clang__
#pragma clang attribute push(__attribute__((target("avxvnni"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avxvnni")
#endif
#define RA_VNNI 1
#define RA_(name) q4ra_##name##_vnni
#include "backend/cpu/q4ril_avx2_body.h"
#undef RA_VNNI
#undef RA_
#ifdef __clang__
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

int avx2_q4ril_ok(const weight_t *w) {
    int b = w->bits;
    return ril_shape_ok(w) && (b == 2 || b == 3 || b == 4 || b == 5 || b == 6);
}

void avx2_q4ril_matmul(float *y, const float *x, int T, const weight_t *w, int j0, int j1) {
    int nr = w->rows & ~15;
    if (T <= 0 || j0 >= nr) return;
    const q4ra_x_t *q = q4ra_prepare(x, T, w);
    if (!q) abort();
    if (j1 > nr) j1 = nr;
    if (avx2_qi_mode() == 2) q4ra_run_vnni(y, q, T, w, j0, j1);
    else q4ra_run_madd(y, q, T, w, j0, j1);
}
