/* q8ril_avx2_body.h — the decode tile, the GEMM tile and their driver of matmul_q8ril_avx2.c,
 * compiled twice: define R8_VNNI (1: vpdpbusd on the codes as stored; 0: vpmaddubsw on their
 * nibbles) and R8_(name). The same integers per (token, row, group) both ways, the same fold. */
#if !defined(R8_VNNI) || !defined(R8_)
#error "define R8_VNNI and R8_ before including q8ril_avx2_body.h"
#endif

/* Decode: one token against tile t, lanes [l0, l1) of its 16 stored to y + 16t.
 * VNNI: both halves of a word per pass (each broadcast serves 16 rows), six chains (digit ×
 * half): 52 G weights/s a core from L2 (kiln-mm-bench --bits 8 --rows 512 --cols 1024); twelve
 * (even and odd words apart) made gcc spill every chain twice a word: 24. vpmaddubsw (a
 * fallback: matmul_avx2.c packs 8-bit weights only where AVX-VNNI runs): the low half's words
 * of a group, then the high half's (the group's lines in L1 by then), six 16-bit sums (digit ×
 * nibble) folded into three int32 chains every eight words. */
AI void R8_(tile1)(float *y, const q8ra_x_t *q, const weight_t *w, int t, int l0, int l1) {
    const int ng = q->ng, wpg = q->G / 4;
    const uint8_t *cw = (const uint8_t *)w->data + (size_t)t * q->nw * 64;
    size_t sb = (size_t)t * ng * 16, sbz = w->sb_dtype == DT_F32 ? 4 : 2;
    const char *sp = (const char *)w->scales + sb * sbz, *bp = (const char *)w->biases + sb * sbz;
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int g = 0; g < ng; g++) {
        if (!((g * 16 * sbz) & 63)) { /* the next tile's scales and biases, a line at a time */
            _mm_prefetch(sp + (size_t)(ng + g) * 16 * sbz, _MM_HINT_T0);
            _mm_prefetch(bp + (size_t)(ng + g) * 16 * sbz, _MM_HINT_T0);
        }
        const uint8_t *cg = cw + (size_t)g * wpg * 64;
        const int8_t *xg = q->xd + (size_t)g * wpg * 12;
#if R8_VNNI
        __m256i a00 = _mm256_setzero_si256(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00;
        const uint8_t *c = cg;
        const int8_t *xw = xg;
#pragma GCC unroll 4
        for (int i = 0; i < wpg; i++, c += 64, xw += 12) {
            _mm_prefetch((const char *)c + Q8RA_PF, _MM_HINT_T0);
            __m256i v0 = _mm256_loadu_si256((const __m256i *)c), v1 = _mm256_loadu_si256((const __m256i *)(c + 32));
            __m256i e = bc(xw);
            a00 = _mm256_dpbusd_avx_epi32(a00, v0, e), a01 = _mm256_dpbusd_avx_epi32(a01, v1, e);
            e = bc(xw + 4);
            a10 = _mm256_dpbusd_avx_epi32(a10, v0, e), a11 = _mm256_dpbusd_avx_epi32(a11, v1, e);
            e = bc(xw + 8);
            a20 = _mm256_dpbusd_avx_epi32(a20, v0, e), a21 = _mm256_dpbusd_avx_epi32(a21, v1, e);
        }
        size_t si = sb + (size_t)g * 16;
        acc[0] = fold8(acc[0], a00, a10, a20, sb8f(w->biases, w->sb_dtype, si), sb8f(w->scales, w->sb_dtype, si), q->xs[g], q->pv[g]);
        acc[1] = fold8(acc[1], a01, a11, a21, sb8f(w->biases, w->sb_dtype, si + 8), sb8f(w->scales, w->sb_dtype, si + 8), q->xs[g], q->pv[g]);
#else
        const __m256i one = _mm256_set1_epi16(1), sixteen = _mm256_set1_epi16(16);
        for (int h = 0; h < 2; h++) {
            __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0;
            for (int i = 0; i < wpg; i += 8) { /* 32 columns: eight words */
                __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, t0 = s0, t1 = s0, t2 = s0;
#pragma GCC unroll 8
                for (int u = 0; u < 8; u++) {
                    const uint8_t *c = cg + (size_t)(i + u) * 64;
                    const int8_t *xw = xg + (size_t)(i + u) * 12;
                    if (!h) _mm_prefetch((const char *)c + Q8RA_PF, _MM_HINT_T0);
                    __m256i v = _mm256_loadu_si256((const __m256i *)(c + 32 * h));
                    __m256i lo = and_m4(v), hi = and_m4(_mm256_srli_epi16(v, 4));
                    __m256i e = bc(xw);
                    s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(lo, e)), t0 = _mm256_add_epi16(t0, _mm256_maddubs_epi16(hi, e));
                    e = bc(xw + 4);
                    s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(lo, e)), t1 = _mm256_add_epi16(t1, _mm256_maddubs_epi16(hi, e));
                    e = bc(xw + 8);
                    s2 = _mm256_add_epi16(s2, _mm256_maddubs_epi16(lo, e)), t2 = _mm256_add_epi16(t2, _mm256_maddubs_epi16(hi, e));
                }
                a0 = _mm256_add_epi32(a0, _mm256_add_epi32(_mm256_madd_epi16(s0, one), _mm256_madd_epi16(t0, sixteen)));
                a1 = _mm256_add_epi32(a1, _mm256_add_epi32(_mm256_madd_epi16(s1, one), _mm256_madd_epi16(t1, sixteen)));
                a2 = _mm256_add_epi32(a2, _mm256_add_epi32(_mm256_madd_epi16(s2, one), _mm256_madd_epi16(t2, sixteen)));
            }
            size_t si = sb + (size_t)g * 16 + 8 * h;
            acc[h] = fold8(acc[h], a0, a1, a2, sb8f(w->biases, w->sb_dtype, si), sb8f(w->scales, w->sb_dtype, si), q->xs[g], q->pv[g]);
        }
#endif
    }
    ril_store16(y + (size_t)t * 16, acc, l0, l1);
}

/* The GEMM's tile: NT tokens (from tok) against half h of tile t, lanes [l0, l1) of the half
 * stored; each code load (and, without VNNI, its nibbles) shared by the NT tokens; per token
 * three int32 chains (vpmaddubsw: each word's 16-bit sums added in at once, as the 4-bit GEMM). */
AI void R8_(tileN)(float *y, const q8ra_x_t *q, const weight_t *w, int N, int tok, int t, int h, int l0, int l1, const int NT) {
    const int nw = q->nw, ng = q->ng, wpg = q->G / 4;
    const uint8_t *c = (const uint8_t *)w->data + (size_t)t * nw * 64 + 32 * h;
    size_t sb = (size_t)t * ng * 16 + 8 * h, xds = (size_t)nw * 12;
    const int8_t *xw = q->xd + (size_t)tok * xds;
    __m256 acc[4];
#pragma GCC unroll 4
    for (int a = 0; a < NT; a++) acc[a] = _mm256_setzero_ps();
    for (int g = 0; g < ng; g++) {
        __m256i a0[4], a1[4], a2[4];
#pragma GCC unroll 4
        for (int a = 0; a < NT; a++) a0[a] = a1[a] = a2[a] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int i = 0; i < wpg; i++, c += 64, xw += 12) {
            __m256i v = _mm256_loadu_si256((const __m256i *)c);
#if R8_VNNI
#pragma GCC unroll 4
            for (int a = 0; a < NT; a++) {
                const int8_t *x = xw + (size_t)a * xds;
                a0[a] = _mm256_dpbusd_avx_epi32(a0[a], v, bc(x));
                a1[a] = _mm256_dpbusd_avx_epi32(a1[a], v, bc(x + 4));
                a2[a] = _mm256_dpbusd_avx_epi32(a2[a], v, bc(x + 8));
            }
#else
            __m256i lo = and_m4(v), hi = and_m4(_mm256_srli_epi16(v, 4));
            const __m256i one = _mm256_set1_epi16(1), sixteen = _mm256_set1_epi16(16);
#define R8_MD(a, p) a = _mm256_add_epi32(a, _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(lo, bc(p)), one), \
                                                                  _mm256_madd_epi16(_mm256_maddubs_epi16(hi, bc(p)), sixteen)))
#pragma GCC unroll 4
            for (int a = 0; a < NT; a++) {
                const int8_t *x = xw + (size_t)a * xds;
                R8_MD(a0[a], x);
                R8_MD(a1[a], x + 4);
                R8_MD(a2[a], x + 8);
            }
#undef R8_MD
#endif
        }
        __m256 bias = sb8f(w->biases, w->sb_dtype, sb + (size_t)g * 16), scale = sb8f(w->scales, w->sb_dtype, sb + (size_t)g * 16);
#pragma GCC unroll 4
        for (int a = 0; a < NT; a++)
            acc[a] = fold8(acc[a], a0[a], a1[a], a2[a], bias, scale, q->xs[(size_t)(tok + a) * ng + g], q->pv[(size_t)(tok + a) * ng + g]);
    }
    ril_store(y + (size_t)tok * N + (size_t)t * 16 + 8 * h, (size_t)N, acc, l0, l1, NT);
}

/* T tokens, rows [j0, j1) inside full tiles: as matmul_q4ril_avx2.c's driver. */
static __attribute__((noinline)) void R8_(run)(float *y, const q8ra_x_t *q, int T, const weight_t *w, int j0, int j1) {
    if (T == 1) {
        for (int t = j0 / 16; t * 16 < j1; t++) {
            int l0 = j0 > t * 16 ? j0 - t * 16 : 0, l1 = j1 < t * 16 + 16 ? j1 - t * 16 : 16;
            R8_(tile1)(y, q, w, t, l0, l1);
        }
        return;
    }
    int N = w->rows;
#define R8_TILE(a, t, h, l0, l1, NT) R8_(tileN)(y, q, w, N, a, t, h, l0, l1, NT)
    RIL_GEMM_WALK(T, j0, j1, (size_t)q->nw * 12 + 8 * (size_t)q->ng, R8_TILE);
#undef R8_TILE
}
