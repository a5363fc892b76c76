/* q4ril_read_harness.c — is the packed q4 decode GEMV (q4ril_rows) bound by its ops or by the
 * memory stream? The qwen3-0.6b decode sequence (28 x q,k,v,o,gate,up,down + the 151936-row
 * lm_head, random codes, group 64, packed WL_Q_RIL16 in 2 MB pages) on 2 threads with a spin
 * barrier after each GEMV (static halves), four modes alternated per token in one process:
 * committed (q4ril_prepare + q4ril_rows), variantPF (the same loop with the prefetch distance
 * argv[2], 0 = no software prefetch; checked bitwise against the committed kernel), read-only
 * (the same bytes in the same order with the same prefetches, one add per 64 B), probe-like
 * (each thread one contiguous half of a buffer of the same size, like kiln-probe).
 * bench/cpu/RESULTS.md session 11 (helper-71). Not built by CMake:
 *   gcc -O2 -std=gnu11 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mfma -mf16c -Isrc \
 *       -o q4rh bench/cpu/q4ril_read_harness.c build/libkilncore.a -lpthread -lm
 *   ./q4rh [tokens=20] [prefetch bytes=8192] [threads=2] */
#include "q4ril_harness.h"
static int ITERS = 20, NMODE = 4, nw;
static char *big; static size_t bigN;
static weight_t *ws;
static float *x, *y[3];
static double msum[4], mbest[4] = {1e9, 1e9, 1e9, 1e9}, tb;
static void *run(void *arg) {
    int id = (int)(long)arg;
    for (int it = 0; it < ITERS + 1; it++)
        for (int mi = 0; mi < NMODE; mi++) {
            int mode = (mi + it) % NMODE;
            barrier();
            double t0 = now_s();
            if (mode == 3) {
                size_t per = bigN / NTH / 128 * 128; const char *p = big + per * id; __m512i a = _mm512_setzero_si512(), b = a;
                for (size_t o = 0; o < per; o += 128) a = _mm512_add_epi32(a, _mm512_load_si512(p + o)), b = _mm512_add_epi32(b, _mm512_load_si512(p + o + 64));
                sink = _mm512_add_epi32(sink, _mm512_add_epi32(a, b));
                barrier();
            } else
            for (int i = 0; i < nw; i++) {
                weight_t *w = &ws[i];
                int per = (w->rows / NTH + 15) & ~15, j0 = id * per, j1 = j0 + per < w->rows ? j0 + per : w->rows;
                if (mode == 2) { for (int t = j0 / 16; t < j1 / 16; t++) tile_r(w, t, w->cols / 8, w->cols / w->group); }
                else {
                    void *q = q4ril_prepare(x, 1, w);
                    float *yy = y[mode] + (size_t)(i == nw - 1 ? 0 : 0);
                    if (mode == 0) q4ril_rows(yy, q, w, j0, j1);
                    else for (int t = j0 / 16; t < j1 / 16; t++) tile_v(yy, q, w, t);
                    (void)0; /* q is the thread's scratch (cpu_scratch.h): not freed */
                }
                barrier();
            }
            double dt = now_s() - t0;
            if (id == 0 && it > 0) { msum[mode] += dt; if (dt < mbest[mode]) mbest[mode] = dt; }
        }
    return NULL;
}
int main(int argc, char **argv) {
    if (argc > 1) ITERS = atoi(argv[1]);
    if (argc > 2) PF = atoi(argv[2]);
    if (argc > 3) NTH = atoi(argv[3]);
    int H = 1024, I = 3072, nl = 28, V = 151936;
    int shp[7][2] = {{2048, H}, {1024, H}, {1024, H}, {H, 2048}, {I, H}, {I, H}, {H, I}};
    nw = nl * 7 + 1;
    ws = calloc(nw, sizeof *ws);
    for (int l = 0; l < nl; l++) for (int k = 0; k < 7; k++) ws[l * 7 + k] = mk(shp[k][0], shp[k][1], 64);
    ws[nw - 1] = mk(V, H, 64);
    for (int i = 0; i < nw; i++) tb += (double)ws[i].rows * ws[i].cols * (0.5 + 4.0 / 64);
    x = malloc(4 * 4096); for (int k = 0; k < 4096; k++) x[k] = (float)(nxt() % 2001) / 1000.f - 1.f;
    for (int m = 0; m < 3; m++) y[m] = calloc(V, 4);
    bigN = (size_t)tb / 4096 * 4096; big = halloc(bigN); memset(big, 1, bigN);
    /* bitwise check on a few weights */
    for (int i = 0; i < 8; i++) {
        weight_t *w = &ws[i == 7 ? nw - 1 : i]; void *q = q4ril_prepare(x, 1, w);
        q4ril_rows(y[0], q, w, 0, w->rows); for (int t = 0; t < w->rows / 16; t++) tile_v(y[1], q, w, t);
        if (memcmp(y[0], y[1], 4 * (size_t)w->rows)) { printf("MISMATCH weight %d\n", i); return 1; }
    }
    printf("bitwise equal; %.1f MB/token, PF %d, %d threads\n", tb / 1e6, PF, NTH);
    pthread_t th[8];
    for (long t = 1; t < NTH; t++) pthread_create(&th[t], NULL, run, (void *)t);
    run(0);
    for (int t = 1; t < NTH; t++) pthread_join(th[t], NULL);
    const char *nm[4] = {"committed", "variantPF", "read-only", "probe-like"};
    for (int m = 0; m < 4; m++) printf("%-10s mean %.2f ms (%.1f GB/s) best %.2f ms (%.1f GB/s)\n", nm[m], msum[m] / ITERS * 1e3, tb * ITERS / msum[m] / 1e9, mbest[m] * 1e3, tb / mbest[m] / 1e9);
    return 0;
}
