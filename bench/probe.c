/* probe.c — the machine's ceilings, measured the way kiln's kernels would meet them:
 *
 *   read bandwidth: T threads each sum a disjoint slice of a 1 GiB buffer (AVX2 loads,
 *                   several accumulators); best of 5 passes (src/base/bwprobe.c: the same
 *                   loop `kiln bench --probe` runs around each decode run). Decode reads
 *                   every weight once per token, so weight_bytes / read_bandwidth is its
 *                   roofline.
 *   f32 FMA peak:   T threads each run 12 independent FMA chains on 16- (AVX-512) or
 *                   8-lane (AVX2) vectors: the upper bound for prefill's matmuls.
 *
 * Usage: probe [--threads N] [--mib M] [--json]. Built by CMake as bench/kiln-probe. */
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "base/bwprobe.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct { const float *p; size_t n; double out; int iters; int wide; } job_t;

#define CHAINS 12
__attribute__((target("avx512f"))) static void fma512(job_t *j) {
    __m512 a[CHAINS], m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    for (int k = 0; k < CHAINS; k++) a[k] = _mm512_set1_ps((float)k);
    for (int i = 0; i < j->iters; i++)
#pragma GCC unroll 12
        for (int k = 0; k < CHAINS; k++) a[k] = _mm512_fmadd_ps(a[k], m, c); /* unrolled: chains in registers */
    float s = 0, t[16];
    for (int k = 0; k < CHAINS; k++) { _mm512_storeu_ps(t, a[k]); s += t[0]; }
    j->out = s;
}
__attribute__((target("avx2,fma"))) static void fma256(job_t *j) {
    __m256 a[CHAINS], m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    for (int k = 0; k < CHAINS; k++) a[k] = _mm256_set1_ps((float)k);
    for (int i = 0; i < j->iters; i++)
#pragma GCC unroll 12
        for (int k = 0; k < CHAINS; k++) a[k] = _mm256_fmadd_ps(a[k], m, c);
    float s = 0, t[8];
    for (int k = 0; k < CHAINS; k++) { _mm256_storeu_ps(t, a[k]); s += t[0]; }
    j->out = s;
}
static void *fma_job(void *a) {
    job_t *j = a;
    if (j->wide) fma512(j); else fma256(j);
    return NULL;
}

int main(int argc, char **argv) {
    int threads = (int)sysconf(_SC_NPROCESSORS_ONLN), json = 0;
    size_t mib = 1024;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--mib") && i + 1 < argc) mib = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--json")) json = 1;
        else { fprintf(stderr, "usage: probe [--threads N] [--mib M] [--json]\n"); return strcmp(argv[i], "--help") ? 2 : 0; }
    }
    if (threads < 1 || threads > 256 || mib < 64) { fprintf(stderr, "probe: bad --threads or --mib (>= 64)\n"); return 2; }
    bwprobe_t *bw = bwprobe_create(mib);
    if (!bw) { fprintf(stderr, "probe: cannot allocate %zu MiB\n", mib); return 1; }
    double gbs = bwprobe_read_gbs(bw, threads, 5);
    bwprobe_free(bw);
    pthread_t th[256];
    job_t jobs[256];
    __builtin_cpu_init();
    int wide = __builtin_cpu_supports("avx512f");
    int iters = 20000000;
    double t0 = now();
    for (int t = 0; t < threads; t++) {
        jobs[t] = (job_t){NULL, 0, 0, iters, wide};
        pthread_create(&th[t], NULL, fma_job, &jobs[t]);
    }
    for (int t = 0; t < threads; t++) pthread_join(th[t], NULL);
    double dt = now() - t0;
    double gflops = (double)threads * iters * CHAINS * (wide ? 16 : 8) * 2 / dt / 1e9;
    if (json) printf("{\"threads\": %d, \"read_gb_s\": %.2f, \"fma_gflops\": %.1f, \"fma_width\": %d}\n", threads, gbs, gflops, wide ? 512 : 256);
    else printf("threads %d: read bandwidth %.2f GB/s, f32 FMA peak %.1f GFLOP/s (%d-bit vectors)\n", threads, gbs, gflops, wide ? 512 : 256);
    return 0;
}
