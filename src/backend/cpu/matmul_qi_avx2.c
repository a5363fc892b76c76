/* matmul_qi_avx2.c — 4-bit (2/3/5/6-bit, and with AVX-VNNI 8-bit) MLX weights on AVX2 as integer
 * dot products: the AVX2 twin of matmul_avx512.c's q4i (read its comment first; this file keeps its
 * arithmetic at 8 lanes). The 8-bit variant is described above dot8_vnni, the 2/3/5/6-bit
 * unpacking into the 4-bit layout above codes_lb.
 *
 * The float tiles of matmul_avx2.c turn every 8 codes into floats (unpack, widen, convert,
 * an FMA with scale and bias) before the FMA with x: ~0.8 vector ops a weight, so one core
 * decoded at ~13.6 G weights/s (kiln-mm-bench --simd avx2 --bits 4), half what it reads.
 * Here x is rounded once per call, per group of G columns, to p · xi with p = 2^(E-22) and
 * max|x| < 2^E, and xi (|xi| <= 2^22) split exactly into signed bytes xi = d0·2^16 + d1·2^8 + d2,
 * stored per block of 64 columns as digit planes [d][even columns | odd columns] of 32 bytes.
 * A block of one W row is 32 bytes of codes: low nibbles = even columns, high = odd, so the
 * codes go in as they are (one and, one shift). Lane n (columns 8n..8n+7 of the block) gets
 * the exact integer a = Σ c·xi over its 8 columns (|a| < 2^30):
 *
 *   without VNNI  s_d = vpmaddubsw(lo, even_d) + vpmaddubsw(hi, odd_d)  (16-bit: |s_d| <= 7680)
 *                 a   = (vpmaddwd(s_0, 256) + vpmaddwd(s_1, 1)) << 8 + vpmaddwd(s_2, 1)
 *   AVX-VNNI      a01 = dpbusd(dpbusd(0, lo, even_0), hi, odd_0), a01 = dpbusd(dpbusd(a01 << 8, lo,
 *                 even_1), hi, odd_1), a = a01 << 8 + dpbusd(dpbusd(0, lo, even_2), hi, odd_2)
 *
 * — the same integer both ways (no product or sum saturates or wraps), so the two give the
 * same bits and a CPU with AVX-VNNI (Alder Lake on, Zen 5) only runs it in fewer instructions.
 * Per (x row, W row), in this order, in decode and in the GEMM alike:
 *
 *   acc = Σ over groups, 8 at a time, of fma(bias, group sum of x, acc)   (the bias term)
 *   acc = fma(s·p of each lane's group, f32(a), acc)                       per block
 *   y   = horizontal sum of acc
 *
 * so a row alone is bitwise the row in any batch. Not bitwise the float tiles (x is rounded
 * to 23 bits per group): held to the same 2e-6 by test_kernels, as the AVX-512 twin is.
 * A group with a NaN or Inf in x gets p = NaN, so its rows' results are NaN. */
#include <cpuid.h>
#include <stdatomic.h>
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_scratch.h"
#include "backend/cpu/ril_avx2.h"

#define AI static inline __attribute__((always_inline))

typedef struct {
    int8_t *xd;   /* [T][nb][3 digits][even 32 | odd 32] (8-bit: [T][nb][3 digits][32] in column order) */
    float *pv;    /* [T][ngp] p per group, 0 past ng */
    float *xg;    /* [T][ngp] group sums of x, 0 past ng */
    int K, G, nb, ng, ngp;
    size_t xds;   /* bytes of one x row's digits: nb · 192 (8-bit: nb · 96) */
} q4v_t;

/* Up to 8 consecutive per-group scales (or biases) of a row as f32, zeros past n. */
AI __m256 sb8(const void *p, dtype_t t, size_t i, int n) {
    if (n >= 8) {
        if (t == DT_F32) return _mm256_loadu_ps((const float *)p + i);
        __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + i));
        if (t == DT_F16) return _mm256_cvtph_ps(h);
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    float buf[8] = {0};
    for (int k = 0; k < n; k++) buf[k] = load_as_f32(p, t, i + k);
    return _mm256_loadu_ps(buf);
}

/* 32 int32 digits (four vectors, columns in order) as 32 bytes in column order: the values
 * fit a byte, so the saturating packs are exact; packs work per 128-bit lane, the permute
 * puts the 4-byte pieces back in order. */
AI __m256i pack32(__m256i v0, __m256i v1, __m256i v2, __m256i v3) {
    __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(v0, v1), _mm256_packs_epi32(v2, v3));
    return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}
/* 64 bytes in column order (a: columns 0..31, b: 32..63) -> even columns, odd columns */
AI void split_eo(int8_t *even, int8_t *odd, __m256i a, __m256i b) {
    const __m256i eo = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9,
                                        11, 13, 15);
    a = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(a, eo), 0xD8); /* [even 0..30 | odd 1..31] */
    b = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(b, eo), 0xD8); /* [even 32..62 | odd 33..63] */
    _mm256_store_si256((__m256i *)even, _mm256_permute2x128_si256(a, b, 0x20));
    _mm256_store_si256((__m256i *)odd, _mm256_permute2x128_si256(a, b, 0x31));
}

/* x rows [0, T) into q (in the thread's XPREP scratch, cpu_scratch.h: not freed). Q8: the 8-bit layout — blocks of
 * 32 columns, digits in column order, xi of 21 bits (p = 2^(E-21)); else the 4-bit one above. */
static int qv_prepare(q4v_t *q, const float *x, int T, const weight_t *w, const int Q8) {
    const int BW = Q8 ? 32 : 64, XB = Q8 ? 21 : 22;
    int K = w->cols, G = w->group, ng = K / G, nb = (K + BW - 1) / BW, ngp = (ng + 7) & ~7;
    q->K = K; q->G = G; q->nb = nb; q->ng = ng; q->ngp = ngp; q->xds = (size_t)nb * 3 * BW;
    size_t bytes = (size_t)T * (q->xds + 2 * sizeof(float) * (size_t)ngp);
    int8_t *xd = cpu_scratch(CPU_SCRATCH_XPREP, bytes); /* the thread's buffer, kept between calls (cpu_scratch.h) */
    if (!xd) return -1;
    float *pv = (float *)(xd + (size_t)T * q->xds), *xg = pv + (size_t)T * ngp;
    int32_t xi[64] __attribute__((aligned(32)));
    for (size_t t = 0; t < (size_t)T; t++) {
        const float *xt = x + t * K;
        float *pt = pv + t * ngp, *gt = xg + t * ngp;
        int8_t *dt = xd + t * q->xds;
        for (int blk = 0; blk < nb; blk++) {
            int c0 = blk * BW, cols = K - c0 < BW ? K - c0 : BW; /* BW, or 32 in a last half block of 64 */
            memset(xi + cols, 0, sizeof(int32_t) * (BW - cols));
            /* the groups starting in this block (a block of 64 holds 2 groups of 32, one of 64, or half of 128) */
            for (int k = 0; k < cols; k += G < BW ? G : BW) {
                int c = c0 + k, g = c / G;
                if (c % G == 0) { /* the group's scale factor and sum, from all its columns (ril_avx2.h) */
                    int E;
                    pt[g] = ril_group_scan(xt + c, G, &gt[g], &E, XB);
                }
            }
            /* xi = round(x / p): x · 2^(XB-E) as two exact power-of-two products (2^(XB-E) may pass
             * the float range for tiny groups), rounded to nearest even; a NaN group's xi are 0 */
            __m256 f1 = _mm256_setzero_ps(), f2 = f1;
            for (int i = 0, gf = -1; i < cols; i += 8) {
                int g = (c0 + i) / G;
                float p = pt[g];
                if (isnan(p)) { _mm256_store_si256((__m256i *)(xi + i), _mm256_setzero_si256()); continue; }
                if (g != gf) { /* the group's two factors, once per group in this block */
                    int e, s, s1;
                    frexpf(p, &e); /* p = 2^(e-1) */
                    s = 1 - e, s1 = s / 2;
                    f1 = _mm256_set1_ps(ldexpf(1.f, s1)), f2 = _mm256_set1_ps(ldexpf(1.f, s - s1)), gf = g;
                }
                __m256 v = _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(xt + c0 + i), f1), f2);
                _mm256_store_si256((__m256i *)(xi + i), _mm256_cvtps_epi32(v));
            }
            __m256i d[3][8];
            for (int i = 0; i < BW / 8; i++) {
                __m256i v = _mm256_load_si256((const __m256i *)(xi + 8 * i));
                __m256i d2 = _mm256_srai_epi32(_mm256_slli_epi32(v, 24), 24);
                __m256i r = _mm256_srai_epi32(_mm256_sub_epi32(v, d2), 8);
                __m256i d1 = _mm256_srai_epi32(_mm256_slli_epi32(r, 24), 24);
                d[0][i] = _mm256_srai_epi32(_mm256_sub_epi32(r, d1), 8);
                d[1][i] = d1;
                d[2][i] = d2;
            }
            for (int k = 0; k < 3; k++) {
                int8_t *o = dt + (size_t)blk * 3 * BW + k * BW;
                if (Q8) _mm256_store_si256((__m256i *)o, pack32(d[k][0], d[k][1], d[k][2], d[k][3]));
                else split_eo(o, o + 32, pack32(d[k][0], d[k][1], d[k][2], d[k][3]), pack32(d[k][4], d[k][5], d[k][6], d[k][7]));
            }
        }
        for (int g = ng; g < ngp; g++) pt[g] = gt[g] = 0.f;
    }
    q->xd = xd; q->pv = pv; q->xg = xg;
    return 0;
}

/* The bias term of one (x row, W row) pair, the first thing its accumulator gets. */
AI __m256 bias_term8(const weight_t *w, int r, const float *xg, int ng) {
    __m256 acc = _mm256_setzero_ps();
    for (int g0 = 0; g0 < ng; g0 += 8)
        acc = _mm256_fmadd_ps(sb8(w->biases, w->sb_dtype, (size_t)r * ng + g0, ng - g0), _mm256_loadu_ps(xg + g0), acc);
    return acc;
}

/* Block blk's 32 bytes of codes of one W row: a plain load, or in a last half block (K % 64
 * == 32) the 16 bytes there are, the rest zero (their x digits are zero too). */
AI __m256i codes32(const uint8_t *row, int blk, int nfull) {
    if (__builtin_expect(blk < nfull, 1)) return _mm256_loadu_si256((const __m256i *)(row + (size_t)blk * 32));
    return _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)(row + (size_t)blk * 32)));
}

/* a = Σ c·xi per lane (8 columns) of one block: codes (lo, hi nibbles) against x digits xb */
AI __m256i dot_madd(__m256i lo, __m256i hi, const int8_t *xb) {
    const __m256i *x = (const __m256i *)xb;
    __m256i s0 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_load_si256(x)), _mm256_maddubs_epi16(hi, _mm256_load_si256(x + 1)));
    __m256i s1 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_load_si256(x + 2)), _mm256_maddubs_epi16(hi, _mm256_load_si256(x + 3)));
    __m256i s2 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_load_si256(x + 4)), _mm256_maddubs_epi16(hi, _mm256_load_si256(x + 5)));
    const __m256i one = _mm256_set1_epi16(1);
    __m256i a = _mm256_add_epi32(_mm256_madd_epi16(s0, _mm256_set1_epi16(256)), _mm256_madd_epi16(s1, one));
    return _mm256_add_epi32(_mm256_slli_epi32(a, 8), _mm256_madd_epi16(s2, one));
}

AI float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 2, 3, 5 and 6-bit codes into the 4-bit path's planes (lo: the block's even columns as bytes, hi:
 * the odd ones), so they meet the same x digits through the same dot products: a block of 64
 * columns is 8·B bytes of the row's bit stream (column c at bit c·B, little-endian, as MLX packs
 * it). Its 16-column quarters start on byte boundaries (2·B bytes each) and are read as 16-byte
 * windows at 0, 2B, 4B, 6B: vector a = [quarter 0 | quarter 2], b = [quarter 1 | quarter 3], so one
 * vpshufb pattern serves every 128-bit lane. It puts the two bytes holding column k's code in
 * 16-bit lane k / 2 (even columns; odd ones with a second pattern); vpmullw by 2^(16-B-s) moves
 * the code from its bit offset s to the top of the lane and vpsrlw by 16 - B brings it down alone
 * (AVX2 has no per-lane 16-bit shift); vpackuswb of the a and b results gives the columns in
 * order: bytes 0-7 quarter 0's even columns, 8-15 quarter 1's, 16-23 quarter 2's, 24-31 quarter 3's.
 * 18 ops per 64 codes (4 loads, 4 shuffles, 4 multiplies, 4 shifts, 2 packs) against the 4-bit
 * path's 3; the float tiles spent ~0.8 a code. A code is below 64, so vpmaddubsw's 16-bit sums stay
 * within 4·63·128 < 2^15 and a lane's integer within 8·63·2^22 < 2^31: exact, as at 4 bits. */
static void lb_consts(__m256i *c, int B) {
    uint8_t ix[2][16];
    uint16_t mul[2][8];
    for (int o = 0; o < 2; o++) /* even, odd columns */
        for (int k = 0; k < 8; k++) {
            int bit = (2 * k + o) * B, byte = bit >> 3;
            ix[o][2 * k] = (uint8_t)byte, ix[o][2 * k + 1] = (uint8_t)(byte + 1); /* <= 12: inside the window */
            mul[o][k] = (uint16_t)(1u << (16 - B - (bit & 7)));
        }
    for (int o = 0; o < 2; o++) {
        c[o] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)ix[o]));
        c[2 + o] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)mul[o]));
    }
}

/* Block p (8·B bytes; half: only its first 32 columns exist, their x digits past them are zero)
 * into the planes. The windows read up to 6·B + 16 bytes, past the block: copied through a
 * buffer where that would pass the weight's end (its last block) or in a half block. */
AI void codes_lb(__m256i *lo, __m256i *hi, const uint8_t *p, int half, const uint8_t *end, const __m256i *c, const int B) {
    uint8_t buf[6 * 6 + 16] __attribute__((aligned(16)));
    if (__builtin_expect(half || p + 6 * B + 16 > end, 0)) {
        memset(buf, 0, sizeof buf);
        memcpy(buf, p, (size_t)(half ? 4 : 8) * B);
        p = buf;
    }
    __m256i a = _mm256_loadu2_m128i((const __m128i *)(p + 4 * B), (const __m128i *)p);
    __m256i b = _mm256_loadu2_m128i((const __m128i *)(p + 6 * B), (const __m128i *)(p + 2 * B));
#define LB_(v, o) _mm256_srli_epi16(_mm256_mullo_epi16(_mm256_shuffle_epi8((v), c[o]), c[2 + (o)]), 16 - B)
    *lo = _mm256_packus_epi16(LB_(a, 0), LB_(b, 0));
    *hi = _mm256_packus_epi16(LB_(a, 1), LB_(b, 1));
#undef LB_
}

/* the 4-bit codes' nibble planes: low = even columns, high = odd */
#define NIBBLES_LO(v) _mm256_and_si256((v), _mm256_set1_epi8(15))
#define NIBBLES_HI(v) _mm256_and_si256(_mm256_srli_epi16((v), 4), _mm256_set1_epi8(15))
#define Q4V_BITS 4
#define Q4V_DOT(lo, hi, xb) dot_madd((lo), (hi), (xb))
#define Q4V_(name) q4v_##name##_madd
#include "backend/cpu/qi_avx2_body.h"
#undef Q4V_DOT
#undef Q4V_

/* The AVX-VNNI copy: every function from here to the pop gets the target (gcc: the pragma;
 * clang ignores that pragma and takes its own). */
#ifdef __clang__
#pragma clang attribute push(__attribute__((target("avxvnni"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avxvnni")
#endif
AI __m256i dot_vnni(__m256i lo, __m256i hi, const int8_t *xb) {
    const __m256i *x = (const __m256i *)xb, z = _mm256_setzero_si256();
    __m256i a01 = _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(z, lo, _mm256_load_si256(x)), hi, _mm256_load_si256(x + 1));
    __m256i a2 = _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(z, lo, _mm256_load_si256(x + 4)), hi, _mm256_load_si256(x + 5));
    a01 = _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(_mm256_slli_epi32(a01, 8), lo, _mm256_load_si256(x + 2)), hi,
                                  _mm256_load_si256(x + 3));
    return _mm256_add_epi32(_mm256_slli_epi32(a01, 8), a2);
}

/* 8-bit weights (AVX-VNNI only: vpmaddubsw would saturate on codes past 127). A block is 32
 * columns, 32 bytes of codes in column order against the digits in column order; lane n
 * (columns 4n..4n+3, one group) gets a = Σ c·xi exactly, |a| <= 4·255·2^21 < 2^31 (xi of 21
 * bits; the chain's shifts wrap, as vpdpbusd does, and only the final a must fit):
 *   a = dpbusd(dpbusd(dpbusd(0, c, d0) << 8, c, d1) << 8, c, d2)
 * then acc = fma(s·p, f32(a), acc) per block after the bias term, as for 4 bits. */
AI __m256i dot8_vnni(__m256i c, const int8_t *xb) {
    const __m256i *x = (const __m256i *)xb;
    __m256i a = _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), c, _mm256_load_si256(x));
    a = _mm256_dpbusd_avx_epi32(_mm256_slli_epi32(a, 8), c, _mm256_load_si256(x + 1));
    return _mm256_dpbusd_avx_epi32(_mm256_slli_epi32(a, 8), c, _mm256_load_si256(x + 2));
}

#define Q4V_DOT(lo, hi, xb) dot_vnni((lo), (hi), (xb))
#define Q4V_(name) q4v_##name##_vnni
#include "backend/cpu/qi_avx2_body.h"
#undef Q4V_DOT
#undef Q4V_
#undef Q4V_BITS
#define Q4V_BITS 8
#define Q4V_DOT(lo, hi, xb) dot8_vnni((lo), (xb))
#define Q4V_(name) q8v_##name
#include "backend/cpu/qi_avx2_body.h"
#undef Q4V_DOT
#undef Q4V_
#undef Q4V_BITS
#ifdef __clang__
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

/* 0 float tiles, 1 vpmaddubsw (4-bit only), 2 AVX-VNNI (4 and 8 bits); -1 until first asked */
static atomic_int qi_mode = -1;

static int cpu_has_avxvnni(void) {
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 4 & 1); /* CPUID.(7,1):EAX[4] */
}

int avx2_qi_set(int mode) {
    if (mode == 2 && !cpu_has_avxvnni()) mode = 1;
    if (mode < 0) { /* KILN_AVX2_INT=off|madd|vnni, else the best this CPU has */
        const char *e = getenv("KILN_AVX2_INT");
        mode = e && !strcmp(e, "off") ? 0 : e && !strcmp(e, "madd") ? 1 : cpu_has_avxvnni() ? 2 : 1;
    }
    return atomic_exchange(&qi_mode, mode);
}

int avx2_qi_mode(void) {
    int mode = atomic_load_explicit(&qi_mode, memory_order_relaxed);
    if (mode < 0) {
        avx2_qi_set(-1);
        mode = atomic_load(&qi_mode);
    }
    return mode;
}

int avx2_qi_matmul(float *y, const float *x, int T, const weight_t *w, int j0, int j1) {
    int mode = avx2_qi_mode();
    int q8 = w->bits == 8;
    int lowb = w->bits == 2 || w->bits == 3 || w->bits == 4 || w->bits == 5 || w->bits == 6;
    if (!mode || (q8 && mode != 2) || (!lowb && !q8) || (w->group != 32 && w->group != 64 && w->group != 128) ||
        w->cols % w->group)
        return 0;
    q4v_t q;
    if (qv_prepare(&q, x, T, w, q8)) abort();
    if (q8) q8v_run(y, &q, T, w, j0, j1);
    else if (mode == 2) q4v_run_vnni(y, &q, T, w, j0, j1);
    else q4v_run_madd(y, &q, T, w, j0, j1);
    return 1;
}
