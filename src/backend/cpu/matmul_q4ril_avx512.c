/* matmul_q4ril_avx512.c — 4-bit MLX-affine weights in the rows-in-lanes layout WL_Q_RIL16
 * (weight.h, cpu_pack.h) on AVX512-VNNI CPUs: y[T, N] = x[T, K] · Wᵀ, decode (T = 1) and
 * the GEMM (T > 1) with the same per-(token, row) arithmetic.
 *
 * Why: the row-major q4i_tile (matmul_avx512.c) is bound by its vector ops on Zen 5, not by
 * memory: per 64 B of codes and W row it spends 6 vpdpbusd + 9 other ops (vpermps, cvt,
 * shifts, a fold per 8-column lane segment). Here a tile holds 16 rows with, per u32 code
 * word (8 columns), the 16 rows' words side by side: lane r of a 64-byte load is row r.
 * The x digits of those 8 columns come as m32{1to16} broadcasts into vpdpbusd, every lane
 * sums a whole group of its own row in int32, and the affine fold happens ONCE per
 * (group, 16 rows, token): 10 vector ops per 64 B (a load, 3 for the two nibble planes, 6
 * vpdpbusd with broadcast memory operands) plus the fold per group, and one sequential stream
 * per tile. The GEMM shares each load and its nibble planes between 4 tokens.
 * (bench/cpu/q4_ril_proto.c, bench/cpu/RESULTS.md session 8 helper-53: ~+15% on the GEMV.)
 *
 * Shapes: W N x K, group G in {32, 64, 128}, G | K (so K % 32 == 0, whole words),
 * nw = K/8 words per row, ng = K/G groups, nt = N/16 full tiles. Tile t's word wi of row r
 * at u32 (t·nw + wi)·16 + r, scale/bias of group g at (t·ng + g)·16 + r. This file takes
 * rows in full tiles only; the N % 16 tail rows (row-major) go through q4i_tile in
 * matmul_avx512.c, in decode and the GEMM alike.
 *
 * x per token (q4ril_prepare), as q4i_prepare makes it: per group of G columns
 *     p = 2^(E-22) with max|x| < 2^E (p = NaN if the group has a NaN or Inf; 1 if all 0),
 *     xi = round(x / p) (|xi| <= 2^22), split exactly into signed bytes
 *     xi = d0·2^16 + d1·2^8 + d2,
 * stored per code word wi as 24 bytes [d0 even 4][d0 odd 4][d1 even][d1 odd][d2 even][d2 odd]
 * (even = columns 8wi, +2, +4, +6, the low nibbles; odd = the high nibbles), plus p and the
 * group sum xs of x (16-lane partial sums then one horizontal sum, as q4i_prepare).
 *
 * Per (token, tile, group g), lane r (row 16t + r), c = the 4-bit codes:
 *     A_d = Σ_{k in g} c_k · d_{d,k}   (int32, exact: any chain split, any order — integer
 *                                       adds are associative, so decode and the GEMM may
 *                                       split the chains differently and agree bit for bit)
 *     a01 = (A_0 << 8) + A_1           (= Σ c · r_k with r = (xi - d2) / 256, exact int32)
 *     tv  = fma(f32(a01), 256, f32(A_2))
 *     acc = fma(bias_g, xs_g, acc)
 *     acc = fma(scale_g · p_g, tv, acc)            (acc starts at 0, groups in order)
 *     y   = acc                                    (no horizontal sum: the lane IS the row)
 * Range of the integer chains (why int32 is enough for G = 128): |xi| <= 2^22, d2 in
 * [-128, 127], r = (xi - d2)/256 with |r| <= 2^14, d1 in [-128, 127], d0 = (r - d1)/256 with
 * |d0| <= 64; c in [0, 15]. Every partial sum of a chain is a sum of a subset of its terms:
 *     |A_0| <= 15·64·G,  |A_1|, |A_2| <= 15·128·G,  |a01| <= 15·2^14·G,
 * so for G = 128: |256·A_0| <= 15·2^21, |a01| <= 15·2^21 < 2^25 < 2^31 (the full
 * a = 256·a01 + A_2 would not fit: that is why it is formed in f32). Precision: f32(A_2) is
 * exact (< 2^18); f32(a01) is exact for G <= 64 (< 2^24), so tv = the exact Σ c·xi rounded
 * once; for G = 128 f32(a01) may lose 1 (|a01| >= 2^24 then), an extra relative error of at
 * most 2^-24 of tv — below x's own rounding to 23 bits per group (q4i's precision class,
 * held to the same 2e-6 by test_q4ril). scale·p is exact (p a power of 2) except in
 * under/overflow. A NaN/Inf in a group gives p = NaN: that token's whole output row is NaN.
 *
 * Not bitwise the row-major kernels (fold per group instead of per 8-column segment, bias
 * per group in the lane instead of 16-group vectors): KILN_PACK_Q4=0 / KILN_PACK=0 switch the
 * layout off (A/B, logits differ at rounding level). */
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/avx512_common.h"
#include "backend/cpu/cpu_scratch.h"
#include "backend/cpu/q4ril.h"

#define AI static inline __attribute__((always_inline))
/* decode: prefetch distance into the tile's stream (one sequential stream of nw·64 B) */
#ifndef Q4R_PF
#define Q4R_PF 8192
#endif
/* ... into L2 (prefetcht1), not L1: a prefetcht0 holds one of the core's few L1 fill buffers until its line arrives,
 * and the stream then has fewer lines in flight than the memory could serve (the AMX path's q8 decode prefetches into
 * L2 for that reason, matmul_amx_avx512.c); and a second prefetch, Q4R_PF0 bytes ahead into L1 (0: none), moves the
 * lines from L2 before the loop needs them. Measured on the Zen 4 VM's llama-3.2-1b q4 decode (bench/cpu/RESULTS.md
 * session 61): L2 alone +9..+16 % over the old prefetcht0 in the host's fast memory windows, -1..-6 % in its slow mode;
 * the near L1 prefetch then -1..+3 % / +4..+5 %. -DQ4R_HINT=_MM_HINT_T0 -DQ4R_PF0=0 builds the old variant. */
#ifndef Q4R_PF0
#define Q4R_PF0 2048
#endif
#ifndef Q4R_HINT
#define Q4R_HINT _MM_HINT_T1
#endif

#pragma GCC push_options
#pragma GCC target("avx512vnni")

typedef struct {
    int8_t *xd;     /* [T][nw][24]: digits per code word */
    float *pv, *xs; /* [T][ng]: p and the group sums of x */
    int K, G, nw, ng;
} q4r_x_t;

void *q4ril_prepare(const float *x, int T, const weight_t *w) {
    int K = w->cols, G = w->group, nw = K / 8, ng = K / G;
    size_t hs = (sizeof(q4r_x_t) + 63) & ~(size_t)63, xdb = ((size_t)T * nw * 24 + 63) & ~(size_t)63;
    size_t bytes = hs + xdb + sizeof(float) * 2 * (size_t)T * ng;
    char *m = cpu_scratch(CPU_SCRATCH_XPREP, bytes); /* this thread's, reused: no page faults per call */
    if (!m) return NULL;
    q4r_x_t *q = (q4r_x_t *)m;
    q->xd = (int8_t *)(m + hs);
    q->pv = (float *)((char *)q->xd + xdb);
    q->xs = q->pv + (size_t)T * ng;
    q->K = K; q->G = G; q->nw = nw; q->ng = ng;
    /* column order -> per word [even 4][odd 4] for 16 columns (two words) */
    const __m128i eo = _mm_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15);
    for (size_t t = 0; t < (size_t)T; t++) {
        const float *xt = x + t * K;
        int8_t *xd = q->xd + t * nw * 24;
        for (int g = 0; g < ng; g++) {
            const float *xg = xt + (size_t)g * G;
            __m512 mx = _mm512_setzero_ps(), sx = _mm512_setzero_ps();
            __mmask16 nan = 0;
            for (int i = 0; i < G; i += 16) {
                __m512 xv = _mm512_loadu_ps(xg + i);
                mx = _mm512_max_ps(mx, _mm512_abs_ps(xv));
                sx = _mm512_add_ps(sx, xv);
                nan |= _mm512_cmp_ps_mask(xv, xv, _CMP_UNORD_Q); /* max_ps drops a NaN operand */
            }
            q->xs[t * ng + g] = _mm512_reduce_add_ps(sx);
            float mval = _mm512_reduce_max_ps(mx), p;
            int E = 0;
            if (nan || !(mval <= 3.4028235e38f)) p = NAN;
            else if (mval == 0.f) p = 1.f;
            else {
                frexpf(mval, &E);
                if (E < -126) E = -126; /* p = 2^-148 stays a (denormal) float */
                p = ldexpf(1.f, E - 22);
            }
            q->pv[t * ng + g] = p;
            __m512 ev = _mm512_set1_ps((float)(22 - E));
            for (int i = 0; i < G; i += 16) {
                __m512i xi = _mm512_cvtps_epi32(_mm512_scalef_ps(_mm512_loadu_ps(xg + i), ev)); /* x·2^(22-E) exact, then to nearest even */
                __m512i d2 = _mm512_srai_epi32(_mm512_slli_epi32(xi, 24), 24);
                __m512i r = _mm512_srai_epi32(_mm512_sub_epi32(xi, d2), 8);
                __m512i d1 = _mm512_srai_epi32(_mm512_slli_epi32(r, 24), 24);
                __m512i d0 = _mm512_srai_epi32(_mm512_sub_epi32(r, d1), 8);
                int8_t *o = xd + (size_t)(g * G + i) / 8 * 24; /* word (g·G + i)/8 and the next */
                __m128i b0 = _mm_shuffle_epi8(_mm512_cvtepi32_epi8(d0), eo), b1 = _mm_shuffle_epi8(_mm512_cvtepi32_epi8(d1), eo);
                __m128i b2 = _mm_shuffle_epi8(_mm512_cvtepi32_epi8(d2), eo);
                _mm_storel_epi64((__m128i *)o, b0);
                _mm_storel_epi64((__m128i *)(o + 8), b1);
                _mm_storel_epi64((__m128i *)(o + 16), b2);
                _mm_storel_epi64((__m128i *)(o + 24), _mm_unpackhi_epi64(b0, b0));
                _mm_storel_epi64((__m128i *)(o + 32), _mm_unpackhi_epi64(b1, b1));
                _mm_storel_epi64((__m128i *)(o + 40), _mm_unpackhi_epi64(b2, b2));
            }
        }
    }
    return q;
}

/* acc += codes (u8) · the 4 x digits at p (s8) broadcast to every lane, as vpdpbusd's m32{1to16}
 * operand (GCC makes a separate vpbroadcastd of _mm512_set1_epi32(*p): one op more per call) */
typedef int32_t i32_alias __attribute__((may_alias));
AI __m512i dpb(__m512i acc, __m512i u, const int8_t *p) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u), "m"(*(const i32_alias *)p));
    return acc;
}

/* lanes [l0, l1) of a tile */
AI __mmask16 lanes(int l0, int l1) { return (__mmask16)(((1u << l1) - 1) & ~((1u << l0) - 1)); }

/* The fold of one (token, group): see the top. */
AI __m512 fold(__m512 acc, __m512i a0, __m512i a1, __m512i a2, __m512 bias, __m512 scale, const float *xs, const float *pv) {
    __m512i a01 = _mm512_add_epi32(_mm512_slli_epi32(a0, 8), a1);
    __m512 tv = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a01), _mm512_set1_ps(256.f), _mm512_cvtepi32_ps(a2));
    acc = _mm512_fmadd_ps(bias, _mm512_set1_ps(*xs), acc);
    return _mm512_fmadd_ps(_mm512_mul_ps(scale, _mm512_set1_ps(*pv)), tv, acc);
}

/* shift each 16-bit lane of v by n bits: left for n > 0, right for n < 0 (a constant) */
AI __m512i sh16(__m512i v, const int n) {
    return n > 0 ? _mm512_slli_epi16(v, n) : n < 0 ? _mm512_srli_epi16(v, -n) : v;
}
/* a | (b & m), one vpternlogd */
AI __m512i or_and(__m512i a, __m512i b, __m512i m) { return _mm512_ternarylogic_epi32(a, b, m, 0xF8); }

/* B-bit codes (B in 2, 3, 5, 6) of the 32-column chunk at c, 16 rows in the lanes, in
 * WL_Q_RIL16's planes (weight.h) → for each of its four 8-column words w the even and odd
 * code bytes ce[w], co[w] (byte k of lane r: the code of column 8w + 2k, resp. 8w + 2k + 1, of
 * row r), the 4-bit path's lo/hi planes. A part is moved to its place in the byte by a 16-bit
 * shift (bits from the lane's other byte are masked off) and merged by one vpternlogd:
 * 6-bit: the 4-bit plane's 3 ops + 2 shifts + 2 merges a word; 5-bit: 3 + 2 + 2; 3-bit:
 * 3.5 + 2 + 2; 2-bit: 3.5 (against 3 for 4-bit codes). */
AI void qb_codes(__m512i ce[4], __m512i co[4], const uint8_t *c, const int B) {
    const __m512i m4 = _mm512_set1_epi8(15), m3 = _mm512_set1_epi8(3);
    if (B >= 5) {
#pragma GCC unroll 4
        for (int w = 0; w < 4; w++) {
            __m512i v = _mm512_loadu_si512(c + 64 * w);
            ce[w] = _mm512_and_si512(v, m4);
            co[w] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        }
        if (B == 6) { /* P2 (words 4, 5): the parts of word 2m + h at bits 4h + 0 (even), 4h + 2 (odd) -> bits 4-5 */
            const __m512i m30 = _mm512_set1_epi8(0x30);
#pragma GCC unroll 2
            for (int m = 0; m < 2; m++) {
                __m512i v2 = _mm512_loadu_si512(c + 256 + 64 * m);
                ce[2 * m] = or_and(ce[2 * m], sh16(v2, 4), m30);
                co[2 * m] = or_and(co[2 * m], sh16(v2, 2), m30);
                ce[2 * m + 1] = or_and(ce[2 * m + 1], v2, m30);
                co[2 * m + 1] = or_and(co[2 * m + 1], sh16(v2, -2), m30);
            }
        } else { /* P1 (word 4): word w's parts at bits 2w (even), 2w + 1 (odd) -> bit 4 */
            const __m512i m10 = _mm512_set1_epi8(0x10);
            __m512i v1 = _mm512_loadu_si512(c + 256);
            ce[0] = or_and(ce[0], sh16(v1, 4), m10), co[0] = or_and(co[0], sh16(v1, 3), m10);
            ce[1] = or_and(ce[1], sh16(v1, 2), m10), co[1] = or_and(co[1], sh16(v1, 1), m10);
            ce[2] = or_and(ce[2], v1, m10), co[2] = or_and(co[2], sh16(v1, -1), m10);
            ce[3] = or_and(ce[3], sh16(v1, -2), m10), co[3] = or_and(co[3], sh16(v1, -3), m10);
        }
        return;
    }
#pragma GCC unroll 2
    for (int m = 0; m < 2; m++) { /* P2 (words 0, 1): word 2m + h's parts at bits 4h (even), 4h + 2 (odd) */
        __m512i v2 = _mm512_loadu_si512(c + 64 * m);
        ce[2 * m] = _mm512_and_si512(v2, m3);
        co[2 * m] = _mm512_and_si512(_mm512_srli_epi16(v2, 2), m3);
        ce[2 * m + 1] = _mm512_and_si512(_mm512_srli_epi16(v2, 4), m3);
        co[2 * m + 1] = _mm512_and_si512(_mm512_srli_epi16(v2, 6), m3);
    }
    if (B == 3) { /* P1 (word 2): word w's parts at bits 2w (even), 2w + 1 (odd) -> bit 2 */
        const __m512i m04 = _mm512_set1_epi8(0x04);
        __m512i v1 = _mm512_loadu_si512(c + 128);
        ce[0] = or_and(ce[0], sh16(v1, 2), m04), co[0] = or_and(co[0], sh16(v1, 1), m04);
        ce[1] = or_and(ce[1], v1, m04), co[1] = or_and(co[1], sh16(v1, -1), m04);
        ce[2] = or_and(ce[2], sh16(v1, -2), m04), co[2] = or_and(co[2], sh16(v1, -3), m04);
        ce[3] = or_and(ce[3], sh16(v1, -4), m04), co[3] = or_and(co[3], sh16(v1, -5), m04);
    }
}

/* Decode: one token against tile t, lanes [l0, l1) stored to y + 16t. The digit chains are
 * split by nibble plane (six chains, one vpdpbusd per word each) for latency; summed per group.
 * B-bit codes in planes (B in 2, 3, 5, 6) come a 32-column chunk (B lines of the stream) at a
 * time through qb_codes into the same planes and chains. Range: codes <= 63, so |A_0| <= 63·64·G
 * and |a01| <= 63·2^14·G < 2^27 for G = 128 (int32); f32(a01) may round once from 2^24 up (G >= 16
 * at 6 bits), the same class as the 4-bit G = 128 case above. */
/* the decode stream's two prefetches for the 64-byte line at p (Q4R_PF into L2, Q4R_PF0 into L1, above) */
AI void q4r_pf(const uint8_t *p) {
    _mm_prefetch((const char *)p + Q4R_PF, Q4R_HINT);
    if (Q4R_PF0) _mm_prefetch((const char *)p + Q4R_PF0, _MM_HINT_T0);
}

AI void q4r_tile1(float *y, const q4r_x_t *q, const weight_t *w, int t, int l0, int l1, const int B) {
    const int ng = q->ng, wpg = q->G / 8; /* words per group */
    const uint8_t *cw = (const uint8_t *)w->data + (size_t)t * (q->K / 32) * B * 64; /* (B == 4: nw·64) */
    size_t sb = (size_t)t * ng * 16, sbz = w->sb_dtype == DT_F32 ? 4 : 2;
    const char *sp = (const char *)w->scales + sb * sbz, *bp = (const char *)w->biases + sb * sbz;
    const __m512i m4 = _mm512_set1_epi8(15);
    const int8_t *xd = q->xd;
    __m512 acc = _mm512_setzero_ps();
    for (int g = 0; g < ng; g++) {
        /* the next tile's scales and biases, a line at a time */
        if (!((g * 16 * sbz) & 63)) {
            _mm_prefetch(sp + (size_t)(ng + g) * 16 * sbz, _MM_HINT_T0);
            _mm_prefetch(bp + (size_t)(ng + g) * 16 * sbz, _MM_HINT_T0);
        }
        __m512i a0l = _mm512_setzero_si512(), a0h = a0l, a1l = a0l, a1h = a0l, a2l = a0l, a2h = a0l;
        const uint8_t *c = cw + (size_t)g * (wpg / 4) * B * 64;
        const int8_t *xw = xd + (size_t)g * wpg * 24;
        if (B == 4)
            for (int i = 0; i < wpg; i++, c += 64, xw += 24) {
                q4r_pf(c);
                __m512i v = _mm512_loadu_si512(c);
                __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                a0l = dpb(a0l, lo, xw);
                a0h = dpb(a0h, hi, xw + 4);
                a1l = dpb(a1l, lo, xw + 8);
                a1h = dpb(a1h, hi, xw + 12);
                a2l = dpb(a2l, lo, xw + 16);
                a2h = dpb(a2h, hi, xw + 20);
            }
        else
            for (int ch = 0; ch < wpg / 4; ch++, c += B * 64) {
#pragma GCC unroll 6
                for (int l = 0; l < B; l++) q4r_pf(c + 64 * l);
                __m512i ce[4], co[4];
                qb_codes(ce, co, c, B);
#pragma GCC unroll 4
                for (int i = 0; i < 4; i++, xw += 24) {
                    a0l = dpb(a0l, ce[i], xw);
                    a0h = dpb(a0h, co[i], xw + 4);
                    a1l = dpb(a1l, ce[i], xw + 8);
                    a1h = dpb(a1h, co[i], xw + 12);
                    a2l = dpb(a2l, ce[i], xw + 16);
                    a2h = dpb(a2h, co[i], xw + 20);
                }
            }
        acc = fold(acc, _mm512_add_epi32(a0l, a0h), _mm512_add_epi32(a1l, a1h), _mm512_add_epi32(a2l, a2h),
                   sb16(w->biases, w->sb_dtype, sb + (size_t)g * 16, 16), sb16(w->scales, w->sb_dtype, sb + (size_t)g * 16, 16),
                   q->xs + g, q->pv + g);
    }
    _mm512_mask_storeu_ps(y + (size_t)t * 16, lanes(l0, l1), acc);
}

/* Rows [j0, j1) of one token (decode), all inside full tiles: y[j] for j in [j0, j1). */
AI void q4ril_rows_b(float *y, const q4r_x_t *q, const weight_t *w, int j0, int j1, const int B) {
    for (int t = j0 / 16; t * 16 < j1; t++) {
        int l0 = j0 > t * 16 ? j0 - t * 16 : 0, l1 = j1 < t * 16 + 16 ? j1 - t * 16 : 16;
        q4r_tile1(y, q, w, t, l0, l1, B);
    }
}
void q4ril_rows(float *y, const void *xp, const weight_t *w, int j0, int j1) {
    QRIL_BITS(w, q4ril_rows_b, y, (const q4r_x_t *)xp, w, j0, j1)
}

/* The GEMM's tile: NT tokens (from tok) against tile t, sharing each code load and its nibble
 * planes; per token three digit chains (the same integers as q4r_tile1's six) and the same fold. */
AI void q4r_tileN(float *y, const q4r_x_t *q, const weight_t *w, int N, int tok, int t, int l0, int l1, const int NT,
                  const int B) {
    const int nw = q->nw, ng = q->ng, wpg = q->G / 8;
    const uint8_t *cw = (const uint8_t *)w->data + (size_t)t * (q->K / 32) * B * 64; /* (B == 4: nw·64) */
    size_t sb = (size_t)t * ng * 16, xds = (size_t)nw * 24;
    const __m512i m4 = _mm512_set1_epi8(15);
    const int8_t *xd = q->xd + (size_t)tok * xds;
    __m512 acc[4];
#pragma GCC unroll 4
    for (int a = 0; a < NT; a++) acc[a] = _mm512_setzero_ps();
    for (int g = 0; g < ng; g++) {
        __m512i a0[4], a1[4], a2[4];
#pragma GCC unroll 4
        for (int a = 0; a < NT; a++) a0[a] = a1[a] = a2[a] = _mm512_setzero_si512();
        const uint8_t *c = cw + (size_t)g * (wpg / 4) * B * 64;
        const int8_t *xw = xd + (size_t)g * wpg * 24;
        for (int i = 0; i < wpg; i += 4, c += B * 64) { /* 32 columns: four code words */
            __m512i ce[4], co[4];
            if (B == 4)
#pragma GCC unroll 4
                for (int u = 0; u < 4; u++) {
                    __m512i v = _mm512_loadu_si512(c + 64 * u);
                    ce[u] = _mm512_and_si512(v, m4), co[u] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                }
            else qb_codes(ce, co, c, B);
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++, xw += 24)
#pragma GCC unroll 4
                for (int a = 0; a < NT; a++) {
                    const int8_t *x = xw + (size_t)a * xds;
                    a0[a] = dpb(dpb(a0[a], ce[u], x), co[u], x + 4);
                    a1[a] = dpb(dpb(a1[a], ce[u], x + 8), co[u], x + 12);
                    a2[a] = dpb(dpb(a2[a], ce[u], x + 16), co[u], x + 20);
                }
        }
        __m512 bias = sb16(w->biases, w->sb_dtype, sb + (size_t)g * 16, 16), scale = sb16(w->scales, w->sb_dtype, sb + (size_t)g * 16, 16);
#pragma GCC unroll 4
        for (int a = 0; a < NT; a++)
            acc[a] = fold(acc[a], a0[a], a1[a], a2[a], bias, scale, q->xs + (size_t)(tok + a) * ng + g, q->pv + (size_t)(tok + a) * ng + g);
    }
    __mmask16 m = lanes(l0, l1);
#pragma GCC unroll 4
    for (int a = 0; a < NT; a++) _mm512_mask_storeu_ps(y + (size_t)(tok + a) * N + (size_t)t * 16, m, acc[a]);
}

/* T tokens, rows [j0, j1) inside full tiles: y[tok·N + j]. Tokens in chunks whose digits
 * (3 B per element) stay near 256 KB, so each tile's codes are read from L1/L2 per 4 tokens. */
AI void q4ril_gemm_b(float *y, const q4r_x_t *q, int T, const weight_t *w, int j0, int j1, const int B) {
    int N = w->rows, tc = (int)(262144 / ((size_t)q->nw * 24 + 8 * (size_t)q->ng)) & ~3;
    if (tc < 4) tc = 4;
    for (int t0 = 0; t0 < T; t0 += tc) {
        int t1 = t0 + tc < T ? t0 + tc : T;
        for (int t = j0 / 16; t * 16 < j1; t++) {
            int l0 = j0 > t * 16 ? j0 - t * 16 : 0, l1 = j1 < t * 16 + 16 ? j1 - t * 16 : 16;
            int a = t0;
            for (; a + 4 <= t1; a += 4) q4r_tileN(y, q, w, N, a, t, l0, l1, 4, B);
            switch (t1 - a) {
            case 3: q4r_tileN(y, q, w, N, a, t, l0, l1, 3, B); break;
            case 2: q4r_tileN(y, q, w, N, a, t, l0, l1, 2, B); break;
            case 1: q4r_tileN(y, q, w, N, a, t, l0, l1, 1, B); break;
            }
        }
    }
}

void q4ril_gemm(float *y, const void *xp, int T, const weight_t *w, int j0, int j1) {
    QRIL_BITS(w, q4ril_gemm_b, y, (const q4r_x_t *)xp, T, w, j0, j1)
}

#pragma GCC pop_options
