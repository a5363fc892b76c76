/* read_pattern.c — pure reads of a 640 MiB buffer in the decode GEMV's access patterns, no
 * compute: what the memory system gives one thread for each (session 7, helper-47).
 *   mode 0: one sequential stream (the probe's pattern), optional prefetcht0 PF bytes ahead
 *   mode 1: tiles of 4 rows of R bytes read side by side (q8tile's order), each row
 *           prefetched at PF + 3R ahead (PF_AHEAD's shape)
 *   mode 2: mode 1's loads with one linear prefetch pointer PF ahead of the tile
 *   HUGE 1: the buffer madvised MADV_HUGEPAGE (2 MB pages) before it is written
 * Not built by CMake: gcc -O2 -mavx512f -mavx512bw -o read_pattern bench/cpu/read_pattern.c
 * Usage: read_pattern R MODE PF [HUGE]   (prints best and mean of 6 passes) */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "usage: read_pattern R MODE PF [HUGE]\n"); return 2; }
    size_t n = (size_t)640 << 20;
    int R = atoi(argv[1]), mode = atoi(argv[2]), huge = argc > 4 ? atoi(argv[4]) : 0;
    long pf = atol(argv[3]);
    unsigned char *b = aligned_alloc((size_t)2 << 20, n);
    if (!b) return 1;
    if (huge) madvise(b, n, MADV_HUGEPAGE);
    for (size_t i = 0; i < n; i += 64) memset(b + i, (int)i, 64);
    double best = 1e9, tot = 0;
    __m512i s = _mm512_setzero_si512();
    size_t tile = (size_t)4 * R;
    for (int it = 0; it < 6; it++) {
        double t0 = now();
        if (mode == 0) {
            for (size_t i = 0; i < n; i += 64) {
                if (pf) _mm_prefetch((const char *)b + i + pf, _MM_HINT_T0);
                s = _mm512_add_epi32(s, _mm512_load_si512(b + i));
            }
        } else if (mode == 2) {
            const unsigned char *q = b + pf;
            for (size_t j = 0; j + tile <= n; j += tile)
                for (size_t k = 0; k < (size_t)R; k += 64)
                    for (int r = 0; r < 4; r++) {
                        _mm_prefetch((const char *)q, _MM_HINT_T0);
                        q += 64;
                        s = _mm512_add_epi32(s, _mm512_load_si512(b + j + (size_t)r * R + k));
                    }
        } else {
            for (size_t j = 0; j + tile <= n; j += tile)
                for (size_t k = 0; k < (size_t)R; k += 64)
                    for (int r = 0; r < 4; r++) {
                        const unsigned char *p = b + j + (size_t)r * R + k;
                        if (pf) _mm_prefetch((const char *)p + pf + 3 * R, _MM_HINT_T0);
                        s = _mm512_add_epi32(s, _mm512_load_si512(p));
                    }
        }
        double dt = now() - t0;
        tot += dt;
        if (dt < best) best = dt;
    }
    printf("R=%d mode=%d pf=%ld huge=%d: best %.1f GB/s mean %.1f GB/s (%d)\n", R, mode, pf, huge, n / best / 1e9, 6 * n / tot / 1e9,
           _mm512_reduce_add_epi32(s) & 1);
    return 0;
}
