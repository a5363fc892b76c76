/* mlx_codes.h — random MLX-affine codes for the matmul tests (CPU test_weights.h and CUDA
 * test_cuda_kernels.c): rows × cols codes of `bits` bits as a little-endian bit stream per row
 * (words = cols·bits/32 per row, c zeroed by the caller), drawn from an LCG on *seed, which
 * advances so the caller's scales and biases continue the same stream. Header-only. */
#ifndef KILN_TEST_MLX_CODES_H
#define KILN_TEST_MLX_CODES_H

#include <stdint.h>
#include <stddef.h>

static inline void mlx_random_codes(uint32_t *c, int rows, int cols, int bits, uint64_t *seed) {
    const size_t words = (size_t)cols * bits / 32;
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < cols; j++) {
            *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
            uint64_t code = (*seed >> 33) & ((1u << bits) - 1), bit = (uint64_t)j * bits;
            uint32_t *row = c + (size_t)r * words;
            row[bit >> 5] |= (uint32_t)(code << (bit & 31));
            if ((bit & 31) + bits > 32) row[(bit >> 5) + 1] |= (uint32_t)(code >> (32 - (bit & 31)));
        }
}

#endif
