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

/* Scores of keys j0..j0+nj-1 (nj <= 4) of the converted block against lane vector v:
 * S[j][v] = (Σ_d Qt[d][v] · Kb[j][d]) · scale. Every (j, lane) is its own FMA chain in d
 * order whatever nj is. */
static inline void AT_CAT(AT_NAME, _scores)(float *S, const float *Qt, const float *Kb, int nqp, int hdp, int hd,
                                             int j0, int nj, int v, float scale) {
    AT_V a0 = AT_ZERO(), a1 = AT_ZERO(), a2 = AT_ZERO(), a3 = AT_ZERO();
    const float *k0 = Kb + (size_t)j0 * hdp, *qv = Qt + (size_t)v * AT_VW;
    if (nj == 4) {
        for (int d = 0; d < hd; d++) {
            AT_V qd = AT_LOAD(qv + (size_t)d * nqp);
            a0 = AT_FMA(qd, AT_SET1(k0[d]), a0);
            a1 = AT_FMA(qd, AT_SET1(k0[hdp + d]), a1);
            a2 = AT_FMA(qd, AT_SET1(k0[2 * hdp + d]), a2);
            a3 = AT_FMA(qd, AT_SET1(k0[3 * hdp + d]), a3);
        }
    } else {
        for (int d = 0; d < hd; d++) {
            AT_V qd = AT_LOAD(qv + (size_t)d * nqp);
            a0 = AT_FMA(qd, AT_SET1(k0[d]), a0);
            if (nj > 1) a1 = AT_FMA(qd, AT_SET1(k0[hdp + d]), a1);
            if (nj > 2) a2 = AT_FMA(qd, AT_SET1(k0[2 * hdp + d]), a2);
        }
    }
    AT_V sc = AT_SET1(scale);
    float *s0 = S + (size_t)j0 * nqp + (size_t)v * AT_VW;
    AT_STORE(s0, AT_MUL(a0, sc));
    if (nj > 1) AT_STORE(s0 + nqp, AT_MUL(a1, sc));
    if (nj > 2) AT_STORE(s0 + 2 * (size_t)nqp, AT_MUL(a2, sc));
    if (nj > 3) AT_STORE(s0 + 3 * (size_t)nqp, AT_MUL(a3, sc));
}

/* acc[i] (+)= Σ_{j in [ja, jb]} P[j][i] · Vb[j] for one query i or two (i, i2 >= 0) with the
 * same key range, AT_CB vectors of head dim at a time; j in position order. */
static inline void AT_CAT(AT_NAME, _pv)(float *acc, const float *P, const float *Vb, int nqp, int hdp,
                                         int i, int i2, int ja, int jb) {
    for (int c0 = 0; c0 < hdp; c0 += AT_CB * AT_VW) {
        int nc = (hdp - c0) / AT_VW < AT_CB ? (hdp - c0) / AT_VW : AT_CB;
        AT_V x[AT_CB], y[AT_CB];
        float *ai = acc + (size_t)i * hdp + c0, *bi = acc + (size_t)(i2 >= 0 ? i2 : i) * hdp + c0;
        for (int c = 0; c < nc; c++) { x[c] = AT_LOAD(ai + c * AT_VW); y[c] = AT_LOAD(bi + c * AT_VW); }
        if (i2 >= 0 && nc == AT_CB) {
            for (int j = ja; j <= jb; j++) {
                AT_V p = AT_SET1(P[(size_t)j * nqp + i]), p2 = AT_SET1(P[(size_t)j * nqp + i2]);
                const float *vj = Vb + (size_t)j * hdp + c0;
                for (int c = 0; c < AT_CB; c++) {
                    AT_V vv = AT_LOAD(vj + c * AT_VW);
                    x[c] = AT_FMA(p, vv, x[c]);
                    y[c] = AT_FMA(p2, vv, y[c]);
                }
            }
        } else {
            for (int j = ja; j <= jb; j++) {
                AT_V p = AT_SET1(P[(size_t)j * nqp + i]);
                const float *vj = Vb + (size_t)j * hdp + c0;
                for (int c = 0; c < nc; c++) x[c] = AT_FMA(p, AT_LOAD(vj + c * AT_VW), x[c]);
            }
            if (i2 >= 0)
                for (int j = ja; j <= jb; j++) {
                    AT_V p = AT_SET1(P[(size_t)j * nqp + i2]);
                    const float *vj = Vb + (size_t)j * hdp + c0;
                    for (int c = 0; c < nc; c++) y[c] = AT_FMA(p, AT_LOAD(vj + c * AT_VW), y[c]);
                }
        }
        for (int c = 0; c < nc; c++) AT_STORE(ai + c * AT_VW, x[c]);
        if (i2 >= 0)
            for (int c = 0; c < nc; c++) AT_STORE(bi + c * AT_VW, y[c]);
    }
}

/* Queries of tokens [t0, t1) (one row, r) and KV head kvh: out[t, kvh·group + g]. */
void AT_NAME(float *out, const float *q, const attn_args_t *a, int r, int t0, int t1, int kvh, float *scratch) {
    const kv_view_t *kv = &a->kv;
    const int32_t *bt = a->block_tables[r];
    int hd = a->head_dim, group = a->n_heads / a->n_kv_heads, bs = kv->block_size;
    int nq = (t1 - t0) * group;
    attn_tile_dims_t D;
    attn_tile_dims(a, t1 - t0, &D);
    int nqp = D.nqp, hdp = D.hdp;
    float *Qt = scratch, *Kb = Qt + (size_t)hd * nqp, *Vb = Kb + (size_t)AT_KB * hdp, *S = Vb + (size_t)AT_KB * hdp;
    float *acc = S + (size_t)AT_KB * nqp, *m = acc + (size_t)nq * hdp, *l = m + nqp, *corr = l + nqp;
    int32_t *lo = (int32_t *)(corr + nqp), *hi = lo + nqp;
    size_t per_tok = (size_t)kv->n_kv_heads * hd, esz = dtype_size(kv->dtype);

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
        m[i] = -INFINITY;
        l[i] = 0.f;
    }
    for (int d = 0; d < hd; d++)
        for (int i = 0; i < nqp; i++)
            Qt[(size_t)d * nqp + i] = i < nq ? q[((size_t)(t0 + i / group) * a->n_heads + (size_t)kvh * group + i % group) * hd + d] : 0.f;
    memset(acc, 0, sizeof(float) * (size_t)nq * hdp);
    /* the padding columns of the converted rows stay zero: the V sums run over hdp */
    for (int j = 0; j < AT_KB; j++) {
        for (int d = hd; d < hdp; d++) Kb[(size_t)j * hdp + d] = Vb[(size_t)j * hdp + d] = 0.f;
    }

    for (int b0 = klo / AT_KB * AT_KB; b0 <= khi; b0 += AT_KB) {
        int ja = klo > b0 ? klo - b0 : 0, jb = khi < b0 + AT_KB - 1 ? khi - b0 : AT_KB - 1;
        for (int j = ja; j <= jb; j++) {
            int pj = b0 + j;
            size_t off = ((size_t)bt[pj / bs] * bs + pj % bs) * per_tok + (size_t)kvh * hd;
            if (kv->dtype == DT_F32) {
                memcpy(Kb + (size_t)j * hdp, (const float *)kv->k + off, sizeof(float) * hd);
                memcpy(Vb + (size_t)j * hdp, (const float *)kv->v + off, sizeof(float) * hd);
            } else {
                AT_TO_F32(Kb + (size_t)j * hdp, (const char *)kv->k + off * esz, kv->dtype, hd);
                AT_TO_F32(Vb + (size_t)j * hdp, (const char *)kv->v + off * esz, kv->dtype, hd);
            }
        }
        for (int v = 0; v < nqp / AT_VW; v++) {
            AT_VI vlo = AT_LOADI(lo + v * AT_VW), vhi = AT_LOADI(hi + v * AT_VW);
            /* lanes whose range meets this block */
            AT_M act = AT_MAND(AT_ILE(vlo, AT_SET1I(b0 + jb)), AT_ILE(AT_SET1I(b0 + ja), vhi));
            if (AT_MNONE(act)) {
                AT_STORE(corr + v * AT_VW, AT_SET1(1.0f));
                continue;
            }
            for (int j = ja; j <= jb; j += 4)
                AT_CAT(AT_NAME, _scores)(S, Qt, Kb, nqp, hdp, hd, j, jb - j + 1 < 4 ? jb - j + 1 : 4, v, a->scale);
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
        /* V: each query over its own keys of the block; a token's group heads in pairs */
        for (int i = 0; i < nq; i++) {
            int qa = lo[i] - b0 > ja ? lo[i] - b0 : ja, qb = hi[i] - b0 < jb ? hi[i] - b0 : jb;
            if (qa > qb) continue;
            int i2 = i % group + 1 < group ? i + 1 : -1;
            float c1 = corr[i], c2 = i2 >= 0 ? corr[i2] : 1.0f;
            if (c1 != 1.0f)
                for (int d = 0; d < hdp; d++) acc[(size_t)i * hdp + d] *= c1;
            if (i2 >= 0 && c2 != 1.0f)
                for (int d = 0; d < hdp; d++) acc[(size_t)i2 * hdp + d] *= c2;
            AT_CAT(AT_NAME, _pv)(acc, S, Vb, nqp, hdp, i, i2, qa, qb);
            if (i2 >= 0) i++;
        }
    }
    for (int i = 0; i < nq; i++) {
        float inv = 1.0f / l[i];
        float *o = out + ((size_t)(t0 + i / group) * a->n_heads + (size_t)kvh * group + i % group) * hd;
        for (int d = 0; d < hd; d++) o[d] = acc[(size_t)i * hdp + d] * inv;
    }
}
