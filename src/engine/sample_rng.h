/* sample_rng.h — the sampler's counter-based RNG, one definition for the host (sampler.c)
 * and the device (backend/cuda/sample.cu), so both draw the same uniform for (seed, step)
 * and the same random number picks the token wherever a row is sampled.
 *
 * splitmix64 of splitmix64(seed) xor step·φ': no state to carry, so a request's draws do not
 * depend on the batch it runs in, on which thread or device samples it, or on a resume at
 * step n. The top 53 bits become a double in [0, 1), exactly (no rounding). Plain integer
 * arithmetic: bit-identical in C and CUDA. */
#ifndef KILN_SAMPLE_RNG_H
#define KILN_SAMPLE_RNG_H

#include <stdint.h>

#ifdef __CUDACC__
#define KILN_HD __host__ __device__
#else
#define KILN_HD
#endif

static inline KILN_HD uint64_t kiln_splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Uniform double in [0, 1) from (seed, step). */
static inline KILN_HD double kiln_rng_uniform(uint64_t seed, uint64_t step) {
    uint64_t r = kiln_splitmix64(kiln_splitmix64(seed) ^ (step * 0xd1b54a32d192ed03ull));
    return (double)(r >> 11) * (1.0 / 9007199254740992.0);
}

#endif
