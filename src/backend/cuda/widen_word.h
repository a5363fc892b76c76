/* widen_word.h — one output word of widen.cu: the codes of a b-bit MLX row (a little-endian bit stream
 * over u32 words, code j in bits [j·b, j·b + b), b = 2, 3, 5 or 6 — a code may straddle two words)
 * re-packed nb = 4 or 8 bits wide (no code straddles). Plain C as well as CUDA, so the CPU unit test
 * (tests/unit/test_widen.c) runs the very function the kernel runs; and the policy of when to widen. */
#ifndef KILN_CUDA_WIDEN_WORD_H
#define KILN_CUDA_WIDEN_WORD_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#ifdef __CUDACC__
#define WIDEN_HD __host__ __device__ __forceinline__
#else
#define WIDEN_HD static inline
#endif

/* word wi (0-based in the output row) of a row whose stored words start at row */
WIDEN_HD uint32_t widen_word(const uint32_t *row, int wi, int b, int nb) {
    const int per = 32 / nb;
    const uint32_t mask = (1u << b) - 1u;
    uint32_t v = 0;
    for (int k = 0; k < per; k++) {
        const int bit = (wi * per + k) * b, wd = bit >> 5, sh = bit & 31;
        uint32_t code = row[wd] >> sh;
        if (sh + b > 32) code |= row[wd + 1] << (32 - sh); /* straddles: the next word is in the row (the code is) */
        v |= (code & mask) << (k * nb);
    }
    return v;
}

/* The policy (cuda_backend.cu widen_bits): the width a b-bit weight of rows × cols codes gets on a device with
 * free_b of total_b bytes free, under KILN_CUDA_WIDEN's mode (its text; NULL or "" is the default, 1):
 * 4 and 8 bits and unquantized (b = 0) stay; 2/3 → 4 and 5/6 → 8 under mode 1 where the widened codes leave an
 * eighth of the card free (free_b ≥ wide + total_b / 8), under mode 2 always (the allocation decides), under
 * 0 or any other value never. Host-only (plain C), so the unit test checks the policy itself. */
static inline int widen_target_bits(int b, const char *mode, size_t free_b, size_t total_b, size_t rows, size_t cols) {
    if (b == 0 || b == 4 || b == 8) return b;
    const int m = mode && *mode ? atoi(mode) : 1, nb = b < 4 ? 4 : 8;
    if (m == 2) return nb;
    if (m != 1) return b;
    return free_b >= rows * cols / 8 * (size_t)nb + total_b / 8 ? nb : b;
}

#endif
