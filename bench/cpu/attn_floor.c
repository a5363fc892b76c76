/* attn_floor.c — how fast can one core run a decode step's attention for one layer of
 * qwen3-0.6b (8 KV heads, 2 queries per KV head, head_dim 128, f16 K/V) in kiln's cache
 * layout — K transposed per 16-position block ([block][head][d][16]), V rows
 * ([block][slot][head][d]) — with nothing but the arithmetic: a floor to hold the decode
 * tile (attention_tile_body.h) against. Not part of kiln; its numbers are not kiln's bits
 * (the score chains over d are split in NSPLIT for latency).
 *
 * Per KV head, per 32 positions: scores s[q][j] = q·K[j] (2 queries × 2 lane vectors of
 * 16 keys, d split over NSPLIT chains), online softmax (max, exp, rescale), then
 * acc[q] += Σ_j p[q][j] · V[j] (16 accumulators: 2 queries × 8 vectors of head_dim).
 * Usage: attn_floor POSITIONS ITERS [COLD(0|1) [THREADS [MODE: 0 heads split, 1 positions split (head-outer); 2 heads split, 3 positions split (block-outer)]]]
 * gcc -O2 -mavx512f -mavx512bw -mavx512vl -mfma -mf16c -o /tmp/attn_floor bench/cpu/attn_floor.c -lm -lpthread */
#define _GNU_SOURCE
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

enum { NH = 8, G = 2, HD = 128, BS = 16, KB = 32 };
#ifndef NSPLIT
#define NSPLIT 2
#endif
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

/* e^x for x <= 0 (x = -inf -> 0): 2^(x·log2e) by a degree-6 polynomial, as the tile does */
static inline __m512 exp_ps(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.f));
    __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504f));
    __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_sub_ps(t, n);
    __m512 p = _mm512_set1_ps(1.535336188e-4f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.339887440e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.618437357e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550332471e-2f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.402264791e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931472028e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f));
    return _mm512_scalef_ps(p, n);
}

/* the scores of 32 keys (K runs k0, k1: 16 keys each, [d][16]) for the head's 2 queries and the
 * online-softmax step: m, l updated, P[q][j] = e^(s - m'), c[q] = e^(m - m') (the acc rescale) */
static inline void block_softmax(float P[2][KB], float c[2], float m[2], float l[2], const float *q, const uint16_t *k0,
                                 const uint16_t *k1) {
    __m512 s[2][2][NSPLIT];
    for (int a = 0; a < 2; a++)
        for (int u = 0; u < 2; u++)
            for (int z = 0; z < NSPLIT; z++) s[a][u][z] = _mm512_setzero_ps();
    for (int d = 0; d < HD; d += NSPLIT)
#pragma GCC unroll 4
        for (int z = 0; z < NSPLIT; z++) {
            __m512 ka = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(k0 + (size_t)(d + z) * BS)));
            __m512 kb = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(k1 + (size_t)(d + z) * BS)));
            __m512 q0 = _mm512_set1_ps(q[d + z]), q1 = _mm512_set1_ps(q[HD + d + z]);
            s[0][0][z] = _mm512_fmadd_ps(q0, ka, s[0][0][z]);
            s[0][1][z] = _mm512_fmadd_ps(q0, kb, s[0][1][z]);
            s[1][0][z] = _mm512_fmadd_ps(q1, ka, s[1][0][z]);
            s[1][1][z] = _mm512_fmadd_ps(q1, kb, s[1][1][z]);
        }
    for (int a = 0; a < 2; a++) {
        __m512 sv[2];
        for (int u = 0; u < 2; u++) {
            __m512 t = s[a][u][0];
            for (int z = 1; z < NSPLIT; z++) t = _mm512_add_ps(t, s[a][u][z]);
            sv[u] = _mm512_mul_ps(t, _mm512_set1_ps(0.08838834764f));
        }
        float mb = _mm512_reduce_max_ps(_mm512_max_ps(sv[0], sv[1])), mn = m[a] > mb ? m[a] : mb;
        __m512 p0 = exp_ps(_mm512_sub_ps(sv[0], _mm512_set1_ps(mn))), p1 = exp_ps(_mm512_sub_ps(sv[1], _mm512_set1_ps(mn)));
        c[a] = expf(m[a] - mn);
        l[a] = l[a] * c[a] + _mm512_reduce_add_ps(_mm512_add_ps(p0, p1));
        m[a] = mn;
        _mm512_storeu_ps(P[a], p0);
        _mm512_storeu_ps(P[a] + 16, p1);
    }
}

/* acc[q] = acc[q]·c[q] + Σ_j P[q][j] · V[j] over the 32 V rows from vb (row stride vrow
 * elements); pf: prefetch the next 32 rows' lines as it goes */
static inline void block_pv(__m512 acc0[8], __m512 acc1[8], float P[2][KB], const float c[2], const uint16_t *vb, size_t vrow,
                            int pf) {
    __m512 cv0 = _mm512_set1_ps(c[0]), cv1 = _mm512_set1_ps(c[1]);
    for (int k = 0; k < 8; k++) acc0[k] = _mm512_mul_ps(acc0[k], cv0), acc1[k] = _mm512_mul_ps(acc1[k], cv1);
    for (int j = 0; j < KB; j++) {
        const uint16_t *vj = vb + (size_t)j * vrow;
        if (pf) __builtin_prefetch(vj + KB * vrow, 0, 2), __builtin_prefetch(vj + KB * vrow + 32, 0, 2),
                __builtin_prefetch(vj + KB * vrow + 64, 0, 2), __builtin_prefetch(vj + KB * vrow + 96, 0, 2);
        __m512 pa = _mm512_set1_ps(P[0][j]), pb = _mm512_set1_ps(P[1][j]);
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            __m512 vv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(vj + k * 16)));
            acc0[k] = _mm512_fmadd_ps(pa, vv, acc0[k]);
            acc1[k] = _mm512_fmadd_ps(pb, vv, acc1[k]);
        }
    }
}

/* one KV head over positions [p0, npos): out[2][HD], the accumulators in registers throughout */
static void head(float *out, const float *q /* [2][HD] */, const uint16_t *kt, const uint16_t *v, int p0, int npos, int h) {
    __m512 acc0[8], acc1[8];
    for (int k = 0; k < 8; k++) acc0[k] = acc1[k] = _mm512_setzero_ps();
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0}, c[2], P[2][KB] __attribute__((aligned(64)));
    const size_t kblk = (size_t)NH * HD * BS, vrow = (size_t)NH * HD;
    for (int b0 = p0; b0 < npos; b0 += KB) {
        const uint16_t *k0 = kt + (size_t)(b0 / BS) * kblk + (size_t)h * HD * BS, *k1 = k0 + kblk;
        block_softmax(P, c, m, l, q, k0, k1);
        block_pv(acc0, acc1, P, c, v + (size_t)b0 * vrow + (size_t)h * HD, vrow, b0 + KB < npos);
        if (b0 + KB < npos) /* the next 32 keys' K runs */
            for (int o = 0; o < HD * BS; o += 32) __builtin_prefetch(k0 + 2 * kblk + o, 0, 2), __builtin_prefetch(k1 + 2 * kblk + o, 0, 2);
    }
    __m512 r0 = _mm512_set1_ps(1.f / l[0]), r1 = _mm512_set1_ps(1.f / l[1]);
    for (int k = 0; k < 8; k++) {
        _mm512_storeu_ps(out + k * 16, _mm512_mul_ps(acc0[k], r0));
        _mm512_storeu_ps(out + HD + k * 16, _mm512_mul_ps(acc1[k], r1));
    }
}

/* one KV head's online-softmax state, kept in memory between blocks (the block-outer walks) */
typedef struct { float m[2], l[2]; float acc[2][HD] __attribute__((aligned(64))); } hstate_t;

/* keys [b0, b0 + KB) of head h into its state st (no prefetch: walk_blocks does it) */
static void head_block(hstate_t *st, const float *q, const uint16_t *kt, const uint16_t *v, int b0, int h) {
    __m512 acc0[8], acc1[8];
    for (int k = 0; k < 8; k++) acc0[k] = _mm512_load_ps(st->acc[0] + k * 16), acc1[k] = _mm512_load_ps(st->acc[1] + k * 16);
    const size_t kblk = (size_t)NH * HD * BS, vrow = (size_t)NH * HD;
    const uint16_t *k0 = kt + (size_t)(b0 / BS) * kblk + (size_t)h * HD * BS, *k1 = k0 + kblk;
    float c[2], P[2][KB] __attribute__((aligned(64)));
    block_softmax(P, c, st->m, st->l, q, k0, k1);
    block_pv(acc0, acc1, P, c, v + (size_t)b0 * vrow + (size_t)h * HD, vrow, 0);
    for (int k = 0; k < 8; k++) _mm512_store_ps(st->acc[0] + k * 16, acc0[k]), _mm512_store_ps(st->acc[1] + k * 16, acc1[k]);
}

/* heads [h0, h1) over keys [p0, p1), block-outer: each block's K (32 KB for all heads) and V
 * rows read head after head, the next block prefetched line by line through the block */
static void walk_blocks(hstate_t *st, int h0, int h1, int p0, int p1, int npos) {
    for (int h = h0; h < h1; h++) {
        st[h].m[0] = st[h].m[1] = -INFINITY, st[h].l[0] = st[h].l[1] = 0;
        memset(st[h].acc, 0, sizeof st[h].acc);
    }
    extern uint16_t *gK, *gV;
    extern float gq[NH][2 * HD];
    const size_t kblk = (size_t)NH * HD * BS, vrow = (size_t)NH * HD;
    for (int b0 = p0; b0 < p1; b0 += KB) {
        if (b0 + KB < npos) { /* the next 32 positions of heads [h0, h1): K runs and V rows */
            const char *kn = (const char *)(gK + (size_t)((b0 + KB) / BS) * kblk + (size_t)h0 * HD * BS);
            size_t kbytes = (size_t)(h1 - h0) * HD * BS * 2;
            for (int cb = 0; cb < KB / BS; cb++)
                for (size_t o = 0; o < kbytes; o += 64) __builtin_prefetch(kn + cb * kblk * 2 + o, 0, 2);
            for (int j = 0; j < KB; j++) {
                const char *vn = (const char *)(gV + (size_t)(b0 + KB + j) * vrow + (size_t)h0 * HD);
                for (size_t o = 0; o < (size_t)(h1 - h0) * HD * 2; o += 64) __builtin_prefetch(vn + o, 0, 2);
            }
        }
        for (int h = h0; h < h1; h++) head_block(&st[h], gq[h], gK, gV, b0, h);
    }
}

#include <pthread.h>
#include <stdatomic.h>
static int g_npos, g_mode, g_nt;
uint16_t *gK, *gV;
float gq[NH][2 * HD];
static float gout[2][NH][2 * HD];
static hstate_t gst[2][NH];
static atomic_int g_go, g_done;
/* thread t's share: mode 0 heads [t·NH/nt, ...) over all positions; mode 1 all heads over
 * positions [t·npos/nt, ...) (a partial state each, merge not timed: 8 heads × 2 × 128 floats) */
static void share(int t) {
    if (g_mode == 2) { /* heads split, block-outer */
        walk_blocks(gst[t & 1], t * NH / g_nt, (t + 1) * NH / g_nt, 0, g_npos, g_npos);
        return;
    }
    if (g_mode == 3) { /* positions split, block-outer over all heads */
        int p0 = g_npos / KB * t / g_nt * KB, p1 = g_npos / KB * (t + 1) / g_nt * KB;
        walk_blocks(gst[t & 1], 0, NH, p0, p1, p1);
        return;
    }
    if (g_mode == 0)
        for (int h = t * NH / g_nt; h < (t + 1) * NH / g_nt; h++) head(gout[0][h], gq[h], gK, gV, 0, g_npos, h);
    else {
        int p0 = g_npos / KB * t / g_nt * KB, p1 = g_npos / KB * (t + 1) / g_nt * KB;
        for (int h = 0; h < NH; h++) head(gout[t & 1][h], gq[h], gK, gV, p0, p1, h);
    }
}
static void *worker(void *arg) {
    int t = (int)(intptr_t)arg, seen = 0;
    for (;;) {
        int g;
        while ((g = atomic_load(&g_go)) == seen) __builtin_ia32_pause();
        if (g < 0) return NULL;
        seen = g;
        share(t);
        atomic_fetch_add(&g_done, 1);
    }
}

int main(int argc, char **argv) {
    int npos = argc > 1 ? atoi(argv[1]) : 576, iters = argc > 2 ? atoi(argv[2]) : 200, cold = argc > 3 ? atoi(argv[3]) : 0;
    g_nt = argc > 4 ? atoi(argv[4]) : 1;
    g_mode = argc > 5 ? atoi(argv[5]) : 0;
    npos = (npos + KB - 1) / KB * KB;
    g_npos = npos;
    size_t kv = (size_t)npos * NH * HD;
    uint16_t *K = aligned_alloc(2 << 20, (kv * 2 + (2 << 20)) & ~(size_t)((2 << 20) - 1));
    uint16_t *V = aligned_alloc(2 << 20, (kv * 2 + (2 << 20)) & ~(size_t)((2 << 20) - 1));
    madvise(K, kv * 2, MADV_HUGEPAGE); madvise(V, kv * 2, MADV_HUGEPAGE);
    gK = K, gV = V;
    srand(1);
    for (size_t i = 0; i < kv; i++) K[i] = _cvtss_sh((float)rand() / RAND_MAX - 0.5f, 0), V[i] = _cvtss_sh((float)rand() / RAND_MAX - 0.5f, 0);
    for (int h = 0; h < NH; h++) for (int i = 0; i < 2 * HD; i++) gq[h][i] = (float)rand() / RAND_MAX - 0.5f;
    pthread_t th[8];
    for (int t = 1; t < g_nt; t++) pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t);
    size_t flush = 256u << 20;
    char *fl = cold ? malloc(flush) : NULL;
    if (fl) memset(fl, 1, flush);
    double best = 1e9, sum = 0;
    volatile float sink = 0;
    for (int it = 0; it < iters; it++) {
        if (fl) { for (size_t o = 0; o < flush; o += 64) sink += fl[o]; }
        atomic_store(&g_done, 0);
        double t = now();
        atomic_store(&g_go, it + 1);
        share(0);
        while (atomic_load(&g_done) < g_nt - 1) __builtin_ia32_pause();
        t = now() - t;
        if (t < best) best = t;
        sum += t;
        sink += gout[0][3][5];
    }
    atomic_store(&g_go, -1);
    for (int t = 1; t < g_nt; t++) pthread_join(th[t], NULL);
    double bytes = 2.0 * kv * 2;
    printf("{\"pos\": %d, \"threads\": %d, \"mode\": %d, \"nsplit\": %d, \"cold\": %d, \"best_ms\": %.4f, \"mean_ms\": %.4f, \"GB_s\": %.1f}\n",
           npos, g_nt, g_mode, NSPLIT, cold, best * 1e3, sum / iters * 1e3, bytes / best / 1e9);
    return 0;
}
