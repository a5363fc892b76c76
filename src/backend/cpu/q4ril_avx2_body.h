







/* q4ril_avx2_body.h — the decode tile, the GEMM tile and their driver of matmul_q4ril_avx2.c,
 * written once and compiled twice: define RA_VNNI (1: AVX-VNNI's vpdpbusd, 0: vpmaddubsw +
 * vpmaddwd) and RA_(name) before including. Per (token, row) both compute the same integers
 * and the same fold (see matmul_q4ril_avx2.c). */
#if !defined(RA_VNNI) || !defined(RA_)
#error "define RA_VNNI and RA_ before including q4ril_avx2_body.h"
#endif

/* s += codes (u8) · the 4 digits at p (s8) broadcast: VNNI into int32 lanes, else into the
 * 16-bit pair sums (see the top of matmul_q4ril_avx2.c for the bounds) */
#if RA_VNNI
#define RA_DOT(s, u, p) (s) = _mm256_dpbusd_avx_epi32((s), (u), bc(p))
#else
#define RA_DOT(s, u, p) (s) = _mm256_add_epi16((s), _mm256_maddubs_epi16((u), bc(p)))
#endif

/* Decode: one token against tile t, lanes [l0, l1) of its 16 stored to y + 16t.
 * VNNI: both halves of a word (rows 0-7, 8-15) in one pass, so each x digit broadcast serves both
 * (AVX-VNNI has no broadcast operand: a broadcast is a load of its own) — the low nibbles of the
 * two halves against the three even-column digits, then the high nibbles (the halves loaded
 * again: a load is cheaper than the registers the codes would hold) against the odd ones;
 * twelve chains (digit × half × plane), one vpdpbusd a word each.
 * vpmaddubsw: both halves too, each word's two 16-bit pair sums added into six int32 chains
 * (digit × half) at once (vpmaddwd by 1) — 16-bit sums kept over four words, a half at a time,
 * measured 32 against 34 G weights/s a core from L2 and 11.5 against 14 GB/s on the model's
 * stream (kiln-mm-bench --model qwen3-0.6b).
 * B-bit codes (B = 2, 3, 5, 6: WL_Q_RIL16's planes, qb8_word) with VNNI: both halves, six chains
 * (digit × half, the two planes in one chain) — each word's planes are built before the chains
 * take them, so the twelve-chain layout would have no registers left. */
AI void RA_(tile1)(float *y, const q4ra_x_t *q, const weight_t *w, int t, int l0, int l1, const int B) {
    const int ng = q->ng, cpg = q->G / 32; /* 32-column chunks a group (B lines of 64 bytes each) */
    const uint8_t *cw = (const uint8_t *)w->data + (size_t)t * (q->K / 32) * B * 64;
    size_t sb = (size_t)t * ng * 16, sbz = w->sb_dtype == DT_F32 ? 4 : 2;
    const char *sp = (const char *)w->scales + sb * sbz, *bp = (const char *)w->biases + sb * sbz;
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
#if !RA_VNNI
    const __m256i one = _mm256_set1_epi16(1);
#endif
    for (int g = 0; g < ng; g++) {
        if (!((g * 16 * sbz) & 63)) { /* the next tile's scales and biases, a line at a time */
            _mm_prefetch(sp + (size_t)(ng + g) * 16 * sbz, _MM_HINT_T0);
            _mm_prefetch(bp + (size_t)(ng + g) * 16 * sbz, _MM_HINT_T0);
        }
        const uint8_t *c = cw + (size_t)g * cpg * B * 64;
        const int8_t *xw = q->xd + (size_t)g * cpg * 4 * 24;
        /* [digit][half] */
        __m256i a00 = _mm256_setzero_si256(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00;
#if RA_VNNI
        __m256i b00 = a00, b01 = a00, b10 = a00, b11 = a00, b20 = a00, b21 = a00;
#endif
        for (int k = 0; k < cpg; k++, c += B * 64) { /* 32 columns: four words */
#pragma GCC unroll 6
            for (int l = 0; l < B; l++) _mm_prefetch((const char *)c + Q4RA_PF + 64 * l, _MM_HINT_T0);
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++, xw += 24) {
#if RA_VNNI
                if (B == 4) {
                    __m256i lo0 = and_m4(_mm256_loadu_si256((const __m256i *)(c + 64 * u)));
                    __m256i lo1 = and_m4(_mm256_loadu_si256((const __m256i *)(c + 64 * u + 32)));
                    RA_DOT(a00, lo0, xw), RA_DOT(a01, lo1, xw);
                    RA_DOT(a10, lo0, xw + 8), RA_DOT(a11, lo1, xw + 8);
                    RA_DOT(a20, lo0, xw + 16), RA_DOT(a21, lo1, xw + 16);
                    __m256i hi0 = and_m4(_mm256_srli_epi16(_mm256_loadu_si256((const __m256i *)(c + 64 * u)), 4));
                    __m256i hi1 = and_m4(_mm256_srli_epi16(_mm256_loadu_si256((const __m256i *)(c + 64 * u + 32)), 4));
                    RA_DOT(b00, hi0, xw + 4), RA_DOT(b01, hi1, xw + 4);
                    RA_DOT(b10, hi0, xw + 12), RA_DOT(b11, hi1, xw + 12);
                    RA_DOT(b20, hi0, xw + 20), RA_DOT(b21, hi1, xw + 20);
                } else {
                    __m256i lo0, hi0, lo1, hi1;
                    qb8_word(&lo0, &hi0, c, u, B);
                    qb8_word(&lo1, &hi1, c + 32, u, B);
                    RA_DOT(a00, lo0, xw), RA_DOT(a00, hi0, xw + 4), RA_DOT(a01, lo1, xw), RA_DOT(a01, hi1, xw + 4);
                    RA_DOT(a10, lo0, xw + 8), RA_DOT(a10, hi0, xw + 12), RA_DOT(a11, lo1, xw + 8), RA_DOT(a11, hi1, xw + 12);
                    RA_DOT(a20, lo0, xw + 16), RA_DOT(a20, hi0, xw + 20), RA_DOT(a21, lo1, xw + 16), RA_DOT(a21, hi1, xw + 20);
                }
#else
                __m256i lo0, hi0, lo1, hi1;
                qb8_word(&lo0, &hi0, c, u, B);
                qb8_word(&lo1, &hi1, c + 32, u, B);
                /* a += the word's sums of one half against digit pair (e, o) */
#define RA_MD(a, lo, hi) a = _mm256_add_epi32(a, _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(lo, e), _mm256_maddubs_epi16(hi, o)), one))
                __m256i e = bc(xw), o = bc(xw + 4);
                RA_MD(a00, lo0, hi0), RA_MD(a01, lo1, hi1);
                e = bc(xw + 8), o = bc(xw + 12);
                RA_MD(a10, lo0, hi0), RA_MD(a11, lo1, hi1);
                e = bc(xw + 16), o = bc(xw + 20);
                RA_MD(a20, lo0, hi0), RA_MD(a21, lo1, hi1);
#undef RA_MD
#endif
            }
        }
#if RA_VNNI
        if (B == 4) {
            a00 = _mm256_add_epi32(a00, b00), a01 = _mm256_add_epi32(a01, b01), a10 = _mm256_add_epi32(a10, b10);
            a11 = _mm256_add_epi32(a11, b11), a20 = _mm256_add_epi32(a20, b20), a21 = _mm256_add_epi32(a21, b21);
        }
#endif
        size_t si = sb + (size_t)g * 16;
        acc[0] = fold8(acc[0], a00, a10, a20, sb8f(w->biases, w->sb_dtype, si), sb8f(w->scales, w->sb_dtype, si), q->xs[g], q->pv[g]);
        acc[1] = fold8(acc[1], a01, a11, a21, sb8f(w->biases, w->sb_dtype, si + 8), sb8f(w->scales, w->sb_dtype, si + 8), q->xs[g], q->pv[g]);
    }
    ril_store16(y + (size_t)t * 16, acc, l0, l1);
}

/* The GEMM's tile: NT tokens (from tok) against half h of tile t (its rows 8h..8h+7), lanes
 * [l0, l1) of the half stored; each word's planes built once for the NT tokens, per token three
 * int32 chains (the planes in one chain; the same integers as tile1's). */
AI void RA_(tileN)(float *y, const q4ra_x_t *q, const weight_t *w, int N, int tok, int t, int h, int l0, int l1, const int NT,
                   const int B) {
    const int ng = q->ng, cpg = q->G / 32;
    const uint8_t *c = (const uint8_t *)w->data + (size_t)t * (q->K / 32) * B * 64 + 32 * h;
    size_t sb = (size_t)t * ng * 16 + 8 * h, xds = (size_t)q->nw * 24;
    const int8_t *xw = q->xd + (size_t)tok * xds;
    __m256 acc[4];
#pragma GCC unroll 4
    for (int a = 0; a < NT; a++) acc[a] = _mm256_setzero_ps();
    for (int g = 0; g < ng; g++) {
        __m256i a0[4], a1[4], a2[4];
#pragma GCC unroll 4
        for (int a = 0; a < NT; a++) a0[a] = a1[a] = a2[a] = _mm256_setzero_si256();
        for (int k = 0; k < cpg; k++, c += B * 64) { /* 32 columns: four words */
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++, xw += 24) {
                __m256i lo, hi;
                qb8_word(&lo, &hi, c, u, B);
#pragma GCC unroll 4
                for (int a = 0; a < NT; a++) {
                    const int8_t *x = xw + (size_t)a * xds;
#if RA_VNNI
                    RA_DOT(a0[a], lo, x);
                    RA_DOT(a0[a], hi, x + 4);
                    RA_DOT(a1[a], lo, x + 8);
                    RA_DOT(a1[a], hi, x + 12);
                    RA_DOT(a2[a], lo, x + 16);
                    RA_DOT(a2[a], hi, x + 20);
#else /* the word's two 16-bit pair sums into the lane at once (four tokens' 16-bit sums
       * kept over four words, as decode once did, spilled: 43-58 against 66-77 GFLOP/s) */
                    const __m256i one = _mm256_set1_epi16(1);
                    a0[a] = _mm256_add_epi32(a0[a], _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(lo, bc(x)), _mm256_maddubs_epi16(hi, bc(x + 4))), one));
                    a1[a] = _mm256_add_epi32(a1[a], _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(lo, bc(x + 8)), _mm256_maddubs_epi16(hi, bc(x + 12))), one));
                    a2[a] = _mm256_add_epi32(a2[a], _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(lo, bc(x + 16)), _mm256_maddubs_epi16(hi, bc(x + 20))), one));
#endif
                }
            }
        }
        __m256 bias = sb8f(w->biases, w->sb_dtype, sb + (size_t)g * 16), scale = sb8f(w->scales, w->sb_dtype, sb + (size_t)g * 16);
#pragma GCC unroll 4
        for (int a = 0; a < NT; a++)
            acc[a] = fold8(acc[a], a0[a], a1[a], a2[a], bias, scale, q->xs[(size_t)(tok + a) * ng + g], q->pv[(size_t)(tok + a) * ng + g]);
    }
    ril_store(y + (size_t)tok * N + (size_t)t * 16 + 8 * h, (size_t)N, acc, l0, l1, NT);
}
#undef RA_DOT

/* T tokens, rows [j0, j1) inside full tiles. Decode: tile by tile. The GEMM: RIL_GEMM_WALK
 * (ril_avx2.h: token chunks near 256 KB of digits, each half tile against 4 tokens at a time). */
AI void RA_(run_b)(float *y, const q4ra_x_t *q, int T, const weight_t *w, int j0, int j1, const int B) {
    if (T == 1) {
        for (int t = j0 / 16; t * 16 < j1; t++) {
            int l0 = j0 > t * 16 ? j0 - t * 16 : 0, l1 = j1 < t * 16 + 16 ? j1 - t * 16 : 16;
            RA_(tile1)(y, q, w, t, l0, l1, B);
        }
        return;
    }
    int N = w->rows;
#define RA_TILE(a, t, h, l0, l1, NT) RA_(tileN)(y, q, w, N, a, t, h, l0, l1, NT, B)
    RIL_GEMM_WALK(T, j0, j1, (size_t)q->nw * 24 + 8 * (size_t)q->ng, RA_TILE);
#undef RA_TILE
}

/* one out-of-line copy per width */
static __attribute__((noinline)) void RA_(run)(float *y, const q4ra_x_t *q, int T, const weight_t *w, int j0, int j1) {
    QRIL_BITS(w, RA_(run_b), y, q, T, w, j0, j1)
}
