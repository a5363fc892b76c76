/* mm_bench.c — times one SIMD family's matmul kernel alone, on one thread.
 *
 * The model benchmark (bench/run_cpu.sh) mixes matmuls with everything else a step does;
 * this isolates the kernel. Two regimes:
 *   --mib M   one weight of about M MiB, far bigger than the caches: decode's regime, where
 *             weights stream from memory once per token (compare GB/s with kiln-probe's
 *             read bandwidth divided by the thread count);
 *   --rows N  a small weight (e.g. 256 x 1024) run repeatedly: it stays in L2, so this
 *             measures the kernel's compute rate (weights/s, or FLOP/s for T > 1).
 * Weights are random MLX-affine codes (bf16 scales/biases) or bf16.
 *
 * Usage: kiln-mm-bench [--bits 4|8|2|3|5|6|16] [--group G] [--cols K] [--rows N | --mib M]
 *                      [--T T] [--iters I] [--simd avx512|avx2|amx]
 * (amx: the AVX-512 family with its AMX path for 8-bit weights, where the CPU has AMX) */
#include <sys/mman.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "backend/cpu/cpu_kernels.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng = 88172645463325252ull;
static uint32_t next(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

/* MMB_MMAP=1: the codes written to an unlinked temp file and mapped MAP_PRIVATE read-only,
 * as kiln maps a checkpoint (page cache, 4 KB pages), to compare with malloc'd memory. */
static int mmb_mmap(void) { const char *e = getenv("MMB_MMAP"); return e && *e == '1'; }
static void *file_backed(void *src, size_t n) {
    char path[] = "/tmp/kiln-mm-bench-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0 || write(fd, src, n) != (ssize_t)n) { perror("MMB_MMAP"); exit(1); }
    unlink(path);
    void *p = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) { perror("mmap"); exit(1); }
    close(fd);
    free(src);
    return p;
}

int main(int argc, char **argv) {
    int bits = 4, group = 64, K = 1024, N = 0, T = 1, iters = 0;
    double mib = 0;
    const char *simd = "avx512";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--bits")) bits = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--group")) group = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--cols")) K = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rows")) N = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--mib")) mib = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--T")) T = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--iters")) iters = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--simd")) simd = argv[i + 1];
        else { fprintf(stderr, "unknown option %s\n", argv[i]); return 2; }
    }
    const simd_kernels_t *s = !strcmp(simd, "avx2") ? &simd_avx2 : &simd_avx512;
    if (!strcmp(simd, "amx") && !amx_enable()) { fprintf(stderr, "no AMX on this CPU (or the kernel refused it)\n"); return 1; }
    double bpw = bits == 16 ? 2.0 : bits / 8.0 + 4.0 / group; /* bytes per weight */
    /* --mib: several 32 MiB matrices visited in turn (the whole set is far bigger than
     * the caches); each call is timed alone and the best call counts, so a call that
     * ran on a quiet core is what gets reported on this shared machine. */
    int nmat = mib > 0 ? (int)(mib / 32 + 0.5) : 1;
    if (nmat < 1) nmat = 1;
    if (!N) N = mib > 0 ? (int)(32.0 * 1048576 / (bpw * K)) & ~3 : 256;
    if (!iters) iters = mib > 0 ? 5 : 200;
    weight_t *ws = calloc((size_t)nmat, sizeof *ws);
    size_t nw = (size_t)N * K;
    for (int m = 0; m < nmat; m++) {
        weight_t w = {N, K, bits == 16 ? DT_BF16 : DT_U32};
        if (bits == 16) {
            uint16_t *d = malloc(nw * 2);
            for (size_t i = 0; i < nw; i++) d[i] = f32_to_bf16((float)(next() % 2001) / 1000.f - 1.f);
            w.data = d;
        } else {
            size_t words = nw * bits / 32;
            uint32_t *c = malloc(words * 4);
            for (size_t i = 0; i < words; i++) c[i] = next() ^ (next() << 16);
            int ng = K / group;
            uint16_t *sc = malloc((size_t)N * ng * 2), *bi = malloc((size_t)N * ng * 2);
            for (size_t i = 0; i < (size_t)N * ng; i++) {
                sc[i] = f32_to_bf16(0.001f + (float)(next() % 1000) * 1e-5f);
                bi[i] = f32_to_bf16(-0.01f * (float)(next() % 100) / 100.f);
            }
            if (mmb_mmap()) c = file_backed(c, words * 4); /* the codes as a checkpoint's: a page-cache mmap */
            w.data = c; w.bits = bits; w.group = group; w.scales = sc; w.biases = bi; w.sb_dtype = DT_BF16;
        }
        ws[m] = w;
    }
    float *x = malloc(sizeof(float) * (size_t)T * K), *y = malloc(sizeof(float) * (size_t)T * N);
    for (size_t i = 0; i < (size_t)T * K; i++) x[i] = (float)(next() % 2001) / 1000.f - 1.f;
    for (int m = 0; m < nmat; m++) s->matmul(y, x, T, &ws[m], 0, N); /* warm up (page faults) */
    double best = 1e30, total = 0;
    for (int it = 0; it < iters; it++)
        for (int m = 0; m < nmat; m++) {
            double t0 = now();
            s->matmul(y, x, T, &ws[m], 0, N);
            double dt = now() - t0;
            total += dt;
            if (dt < best) best = dt;
        }
    double bytes = bpw * nw;
    printf("%s bits=%d group=%d N=%d K=%d T=%d x%d: %.3f ms  %.2f Gweights/s  %.2f GB/s  %.1f GFLOP/s\n", simd, bits, group, N, K,
           T, nmat, best * 1e3, nw / best / 1e9, bytes / best / 1e9, 2.0 * nw * T / best / 1e9);
    printf("  mean of all %d calls: %.2f GB/s%s\n", iters * nmat, bytes * iters * nmat / total / 1e9, mmb_mmap() ? " (codes in a file mmap)" : "");
    return 0;
}
