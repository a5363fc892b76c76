/* test_kernels_hybrid.c — the hybrid/MoE ops of the CPU backend against independent
 * references, on random inputs of odd sizes.
 *
 * - conv1d_causal: against a double-precision conv over the whole sequence with zero
 *   padding; feeding the sequence in chunks (states carried) gives bitwise the same output.
 * - gated_delta: against a double-precision delta rule written from the formula (outer
 *   products, no loop sharing with the kernel) within 1e-5; the threaded backend op equals
 *   the single-threaded reference bitwise; chunked rows equal one row bitwise; grouped
 *   value heads (n_v > n_k) read key head h / (n_v / n_k).
 * - gated_delta, chunk-parallel (whole aligned chunks of C positions in the WY form, the
 *   rest token by token), every kernel family this CPU has: against the double-precision
 *   rule (outputs and final state) within a bound derived from the sums' lengths (below),
 *   on odd sizes, several heads, grouped heads, rows starting mid-chunk, decays near 0 and
 *   near 1, a non-zero initial state. Tokens before the first whole chunk are bitwise the
 *   per-token form; a row split at chunk boundaries is bitwise the row in one piece; the
 *   threaded backend op is bitwise the single-threaded split.
 * - sigmoid_mul (elementwise and per-token), scale, add_rows_scaled: against plain loops. */
#include "../common/test_util.h"
#include "backend/cpu/cpu_hybrid.h"
#include "backend/cpu/cpu_kernels.h"

static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }
static double silu(double x) { return x * sigm(x); }

static void rand_fill(float *x, size_t n, uint64_t *s, float scale) {
    for (size_t i = 0; i < n; i++) x[i] = scale * tu_rand(s);
}

static void test_conv1d(void **st) {
    int Cs[] = {1, 7, 33}, Ks[] = {1, 2, 4, 5}, Ts[] = {1, 3, 17};
    uint64_t seed = 7;
    for (int ci = 0; ci < 3; ci++)
        for (int ki = 0; ki < 4; ki++)
            for (int ti = 0; ti < 3; ti++) {
                int C = Cs[ci], K = Ks[ki], T = Ts[ti], H = K - 1;
                float *x = malloc(sizeof(float) * T * C), *w = malloc(sizeof(float) * C * K);
                float *y = malloc(sizeof(float) * T * C), *y2 = malloc(sizeof(float) * T * C);
                float *s1 = calloc((size_t)(H ? H : 1) * C, sizeof(float)), *s2 = calloc((size_t)(H ? H : 1) * C, sizeof(float));
                rand_fill(x, (size_t)T * C, &seed, 1.0f);
                rand_fill(w, (size_t)C * K, &seed, 0.5f);
                int32_t rs[2] = {0, T};
                ref_conv1d_causal(y, x, 1, rs, &s1, w, C, K, ACT_SILU);
                for (int t = 0; t < T; t++)
                    for (int c = 0; c < C; c++) {
                        double acc = 0;
                        for (int k = 0; k < K; k++) {
                            int j = t - H + k;
                            if (j >= 0) acc += (double)w[c * K + k] * x[j * C + c];
                        }
                        double want = silu(acc);
                        if (fabs(want - y[t * C + c]) > 1e-5 * (1 + fabs(want)))
                            fail_msg("conv1d C=%d K=%d T=%d: t=%d c=%d got %g want %g", C, K, T, t, c, y[t * C + c], want);
                    }
                /* the final state holds the last K-1 inputs (zeros before the first) */
                for (int k = 0; k < H; k++)
                    for (int c = 0; c < C; c++) {
                        int j = T - H + k;
                        assert_true(s1[k * C + c] == (j >= 0 ? x[j * C + c] : 0.f));
                    }
                /* chunks of 1 and 2, state carried: bitwise equal */
                for (int t = 0; t < T;) {
                    int n = (t % 3 == 0) ? 1 : 2;
                    if (t + n > T) n = T - t;
                    int32_t r2[2] = {0, n};
                    ref_conv1d_causal(y2 + (size_t)t * C, x + (size_t)t * C, 1, r2, &s2, w, C, K, ACT_SILU);
                    t += n;
                }
                assert_memory_equal(y, y2, sizeof(float) * T * C);
                free(x); free(w); free(y); free(y2); free(s1); free(s2);
            }
}

/* The delta rule from the formula, in double: S = S·e^g; S += k (β(v - Sᵀk))ᵀ; o = Sᵀq. */
static void delta_naive(double *out, const float *qkv, const float *a, const float *b, int T, const delta_args_t *d, double *S) {
    int dk = d->dk, dv = d->dv, nv = d->n_v_heads, group = nv / d->n_k_heads;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < nv; h++) {
            const float *row = qkv + (size_t)t * d->stride;
            int kh = h / group;
            double q[256], k[256], qs = 0, ks = 0, kv[256];
            for (int i = 0; i < dk; i++) {
                q[i] = row[d->q_off + kh * dk + i]; k[i] = row[d->k_off + kh * dk + i];
                qs += q[i] * q[i]; ks += k[i] * k[i];
            }
            for (int i = 0; i < dk; i++) { q[i] *= d->q_scale / sqrt(qs + 1e-6); k[i] /= sqrt(ks + 1e-6); }
            double x = a[t * nv + h] + d->dt_bias[h];
            double g = -exp(d->A_log[h]) * (x > 20 ? x : log1p(exp(x))), beta = sigm(b[t * nv + h]);
            double *Sh = S + (size_t)h * dk * dv;
            for (int i = 0; i < dk * dv; i++) Sh[i] *= exp(g);
            for (int j = 0; j < dv; j++) {
                kv[j] = 0;
                for (int i = 0; i < dk; i++) kv[j] += Sh[i * dv + j] * k[i];
            }
            for (int i = 0; i < dk; i++)
                for (int j = 0; j < dv; j++) Sh[i * dv + j] += k[i] * beta * (row[d->v_off + h * dv + j] - kv[j]);
            for (int j = 0; j < dv; j++) {
                double o = 0;
                for (int i = 0; i < dk; i++) o += Sh[i * dv + j] * q[i];
                out[((size_t)t * nv + h) * dv + j] = o;
            }
        }
}

static void test_gated_delta(void **st) {
    struct { int nk, nv, dk, dv, T; } cases[] = {{1, 1, 3, 5, 1}, {2, 4, 16, 16, 9}, {3, 3, 7, 11, 13}, {1, 3, 17, 9, 6}, {2, 6, 32, 24, 21}};
    uint64_t seed = 11;
    err_t e = {0};
    backend_t *be = backend_create("cpu", 3, &e);
    assert_non_null(be);
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int nk = cases[ci].nk, nv = cases[ci].nv, dk = cases[ci].dk, dv = cases[ci].dv, T = cases[ci].T;
        int stride = 2 * nk * dk + nv * dv + 3; /* a few extra columns: strides are honored */
        float *qkv = malloc(sizeof(float) * T * stride), *a = malloc(sizeof(float) * T * nv), *b = malloc(sizeof(float) * T * nv);
        float A_log[8], dt[8];
        rand_fill(qkv, (size_t)T * stride, &seed, 1.0f);
        rand_fill(a, (size_t)T * nv, &seed, 2.0f);
        rand_fill(b, (size_t)T * nv, &seed, 2.0f);
        for (int h = 0; h < nv; h++) { A_log[h] = 0.5f * tu_rand(&seed); dt[h] = tu_rand(&seed); }
        size_t ns = (size_t)nv * dk * dv;
        float *S1 = calloc(ns, sizeof(float)), *S2 = calloc(ns, sizeof(float)), *S3 = calloc(ns, sizeof(float));
        /* a non-zero starting state, as after a restored snapshot */
        rand_fill(S1, ns, &seed, 0.3f);
        memcpy(S2, S1, sizeof(float) * ns);
        memcpy(S3, S1, sizeof(float) * ns);
        double *Sd = malloc(sizeof(double) * ns), *od = malloc(sizeof(double) * T * nv * dv);
        for (size_t i = 0; i < ns; i++) Sd[i] = S1[i];
        float *o1 = malloc(sizeof(float) * T * nv * dv), *o2 = malloc(sizeof(float) * T * nv * dv), *o3 = malloc(sizeof(float) * T * nv * dv);
        int32_t rs[2] = {0, T};
        float *sp1 = S1, *sp2 = S2, *sp3 = S3;
        delta_args_t d = {1, rs, nk, nv, dk, dv, stride, 1, 1 + 2 * nk * dk, 1 + nk * dk, 1.0f / sqrtf((float)dk), A_log, dt, &sp1};
        ref_gated_delta(o1, qkv, a, b, T, &d, 0, nv);
        delta_naive(od, qkv, a, b, T, &d, Sd);
        for (int i = 0; i < T * nv * dv; i++)
            if (fabs(o1[i] - od[i]) > 1e-5 * (1 + fabs(od[i])))
                fail_msg("gated_delta case %zu: out[%d] = %g, want %g", ci, i, o1[i], od[i]);
        for (size_t i = 0; i < ns; i++)
            if (fabs(S1[i] - Sd[i]) > 1e-5 * (1 + fabs(Sd[i]))) fail_msg("gated_delta case %zu: state[%zu] = %g, want %g", ci, i, S1[i], Sd[i]);
        /* the threaded backend op: bitwise the reference */
        d.state = &sp2;
        be->ops->gated_delta(be, o2, qkv, a, b, T, &d);
        assert_memory_equal(o1, o2, sizeof(float) * T * nv * dv);
        assert_memory_equal(S1, S2, sizeof(float) * ns);
        /* the same sequence fed one token per step: bitwise */
        d.state = &sp3;
        for (int t = 0; t < T; t++) {
            int32_t r1[2] = {0, 1};
            d.row_start = r1;
            ref_gated_delta(o3 + (size_t)t * nv * dv, qkv + (size_t)t * stride, a + (size_t)t * nv, b + (size_t)t * nv, 1, &d, 0, nv);
        }
        assert_memory_equal(o1, o3, sizeof(float) * T * nv * dv);
        free(qkv); free(a); free(b); free(S1); free(S2); free(S3); free(Sd); free(od); free(o1); free(o2); free(o3);
    }
    backend_destroy(be);
}


/* Chunk-parallel vs the recurrence. Error bound: every output and state entry of the chunk
 * form is reached through at most n = dk + 2·C + 8 rounded multiply-adds in sequence (a dot
 * over dk for K·S₀ / Q·S₀ / K·Kᵀ, the forward substitution and P·Δ over ≤ C terms each, the
 * decay factors e^{G_t}·e^{−G_s} a few ulps), and the substitution does not amplify error
 * (I + A is a product of contractions I − β k kᵀ). Each summand is bounded by the size of the
 * state and values involved (~1 + |x|), so |err| ≤ n·u·(1 + |x|) per chunk, with u = 2⁻²⁴;
 * errors carried in the state from earlier chunks decay or stay (the state update is a
 * contraction), so over m chunks the bound is m·n·u·(1 + |x|). The double reference itself
 * is exact to ~1e-15. */
static void test_gated_delta_chunked(void **st) {
    /* nk, nv, dk, dv, C, T, p0 (the row's first position), decay regime (0 mixed, 1 near 0, 2 near 1) */
    struct { int nk, nv, dk, dv, C, T, p0, regime; } cases[] = {
        {1, 2, 7, 11, 8, 37, 3, 0},   {2, 6, 24, 20, 16, 50, 0, 0}, {3, 3, 17, 9, 5, 23, 2, 1},
        {1, 4, 40, 33, 64, 140, 60, 0}, {2, 4, 48, 48, 32, 70, 32, 2}, {1, 3, 19, 27, 12, 61, 7, 1},
        {2, 2, 33, 17, 64, 129, 0, 2}, {1, 1, 9, 13, 3, 10, 1, 0},
    };
    uint64_t seed = 23;
    err_t e = {0};
    backend_t *be = backend_create("cpu", 3, &e);
    assert_non_null(be);
    const simd_kernels_t *sd = simd_detect();
    delta_chunk_fn fams[3] = {delta_chunk_scalar, NULL, NULL};
    const char *fam_names[3] = {"scalar", "avx2", "avx512"};
    if (sd == &simd_avx2 || sd == &simd_avx512) fams[1] = delta_chunk_avx2;
    if (sd == &simd_avx512) fams[2] = delta_chunk_avx512;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int nk = cases[ci].nk, nv = cases[ci].nv, dk = cases[ci].dk, dv = cases[ci].dv, C = cases[ci].C, T = cases[ci].T;
        int p0 = cases[ci].p0, stride = 2 * nk * dk + nv * dv + 1;
        size_t no = (size_t)T * nv * dv, ns = (size_t)nv * dk * dv;
        float *qkv = malloc(sizeof(float) * T * stride), *a = malloc(sizeof(float) * T * nv), *b = malloc(sizeof(float) * T * nv);
        float A_log[8], dt[8];
        rand_fill(qkv, (size_t)T * stride, &seed, 1.0f);
        rand_fill(b, (size_t)T * nv, &seed, 3.0f);
        for (int h = 0; h < nv; h++) {
            int reg = cases[ci].regime;
            A_log[h] = reg == 1 ? 2.5f + 0.5f * tu_rand(&seed) : reg == 2 ? -9.0f + tu_rand(&seed) : 0.8f * tu_rand(&seed);
            dt[h] = reg == 1 ? 4.0f : tu_rand(&seed);
        }
        /* near 0: g ≈ −exp(2.5)·softplus(4 ± 2) ≈ −50 per token; near 1: g ≈ −1e-4 */
        rand_fill(a, (size_t)T * nv, &seed, 2.0f);
        int32_t *pos = malloc(sizeof(int32_t) * T);
        for (int t = 0; t < T; t++) pos[t] = p0 + t;
        float *S0 = malloc(sizeof(float) * ns);
        rand_fill(S0, ns, &seed, 0.5f); /* as after a restored snapshot */
        /* the reference: token by token in double, and in float */
        double *Sd = malloc(sizeof(double) * ns), *od = malloc(sizeof(double) * no);
        for (size_t i = 0; i < ns; i++) Sd[i] = S0[i];
        int32_t rs[2] = {0, T};
        float *Sr = malloc(sizeof(float) * ns), *orf = malloc(sizeof(float) * no);
        memcpy(Sr, S0, sizeof(float) * ns);
        float *sp = Sr;
        delta_args_t d = {.n_rows = 1, .row_start = rs, .n_k_heads = nk, .n_v_heads = nv, .dk = dk, .dv = dv, .stride = stride,
                          .q_off = 1, .k_off = 1 + nk * dk, .v_off = 1 + 2 * nk * dk, .q_scale = 1.0f / sqrtf((float)dk),
                          .A_log = A_log, .dt_bias = dt, .state = &sp};
        delta_naive(od, qkv, a, b, T, &d, Sd);
        ref_gated_delta(orf, qkv, a, b, T, &d, 0, nv);
        d.pos = pos;
        d.chunk = C;
        int first = (p0 + C - 1) / C * C - p0; /* tokens before the first whole chunk */
        int n_chunks = (T - first) / C;
        double bound = (double)(n_chunks + 1) * (dk + 2 * C + 8) * 0x1p-24;
        float *S = malloc(sizeof(float) * ns), *o = malloc(sizeof(float) * no), *o2 = malloc(sizeof(float) * no);
        for (int f = 0; f < 3; f++) {
            if (!fams[f]) continue;
            memcpy(S, S0, sizeof(float) * ns);
            sp = S;
            gated_delta_rows(o, qkv, a, b, &d, 0, nv, fams[f]);
            double worst = 0;
            for (size_t i = 0; i < no; i++) {
                double err = fabs(o[i] - od[i]) / (1 + fabs(od[i]));
                if (err > worst) worst = err;
                if (err > bound) fail_msg("chunked gated_delta case %zu (%s, C=%d): out[%zu] = %.9g, want %.9g (bound %.3g)", ci,
                                          fam_names[f], C, i, o[i], od[i], bound);
            }
            for (size_t i = 0; i < ns; i++) {
                double err = fabs(S[i] - Sd[i]) / (1 + fabs(Sd[i]));
                if (err > worst) worst = err;
                if (err > bound) fail_msg("chunked gated_delta case %zu (%s): state[%zu] = %.9g, want %.9g", ci, fam_names[f], i, S[i], Sd[i]);
            }
            if (f == 0) printf("# chunked case %zu (dk %d dv %d C %d, %d chunks, regime %d): worst rel err %.3g (bound %.3g)\n", ci, dk, dv, C,
                               n_chunks, cases[ci].regime, worst, bound);
            /* the tokens before the first whole chunk ran token by token: bitwise */
            assert_memory_equal(o, orf, sizeof(float) * (first < T ? first : T) * nv * dv);
            /* the row split at a chunk boundary (and once more mid-tail): bitwise the row in one piece */
            if (n_chunks >= 1) {
                int cut = first + C, cut2 = cut + (T - cut) / 2;
                int32_t rs3[4] = {0, cut, cut2, T};
                memcpy(S, S0, sizeof(float) * ns);
                sp = S;
                for (int piece = 0; piece < 3; piece++) {
                    int32_t r1[2] = {0, rs3[piece + 1] - rs3[piece]};
                    int o0 = rs3[piece];
                    delta_args_t dp = d;
                    dp.row_start = r1;
                    dp.pos = pos + o0;
                    gated_delta_rows(o2 + (size_t)o0 * nv * dv, qkv + (size_t)o0 * stride, a + (size_t)o0 * nv, b + (size_t)o0 * nv, &dp, 0, nv, fams[f]);
                }
                /* cut2 splits the tail chunks only when the rest is token by token past cut2 */
                int same = cut2 == T || (cut2 - first) % C == 0 || cut2 >= first + n_chunks * C;
                if (same) assert_memory_equal(o, o2, sizeof(float) * no);
                else assert_memory_equal(o, o2, sizeof(float) * cut * nv * dv);
            }
        }
        /* the threaded backend op: bitwise the single-threaded split with this CPU's family */
        delta_chunk_fn best = fams[2] ? fams[2] : fams[1] ? fams[1] : fams[0];
        memcpy(S, S0, sizeof(float) * ns);
        sp = S;
        gated_delta_rows(o, qkv, a, b, &d, 0, nv, best);
        float *S2 = malloc(sizeof(float) * ns);
        memcpy(S2, S0, sizeof(float) * ns);
        sp = S2;
        be->ops->gated_delta(be, o2, qkv, a, b, T, &d);
        assert_memory_equal(o, o2, sizeof(float) * no);
        assert_memory_equal(S, S2, sizeof(float) * ns);
        free(qkv); free(a); free(b); free(pos); free(S0); free(Sd); free(od); free(Sr); free(orf); free(S); free(S2); free(o); free(o2);
    }
    backend_destroy(be);
}

static void test_gates(void **st) {
    uint64_t seed = 5;
    int T = 7, n = 13;
    float *y = malloc(sizeof(float) * T * n), *y0 = malloc(sizeof(float) * T * n), *g = malloc(sizeof(float) * T * n);
    rand_fill(y0, (size_t)T * n, &seed, 3.0f);
    rand_fill(g, (size_t)T * n, &seed, 4.0f);
    memcpy(y, y0, sizeof(float) * T * n);
    ref_sigmoid_mul(y, g, T, n, n);
    for (int i = 0; i < T * n; i++) assert_true(fabs(y[i] - y0[i] * sigm(g[i])) <= 1e-6 * (1 + fabs(y0[i])));
    memcpy(y, y0, sizeof(float) * T * n);
    ref_sigmoid_mul(y, g, T, n, 1);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < n; i++) assert_true(fabs(y[t * n + i] - y0[t * n + i] * sigm(g[t])) <= 1e-6 * (1 + fabs(y0[t * n + i])));
    memcpy(y, y0, sizeof(float) * T * n);
    ref_scale(y, 0.37f, (size_t)T * n);
    for (int i = 0; i < T * n; i++) assert_true(y[i] == y0[i] * 0.37f);
    /* add_rows_scaled: scattered, weighted, in order */
    int32_t idx[5] = {6, 0, 3, 6, 2};
    float wt[5] = {0.5f, -1.0f, 2.0f, 0.25f, 1.0f};
    float *x = malloc(sizeof(float) * 5 * n);
    rand_fill(x, (size_t)5 * n, &seed, 1.0f);
    memcpy(y, y0, sizeof(float) * T * n);
    ref_add_rows_scaled(y, x, idx, wt, 5, n);
    float *want = malloc(sizeof(float) * T * n);
    memcpy(want, y0, sizeof(float) * T * n);
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < n; j++) want[idx[i] * n + j] += x[i * n + j] * wt[i];
    assert_memory_equal(y, want, sizeof(float) * T * n);
    free(y); free(y0); free(g); free(x); free(want);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_conv1d), cmocka_unit_test(test_gated_delta),
                                       cmocka_unit_test(test_gated_delta_chunked), cmocka_unit_test(test_gates)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
