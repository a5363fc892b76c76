/* test_kernels.c — every SIMD kernel against the scalar reference, on random inputs of
 * odd sizes, for every weight storage (f32, f16, bf16, MLX affine 2/3/4/5/6/8 bits at
 * group sizes 32/64/128). Also: a matmul row computed alone equals the same row inside a
 * bigger T bitwise (the batch-invariance the engine relies on), and dot/axpy/attention. */
#include "../common/test_util.h"
#include "backend/cpu/cpu_kernels.h"
#include "../common/test_weights.h"

static const simd_kernels_t *families[2];
static int n_families, have_amx;

static int setup(void **st) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) families[n_families++] = &simd_avx2;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
        families[n_families++] = &simd_avx512;
    have_amx = n_families == 2 && amx_enable();
    if (have_amx) amx_set(0);
    printf("# SIMD families on this CPU: %d%s\n", n_families, have_amx ? " (and AMX)" : "");
    return 0;
}

static void compare(const weight_t *w, int T, const char *what) {
    uint64_t seed = 99;
    float *x = malloc(sizeof(float) * T * w->cols);
    for (int i = 0; i < T * w->cols; i++) x[i] = tu_rand(&seed);
    float *want = malloc(sizeof(float) * T * w->rows), *got = malloc(sizeof(float) * T * w->rows);
    float *alone = malloc(sizeof(float) * w->rows);
    ref_matmul(want, x, T, w, 0, w->rows);
    /* The same dequantized rows (weight_row_f32, the reference) accumulated in double:
     * at large K the f32 reference's own sequential rounding nears the tolerance, so
     * there the kernels are held to this exact value instead, with the same tolerance. */
    float *exact = malloc(sizeof(float) * T * w->rows), *row = malloc(sizeof(float) * w->cols);
    for (int j = 0; j < w->rows; j++) {
        weight_row_f32(w, j, row);
        for (int t = 0; t < T; t++) {
            double acc = 0;
            for (int k = 0; k < w->cols; k++) acc += (double)x[(size_t)t * w->cols + k] * row[k];
            exact[(size_t)t * w->rows + j] = (float)acc;
        }
    }
    /* the AVX-512 family runs twice where the CPU has AMX: without it and with it; the AVX2
     * family's quantized weights three times: the float tiles, the integer path with
     * vpmaddubsw (2-6 bits; 8-bit: the tiles again) and with AVX-VNNI (where the CPU has it), the
     * 2-6-bit integer paths bitwise equal */
    int q4 = weight_is_quantized(w) && w->bits >= 2 && w->bits <= 6, qi = q4 || (weight_is_quantized(w) && w->bits == 8);
    float *int_bits = q4 ? malloc(sizeof(float) * T * w->rows) : NULL;
    for (int f = 0; f < n_families; f++)
    for (int v = 0; v < 1 + (have_amx && families[f] == &simd_avx512) + 2 * (qi && families[f] == &simd_avx2); v++) {
        static const char *avx2_qi[] = {"avx2 (float tiles)", "avx2 (int madd)", "avx2 (int vnni)"};
        const char *name = families[f] == &simd_avx2 ? (qi ? avx2_qi[v] : "avx2") : v ? "avx512+amx" : families[f]->name;
        if (have_amx) amx_set(families[f] == &simd_avx512 && v);
        if (families[f] == &simd_avx2) avx2_qi_set(qi ? v : -1);
        memset(got, 0, sizeof(float) * T * w->rows);
        /* split the columns unevenly, as threads would */
        int mid = (w->rows / 3) & ~3;
        families[f]->matmul(got, x, T, w, 0, mid);
        families[f]->matmul(got, x, T, w, mid, w->rows);
        double err = tu_rel_err(got, want, (size_t)T * w->rows), err_exact = tu_rel_err(got, exact, (size_t)T * w->rows);
        if (w->cols <= 512 && err > 2e-6) fail_msg("%s %s T=%d %dx%d: rel err %g", name, what, T, w->rows, w->cols, err);
        if (err_exact > 2e-6) fail_msg("%s %s T=%d %dx%d: rel err %g from the exact product", name, what, T, w->rows, w->cols, err_exact);
        /* each x row alone must give bitwise the same outputs as inside the batch */
        for (int t = 0; t < T; t++) {
            families[f]->matmul(alone, x + (size_t)t * w->cols, 1, w, 0, w->rows);
            if (memcmp(alone, got + (size_t)t * w->rows, sizeof(float) * w->rows) != 0)
                fail_msg("%s %s: row %d alone differs from row %d in a batch of %d", name, what, t, t, T);
        }
        if (families[f] == &simd_avx2 && q4 && v == 1) memcpy(int_bits, got, sizeof(float) * T * w->rows);
        if (families[f] == &simd_avx2 && q4 && v == 2 && memcmp(int_bits, got, sizeof(float) * T * w->rows) != 0)
            fail_msg("avx2 %s T=%d %dx%d: the AVX-VNNI integer path differs from the vpmaddubsw one", what, T, w->rows, w->cols);
    }
    if (have_amx) amx_set(0);
    avx2_qi_set(-1);
    free(x); free(want); free(got); free(alone); free(exact); free(row); free(int_bits);
}

static void test_matmul_dense(void **st) {
    const dtype_t dts[] = {DT_F32, DT_F16, DT_BF16};
    /* 37: more x rows than one GEMM block; the last four have K % 32 == 0 (AMX-BF16
     * tiles): one and several blocks of 16 W rows and of 16 x rows, short ones too */
    const int shapes[][3] = {{1, 1, 1}, {3, 7, 5}, {9, 13, 37}, {5, 64, 64}, {17, 33, 129}, {2, 40, 300}, {37, 21, 200},
                             {1, 16, 32}, {17, 35, 96}, {33, 9, 320}, {16, 48, 512}};
    for (int d = 0; d < 3; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            void *buf;
            weight_t w = make_dense(shapes[s][1], shapes[s][2], dts[d], 7 + s, &buf);
            compare(&w, shapes[s][0], dtype_name(dts[d]));
            free(buf);
        }
}

static void test_matmul_quant(void **st) {
    const int bits[] = {2, 3, 4, 5, 6, 8}, groups[] = {32, 64, 128};
    for (int b = 0; b < 6; b++)
        for (int g = 0; g < 3; g++) {
            /* 2 and 3 groups: short last blocks; 17 and 35: past the 16 groups whose
             * scales the fast kernels load at once, with a short last block too */
            const int ngs[] = {2, 3, 17, 35};
            for (int gi = 0; gi < 4; gi++) {
                int cols = groups[g] * ngs[gi], rows = 11;
                void *qb[3];
                weight_t w = make_quant(rows, cols, bits[b], groups[g], 3 + b * 7 + g, qb);
                char what[64];
                snprintf(what, sizeof what, "q%d/g%d", bits[b], groups[g]);
                for (int T = 1; T <= 13; T += 4) compare(&w, T, what);
                if (gi == 1) compare(&w, 37, what); /* more x rows than one GEMM block */
                free_quant(qb);
            }
        }
}

/* 4-bit weights in the shapes that reach the edges of the AMX/VNNI q4 path: several
 * blocks of 16 W rows and a short one, quads of W rows cut short (rows % 4 != 0), a last
 * 128-column block holding 1..3 groups, and x in blocks of 16 rows with a one-row last block
 * (T = 17, 33: that row goes through the VNNI twin inside a tile batch). */
static void test_matmul_q4_blocks(void **st) {
    const int shapes[][3] = {{37, 32, 3}, {37, 64, 3}, {21, 128, 3}, {38, 64, 16}, {19, 32, 35}, {17, 128, 8}};
    const int Ts[] = {1, 2, 16, 17, 33};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        void *qb[3];
        weight_t w = make_quant(shapes[s][0], shapes[s][1] * shapes[s][2], 4, shapes[s][1], 101 + s, qb);
        char what[64];
        snprintf(what, sizeof what, "q4/g%d blocks", shapes[s][1]);
        for (size_t t = 0; t < sizeof Ts / sizeof Ts[0]; t++) compare(&w, Ts[t], what);
        free_quant(qb);
    }
}

/* A 4-bit weight big enough that q4gemm takes x in blocks of 128 rows (a thread's share of
 * the weight >= 1 MB: both column parts compare() splits into, 264 and 536 rows of 4 KB),
 * with T = 130: one full block of 128 x rows and a short one of 2. */
static void test_matmul_q4_big(void **st) {
    void *qb[3];
    weight_t w = make_quant(800, 8192, 4, 64, 211, qb);
    compare(&w, 130, "q4/g64 128-row x blocks");
    free_quant(qb);
}

/* The dense/q8 GEMM (gemm_fk) in blocks of 128 x rows and 512-column panels: T = 130 (a full
 * block and a short one), K past one panel with a ragged tail (1040 = 2·512 + 16; 1088 = 17
 * groups of 64), W rows not a multiple of the 8-row panel. */
static void test_matmul_fk_blocks(void **st) {
    const dtype_t dts[] = {DT_F32, DT_F16, DT_BF16};
    for (int d = 0; d < 3; d++) {
        void *buf;
        weight_t w = make_dense(37, 1040, dts[d], 301 + d, &buf);
        compare(&w, 130, dtype_name(dts[d]));
        free(buf);
    }
    void *qb[3];
    weight_t w = make_quant(21, 1088, 8, 64, 311, qb);
    compare(&w, 130, "q8/g64 x blocks");
    free_quant(qb);
}

/* 4-, 8-, 3- and 6-bit weights and x rows the integer paths scale per group: a NaN (and an Inf) makes its
 * row NaN in every family and leaves the other rows alone; a row of tiny values (groups near
 * 2^-100, and zero groups) keeps its relative accuracy. Each family against the exact product,
 * each row alone bitwise as in the batch. */
static void test_matmul_q4_special(void **st) {
    const int groups[] = {32, 64, 128};
    const int widths[] = {4, 8, 3, 6};
    for (int gi = 0; gi < 12; gi++) {
        int G = groups[gi % 3], K = 5 * G, N = 13, T = 4, bits = widths[gi / 3];
        void *qb[3];
        weight_t w = make_quant(N, K, bits, G, 401 + gi, qb);
        uint64_t seed = 7;
        float *x = malloc(sizeof(float) * T * K), *y = malloc(sizeof(float) * T * N), *alone = malloc(sizeof(float) * N);
        float *row = malloc(sizeof(float) * K);
        for (int i = 0; i < T * K; i++) x[i] = tu_rand(&seed);
        x[1 * K + K / 2] = __builtin_nanf("");
        x[2 * K + 3] = __builtin_inff();
        for (int k = 0; k < K; k++) x[3 * K + k] = k < G ? 0.f : x[3 * K + k] * 0x1p-100f; /* a zero group, then tiny ones */
        for (int f = 0; f < n_families; f++)
            for (int mode = 0; mode < (families[f] == &simd_avx2 ? 3 : 1); mode++) {
                if (families[f] == &simd_avx2) avx2_qi_set(mode);
                families[f]->matmul(y, x, T, &w, 0, N);
                for (int t = 0; t < T; t++) {
                    families[f]->matmul(alone, x + (size_t)t * K, 1, &w, 0, N);
                    for (int j = 0; j < N; j++) {
                        float v = y[(size_t)t * N + j];
                        if (memcmp(&v, &alone[j], 4) != 0 && !(isnan(v) && isnan(alone[j])))
                            fail_msg("%s q%d g%d mode %d: row %d alone differs", families[f]->name, bits, G, mode, t);
                        if (t == 1 && !isnan(v)) fail_msg("%s q%d g%d mode %d: a NaN in x gave %g, not NaN", families[f]->name, bits, G, mode, v);
                        if (t == 2 && isfinite(v)) fail_msg("%s q%d g%d mode %d: an Inf in x gave finite %g", families[f]->name, bits, G, mode, v);
                    }
                }
                for (int t = 0; t < T; t += 3) { /* rows 0 and 3 against the exact product */
                    float exact[64];
                    for (int j = 0; j < N; j++) {
                        weight_row_f32(&w, j, row);
                        double acc = 0;
                        for (int k = 0; k < K; k++) acc += (double)x[(size_t)t * K + k] * row[k];
                        exact[j] = (float)acc;
                    }
                    double err = tu_rel_err(y + (size_t)t * N, exact, N);
                    if (err > 2e-6) fail_msg("%s q%d g%d mode %d: row %d rel err %g from the exact product", families[f]->name, bits, G, mode, t, err);
                }
            }
        avx2_qi_set(-1);
        free(x); free(y); free(alone); free(row);
        free_quant(qb);
    }
}

/* The reference dequantization itself: codes must be read back as written. */
static void test_code_extraction(void **st) {
    for (int bits = 2; bits <= 8; bits++) {
        if (bits == 7) continue;
        uint32_t row[16] = {0};
        int n = 16 * 32 / bits;
        for (int j = 0; j < n; j++) {
            uint64_t code = (uint64_t)(j * 37 + 11) & ((1u << bits) - 1), bit = (uint64_t)j * bits;
            row[bit >> 5] |= (uint32_t)(code << (bit & 31));
            if ((bit & 31) + bits > 32) row[(bit >> 5) + 1] |= (uint32_t)(code >> (32 - (bit & 31)));
        }
        for (int j = 0; j < n; j++) assert_int_equal(weight_code(row, bits, j), (uint32_t)(j * 37 + 11) & ((1u << bits) - 1));
    }
}

static void test_dot_axpy(void **st) {
    uint64_t seed = 5;
    for (int n = 1; n < 300; n += 37) {
        float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n), *y1 = malloc(sizeof(float) * n), *y2 = malloc(sizeof(float) * n);
        double want = 0;
        for (int i = 0; i < n; i++) { a[i] = tu_rand(&seed); b[i] = tu_rand(&seed); want += (double)a[i] * b[i]; y1[i] = y2[i] = tu_rand(&seed); }
        for (int f = 0; f < n_families; f++) {
            float got = families[f]->dot(a, b, n);
            assert_true(fabs(got - want) < 1e-5 * n);
            memcpy(y2, y1, sizeof(float) * n);
            families[f]->axpy(y2, 0.37f, a, n);
            for (int i = 0; i < n; i++) assert_true(fabsf(y2[i] - (y1[i] + 0.37f * a[i])) < 1e-6f);
        }
        free(a); free(b); free(y1); free(y2);
    }
}

/* GELU-tanh GLU of the SIMD families: against g / (1 + exp(-2u)) · up in double from the
 * same f32 u (a few ulps: exp's polynomial, the sum, the division, the product), against
 * the scalar reference (tanhf, whose 1 + tanh cancels for g < 0) to 1e-6 of max |y|, and
 * any slice of the array equal bitwise to the same elements computed in the whole. */
static void test_gelu_glu(void **st) {
    uint64_t seed = 21;
    size_t n = 1000;
    float *g = malloc(sizeof(float) * n), *u = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n),
          *r = malloc(sizeof(float) * n), *z = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) {
        g[i] = i < 600 ? -15.f + 30.f * (float)i / 600.f : 8.f * tu_rand(&seed);
        u[i] = tu_rand(&seed) * 3.f;
    }
    const float special[] = {0.f, -0.f, 1e-30f, -1e-30f, 50.f, -50.f, 1e20f, -1e20f, -9.5f, 9.5f};
    for (int i = 0; i < 10; i++) g[600 + i] = special[i];
    ref_glu(r, g, u, n, ACT_GELU_TANH);
    double mx = 0;
    for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs(r[i]));
    for (int f = 0; f < n_families; f++) {
        families[f]->gelu_glu(y, g, u, n);
        double worst = 0;
        for (size_t i = 0; i < n; i++) {
            float uu = 0.7978845608028654f * (g[i] + 0.044715f * g[i] * g[i] * g[i]);
            double want = (double)g[i] / (1.0 + exp(-2.0 * (double)uu)) * (double)u[i], err = fabs(y[i] - want);
            if (fabs(want) > 1e-30) worst = fmax(worst, err / fabs(want));
            if (err > 3e-7 * fabs(want) + 1e-30) print_error("%s gelu_glu(%g) * %g = %.9g, want %.9g\n", families[f]->name, g[i], u[i], y[i], want);
            assert_true(err <= 3e-7 * fabs(want) + 1e-30);
            assert_true(fabs(y[i] - r[i]) <= 1e-6 * mx);
        }
        printf("# %s gelu_glu: worst relative error %.3g\n", families[f]->name, worst);
        for (size_t a = 0; a < 40; a += 3)
            for (size_t len = 1; a + len <= n; len = len * 2 + 5) {
                families[f]->gelu_glu(z, g + a, u + a, len);
                assert_memory_equal(z, y + a, sizeof(float) * len);
            }
    }
    free(g); free(u); free(y); free(r); free(z);
}

/* An int8 (q8) cache's codes and scales for slots [0, n_slots): random rows (K × kmul) through
 * ref_kv_write, the reference writer (kv->k, kv->v hold n_slots rows of int8; ks/vs allocated here) */
static void q8_fill(kv_view_t *kv, size_t n_slots, float kmul, uint64_t *seed) {
    size_t per = (size_t)kv->n_kv_heads * kv->head_dim;
    kv->ks = malloc(sizeof(float) * n_slots * kv->n_kv_heads);
    kv->vs = malloc(sizeof(float) * n_slots * kv->n_kv_heads);
    float *k = malloc(sizeof(float) * per), *v = malloc(sizeof(float) * per);
    for (size_t sl = 0; sl < n_slots; sl++) {
        for (size_t i = 0; i < per; i++) k[i] = kmul * tu_rand(seed), v[i] = tu_rand(seed);
        int32_t slot = (int32_t)sl;
        ref_kv_write(kv, k, v, &slot, 1);
    }
    free(k); free(v);
}

/* int8 KV rows: each family's q8_row gives kv_q8_row's codes and scale bit for bit (odd lengths,
 * spread magnitudes, zero, NaN and infinite rows), and the codes hold the row: |code·scale − x|
 * within half a step (+ rounding), max |code| = 127 on every finite non-zero row. */
static void test_q8_rows(void **st) {
    uint64_t seed = 5;
    float x[300];
    int8_t c0[300], c1[300];
    for (int n = 1; n <= 300; n += n < 20 ? 1 : 37)
        for (int kind = 0; kind < 6; kind++) {
            for (int i = 0; i < n; i++) x[i] = tu_rand(&seed) * (kind == 1 ? 1e-30f : kind == 2 ? 3e30f : 1.0f) * (i % 7 == 3 ? 9.f : 1.f);
            if (kind == 3) memset(x, 0, sizeof(float) * n);
            if (kind == 4) x[n / 2] = __builtin_nanf("");
            if (kind == 5) x[n - 1] = -__builtin_inff();
            float s0, s1;
            kv_q8_row(c0, 1, &s0, x, n);
            if (kind >= 4) assert_true(isnan(s0));
            else if (kind == 3) assert_true(s0 == 0.f);
            else {
                int mx = 0;
                for (int i = 0; i < n; i++) {
                    double err = fabs((double)c0[i] * s0 - x[i]);
                    if (err > 0.5 * s0 * (1 + 1e-5) + 1e-6 * fabs(x[i])) fail_msg("q8 n=%d kind %d: x[%d]=%g code %d scale %g", n, kind, i, x[i], c0[i], s0);
                    mx = abs(c0[i]) > mx ? abs(c0[i]) : mx;
                }
                assert_int_equal(mx, 127);
            }
            for (int f = 0; f < n_families; f++) {
                if (!families[f]->q8_row) continue;
                memset(c1, 0x55, sizeof c1);
                families[f]->q8_row(c1, &s1, x, n);
                assert_memory_equal(c1, c0, (size_t)n);
                assert_true(memcmp(&s0, &s1, 4) == 0 || (isnan(s0) && isnan(s1)));
                assert_int_equal(c1[n < 300 ? n : 299], n < 300 ? 0x55 : c0[299]); /* nothing past n written */
            }
        }
}

/* Paged attention: SIMD against reference, with a scattered block table, GQA, a window
 * and soft-capping, in every KV dtype. */
static void test_attention(void **st) {
    const dtype_t kdt[] = {DT_F32, DT_F16, DT_BF16, DT_I8};
    int nh = 4, nkv = 2, hd = 20, bs = 4, nblocks = 16, ctx = 23;
    for (int d = 0; d < 4; d++)
        for (int variant = 0; variant < 3; variant++) {
            uint64_t seed = 11 + d * 3 + variant;
            size_t per = (size_t)nkv * hd;
            void *K = calloc((size_t)nblocks * bs * per, 4), *Vv = calloc((size_t)nblocks * bs * per, 4);
            kv_view_t kv = {K, Vv, kdt[d], bs, nkv, hd};
            if (kdt[d] == DT_I8) q8_fill(&kv, (size_t)nblocks * bs, 1.f, &seed);
            else
                for (size_t i = 0; i < (size_t)nblocks * bs * per; i++) {
                    store_from_f32(K, kdt[d], i, tu_rand(&seed));
                    store_from_f32(Vv, kdt[d], i, tu_rand(&seed));
                }
            int32_t table0[] = {7, 2, 11, 0, 5, 9}, table1[] = {3, 14, 1};
            const int32_t *tables[] = {table0, table1};
            /* row 0: 5 tokens at positions 18..22; row 1: 1 token at position 9 */
            int32_t rs[] = {0, 5, 6}, pos[] = {18, 19, 20, 21, 22, 9};
            int T = 6;
            float *q = malloc(sizeof(float) * T * nh * hd), *o1 = malloc(sizeof(float) * T * nh * hd), *o2 = malloc(sizeof(float) * T * nh * hd);
            for (int i = 0; i < T * nh * hd; i++) q[i] = tu_rand(&seed);
            attn_args_t a = {2, rs, pos, tables, nh, nkv, hd, 1.0f / sqrtf(hd), variant == 2 ? 5.0f : 0.f, variant == 1 ? 6 : 0, kv};
            float *scratch = malloc(sizeof(float) * (simd_attention_scratch(&a) + 64));
            ref_attention(o1, q, 0, T, &a, scratch);
            for (int f = 0; f < n_families; f++) {
                simd_attention(families[f], o2, q, 0, T, &a, scratch);
                double err = tu_rel_err(o2, o1, (size_t)T * nh * hd);
                if (err > 1e-5) fail_msg("%s attention kv %s variant %d: rel err %g", families[f]->name, dtype_name(kdt[d]), variant, err);
                /* tokens computed in separate calls give the same bits */
                float *o3 = malloc(sizeof(float) * T * nh * hd);
                simd_attention(families[f], o3, q, 0, 2, &a, scratch);
                simd_attention(families[f], o3, q, 2, T, &a, scratch);
                assert_memory_equal(o3, o2, sizeof(float) * T * nh * hd);
                free(o3);
            }
            (void)ctx;
            free(K); free(Vv); free(kv.ks); free(kv.vs); free(q); free(o1); free(o2); free(scratch);
        }
}

/* The tiled kernel over contexts of several key blocks (AT_KB = 32 positions): odd head
 * sizes, GQA groups 1..40 (more query heads than a tile's lanes), windows that start
 * inside a block, soft-capping, every KV dtype, scattered block tables. A prefill chunk,
 * a decode row and a chunk from position 0 share the step. Against the reference, and
 * bitwise: the whole step = token by token = uneven splits = each row in a step alone. */
static void test_attention_tiles(void **st) {
    /* kt: K transposed per block (the CPU pool's layout; the int8 decode path reads it only) */
    static const struct { int nh, nkv, hd, bs, window; float softcap; dtype_t dt; int kt; } cf[] = {
        {6, 2, 37, 5, 0, 0.f, DT_F16},   {3, 3, 20, 16, 45, 0.f, DT_BF16}, {8, 2, 64, 16, 0, 30.f, DT_F32},
        {12, 4, 128, 7, 70, 0.f, DT_F16}, {40, 1, 24, 4, 0, 0.f, DT_BF16},  {4, 1, 9, 3, 33, 8.f, DT_F16},
        {6, 2, 37, 5, 0, 0.f, DT_I8},    {8, 2, 64, 16, 0, 0.f, DT_I8, 1}, {12, 4, 128, 16, 70, 0.f, DT_I8, 1},
        {6, 6, 32, 32, 0, 20.f, DT_I8, 1}, {12, 4, 128, 7, 0, 0.f, DT_I8},
    };
    for (size_t c = 0; c < sizeof cf / sizeof cf[0]; c++) {
        uint64_t seed = 101 + c;
        int nh = cf[c].nh, nkv = cf[c].nkv, hd = cf[c].hd, bs = cf[c].bs;
        /* rows: 37 tokens at 100..136; one token at 130; 21 tokens at 0..20 */
        int32_t rs[] = {0, 37, 38, 59}, pos[59];
        for (int i = 0; i < 37; i++) pos[i] = 100 + i;
        pos[37] = 130;
        for (int i = 0; i < 21; i++) pos[38 + i] = i;
        int T = 59, nb = (137 + bs - 1) / bs, nblocks = 3 * nb;
        int32_t *tab[3];
        for (int r = 0; r < 3; r++) {
            tab[r] = malloc(sizeof(int32_t) * nb);
            for (int i = 0; i < nb; i++) tab[r][i] = (r * nb + i * 7) % nblocks; /* scattered (rows may share blocks) */
        }
        const int32_t *tables[] = {tab[0], tab[1], tab[2]};
        size_t per = (size_t)nkv * hd, n = (size_t)nblocks * bs * per;
        void *K = calloc(n, 4), *Vv = calloc(n, 4);
        kv_view_t kv = {K, Vv, cf[c].dt, bs, nkv, hd, cf[c].kt};
        if (cf[c].dt == DT_I8) q8_fill(&kv, (size_t)nblocks * bs, 3.0f, &seed);
        else
            for (size_t i = 0; i < n; i++) {
                store_from_f32(K, cf[c].dt, i, 3.0f * tu_rand(&seed)); /* peaked scores: the max matters */
                store_from_f32(Vv, cf[c].dt, i, tu_rand(&seed));
            }
        size_t qn = (size_t)T * nh * hd;
        float *q = malloc(sizeof(float) * qn), *want = malloc(sizeof(float) * qn), *o1 = malloc(sizeof(float) * qn),
              *o2 = malloc(sizeof(float) * qn);
        for (size_t i = 0; i < qn; i++) q[i] = tu_rand(&seed);
        attn_args_t a = {3, rs, pos, tables, nh, nkv, hd, 1.0f / sqrtf(hd), cf[c].softcap, cf[c].window, kv};
        float *scratch = malloc(sizeof(float) * (simd_attention_scratch(&a) + 200));
        ref_attention(want, q, 0, T, &a, scratch);
        for (int f = 0; f < n_families; f++) {
            simd_attention(families[f], o1, q, 0, T, &a, scratch);
            double err = tu_rel_err(o1, want, qn);
            if (err > 1e-5) fail_msg("%s tiles config %zu: rel err %g", families[f]->name, c, err);
            for (int t = 0; t < T; t++) simd_attention(families[f], o2, q, t, t + 1, &a, scratch);
            assert_memory_equal(o2, o1, sizeof(float) * qn);
            const int cuts[] = {0, 5, 6, 29, 40, 41, 59};
            memset(o2, 0, sizeof(float) * qn);
            for (int k = 0; k + 1 < 7; k++) simd_attention(families[f], o2, q, cuts[k], cuts[k + 1], &a, scratch);
            assert_memory_equal(o2, o1, sizeof(float) * qn);
            for (int r = 0; r < 3; r++) { /* the row alone in its step */
                int32_t rs1[] = {0, rs[r + 1] - rs[r]};
                attn_args_t a1 = a;
                a1.n_rows = 1, a1.row_start = rs1, a1.pos = pos + rs[r], a1.block_tables = tables + r;
                size_t off = (size_t)rs[r] * nh * hd;
                simd_attention(families[f], o2, q + off, 0, rs1[1], &a1, scratch);
                assert_memory_equal(o2, o1 + off, sizeof(float) * rs1[1] * nh * hd);
            }
        }
        for (int r = 0; r < 3; r++) free(tab[r]);
        free(K); free(Vv); free(kv.ks); free(kv.vs); free(q); free(want); free(o1); free(o2); free(scratch);
    }
}

/* A decode step split over the context (attention_cpu.c: items of KV-head groups × runs of
 * segments of 32/128/96 positions, with and without big first runs, merged in segment
 * order): bitwise the unsplit tiles whatever the thread count the plan is made for (the
 * items run here in reverse order), each row alone in its step too, and against the
 * reference. Contexts of 1, 15, 16, 17, 511, 513 and 2049
 * positions, GQA 2/3/8/1, windows, soft-capping, every KV dtype, scattered blocks. */
static void test_attention_split(void **st) {
    static const struct { int nh, nkv, hd, bs, window; float softcap; dtype_t dt; int kt; } cf[] = {
        {16, 8, 128, 16, 0, 0.f, DT_F16}, {12, 4, 64, 7, 0, 0.f, DT_BF16}, {8, 1, 40, 5, 300, 0.f, DT_F32},
        {6, 6, 128, 16, 0, 20.f, DT_F16}, {9, 3, 24, 3, 1000, 0.f, DT_F16}, {4, 2, 16, 16, 130, 0.f, DT_F16},
        {16, 8, 128, 16, 0, 0.f, DT_I8, 1}, {9, 3, 24, 3, 1000, 0.f, DT_I8},
    };
    static const int ctx[] = {1, 15, 16, 17, 511, 513, 2049};
    enum { R = 7 };
    for (size_t c = 0; c < sizeof cf / sizeof cf[0]; c++) {
        uint64_t seed = 301 + c;
        int nh = cf[c].nh, nkv = cf[c].nkv, hd = cf[c].hd, bs = cf[c].bs;
        int32_t rs[R + 1], pos[R];
        for (int r = 0; r <= R; r++) rs[r] = r;
        for (int r = 0; r < R; r++) pos[r] = ctx[r] - 1;
        int nb = (2049 + bs - 1) / bs, nblocks = 2 * nb + 1;
        int32_t *tab[R];
        for (int r = 0; r < R; r++) {
            tab[r] = malloc(sizeof(int32_t) * nb);
            for (int i = 0; i < nb; i++) tab[r][i] = (r * 5 + i * 7) % nblocks; /* scattered, shared */
        }
        const int32_t *tables[R];
        for (int r = 0; r < R; r++) tables[r] = tab[r];
        size_t per = (size_t)nkv * hd, n = (size_t)nblocks * bs * per;
        void *K = calloc(n, 4), *Vv = calloc(n, 4);
        kv_view_t kv = {K, Vv, cf[c].dt, bs, nkv, hd, cf[c].kt};
        if (cf[c].dt == DT_I8) q8_fill(&kv, (size_t)nblocks * bs, 3.0f, &seed);
        else
            for (size_t i = 0; i < n; i++) {
                store_from_f32(K, cf[c].dt, i, 3.0f * tu_rand(&seed));
                store_from_f32(Vv, cf[c].dt, i, tu_rand(&seed));
            }
        size_t qn = (size_t)R * nh * hd;
        float *q = malloc(sizeof(float) * qn), *want = malloc(sizeof(float) * qn), *o1 = malloc(sizeof(float) * qn),
              *o2 = malloc(sizeof(float) * qn);
        for (size_t i = 0; i < qn; i++) q[i] = tu_rand(&seed);
        attn_args_t a = {R, rs, pos, tables, nh, nkv, hd, 1.0f / sqrtf(hd), cf[c].softcap, cf[c].window, kv};
        size_t sn = simd_attention_scratch(&a) + 200;
        float *scratch = malloc(sizeof(float) * (sn > 4096 ? sn : 4096));
        ref_attention(want, q, 0, R, &a, scratch);
        for (int f = 0; f < n_families; f++)
        for (int sg = 0; sg < 3; sg++) {
            simd_attention_set_seg(sg == 0 ? 128 : sg == 1 ? 32 : 96);
            simd_attention(families[f], o1, q, 0, R, &a, scratch);
            double err = tu_rel_err(o1, want, qn);
            if (err > 1e-5) fail_msg("%s split config %zu seg %d: unsplit rel err %g", families[f]->name, c, sg, err);
            for (int nt = 2; nt <= 5; nt += 3) {
                memset(o2, 0, sizeof(float) * qn);
                simd_attention_split(families[f], o2, q, 0, R, &a, scratch, nt, nt == 2 ? 0 : 60);
                assert_memory_equal(o2, o1, sizeof(float) * qn);
                for (int r = 0; r < R; r++) { /* the row alone in its step */
                    int32_t rs1[] = {0, 1};
                    attn_args_t a1 = a;
                    a1.n_rows = 1, a1.row_start = rs1, a1.pos = pos + r, a1.block_tables = tables + r;
                    size_t off = (size_t)r * nh * hd;
                    simd_attention_split(families[f], o2, q + off, 0, 1, &a1, scratch, nt, nt == 2 ? 70 : 0);
                    assert_memory_equal(o2, o1 + off, sizeof(float) * nh * hd);
                }
            }
            printf("# %s split config %zu seg %d: rel err vs ref %.3g\n", families[f]->name, c, sg, err);
        }
        simd_attention_set_seg(-1);
        for (int r = 0; r < R; r++) free(tab[r]);
        free(K); free(Vv); free(kv.ks); free(kv.vs); free(q); free(want); free(o1); free(o2); free(scratch);
    }
}

static void test_conversions(void **st) {
    /* f16: every value round-trips; bf16: rounding is nearest-even */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = f16_to_f32((uint16_t)h);
        if (isnan(f)) continue;
        assert_int_equal(f32_to_f16(f), h);
    }
    assert_int_equal(f32_to_bf16(1.0f), 0x3f80);
    float f;
    uint32_t u = 0x3f808000; /* exactly halfway between 0x3f80 and 0x3f81: to even */
    memcpy(&f, &u, 4);
    assert_int_equal(f32_to_bf16(f), 0x3f80);
    u = 0x3f818000;
    memcpy(&f, &u, 4);
    assert_int_equal(f32_to_bf16(f), 0x3f82);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conversions),   cmocka_unit_test(test_code_extraction), cmocka_unit_test(test_matmul_dense),
        cmocka_unit_test(test_matmul_quant), cmocka_unit_test(test_matmul_q4_blocks),
        cmocka_unit_test(test_matmul_q4_big), cmocka_unit_test(test_matmul_q4_special),
        cmocka_unit_test(test_matmul_fk_blocks),  cmocka_unit_test(test_dot_axpy),        cmocka_unit_test(test_gelu_glu),        cmocka_unit_test(test_q8_rows), cmocka_unit_test(test_attention),
        cmocka_unit_test(test_attention_tiles), cmocka_unit_test(test_attention_split),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
