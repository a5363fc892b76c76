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
 *        kiln-mm-bench --model qwen3-0.6b|llama-3.2-1b [--bits B] [--group G] [--iters tokens]
 * (amx: the AVX-512 family with its AMX path for 8-bit weights, where the CPU has AMX) */
#include <sys/mman.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_pack.h"

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
 * as kiln maps a checkpoint (page cache, 4 KB pages), to compare with malloc'd memory.
 * MMB_HUGE=1: codes, scales and biases in 2 MB-aligned anonymous memory with MADV_HUGEPAGE
 * (what KILN_HUGE_WEIGHTS=1 gives the model's weights). */
static int mmb_mmap(void) { const char *e = getenv("MMB_MMAP"); return e && *e == '1'; }
static int mmb_huge(void) { const char *e = getenv("MMB_HUGE"); return e && *e == '1'; }
/* MMB_PACK=1: each weight packed in place into the layout the benchmarked family asks for
 * (pack_layout, cpu_pack.h), as cpu_prepare_weight does at load (KILN_PACK_Q4 etc. apply). */
static int mmb_pack(void) { const char *e = getenv("MMB_PACK"); return e && *e == '1'; }
static void *walloc(size_t n) {
    if (!mmb_huge()) return malloc(n);
    size_t H = (size_t)2 << 20, m = (n + H - 1) & ~(H - 1);
    void *p = aligned_alloc(H, m);
    if (!p) { perror("aligned_alloc"); exit(1); }
    madvise(p, m, MADV_HUGEPAGE);
    return p;
}
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

/* One random N x K weight: bf16 (bits 16) or MLX-affine codes with bf16 scales/biases. */
static const simd_kernels_t *mmb_simd; /* the family --simd picked */
static weight_t make_weight(int N, int K, int bits, int group) {
    weight_t w = {N, K, bits == 16 ? DT_BF16 : DT_U32};
    size_t nw = (size_t)N * K;
    if (bits == 16) {
        uint16_t *d = walloc(nw * 2);
        for (size_t i = 0; i < nw; i++) d[i] = f32_to_bf16((float)(next() % 2001) / 1000.f - 1.f);
        w.data = d;
    } else {
        size_t words = nw * bits / 32;
        uint32_t *c = walloc(words * 4);
        for (size_t i = 0; i < words; i++) c[i] = next() ^ (next() << 16);
        int ng = K / group;
        uint16_t *sc = walloc((size_t)N * ng * 2), *bi = walloc((size_t)N * ng * 2);
        for (size_t i = 0; i < (size_t)N * ng; i++) {
            sc[i] = f32_to_bf16(0.001f + (float)(next() % 1000) * 1e-5f);
            bi[i] = f32_to_bf16(-0.01f * (float)(next() % 100) / 100.f);
        }
        if (mmb_mmap()) c = file_backed(c, words * 4); /* the codes as a checkpoint's: a page-cache mmap */
        w.data = c; w.bits = bits; w.group = group; w.scales = sc; w.biases = bi; w.sb_dtype = DT_BF16;
    }
    if (mmb_pack() && !mmb_mmap() && mmb_simd && mmb_simd->pack_layout) {
        int l = mmb_simd->pack_layout(&w);
        if (l && pack_weight(&w, l)) { fprintf(stderr, "MMB_PACK: pack_weight failed\n"); exit(1); }
    }
    return w;
}

/* --model qwen3-0.6b|llama-3.2-1b: every linear layer of one decode token, in the model's
 * order (per layer q, k, v, o, gate, up, down; then the tied lm_head), one thread, x
 * rewritten before each call (outside the timing). Prints the token's GEMV time and GB/s,
 * the mean of `iters` tokens and the best, and each shape's mean GB/s: the model's matmul
 * stream without the rest of a step (compare `kiln bench --threads 1`). */
static int model_mode(const simd_kernels_t *s, const char *name, int bits, int group, int iters) {
    int H, I, nh, nkv, hd, nl, V;
    if (!strcmp(name, "qwen3-0.6b")) { H = 1024; I = 3072; nh = 16; nkv = 8; hd = 128; nl = 28; V = 151936; }
    else if (!strcmp(name, "llama-3.2-1b")) { H = 2048; I = 8192; nh = 32; nkv = 8; hd = 64; nl = 16; V = 128256; }
    else { fprintf(stderr, "--model: qwen3-0.6b or llama-3.2-1b\n"); return 2; }
    int shp[7][2] = {{nh * hd, H}, {nkv * hd, H}, {nkv * hd, H}, {H, nh * hd}, {I, H}, {I, H}, {H, I}};
    const char *nm[8] = {"q", "k", "v", "o", "gate", "up", "down", "lm_head"};
    int nw = nl * 7 + 1;
    weight_t *ws = calloc((size_t)nw, sizeof *ws);
    double bpw = bits == 16 ? 2.0 : bits / 8.0 + 4.0 / group, bytes[8], tsum[8] = {0}, tok_bytes = 0;
    for (int l = 0; l < nl; l++)
        for (int k = 0; k < 7; k++) ws[l * 7 + k] = make_weight(shp[k][0], shp[k][1], bits, group);
    ws[nw - 1] = make_weight(V, H, bits, group);
    for (int k = 0; k < 8; k++) bytes[k] = bpw * (k < 7 ? (double)shp[k][0] * shp[k][1] : (double)V * H);
    for (int i = 0; i < nw; i++) tok_bytes += bytes[i == nw - 1 ? 7 : i % 7];
    int maxk = H > I ? H : I, maxn = V;
    float *x = malloc(sizeof(float) * maxk), *y = malloc(sizeof(float) * maxn);
    for (int i = 0; i < nw; i++) { /* warm up (page faults) */
        for (int k = 0; k < ws[i].cols; k++) x[k] = (float)(next() % 2001) / 1000.f - 1.f;
        s->matmul(y, x, 1, &ws[i], 0, ws[i].rows);
    }
    double best = 1e30, total = 0;
    for (int it = 0; it < iters; it++) {
        double tok = 0;
        for (int i = 0; i < nw; i++) {
            for (int k = 0; k < ws[i].cols; k++) x[k] = (float)(next() % 2001) / 1000.f - 1.f;
            double t0 = now();
            s->matmul(y, x, 1, &ws[i], 0, ws[i].rows);
            double dt = now() - t0;
            tok += dt;
            tsum[i == nw - 1 ? 7 : i % 7] += dt;
        }
        total += tok;
        if (tok < best) best = tok;
    }
    printf("%s model=%s bits=%d group=%d: %.1f MB/token, token GEMVs mean %.2f ms (%.2f GB/s), best %.2f ms (%.2f GB/s)%s%s\n", s->name, name, bits,
           group, tok_bytes / 1e6, total / iters * 1e3, tok_bytes * iters / total / 1e9, best * 1e3, tok_bytes / best / 1e9,
           mmb_huge() ? " (huge pages)" : "", mmb_mmap() ? " (codes in a file mmap)" : "");
    printf("  per shape, mean GB/s:");
    for (int k = 0; k < 8; k++) printf(" %s %.1f", nm[k], bytes[k] * (k < 7 ? nl : 1) * iters / tsum[k] / 1e9);
    printf("\n");
    return 0;
}

int main(int argc, char **argv) {
    int bits = 4, group = 64, K = 1024, N = 0, T = 1, iters = 0;
    double mib = 0;
    const char *simd = "avx512", *model = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--bits")) bits = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--group")) group = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--cols")) K = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rows")) N = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--mib")) mib = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--T")) T = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--iters")) iters = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--simd")) simd = argv[i + 1];
        else if (!strcmp(argv[i], "--model")) model = argv[i + 1];
        else { fprintf(stderr, "unknown option %s\n", argv[i]); return 2; }
    }
    const simd_kernels_t *s = !strcmp(simd, "avx2") ? &simd_avx2 : &simd_avx512;
    mmb_simd = s;
    if (!strcmp(simd, "amx") && !amx_enable()) { fprintf(stderr, "no AMX on this CPU (or the kernel refused it)\n"); return 1; }
    if (model) return model_mode(s, model, bits, group, iters ? iters : 10);
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
    for (int m = 0; m < nmat; m++) ws[m] = make_weight(N, K, bits, group);
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
