/* matmul_q8ril_avx2.c — 8-bit MLX-affine weights in the rows-in-lanes layout WL_Q_RIL16 on
 * AVX2 CPUs: the AVX2 family's twin of matmul_q8ril_avx512.c, with matmul_q4ril_avx2.c's
 * x digits and fold (read that file first).
 *
 * Why: the AVX2 family's row-major 8-bit paths stream the model's weights at ~13.5 GB/s a core
 * (AVX-VNNI, matmul_qi_avx2.c) and ~12 (the float tiles, CPUs without it) against ~20 for the
 * AVX-512 family's packed kernel (kiln-mm-bench --bits 8 --model qwen3-0.6b, session 44).
 *
 * Layout (weight.h): a 64-byte word holds the same 4 columns of 16 rows (rows 0-7 in its first
 * 32 bytes), so lane r of a 256-bit load is 4 codes of row r, and the x digits of those 4
 * columns are one 4-byte broadcast. x per token: per group p and xs as for 4 bits
 * (ril_group_scan), xi = d0·2^16 + d1·2^8 + d2 stored per code word as 12 bytes [d0][d1][d2].
 * Per (token, group, 8 rows), lane r gets the exact integers A_d = Σ code·d over the group:
 *   AVX-VNNI   A_d += dpbusd(codes, digits)                        (the codes as stored)
 *   vpmaddubsw (codes past 127 would saturate its pair sums) the codes as nibbles c = lo + 16·hi:
 *              s_d += maddubs(lo, digits), t_d += maddubs(hi, digits) (16-bit: per word |.| <=
 *              2·15·128 = 3840, eight words <= 30720 < 2^15), then A_d += madd(s_d, 1) +
 *              madd(t_d, 16) every eight words
 * — the same integers, so the same bits; |A_0| <= 255·64·G, |256·A_0 + A_1| < 2^31 for G <= 128.
 * Then fold8 (ril_avx2.h): the 4-bit kernel's fold, in decode and in the GEMM alike, so a row
 * alone is bitwise that row in any batch. The N % 16 tail rows stay row-major (matmul_avx2.c
 * sends them to matmul_qi_avx2.c or the float tiles). */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_scratch.h"
#include "backend/cpu/ril_avx2.h"

#define Q8RA_PF 8192 /* decode: prefetch distance into the tile's stream */

typedef ril_x_t q8ra_x_t; /* 12 bytes a code word (4 columns): [d0 4][d1 4][d2 4] */

static void *q8ra_prepare(const float *x, int T, const weight_t *w) { return ril_prepare(x, T, w, 1); }

/* The kernels, written once and compiled twice (R8_VNNI 1: AVX-VNNI; 0: vpmaddubsw). */
#define R8_VNNI 0
#define R8_(name) q8ra_##name##_madd
#include "backend/cpu/q8ril_avx2_body.h"
#undef R8_VNNI
#undef R8_

#ifdef __clang__
#pragma clang attribute push(__attribute__((target("avxvnni"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avxvnni")
#endif
#define R8_VNNI 1
#define R8_(name) q8ra_##name##_vnni
#include "backend/cpu/q8ril_avx2_body.h"
#undef R8_VNNI
#undef R8_
#ifdef __clang__
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

int avx2_q8ril_ok(const weight_t *w) {
    return ril_shape_ok(w) && w->bits == 8;
}

void avx2_q8ril_matmul(float *y, const float *x, int T, const weight_t *w, int j0, int j1) {
    int nr = w->rows & ~15;
    if (T <= 0 || j0 >= nr) return;
    const q8ra_x_t *q = q8ra_prepare(x, T, w);
    if (!q) abort();
    if (j1 > nr) j1 = nr;
    if (avx2_qi_mode() == 2) q8ra_run_vnni(y, q, T, w, j0, j1);
    else q8ra_run_madd(y, q, T, w, j0, j1);
}
