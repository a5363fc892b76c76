/* test_weights.h — random weights for the CPU matmul tests (test_kernels, test_matmul_multi,
 * test_mm_rows): dense in any dtype, and MLX affine (codes as a little-endian bit stream per
 * row, bf16 scales and biases). Header-only, after test_util.h and the kiln headers. */
#ifndef KILN_TEST_WEIGHTS_H
#define KILN_TEST_WEIGHTS_H

#include "../common/mlx_codes.h"

/* A random dense weight in dtype dt; *buf takes the allocation. */
static inline weight_t make_dense(int rows, int cols, dtype_t dt, uint64_t seed, void **buf) {
    weight_t w = {rows, cols, dt};
    *buf = malloc((size_t)rows * cols * dtype_size(dt));
    for (size_t i = 0; i < (size_t)rows * cols; i++) store_from_f32(*buf, dt, i, tu_rand(&seed));
    w.data = *buf;
    return w;
}

/* A random MLX-affine weight; bufs[0..2] take the allocations (free_quant frees them). */
static inline weight_t make_quant(int rows, int cols, int bits, int group, uint64_t seed, void **bufs) {
    weight_t w = {rows, cols, DT_U32};
    size_t words = (size_t)cols * bits / 32;
    uint32_t *c = calloc((size_t)rows * words, 4);
    mlx_random_codes(c, rows, cols, bits, &seed);
    int ng = cols / group;
    uint16_t *s = malloc(sizeof(uint16_t) * rows * ng), *b = malloc(sizeof(uint16_t) * rows * ng);
    for (int i = 0; i < rows * ng; i++) {
        s[i] = f32_to_bf16(0.01f + 0.05f * fabsf(tu_rand(&seed)));
        b[i] = f32_to_bf16(0.2f * tu_rand(&seed));
    }
    w.data = c; w.bits = bits; w.group = group; w.scales = s; w.biases = b; w.sb_dtype = DT_BF16;
    bufs[0] = c; bufs[1] = s; bufs[2] = b;
    return w;
}

static inline void free_quant(void **bufs) { for (int i = 0; i < 3; i++) free(bufs[i]); }

#endif
