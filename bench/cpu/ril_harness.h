/* ril_harness.h — the measurement harness the rows-in-lanes prototypes (q4_ril_proto.c,
 * q8_ril_proto.c) share: random MLX weights in 2 MB pages with one token's GEMV shapes of
 * qwen3-0.6b / llama-3.2-1b (or an L2-resident 256 x 1024 ring), a spin barrier between
 * GEMVs, and the committed kernel against the prototype alternated per token.
 *
 * The including file defines, before #include:
 *   RIL_T                  the prototype's repacked weight type
 *   RIL_PACK(r, w)         repack w into *r
 *   RIL_DEC(y, x, r, w, j0, j1)    the prototype's rows j0..j1
 *   RIL_COMMITTED(y, x, w, j0, j1) kiln's committed kernel on the same rows
 *   RIL_BITS               the code width (RIL_BITS_FROM_ARGV: argv[4] overrides it) */
static double now_s(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }
static int BITS = RIL_BITS;
static RIL_T *rs;
static uint64_t rng = 88172645463325252ull;
static uint32_t nxt(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)(rng >> 11); }
static void *halloc(size_t n) { size_t H = 2u << 20, m = (n + H - 1) & ~(H - 1); void *p = aligned_alloc(H, m); madvise(p, m, MADV_HUGEPAGE); return p; }
static weight_t mk(int N, int K, int G) {
    weight_t w = {N, K, DT_U32};
    size_t words = (size_t)N * K * BITS / 32; uint32_t *c = halloc(words * 4 + 64);
    for (size_t i = 0; i < words; i++) c[i] = nxt() ^ (nxt() << 16);
    int ng = K / G; uint16_t *sc = halloc((size_t)N * ng * 2), *bi = halloc((size_t)N * ng * 2);
    for (size_t i = 0; i < (size_t)N * ng; i++) { sc[i] = 0x3c00 + nxt() % 64; bi[i] = 0xbc00 + nxt() % 64; }
    w.data = c; w.bits = BITS; w.group = G; w.scales = sc; w.biases = bi; w.sb_dtype = DT_BF16;
    return w;
}
static int NTH, ITERS, NMODE = 2;
static weight_t *ws; static int nw;
static float *x, *y;
static volatile int bar_cnt, bar_gen;
static void barrier(void) {
    int g = bar_gen;
    if (__sync_add_and_fetch(&bar_cnt, 1) == NTH) { bar_cnt = 0; __sync_synchronize(); bar_gen = g + 1; }
    else while (bar_gen == g) __builtin_ia32_pause();
}
static double msum[4], mbest[4];
static void *xrun(void *arg) {
    int id = (int)(long)arg;
    for (int it = 0; it < ITERS + 1; it++)
        for (int mi = 0; mi < NMODE; mi++) {
            int mode = (mi + it) % NMODE;
            barrier();
            double t0 = now_s();
            for (int i = 0; i < nw; i++) {
                weight_t *w = &ws[i];
                int per = (w->rows / NTH + 15) & ~15, j0 = id * per, j1 = j0 + per < w->rows ? j0 + per : w->rows;
                if (mode == 0) RIL_COMMITTED(y, x, w, j0, j1); else RIL_DEC(y, x, &rs[i], w, j0, j1);
                barrier();
            }
            double dt = now_s() - t0;
            if (it && id == 0) { msum[mode] += dt; if (dt < mbest[mode] || !mbest[mode]) mbest[mode] = dt; }
        }
    return 0;
}
int main(int argc, char **argv) {
    NTH = atoi(argv[1]); int llama = atoi(argv[2]); ITERS = atoi(argv[3]);
#ifdef RIL_BITS_FROM_ARGV
    BITS = atoi(argv[4]);
#endif
    {
        float *xx = malloc(4 * 8192), *y0 = malloc(4 * 4096), *y1 = malloc(4 * 4096);
        for (int k = 0; k < 8192; k++) xx[k] = (float)(nxt() % 2001) / 1000.f - 1.f;
        int Ks[] = {1024, 3072}; double worst = 0;
        for (int a = 0; a < 2; a++) {
            weight_t w = mk(256, Ks[a], 64); RIL_T r; RIL_PACK(&r, &w);
            RIL_COMMITTED(y0, xx, &w, 0, 256); RIL_DEC(y1, xx, &r, &w, 0, 256);
            double num = 0, den = 0;
            for (int n = 0; n < 256; n++) { num += fabs((double)y0[n] - y1[n]); den += fabs((double)y0[n]); }
            if (num / den > worst) worst = num / den;
        }
        printf("ril vs committed kernel: mean rel diff %.3g\n", worst);
    }
    int H = 1024, I = 3072, nh = 16, nkv = 8, hd = 128, nl = 28, V = 151936;
    if (llama) { H = 2048; I = 8192; nh = 32; nkv = 8; hd = 64; nl = 16; V = 128256; }
    int shp[7][2] = {{nh * hd, H}, {nkv * hd, H}, {nkv * hd, H}, {H, nh * hd}, {I, H}, {I, H}, {H, I}};
    nw = nl * 7 + 1; ws = calloc(256, sizeof *ws);
    double bytes = 0;
    if (llama == 2) { nw = 200; ws[0] = mk(256, 1024, 64); ws[1] = mk(256, 3072, 64); for (int i = 2; i < nw; i++) ws[i] = ws[0]; }
    else {
    for (int l = 0; l < nl; l++) for (int k = 0; k < 7; k++) ws[l * 7 + k] = mk(shp[k][0], shp[k][1], 64);
    ws[nw - 1] = mk(V, H, 64);
    }
    for (int i = 0; i < nw; i++) bytes += (double)ws[i].rows * ws[i].cols * (BITS / 8.0 + 4.0 / 64);
    rs = calloc(256, sizeof *rs);
    if (llama == 2) { RIL_PACK(&rs[0], &ws[0]); RIL_PACK(&rs[1], &ws[1]); for (int i = 2; i < nw; i++) rs[i] = rs[0]; }
    else for (int i = 0; i < nw; i++) RIL_PACK(&rs[i], &ws[i]);
    x = malloc(4 * 16384); y = malloc(4 * (size_t)V);
    for (int k = 0; k < 16384; k++) x[k] = (float)(nxt() % 2001) / 1000.f - 1.f;
    pthread_t th[2];
    for (int i = 1; i < NTH; i++) pthread_create(&th[i], 0, xrun, (void *)(long)i);
    xrun(0);
    for (int i = 1; i < NTH; i++) pthread_join(th[i], 0);
    const char *nm[3] = {"committed", "rows-in-lanes", ""};
    for (int m = 0; m < NMODE; m++) printf("%s threads %d %s: %.1f MB/token, mean %.2f ms (%.1f GB/s), best %.2f ms (%.1f GB/s)\n", nm[m], NTH, llama == 2 ? "L2 256x1024" : llama ? "llama-3.2-1b" : "qwen3-0.6b", bytes / 1e6,
           msum[m] / ITERS * 1e3, bytes / (msum[m] / ITERS) / 1e9, mbest[m] * 1e3, bytes / mbest[m] / 1e9);
    return 0;
}
