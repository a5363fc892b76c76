/* q4ril_harness.h — what the two q4 decode-GEMV harnesses share (q4ril_read_harness.c,
 * helper-71; q4ril_il_harness.c, helper-75; bench/cpu/RESULTS.md session 11): the committed
 * kernel's 6-chain tile as a variant with a prefetch distance (tile_v), a pure read of the
 * same bytes (tile_r), the random-weight/huge-page helpers (mk, halloc), the clock and the
 * threads' spin barrier (NTH threads). Included first, once, by a
 * harness's .c file; not built by CMake. */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_pack.h"
#include "backend/cpu/q4ril.h"
#include "backend/cpu/avx512_common.h"
#define AI static inline __attribute__((always_inline))
typedef struct { int8_t *xd; float *pv, *xs; int K, G, nw, ng; } q4r_x_t;
typedef int32_t i32_alias __attribute__((may_alias));
AI __m512i dpb(__m512i acc, __m512i u, const int8_t *p) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u), "m"(*(const i32_alias *)p));
    return acc;
}
AI __m512 fold(__m512 acc, __m512i a0, __m512i a1, __m512i a2, __m512 bias, __m512 scale, const float *xs, const float *pv) {
    __m512i a01 = _mm512_add_epi32(_mm512_slli_epi32(a0, 8), a1);
    __m512 tv = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a01), _mm512_set1_ps(256.f), _mm512_cvtepi32_ps(a2));
    acc = _mm512_fmadd_ps(bias, _mm512_set1_ps(*xs), acc);
    return _mm512_fmadd_ps(_mm512_mul_ps(scale, _mm512_set1_ps(*pv)), tv, acc);
}
static int PF = 8192, VAR = 1;
/* variant: 12 chains (two words per step) */
static void tile_v(float *y, const q4r_x_t *q, const weight_t *w, int t) {
    const int nw = q->nw, ng = q->ng, wpg = q->G / 8;
    const uint8_t *cw = (const uint8_t *)w->data + (size_t)t * nw * 64;
    size_t sb = (size_t)t * ng * 16, sbz = w->sb_dtype == DT_F32 ? 4 : 2;
    const char *sp = (const char *)w->scales + sb * sbz, *bp = (const char *)w->biases + sb * sbz;
    const __m512i m4 = _mm512_set1_epi8(15);
    const int8_t *xd = q->xd;
    __m512 acc = _mm512_setzero_ps();
    for (int g = 0; g < ng; g++) {
        if (PF && !((g * 16 * sbz) & 63)) {
            _mm_prefetch(sp + (size_t)(ng + g) * 16 * sbz, _MM_HINT_T0);
            _mm_prefetch(bp + (size_t)(ng + g) * 16 * sbz, _MM_HINT_T0);
        }
        __m512i z = _mm512_setzero_si512();
        __m512i a0l = z, a0h = z, a1l = z, a1h = z, a2l = z, a2h = z;
        __m512i b0l = z, b0h = z, b1l = z, b1h = z, b2l = z, b2h = z;
        const uint8_t *c = cw + (size_t)g * wpg * 64;
        const int8_t *xw = xd + (size_t)g * wpg * 24;
        for (int i = 0; i < wpg; i++, c += 64, xw += 24) {
            if (PF) _mm_prefetch((const char *)c + PF, _MM_HINT_T0);
            __m512i v = _mm512_loadu_si512(c);
            __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
            a0l = dpb(a0l, lo, xw); a0h = dpb(a0h, hi, xw + 4);
            a1l = dpb(a1l, lo, xw + 8); a1h = dpb(a1h, hi, xw + 12);
            a2l = dpb(a2l, lo, xw + 16); a2h = dpb(a2h, hi, xw + 20);
        }
        (void)b0l; (void)b0h; (void)b1l; (void)b1h; (void)b2l; (void)b2h;
        __m512i s0 = _mm512_add_epi32(a0l, a0h), s1 = _mm512_add_epi32(a1l, a1h), s2 = _mm512_add_epi32(a2l, a2h);
        acc = fold(acc, s0, s1, s2, sb16(w->biases, w->sb_dtype, sb + (size_t)g * 16, 16), sb16(w->scales, w->sb_dtype, sb + (size_t)g * 16, 16),
                   q->xs + g, q->pv + g);
    }
    _mm512_storeu_ps(y + (size_t)t * 16, acc);
}
/* pure read of the same bytes */
static __m512i sink;
static void tile_r(const weight_t *w, int t, int nw, int ng) {
    const uint8_t *cw = (const uint8_t *)w->data + (size_t)t * nw * 64;
    __m512i a = _mm512_setzero_si512(), b = a;
    for (int i = 0; i < nw; i += 2, cw += 128) {
        if (PF) { _mm_prefetch((const char *)cw + PF, _MM_HINT_T0);
        _mm_prefetch((const char *)cw + 64 + PF, _MM_HINT_T0); }
        a = _mm512_add_epi32(a, _mm512_loadu_si512(cw)); b = _mm512_add_epi32(b, _mm512_loadu_si512(cw + 64));
    }
    const uint8_t *s = (const uint8_t *)w->scales + (size_t)t * ng * 32, *bb = (const uint8_t *)w->biases + (size_t)t * ng * 32;
    for (int i = 0; i < ng * 32; i += 64) a = _mm512_add_epi32(a, _mm512_loadu_si512(s + i)), b = _mm512_add_epi32(b, _mm512_loadu_si512(bb + i));
    sink = _mm512_add_epi32(sink, _mm512_add_epi32(a, b));
}

/* the clock, random packed q4 weights in 2 MB pages, and the spin barrier of NTH threads */
static double now_s(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }
static uint64_t rng = 88172645463325252ull;
static uint32_t nxt(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)(rng >> 11); }
static void *halloc(size_t n) { size_t H = 2u << 20, m = (n + H - 1) & ~(H - 1); void *p = aligned_alloc(H, m); madvise(p, m, MADV_HUGEPAGE); memset(p, 0, m); return p; }
static weight_t mk(int N, int K, int G) {
    weight_t w = {N, K, DT_U32};
    size_t words = (size_t)N * K / 8; uint32_t *c = halloc(words * 4 + 64);
    for (size_t i = 0; i < words; i++) c[i] = nxt() ^ (nxt() << 16);
    int ng = K / G; uint16_t *sc = halloc((size_t)N * ng * 2), *bi = halloc((size_t)N * ng * 2);
    for (size_t i = 0; i < (size_t)N * ng; i++) { sc[i] = f32_to_bf16(0.001f + (float)(nxt() % 1000) * 1e-5f); bi[i] = f32_to_bf16(-0.01f * (float)(nxt() % 100) / 100.f); }
    w.data = c; w.bits = 4; w.group = G; w.scales = sc; w.biases = bi; w.sb_dtype = DT_BF16;
    if (pack_weight(&w, WL_Q_RIL16)) { fprintf(stderr, "pack\n"); exit(1); }
    return w;
}
static int NTH = 2;
static volatile int bar_cnt, bar_gen;
static void barrier(void) {
    int g = bar_gen;
    if (__sync_add_and_fetch(&bar_cnt, 1) == NTH) { bar_cnt = 0; __sync_synchronize(); bar_gen = g + 1; }
    else while (bar_gen == g) __builtin_ia32_pause();
}
