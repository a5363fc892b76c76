/* matmul_amx_avx512.c — 8-bit MLX-affine and bf16 matmuls on Intel AMX tiles (Sapphire
 * Rapids on); the bf16 kernel is described above amx_bf16_ok, 8-bit here.
 *
 * y[t][j] = Σ_g ( s[j][g] · Σ_{k∈g} x[t][k]·c[j][k]  +  b[j][g] · Σ_{k∈g} x[t][k] )
 *
 * The inner sums Σ x·c are what costs; AMX's int8 tile product (tdpbusd: u8 × s8 → exact
 * int32 sums, 16 W rows × 16 x rows × 64 columns per instruction, ~16 cycles) does them
 * exactly, if x is written as integers. So each x row is turned, per group, into a
 * fixed-point integer of 23 bits relative to the group's largest |x|:
 *
 *     x ≈ p · xi,  p = 2^(E-22) with max|x| < 2^E,  xi = round-to-nearest(x / p), |xi| ≤ 2^22
 *
 * (the one approximation: each x is off by at most p/2 = 2^-23 of its group's max, about
 * f32's own rounding of that max), and xi is split exactly into three signed bytes,
 * xi = d0·2^16 + d1·2^8 + d2. The codes are the tile's unsigned A operand loaded straight
 * from the checkpoint's rows (no conversion, no copy); the digits are the B operand, laid
 * out once per call. Three tdpbusd per 64 columns give S_d = Σ c·d exactly (|S_d| < 2^24,
 * so exact as f32 too), and per (x row, W row, group), in this order:
 *
 *     v   = fma(S1, 256, S0·65536) + S2        (f32)
 *     acc = fma(b, p·Σxi, acc)                 (the bias term over the same quantized x)
 *     acc = fma(v·p, s, acc)
 *
 * starting from acc = 0 and walking the groups in order. Every step is elementwise and
 * the integer sums are exact whatever the tile shape, so an element depends only on its
 * x row and W row: T, the 16-row block a row lands in, its lane and the thread never
 * change a bit (test_kernels checks a row alone against the same row in batches). The
 * results are not bitwise those of the f32 FMA kernels (x is rounded to 23 bits per
 * group); test_kernels holds them to the same 2e-6 of the reference as every kernel.
 * A block of one x row (decode) skips the tiles: AVX512-VNNI forms the same exact sums
 * (vpdpbusd, four W rows at a time, digits 0 and 1 in one exact accumulator 256·S0 + S1)
 * and the same fold.
 *
 * Shapes: W in blocks of 16 rows (a short last one copied into a zero-padded buffer), x in
 * blocks of 16 rows, runs of x blocks sized so their prepared form stays in L2. The threads
 * of one matmul (cpu_backend) share the prepared x and take (run, rows) items from a
 * counter; alone, a call walks its own columns [j0, j1).
 *
 * AMX needs the kernel's permission (arch_prctl ARCH_REQ_XCOMP_PERM), asked once by
 * amx_enable(); without it, or without AMX, the AVX-512 kernels run. KILN_AMX=off
 * (read by simd_detect) keeps them. */
#pragma GCC target("amx-tile,amx-int8,amx-bf16,avx512vnni,avx512bf16")
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <pthread.h>
#include <sys/syscall.h>
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/avx512_common.h"

#define AI static inline __attribute__((always_inline))
#define L2_BUDGET (768 * 1024) /* bytes of prepared x a run of x blocks may take */

static int amx_on;

int amx_enabled(void) { return amx_on; }

void amx_set(int on) { amx_on = on; }

int amx_enable(void) {
    unsigned a, b, c, d;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
    if (!((d >> 22) & 1) || !((d >> 24) & 1) || !((d >> 25) & 1) || !((c >> 11) & 1)) return 0; /* AMX-BF16, -TILE, -INT8, AVX512-VNNI */
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(1));
    if (!((a >> 5) & 1)) return 0; /* AVX512-BF16 (x split into bf16 parts) */
#ifdef SYS_arch_prctl
    if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */)) return 0;
    amx_on = 1;
    return 1;
#else
    return 0;
#endif
}

/* Does this weight go through amx_matmul_q8? */
int amx_q8_ok(const weight_t *w) {
    return amx_on && w->layout == WL_ROWS && weight_is_quantized(w) && w->bits == 8 && (w->group == 32 || w->group == 64 || w->group == 128) &&
           w->cols % w->group == 0;
}

typedef struct {
    uint8_t palette, start, res[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg_t;

/* ldtilecfg with the whole 64-byte configuration as its operand. GCC 12's _tile_loadconfig
 * declares only 8 bytes read ("m" (*(const void **)p)), so once configure() stopped being
 * inlined the stores of rows/colsb were dropped as dead and ldtilecfg faulted. */
static inline void load_tilecfg(const tilecfg_t *c) { __asm__ volatile("ldtilecfg %0" ::"m"(*c)); }

/* The four-row VNNI decode twins (q8 and q4): per 128-bit lane, the lane sums of four W
 * rows' accumulators, u01 = [S01 row 0..3] and u2 = [S2 row 0..3] (int32 adds: exact). */
static inline __attribute__((always_inline)) void quad_sums(const __m512i *a01, const __m512i *a2, __m512i *u01, __m512i *u2) {
    __m512i t0 = _mm512_add_epi32(_mm512_unpacklo_epi32(a01[0], a01[1]), _mm512_unpackhi_epi32(a01[0], a01[1]));
    __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(a01[2], a01[3]), _mm512_unpackhi_epi32(a01[2], a01[3]));
    __m512i t2 = _mm512_add_epi32(_mm512_unpacklo_epi32(a2[0], a2[1]), _mm512_unpackhi_epi32(a2[0], a2[1]));
    __m512i t3 = _mm512_add_epi32(_mm512_unpacklo_epi32(a2[2], a2[3]), _mm512_unpackhi_epi32(a2[2], a2[3]));
    *u01 = _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1));
    *u2 = _mm512_add_epi32(_mm512_unpacklo_epi64(t2, t3), _mm512_unpackhi_epi64(t2, t3));
}

/* Tiles (blocks of 2..16 x rows): 0..2 the three digit sums C_d (16 W rows × tn x rows of int32), 3 the codes A
 * (16 W rows × kc bytes), 4..6 the digits B_d (kc/4 rows × tn x rows of 4 bytes). */
static void configure(int kc, int tn) {
    tilecfg_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 3; i++) { cfg.rows[i] = 16; cfg.colsb[i] = (uint16_t)(tn * 4); }
    cfg.rows[3] = 16; cfg.colsb[3] = (uint16_t)kc;
    for (int i = 4; i < 7; i++) { cfg.rows[i] = (uint8_t)(kc / 4); cfg.colsb[i] = (uint16_t)(tn * 4); }
    load_tilecfg(&cfg);
}

/* x prepared for the tiles, per block of 16 x rows (tb):
 *   dg: per 64-or-fewer-column chunk c, three digit tiles of kc/4 rows × 64 bytes
 *       (row r, bytes 4n..4n+3: digits of x[16 tb + n][c·kc + 4r .. + 3]);
 *   pw: per group, 16 lanes of p (one per x row), xs: p · Σ xi over the group. */
typedef struct { int8_t *dg; float *pw, *xs; int K, G, kc, nkc, ng, nb, nib; } amx_x_t;
/* nib (4-bit weights, vnni_q4): a block of one row stores digit d at d·Kp (Kp = K rounded
 * up to 128, zero-padded), each 128 columns as their 64 even columns then their 64 odd
 * ones: the low and high nibbles of the block's 64 code bytes meet them lane by lane. */

/* Lays q out over buf (NULL: only sets the sizes); returns the bytes it needs. */
static size_t layout_x(amx_x_t *q, void *buf, int T, int K, int G) {
    q->K = K; q->G = G; q->kc = G < 64 ? G : 64; q->nkc = K / q->kc; q->ng = K / G; q->nb = (T + 15) / 16; q->nib = 0;
    size_t dg_bytes = (size_t)q->nb * 3 * K * 16, pw_floats = (size_t)q->nb * q->ng * 16;
    q->dg = buf;
    q->pw = buf ? (float *)(q->dg + dg_bytes) : NULL;
    q->xs = buf ? q->pw + pw_floats : NULL;
    return dg_bytes + sizeof(float) * 2 * pw_floats;
}

/* Prepares x rows [t0, t1) (T: all rows, for the one-row last block's layout). */
static void prepare_x(amx_x_t *q, const float *x, int T, int t0, int t1) {
    int K = q->K, G = q->G;
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    for (int t = t0; t < t1; t++) {
        int tb = t / 16, n = t % 16, single = t == T - 1 && n == 0; /* a block of one row */
        const float *xt = x + (size_t)t * K;
        int Kp = (K + 127) & ~127;
        if (single && q->nib) memset(q->dg + (size_t)tb * q->nkc * 3 * q->kc * 16, 0, (size_t)3 * Kp);
        for (int g = 0; g < q->ng; g++) {
            __m512 mx = _mm512_setzero_ps();
            __mmask16 nan = 0;
            for (int k = g * G; k < (g + 1) * G; k += 16) {
                __m512 v = _mm512_loadu_ps(xt + k);
                nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
                mx = _mm512_max_ps(mx, _mm512_and_ps(v, absmask));
            }
            float m = nan ? INFINITY : _mm512_reduce_max_ps(mx), p, inv;
            uint32_t mb;
            memcpy(&mb, &m, 4);
            int e = (int)(mb >> 23), E = e - 126; /* m < 2^E (frexp's exponent; e = 0: zero or subnormal) */
            if (E < -100) E = -100;               /* p stays a normal float; tinier x lose bits, not range */
            uint32_t pb = (uint32_t)(E - 22 + 127) << 23, ib = (uint32_t)(22 - E + 127) << 23;
            memcpy(&p, &pb, 4);
            memcpy(&inv, &ib, 4);
            if (e == 255) { p = NAN; inv = 0.f; } /* inf or NaN in the group: the outputs become NaN */
            __m512 iv = _mm512_set1_ps(inv);
            __m512i sum = _mm512_setzero_si512();
            for (int k = g * G; k < (g + 1) * G; k += 16) {
                __m512i xi = _mm512_cvt_roundps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xt + k), iv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                sum = _mm512_add_epi32(sum, xi);
                __m512i d2 = _mm512_srai_epi32(_mm512_slli_epi32(xi, 24), 24);
                __m512i r = _mm512_srai_epi32(_mm512_sub_epi32(xi, d2), 8);
                __m512i d1 = _mm512_srai_epi32(_mm512_slli_epi32(r, 24), 24);
                __m512i d0 = _mm512_srai_epi32(_mm512_sub_epi32(r, d1), 8);
                __m128i b[3] = {_mm512_cvtepi32_epi8(d0), _mm512_cvtepi32_epi8(d1), _mm512_cvtepi32_epi8(d2)};
                int c = k / q->kc, r0 = (k % q->kc) / 4; /* chunk, first B row of these 16 columns */
                for (int d = 0; d < 3; d++) {
                    /* 16 x rows: B_d row r holds row n's 4 digits at bytes 4n; a block of
                     * one row (vnni_row): digit d of column k at d·K + k */
                    if (single && q->nib) { /* evens at 128·(k/128) + (k%128)/2, odds 64 further */
                        __m128i e = _mm_shuffle_epi8(b[d], _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
                        int8_t *o = q->dg + (size_t)tb * q->nkc * 3 * q->kc * 16 + (size_t)d * Kp + (k & ~127) + (k & 127) / 2;
                        _mm_storel_epi64((__m128i *)o, e);
                        _mm_storel_epi64((__m128i *)(o + 64), _mm_srli_si128(e, 8));
                        continue;
                    }
                    if (single) {
                        _mm_storeu_si128((__m128i *)(q->dg + (size_t)tb * q->nkc * 3 * q->kc * 16 + (size_t)d * K + k), b[d]);
                        continue;
                    }
                    size_t rs = 64;
                    int8_t *o = q->dg + (((size_t)tb * q->nkc + c) * 3 + d) * (size_t)q->kc * 16 + (size_t)r0 * 64 + n * 4;
                    _mm_storeu_si32(o, b[d]);
                    _mm_storeu_si32(o + rs, _mm_srli_si128(b[d], 4));
                    _mm_storeu_si32(o + 2 * rs, _mm_srli_si128(b[d], 8));
                    _mm_storeu_si32(o + 3 * rs, _mm_srli_si128(b[d], 12));
                }
            }
            size_t pi = ((size_t)tb * q->ng + g) * 16 + n;
            q->pw[pi] = p;
            q->xs[pi] = e == 255 ? NAN : (float)_mm512_reduce_add_epi32(sum) * p;
        }
    }
}

/* The prepared x of a call: alone, this thread's own; shared (sh), one buffer for all the
 * threads of the matmul, its blocks of 16 rows prepared by whichever thread takes them,
 * every thread waiting until all are done. Returns the buffer to free (NULL if shared). */
typedef void (*prep_fn)(void *q, const float *x, int T, int t0, int t1);
static void *share_x(amx_share_t *sh, size_t bytes, void **buf) {
    if (!sh) {
        if (!(*buf = aligned_alloc(64, (bytes + 63) & ~(size_t)63))) abort();
        return *buf;
    }
    if (sh->x_of) { *buf = atomic_load(&sh->x_of->buf); return NULL; } /* already prepared */
    void *mine = NULL, *cur = atomic_load(&sh->buf);
    if (!cur) {
        if (!(mine = aligned_alloc(64, (bytes + 63) & ~(size_t)63))) abort();
        if (atomic_compare_exchange_strong(&sh->buf, &cur, mine)) cur = mine;
        else free(mine);
    }
    *buf = cur;
    return NULL;
}
static void share_prep(amx_share_t *sh, prep_fn prep, void *q, const float *x, int T) {
    int nb = (T + 15) / 16;
    if (!sh) { prep(q, x, T, 0, T); return; }
    if (sh->x_of) return; /* every thread here has waited for x_of's preparation */
    for (int b; (b = atomic_fetch_add(&sh->prep_next, 1)) < nb;) {
        prep(q, x, T, b * 16, b * 16 + 16 < T ? b * 16 + 16 : T);
        atomic_fetch_add(&sh->prep_done, 1);
    }
    while (atomic_load(&sh->prep_done) < nb) _mm_pause();
}
static void prep_q8(void *q, const float *x, int T, int t0, int t1) { prepare_x(q, x, T, t0, t1); }

/* y[t0 + n][j + m] = r[m] lane n for n < tn, m < nj: a 16x16 transpose, then one masked
 * store per x row. */
static void store_t(float *y, int N, int t0, int tn, int j, int nj, __m512 *r) {
    __m512 t[16], u[16], v[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        u[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
        u[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
        u[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
        u[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
    }
    for (int h = 0; h < 16; h += 8)
        for (int i = 0; i < 4; i++) {
            v[h + i] = _mm512_shuffle_f32x4(u[h + i], u[h + i + 4], 0x88);
            v[h + i + 4] = _mm512_shuffle_f32x4(u[h + i], u[h + i + 4], 0xdd);
        }
    __mmask16 mk = nj >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << nj) - 1);
    for (int i = 0; i < 8; i++) {
        if (i < tn) _mm512_mask_storeu_ps(y + (size_t)(t0 + i) * N + j, mk, _mm512_shuffle_f32x4(v[i], v[i + 8], 0x88));
        if (i + 8 < tn) _mm512_mask_storeu_ps(y + (size_t)(t0 + i + 8) * N + j, mk, _mm512_shuffle_f32x4(v[i], v[i + 8], 0xdd));
    }
}

/* One block of 16 W rows (codes at `codes`, row stride `stride` bytes; sf/bf: per group,
 * 16 scales and biases as f32) against x block tb of tn rows; y rows get columns
 * j .. j + nj - 1. The tile configuration must be configure(q->kc, tn). */
static void block(float *y, int N, int t0, int tn, int j, int nj, const uint8_t *codes, size_t stride,
                  const float *sf, const float *bf, int ngp, const amx_x_t *q, int tb, int prefetch) {
    int ng = q->ng, kc = q->kc, cpg = q->G / kc;
    int32_t C[3][16][16] __attribute__((aligned(64)));
    const int8_t *dg = q->dg + (size_t)tb * q->nkc * 3 * kc * 16;
    const float *pw = q->pw + (size_t)tb * ng * 16, *xs = q->xs + (size_t)tb * ng * 16;
    const __m512 k8 = _mm512_set1_ps(256.f);
    if (tn == 1) {
        /* one x row: no tiles. The same exact integer sums with AVX512-VNNI (vpdpbusd:
         * 64 code·digit products into 16 int32 lanes), four W rows at a time (each row's
         * codes loaded once per group for all three digits; the rows of a quad are read
         * side by side, the quads in order). Digits 0 and 1 share one accumulator,
         * L01 = 256·L0 + L1 lane by lane (exact: |S_d| < 2^22, so |S01| < 2^31), reduced
         * to S01 = 256·S0 + S1; then f32(S01)·256 is fma(S1, 256, S0·65536) bit for bit
         * (both round 256·S01 once; scaling by 2^8 commutes with rounding), and the rest
         * of the fold is the tiles' path with lanes = the quad's W rows. */
        int G = q->G, K = q->K;
        __mmask64 cm = G == 32 ? (__mmask64)0xffffffffu : ~(__mmask64)0;
        const __m128 k8s = _mm_set1_ps(256.f);
        const __m128i qidx = _mm_setr_epi32(0, ngp, 2 * ngp, 3 * ngp);
        const int8_t *x0 = dg, *x1 = dg + K, *x2 = dg + 2 * (size_t)K;
        float *yt = y + (size_t)t0 * N + j;
        for (int m0 = 0; m0 < 16; m0 += 4) {
            const uint8_t *r0 = codes + (size_t)m0 * stride;
            __m128 acc = _mm_setzero_ps();
            for (int g = 0; g < ng; g++) {
                size_t o = (size_t)g * G;
                if (prefetch)
                    for (int m = 0; m < 4; m++)
                        for (int k = 0; k < G; k += 64) _mm_prefetch((const char *)r0 + (size_t)(m + 16) * stride + o + k, _MM_HINT_T1);
                __m512i a01[4], a2[4];
                __m512i xv0 = _mm512_maskz_loadu_epi8(cm, x0 + o), xv1 = _mm512_maskz_loadu_epi8(cm, x1 + o), xv2 = _mm512_maskz_loadu_epi8(cm, x2 + o);
                __m512i c[4];
#pragma GCC unroll 4
                for (int m = 0; m < 4; m++) {
                    c[m] = _mm512_maskz_loadu_epi8(cm, r0 + (size_t)m * stride + o);
                    a01[m] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c[m], xv0);
                    a2[m] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c[m], xv2);
                }
                if (G == 128) {
                    __m512i yv0 = _mm512_loadu_si512(x0 + o + 64), yv1 = _mm512_loadu_si512(x1 + o + 64), yv2 = _mm512_loadu_si512(x2 + o + 64);
                    __m512i h[4];
#pragma GCC unroll 4
                    for (int m = 0; m < 4; m++) {
                        h[m] = _mm512_loadu_si512(r0 + (size_t)m * stride + o + 64);
                        a01[m] = _mm512_dpbusd_epi32(a01[m], h[m], yv0);
                        a2[m] = _mm512_dpbusd_epi32(a2[m], h[m], yv2);
                    }
#pragma GCC unroll 4
                    for (int m = 0; m < 4; m++) {
                        a01[m] = _mm512_dpbusd_epi32(_mm512_slli_epi32(a01[m], 8), c[m], xv1);
                        a01[m] = _mm512_dpbusd_epi32(a01[m], h[m], yv1);
                    }
                } else {
#pragma GCC unroll 4
                    for (int m = 0; m < 4; m++) a01[m] = _mm512_dpbusd_epi32(_mm512_slli_epi32(a01[m], 8), c[m], xv1);
                }
                /* lane sums of the four rows: [S01 row 0..3] and [S2 row 0..3] */
                __m512i u01, u2;
                quad_sums(a01, a2, &u01, &u2);
                /* 128-bit lanes of w: u01's 0+1, u01's 2+3, u2's 0+1, u2's 2+3; of z: u01's sum, u2's sum */
                __m512i w = _mm512_add_epi32(_mm512_shuffle_i32x4(u01, u2, 0x88), _mm512_shuffle_i32x4(u01, u2, 0xdd));
                __m512i z = _mm512_add_epi32(_mm512_shuffle_i32x4(w, w, 0x88), _mm512_shuffle_i32x4(w, w, 0xdd));
                __m128 s01 = _mm_cvtepi32_ps(_mm512_castsi512_si128(z)), s2 = _mm_cvtepi32_ps(_mm512_extracti32x4_epi32(z, 1));
                __m128 vv = _mm_add_ps(_mm_mul_ps(s01, k8s), s2);
                __m128 u = _mm_mul_ps(vv, _mm_set1_ps(pw[g * 16]));
                acc = _mm_fmadd_ps(_mm_i32gather_ps(bf + (size_t)m0 * ngp + g, qidx, 4), _mm_set1_ps(xs[g * 16]), acc);
                acc = _mm_fmadd_ps(u, _mm_i32gather_ps(sf + (size_t)m0 * ngp + g, qidx, 4), acc);
            }
            float out[4];
            _mm_storeu_ps(out, acc);
            for (int m = 0; m < 4 && m0 + m < nj; m++) yt[m0 + m] = out[m];
        }
        return;
    }
    /* lanes are x rows: one accumulator per W row */
    __m512 acc[16];
    for (int m = 0; m < 16; m++) acc[m] = _mm512_setzero_ps();
    for (int g = 0; g < ng; g++) {
        _tile_zero(0); _tile_zero(1); _tile_zero(2);
        for (int c = g * cpg; c < (g + 1) * cpg; c++) {
            if (prefetch) /* the next block of W rows, at the same columns */
                for (int m = 0; m < 16; m++) _mm_prefetch((const char *)codes + (size_t)c * kc + (size_t)(m + 16) * stride, _MM_HINT_T0);
            _tile_loadd(3, codes + (size_t)c * kc, stride);
            const int8_t *d = dg + (size_t)c * 3 * kc * 16;
            _tile_loadd(4, d, 64);
            _tile_loadd(5, d + kc * 16, 64);
            _tile_loadd(6, d + 2 * kc * 16, 64);
            _tile_dpbusd(0, 3, 4);
            _tile_dpbusd(1, 3, 5);
            _tile_dpbusd(2, 3, 6);
        }
        _tile_stored(0, C[0], 64);
        _tile_stored(1, C[1], 64);
        _tile_stored(2, C[2], 64);
        __m512 pv = _mm512_load_ps(pw + g * 16), xv = _mm512_load_ps(xs + g * 16);
#pragma GCC unroll 16
        for (int m = 0; m < 16; m++) {
            /* S01 = 256·S0 + S1 exact in int32; fma(f32(S01), 256, S2) rounds 256·f32(S01) + S2
             * once, and 256·f32(S01) is fma(S1, 256, S0·65536) exactly: the same v as
             * fma(S1, 256, S0·65536) + S2, one instruction less */
            __m512i s01 = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(C[0][m]), 8), _mm512_load_si512(C[1][m]));
            __m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s01), k8, _mm512_cvtepi32_ps(_mm512_load_si512(C[2][m])));
            __m512 u = _mm512_mul_ps(v, pv);
            acc[m] = _mm512_fmadd_ps(_mm512_set1_ps(bf[m * ngp + g]), xv, acc[m]);
            acc[m] = _mm512_fmadd_ps(u, _mm512_set1_ps(sf[m * ngp + g]), acc[m]);
        }
    }
    store_t(y, N, t0, tn, j, nj, acc);
}

/* Work items of one matmul: (run of x blocks, chunk of W rows), runs in order
 * (full blocks of 16 x rows first, then the short last block, if any). Threads that share
 * a matmul take items from one counter (cpu_backend); alone, a call walks its own items
 * over [j0, j1). Each element is computed whole by whoever takes its item, so the split
 * never changes a result. */
typedef struct { int full, rem, run, runs0, ch, nch, total, j0, j1, local; atomic_int *next; } items_t;

static void items_init(items_t *it, int T, int run, int j0, int j1, atomic_int *next) {
    it->full = T / 16; it->rem = T % 16; it->run = run < 1 ? 1 : run;
    it->runs0 = (it->full + it->run - 1) / it->run;
    /* chunks of 64 rows; few x rows: an eighth of the rows (each thread's weight stream
     * stays sequential for longer, the prefetch of the next block is not wasted) */
    it->ch = 64;
    if (T <= 16 && (j1 - j0) / 8 > 64) it->ch = (((j1 - j0) / 8) + 15) & ~15;
    it->nch = (j1 - j0 + it->ch - 1) / it->ch;
    it->total = (it->runs0 + (it->rem > 0)) * it->nch;
    it->j0 = j0; it->j1 = j1; it->local = 0; it->next = next;
}

/* The next item: x blocks [*tb0, *tb1) of *tn rows each, W rows [*ja, *jb). 0: none left. */
static int items_next(items_t *it, int *tn, int *tb0, int *tb1, int *ja, int *jb) {
    int i = it->next ? atomic_fetch_add_explicit(it->next, 1, memory_order_relaxed) : it->local++;
    if (i >= it->total) return 0;
    int ri = i / it->nch, ch = i % it->nch;
    if (ri < it->runs0) {
        *tn = 16; *tb0 = ri * it->run;
        *tb1 = *tb0 + it->run < it->full ? *tb0 + it->run : it->full;
    } else { *tn = it->rem; *tb0 = it->full; *tb1 = it->full + 1; }
    *ja = it->j0 + ch * it->ch;
    *jb = *ja + it->ch < it->j1 ? *ja + it->ch : it->j1;
    return 1;
}

/* y[T, N] columns [j0, j1) = x[T, K] · Wᵀ for an 8-bit weight (amx_q8_ok). */
void amx_matmul_q8(float *y, const float *x, int T, const weight_t *w, int j0, int j1, amx_share_t *sh) {
    int K = w->cols, N = w->rows, G = w->group, ng = K / G, ngp = (ng + 15) & ~15;
    amx_x_t q;
    float *sb = aligned_alloc(64, sizeof(float) * 2 * 16 * (size_t)ngp);
    uint8_t *pad = NULL;
    if (!sb) abort();
    void *xbuf, *own = share_x(sh, layout_x(&q, NULL, T, K, G), &xbuf);
    layout_x(&q, xbuf, T, K, G);
    share_prep(sh, prep_q8, &q, x, T);
    atomic_int *next = sh ? &sh->next : NULL;
    float *sf = sb, *bf = sb + 16 * (size_t)ngp;
    /* blocks of 16 W rows (a short last block is copied into a zero-padded buffer) against
     * runs of x blocks whose digits stay in L2 (the weights are read once per run) */
    items_t it;
    items_init(&it, T, L2_BUDGET / (3 * 16 * K), j0, j1, next);
    int tn, tb0, tb1, ja, jb, cur = -1;
    while (items_next(&it, &tn, &tb0, &tb1, &ja, &jb)) {
        if (tn > 1 && tn != cur) configure(q.kc, tn);
        if (tn > 1) cur = tn;
        for (int j = ja; j < jb; j += 16) {
            int nj = jb - j < 16 ? jb - j : 16;
            const uint8_t *codes = (const uint8_t *)w->data + (size_t)j * K;
            if (nj < 16) {
                if (!pad && !(pad = calloc(16, (size_t)K))) abort();
                memcpy(pad, codes, (size_t)nj * K);
                codes = pad;
            }
            if (T <= 32) /* the next block's scales and biases (the codes are prefetched in block) */
                for (size_t o = 0; o < (size_t)16 * ng * dtype_size(w->sb_dtype); o += 64) {
                    _mm_prefetch((const char *)w->scales + (size_t)(j + 16) * ng * dtype_size(w->sb_dtype) + o, _MM_HINT_T1);
                    _mm_prefetch((const char *)w->biases + (size_t)(j + 16) * ng * dtype_size(w->sb_dtype) + o, _MM_HINT_T1);
                }
            for (int m = 0; m < 16; m++)
                for (int g0 = 0; g0 < ngp; g0 += 16) {
                    size_t gi = (size_t)(j + m) * ng + g0;
                    _mm512_store_ps(sf + m * ngp + g0, m < nj ? sb16(w->scales, w->sb_dtype, gi, ng - g0) : _mm512_setzero_ps());
                    _mm512_store_ps(bf + m * ngp + g0, m < nj ? sb16(w->biases, w->sb_dtype, gi, ng - g0) : _mm512_setzero_ps());
                }
            for (int tb = tb0; tb < tb1; tb++) block(y, N, tb * 16, tn, j, nj, codes, (size_t)K, sf, bf, ngp, &q, tb, T <= 32);
        }
    }
    if (cur > 0) _tile_release();
    free(pad);
    free(sb);
    free(own);
}

/* --- 4-bit weights. The same numerics as 8-bit (x as three signed bytes per group, exact
 * digit sums S_d = Σ c·d, the same fold), so the codes only need to reach the integer
 * units as bytes:
 *   T > 1: each block of 16 W rows is unpacked once into a panel of bytes (16 × K, column
 *          order), then the 8-bit tile path (block) runs on it for every x block of the run;
 *   one x row: AVX512-VNNI on the packed codes, four W rows at a time. A 64-byte load holds
 *          128 codes; its low nibbles (vpand) are the even columns and its high nibbles
 *          (vpsrlw, vpand) the odd ones, and the prepared row stores each 128 columns as 64
 *          even then 64 odd digits (amx_x_t.nib), so vpdpbusd pairs them lane by lane. Digits
 *          0 and 1 share one accumulator as in the 8-bit path (exact: |256·S0 + S1| < 2^25
 *          for codes < 16); a 128-bit lane of the reduced sums is 32 columns, so one load
 *          gives 4 groups of 32, 2 of 64 or 1 of 128 with no cross-group mixing.
 * Integer sums are exact in any order and the fold per group is elementwise (v = f32(S01)·256
 * + S2, which is fma(S1, 256, S0·65536) + S2 bit for bit; acc = fma(b, p·Σxi, acc);
 * acc = fma(v·p, s, acc)), so a row alone is bitwise the row in any batch. */

int amx_q4_ok(const weight_t *w) {
    return amx_on && w->layout == WL_ROWS && weight_is_quantized(w) && w->bits == 4 && (w->group == 32 || w->group == 64 || w->group == 128) &&
           w->cols % w->group == 0;
}

/* Per-thread scratch reused across calls (decode would otherwise allocate per matmul);
 * freed at thread exit through a key destructor. */
static pthread_key_t scr_key;
static pthread_once_t scr_once = PTHREAD_ONCE_INIT;
static _Thread_local struct { void *p; size_t n; } scr;
static void scr_init(void) { pthread_key_create(&scr_key, free); }
static void *scratch(size_t n) {
    if (n > scr.n) {
        pthread_once(&scr_once, scr_init);
        free(scr.p);
        scr.n = (n + 4095) & ~(size_t)4095;
        if (!(scr.p = aligned_alloc(64, scr.n))) abort();
        pthread_setspecific(scr_key, scr.p);
    }
    return scr.p;
}

/* Scales (sq) and biases (bq) of W rows rows[0..3] as f32, four per group (one per row),
 * ng groups padded to a multiple of 16: group g's four at QSB(g) (a 4x16 transpose per 16
 * groups leaves them in this order; stored as it comes out). */
#define QSB(g) ((size_t)((g) & ~15) * 4 + ((g) & 3) * 16 + (((g) & 15) >> 2) * 4)
static void quad_sb(float *sq, float *bq, const weight_t *w, const int *rows, int ng) {
    for (int which = 0; which < 2; which++) {
        const void *src = which ? w->biases : w->scales;
        float *dst = which ? bq : sq;
        for (int g0 = 0; g0 < ng; g0 += 16) {
            __m512 r[4];
            for (int m = 0; m < 4; m++) r[m] = sb16(src, w->sb_dtype, (size_t)rows[m] * ng + g0, ng - g0);
            __m512d l01 = _mm512_castps_pd(_mm512_unpacklo_ps(r[0], r[1])), h01 = _mm512_castps_pd(_mm512_unpackhi_ps(r[0], r[1]));
            __m512d l23 = _mm512_castps_pd(_mm512_unpacklo_ps(r[2], r[3])), h23 = _mm512_castps_pd(_mm512_unpackhi_ps(r[2], r[3]));
            /* vector i, 128-bit lane l: the four rows' values of group g0 + 4l + i */
            float *o = dst + (size_t)g0 * 4;
            _mm512_store_ps(o, _mm512_castpd_ps(_mm512_unpacklo_pd(l01, l23)));
            _mm512_store_ps(o + 16, _mm512_castpd_ps(_mm512_unpackhi_pd(l01, l23)));
            _mm512_store_ps(o + 32, _mm512_castpd_ps(_mm512_unpacklo_pd(h01, h23)));
            _mm512_store_ps(o + 48, _mm512_castpd_ps(_mm512_unpackhi_pd(h01, h23)));
        }
    }
}

/* One group's fold for four W rows (lanes): s01 = 256·S0 + S1, s2 = S2. */
AI __m128 fold4(__m128 acc, __m128i s01, __m128i s2, float p, float xs, const float *bq, const float *sq) {
    __m128 v = _mm_add_ps(_mm_mul_ps(_mm_cvtepi32_ps(s01), _mm_set1_ps(256.f)), _mm_cvtepi32_ps(s2));
    __m128 u = _mm_mul_ps(v, _mm_set1_ps(p));
    acc = _mm_fmadd_ps(_mm_load_ps(bq), _mm_set1_ps(xs), acc);
    return _mm_fmadd_ps(u, _mm_load_ps(sq), acc);
}

/* One x row against W rows [ja, jb): yrow[j] for those j. dg: the row's digits in the nib
 * layout; pw, xs: p and p·Σxi of group g at [16 g]; sbq: 8 · ngp floats of scratch. */
static void vnni_q4(float *yrow, const weight_t *w, int ja, int jb, const int8_t *dg, const float *pw, const float *xs, float *sbq) {
    int K = w->cols, G = w->group, ng = K / G, ngp = (ng + 15) & ~15, Kp = (K + 127) & ~127, nblk = Kp / 128;
    size_t rb = (size_t)K / 2;
    float *sq = sbq, *bq = sbq + 4 * (size_t)ngp;
    const __m512i lo4 = _mm512_set1_epi8(15), z = _mm512_setzero_si512();
    const int8_t *x0 = dg, *x1 = dg + Kp, *x2 = dg + 2 * (size_t)Kp;
    int tb = (K % 128) / 2;
    __mmask64 tm = tb ? ((__mmask64)1 << tb) - 1 : ~(__mmask64)0;
    for (int j = ja; j < jb; j += 4) {
        int rows[4];
        const uint8_t *r[4];
        for (int m = 0; m < 4; m++) {
            rows[m] = j + m < jb ? j + m : jb - 1; /* a short last quad repeats its last row */
            r[m] = (const uint8_t *)w->data + (size_t)rows[m] * rb;
        }
        quad_sb(sq, bq, w, rows, ng);
        __m128 acc = _mm_setzero_ps();
        for (int blk = 0; blk < nblk; blk++) {
            __mmask64 cm = blk == nblk - 1 ? tm : ~(__mmask64)0;
            size_t o = (size_t)blk * 128;
            __m512i e0 = _mm512_loadu_si512(x0 + o), o0 = _mm512_loadu_si512(x0 + o + 64);
            __m512i e1 = _mm512_loadu_si512(x1 + o), o1 = _mm512_loadu_si512(x1 + o + 64);
            __m512i e2 = _mm512_loadu_si512(x2 + o), o2 = _mm512_loadu_si512(x2 + o + 64);
            __m512i a01[4], a2[4];
#pragma GCC unroll 4
            for (int m = 0; m < 4; m++) {
                _mm_prefetch((const char *)r[m] + (size_t)blk * 64 + 4096, _MM_HINT_T0);
                __m512i b = _mm512_maskz_loadu_epi8(cm, r[m] + (size_t)blk * 64);
                __m512i lo = _mm512_and_si512(b, lo4), hi = _mm512_and_si512(_mm512_srli_epi16(b, 4), lo4);
                a01[m] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(z, lo, e0), hi, o0);
                a2[m] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(z, lo, e2), hi, o2);
                a01[m] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_slli_epi32(a01[m], 8), lo, e1), hi, o1);
            }
            /* per 128-bit lane (32 columns): the four rows' sums */
            __m512i u01, u2;
            quad_sums(a01, a2, &u01, &u2);
            if (G == 32) {
                int g = blk * 4;
#define F32G(L) if (g + L < ng) acc = fold4(acc, _mm512_extracti32x4_epi32(u01, L), _mm512_extracti32x4_epi32(u2, L), pw[(g + L) * 16], xs[(g + L) * 16], bq + QSB(g + L), sq + QSB(g + L))
                F32G(0); F32G(1); F32G(2); F32G(3);
#undef F32G
                continue;
            }
            /* [S01 of lanes 0+1, S01 2+3, S2 0+1, S2 2+3] */
            __m512i wv = _mm512_add_epi32(_mm512_shuffle_i32x4(u01, u2, 0x88), _mm512_shuffle_i32x4(u01, u2, 0xdd));
            if (G == 64) {
                int g = blk * 2;
                acc = fold4(acc, _mm512_castsi512_si128(wv), _mm512_extracti32x4_epi32(wv, 2), pw[g * 16], xs[g * 16], bq + QSB(g), sq + QSB(g));
                if (g + 1 < ng)
                    acc = fold4(acc, _mm512_extracti32x4_epi32(wv, 1), _mm512_extracti32x4_epi32(wv, 3), pw[(g + 1) * 16], xs[(g + 1) * 16], bq + QSB(g + 1), sq + QSB(g + 1));
                continue;
            }
            __m512i zz = _mm512_add_epi32(_mm512_shuffle_i32x4(wv, wv, 0x88), _mm512_shuffle_i32x4(wv, wv, 0xdd));
            acc = fold4(acc, _mm512_castsi512_si128(zz), _mm512_extracti32x4_epi32(zz, 1), pw[blk * 16], xs[blk * 16], bq + QSB(blk), sq + QSB(blk));
        }
        float out[4];
        _mm_storeu_ps(out, acc);
        for (int m = 0; m < 4 && j + m < jb; m++) yrow[j + m] = out[m];
    }
}

/* K/2 packed bytes of one row -> K codes, one byte each, in column order. */
static void unpack_row(uint8_t *dst, const uint8_t *src, int K) {
    const __m512i m0 = _mm512_set1_epi16(0x0f), m1 = _mm512_set1_epi16(0xf0);
    for (int k = 0; k < K; k += 64) {
        int nb = K - k < 64 ? (K - k) / 2 : 32;
        __m512i v = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(nb == 32 ? ~(__mmask32)0 : ((__mmask32)1 << nb) - 1, src + k / 2));
        v = _mm512_or_si512(_mm512_and_si512(v, m0), _mm512_slli_epi16(_mm512_and_si512(v, m1), 4));
        _mm512_mask_storeu_epi8(dst + k, nb == 32 ? ~(__mmask64)0 : ((__mmask64)1 << 2 * nb) - 1, v);
    }
}

/* y[T, N] columns [j0, j1) = x[T, K] · Wᵀ for a 4-bit weight (amx_q4_ok). */
void amx_matmul_q4(float *y, const float *x, int T, const weight_t *w, int j0, int j1, amx_share_t *sh) {
    int K = w->cols, N = w->rows, G = w->group, ng = K / G, ngp = (ng + 15) & ~15;
    amx_x_t q;
    size_t xbytes = (layout_x(&q, NULL, T, K, G) + 63) & ~(size_t)63, sbq_bytes = sizeof(float) * 8 * (size_t)ngp;
    if (T == 1 && !sh) { /* decode: x and the quads' scales in this thread's scratch */
        uint8_t *buf = scratch(xbytes + sbq_bytes);
        layout_x(&q, buf, 1, K, G);
        q.nib = 1;
        prepare_x(&q, x, 1, 0, 1);
        vnni_q4(y, w, j0, j1, q.dg, q.pw, q.xs, (float *)(buf + xbytes));
        return;
    }
    void *xbuf, *own = share_x(sh, xbytes, &xbuf);
    layout_x(&q, xbuf, T, K, G);
    q.nib = 1;
    share_prep(sh, prep_q8, &q, x, T);
    atomic_int *next = sh ? &sh->next : NULL;
    /* this thread's panel (16 × K bytes), per-block scales/biases (2 · 16 · ngp) and quad scales */
    uint8_t *panel = scratch((size_t)16 * K + sizeof(float) * 2 * 16 * (size_t)ngp + sbq_bytes);
    float *sf = (float *)(panel + (size_t)16 * K), *bf = sf + 16 * (size_t)ngp, *sbq = bf + 16 * (size_t)ngp;
    items_t it;
    items_init(&it, T, L2_BUDGET / (3 * 16 * K), j0, j1, next);
    int tn, tb0, tb1, ja, jb, cur = -1;
    while (items_next(&it, &tn, &tb0, &tb1, &ja, &jb)) {
        if (tn == 1) { /* the one-row last x block */
            vnni_q4(y + (size_t)tb0 * 16 * N, w, ja, jb, q.dg + (size_t)tb0 * q.nkc * 3 * q.kc * 16, q.pw + (size_t)tb0 * ng * 16,
                    q.xs + (size_t)tb0 * ng * 16, sbq);
            continue;
        }
        if (tn != cur) configure(q.kc, tn);
        cur = tn;
        for (int j = ja; j < jb; j += 16) {
            int nj = jb - j < 16 ? jb - j : 16;
            for (int m = 0; m < nj; m++) unpack_row(panel + (size_t)m * K, (const uint8_t *)w->data + (size_t)(j + m) * (K / 2), K);
            if (nj < 16) memset(panel + (size_t)nj * K, 0, (size_t)(16 - nj) * K);
            for (int m = 0; m < 16; m++)
                for (int g0 = 0; g0 < ngp; g0 += 16) {
                    size_t gi = (size_t)(j + m) * ng + g0;
                    _mm512_store_ps(sf + m * ngp + g0, m < nj ? sb16(w->scales, w->sb_dtype, gi, ng - g0) : _mm512_setzero_ps());
                    _mm512_store_ps(bf + m * ngp + g0, m < nj ? sb16(w->biases, w->sb_dtype, gi, ng - g0) : _mm512_setzero_ps());
                }
            for (int tb = tb0; tb < tb1; tb++) block(y, N, tb * 16, tn, j, nj, panel, (size_t)K, sf, bf, ngp, &q, tb, 0);
        }
    }
    if (cur > 0) _tile_release();
    free(own);
}

/* --- bf16 weights: AMX-BF16 (tdpbf16ps: 16 W rows × 16 x rows × 32 columns, products of
 * two bf16 exact in f32, accumulated in f32 inside the tile unit). x is split exactly into
 * three bf16 parts, x = h + m + l (h = bf16(x), m = bf16(x - h), l = x - h - m: 8 + 8 + 8
 * significant bits), so no bit of x is dropped; the W rows are the A tiles, loaded from
 * the checkpoint as they are. Per element: C_h accumulates w·h over the 32-column chunks
 * in order, C_ml accumulates w·m then w·l per chunk, and y = C_h + C_ml. A tile's rows
 * are independent (row n of x meets only column n of B), and one x row uses the very same
 * instructions with a one-column B, so a row alone is bitwise the row in a batch; the
 * values are not bitwise those of the FMA kernels (another summation order). Needs
 * K % 32 == 0 (every real model); other shapes stay on the FMA kernels. */

int amx_bf16_ok(const weight_t *w) {
    return amx_on && w->layout == WL_ROWS && w->dtype == DT_BF16 && w->cols % 32 == 0 && w->cols > 0;
}

/* Tiles: 0 C_h, 1 C_ml (16 W rows × tn x rows of f32), 2 A (16 W rows × 32 bf16),
 * 3..5 B_h, B_m, B_l (16 column pairs × tn x rows of 2 bf16). */
static void configure_bf16(int tn) {
    tilecfg_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 2; i++) { cfg.rows[i] = 16; cfg.colsb[i] = (uint16_t)(tn * 4); }
    cfg.rows[2] = 16; cfg.colsb[2] = 64;
    for (int i = 3; i < 6; i++) { cfg.rows[i] = 16; cfg.colsb[i] = (uint16_t)(tn * 4); }
    load_tilecfg(&cfg);
}

/* x parts per block of 16 rows: for chunk c (32 columns) and part p, a B tile of 16 rows
 * (column pairs) × 64 bytes (x row n's pair at bytes 4n); a block of one row stores each
 * part in column order instead (a B tile with a 4-byte row stride). */
typedef struct { uint16_t *xp; int K; } bfx_t;
static void prepare_x_bf16(void *qv, const float *x, int T, int t0, int t1) {
    bfx_t *q = qv;
    int K = q->K, nkc = K / 32;
    uint16_t *xp = q->xp;
    for (int t = t0; t < t1; t++) {
        int tb = t / 16, n = t % 16, single = t == T - 1 && n == 0;
        const float *xt = x + (size_t)t * K;
        uint16_t *blk = xp + (size_t)tb * nkc * 3 * 512;
        for (int k = 0; k < K; k += 16) {
            __m512 v = _mm512_loadu_ps(xt + k);
            __m256i h = (__m256i)_mm512_cvtneps_pbh(v);
            __m512 r = _mm512_sub_ps(v, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
            __m256i mm = (__m256i)_mm512_cvtneps_pbh(r);
            r = _mm512_sub_ps(r, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(mm), 16)));
            __m256i l = (__m256i)_mm512_cvtneps_pbh(r);
            __m256i parts[3] = {h, mm, l};
            int c = k / 32, r0 = (k % 32) / 2;
            for (int p = 0; p < 3; p++) {
                uint16_t *tile = blk + ((size_t)c * 3 + p) * 512;
                if (single) { _mm256_storeu_si256((__m256i *)(blk + (size_t)p * K + k), parts[p]); continue; }
                uint32_t w8[8];
                memcpy(w8, &parts[p], 32);
                for (int i = 0; i < 8; i++) memcpy(tile + (size_t)(r0 + i) * 32 + n * 2, &w8[i], 4);
            }
        }
    }
}

/* y[T, N] columns [j0, j1) = x[T, K] · Wᵀ for a bf16 weight (amx_bf16_ok). */
void amx_matmul_bf16(float *y, const float *x, int T, const weight_t *w, int j0, int j1, amx_share_t *sh) {
    int K = w->cols, N = w->rows, nkc = K / 32;
    uint16_t *pad = NULL;
    void *xbuf, *own = share_x(sh, (size_t)((T + 15) / 16) * nkc * 3 * 1024, &xbuf);
    bfx_t q = {xbuf, K};
    uint16_t *xp = xbuf;
    share_prep(sh, prepare_x_bf16, &q, x, T);
    atomic_int *next = sh ? &sh->next : NULL;
    float out[2][16][16] __attribute__((aligned(64)));
    items_t it;
    items_init(&it, T, L2_BUDGET / (3 * 16 * 2 * K), j0, j1, next); /* runs: x parts stay in L2 */
    int tn, tb0, tb1, ja, jb, cur = -1;
    while (items_next(&it, &tn, &tb0, &tb1, &ja, &jb)) {
        if (tn != cur) configure_bf16(tn);
        cur = tn;
        for (int j = ja; j < jb; j += 16) {
            int nj = jb - j < 16 ? jb - j : 16;
            const uint16_t *rows = (const uint16_t *)w->data + (size_t)j * K;
            if (nj < 16) {
                if (!pad && !(pad = calloc(16, (size_t)K * 2))) abort();
                memcpy(pad, rows, (size_t)nj * K * 2);
                rows = pad;
            }
            for (int tb = tb0; tb < tb1; tb++) {
                const uint16_t *blk = xp + (size_t)tb * nkc * 3 * 512;
                _tile_zero(0);
                _tile_zero(1);
                for (int c = 0; c < nkc; c++) {
                    const uint16_t *a = rows + (size_t)c * 32;
                    if (T <= 32)
                        for (int m = 0; m < 16; m++) _mm_prefetch((const char *)(a + (size_t)(m + 16) * K), _MM_HINT_T0);
                    _tile_loadd(2, a, (size_t)K * 2);
                    if (tn == 1) {
                        _tile_loadd(3, blk + c * 32, 4);
                        _tile_loadd(4, blk + (size_t)K + c * 32, 4);
                        _tile_loadd(5, blk + (size_t)2 * K + c * 32, 4);
                    } else {
                        const uint16_t *b = blk + (size_t)c * 3 * 512;
                        _tile_loadd(3, b, 64);
                        _tile_loadd(4, b + 512, 64);
                        _tile_loadd(5, b + 1024, 64);
                    }
                    _tile_dpbf16ps(0, 2, 3);
                    _tile_dpbf16ps(1, 2, 4);
                    _tile_dpbf16ps(1, 2, 5);
                }
                _tile_stored(0, out[0], 64);
                _tile_stored(1, out[1], 64);
                __m512 r[16];
                for (int m = 0; m < 16; m++) r[m] = _mm512_add_ps(_mm512_load_ps(out[0][m]), _mm512_load_ps(out[1][m]));
                store_t(y, N, tb * 16, tn, j, nj, r);
            }
        }
    }
    if (cur >= 0) _tile_release();
    free(pad);
    free(own);
}
