/* q4ril_il_harness.c (helper-75, session 11; from helper-71's q4ril_read_harness.c) — would
 * scales/biases interleaved into the WL_Q_RIL16 tile stream (per group: the G/8 code lines, then
 * the group's 16 scales and 16 biases) make the q4 decode GEMV faster? Modes alternated per
 * token: 0 committed q4ril_rows, 1 the same kernel reading the interleaved copy (checked
 * bitwise), 2 read-only of the committed pattern, 3 read-only of the interleaved bytes in
 * order, 4 probe-like. Build as below with -o q4il bench/cpu/q4ril_il_harness.c (against a
 * build's libkilncore.a). Env: LLAMA=1 the llama-3.2-1b sequence instead of qwen3-0.6b's;
 * SBFIRST=1 per group [scales][biases][codes] instead of [codes][scales][biases]; ONLY=k only
 * weight k (0 q, 1 k, 2 v, 3 o, 4 gate, 5 up, 6 down) of each layer, no lm_head.
 * Results: bench/cpu/RESULTS.md session 11 (helper-75).
 * Original comment: is the packed q4 decode GEMV (q4ril_rows) bound by its ops or by the
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

/* interleaved copies: per weight, tile t at t*tb: per group g [wpg*64 B codes][16 scales][16 biases] */
static char **ilb;
static int SBF; /* SBFIRST=1: per group [16 scales][16 biases][codes] instead of [codes][scales][biases] */
static size_t il_tile_bytes(const weight_t *w) { size_t sbz = w->sb_dtype == DT_F32 ? 4 : 2; int ng = w->cols / w->group; return (size_t)ng * ((size_t)w->group / 8 * 64 + 32 * sbz); }
static char *mk_il(const weight_t *w, void *(*al)(size_t)) {
    int nw = w->cols / 8, ng = w->cols / w->group, wpg = w->group / 8, nt = w->rows / 16;
    size_t sbz = w->sb_dtype == DT_F32 ? 4 : 2, tb = il_tile_bytes(w);
    char *b = al(tb * nt + 64);
    for (int t = 0; t < nt; t++) for (int g = 0; g < ng; g++) {
        char *o = b + t * tb + (size_t)g * (wpg * 64 + 32 * sbz);
        size_t co = SBF ? 32 * sbz : 0, so = SBF ? 0 : (size_t)wpg * 64;
        memcpy(o + co, (const char *)w->data + ((size_t)t * nw + (size_t)g * wpg) * 64, (size_t)wpg * 64);
        memcpy(o + so, (const char *)w->scales + ((size_t)t * ng + g) * 16 * sbz, 16 * sbz);
        memcpy(o + so + 16 * sbz, (const char *)w->biases + ((size_t)t * ng + g) * 16 * sbz, 16 * sbz);
    }
    return b;
}
static void tile_il(float *y, const q4r_x_t *q, const weight_t *w, const char *il, int t) {
    const int ng = q->ng, wpg = q->G / 8;
    size_t sbz = w->sb_dtype == DT_F32 ? 4 : 2, gb = (size_t)wpg * 64 + 32 * sbz;
    const uint8_t *c = (const uint8_t *)il + (size_t)t * ng * gb;
    const __m512i m4 = _mm512_set1_epi8(15);
    const int8_t *xw = q->xd;
    __m512 acc = _mm512_setzero_ps();
    for (int g = 0; g < ng; g++) {
        __m512i a0l = _mm512_setzero_si512(), a0h = a0l, a1l = a0l, a1h = a0l, a2l = a0l, a2h = a0l;
        __m512 sc, bs;
        if (SBF) {
            if (PF) for (size_t o = 0; o < 32 * sbz; o += 64) _mm_prefetch((const char *)c + PF + o, _MM_HINT_T0);
            sc = sb16(c, w->sb_dtype, 0, 16); bs = sb16(c + 16 * sbz, w->sb_dtype, 0, 16);
            c += 32 * sbz;
        }
        for (int i = 0; i < wpg; i++, c += 64, xw += 24) {
            if (PF) _mm_prefetch((const char *)c + PF, _MM_HINT_T0);
            __m512i v = _mm512_loadu_si512(c);
            __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
            a0l = dpb(a0l, lo, xw); a0h = dpb(a0h, hi, xw + 4);
            a1l = dpb(a1l, lo, xw + 8); a1h = dpb(a1h, hi, xw + 12);
            a2l = dpb(a2l, lo, xw + 16); a2h = dpb(a2h, hi, xw + 20);
        }
        if (!SBF) {
            if (PF) for (size_t o = 0; o < 32 * sbz; o += 64) _mm_prefetch((const char *)c + PF + o, _MM_HINT_T0);
            sc = sb16(c, w->sb_dtype, 0, 16); bs = sb16(c + 16 * sbz, w->sb_dtype, 0, 16);
            c += 32 * sbz;
        }
        acc = fold(acc, _mm512_add_epi32(a0l, a0h), _mm512_add_epi32(a1l, a1h), _mm512_add_epi32(a2l, a2h), bs, sc, q->xs + g, q->pv + g);
    }
    _mm512_storeu_ps(y + (size_t)t * 16, acc);
}
static void tile_ilr(const weight_t *w, const char *il, int t) {
    size_t tb = il_tile_bytes(w);
    const char *p = il + t * tb;
    __m512i a = _mm512_setzero_si512(), b = a;
    size_t o = 0;
    for (; o + 128 <= tb; o += 128) {
        if (PF) { _mm_prefetch(p + o + PF, _MM_HINT_T0); _mm_prefetch(p + o + 64 + PF, _MM_HINT_T0); }
        a = _mm512_add_epi32(a, _mm512_loadu_si512(p + o)); b = _mm512_add_epi32(b, _mm512_loadu_si512(p + o + 64));
    }
    for (; o < tb; o += 64) { if (PF) _mm_prefetch(p + o + PF, _MM_HINT_T0); a = _mm512_add_epi32(a, _mm512_loadu_si512(p + o)); }
    sink = _mm512_add_epi32(sink, _mm512_add_epi32(a, b));
}
static int ITERS = 20, NMODE = 5, nw;
static char *big; static size_t bigN;
static weight_t *ws;
static float *x, *y[3];
static double msum[5], mbest[5] = {1e9, 1e9, 1e9, 1e9, 1e9}, tb;
static void *run(void *arg) {
    int id = (int)(long)arg;
    for (int it = 0; it < ITERS + 1; it++)
        for (int mi = 0; mi < NMODE; mi++) {
            int mode = (mi + it) % NMODE;
            barrier();
            double t0 = now_s();
            if (mode == 4) {
                size_t per = bigN / NTH / 128 * 128; const char *p = big + per * id; __m512i a = _mm512_setzero_si512(), b = a;
                for (size_t o = 0; o < per; o += 128) a = _mm512_add_epi32(a, _mm512_load_si512(p + o)), b = _mm512_add_epi32(b, _mm512_load_si512(p + o + 64));
                sink = _mm512_add_epi32(sink, _mm512_add_epi32(a, b));
                barrier();
            } else
            for (int i = 0; i < nw; i++) {
                weight_t *w = &ws[i];
                int per = (w->rows / NTH + 15) & ~15, j0 = id * per, j1 = j0 + per < w->rows ? j0 + per : w->rows;
                if (mode == 2) { for (int t = j0 / 16; t < j1 / 16; t++) tile_r(w, t, w->cols / 8, w->cols / w->group); }
                else if (mode == 3) { for (int t = j0 / 16; t < j1 / 16; t++) tile_ilr(w, ilb[i], t); }
                else {
                    void *q = q4ril_prepare(x, 1, w);
                    if (mode == 0) q4ril_rows(y[0], q, w, j0, j1);
                    else for (int t = j0 / 16; t < j1 / 16; t++) tile_il(y[1], q, w, ilb[i], t);
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
    if (getenv("LLAMA")) { /* llama-3.2-1b: 16 layers, hidden 2048, MLP 8192, k/v 512 rows, 128256-row lm_head */
        H = 2048; I = 8192; nl = 16; V = 128256;
        int l[7][2] = {{H, H}, {512, H}, {512, H}, {H, H}, {I, H}, {I, H}, {H, I}};
        memcpy(shp, l, sizeof l);
    }
    const char *only = getenv("ONLY"); /* ONLY=k: only weight k (0 q .. 6 down) of each layer, no lm_head */
    nw = only ? nl : nl * 7 + 1;
    ws = calloc(nw, sizeof *ws);
    if (only) for (int l = 0; l < nl; l++) ws[l] = mk(shp[atoi(only)][0], shp[atoi(only)][1], 64);
    else {
        for (int l = 0; l < nl; l++) for (int k = 0; k < 7; k++) ws[l * 7 + k] = mk(shp[k][0], shp[k][1], 64);
        ws[nw - 1] = mk(V, H, 64);
    }
    SBF = getenv("SBFIRST") != NULL;
    ilb = calloc(nw, sizeof *ilb);
    for (int i = 0; i < nw; i++) ilb[i] = mk_il(&ws[i], halloc);
    for (int i = 0; i < nw; i++) tb += (double)ws[i].rows * ws[i].cols * (0.5 + 4.0 / 64);
    x = malloc(4 * 4096); for (int k = 0; k < 4096; k++) x[k] = (float)(nxt() % 2001) / 1000.f - 1.f;
    for (int m = 0; m < 3; m++) y[m] = calloc(V, 4);
    bigN = (size_t)tb / 4096 * 4096; big = halloc(bigN); memset(big, 1, bigN);
    /* bitwise check on a few weights */
    for (int i = 0; i < 8; i++) {
        weight_t *w = &ws[i == 7 ? nw - 1 : i]; void *q = q4ril_prepare(x, 1, w);
        q4ril_rows(y[0], q, w, 0, w->rows); for (int t = 0; t < w->rows / 16; t++) tile_il(y[1], q, w, ilb[i == 7 ? nw - 1 : i], t);
        if (memcmp(y[0], y[1], 4 * (size_t)w->rows)) { printf("MISMATCH weight %d\n", i); return 1; }
    }
    printf("bitwise equal; %.1f MB/token, PF %d, %d threads\n", tb / 1e6, PF, NTH);
    pthread_t th[8];
    for (long t = 1; t < NTH; t++) pthread_create(&th[t], NULL, run, (void *)t);
    run(0);
    for (int t = 1; t < NTH; t++) pthread_join(th[t], NULL);
    const char *nm[5] = {"committed", "interleave", "read-cur", "read-il", "probe-like"};
    for (int m = 0; m < 5; m++) printf("%-10s mean %.2f ms (%.1f GB/s) best %.2f ms (%.1f GB/s)\n", nm[m], msum[m] / ITERS * 1e3, tb * ITERS / msum[m] / 1e9, mbest[m] * 1e3, tb / mbest[m] / 1e9);
    return 0;
}
