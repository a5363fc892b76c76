/* attention_tile_body.h — one tile of paged attention (a few consecutive query tokens of
 * one row × one KV head), written once and compiled per SIMD family:
 * attention_tile_avx2.c and attention_tile_avx512.c define the AT_* vector macros below
 * and include this file. The driver (tiles, threads, scratch) is attention_cpu.c.
 *
 * Layout: the tile's query vectors (its tokens × the GQA group's heads, token-major) sit
 * in the lanes of vectors — Qt[d][lane] — so one key's scores for every query of the tile
 * are one vector: S[j][lane] = Σ_d Qt[d][lane] · K[j][d], summed in d order by a chain of
 * FMAs. Keys come in blocks of AT_KB positions aligned to absolute positions; each block's
 * K and V rows are converted to f32 once per tile (not once per query, which made prefill
 * attention quadratic in conversions) and every query of the tile updates an online
 * softmax with it: m' = max(m, max_j s_j), l' = l·e^{m−m'} + Σ_j e^{s_j−m'},
 * acc' = acc·e^{m−m'} + Σ_j e^{s_j−m'} v_j, out = acc / l after the last block.
 *
 * Batch invariance: every operation on a lane uses only that lane's query, the keys of
 * its own [lo, pos] range and the block boundaries (multiples of AT_KB): a masked key
 * contributes −inf to the max and an exact +0 to the sums, blocks that do not meet a
 * query's range leave its state untouched, and the V sum walks the query's own keys in
 * position order. So a query's bits do not depend on which tile, lane, step, chunk split
 * or thread it lands in. exp is a lane-wise polynomial (Cephes' expf form, ~2 ulp on
 * [-87, 0]); the result differs from ref.c's two-pass softmax by rounding only. */

#ifndef AT_NAME
#error "define AT_NAME and the AT_* vector macros before including attention_tile_body.h"
#endif

#ifndef AT_PF
#define AT_PF 2 /* __builtin_prefetch locality of the next block's K/V: 2 = prefetcht1 (L2) */
#endif
/* bytes per cache element for the decode paths' KT (0 f16, 1 bf16, 2 f32, 3 int8 codes) */
#define AT_KV_BYTES(KT) ((KT) == 2 ? 4 : (KT) == 3 ? 1 : 2)
#define AT_CAT2(a, b) a##b
#define AT_CAT(a, b) AT_CAT2(a, b)

/* e^x for x <= 0 (inputs below -87 give e^-87 ≈ 1.6e-38; callers mask what must be 0). */
static inline AT_V AT_CAT(AT_NAME, _exp)(AT_V x) {
    x = AT_MAX(x, AT_SET1(-87.0f));
    AT_V n = AT_ROUND(AT_MUL(x, AT_SET1(1.44269504088896341f)));
    AT_V r = AT_FNMA(n, AT_SET1(0.693359375f), x);
    r = AT_FNMA(n, AT_SET1(-2.12194440e-4f), r);
    AT_V y = AT_SET1(1.9875691500e-4f);
    y = AT_FMA(y, r, AT_SET1(1.3981999507e-3f));
    y = AT_FMA(y, r, AT_SET1(8.3334519073e-3f));
    y = AT_FMA(y, r, AT_SET1(4.1665795894e-2f));
    y = AT_FMA(y, r, AT_SET1(1.6666665459e-1f));
    y = AT_FMA(y, r, AT_SET1(5.0000001201e-1f));
    y = AT_FMA(y, AT_MUL(r, r), AT_ADD(r, AT_SET1(1.0f)));
    return AT_MUL(y, AT_POW2I(n));
}

/* An int8 cache row (`--kv-dtype q8`) → f32: dst[i] = (float)c[i] · s, the product every path
 * and the reference use (backend.h kv_load_k) */
static inline void AT_CAT(AT_NAME, _q8_f32)(float *dst, const int8_t *c, float s, int n) {
    int i = 0;
#ifdef AT_LOADQ8
    for (AT_V sv = AT_SET1(s); i + AT_VW <= n; i += AT_VW) AT_STORE(dst + i, AT_MUL(AT_LOADQ8(c + i), sv));
#endif
    for (; i < n; i++) dst[i] = (float)c[i] * s;
}

/* Segments: a query's keys are cut at multiples of attn_seg() positions (0: one segment) (absolute, like the
 * blocks); each segment runs its own online softmax from a fresh state (m = -inf, l = 0,
 * acc = 0) and the segments' states are folded in position order by _fold:
 * M' = max(M, m), L' = L·e^{M−M'} + l·e^{m−M'}, ACC' = ACC·e^{M−M'} + acc·e^{m−M'}
 * (e^{M−M'} = 0 for the first), out = ACC · (1/L). A tile folds its segments as it goes;
 * a split decode row (attention_cpu.c) has its segments computed by separate items, each
 * state written out whole (_heads with part), and folded afterwards by _merge with the
 * same _fold in the same order: the same bits whichever items and threads ran. A query
 * whose keys lie in one segment gets exactly the unsegmented result (e^0 = 1, ·0 + x). */
static inline void AT_CAT(AT_NAME, _fold)(float *M, float *L, float *ACC, float m, float l, const float *acc, int hdp) {
    if (m == -INFINITY) return; /* no key of this query in the segment */
    float mo = *M, mn = mo > m ? mo : m, e[AT_VW], f[AT_VW];
    AT_STORE(e, AT_CAT(AT_NAME, _exp)(AT_SET1(mo == -INFINITY ? 0.f : mo - mn)));
    AT_STORE(f, AT_CAT(AT_NAME, _exp)(AT_SET1(m - mn)));
    float ea = mo == -INFINITY ? 0.f : e[0], eb = f[0];
    *M = mn;
    *L = *L * ea + l * eb;
    AT_V va = AT_SET1(ea), vb = AT_SET1(eb);
    for (int d = 0; d < hdp; d += AT_VW) AT_STORE(ACC + d, AT_ADD(AT_MUL(AT_LOAD(ACC + d), va), AT_MUL(AT_LOAD(acc + d), vb)));
}

static inline void AT_CAT(AT_NAME, _emit)(float *o, const float *ACC, float L, int hd) {
    float inv = 1.0f / L;
    int d = 0;
    for (; d + AT_VW <= hd; d += AT_VW) AT_STORE(o + d, AT_MUL(AT_LOAD(ACC + d), AT_SET1(inv)));
    for (; d < hd; d++) o[d] = ACC[d] * inv;
}

/* Scores of keys j0..j0+NJ-1 of the converted block against lane vectors v..v+NV-1:
 * S[j][lanes] = (Σ_d Qt[d][lanes] · Kb[j][d]) · scale. Every (j, lane) is its own FMA chain
 * in d order whatever NJ and NV are (always inlined with constants: registers only).
 * KTL: Kb holds the block transposed, Kb[d·AT_KB + j] (a transposed cache, kv_view_t.k_t):
 * the same values, read from other places. */
static inline __attribute__((always_inline)) void AT_CAT(AT_NAME, _scores_nj)(float *S, const float *Qt, const float *Kb, int nqp,
                                                                              int hdp, int hd, int j0, int v, float scale,
                                                                              const int NJ, const int NV, const int KTL) {
    AT_V acc[2][4];
    const float *k0 = KTL ? Kb + j0 : Kb + (size_t)j0 * hdp, *qv = Qt + (size_t)v * AT_VW;
#pragma GCC unroll 4
    for (int u = 0; u < NV; u++)
#pragma GCC unroll 4
        for (int j = 0; j < NJ; j++) acc[u][j] = AT_ZERO();
    for (int d = 0; d < hd; d++) {
        AT_V qd[2];
#pragma GCC unroll 2
        for (int u = 0; u < NV; u++) qd[u] = AT_LOAD(qv + (size_t)d * nqp + u * AT_VW);
#pragma GCC unroll 4
        for (int j = 0; j < NJ; j++) {
            AT_V kj = AT_SET1(KTL ? k0[(size_t)d * AT_KB + j] : k0[(size_t)j * hdp + d]);
#pragma GCC unroll 2
            for (int u = 0; u < NV; u++) acc[u][j] = AT_FMA(qd[u], kj, acc[u][j]);
        }
    }
    AT_V sc = AT_SET1(scale);
#pragma GCC unroll 4
    for (int j = 0; j < NJ; j++)
#pragma GCC unroll 2
        for (int u = 0; u < NV; u++) AT_STORE(S + (size_t)(j0 + j) * nqp + (size_t)(v + u) * AT_VW, AT_MUL(acc[u][j], sc));
}

/* Scores of keys [ja, jb] for lane vectors [v0, v1): pairs of lane vectors × 4 keys. */
static inline __attribute__((always_inline)) void AT_CAT(AT_NAME, _scores_k)(float *S, const float *Qt, const float *Kb, int nqp,
                                                                             int hdp, int hd, int ja, int jb, int v0, int v1,
                                                                             float scale, const int KTL) {
    for (int v = v0; v < v1; v += 2) {
        int j = ja;
        if (v + 1 < v1) {
            for (; j + 4 <= jb + 1; j += 4) AT_CAT(AT_NAME, _scores_nj)(S, Qt, Kb, nqp, hdp, hd, j, v, scale, 4, 2, KTL);
            for (; j <= jb; j++) AT_CAT(AT_NAME, _scores_nj)(S, Qt, Kb, nqp, hdp, hd, j, v, scale, 1, 2, KTL);
        } else {
            for (; j + 4 <= jb + 1; j += 4) AT_CAT(AT_NAME, _scores_nj)(S, Qt, Kb, nqp, hdp, hd, j, v, scale, 4, 1, KTL);
            for (; j <= jb; j++) AT_CAT(AT_NAME, _scores_nj)(S, Qt, Kb, nqp, hdp, hd, j, v, scale, 1, 1, KTL);
        }
    }
}

static void AT_CAT(AT_NAME, _scores)(float *S, const float *Qt, const float *Kb, int nqp, int hdp, int hd, int ja, int jb,
                                     int v0, int v1, float scale, int ktl) {
    if (ktl) AT_CAT(AT_NAME, _scores_k)(S, Qt, Kb, nqp, hdp, hd, ja, jb, v0, v1, scale, 1);
    else AT_CAT(AT_NAME, _scores_k)(S, Qt, Kb, nqp, hdp, hd, ja, jb, v0, v1, scale, 0);
}

/* Few queries (a decode step: one token's GQA group, nq <= AT_DQ): the lanes of the layout
 * above would be mostly empty, so here the lanes are keys — each d gathers K[j][d] for 16
 * (or 8) keys from the converted rows. A score is still fma(q[d], k[d], acc) over d in
 * order from 0, then × scale: bit for bit what _scores computes for the same query and key
 * (test_attention_tiles compares decode-sized tiles with whole-step tiles bitwise). All
 * AT_KB keys of the block are scored; rows outside [ja, jb] hold zeros or an earlier
 * block's rows and are masked by the caller. */
static inline __attribute__((always_inline)) void AT_CAT(AT_NAME, _scores_few_n)(float *S, const float *Qt, const float *Kb,
                                                                                int nqp, int hdp, int hd, float scale,
                                                                                const int NQ, const int KT, int kl) {
    AT_VI idx[AT_KB / AT_VW];
    AT_V acc[4][AT_KB / AT_VW]; /* NQ <= AT_DQ <= 4, a constant: the accumulators stay in registers */
#pragma GCC unroll 4
    for (int u = 0; u < AT_KB / AT_VW; u++) idx[u] = AT_MULLO_I(AT_ADD_I(AT_IOTA(), AT_SET1I(u * AT_VW)), AT_SET1I(hdp));
#pragma GCC unroll 4
    for (int i = 0; i < NQ; i++)
#pragma GCC unroll 4
        for (int u = 0; u < AT_KB / AT_VW; u++) acc[i][u] = AT_ZERO();
    for (int d = 0; d < hd; d++) {
        AT_V kd[AT_KB / AT_VW];
#pragma GCC unroll 4
        for (int u = 0; u < AT_KB / AT_VW; u++) kd[u] = KT ? AT_LOAD(Kb + (size_t)d * AT_KB + u * AT_VW) : AT_GATHER(Kb + d, idx[u]);
#pragma GCC unroll 4
        for (int i = 0; i < NQ; i++) {
            AT_V qd = AT_SET1(Qt[(size_t)d * nqp + i]);
#pragma GCC unroll 4
            for (int u = 0; u < AT_KB / AT_VW; u++) acc[i][u] = AT_FMA(qd, kd[u], acc[i][u]);
        }
    }
    AT_V sc = AT_SET1(scale);
    if (kl) { /* keys layout: S[i·AT_KB + j] */
#pragma GCC unroll 4
        for (int i = 0; i < NQ; i++)
#pragma GCC unroll 4
            for (int u = 0; u < AT_KB / AT_VW; u++) AT_STORE(S + (size_t)i * AT_KB + u * AT_VW, AT_MUL(acc[i][u], sc));
        return;
    }
    float tmp[AT_KB];
#pragma GCC unroll 4
    for (int i = 0; i < NQ; i++) {
#pragma GCC unroll 4
        for (int u = 0; u < AT_KB / AT_VW; u++) AT_STORE(tmp + u * AT_VW, AT_MUL(acc[i][u], sc));
        for (int j = 0; j < AT_KB; j++) S[(size_t)j * nqp + i] = tmp[j];
    }
}

/* kt: Kb holds the block transposed (AT_KT), Kb[d·AT_KB + j], instead of rows; kl: S is
 * written query by query, S[i·AT_KB + j] (the decode softmax below), not S[j·nqp + i] */
static void AT_CAT(AT_NAME, _scores_few)(float *S, const float *Qt, const float *Kb, int nqp, int hdp, int hd, int nq,
                                         float scale, int kt, int kl) {
#define AT_FEW(n)                                                                         \
    (kt ? AT_CAT(AT_NAME, _scores_few_n)(S, Qt, Kb, nqp, hdp, hd, scale, n, 1, kl)       \
        : AT_CAT(AT_NAME, _scores_few_n)(S, Qt, Kb, nqp, hdp, hd, scale, n, 0, kl))
    switch (nq) {
    case 1: AT_FEW(1); break;
    case 2: AT_FEW(2); break;
#if AT_DQ >= 4
    case 3: AT_FEW(3); break;
    case 4: AT_FEW(4); break;
#endif
    }
#undef AT_FEW
}

#ifdef AT_LOADH
/* Decode scores straight from the cache (KT: 0 f16, 1 bf16, 2 f32, 3 int8 codes × their keys' scales sr[u]) with K
 * transposed per block (kv_view_t.k_t): the
 * block's keys u·AT_VW.. (a run inside one cache block) of dim d are AT_VW halves at kr[u] +
 * d·ds, widened in the load (exact) and fed to the FMA chains: the operands and order of
 * _scores_few_n with KT (q[d] × K[j][d] from d = 0, then × scale) — the same bits, without
 * the transpose into Kb and its reload. Sk[i·AT_KB + j] (kl); runs with no key of the block
 * point at another run and are masked by the caller like any key outside [ja, jb]. */
static inline __attribute__((always_inline)) void AT_CAT(AT_NAME, _scores_kth_n)(float *S, const float *Qt,
                                                                                const char *const *kr, const float *const *sr,
                                                                                size_t ds, int nqp, int hd, float scale,
                                                                                const int NQ, const int KT, float *S2,
                                                                                const float *Qt2, size_t kdelta, size_t sdelta,
                                                                                const int NH) {
    /* NH == 2: a second KV head at once (its K runs kdelta bytes and its key scales sdelta floats
     * after the first's; Qt2, S2 its query lanes and scores): each head's chains are exactly the
     * one-head chains, side by side twice the independent FMA chains (one head's NQ·AT_KB/AT_VW
     * chains of hd dependent FMAs are a block's latency floor: the decode walk, _dec_n) */
    AT_V acc[2][4][AT_KB / AT_VW], ksc[2][AT_KB / AT_VW];
    const char *p[AT_KB / AT_VW];
    const float *Qh[2] = {Qt, Qt2};
    float *Sh[2] = {S, S2};
    const size_t step = ds * AT_KV_BYTES(KT);
#pragma GCC unroll 4
    for (int u = 0; u < AT_KB / AT_VW; u++) {
        p[u] = kr[u];
#pragma GCC unroll 2
        for (int h = 0; h < NH; h++)
            if (KT == 3) ksc[h][u] = AT_LOAD(sr[u] + h * sdelta); /* int8: the run's 16 keys' scales, code · scale as _q8_f32 */
    }
#pragma GCC unroll 2
    for (int h = 0; h < NH; h++)
#pragma GCC unroll 4
        for (int i = 0; i < NQ; i++)
#pragma GCC unroll 4
            for (int u = 0; u < AT_KB / AT_VW; u++) acc[h][i][u] = AT_ZERO();
    for (int d = 0; d < hd; d++) {
        AT_V kd[2][AT_KB / AT_VW];
#pragma GCC unroll 4
        for (int u = 0; u < AT_KB / AT_VW; u++) {
#pragma GCC unroll 2
            for (int h = 0; h < NH; h++) {
                kd[h][u] = AT_LOADKV(p[u] + h * kdelta, KT);
                if (KT == 3) kd[h][u] = AT_MUL(kd[h][u], ksc[h][u]);
            }
            p[u] += step;
        }
#pragma GCC unroll 4
        for (int i = 0; i < NQ; i++) {
            AT_V qd[2];
#pragma GCC unroll 2
            for (int h = 0; h < NH; h++) qd[h] = AT_SET1(Qh[h][(size_t)d * nqp + i]);
#pragma GCC unroll 4
            for (int u = 0; u < AT_KB / AT_VW; u++)
#pragma GCC unroll 2
                for (int h = 0; h < NH; h++) acc[h][i][u] = AT_FMA(qd[h], kd[h][u], acc[h][i][u]);
        }
    }
    AT_V sc = AT_SET1(scale);
#pragma GCC unroll 2
    for (int h = 0; h < NH; h++)
#pragma GCC unroll 4
        for (int i = 0; i < NQ; i++)
#pragma GCC unroll 4
            for (int u = 0; u < AT_KB / AT_VW; u++) AT_STORE(Sh[h] + (size_t)i * AT_KB + u * AT_VW, AT_MUL(acc[h][i][u], sc));
}

static void AT_CAT(AT_NAME, _scores_kth)(float *S, const float *Qt, const char *const *kr, const float *const *sr, size_t ds,
                                         int nqp, int hd, int nq, float scale, int kvt) {
#define AT_KTH(n) (kvt == 1   ? AT_CAT(AT_NAME, _scores_kth_n)(S, Qt, kr, sr, ds, nqp, hd, scale, n, 1, NULL, NULL, 0, 0, 1) \
                   : kvt == 2 ? AT_CAT(AT_NAME, _scores_kth_n)(S, Qt, kr, sr, ds, nqp, hd, scale, n, 2, NULL, NULL, 0, 0, 1) \
                   : kvt == 3 ? AT_CAT(AT_NAME, _scores_kth_n)(S, Qt, kr, sr, ds, nqp, hd, scale, n, 3, NULL, NULL, 0, 0, 1) \
                              : AT_CAT(AT_NAME, _scores_kth_n)(S, Qt, kr, sr, ds, nqp, hd, scale, n, 0, NULL, NULL, 0, 0, 1))
    switch (nq) {
    case 1: AT_KTH(1); break;
    case 2: AT_KTH(2); break;
#if AT_DQ >= 4
    case 3: AT_KTH(3); break;
    case 4: AT_KTH(4); break;
#endif
    }
#undef AT_KTH
}
#endif

/* acc (+)= Σ_{j in [ja, jb]} P[j][i] · Vb[j] over NC vectors of head dim from column c0,
 * for query i, or i and i2 (same key range) sharing each V load; j in position order.
 * Always inlined with constant NC and pair so the accumulators stay in registers. */
static inline __attribute__((always_inline)) void AT_CAT(AT_NAME, _pv_nc)(float *acc, const float *P, const float *Vb, int nqp,
                                                                          int hdp, int c0, int i, int i2, int ja, int jb,
                                                                          const int NC, const int pair) {
    AT_V x[AT_CB], y[AT_CB];
    float *ai = acc + (size_t)i * hdp + c0, *bi = acc + (size_t)(pair ? i2 : i) * hdp + c0;
#pragma GCC unroll 16
    for (int c = 0; c < NC; c++) {
        x[c] = AT_LOAD(ai + c * AT_VW);
        if (pair) y[c] = AT_LOAD(bi + c * AT_VW);
    }
    for (int j = ja; j <= jb; j++) {
        AT_V p = AT_SET1(P[(size_t)j * nqp + i]), p2 = AT_SET1(pair ? P[(size_t)j * nqp + i2] : 0.f);
        const float *vj = Vb + (size_t)j * hdp + c0;
#pragma GCC unroll 16
        for (int c = 0; c < NC; c++) {
            AT_V vv = AT_LOAD(vj + c * AT_VW);
            x[c] = AT_FMA(p, vv, x[c]);
            if (pair) y[c] = AT_FMA(p2, vv, y[c]);
        }
    }
#pragma GCC unroll 16
    for (int c = 0; c < NC; c++) {
        AT_STORE(ai + c * AT_VW, x[c]);
        if (pair) AT_STORE(bi + c * AT_VW, y[c]);
    }
}

#ifdef AT_LOADH
/* _pv_nc for decode tiles with f16/bf16/f32/int8 V (KT as in _scores_kth_n; int8 × the row's scale vsc[j]): V[j] read from the cache row
 * itself (vrow[j]), widened in the load, instead of from an f32 copy: each -> f32 is exact, so each
 * FMA sees the same operands in the same order — the same bits as _pv_nc — without the
 * copy's store and reload (a decode step uses each V row once per query pair). */
static inline __attribute__((always_inline)) void AT_CAT(AT_NAME, _pvh_nc)(float *acc, const float *P, const void *const *vrow,
                                                                           int pj, int pi, int hdp, int c0, int i, int i2,
                                                                           int ja, int jb, const int NC, const int pair,
                                                                           const char *const *pf, int pfn, const float *vsc,
                                                                           const int KT) {
    AT_V x[AT_CB], y[AT_CB];
    float *ai = acc + (size_t)i * hdp + c0, *bi = acc + (size_t)(pair ? i2 : i) * hdp + c0;
#pragma GCC unroll 16
    for (int c = 0; c < NC; c++) {
        x[c] = AT_LOAD(ai + c * AT_VW);
        if (pair) y[c] = AT_LOAD(bi + c * AT_VW);
    }
    for (int j = ja; j <= jb; j++) {
        AT_V p = AT_SET1(P[(size_t)j * pj + (size_t)i * pi]), p2 = AT_SET1(pair ? P[(size_t)j * pj + (size_t)i2 * pi] : 0.f);
        const char *vj = (const char *)vrow[j] + (size_t)c0 * AT_KV_BYTES(KT);
        if (pf && pf[j])
            for (int o = 0; o < pfn; o += 64) {
                __builtin_prefetch(pf[j] + o, 0, AT_PF);
                __builtin_prefetch(pf[AT_KB + j] + o, 0, AT_PF);
            }
        AT_V vs = AT_SET1(KT == 3 ? vsc[j] : 1.f); /* int8: the row's scale, code · scale as _q8_f32 */
#pragma GCC unroll 16
        for (int c = 0; c < NC; c++) {
            AT_V vv = AT_LOADKV(vj + (size_t)c * AT_VW * AT_KV_BYTES(KT), KT);
            if (KT == 3) vv = AT_MUL(vv, vs);
            x[c] = AT_FMA(p, vv, x[c]);
            if (pair) y[c] = AT_FMA(p2, vv, y[c]);
        }
    }
#pragma GCC unroll 16
    for (int c = 0; c < NC; c++) {
        AT_STORE(ai + c * AT_VW, x[c]);
        if (pair) AT_STORE(bi + c * AT_VW, y[c]);
    }
}

/* _pv with V rows read from the cache (kvt: 0 f16, 1 bf16, 2 f32; hd == hdp, a multiple of AT_VW); P[j·pj + i·pi]. pf (or NULL): with
 * key j, prefetch pfn bytes of the K row pf[j] and the V row pf[AT_KB + j] (null: none) —
 * the next block's rows, asked for one at a time between the FMAs instead of all at once
 * (a burst of 512 prefetches stalls on the fill buffers) */
static inline __attribute__((always_inline)) void AT_CAT(AT_NAME, _pvh_kt)(float *acc, const float *P, const void *const *vrow, int pj, int pi, int hdp, int i, int i2,
                                  int ja, int jb, const char *const *pf, int pfn, const float *vsc,
                                                                           const int KT) {
    int c0 = 0;
    if (i2 >= 0) {
        for (; c0 + AT_CB * AT_VW <= hdp; c0 += AT_CB * AT_VW) AT_CAT(AT_NAME, _pvh_nc)(acc, P, vrow, pj, pi, hdp, c0, i, i2, ja, jb, AT_CB, 1, c0 ? NULL : pf, pfn, vsc, KT);
        for (; c0 + 4 * AT_VW <= hdp; c0 += 4 * AT_VW) AT_CAT(AT_NAME, _pvh_nc)(acc, P, vrow, pj, pi, hdp, c0, i, i2, ja, jb, 4, 1, c0 ? NULL : pf, pfn, vsc, KT);
        for (; c0 < hdp; c0 += AT_VW) AT_CAT(AT_NAME, _pvh_nc)(acc, P, vrow, pj, pi, hdp, c0, i, i2, ja, jb, 1, 1, c0 ? NULL : pf, pfn, vsc, KT);
    } else {
        for (; c0 + AT_CB * AT_VW <= hdp; c0 += AT_CB * AT_VW) AT_CAT(AT_NAME, _pvh_nc)(acc, P, vrow, pj, pi, hdp, c0, i, i, ja, jb, AT_CB, 0, c0 ? NULL : pf, pfn, vsc, KT);
        for (; c0 + 4 * AT_VW <= hdp; c0 += 4 * AT_VW) AT_CAT(AT_NAME, _pvh_nc)(acc, P, vrow, pj, pi, hdp, c0, i, i, ja, jb, 4, 0, c0 ? NULL : pf, pfn, vsc, KT);
        for (; c0 < hdp; c0 += AT_VW) AT_CAT(AT_NAME, _pvh_nc)(acc, P, vrow, pj, pi, hdp, c0, i, i, ja, jb, 1, 0, c0 ? NULL : pf, pfn, vsc, KT);
    }
}

static void AT_CAT(AT_NAME, _pvh)(float *acc, const float *P, const void *const *vrow, int pj, int pi, int hdp, int i, int i2,
                                  int ja, int jb, const char *const *pf, int pfn, const float *vsc, int kvt) {
    if (kvt == 1) AT_CAT(AT_NAME, _pvh_kt)(acc, P, vrow, pj, pi, hdp, i, i2, ja, jb, pf, pfn, vsc, 1);
    else if (kvt == 2) AT_CAT(AT_NAME, _pvh_kt)(acc, P, vrow, pj, pi, hdp, i, i2, ja, jb, pf, pfn, vsc, 2);
    else if (kvt == 3) AT_CAT(AT_NAME, _pvh_kt)(acc, P, vrow, pj, pi, hdp, i, i2, ja, jb, pf, pfn, vsc, 3);
    else AT_CAT(AT_NAME, _pvh_kt)(acc, P, vrow, pj, pi, hdp, i, i2, ja, jb, pf, pfn, vsc, 0);
}
#endif

/* The same over the whole (padded) head dim: AT_CB vectors at a time, then 4, then 1 (each
 * element's chain is the same whatever the grouping). */
static void AT_CAT(AT_NAME, _pv)(float *acc, const float *P, const float *Vb, int nqp, int hdp, int i, int i2, int ja, int jb) {
    int c0 = 0;
    if (i2 >= 0) {
        for (; c0 + AT_CB * AT_VW <= hdp; c0 += AT_CB * AT_VW) AT_CAT(AT_NAME, _pv_nc)(acc, P, Vb, nqp, hdp, c0, i, i2, ja, jb, AT_CB, 1);
        for (; c0 + 4 * AT_VW <= hdp; c0 += 4 * AT_VW) AT_CAT(AT_NAME, _pv_nc)(acc, P, Vb, nqp, hdp, c0, i, i2, ja, jb, 4, 1);
        for (; c0 < hdp; c0 += AT_VW) AT_CAT(AT_NAME, _pv_nc)(acc, P, Vb, nqp, hdp, c0, i, i2, ja, jb, 1, 1);
    } else {
        for (; c0 + AT_CB * AT_VW <= hdp; c0 += AT_CB * AT_VW) AT_CAT(AT_NAME, _pv_nc)(acc, P, Vb, nqp, hdp, c0, i, i, ja, jb, AT_CB, 0);
        for (; c0 + 4 * AT_VW <= hdp; c0 += 4 * AT_VW) AT_CAT(AT_NAME, _pv_nc)(acc, P, Vb, nqp, hdp, c0, i, i, ja, jb, 4, 0);
        for (; c0 < hdp; c0 += AT_VW) AT_CAT(AT_NAME, _pv_nc)(acc, P, Vb, nqp, hdp, c0, i, i, ja, jb, 1, 0);
    }
}

#ifdef AT_LOADH
/* A decode tile's block (nq <= AT_DQ, so one lane vector: nqp == AT_VW): scores with each
 * query's keys in lanes, Sk[i·AT_KB + j], and the online-softmax update of m, l and corr
 * from them — the same values, bit for bit, as the query-lane loop in _heads, with 2 exps
 * per query instead of AT_KB per lane vector. Per query i with keys [qa, qb] in this block:
 * masked keys are −inf; mb = max of the rest (a max is exact in any order, and ±0 ties
 * only change the sign of a zero that e^(x−m) does not see); mn = mo > mb ? mo : mb, as
 * vmaxps(mo, mb); p_j = e^(s_j − mn) lane-wise by the same polynomial; and the row sum
 * is added in key order from +0 over [qa, qb] (the query-lane loop also adds the masked
 * keys' exact +0s, which change nothing). corr and l: the same vector code on mn, lb. */
/* lbv[i] = Σ_{j < AT_KB} Sk[i·AT_KB + j], j in order from +0, for i < NQ (a constant) */
/* Each query's chain in a scalar register of its own (addss: the same IEEE add as `s += x`):
 * written as plain C, GCC's SLP vectorizer packed the queries' sums into one 2-float vector it
 * kept in a general register, so every add of the 32-long chain also paid a vmovq there and back
 * (~3× the add's latency; ~10 % of a decode tile's cycles at 4096 positions). */
static inline __attribute__((always_inline)) void AT_CAT(AT_NAME, _rowsums)(float *lbv, const float *Sk, const int NQ) {
    __m128 s[4] = {_mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps()};
    for (int j = 0; j < AT_KB; j++)
#pragma GCC unroll 4
        for (int i = 0; i < NQ; i++) s[i] = _mm_add_ss(s[i], _mm_load_ss(Sk + (size_t)i * AT_KB + j));
#pragma GCC unroll 4
    for (int i = 0; i < NQ; i++) lbv[i] = _mm_cvtss_f32(s[i]);
}

/* The online-softmax state of a decode tile's query lanes after a block: with mn the new maxima
 * (mnv) and lb the block's row sums (lbv), for the lanes act marks (the queries with keys in the
 * block): c = e^(m − mn) (0 where m was −inf: nothing to rescale), l = l·c + lb, m = mn; corr = c
 * (1 for the other lanes, whose l stays). */
static inline __attribute__((always_inline)) void AT_CAT(AT_NAME, _state_step)(float *m, float *l, float *corr, const float *mnv,
                                                                              const float *lbv, AT_M act) {
    AT_V mo = AT_LOAD(m), mn = AT_LOAD(mnv);
    AT_V c = AT_SEL(AT_FEQ(mo, AT_SET1(-INFINITY)), AT_ZERO(), AT_CAT(AT_NAME, _exp)(AT_SUB(mo, mn)));
    c = AT_SEL(act, c, AT_SET1(1.0f));
    AT_V l0 = AT_LOAD(l);
    AT_STORE(l, AT_SEL(act, AT_ADD(AT_MUL(l0, c), AT_LOAD(lbv)), l0));
    AT_STORE(m, mn);
    AT_STORE(corr, c);
}

static void AT_CAT(AT_NAME, _decode_softmax)(float *Sk, const float *Qt, const float *Kb, float *m, float *l, float *corr,
                                             const int32_t *lo, const int32_t *hi, int nq, int nqp, int hdp, int hd, int b0,
                                             int ja, int jb, float scale, int kt, int scored) {
    float mnv[AT_VW] __attribute__((aligned(64))), lbv[AT_VW] __attribute__((aligned(64)));
    int qa_[AT_DQ], qb_[AT_DQ];
    AT_V ninf = AT_SET1(-INFINITY);
    if (!scored) /* (scored: Sk holds the scores already, AT_KS: the same bits) */
        AT_CAT(AT_NAME, _scores_few)(Sk, Qt, Kb, nqp, hdp, hd, nq, scale, kt, 1);
    AT_STORE(mnv, AT_LOAD(m));
    AT_STORE(lbv, AT_ZERO());
    for (int i = 0; i < nq; i++) {
        int qa = lo[i] - b0 > ja ? lo[i] - b0 : ja, qb = hi[i] - b0 < jb ? hi[i] - b0 : jb;
        qa_[i] = qa;
        qb_[i] = qb;
        if (qa > qb) continue;
        AT_V mx = ninf;
        for (int u = 0; u < AT_KB / AT_VW; u++) {
            AT_VI jv = AT_ADD_I(AT_IOTA(), AT_SET1I(u * AT_VW));
            AT_M ok = AT_MAND(AT_ILE(AT_SET1I(qa), jv), AT_ILE(jv, AT_SET1I(qb)));
            float *sk = Sk + (size_t)i * AT_KB + u * AT_VW;
            AT_V sv = AT_SEL(ok, AT_LOAD(sk), ninf);
            AT_STORE(sk, sv);
            mx = AT_MAX(mx, sv);
        }
        float mb = AT_HMAX(mx), mo = m[i];
        mnv[i] = mo > mb ? mo : mb;
    }
    for (int i = 0; i < nq; i++) {
        if (qa_[i] > qb_[i]) continue;
        AT_V mn = AT_SET1(mnv[i]);
        float *sk = Sk + (size_t)i * AT_KB;
        for (int u = 0; u < AT_KB / AT_VW; u++) {
            AT_V sv = AT_LOAD(sk + u * AT_VW);
            AT_STORE(sk + u * AT_VW, AT_SEL(AT_FEQ(sv, ninf), AT_ZERO(), AT_CAT(AT_NAME, _exp)(AT_SUB(sv, mn))));
        }
    }
    /* the row sums: each query's keys in order from +0, the chains of all queries side by
     * side (one serial chain of 32 dependent adds per query was 5% of a decode tile). Over
     * the whole block: the keys outside [qa, qb] hold exact +0s, and adding +0 to a sum
     * that starts at +0 and only ever adds values >= +0 changes no bit. Queries with no
     * key here are summed too (their Sk rows hold scores) and not used. */
    switch (nq) {
    case 1: AT_CAT(AT_NAME, _rowsums)(lbv, Sk, 1); break;
    case 2: AT_CAT(AT_NAME, _rowsums)(lbv, Sk, 2); break;
#if AT_DQ >= 4
    case 3: AT_CAT(AT_NAME, _rowsums)(lbv, Sk, 3); break;
    case 4: AT_CAT(AT_NAME, _rowsums)(lbv, Sk, 4); break;
#endif
    }
    for (int i = 0; i < nq; i++)
        if (qa_[i] > qb_[i]) lbv[i] = 0.f;
    AT_VI vlo = AT_LOADI(lo), vhi = AT_LOADI(hi);
    AT_CAT(AT_NAME, _state_step)(m, l, corr, mnv, lbv, AT_MAND(AT_ILE(vlo, AT_SET1I(b0 + jb)), AT_ILE(AT_SET1I(b0 + ja), vhi)));
}
#endif

#ifdef AT_LOADH
/* The decode walk (one token, nq = group <= 8 queries, K transposed per block, no soft-cap,
 * one segment): what _heads does for such a tile — the same operations on the same operands
 * in the same order, so the same bits (test_kernels, test_ragged: decode against the whole
 * step and against running alone) — without its general machinery. _heads rebuilt, for every
 * (block, head), 64 prefetch pointers through branches and multiplies, 32 row pointers, the
 * runs' pointers, per-query key ranges and the Qt lanes of a 16-query tile: ~15 % of a warm
 * decode tile (perf, qwen3-0.6b shape at 576 positions). Here a block's cache-block lookups
 * and offsets are made once for all the item's heads, each head adding its own constant
 * offset (a vector add), and every query of the token shares one key range. */
static inline __attribute__((always_inline)) void AT_CAT(AT_NAME, _dec_n)(float *out, const float *q, const attn_args_t *a, int r,
                                                                         int t0, int h0, int h1, float *scratch, const int NQ,
                                                                         const int KT, const int PAIR) {
    const kv_view_t *kv = &a->kv;
    const int32_t *bt = a->block_tables[r];
    const int hd = a->head_dim, bs = kv->block_size, nkv = kv->n_kv_heads;
    const size_t esz = AT_KV_BYTES(KT), per_tok = (size_t)nkv * hd, ktbs = (size_t)bs * per_tok;
    const int p = a->pos[t0], klo = a->window > 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0, khi = p;
    /* scratch: Sk [8][AT_KB] (up to 8 queries' scores, or a pair of heads' AT_DQ each); per head Qt [hd][NQ], m [AT_VW], l [AT_VW], acc [NQ][hd] */
    float *Sk0 = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63), *heads = Sk0 + 8 * AT_KB;
    const size_t ph = (size_t)hd * NQ + 2 * AT_VW + (size_t)NQ * hd;
    int32_t lo[AT_VW] __attribute__((aligned(64))), hi[AT_VW] __attribute__((aligned(64)));
    float mnv[AT_VW] __attribute__((aligned(64))), lbv[AT_VW] __attribute__((aligned(64))), corr[AT_VW] __attribute__((aligned(64)));
    for (int i = 0; i < AT_VW; i++) lo[i] = i < NQ ? klo : INT32_MAX, hi[i] = i < NQ ? khi : -1;
    for (int kvh = h0; kvh < h1; kvh++) {
        float *Qt = heads + (size_t)(kvh - h0) * ph, *m = Qt + (size_t)hd * NQ, *l = m + AT_VW, *acc = l + AT_VW;
        for (int i = 0; i < NQ; i++) {
            const float *qi = q + ((size_t)t0 * a->n_heads + (size_t)kvh * NQ + i) * hd;
            for (int d = 0; d < hd; d++) Qt[(size_t)d * NQ + i] = qi[d];
        }
        AT_STORE(m, AT_SET1(-INFINITY));
        AT_STORE(l, AT_ZERO());
        memset(acc, 0, sizeof(float) * (size_t)NQ * hd);
    }
    const AT_V ninf = AT_SET1(-INFINITY);
    const AT_VI vlo = AT_LOADI(lo), vhi = AT_LOADI(hi);
    /* head 0's addresses for this block: the runs of AT_VW keys (each inside one cache block:
     * bs % AT_VW == 0) from their first key in [ja, jb] (runs with none read the first run that
     * has one, as _heads; their scores are masked); V rows of [ja, jb]; the next block's K pieces
     * and V rows to prefetch (positions past khi: khi's) */
    const char *kr0[AT_KB / AT_VW], *vr0[AT_KB], *pfk0[AT_KB], *pfv0[AT_KB];
    const float *sr0[AT_KB / AT_VW] = {0}, *vs0[AT_KB] = {0};
    for (int b0 = klo / AT_KB * AT_KB; b0 <= khi; b0 += AT_KB) {
        int ja = klo > b0 ? klo - b0 : 0, jb = khi < b0 + AT_KB - 1 ? khi - b0 : AT_KB - 1, uf = -1;
        for (int u = 0; u < AT_KB / AT_VW; u++) {
            int j0 = u * AT_VW, j = j0 > ja ? j0 : ja;
            if (j > jb || j0 + AT_VW - 1 < ja) continue;
            int pj = b0 + j, blk = bt[pj / bs], off = pj % bs - (j - j0); /* the run's first slot in its cache block */
            kr0[u] = (const char *)kv->k + ((size_t)blk * ktbs + (size_t)off) * esz;
            if (KT == 3) sr0[u] = kv->ks + (size_t)blk * nkv * bs + off;
            for (int jj = j; jj <= jb && jj < j0 + AT_VW; jj++) {
                vr0[jj] = (const char *)kv->v + ((size_t)blk * bs + off + (jj - j0)) * per_tok * esz;
                if (KT == 3) vs0[jj] = kv->vs + (size_t)blk * nkv * bs + off + (jj - j0);
            }
            if (uf < 0) uf = u;
        }
        for (int u = 0; u < AT_KB / AT_VW; u++) {
            int j0 = u * AT_VW, j = j0 > ja ? j0 : ja;
            if (j > jb || j0 + AT_VW - 1 < ja) kr0[u] = kr0[uf], sr0[u] = sr0[uf];
        }
        int pfon = b0 + AT_KB <= khi;
        if (pfon)
            for (int j = 0, pj = b0 + AT_KB; j < AT_KB; j++, pj++) {
                int pc = pj <= khi ? pj : khi, blk = bt[pc / bs], off = pc % bs;
                pfk0[j] = (const char *)kv->k + ((size_t)blk * ktbs + (size_t)off * hd) * esz; /* an hd-element share of the head's block */
                pfv0[j] = (const char *)kv->v + ((size_t)blk * bs + off) * per_tok * esz;
            }
        /* the block's key mask (every query has the same keys) */
        AT_M ok[AT_KB / AT_VW];
        for (int u = 0; u < AT_KB / AT_VW; u++) {
            AT_VI jv = AT_ADD_I(AT_IOTA(), AT_SET1I(u * AT_VW));
            ok[u] = AT_MAND(AT_ILE(AT_SET1I(ja), jv), AT_ILE(jv, AT_SET1I(jb)));
        }
        AT_M act = AT_MAND(AT_ILE(vlo, AT_SET1I(b0 + jb)), AT_ILE(AT_SET1I(b0 + ja), vhi));
        for (int kvh = h0; kvh < h1; kvh++) {
            float *Qt = heads + (size_t)(kvh - h0) * ph, *m = Qt + (size_t)hd * NQ, *l = m + AT_VW, *acc = l + AT_VW;
            const size_t koff = (size_t)kvh * hd * bs * esz, voff = (size_t)kvh * hd * esz;
            const char *kr[AT_KB / AT_VW], *vrow[AT_KB], *pf[2 * AT_KB];
            const float *sr[AT_KB / AT_VW];
            float vsc[AT_KB];
            for (int u = 0; u < AT_KB / AT_VW; u++) {
                kr[u] = kr0[u] + koff;
                sr[u] = KT == 3 ? sr0[u] + (size_t)kvh * bs : NULL;
            }
            for (int j = ja; j <= jb; j++) {
                vrow[j] = vr0[j] + voff;
                if (KT == 3) vsc[j] = vs0[j][(size_t)kvh * bs];
            }
            if (pfon)
                for (int j = 0; j < AT_KB; j++) pf[j] = pfk0[j] + koff, pf[AT_KB + j] = pfv0[j] + voff;
            /* then _decode_softmax's steps for queries that all have keys [ja, jb] */
            /* scores; with PAIR two heads' together, the first of the pair scoring both */
            float *Sk = Sk0 + (PAIR && (kvh - h0) % 2 ? AT_DQ * AT_KB : 0);
            if (PAIR && (kvh - h0) % 2 == 0 && kvh + 1 < h1)
                AT_CAT(AT_NAME, _scores_kth_n)(Sk, Qt, kr, sr, (size_t)bs, NQ, hd, a->scale, NQ, KT, Sk + AT_DQ * AT_KB, Qt + ph,
                                               (size_t)hd * bs * esz, (size_t)bs, 2);
            else if (!PAIR || (kvh - h0) % 2 == 0) {
                /* more queries than a decode tile's registers hold (a GQA group past AT_DQ): passes of AT_DQ
                 * queries over the block's K runs — each query's chains unchanged */
#pragma GCC unroll 4
                for (int q0 = 0; q0 < NQ; q0 += AT_DQ)
                    AT_CAT(AT_NAME, _scores_kth_n)(Sk + (size_t)q0 * AT_KB, Qt + q0, kr, sr, (size_t)bs, NQ, hd, a->scale,
                                                   NQ - q0 < AT_DQ ? NQ - q0 : AT_DQ, KT, NULL, NULL, 0, 0, 1);
            }
            AT_STORE(mnv, AT_LOAD(m));
            AT_STORE(lbv, AT_ZERO());
#pragma GCC unroll 4
            for (int i = 0; i < NQ; i++) {
                AT_V mx = ninf;
                for (int u = 0; u < AT_KB / AT_VW; u++) {
                    float *sk = Sk + (size_t)i * AT_KB + u * AT_VW;
                    AT_V sv = AT_SEL(ok[u], AT_LOAD(sk), ninf);
                    AT_STORE(sk, sv);
                    mx = AT_MAX(mx, sv);
                }
                float mb = AT_HMAX(mx), mo = m[i];
                mnv[i] = mo > mb ? mo : mb;
            }
#pragma GCC unroll 4
            for (int i = 0; i < NQ; i++) {
                AT_V mn = AT_SET1(mnv[i]);
                float *sk = Sk + (size_t)i * AT_KB;
                for (int u = 0; u < AT_KB / AT_VW; u++) {
                    AT_V sv = AT_LOAD(sk + u * AT_VW);
                    AT_STORE(sk + u * AT_VW, AT_SEL(AT_FEQ(sv, ninf), AT_ZERO(), AT_CAT(AT_NAME, _exp)(AT_SUB(sv, mn))));
                }
            }
#pragma GCC unroll 4
            for (int q0 = 0; q0 < NQ; q0 += AT_DQ) /* (the same passes: _rowsums holds up to AT_DQ chains) */
                AT_CAT(AT_NAME, _rowsums)(lbv + q0, Sk + (size_t)q0 * AT_KB, NQ - q0 < AT_DQ ? NQ - q0 : AT_DQ);
            AT_CAT(AT_NAME, _state_step)(m, l, corr, mnv, lbv, act);
            /* V: the token's queries in pairs (_heads' pv) */
#pragma GCC unroll 4
            for (int i = 0; i < NQ; i += 2) {
                int i2 = i + 1 < NQ ? i + 1 : -1;
                float c1 = corr[i], c2 = i2 >= 0 ? corr[i2] : 1.0f;
                if (c1 != 1.0f)
                    for (int d = 0; d < hd; d += AT_VW) AT_STORE(acc + (size_t)i * hd + d, AT_MUL(AT_LOAD(acc + (size_t)i * hd + d), AT_SET1(c1)));
                if (i2 >= 0 && c2 != 1.0f)
                    for (int d = 0; d < hd; d += AT_VW) AT_STORE(acc + (size_t)i2 * hd + d, AT_MUL(AT_LOAD(acc + (size_t)i2 * hd + d), AT_SET1(c2)));
                AT_CAT(AT_NAME, _pvh_kt)(acc, Sk, (const void *const *)vrow, 1, AT_KB, hd, i, i2, ja, jb, i == 0 && pfon ? pf : NULL,
                                         hd * (int)esz, vsc, KT);
            }
        }
    }
    /* the one segment folded into a fresh state and emitted, as _heads' AT_CLOSE_SEG and _emit */
    for (int kvh = h0; kvh < h1; kvh++) {
        float *Qt = heads + (size_t)(kvh - h0) * ph, *m = Qt + (size_t)hd * NQ, *l = m + AT_VW, *acc = l + AT_VW;
        for (int i = 0; i < NQ; i++) {
            float M = -INFINITY, L = 0.f, ACC[hd] __attribute__((aligned(64)));
            memset(ACC, 0, sizeof(float) * (size_t)hd);
            AT_CAT(AT_NAME, _fold)(&M, &L, ACC, m[i], l[i], acc + (size_t)i * hd, hd);
            AT_CAT(AT_NAME, _emit)(out + ((size_t)t0 * a->n_heads + (size_t)kvh * NQ + i) * hd, ACC, L, hd);
        }
    }
}

static int dec_on = -1; /* KILN_ATTN_DEC=0: decode tiles through _heads' general walk (A/B) */

/* _dec_n for the tiles it serves (1: done; 0: _heads runs it) */
static int AT_CAT(AT_NAME, _dec)(float *out, const float *q, const attn_args_t *a, int r, int t0, int t1, int h0, int h1,
                                 float *scratch) {
    if (dec_on < 0) {
        const char *e = getenv("KILN_ATTN_DEC");
        dec_on = e && *e ? atoi(e) : 2;
    }
    const kv_view_t *kv = &a->kv;
    int nq = a->n_heads / a->n_kv_heads, seg = attn_seg(), p = a->pos[t0];
    int klo = a->window > 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0;
    if (!dec_on || t1 - t0 != 1 || nq > 8 || a->softcap > 0 || !kv->k_t || kv->block_size % AT_VW || a->head_dim % 16 ||
        (seg && klo / seg != p / seg))
        return 0;
    int kt = kv->dtype == DT_F16 ? 0 : kv->dtype == DT_BF16 ? 1 : kv->dtype == DT_F32 ? 2 : kv->dtype == DT_I8 ? 3 : -1;
    if (kt < 0) return 0;
    const int pair = dec_on == 2;
#define AT_DEC(n) (pair ? AT_DEC_P(n, AT_DEC_PAIR) : AT_DEC_P(n, 0))
#define AT_DEC_P(n, AT_DEC_PAIR)                                                                       \
    (kt == 0   ? AT_CAT(AT_NAME, _dec_n)(out, q, a, r, t0, h0, h1, scratch, n, 0, AT_DEC_PAIR)        \
     : kt == 1 ? AT_CAT(AT_NAME, _dec_n)(out, q, a, r, t0, h0, h1, scratch, n, 1, AT_DEC_PAIR)        \
     : kt == 2 ? AT_CAT(AT_NAME, _dec_n)(out, q, a, r, t0, h0, h1, scratch, n, 2, AT_DEC_PAIR)        \
               : AT_CAT(AT_NAME, _dec_n)(out, q, a, r, t0, h0, h1, scratch, n, 3, AT_DEC_PAIR))
    switch (nq) {
    case 1: AT_DEC(1); break;
    case 2: AT_DEC(2); break;
    case 3: AT_DEC(3); break;
    case 4: AT_DEC(4); break;
    case 5: AT_DEC_P(5, 0); break; /* (groups past AT_DQ: no head pairs, the registers hold one head's chains) */
    case 6: AT_DEC_P(6, 0); break;
    case 7: AT_DEC_P(7, 0); break;
    case 8: AT_DEC_P(8, 0); break;
    }
#undef AT_DEC
#undef AT_DEC_P
    return 1;
}
#endif

/* Queries of tokens [t0, t1) (one row, r) and KV heads [h0, h1): out[t, kvh·group + g].
 * The heads are walked together, block by block (for each block of keys, each head in
 * turn), each with its own Qt/acc/m/l: a head's operations and their order are exactly
 * those of a one-head call, so grouping never changes a bit. What it changes is the
 * memory order: a decode step reads one block's rows of all the group's heads together
 * (n_kv_heads·hd contiguous elements per position) instead of one head's 256-byte rows
 * a whole position apart, which the hardware prefetchers could not follow. */
static void AT_CAT(AT_NAME, _heads)(float *out, const float *q, const attn_args_t *a, int r, int t0, int t1, int h0, int h1,
                                    int s0, int s1, float *part, float *scratch) {
    const kv_view_t *kv = &a->kv;
    const int32_t *bt = a->block_tables[r];
    int hd = a->head_dim, group = a->n_heads / a->n_kv_heads, bs = kv->block_size;
    int nq = (t1 - t0) * group;
#ifdef AT_LOADH
    if (!part && AT_CAT(AT_NAME, _dec)(out, q, a, r, t0, t1, h0, h1, scratch)) return;
#endif
    attn_tile_dims_t D;
    attn_tile_dims(a, t1 - t0, &D);
    int nqp = D.nqp, hdp = D.hdp;
    /* every section is a multiple of 16 floats: aligned to 64 bytes from an aligned base
     * (a zmm load that straddles two cache lines costs two). Shared by the heads: Kb, Vb,
     * S, corr, lo, hi; per head: Qt, acc, m, l (attn_tile_floats) */
    float *Kb = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63), *Vb = Kb + (size_t)AT_KB * hdp, *S = Vb + (size_t)AT_KB * hdp;
    float *corr = S + (size_t)AT_KB * nqp;
    int32_t *lo = (int32_t *)(corr + nqp), *hi = lo + nqp;
    float *heads = (float *)(hi + nqp);
    size_t per_head = (size_t)hd * nqp + 2 * ((size_t)nq * hdp + 2 * (size_t)nqp);
#define AT_HQT(h) (heads + (size_t)((h) - h0) * per_head)
#define AT_HACC0(h) (AT_HQT(h) + (size_t)hd * nqp)
#define AT_HM0(h) (AT_HACC0(h) + (size_t)nq * hdp)
#define AT_HL0(h) (AT_HM0(h) + nqp)
/* the current segment's state: in the scratch, or with part in the segment's record there
 * (m[nqp], l[nqp], acc[nq][hdp]) */
#define AT_PREC(h) (part + ((size_t)(h) * nseg + (size_t)(cs - kseg0)) * rec)
#define AT_HM(h) (part ? AT_PREC(h) : AT_HM0(h))
#define AT_HL(h) (AT_HM(h) + nqp)
#define AT_HACC(h) (part ? AT_PREC(h) + 2 * (size_t)nqp : AT_HACC0(h))
/* the folded segments' state (_fold) */
#define AT_HACCF(h) (AT_HL0(h) + nqp)
#define AT_HMF(h) (AT_HACCF(h) + (size_t)nq * hdp)
#define AT_HLF(h) (AT_HMF(h) + nqp)
    size_t per_tok = (size_t)kv->n_kv_heads * hd, esz = dtype_size(kv->dtype);
    /* an int8 cache (`--kv-dtype q8`): codes × the row's scale (kv_view_t.ks/vs) wherever a path
     * widens an element — the same f32 values on every path, so the same bits as for any dtype */
    const int q8 = kv->dtype == DT_I8;
    /* decode-sized tiles whose family can transpose K blocks (AT_KT; int8 K only from the
     * transposed cache, below): Kb holds Kᵀ */
#ifdef AT_KT
    int kt = nq <= AT_DQ && hd % AT_VW == 0 && !(q8 && !kv->k_t);
#else
    const int kt = 0;
#endif
    /* ... and P·V reads V from the cache rows (_pvh): vh; kvt: the cache dtype, widened in the
     * load (f16 by vcvtph2ps, bf16 by a 16-bit shift, f32 as is; once only f16 did, and bf16/f32
     * copied each block to f32 scratch first: 2-3x f16's decode attention, bench/cpu/RESULTS.md,
     * session 14) */
#ifdef AT_LOADH
    int vh = kt && (kv->dtype == DT_F16 || kv->dtype == DT_BF16 || kv->dtype == DT_F32 || q8);
    int kvt = kv->dtype == DT_BF16 ? 1 : kv->dtype == DT_F32 ? 2 : q8 ? 3 : 0;
#else
    const int vh = 0;
#endif
    /* ... and without soft-capping, the decode softmax keeps each query's keys in lanes
     * (dk): Sk[i·AT_KB + j] */
#ifdef AT_LOADH
    int dk = vh && !(a->softcap > 0);
    float Sk[2 * AT_DQ * AT_KB] __attribute__((aligned(64))); /* (AT_KS: two heads') */
#else
    const int dk = 0;
#endif
    /* ... and the family scores those blocks from the f16 K rows themselves (AT_KS): no Kᵀ;
     * ks == 2: a pair of KV heads at a time (the first of the pair scores both) */
#ifdef AT_KS
    int ks = dk && !kv->k_t ? AT_KS_OK(kv->dtype, hd) : 0;
#else
    const int ks = 0;
    (void)ks;
#endif

    /* K transposed per block in the cache (kv_view_t.k_t): Kb is filled transposed too,
     * Kb[d·AT_KB + j], run by run of a block's positions (the scores read it as such: the same
     * values); decode tiles with f16 K (kd) score from the cache runs themselves */
    int ktl = kv->k_t;
#ifdef AT_LOADH
    int kd = ktl && dk && bs % AT_VW == 0;
#else
    const int kd = 0;
    (void)kd;
#endif
    size_t ktbs = (size_t)bs * per_tok; /* a transposed block's K elements */

    /* lanes: the queries' ranges; padding lanes get an empty range */
    int klo = INT32_MAX, khi = -1;
    for (int i = 0; i < nqp; i++) {
        if (i < nq) {
            int p = a->pos[t0 + i / group];
            lo[i] = a->window > 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0;
            hi[i] = p;
            if (lo[i] < klo) klo = lo[i];
            if (hi[i] > khi) khi = hi[i];
        } else {
            lo[i] = INT32_MAX;
            hi[i] = -1;
        }
    }
    for (int kvh = h0; kvh < h1; kvh++) {
        float *Qt = AT_HQT(kvh);
        for (int i = 0; i < nqp; i++) {
            if (i >= nq) { /* (the few-query scores read lanes < nq only) */
                if (nq > AT_DQ)
                    for (int d = 0; d < hd; d++) Qt[(size_t)d * nqp + i] = 0.f;
                continue;
            }
            const float *qi = q + ((size_t)(t0 + i / group) * a->n_heads + (size_t)kvh * group + i % group) * hd;
            for (int d = 0; d < hd; d++) Qt[(size_t)d * nqp + i] = qi[d];
        }
        if (part) continue;
        memset(AT_HACCF(kvh), 0, sizeof(float) * (size_t)nq * hdp);
        for (int i = 0; i < nqp; i++) AT_HMF(kvh)[i] = -INFINITY, AT_HLF(kvh)[i] = 0.f;
    }
    memset(Kb, 0, sizeof(float) * (size_t)AT_KB * hdp); /* _scores_few reads whole blocks */
    /* the padding columns of the converted rows stay zero: the V sums run over hdp */
    for (int j = 0; j < AT_KB; j++) {
        for (int d = hd; d < hdp; d++) Kb[(size_t)j * hdp + d] = Vb[(size_t)j * hdp + d] = 0.f;
    }

    /* the cache offsets (elements, head 0) of this block's positions [0, AT_KB) and the
     * next block's [AT_KB, 2·AT_KB), -1 past khi: one division per position per block,
     * not per position and head */
    size_t poff[2 * AT_KB];
    /* ktl: the element offset of position j's transposed block (kpo) and its slot there (kbo) */
    size_t kpo[2 * AT_KB];
    int kbo[2 * AT_KB];
    /* q8: position j's scale index for KV head 0 (kv_s_at without its division: + kvh·bs for head kvh) */
    size_t psc[2 * AT_KB];
    /* part: only segments [s0, s1) of the row's keys, each segment's state written to part
     * (record (kvh, segment − klo/seg) of 2·nqp + nq·hdp floats: m[nqp], l[nqp], acc[nq][hdp]) */
    int seg = attn_seg(), kseg0 = seg ? klo / seg : 0, nseg = (seg ? khi / seg : 0) - kseg0 + 1, cs = -1;
    size_t rec = 2 * (size_t)nqp + (size_t)nq * hdp;
    int kfirst = klo, klast = khi;
    if (part) {
        if (s0 * seg > kfirst) kfirst = s0 * seg;
        if (s1 * seg - 1 < klast) klast = s1 * seg - 1;
    }
    /* the end of a segment: its state folded (split: left in its record) */
#define AT_CLOSE_SEG()                                                                                         \
    if (!part)                                                                                                 \
        for (int kvh = h0; kvh < h1; kvh++)                                                                    \
            for (int i = 0; i < nq; i++)                                                                       \
                AT_CAT(AT_NAME, _fold)(AT_HMF(kvh) + i, AT_HLF(kvh) + i, AT_HACCF(kvh) + (size_t)i * hdp, AT_HM(kvh)[i], \
                                       AT_HL(kvh)[i], AT_HACC(kvh) + (size_t)i * hdp, hdp);
    for (int b0 = kfirst / AT_KB * AT_KB; b0 <= klast; b0 += AT_KB) {
        if ((seg ? b0 / seg : 0) != cs) { /* a segment starts: a fresh state */
            if (cs >= 0) AT_CLOSE_SEG();
            cs = seg ? b0 / seg : 0;
            for (int kvh = h0; kvh < h1; kvh++) {
                float *m_ = AT_HM(kvh), *l_ = AT_HL(kvh);
                for (int i = 0; i < nqp; i++) m_[i] = -INFINITY, l_[i] = 0.f;
                memset(AT_HACC(kvh), 0, sizeof(float) * (size_t)nq * hdp);
            }
        }
        int ja = kfirst > b0 ? kfirst - b0 : 0, jb = klast < b0 + AT_KB - 1 ? klast - b0 : AT_KB - 1;
        /* one division per block: the positions run on within a cache block and then into
         * the next table entry (an idiv per position was 3% of a decode tile's samples) */
        for (int j = 0, pj = b0, bi = b0 / bs, bo = b0 % bs; j < 2 * AT_KB; j++, pj++) {
            poff[j] = pj <= klast ? ((size_t)bt[bi] * bs + bo) * per_tok : (size_t)-1;
            if (ktl) kpo[j] = pj <= klast ? (size_t)bt[bi] * ktbs : (size_t)-1, kbo[j] = bo;
            if (q8) psc[j] = pj <= klast ? (size_t)bt[bi] * kv->n_kv_heads * bs + bo : 0;
            if (++bo == bs) bo = 0, bi++;
        }
        for (int kvh = h0; kvh < h1; kvh++) {
            float *Qt = AT_HQT(kvh), *acc = AT_HACC(kvh), *m = AT_HM(kvh), *l = AT_HL(kvh);
            /* ask for the next block's K/V rows now: a head's rows are hd elements every
             * n_kv_heads·hd, too sparse for the hardware prefetchers, and decode reads them
             * from memory (a 512-token context is 56 MB of f16 K/V per qwen3-0.6b token) */
#ifdef AT_LOADH
            /* (decode tiles: spread over the P·V loop, see _pvh) */
            const char *pfr[2 * AT_KB];
            /* this head's K/V bases in locals: stores to the row-pointer arrays below could
             * alias kv->k / kv->v, which were reloaded per position (with spills: ~9% of a
             * decode tile's samples on these loops) */
            const char *kbase = (const char *)kv->k + (size_t)kvh * hd * esz, *vbase = (const char *)kv->v + (size_t)kvh * hd * esz;
            if (dk)
                for (int j = 0; j < AT_KB; j++) {
                    size_t po = poff[AT_KB + j];
                    pfr[j] = po == (size_t)-1 ? NULL : kbase + po * esz;
                    pfr[AT_KB + j] = po == (size_t)-1 ? NULL : vbase + po * esz;
                    /* ktl: the head's K of a transposed block is hd·bs contiguous elements;
                     * its positions' hd-element shares of them, in turn */
                    if (ktl && po != (size_t)-1)
                        pfr[j] = (const char *)kv->k + (kpo[AT_KB + j] + ((size_t)kvh * bs + (size_t)kbo[AT_KB + j]) * hd) * esz;
                    if (q8 && po != (size_t)-1 && (j == 0 || kbo[AT_KB + j] == 0)) { /* the next block's scale runs */
                        __builtin_prefetch(kv->ks + psc[AT_KB + j] + (size_t)kvh * bs, 0, AT_PF);
                        __builtin_prefetch(kv->vs + psc[AT_KB + j] + (size_t)kvh * bs, 0, AT_PF);
                    }
                }
#endif
            if (!dk)
                for (int pj = b0 + AT_KB; pj <= klast && pj < b0 + 2 * AT_KB; pj++) {
                    size_t off = (poff[pj - b0] + (size_t)kvh * hd) * esz;
                    size_t ko = ktl ? (kpo[pj - b0] + ((size_t)kvh * bs + (size_t)kbo[pj - b0]) * hd) * esz : off;
                    for (size_t o = 0; o < (size_t)hd * esz; o += 64) {
                        __builtin_prefetch((const char *)kv->k + ko + o, 0, AT_PF);
                        __builtin_prefetch((const char *)kv->v + off + o, 0, AT_PF);
                    }
                }
#ifdef AT_KT
            const void *krow[AT_KB];
#endif
#ifdef AT_LOADH
            const void *vrow[AT_KB];
            float vsc[AT_KB]; /* q8: the V rows' scales */
#endif
#if defined(AT_LOADH) && defined(AT_KT)
            if (vh) /* K transposed below, V read by _pvh: the row pointers only */
                for (int j = ja; j <= jb; j++) {
                    krow[j] = kbase + poff[j] * esz;
                    vrow[j] = vbase + poff[j] * esz;
                    if (q8) vsc[j] = kv->vs[psc[j] + (size_t)kvh * bs];
                }
            else
#endif
            for (int j = ja; j <= jb; j++) {
                size_t off = poff[j] + (size_t)kvh * hd;
#ifdef AT_KT
                krow[j] = (const char *)kv->k + off * esz;
#endif
#ifdef AT_LOADH
                vrow[j] = (const char *)kv->v + off * esz;
#endif
                if (vh) continue; /* K transposed below, V read by _pvh */
                if (q8) {
                    size_t si = psc[j] + (size_t)kvh * bs;
                    if (!kt && !ktl) AT_CAT(AT_NAME, _q8_f32)(Kb + (size_t)j * hdp, (const int8_t *)kv->k + off, kv->ks[si], hd);
                    AT_CAT(AT_NAME, _q8_f32)(Vb + (size_t)j * hdp, (const int8_t *)kv->v + off, kv->vs[si], hd);
                } else if (kv->dtype == DT_F32) {
                    if (!kt && !ktl) memcpy(Kb + (size_t)j * hdp, (const float *)kv->k + off, sizeof(float) * hd);
                    memcpy(Vb + (size_t)j * hdp, (const float *)kv->v + off, sizeof(float) * hd);
                } else {
                    if (!kt && !ktl) AT_TO_F32(Kb + (size_t)j * hdp, (const char *)kv->k + off * esz, kv->dtype, hd);
                    AT_TO_F32(Vb + (size_t)j * hdp, (const char *)kv->v + off * esz, kv->dtype, hd);
                }
            }
#ifdef AT_KT
            if (kt && !ks && !ktl) AT_KT(Kb, krow, kv->dtype, hd, ja, jb);
#endif
#ifdef AT_LOADH
            const char *kr[AT_KB / AT_VW]; /* kd: the block's AT_VW-key runs of this head, d = 0 */
            const float *sr[AT_KB / AT_VW]; /* ... and (q8) their keys' scales */
            if (kd) {
                /* a run is inside one cache block: based from its first key in [ja, jb]; runs
                 * without one read the first run that has (their scores are masked) */
                int uf = -1;
                for (int u = 0; u < AT_KB / AT_VW; u++) {
                    int j0 = u * AT_VW, j = j0 > ja ? j0 : ja;
                    if (j > jb || j0 + AT_VW - 1 < ja) continue;
                    kr[u] = (const char *)kv->k + (kpo[j] + (size_t)kvh * hd * bs + (size_t)(kbo[j] - (j - j0))) * esz;
                    sr[u] = q8 ? kv->ks + psc[j] - (size_t)(j - j0) + (size_t)kvh * bs : NULL;
                    if (uf < 0) uf = u;
                }
                for (int u = 0; u < AT_KB / AT_VW; u++) {
                    int j0 = u * AT_VW, j = j0 > ja ? j0 : ja;
                    if (j > jb || j0 + AT_VW - 1 < ja) kr[u] = kr[uf], sr[u] = sr[uf];
                }
            } else
#endif
            if (ktl) /* Kb[d·AT_KB + j] from the runs of [ja, jb] inside one cache block each */
                for (int j = ja, n; j <= jb; j += n) {
                    n = bs - kbo[j] < jb - j + 1 ? bs - kbo[j] : jb - j + 1;
                    const char *src = (const char *)kv->k + (kpo[j] + (size_t)kvh * hd * bs + (size_t)kbo[j]) * esz;
                    if (q8) { /* the run's keys lie in one cache block: their scales are contiguous */
                        const float *sc = kv->ks + psc[j] + (size_t)kvh * bs;
#ifdef AT_LOADQ8
                        if (n % AT_VW == 0) {
                            for (int d = 0; d < hd; d++, src += (size_t)bs)
                                for (int c = 0; c < n; c += AT_VW)
                                    AT_STORE(Kb + (size_t)d * AT_KB + j + c, AT_MUL(AT_LOADQ8(src + c), AT_LOAD(sc + c)));
                            continue;
                        }
#endif
                        for (int d = 0; d < hd; d++, src += (size_t)bs)
                            for (int c = 0; c < n; c++) Kb[(size_t)d * AT_KB + j + c] = (float)((const int8_t *)src)[c] * sc[c];
                        continue;
                    }
#ifdef AT_LOADH
                    if (kv->dtype == DT_F16 && n % AT_VW == 0) /* (whole runs: the converts inline) */
                        for (int d = 0; d < hd; d++, src += (size_t)bs * esz)
                            for (int c = 0; c < n; c += AT_VW)
                                AT_STORE(Kb + (size_t)d * AT_KB + j + c, AT_LOAD16((const uint16_t *)src + c, 0));
                    else if (kv->dtype == DT_BF16 && n % AT_VW == 0)
                        for (int d = 0; d < hd; d++, src += (size_t)bs * esz)
                            for (int c = 0; c < n; c += AT_VW)
                                AT_STORE(Kb + (size_t)d * AT_KB + j + c, AT_LOAD16((const uint16_t *)src + c, 1));
                    else
#endif
                    for (int d = 0; d < hd; d++, src += (size_t)bs * esz) {
                        if (kv->dtype == DT_F32) memcpy(Kb + (size_t)d * AT_KB + j, src, sizeof(float) * n);
                        else AT_TO_F32(Kb + (size_t)d * AT_KB + j, src, kv->dtype, n);
                    }
                }
            /* scores of the lane vectors from the first one with a lane in this block on (a
             * vector with none is skipped below) */
            int nv = nqp / AT_VW, v0 = 0;
            while (v0 < nv) {
                AT_M act = AT_MAND(AT_ILE(AT_LOADI(lo + v0 * AT_VW), AT_SET1I(b0 + jb)), AT_ILE(AT_SET1I(b0 + ja), AT_LOADI(hi + v0 * AT_VW)));
                if (!AT_MNONE(act)) break;
                v0++;
            }
#ifdef AT_LOADH
            float *Skh = Sk; /* this head's decode scores */
            if (dk) {
#ifdef AT_KS
                if (ks == 2 && (kvh - h0) % 2) Skh = Sk + AT_DQ * AT_KB; /* scored with the pair's first head */
                else if (ks == 2 && kvh + 1 < h1) AT_KS(Sk, Qt, Sk + AT_DQ * AT_KB, AT_HQT(kvh + 1), krow, nqp, hd, nq, a->scale, ja, jb);
                else if (ks) AT_KS(Sk, Qt, NULL, NULL, krow, nqp, hd, nq, a->scale, ja, jb);
#endif
                if (kd) AT_CAT(AT_NAME, _scores_kth)(Sk, Qt, kr, sr, (size_t)bs, nqp, hd, nq, a->scale, kvt);
                AT_CAT(AT_NAME, _decode_softmax)(Skh, Qt, Kb, m, l, corr, lo, hi, nq, nqp, hdp, hd, b0, ja, jb, a->scale, kt || ktl,
                                                 ks || kd);
                goto pv;
            }
#endif
            if (nq <= AT_DQ) AT_CAT(AT_NAME, _scores_few)(S, Qt, Kb, nqp, hdp, hd, nq, a->scale, kt || ktl, 0);
            else AT_CAT(AT_NAME, _scores)(S, Qt, Kb, nqp, hdp, hd, ja, jb, v0, nv, a->scale, ktl);
            for (int v = 0; v < nv; v++) {
                AT_VI vlo = AT_LOADI(lo + v * AT_VW), vhi = AT_LOADI(hi + v * AT_VW);
                /* lanes whose range meets this block */
                AT_M act = AT_MAND(AT_ILE(vlo, AT_SET1I(b0 + jb)), AT_ILE(AT_SET1I(b0 + ja), vhi));
                if (AT_MNONE(act)) {
                    AT_STORE(corr + v * AT_VW, AT_SET1(1.0f));
                    continue;
                }
                if (a->softcap > 0)
                    for (int j = ja; j <= jb; j++)
                        for (int i = v * AT_VW; i < (v + 1) * AT_VW; i++) {
                            float *s = &S[(size_t)j * nqp + i];
                            *s = a->softcap * tanhf(*s / a->softcap);
                        }
                AT_V mb = AT_SET1(-INFINITY), ninf = AT_SET1(-INFINITY);
                for (int j = ja; j <= jb; j++) {
                    AT_VI pj = AT_SET1I(b0 + j);
                    AT_M ok = AT_MAND(AT_ILE(vlo, pj), AT_ILE(pj, vhi));
                    float *sj = S + (size_t)j * nqp + v * AT_VW;
                    AT_V sv = AT_SEL(ok, AT_LOAD(sj), ninf);
                    AT_STORE(sj, sv);
                    mb = AT_MAX(mb, sv);
                }
                AT_V mo = AT_LOAD(m + v * AT_VW), mn = AT_SEL(act, AT_MAX(mo, mb), mo);
                /* first block of a lane: nothing to rescale (acc and l are 0) */
                AT_V c = AT_SEL(AT_FEQ(mo, ninf), AT_ZERO(), AT_CAT(AT_NAME, _exp)(AT_SUB(mo, mn)));
                c = AT_SEL(act, c, AT_SET1(1.0f));
                AT_V lb = AT_ZERO();
                for (int j = ja; j <= jb; j++) {
                    float *sj = S + (size_t)j * nqp + v * AT_VW;
                    AT_V sv = AT_LOAD(sj);
                    AT_V p = AT_SEL(AT_FEQ(sv, ninf), AT_ZERO(), AT_CAT(AT_NAME, _exp)(AT_SUB(sv, mn)));
                    AT_STORE(sj, p);
                    lb = AT_ADD(lb, p);
                }
                AT_V lo_ = AT_LOAD(l + v * AT_VW);
                AT_STORE(l + v * AT_VW, AT_SEL(act, AT_ADD(AT_MUL(lo_, c), lb), lo_));
                AT_STORE(m + v * AT_VW, mn);
                AT_STORE(corr + v * AT_VW, c);
            }
#ifdef AT_LOADH
        pv:
#endif
            /* V: each query over its own keys of the block; a token's group heads in pairs */
            for (int i = 0; i < nq; i++) {
                int qa = lo[i] - b0 > ja ? lo[i] - b0 : ja, qb = hi[i] - b0 < jb ? hi[i] - b0 : jb;
                if (qa > qb) continue;
                int i2 = i % group + 1 < group ? i + 1 : -1;
                float c1 = corr[i], c2 = i2 >= 0 ? corr[i2] : 1.0f;
                if (c1 != 1.0f)
                    for (int d = 0; d < hdp; d += AT_VW) AT_STORE(acc + (size_t)i * hdp + d, AT_MUL(AT_LOAD(acc + (size_t)i * hdp + d), AT_SET1(c1)));
                if (i2 >= 0 && c2 != 1.0f)
                    for (int d = 0; d < hdp; d += AT_VW) AT_STORE(acc + (size_t)i2 * hdp + d, AT_MUL(AT_LOAD(acc + (size_t)i2 * hdp + d), AT_SET1(c2)));
#ifdef AT_LOADH
                if (dk) AT_CAT(AT_NAME, _pvh)(acc, Skh, vrow, 1, AT_KB, hdp, i, i2, qa, qb, i == 0 ? pfr : NULL, hd * (int)esz, vsc, kvt);
                else if (vh) AT_CAT(AT_NAME, _pvh)(acc, S, vrow, nqp, 1, hdp, i, i2, qa, qb, NULL, 0, vsc, kvt);
                else
#endif
                    AT_CAT(AT_NAME, _pv)(acc, S, Vb, nqp, hdp, i, i2, qa, qb);
                if (i2 >= 0) i++;
            }
        } /* heads */
    }
    if (cs >= 0) AT_CLOSE_SEG();
#undef AT_CLOSE_SEG
    if (part) return;
    for (int kvh = h0; kvh < h1; kvh++)
        for (int i = 0; i < nq; i++)
            AT_CAT(AT_NAME, _emit)(out + ((size_t)(t0 + i / group) * a->n_heads + (size_t)kvh * group + i % group) * hd,
                                   AT_HACCF(kvh) + (size_t)i * hdp, AT_HLF(kvh)[i], hd);
#undef AT_HQT
#undef AT_HACC
#undef AT_HM
#undef AT_HL
#undef AT_HACC0
#undef AT_HM0
#undef AT_HL0
#undef AT_PREC
#undef AT_HACCF
#undef AT_HMF
#undef AT_HLF
}

/* Queries of tokens [t0, t1) (one row, r) and KV head kvh: out[t, kvh·group + g]. */
void AT_NAME(float *out, const float *q, const attn_args_t *a, int r, int t0, int t1, int kvh, float *scratch) {
    AT_CAT(AT_NAME, _heads)(out, q, a, r, t0, t1, kvh, kvh + 1, 0, 0, NULL, scratch);
}

/* The same for KV heads [h0, h1) walked together (scratch: attn_tile_floats(a, t1 - t0, h1 - h0)). */
void AT_CAT(AT_NAME, _group)(float *out, const float *q, const attn_args_t *a, int r, int t0, int t1, int h0, int h1,
                             float *scratch) {
    AT_CAT(AT_NAME, _heads)(out, q, a, r, t0, t1, h0, h1, 0, 0, NULL, scratch);
}

/* Segments [s0, s1) of one-token tile t0 (row r), KV heads [h0, h1): each segment's state
 * into part (see _heads); _merge folds them. */
void AT_CAT(AT_NAME, _part)(const float *q, const attn_args_t *a, int r, int t0, int h0, int h1, int s0, int s1, float *part,
                            float *scratch) {
    AT_CAT(AT_NAME, _heads)(NULL, q, a, r, t0, t0 + 1, h0, h1, s0, s1, part, scratch);
}

/* out of one-token tile t0 from its nseg segments' states in part (all KV heads), folded in
 * segment order: the bits of the unsplit tile */
void AT_CAT(AT_NAME, _merge)(float *out, const attn_args_t *a, int t0, int nseg, const float *part) {
    int hd = a->head_dim, group = a->n_heads / a->n_kv_heads, hdp = (hd + 15) / 16 * 16;
    size_t nqp = (size_t)(group + 15) / 16 * 16, rec = 2 * nqp + (size_t)group * hdp;
    float ACC[hdp] __attribute__((aligned(64)));
    for (int kvh = 0; kvh < a->n_kv_heads; kvh++)
        for (int i = 0; i < group; i++) {
            float M = -INFINITY, L = 0.f;
            memset(ACC, 0, sizeof(float) * hdp);
            for (int k = 0; k < nseg; k++) {
                const float *pr = part + ((size_t)kvh * nseg + k) * rec;
                AT_CAT(AT_NAME, _fold)(&M, &L, ACC, pr[i], pr[nqp + i], pr + 2 * nqp + (size_t)i * hdp, hdp);
            }
            AT_CAT(AT_NAME, _emit)(out + ((size_t)t0 * a->n_heads + (size_t)kvh * group + i) * hd, ACC, L, hd);
        }
}
