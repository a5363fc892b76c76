/* widen_word.h — one output word of widen.cu: the codes of a b-bit MLX row (a little-endian bit stream
 * over u32 words, code j in bits [j·b, j·b + b), b = 2, 3, 5 or 6 — a code may straddle two words)
 * re-packed nb = 4 or 8 bits wide (no code straddles). Plain C as well as CUDA, so the CPU unit test
 * (tests/unit/test_widen.c) runs the very function the kernel runs. */
#ifndef KILN_CUDA_WIDEN_WORD_H
#define KILN_CUDA_WIDEN_WORD_H

#include <stdint.h>

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

#endif
