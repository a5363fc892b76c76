/* test_pack.c — weights packed in place for the CPU kernels (backend/cpu/cpu_pack.h):
 *   1. pack_weight to WL_Q_RIL16 and back restores every byte of codes, scales and biases;
 *      packed, weight_row_f32 reads every row exactly as before (2, 3, 4, 5, 6 and 8 bits —
 *      2/3/5/6 re-encoded in planes —, row counts with and without a tail of N % 16, groups
 *      32/64/128);
 *   2. pack_fits refuses what no kernel reads (planes with K % 32 != 0, 7 bits, fewer than 16 rows);
 *   3. the registry: a second prepare of the same tensor (tied lm_head) is not packed
 *      twice; a view of whole tiles takes the layout; a view that is not on whole tiles
 *      unpacks the region (bytes as stored again) and every later view stays unpacked;
 *      a weight no layout is wanted for is left alone, and so are views of it. */
#include "../common/test_util.h"
#include "backend/cpu/cpu_pack.h"
#include "../common/test_weights.h"

typedef struct { void *buf[3]; weight_t w; size_t cb, sb; void *copy[3]; } qw_t;

static qw_t qw_make(int rows, int cols, int bits, int group, uint64_t seed) {
    qw_t q;
    q.w = make_quant(rows, cols, bits, group, seed, q.buf);
    q.cb = (size_t)rows * cols * bits / 8;
    q.sb = (size_t)rows * (cols / group) * 2;
    size_t n[3] = {q.cb, q.sb, q.sb};
    for (int i = 0; i < 3; i++) {
        q.copy[i] = malloc(n[i]);
        memcpy(q.copy[i], q.buf[i], n[i]);
    }
    return q;
}
static int qw_as_stored(const qw_t *q) {
    return !memcmp(q->buf[0], q->copy[0], q->cb) && !memcmp(q->buf[1], q->copy[1], q->sb) && !memcmp(q->buf[2], q->copy[2], q->sb);
}
static void qw_free(qw_t *q) {
    free_quant(q->buf);
    for (int i = 0; i < 3; i++) free(q->copy[i]);
}

static void test_roundtrip(void **st) {
    const int Ns[] = {16, 33, 48, 100}, Ks[] = {128, 384}, bits[] = {4, 8, 2, 3, 5, 6}, Gs[] = {32, 64, 128};
    for (int ni = 0; ni < 4; ni++)
        for (int ki = 0; ki < 2; ki++)
            for (int bi = 0; bi < 6; bi++)
                for (int gi = 0; gi < 3; gi++) {
                    int N = Ns[ni], K = Ks[ki];
                    qw_t q = qw_make(N, K, bits[bi], Gs[gi], 1000u + (uint64_t)(ni * 100 + ki * 10 + bi * 3 + gi));
                    float *before = malloc(sizeof(float) * (size_t)N * K), *after = malloc(sizeof(float) * K);
                    for (int r = 0; r < N; r++) weight_row_f32(&q.w, r, before + (size_t)r * K);
                    assert_true(pack_fits(&q.w, WL_Q_RIL16));
                    assert_int_equal(pack_weight(&q.w, WL_Q_RIL16), 0);
                    assert_int_equal(q.w.layout, WL_Q_RIL16);
                    assert_false(qw_as_stored(&q)); /* 16 random rows: some word moved */
                    for (int r = 0; r < N; r++) {
                        weight_row_f32(&q.w, r, after);
                        if (memcmp(after, before + (size_t)r * K, sizeof(float) * K))
                            fail_msg("N %d K %d bits %d G %d: packed row %d reads differently", N, K, bits[bi], Gs[gi], r);
                    }
                    /* the tail rows stay where they were */
                    size_t rb = (size_t)K * bits[bi] / 8;
                    assert_memory_equal((char *)q.buf[0] + (size_t)(N & ~15) * rb, (char *)q.copy[0] + (size_t)(N & ~15) * rb, (size_t)(N % 16) * rb);
                    assert_int_equal(unpack_weight(&q.w), 0);
                    assert_int_equal(q.w.layout, WL_ROWS);
                    assert_true(qw_as_stored(&q));
                    free(before); free(after);
                    qw_free(&q);
                }
}

static void test_fits(void **st) {
    qw_t q = qw_make(32, 80, 6, 16, 7); /* planes need whole 32-column chunks (6-bit rows need only K % 16 == 0) */
    assert_false(pack_fits(&q.w, WL_Q_RIL16));
    assert_int_equal(pack_weight(&q.w, WL_Q_RIL16), -1);
    assert_true(qw_as_stored(&q));
    qw_free(&q);
    q = qw_make(32, 128, 7, 32, 10); /* a width MLX does not write */
    assert_false(pack_fits(&q.w, WL_Q_RIL16));
    qw_free(&q);
    q = qw_make(32, 96, 3, 32, 11);
    assert_true(pack_fits(&q.w, WL_Q_RIL16));
    qw_free(&q);
    q = qw_make(15, 128, 4, 64, 8);
    assert_false(pack_fits(&q.w, WL_Q_RIL16));
    qw_free(&q);
    void *buf;
    weight_t d = make_dense(32, 64, DT_BF16, 9, &buf);
    assert_false(pack_fits(&d, WL_Q_RIL16));
    free(buf);
}

static int want_ril(const weight_t *w) { return WL_Q_RIL16; }
static int want_none(const weight_t *w) { return WL_ROWS; }

/* rows [r0, r0 + n) of w as hyb_rows cuts them (a fresh, unprepared view) */
static weight_t view(const weight_t *w, int r0, int n) {
    weight_t s = *w;
    size_t rb = (size_t)w->cols * w->bits / 8, sb = (size_t)(w->cols / w->group) * 2;
    s.rows = n;
    s.layout = WL_ROWS;
    s.data = (const char *)w->data + (size_t)r0 * rb;
    s.scales = (const char *)w->scales + (size_t)r0 * sb;
    s.biases = (const char *)w->biases + (size_t)r0 * sb;
    return s;
}

static void test_registry(void **st) {
    pack_registry_t reg = {0};
    qw_t q = qw_make(72, 256, 8, 64, 11); /* 4 tiles and 8 tail rows */
    weight_t tied = q.w;                   /* lm_head = embed, copied before prepare */
    pack_prepare(&reg, &q.w, want_ril);
    assert_int_equal(q.w.layout, WL_Q_RIL16);
    assert_false(qw_as_stored(&q));
    void *packed = malloc(q.cb);
    memcpy(packed, q.buf[0], q.cb);
    pack_prepare(&reg, &tied, want_ril);
    assert_int_equal(tied.layout, WL_Q_RIL16);
    assert_memory_equal(q.buf[0], packed, q.cb); /* not packed twice */
    weight_t v1 = view(&q.w, 16, 32), v2 = view(&q.w, 48, 24), v3 = view(&q.w, 64, 8);
    pack_prepare(&reg, &v1, want_ril);
    pack_prepare(&reg, &v2, want_ril);
    assert_int_equal(v1.layout, WL_Q_RIL16);
    assert_int_equal(v2.layout, WL_Q_RIL16); /* one tile and the region's tail */
    assert_memory_equal(q.buf[0], packed, q.cb);
    float *a = malloc(sizeof(float) * 256), *b = malloc(sizeof(float) * 256);
    for (int r = 0; r < 24; r++) { /* a view reads the parent's rows */
        weight_row_f32(&v2, r, a);
        weight_row_f32(&q.w, 48 + r, b);
        assert_memory_equal(a, b, sizeof(float) * 256);
    }
    (void)v3;
    weight_t bad = view(&q.w, 8, 32); /* half tiles: the region goes back to the stored order */
    pack_prepare(&reg, &bad, want_ril);
    assert_int_equal(bad.layout, WL_ROWS);
    assert_true(qw_as_stored(&q));
    weight_t again = view(&q.w, 16, 32);
    pack_prepare(&reg, &again, want_ril);
    assert_int_equal(again.layout, WL_ROWS);
    for (int r = 0; r < 32; r++) { /* the unpacked view reads the stored rows */
        weight_row_f32(&again, r, a);
        weight_row_f32(&(weight_t){.rows = 72, .cols = 256, .dtype = DT_U32, .data = q.copy[0], .bits = 8, .group = 64,
                                    .scales = q.copy[1], .biases = q.copy[2], .sb_dtype = DT_BF16}, 16 + r, b);
        assert_memory_equal(a, b, sizeof(float) * 256);
    }
    /* not wanted: left alone, and a view of it is not packed on its own */
    qw_t n = qw_make(64, 128, 4, 32, 12);
    pack_prepare(&reg, &n.w, want_none);
    assert_int_equal(n.w.layout, WL_ROWS);
    weight_t nv = view(&n.w, 16, 32);
    pack_prepare(&reg, &nv, want_ril);
    assert_int_equal(nv.layout, WL_ROWS);
    assert_true(qw_as_stored(&n));
    /* released: the memory may come back as another weight */
    pack_release(&reg, &n.w);
    weight_t fresh = n.w;
    pack_prepare(&reg, &fresh, want_ril);
    assert_int_equal(fresh.layout, WL_Q_RIL16);
    pack_registry_free(&reg);
    free(a); free(b); free(packed);
    qw_free(&q);
    qw_free(&n);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_fits),
        cmocka_unit_test(test_registry),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
