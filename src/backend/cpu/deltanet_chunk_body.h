/* deltanet_chunk_body.h — the chunk-parallel gated delta rule for one value head and one
 * whole chunk of C tokens, written once and compiled per kernel family: deltanet_chunk.c
 * (scalar, the reference), deltanet_chunk_avx2.c and deltanet_chunk_avx512.c (the same C,
 * compiled with their -m flags). The includer defines DC_NAME (the function's name), DC_MB
 * and DC_NB (the register block of the small matmul: rows × columns) and DC_VW (floats per
 * vector: 4 for SSE2, 8 for AVX2, 16 for AVX-512).
 *
 * The math (Yang, Kautz, Hatamizadeh, "Gated Delta Networks", ICLR 2025; the WY/UT form of
 * flash-linear-attention's chunk_gated_delta_rule). Per token t of the chunk, with S₀ the
 * state before it, α_t = e^{g_t}, the recurrence (deltanet_ref.c) is
 *     S_t = α_t S_{t-1} + k_t δ_tᵀ,   δ_t = β_t (v_t − (α_t S_{t-1})ᵀ k_t),   o_t = S_tᵀ q_t.
 * With G_t = g_0 + … + g_t (log of the decay since the chunk start) and Γ_ts = e^{G_t − G_s}:
 *     α_t S_{t-1} = e^{G_t} S₀ + Σ_{s<t} Γ_ts k_s δ_sᵀ, so
 *     δ_t + β_t Σ_{s<t} Γ_ts (k_t·k_s) δ_s = β_t (v_t − e^{G_t} S₀ᵀ k_t),
 * i.e. (I + A) Δ = R with A strictly lower triangular, A_ts = β_t Γ_ts (k_t·k_s): one unit
 * lower-triangular solve (forward substitution, blocked) gives every δ of the chunk. Then
 *     o_t = e^{G_t} S₀ᵀ q_t + Σ_{s≤t} Γ_ts (q_t·k_s) δ_s            (O = diag(e^G) Q S₀ + P Δ)
 *     S_C = e^{G_last} S₀ + Σ_s Γ_{last,s} k_s δ_sᵀ                   (one state update per chunk)
 * All but the solve's diagonal blocks are matrix products: K·S₀, Q·S₀, K·Kᵀ, Q·Kᵀ, P·Δ and
 * Kᵀ·Δ, O(C·dk·dv + C²·(dk+dv)) per chunk and head, with the state read twice and written
 * once per chunk instead of per token.
 *
 * Numerics: A has entries of size ≤ 1 (|k| = 1, β, Γ ≤ 1) and I + A is the product form of
 * the contractions I − β k kᵀ, so the solve does not amplify rounding. Γ_ts is e^{G_t}·e^{−G_s}
 * when the chunk's total decay e^{G_last} ≥ e^{-80} (both factors stay normal floats), else
 * e^{G_t − G_s} directly (underflow to 0 is then the right answer). */

#ifndef DC_NAME
#error "define DC_NAME, DC_MB and DC_NB before including deltanet_chunk_body.h"
#endif

#define DC_CAT2(a, b) a##b
#define DC_CAT(a, b) DC_CAT2(a, b)
#define DC_MM DC_CAT(DC_NAME, _mm)
#define DC_L2 DC_CAT(DC_NAME, _l2norm)
#define DC_BODY DC_CAT(DC_NAME, _body)

/* Cm[M][N] (acc ? += : =) A[M][Kd] · B[Kd][N]; row strides lda, ldb, ldc. Register blocks
 * of DC_MB rows × DC_NB columns held in GCC vectors of DC_VW floats (the compiler's own
 * vector type: plain C, no intrinsics; left to itself the SLP vectorizer shuffled lanes
 * instead), plain loops at the edges. Each output is summed over k in index order. */
typedef float DC_CAT(DC_NAME, _vf) __attribute__((vector_size(DC_VW * sizeof(float))));
#define DC_VF DC_CAT(DC_NAME, _vf)
static void DC_MM(float *restrict Cm, int ldc, const float *restrict A, int lda, const float *restrict B, int ldb,
                  int M, int Kd, int N, int acc) {
    enum { NV = DC_NB / DC_VW };
    for (int n0 = 0; n0 < N; n0 += DC_NB) {
        int nb = N - n0 < DC_NB ? N - n0 : DC_NB;
        for (int m0 = 0; m0 < M; m0 += DC_MB) {
            int mb = M - m0 < DC_MB ? M - m0 : DC_MB;
            if (nb == DC_NB && mb == DC_MB) {
                DC_VF c[DC_MB][NV];
#pragma GCC unroll 16
                for (int r = 0; r < DC_MB; r++)
#pragma GCC unroll 4
                    for (int j = 0; j < NV; j++) {
                        if (acc) memcpy(&c[r][j], Cm + (size_t)(m0 + r) * ldc + n0 + j * DC_VW, sizeof(DC_VF));
                        else c[r][j] = (DC_VF){0};
                    }
                for (int k = 0; k < Kd; k++) {
                    DC_VF bk[NV];
#pragma GCC unroll 4
                    for (int j = 0; j < NV; j++) memcpy(&bk[j], B + (size_t)k * ldb + n0 + j * DC_VW, sizeof(DC_VF));
#pragma GCC unroll 16
                    for (int r = 0; r < DC_MB; r++) {
                        float av = A[(size_t)(m0 + r) * lda + k]; /* broadcast: vector × scalar */
#pragma GCC unroll 4
                        for (int j = 0; j < NV; j++) c[r][j] += bk[j] * av;
                    }
                }
#pragma GCC unroll 16
                for (int r = 0; r < DC_MB; r++)
#pragma GCC unroll 4
                    for (int j = 0; j < NV; j++) memcpy(Cm + (size_t)(m0 + r) * ldc + n0 + j * DC_VW, &c[r][j], sizeof(DC_VF));
            } else {
                for (int r = 0; r < mb; r++) {
                    float *cr = Cm + (size_t)(m0 + r) * ldc + n0;
                    if (!acc) for (int j = 0; j < nb; j++) cr[j] = 0.f;
                    for (int k = 0; k < Kd; k++) {
                        float av = A[(size_t)(m0 + r) * lda + k];
                        const float *bk = B + (size_t)k * ldb + n0;
                        for (int j = 0; j < nb; j++) cr[j] += av * bk[j];
                    }
                }
            }
        }
    }
}

/* The same normalization as deltanet_ref.c: y = x / sqrt(Σx² + 1e-6). */
static void DC_L2(float *y, const float *x, int n) {
    float ss = 0.f;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    float inv = 1.0f / sqrtf(ss + 1e-6f);
    for (int i = 0; i < n; i++) y[i] = x[i] * inv;
}

/* One head h, the d->chunk tokens at step indices [t0, t0 + C) of one row, on the head's
 * state S [dk][dv]. ws: delta_chunk_floats(d) floats of scratch. */
static void DC_BODY(float *out, const float *qkv, const float *a, const float *b, const delta_args_t *d, float *S, int t0,
                    int h, float *ws) {
    const int C = d->chunk, dk = d->dk, dv = d->dv, nv = d->n_v_heads, kh = h / (d->n_v_heads / d->n_k_heads);
    const int ldo = nv * dv;
    float *Q = ws;                   /* [C][dk]  l2norm(q)·scale                         */
    float *K = Q + (size_t)C * dk;   /* [C][dk]  l2norm(k)                               */
    float *Kt = K + (size_t)C * dk;  /* [dk][C]  Kᵀ; at the end Kᵀ·diag(Γ_{last,s})        */
    float *R = Kt + (size_t)dk * C;  /* [C][dv]  K·S₀, then R, then Δ (in place)           */
    float *Mk = R + (size_t)C * dv;  /* [C][C]   K·Kᵀ, then −A                           */
    float *Mq = Mk + (size_t)C * C;  /* [C][C]   Q·Kᵀ, then P                            */
    float *G = Mq + (size_t)C * C;   /* [C]      cumulative log decay                    */
    float *bt = G + C;               /* [C]      β                                       */
    float *eg = bt + C;              /* [C]      e^{G_t}                                 */
    float *en = eg + C;              /* [C]      e^{−G_t} (when the product form is safe)  */
    float *o0 = out + (size_t)t0 * ldo + (size_t)h * dv;

    float Gs = 0.f;
    for (int t = 0; t < C; t++) {
        const float *row = qkv + (size_t)(t0 + t) * d->stride;
        DC_L2(Q + (size_t)t * dk, row + d->q_off + (size_t)kh * dk, dk);
        for (int i = 0; i < dk; i++) Q[(size_t)t * dk + i] *= d->q_scale;
        DC_L2(K + (size_t)t * dk, row + d->k_off + (size_t)kh * dk, dk);
        float x = a[(size_t)(t0 + t) * nv + h] + d->dt_bias[h];
        Gs += -expf(d->A_log[h]) * (x > 20.f ? x : log1pf(expf(x)));
        G[t] = Gs;
        bt[t] = 1.0f / (1.0f + expf(-b[(size_t)(t0 + t) * nv + h]));
        eg[t] = expf(Gs);
    }
    int prod = G[C - 1] >= -80.f;
    if (prod)
        for (int t = 0; t < C; t++) en[t] = expf(-G[t]);
    for (int t = 0; t < C; t++)
        for (int i = 0; i < dk; i++) Kt[(size_t)i * C + t] = K[(size_t)t * dk + i];

    /* the inter-chunk terms: R = K·S₀, O = Q·S₀ (straight into out) */
    DC_MM(R, dv, K, dk, S, dv, C, dk, dv, 0);
    DC_MM(o0, ldo, Q, dk, S, dv, C, dk, dv, 0);
    /* the intra-chunk scores */
    DC_MM(Mk, C, K, dk, Kt, C, C, dk, C, 0);
    DC_MM(Mq, C, Q, dk, Kt, C, C, dk, C, 0);
    for (int t = 0; t < C; t++) {
        float *mk = Mk + (size_t)t * C, *mq = Mq + (size_t)t * C;
        for (int s = 0; s <= t; s++) {
            float gam = prod ? eg[t] * en[s] : expf(G[t] - G[s]);
            mk[s] = s < t ? -bt[t] * gam * mk[s] : 0.f;
            mq[s] *= gam;
        }
        for (int s = t + 1; s < C; s++) mk[s] = mq[s] = 0.f;
        /* R_t = β_t (v_t − e^{G_t} (K S₀)_t);  O_t = e^{G_t} (Q S₀)_t */
        const float *v = qkv + (size_t)(t0 + t) * d->stride + d->v_off + (size_t)h * dv;
        float *rt = R + (size_t)t * dv, *ot = o0 + (size_t)t * ldo;
        for (int j = 0; j < dv; j++) {
            rt[j] = bt[t] * (v[j] - eg[t] * rt[j]);
            ot[j] *= eg[t];
        }
    }
    /* (I + A) Δ = R, blocked forward substitution: a block of rows first takes the product
     * with every Δ already known, then solves its own small triangle row by row */
    for (int b0 = 0; b0 < C; b0 += DC_MB) {
        int nb = C - b0 < DC_MB ? C - b0 : DC_MB;
        if (b0) DC_MM(R + (size_t)b0 * dv, dv, Mk + (size_t)b0 * C, C, R, dv, nb, b0, dv, 1);
        for (int t = b0 + 1; t < b0 + nb; t++) {
            float *rt = R + (size_t)t * dv;
            for (int s = b0; s < t; s++) {
                float m = Mk[(size_t)t * C + s];
                const float *rs = R + (size_t)s * dv;
                for (int j = 0; j < dv; j++) rt[j] += m * rs[j];
            }
        }
    }
    /* O += P·Δ, each block of rows over the columns it can see */
    for (int b0 = 0; b0 < C; b0 += DC_MB) {
        int nb = C - b0 < DC_MB ? C - b0 : DC_MB;
        DC_MM(o0 + (size_t)b0 * ldo, ldo, Mq + (size_t)b0 * C, C, R, dv, nb, b0 + nb, dv, 1);
    }
    /* S = e^{G_last} S₀ + Kᵀ·diag(Γ_{last,s})·Δ */
    float gl = eg[C - 1];
    for (int t = 0; t < C; t++) {
        float w = prod ? gl * en[t] : expf(G[C - 1] - G[t]);
        for (int i = 0; i < dk; i++) Kt[(size_t)i * C + t] *= w;
    }
    for (size_t i = 0; i < (size_t)dk * dv; i++) S[i] *= gl;
    DC_MM(S, dv, Kt, C, R, dv, dk, C, dv, 1);
}

/* Subnormals: with a fast decay (g of a few units per token, common: a chunk of 64 then
 * spans e^-200) many Γ_ts, e^{G_t} and their products fall below FLT_MIN, and every
 * multiply touching a subnormal takes a microcode assist — ~4x the whole kernel's time on
 * Qwen3.5-shaped synth weights. DC_FTZ (the SIMD families) runs the kernel with MXCSR's
 * flush-to-zero and denormals-are-zero set, restoring the caller's mode after: values
 * below 2^-126 in magnitude become 0, a change of at most ~1e-38 per term against outputs
 * of order 1, far inside the chunk-vs-token bound (test_kernels_hybrid). The scalar family
 * (the reference, cpu-ref) keeps IEEE subnormals. */
void DC_NAME(float *out, const float *qkv, const float *a, const float *b, const delta_args_t *d, float *S, int t0, int h,
             float *ws) {
#ifdef DC_FTZ
    unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040); /* FTZ (bit 15) | DAZ (bit 6) */
    DC_BODY(out, qkv, a, b, d, S, t0, h, ws);
    _mm_setcsr(csr);
#else
    DC_BODY(out, qkv, a, b, d, S, t0, h, ws);
#endif
}

#undef DC_BODY
#undef DC_MM
#undef DC_L2
#undef DC_VF
#undef DC_CAT
#undef DC_CAT2
