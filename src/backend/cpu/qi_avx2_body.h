/* qi_avx2_body.h — the tile and driver of matmul_qi_avx2.c, written once and compiled three
 * times: 4-bit codes (and 2/3/5/6-bit ones, Q4V_BITS 4) with Q4V_DOT = dot_madd (any AVX2 CPU) or
 * dot_vnni, 8-bit codes with dot8_vnni (AVX-VNNI, in a function target of its own). Define Q4V_BITS
 * (4 or 8), Q4V_DOT(lo, hi, x digits) and Q4V_(name) before including. A block is 64 columns (lane
 * n = columns 8n..8n+7: 32 bytes of codes at 4 bits, 8·B at B = 2/3/5/6 bits, codes_lb), or at 8
 * bits 32 columns, 32 bytes (lane n = columns 4n..4n+3). The tile's B is the weight's width,
 * a constant after inlining (the run function's switch). */
#if !defined(Q4V_DOT) || !defined(Q4V_BITS)
#error "define Q4V_BITS, Q4V_DOT and Q4V_ before including qi_avx2_body.h"
#endif

/* NT x rows (from t) against W rows [j, j + NJ), every (x row, W row) pair through the steps
 * above in their order. Groups go 8 at a time (8·G columns: 8·G / BW blocks of BW columns),
 * their scales loaded once; lane n of block bi of the window takes group (bi·BW + n·BW/8) / G.
 * PF: decode (W streams once: prefetch it). */
AI void Q4V_(tile)(float *y, const q4v_t *q, int t, const weight_t *w, int j, const int NT, const int NJ, const int PF, const int B,
                   const uint8_t *pl, const __m256i *lbc) {
    const int BW = Q4V_BITS == 4 ? 64 : 32;
    int K = q->K, N = w->rows, ng = q->ng, G = q->G, nb = q->nb, nfull = K / BW, bpw = 8 * G / BW; /* blocks per window */
    size_t row_bytes = (size_t)K * B / 8, pfd = PF_AHEAD(row_bytes);
    const uint8_t *rows[4], *wend = (const uint8_t *)w->data + (size_t)N * row_bytes;
    #pragma GCC unroll 4
    for (int b = 0; b < NJ; b++) rows[b] = (const uint8_t *)w->data + (size_t)(j + b) * row_bytes;
    const __m256i lane_grp = BW == 64 && G == 32 ? _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1) : _mm256_setzero_si256();
    __m256 acc[2][4];
    #pragma GCC unroll 4
    for (int a = 0; a < NT; a++)
        #pragma GCC unroll 4
        for (int b = 0; b < NJ; b++) acc[a][b] = bias_term8(w, j + b, q->xg + (size_t)(t + a) * q->ngp, ng);
    for (int g0 = 0, blk = 0; g0 < ng; g0 += 8) {
        __m256 s8[4], p8[2];
        #pragma GCC unroll 4
        for (int a = 0; a < NT; a++) p8[a] = _mm256_loadu_ps(q->pv + (size_t)(t + a) * q->ngp + g0);
        #pragma GCC unroll 4
        for (int b = 0; b < NJ; b++) {
            s8[b] = sb8(w->scales, w->sb_dtype, (size_t)(j + b) * ng + g0, ng - g0);
            if (NT == 1) s8[b] = _mm256_mul_ps(s8[b], p8[0]); /* s·p once per window (the same products as below) */
        }
        int bend = blk + bpw < nb ? blk + bpw : nb;
        for (int bi = 0; blk < bend; blk++, bi++) {
            __m256i gidx = _mm256_add_epi32(_mm256_set1_epi32(bi * BW / G), lane_grp);
            __m256 pa[2];
            if (NT > 1)
                #pragma GCC unroll 4
                for (int a = 0; a < NT; a++) pa[a] = _mm256_permutevar8x32_ps(p8[a], gidx);
            #pragma GCC unroll 4
            for (int b = 0; b < NJ; b++) {
                __m256i lo, hi;
                if (B == 4 || B == 8) {
                    if (PF && !(blk & 1)) _mm_prefetch((const char *)rows[b] + (size_t)blk * 32 + pfd, _MM_HINT_T0);
                    __m256i v = codes32(rows[b], blk, nfull);
                    if (B == 4) lo = NIBBLES_LO(v), hi = NIBBLES_HI(v);
                    else lo = hi = v;
                } else if (pl) { /* the GEMM: this W row's codes unpacked once for all x rows (planes) */
                    lo = _mm256_load_si256((const __m256i *)(pl + ((size_t)b * nb + blk) * 64));
                    hi = _mm256_load_si256((const __m256i *)(pl + ((size_t)b * nb + blk) * 64 + 32));
                } else {
                    const uint8_t *p = rows[b] + (size_t)blk * 8 * B;
                    if (PF) _mm_prefetch((const char *)p + pfd, _MM_HINT_T0);
                    codes_lb(&lo, &hi, p, blk >= nfull, wend, lbc, B);
                }
                __m256 sv = _mm256_permutevar8x32_ps(s8[b], gidx);
                #pragma GCC unroll 4
                for (int a = 0; a < NT; a++) {
                    const int8_t *xb = q->xd + (size_t)(t + a) * q->xds + (size_t)blk * 3 * BW;
                    __m256i d = Q4V_DOT(lo, hi, xb); /* (the codes are common to both x rows) */
                    acc[a][b] = _mm256_fmadd_ps(NT == 1 ? sv : _mm256_mul_ps(sv, pa[a]), _mm256_cvtepi32_ps(d), acc[a][b]);
                }
            }
        }
    }
    #pragma GCC unroll 4
    for (int a = 0; a < NT; a++)
        #pragma GCC unroll 4
        for (int b = 0; b < NJ; b++) y[(size_t)(t + a) * N + j + b] = hsum8(acc[a][b]);
}

/* Decode: x row 0 against W rows [j0, j1), 4 at a time. The GEMM: chunks of x rows whose
 * digits stay near 128 KB, and per chunk W in tiles of 4 rows against every pair of x rows
 * (2 × 4, 2 × 2, 4 × 2, 3 × 2 and 4 × 1 tiles measured within 5 % of each other: the tile's
 * integer ops, ~18 a (x row, W row, block), not the shared extraction, are the cost). */
#if Q4V_BITS == 4
/* W rows [j, j + nj) of a 2/3/5/6-bit weight as codes_lb's planes, [row][block][lo 32 | hi 32]: the
 * GEMM's tiles then read 2 vectors a block instead of unpacking it again for every pair of x rows
 * (18 ops a block: 3-bit prefill 47 -> ~70 GFLOP/s with AVX-VNNI, even with the float panels) */
static void Q4V_(planes)(uint8_t *pl, const q4v_t *q, const weight_t *w, int j, int nj, const int B, const __m256i *lbc) {
    size_t row_bytes = (size_t)q->K * B / 8;
    const uint8_t *wend = (const uint8_t *)w->data + (size_t)w->rows * row_bytes;
    __m256i lo, hi;
    for (int b = 0; b < nj; b++) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)(j + b) * row_bytes;
        for (int blk = 0; blk < q->nb; blk++) {
            codes_lb(&lo, &hi, row + (size_t)blk * 8 * B, blk >= q->K / 64, wend, lbc, B);
            _mm256_store_si256((__m256i *)(pl + ((size_t)b * q->nb + blk) * 64), lo);
            _mm256_store_si256((__m256i *)(pl + ((size_t)b * q->nb + blk) * 64 + 32), hi);
        }
    }
}
#endif

AI void Q4V_(run_b)(float *y, const q4v_t *q, int T, const weight_t *w, int j0, int j1, const int B) {
    __m256i lbc[4]; /* B = 2/3/5/6: codes_lb's shuffles and multipliers, once a call */
    if (B != 4 && B != 8) lb_consts(lbc, B);
    if (T == 1) {
        int j = j0;
        for (; j + 4 <= j1; j += 4) Q4V_(tile)(y, q, 0, w, j, 1, 4, 1, B, NULL, lbc);
        for (; j < j1; j++) Q4V_(tile)(y, q, 0, w, j, 1, 1, 1, B, NULL, lbc);
        return;
    }
    uint8_t *pl = NULL;
#if Q4V_BITS == 4
    if (B != 4 && !(pl = cpu_scratch(CPU_SCRATCH_WPANEL, (size_t)4 * q->nb * 64))) abort();
#endif
    int tc = (int)(131072 / (q->xds + 1)) & ~1;
    if (tc < 2) tc = 2;
    for (int t0 = 0; t0 < T; t0 += tc) {
        int t1 = t0 + tc < T ? t0 + tc : T, j = j0;
        for (; j + 4 <= j1; j += 4) {
            int t = t0;
#if Q4V_BITS == 4
            if (pl) Q4V_(planes)(pl, q, w, j, 4, B, lbc);
#endif
            for (; t + 2 <= t1; t += 2) Q4V_(tile)(y, q, t, w, j, 2, 4, 0, B, pl, lbc);
            for (; t < t1; t++) Q4V_(tile)(y, q, t, w, j, 1, 4, 0, B, pl, lbc);
        }
        for (; j < j1; j++) {
#if Q4V_BITS == 4
            if (pl) Q4V_(planes)(pl, q, w, j, 1, B, lbc);
#endif
            for (int t = t0; t < t1; t++) Q4V_(tile)(y, q, t, w, j, 1, 1, 0, B, pl, lbc);
        }
    }
}

/* one out-of-line copy per width */
static __attribute__((noinline)) void Q4V_(run)(float *y, const q4v_t *q, int T, const weight_t *w, int j0, int j1) {
#if Q4V_BITS == 8
    Q4V_(run_b)(y, q, T, w, j0, j1, 8);
#else
    QRIL_BITS(w, Q4V_(run_b), y, q, T, w, j0, j1)
#endif
}
