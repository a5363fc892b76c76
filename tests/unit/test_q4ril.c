/* test_q4ril.c — 4-bit MLX weights in the rows-in-lanes layout WL_Q_RIL16 through the AVX-512
 * family (matmul_q4ril_avx512.c for rows in full tiles, the row-major q4i kernel for the
 * N % 16 tail), on CPUs with AVX512-VNNI; 2/3/5/6-bit weights in its planes (weight.h)
 * through the same kernels (their tail rows through the row-major low-bit kernels); and 2- to
 * 8-bit weights through the AVX2 family (matmul_q4ril_avx2.c, matmul_q8ril_avx2.c; the tail
 * rows through matmul_qi_avx2.c or the float tiles) by vpmaddubsw and, where the CPU has it,
 * AVX-VNNI — which must give the same bits. Each of:
 *   1. against the scalar reference (ref_matmul on the stored weight, and the exact product of
 *      weight_row_f32's rows of the PACKED weight in double) at 2e-6, as the q4i path: N in
 *      {16, 33, 48, 100}, K/G with K % 128 != 0, G 32/64/128, bf16/f16/f32 scales, T = 1 and
 *      T in {2, 5, 17, 37}; row ranges split inside a tile, as threads split them, and
 *      ranges [0, 5), [5, 37), [37, N) bitwise the whole call;
 *   2. bitwise: each token of a T-token call equals the T = 1 call of that token (matmul and
 *      matmul_rows), and a view of whole tiles equals those rows of the whole weight;
 *   3. a NaN in x makes that token's whole output row NaN and leaves the others bitwise;
 *   4. unpack_weight restores every stored byte of the codes (and the planes' codes are the
 *      stored codes: 1 compares against ref_matmul on the stored weight). */
#include "../common/test_util.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_pack.h"
#include "../common/test_weights.h"

static const simd_kernels_t *avx512;
static int avx2_ok;
static const simd_kernels_t *fam; /* the family under test */

static int setup(void **st) {
    __builtin_cpu_init();
    setenv("KILN_PACK_Q4", "1", 1); /* whatever the default: this test is about the layout */
    setenv("KILN_PACK_QB", "1", 1);
    const char *fma = getenv("KILN_Q4_FMA");
    if (fma && *fma == '1') return 0; /* the float q4 path: no packing */
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512vnni"))
        avx512 = &simd_avx512;
    avx2_ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return 0;
}

/* scales/biases of w (bf16 from make_quant) rewritten in dt; bufs[1..2] replaced */
static void sb_to(weight_t *w, dtype_t dt, void **bufs) {
    if (dt == DT_BF16) return;
    size_t n = (size_t)w->rows * (w->cols / w->group);
    for (int k = 1; k <= 2; k++) {
        void *o = malloc(n * dtype_size(dt));
        for (size_t i = 0; i < n; i++) store_from_f32(o, dt, i, load_as_f32(bufs[k], DT_BF16, i));
        free(bufs[k]);
        bufs[k] = o;
    }
    w->scales = bufs[1]; w->biases = bufs[2]; w->sb_dtype = dt;
}

/* decode through matmul_rows with one range [0, N) handed out in chunks of 16 */
static void via_rows(float *y, const float *x, const weight_t *w) {
    mm_range_t rg[1];
    atomic_init(&rg[0].v, (uint64_t)(uint32_t)w->rows << 32);
    mm_rows_t r = {rg, 1, 0, 16};
    if (!fam->matmul_rows) { /* the AVX2 family: no hand-out, its matmul on the whole range */
        fam->matmul(y, x, 1, w, 0, w->rows);
        return;
    }
    if (!fam->matmul_rows(y, x, w, &r)) fail_msg("matmul_rows did not take a WL_Q_RIL16 weight");
}

static void check_b(int N, int K, int B, int G, dtype_t sbt, uint64_t seed) {
    void *bufs[3];
    weight_t w = make_quant(N, K, B, G, seed, bufs);
    size_t code_bytes = (size_t)N * K * B / 8;
    void *stored = malloc(code_bytes);
    memcpy(stored, w.data, code_bytes);
    sb_to(&w, sbt, bufs);
    const int Ts[] = {1, 2, 5, 17, 37};
    int maxT = 37;
    float *x = malloc(sizeof(float) * maxT * K);
    uint64_t s = seed * 31 + 7;
    for (int i = 0; i < maxT * K; i++) x[i] = tu_rand(&s); /* test_kernels' inputs */
    float *want = malloc(sizeof(float) * maxT * N), *exact = malloc(sizeof(float) * maxT * N);
    float *got = malloc(sizeof(float) * maxT * N), *alone = malloc(sizeof(float) * N), *rows = malloc(sizeof(float) * N);
    float *row = malloc(sizeof(float) * K);
    ref_matmul(want, x, maxT, &w, 0, N); /* stored order */
    /* (the AVX2 family packs 8-bit weights only where AVX-VNNI runs; its vpmaddubsw tiles still
     * take a weight packed before a switch, which is what this checks for them) */
    int layout = fam == &simd_avx2 && B == 8 && avx2_qi_mode() != 2 ? WL_ROWS : WL_Q_RIL16;
    if (fam->pack_layout(&w) != layout) fail_msg("pack_layout: %d, not %d, for q%d %dx%d g%d", fam->pack_layout(&w), layout, B, N, K, G);
    if (pack_weight(&w, WL_Q_RIL16) || w.layout != WL_Q_RIL16) fail_msg("pack_weight failed");
    for (int j = 0; j < N; j++) {
        weight_row_f32(&w, j, row); /* the packed weight's rows */
        for (int t = 0; t < maxT; t++) {
            double acc = 0;
            for (int k = 0; k < K; k++) acc += (double)x[(size_t)t * K + k] * row[k];
            exact[(size_t)t * N + j] = (float)acc;
        }
    }
    for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++) {
        int T = Ts[ti];
        memset(got, 0, sizeof(float) * T * N);
        int mid = (N / 3) & ~3; /* inside a tile for N = 33, 48, 100 */
        fam->matmul(got, x, T, &w, 0, mid);
        fam->matmul(got, x, T, &w, mid, N);
        double err = tu_rel_err(got, want, (size_t)T * N), errx = tu_rel_err(got, exact, (size_t)T * N);
        if (K <= 512 && err > 2e-6) fail_msg("q%dril %dx%d g%d %s T=%d: rel err %g", B, N, K, G, dtype_name(sbt), T, err);
        if (errx > 2e-6) fail_msg("q%dril %dx%d g%d %s T=%d: rel err %g from the exact product", B, N, K, G, dtype_name(sbt), T, errx);
        /* any row ranges, e.g. [5, 37): tiles cut by a range are computed whole, stored masked */
        {
            int cuts[] = {0, 5 < N ? 5 : N, 37 < N ? 37 : N, N};
            float *part = malloc(sizeof(float) * T * N);
            for (int c = 0; c < 3; c++)
                if (cuts[c] < cuts[c + 1]) fam->matmul(part, x, T, &w, cuts[c], cuts[c + 1]);
            if (memcmp(part, got, sizeof(float) * T * N)) fail_msg("q%dril %dx%d g%d T=%d: ranges [0,5) [5,37) [37,N) differ", B, N, K, G, T);
            free(part);
        }
        for (int t = 0; t < T; t++) {
            fam->matmul(alone, x + (size_t)t * K, 1, &w, 0, N);
            if (memcmp(alone, got + (size_t)t * N, sizeof(float) * N))
                fail_msg("q%dril %dx%d g%d T=%d: token %d alone differs from the batch", B, N, K, G, T, t);
            via_rows(rows, x + (size_t)t * K, &w);
            if (memcmp(rows, alone, sizeof(float) * N)) fail_msg("q%dril %dx%d g%d: matmul_rows differs from matmul", B, N, K, G);
        }
    }
    /* a view of whole tiles [16, 16·⌊N/16⌋) is the same rows */
    if (N >= 32) {
        int a = 1, b = N / 16, nw = K * B / 32, ng = K / G;
        size_t sz = dtype_size(sbt);
        weight_t v = w;
        v.rows = (b - a) * 16;
        v.data = (const uint32_t *)w.data + (size_t)a * 16 * nw;
        v.scales = (const char *)w.scales + (size_t)a * 16 * ng * sz;
        v.biases = (const char *)w.biases + (size_t)a * 16 * ng * sz;
        float *yv = malloc(sizeof(float) * 5 * v.rows);
        fam->matmul(yv, x, 5, &v, 0, v.rows);
        for (int t = 0; t < 5; t++)
            if (memcmp(yv + (size_t)t * v.rows, got + (size_t)t * N + 16 * a, sizeof(float) * v.rows))
                fail_msg("q%dril %dx%d g%d: a view of tiles differs", B, N, K, G);
        free(yv);
    }
    /* NaN (and Inf) in x: that token's row is all NaN, the others unchanged */
    {
        int T = 5;
        float *xn = malloc(sizeof(float) * T * K), *yn = malloc(sizeof(float) * T * N);
        memcpy(xn, x, sizeof(float) * T * K);
        xn[1 * K + K / 2 + 1] = NAN;
        xn[3 * K + 5] = INFINITY;
        fam->matmul(yn, xn, T, &w, 0, N);
        fam->matmul(got, x, T, &w, 0, N);
        /* the AVX2 family's 8-bit tail rows without AVX-VNNI take the float tiles, where an Inf in x
         * is an IEEE Inf (or NaN) in the sum: not finite is what those rows promise */
        int float_tail = fam == &simd_avx2 && B == 8 && avx2_qi_mode() != 2;
        for (int t = 0; t < T; t++)
            for (int j = 0; j < N; j++) {
                float v = yn[(size_t)t * N + j];
                if (float_tail && j >= (N & ~15) && (t == 1 || t == 3)) {
                    if (isfinite(v)) fail_msg("q%dril %dx%d g%d: token %d tail row %d = %g, finite", B, N, K, G, t, j, v);
                } else if (t == 1 || t == 3) {
                    if (!isnan(v)) fail_msg("q%dril %dx%d g%d: token %d row %d = %g, not NaN", B, N, K, G, t, j, v);
                } else if (memcmp(&v, &got[(size_t)t * N + j], 4)) fail_msg("q%dril %dx%d g%d: NaN leaked into token %d", B, N, K, G, t);
            }
        via_rows(alone, xn + 1 * (size_t)K, &w);
        for (int j = 0; j < N; j++)
            if (!isnan(alone[j])) fail_msg("q4ril decode: row %d not NaN", j); /* (token 1: a NaN, NaN on every path) */
        free(xn); free(yn);
    }
    if (unpack_weight(&w) || w.layout != WL_ROWS) fail_msg("unpack_weight failed");
    if (memcmp(w.data, stored, code_bytes)) fail_msg("q%d %dx%d g%d: unpack_weight did not restore the stored codes", B, N, K, G);
    free(stored);
    free(x); free(want); free(exact); free(got); free(alone); free(rows); free(row);
    free_quant(bufs);
}

static void check(int N, int K, int G, dtype_t sbt, uint64_t seed) { check_b(N, K, 4, G, sbt, seed); }

/* The AVX2 family: check() by vpmaddubsw, and by AVX-VNNI where the CPU has it; both packed
 * weights' results bitwise equal (a 37-token call and a decode call). */
static void check_avx2(int N, int K, int B, int G, dtype_t sbt, uint64_t seed) {
    fam = &simd_avx2;
    int was = avx2_qi_set(1), vnni = avx2_qi_set(2) == 1 && avx2_qi_mode() == 2;
    avx2_qi_set(1);
    check_b(N, K, B, G, sbt, seed);
    if (vnni) {
        avx2_qi_set(2);
        check_b(N, K, B, G, sbt, seed);
        void *bufs[3];
        weight_t w = make_quant(N, K, B, G, seed, bufs);
        sb_to(&w, sbt, bufs);
        if (pack_weight(&w, WL_Q_RIL16)) fail_msg("pack_weight failed");
        float *x = malloc(sizeof(float) * 37 * K), *y[2], *y1[2];
        uint64_t s = seed * 31 + 7;
        for (int i = 0; i < 37 * K; i++) x[i] = tu_rand(&s);
        for (int m = 0; m < 2; m++) {
            avx2_qi_set(m ? 2 : 1);
            y[m] = malloc(sizeof(float) * 37 * N), y1[m] = malloc(sizeof(float) * N);
            fam->matmul(y[m], x, 37, &w, 0, N);
            fam->matmul(y1[m], x + 5 * (size_t)K, 1, &w, 0, N);
        }
        /* every row at 4 bits; at 8 the tiles' rows (the tail rows take the float tiles without VNNI) */
        int nc = B == 8 ? N & ~15 : N;
        for (int t = 0; t < 37; t++)
            if (memcmp(y[0] + (size_t)t * N, y[1] + (size_t)t * N, sizeof(float) * nc))
                fail_msg("avx2 q%dril %dx%d g%d: vpmaddubsw and AVX-VNNI differ (token %d)", B, N, K, G, t);
        if (memcmp(y1[0], y1[1], sizeof(float) * nc)) fail_msg("avx2 q%dril %dx%d g%d: decode differs by path", B, N, K, G);
        for (int m = 0; m < 2; m++) free(y[m]), free(y1[m]);
        free(x);
        free_quant(bufs);
    }
    avx2_qi_set(was);
}

static void test_q4ril_vs_ref(void **st) {
    if (!avx512) skip();
    fam = avx512;
    const int Ns[] = {16, 33, 48, 100};
    const int KG[][2] = {{128, 32}, {128, 64}, {128, 128}, {384, 32}, {384, 64}, {384, 128}, {1024, 32}, {1024, 64}, {1024, 128},
                         {320, 32}, {320, 64}, {192, 64}, {640, 128}};
    uint64_t seed = 1;
    for (size_t n = 0; n < 4; n++)
        for (size_t k = 0; k < sizeof KG / sizeof KG[0]; k++) check(Ns[n], KG[k][0], KG[k][1], DT_BF16, seed++);
}

static void test_q4ril_sb_dtypes(void **st) {
    if (!avx512) skip();
    fam = avx512;
    check(33, 320, 64, DT_F16, 101);
    check(48, 256, 128, DT_F32, 102);
    check(100, 384, 32, DT_F32, 103);
}

/* 2, 3, 5, 6 bits in planes: the same checks on fewer shapes (every group size, K with K % 128 != 0) */
static void test_qbril_vs_ref(void **st) {
    if (!avx512) skip();
    fam = avx512;
    const int Ns[] = {16, 33, 100}, Bs[] = {2, 3, 5, 6};
    const int KG[][2] = {{128, 32}, {384, 64}, {1024, 128}, {320, 32}, {192, 64}, {640, 128}};
    uint64_t seed = 201;
    for (size_t b = 0; b < 4; b++)
        for (size_t n = 0; n < 3; n++)
            for (size_t k = 0; k < sizeof KG / sizeof KG[0]; k++) check_b(Ns[n], KG[k][0], Bs[b], KG[k][1], DT_BF16, seed++);
    check_b(48, 256, 3, 128, DT_F32, seed++);
    check_b(33, 320, 6, 64, DT_F16, seed++);
}

/* The AVX2 family's 4- and 8-bit tiles, and 2/3/5/6-bit in planes: every group size, N with a
 * tail and without, K % 128 != 0, the three scale dtypes */
static void test_qril_avx2(void **st) {
    if (!avx2_ok) skip();
    const int Ns[] = {16, 33, 48, 100};
    const int KG[][2] = {{128, 32}, {128, 64}, {128, 128}, {384, 64}, {1024, 32}, {1024, 128}, {320, 32}, {320, 64}, {192, 64}, {640, 128}};
    uint64_t seed = 301;
    for (int B = 4; B <= 8; B += 4) {
        for (size_t n = 0; n < 4; n++)
            for (size_t k = 0; k < sizeof KG / sizeof KG[0]; k++) check_avx2(Ns[n], KG[k][0], B, KG[k][1], DT_BF16, seed++);
        check_avx2(33, 320, B, 64, DT_F16, seed++);
        check_avx2(48, 256, B, 128, DT_F32, seed++);
        check_avx2(100, 384, B, 32, DT_F32, seed++);
    }
    /* 2, 3, 5, 6 bits in planes (the tail rows through the row-major integer path) */
    const int Bs[] = {2, 3, 5, 6}, Nb[] = {16, 33, 100};
    const int KGb[][2] = {{128, 32}, {384, 64}, {1024, 128}, {320, 32}, {192, 64}, {640, 128}};
    for (size_t b = 0; b < 4; b++)
        for (size_t n = 0; n < 3; n++)
            for (size_t k = 0; k < sizeof KGb / sizeof KGb[0]; k++) check_avx2(Nb[n], KGb[k][0], Bs[b], KGb[k][1], DT_BF16, seed++);
    check_avx2(48, 256, 3, 128, DT_F32, seed++);
    check_avx2(33, 320, 6, 64, DT_F16, seed++);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_q4ril_vs_ref), cmocka_unit_test(test_q4ril_sb_dtypes),
                                       cmocka_unit_test(test_qbril_vs_ref), cmocka_unit_test(test_qril_avx2)};
    return cmocka_run_group_tests(tests, setup, NULL);
}
