/* q4_ril_proto.c — a prototype, not used by kiln: 4-bit MLX decode GEMV with W rows in the
 * 16 lanes ("rows in lanes", RIL) against the committed q4i_rows (row-major, 8-column lane
 * segments), on the one-token GEMV sequence of qwen3-0.6b / llama-3.2-1b (2 MB pages).
 *
 * RIL layout (a repack at load would be needed): tiles of 16 W rows, per 4-byte word of 8
 * codes the 16 rows' words side by side (64 B), scales/biases [tile][group][16 rows]. The x
 * digits are q4i_prepare's, broadcast from memory into vpdpbusd (m32{1to16}); each lane sums
 * a whole group in int32 (digits 0+1 in one chain, digit 2 in another: |sum| < 2^24 per
 * chain for G = 64), then ONE fold per (group, 16 rows): tv = fma(f32(a01), 256, f32(a2)),
 * acc = fma(s*p, tv, acc) — no vpermps, ~10 vector ops per 64 B of codes instead of ~15.
 * Numerics differ from q4i_tile (per-group fold), so a real path needs the same steps in the
 * GEMM (row alone = in a batch). G = 64 only, N % 16 == 0, K % 128 == 0 here.
 *
 * Build: gcc -O2 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx2 -mfma -mf16c -Isrc \
 *          -o /tmp/q4ril bench/cpu/q4_ril_proto.c build/libkilncore.a -lm -lpthread
 * Run:   /tmp/q4ril THREADS MODEL(0 qwen3-0.6b, 1 llama-3.2-1b, 2 L2-resident 256x1024) TOKENS 4
 * (the two kernels alternate per token; results checked against each other first). */
#include <pthread.h>
#include <stdio.h>
#include <math.h>
#include <sys/mman.h>
#define simd_avx512 simd_avx512_proto
#include "../../src/backend/cpu/matmul_avx512.c"
#undef simd_avx512
#pragma GCC push_options
#pragma GCC target("avx512vnni")
#include "ril_pack.h"
static void ril_pack(ril_t *r, const weight_t *w) { ril_pack_bits(r, w, 4); }
#define DPB(acc, u, p) __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u), "m"(*(const int32_t *)(p)))
static inline __m512 bf16x16(const uint16_t *p) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16)); }
#ifndef RPF
#define RPF 8192
#endif
/* G = 64: 8 words per group */
static void ril_tile(float *y, const q4i_t *q, const ril_t *r, int t) {
    int K = r->K, ng = r->ng, nwd = K / 8;
    const uint8_t *cp = r->codes + (size_t)t * nwd * 64;
    const uint16_t *sp = r->sc + (size_t)t * ng * 16, *bp = r->bi + (size_t)t * ng * 16;
    const int8_t *xd = q->xd;
    const __m512i m4 = _mm512_set1_epi8(15);
    __m512 acc = _mm512_setzero_ps();
    for (int g = 0; g < ng; g++) { /* bias term first, as the current kernel */
        acc = _mm512_fmadd_ps(bf16x16(bp + (size_t)g * 16), _mm512_set1_ps(q->xg[g]), acc);
    }
    for (int g = 0; g < ng; g++) {
        const uint8_t *c = cp + (size_t)g * 8 * 64;
        int blk = g >> 1, w0 = (g & 1) * 8; /* word within the 128-column block */
        const int8_t *xb = xd + (size_t)blk * 384;
        __m512i lo[8], hi[8];
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
            _mm_prefetch((const char *)c + i * 64 + RPF, _MM_HINT_T0);
            __m512i v = _mm512_loadu_si512(c + i * 64);
            lo[i] = _mm512_and_si512(v, m4); hi[i] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        }
        __m512i a0 = _mm512_setzero_si512(), a2 = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
            const int8_t *e = xb + 4 * (w0 + i);
            DPB(a0, lo[i], e);
            DPB(a0, hi[i], e + 64);
            DPB(a2, lo[i], e + 256);
            DPB(a2, hi[i], e + 320);
        }
        a0 = _mm512_slli_epi32(a0, 8);
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
            const int8_t *e = xb + 4 * (w0 + i);
            DPB(a0, lo[i], e + 128);
            DPB(a0, hi[i], e + 192);
        }
        __m512 tv = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a0), _mm512_set1_ps(256.f), _mm512_cvtepi32_ps(a2));
        __m512 sv = _mm512_mul_ps(bf16x16(sp + (size_t)g * 16), _mm512_set1_ps(q->pv[g]));
        acc = _mm512_fmadd_ps(sv, tv, acc);
    }
    _mm512_storeu_ps(y + (size_t)t * 16, acc);
}
static void ril_dec(float *y, const float *x, const ril_t *r, const weight_t *w, int j0, int j1) {
    q4i_t q; if (q4i_prepare(&q, x, 1, w)) abort();
    for (int t = j0 / 16; t < j1 / 16; t++) ril_tile(y, &q, r, t);
    free(q.xd);
}
/* the committed decode path, as matmul_rows runs it for one range */
static void q4dec_committed(float *y, const float *x, const weight_t *w, int j0, int j1) {
    q4i_t q; if (q4i_prepare(&q, x, 1, w)) abort();
    q4i_rows(y, &q, 0, w, j0, j1, 1);
    free(q.xd);
}
#pragma GCC pop_options

#define RIL_T ril_t
#define RIL_PACK ril_pack
#define RIL_DEC ril_dec
#define RIL_COMMITTED q4dec_committed
#define RIL_BITS 4
#define RIL_BITS_FROM_ARGV
#include "ril_harness.h"
