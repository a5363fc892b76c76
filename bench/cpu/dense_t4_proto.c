/* dense_t4_proto.c — helper-60's GEMV harness for the WL_DENSE_T4 choice (session 9): one
 * token's bf16 GEMV sequence of qwen3-0.6b (argv[2] = 0) or llama-3.2-1b (1), random weights
 * in 2 MB pages (NOHUGE=1: 4 KB), argv[1] threads on halves of every matrix with a spin barrier
 * per GEMV, the modes alternated per token. Modes (argv[4..]): "rm" = the committed row-major
 * tile (4 rows side by side, per-row prefetch PF_AHEAD), or "R,C,IL,PF": tiles of R rows x C
 * columns (IL = 1: C = 32 with two 16-column chunks interleaved per 32-bit lane, converted by
 * shift / and instead of vpmovzxwd), software prefetch PF bytes ahead (0 = none). The timing
 * reads the same buffer in each order (values do not matter); a 203 x 2048 weight is packed
 * properly first and each mode checked bitwise against "rm".
 * gcc -O2 -march=native -o /tmp/dt4 bench/cpu/dense_t4_proto.c -lpthread -lm
 * /tmp/dt4 2 0 20 rm 4,16,0,0 8,16,0,0 16,16,0,0 4,32,0,0 8,32,0,0 8,32,1,0 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
#include <sys/mman.h>
#define AI static inline __attribute__((always_inline))
#define PF_AHEAD(rb) (3 * (rb) + 8192)
typedef struct { int N, K; uint16_t *d; } W;
static double now_s(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }
static uint64_t rng = 88172645463325252ull;
static uint32_t nxt(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)(rng >> 11); }
static void *halloc(size_t n) { size_t H = 2u << 20, m = (n + H - 1) & ~(H - 1); void *p = aligned_alloc(H, m); if (!getenv("NOHUGE")) madvise(p, m, MADV_HUGEPAGE); return p; }
static W mk(int N, int K) { W w = {N, K, halloc((size_t)N * K * 2 + 64)}; for (size_t i = 0; i < (size_t)N * K; i++) w.d[i] = (uint16_t)((nxt() & 0x8000) | (0x3c00 + nxt() % 0x300)); return w; }

AI __m512 cvt(const uint16_t *p) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16)); }

/* committed */
AI void tile_rm(float *y, const float *x, const W *w, int j, const int NJ) {
    int K = w->K; size_t pfd = PF_AHEAD((size_t)K * 2);
    __m512 acc[4];
    for (int b = 0; b < NJ; b++) acc[b] = _mm512_setzero_ps();
    for (int c = 0; c < K / 16; c++) {
        __m512 wv[4];
        if (!((c * 32) & 63))
            for (int b = 0; b < NJ; b++) _mm_prefetch((const char *)(w->d + (size_t)(j + b) * K + c * 16) + pfd, _MM_HINT_T0);
        for (int b = 0; b < NJ; b++) wv[b] = cvt(w->d + (size_t)(j + b) * K + c * 16);
        __m512 xv = _mm512_loadu_ps(x + c * 16);
        for (int b = 0; b < NJ; b++) acc[b] = _mm512_fmadd_ps(xv, wv[b], acc[b]);
    }
    for (int b = 0; b < NJ; b++) y[j + b] = _mm512_reduce_add_ps(acc[b]);
}
static void dec_rm(float *y, const float *x, const W *w, int j0, int j1) {
    int j = j0;
    for (; j + 4 <= j1; j += 4) tile_rm(y, x, w, j, 4);
    for (; j < j1; j++) tile_rm(y, x, w, j, 1);
}
/* tiled: R rows x C cols chunks; IL = interleaved pairs (C = 32: lane i = col 16c+i low, 16c+16+i high) */
AI void tile_t(float *y, const float *x, const uint16_t *p, int K, int j, const int R, const int C, const int IL, size_t pfd) {
    __m512 acc[16];
    for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    const __m512i hm = _mm512_set1_epi32((int)0xffff0000u);
    for (int k = 0; k < K; k += C, p += R * C) {
        if (pfd) for (int l = 0; l < R * C * 2; l += 64) _mm_prefetch((const char *)p + l + pfd, _MM_HINT_T0);
        if (IL) {
            __m512 x0 = _mm512_loadu_ps(x + k), x1 = _mm512_loadu_ps(x + k + 16);
            for (int r = 0; r < R; r++) {
                __m512i v = _mm512_loadu_si512(p + r * 32);
                acc[r] = _mm512_fmadd_ps(x0, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)), acc[r]);
                acc[r] = _mm512_fmadd_ps(x1, _mm512_castsi512_ps(_mm512_and_si512(v, hm)), acc[r]);
            }
        } else
            for (int s = 0; s < C / 16; s++) {
                __m512 xv = _mm512_loadu_ps(x + k + 16 * s);
                for (int r = 0; r < R; r++) acc[r] = _mm512_fmadd_ps(xv, cvt(p + r * C + 16 * s), acc[r]);
            }
    }
    for (int r = 0; r < R; r++) y[j + r] = _mm512_reduce_add_ps(acc[r]);
}
#define DEF(R, C, IL) static void dec_##R##_##C##_##IL(float *y, const float *x, const W *w, int j0, int j1, size_t pfd) { \
    int K = w->K, j = j0; for (; j + R <= j1; j += R) tile_t(y, x, w->d + (size_t)j * K, K, j, R, C, IL, pfd); \
    for (; j < j1; j++) tile_rm(y, x, w, j, 1); }
DEF(4, 16, 0) DEF(8, 16, 0) DEF(4, 32, 0) DEF(8, 32, 0) DEF(4, 32, 1) DEF(8, 32, 1) DEF(16, 32, 1) DEF(16, 16, 0)
typedef struct { const char *nm; int R, C, IL; size_t pfd; } mode_t_;
static mode_t_ modes[16]; static int NMODE;
static void dec(int m, float *y, const float *x, const W *w, int j0, int j1) {
    mode_t_ *M = &modes[m];
    if (!M->R) { dec_rm(y, x, w, j0, j1); return; }
#define CASE(R_, C_, IL_) if (M->R == R_ && M->C == C_ && M->IL == IL_) { dec_##R_##_##C_##_##IL_(y, x, w, j0, j1, M->pfd); return; }
    CASE(4, 16, 0) CASE(8, 16, 0) CASE(4, 32, 0) CASE(8, 32, 0) CASE(4, 32, 1) CASE(8, 32, 1) CASE(16, 32, 1) CASE(16, 16, 0)
    abort();
}
/* pack rows [0, N - N%R) of a row-major copy into w */
static void pack(W *w, const uint16_t *src, int R, int C, int IL) {
    int N = w->N, K = w->K, nc = K / C;
    for (int t = 0; t < N / R; t++) for (int c = 0; c < nc; c++) for (int r = 0; r < R; r++) for (int i = 0; i < C; i++) {
        int col = IL ? c * 32 + (i & 1) * 16 + i / 2 : c * C + i;
        w->d[((size_t)(t * nc + c) * R + r) * C + i] = src[(size_t)(t * R + r) * K + col];
    }
    memcpy(w->d + (size_t)(N / R) * R * K, src + (size_t)(N / R) * R * K, (size_t)(N % R) * K * 2);
}
static int NTH, ITERS; static W *ws; static int nw; static float *x, *y;
static volatile int bar_cnt, bar_gen;
static void barrier(void) { int g = bar_gen; if (__sync_add_and_fetch(&bar_cnt, 1) == NTH) { bar_cnt = 0; __sync_synchronize(); bar_gen = g + 1; } else while (bar_gen == g) __builtin_ia32_pause(); }
static double msum[16], mbest[16];
static void *xrun(void *arg) {
    int id = (int)(long)arg;
    for (int it = 0; it < ITERS + 1; it++)
        for (int mi = 0; mi < NMODE; mi++) {
            int mode = (mi + it) % NMODE;
            barrier(); double t0 = now_s();
            for (int i = 0; i < nw; i++) {
                W *w = &ws[i]; int per = (w->N / NTH + 15) & ~15, j0 = id * per, j1 = j0 + per < w->N ? j0 + per : w->N;
                if (j0 < j1) dec(mode, y, x, w, j0, j1);
                barrier();
            }
            double dt = now_s() - t0;
            if (it && id == 0) { msum[mode] += dt; if (dt < mbest[mode] || !mbest[mode]) mbest[mode] = dt; }
        }
    return 0;
}
int main(int argc, char **argv) {
    NTH = atoi(argv[1]); int llama = atoi(argv[2]); ITERS = atoi(argv[3]);
    /* modes from argv[4..]: "rm" or R,C,IL,pfd */
    for (int a = 4; a < argc; a++) {
        mode_t_ *M = &modes[NMODE++]; M->nm = argv[a];
        if (strcmp(argv[a], "rm")) sscanf(argv[a], "%d,%d,%d,%zu", &M->R, &M->C, &M->IL, &M->pfd);
    }
    { /* bitwise check */
        float *xx = malloc(4 * 8192), *y0 = malloc(4 * 4096), *y1 = malloc(4 * 4096);
        for (int k = 0; k < 8192; k++) xx[k] = (float)(nxt() % 2001) / 1000.f - 1.f;
        for (int m = 0; m < NMODE; m++) if (modes[m].R) {
            W w = mk(203, 2048); uint16_t *src = malloc((size_t)203 * 2048 * 2); memcpy(src, w.d, (size_t)203 * 2048 * 2);
            dec_rm(y0, xx, &w, 0, 203); pack(&w, src, modes[m].R, modes[m].C, modes[m].IL); dec(m, y1, xx, &w, 0, 203);
            printf("%s bitwise %s\n", modes[m].nm, memcmp(y0, y1, 203 * 4) ? "DIFFER" : "equal");
        }
    }
    int H = 1024, I = 3072, nh = 16, nkv = 8, hd = 128, nl = 28, V = 151936;
    if (llama) { H = 2048; I = 8192; nh = 32; nkv = 8; hd = 64; nl = 16; V = 128256; }
    int shp[7][2] = {{nh * hd, H}, {nkv * hd, H}, {nkv * hd, H}, {H, nh * hd}, {I, H}, {I, H}, {H, I}};
    nw = nl * 7 + 1; ws = calloc(256, sizeof *ws); double bytes = 0;
    for (int l = 0; l < nl; l++) for (int k = 0; k < 7; k++) ws[l * 7 + k] = mk(shp[k][0], shp[k][1]);
    ws[nw - 1] = mk(V, H);
    for (int i = 0; i < nw; i++) bytes += (double)ws[i].N * ws[i].K * 2;
    x = malloc(4 * 16384); y = malloc(4 * (size_t)V);
    for (int k = 0; k < 16384; k++) x[k] = (float)(nxt() % 2001) / 1000.f - 1.f;
    pthread_t th[4];
    for (int i = 1; i < NTH; i++) pthread_create(&th[i], 0, xrun, (void *)(long)i);
    xrun(0);
    for (int i = 1; i < NTH; i++) pthread_join(th[i], 0);
    for (int m = 0; m < NMODE; m++) printf("%-14s thr %d %s %.0f MB: mean %.2f ms (%.1f GB/s) best %.2f ms (%.1f GB/s)\n", modes[m].nm, NTH, llama ? "llama-1b" : "qwen3-0.6b", bytes / 1e6,
           msum[m] / ITERS * 1e3, bytes / (msum[m] / ITERS) / 1e9, mbest[m] * 1e3, bytes / mbest[m] / 1e9);
    return 0;
}
