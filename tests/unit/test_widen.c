/* test_widen.c — the CUDA backend's widening of MLX 2/3/5/6-bit codes to 4/8-bit codes
 * (src/backend/cuda/widen_word.h: the function widen.cu's kernel runs per output word, plain C here,
 * so CI checks it without a GPU):
 *   1. a widened weight is the same weight: for 2/3/5/6 bits, groups 32/64/128 and column counts where
 *      codes straddle words in every way (32, 96, 160, 4096 columns), weight_row_f32 of the widened
 *      codes with the stored scales and biases is bitwise the stored weight's, row by row;
 *   2. at 4 and 8 bits (nothing to widen) widen_word reproduces the stored words exactly;
 *   3. the policy (widen_target_bits, which cuda_backend.cu's widen_bits asks): which widths widen, under which
 *      KILN_CUDA_WIDEN value, and the eighth-of-the-card line, on both sides of it. */
#include "../common/test_util.h"
#include "tensor/weight.h"
#include "../common/test_weights.h"
#include "backend/cuda/widen_word.h"

static uint32_t *widen_rows(const weight_t *w, int nb) {
    const int wpr_in = w->cols / 32 * w->bits, wpr_out = w->cols / 32 * nb;
    uint32_t *out = malloc(sizeof(uint32_t) * (size_t)w->rows * wpr_out);
    for (int r = 0; r < w->rows; r++)
        for (int i = 0; i < wpr_out; i++) out[(size_t)r * wpr_out + i] = widen_word((const uint32_t *)w->data + (size_t)r * wpr_in, i, w->bits, nb);
    return out;
}

static void test_same_weight(void **st) {
    (void)st;
    const int bits[] = {2, 3, 5, 6}, cols[] = {32, 96, 160, 4096}, groups[] = {32, 64, 128};
    for (int bi = 0; bi < 4; bi++)
        for (int ci = 0; ci < 4; ci++)
            for (int gi = 0; gi < 3; gi++) {
                if (cols[ci] % groups[gi]) continue;
                void *bufs[3];
                const int rows = 7, nb = bits[bi] < 4 ? 4 : 8;
                weight_t w = make_quant(rows, cols[ci], bits[bi], groups[gi], 77 + 13 * bi + 5 * ci + gi, bufs);
                uint32_t *wide = widen_rows(&w, nb);
                weight_t ww = w;
                ww.data = wide;
                ww.bits = nb;
                float *a = malloc(sizeof(float) * cols[ci]), *b = malloc(sizeof(float) * cols[ci]);
                for (int r = 0; r < rows; r++) {
                    weight_row_f32(&w, r, a);
                    weight_row_f32(&ww, r, b);
                    if (memcmp(a, b, sizeof(float) * cols[ci]))
                        fail_msg("q%d g%d %d columns: row %d of the %d-bit codes differs from the stored weight", bits[bi], groups[gi], cols[ci], r, nb);
                }
                free(a); free(b); free(wide);
                free_quant(bufs);
            }
}

static void test_identity(void **st) {
    (void)st;
    for (int b = 4; b <= 8; b += 4) {
        void *bufs[3];
        weight_t w = make_quant(5, 256, b, 64, 900 + b, bufs);
        uint32_t *same = widen_rows(&w, b);
        assert_memory_equal(same, w.data, sizeof(uint32_t) * 5 * (256 / 32 * b));
        free(same);
        free_quant(bufs);
    }
}

static void test_policy(void **st) {
    (void)st;
    const size_t G = (size_t)1 << 30, tot = 80 * G, rows = 4096, cols = 4096; /* 4-bit codes: 8 MiB, 8-bit: 16 MiB */
    const size_t w4 = rows * cols / 2, w8 = rows * cols;
    /* nothing to widen: 4/8-bit and unquantized, whatever the mode and the memory */
    const int same[] = {0, 4, 8};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(widen_target_bits(same[i], NULL, tot, tot, rows, cols), same[i]);
        assert_int_equal(widen_target_bits(same[i], "2", 0, tot, rows, cols), same[i]);
    }
    /* the default (unset, "" or "1") with room: 2/3 → 4, 5/6 → 8 */
    const int odd[] = {2, 3, 5, 6};
    const char *dflt[] = {NULL, "", "1"};
    for (int i = 0; i < 4; i++)
        for (int m = 0; m < 3; m++) assert_int_equal(widen_target_bits(odd[i], dflt[m], tot / 2, tot, rows, cols), odd[i] < 4 ? 4 : 8);
    /* the line: widened codes plus an eighth of the card, exactly, widens; a byte less does not */
    assert_int_equal(widen_target_bits(3, NULL, w4 + tot / 8, tot, rows, cols), 4);
    assert_int_equal(widen_target_bits(3, NULL, w4 + tot / 8 - 1, tot, rows, cols), 3);
    assert_int_equal(widen_target_bits(6, "1", w8 + tot / 8, tot, rows, cols), 8);
    assert_int_equal(widen_target_bits(6, "1", w8 + tot / 8 - 1, tot, rows, cols), 6);
    /* =2 widens under the line (the allocation decides); =0 and unknown values never widen */
    assert_int_equal(widen_target_bits(3, "2", 0, tot, rows, cols), 4);
    assert_int_equal(widen_target_bits(5, "2", 0, tot, rows, cols), 8);
    assert_int_equal(widen_target_bits(3, "0", tot, tot, rows, cols), 3);
    assert_int_equal(widen_target_bits(6, "0", tot, tot, rows, cols), 6);
    assert_int_equal(widen_target_bits(2, "yes", tot, tot, rows, cols), 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_weight),
        cmocka_unit_test(test_identity),
        cmocka_unit_test(test_policy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
