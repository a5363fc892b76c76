/* xprep.cuh — x prepared once by the kernel that writes it, in the form matmul_gemv_tc.cu's batch-1
 * q4/q8 GEMV keeps in shared memory (KILN_CUDA_XPREP; host side and the op wrappers: xprep.cu).
 *
 * The GEMV turns x [K] into, per block and after its PDL wait: x' = round(x·2^e) as three signed
 * byte planes per octet in the MMA's k order (spans of SPAN columns, SPAN_B bytes each, then one
 * zero span), Σx per unit of U = SPAN/NU columns (f32, column order), and 2^-e. Every block of
 * every GEMV did that again (3-6 µs on the critical path of each launch, bench/cuda/RESULTS.md
 * session 10, helper-62). Here the producer (rms_norm4_kernel, glu) writes exactly those bytes
 * to a global buffer, and the GEMV only copies them into shared memory (cp.async).
 *
 * Buffer layout (the GEMV's shared-memory layout in its TC_PREP mode, byte for byte):
 *   [nspans + 1 spans × SPAN_B: digit planes; padding spans past K and the zero span are 0]
 *   [K / U floats: Σx per unit]  [nspans floats: 2^-e of each span]
 * With one exponent for all of x (e from max|x|: the norms) the bytes are what the GEMV computes
 * itself, so y is bitwise the same. With an exponent per span (e from the span's own max|x|: glu,
 * whose many blocks cannot see the whole of x) every x' keeps at least as many bits. */
#ifndef KILN_CUDA_XPREP_CUH
#define KILN_CUDA_XPREP_CUH

#include "backend/cuda/cuda_common.cuh"

/* where a producer writes x prepared (p NULL: nowhere) and in which format (bits, units per span) */
struct xp_dst { char *p; int bits, nu, K; };
/* host side (xprep.cu; per backend, KILN_CUDA_XPREP read when it is created):
 * a producer of K floats (T = 1; glu: 1) asks whether to prepare them, then records what it wrote;
 * the GEMV notes its format for K (the producers' hint) and asks for x's prepared form (else NULL) */
int cuda_xp_mode(cuda_impl_t *c);
int cuda_xp_want(cuda_impl_t *c, int T, int K, int glu, xp_dst *d);
void cuda_xp_set(cuda_impl_t *c, const float *y, const xp_dst *d);
void cuda_xp_note(cuda_impl_t *c, int K, int bits, int nu);
const char *cuda_xp_get(cuda_impl_t *c, const float *x, int K, int bits, int nu);
/* backend create: wraps be->ops so every op but the producers and matmuls forgets the record
 * (cuda_xp_base: the table it wraps, else be->ops); destroy: cuda_xp_free */
void cuda_xp_init(backend_t *be);
const void *cuda_xp_base(const backend_t *be);
void cuda_xp_free(cuda_impl_t *c);

#define XP_SPAN_EXP (-100000) /* xp_emit's gex: an exponent per span */

/* The three signed digit planes of an octet of x' = round(x·2^e) (up = 2^e, |x'| < 2^22), in the
 * GEMV's MMA k order: word w of plane p holds the octet's columns byte by byte (4-bit: 0,2,4,6 |
 * 1,3,5,7 like the nibble bytes; 8-bit: natural). tc_digits' digits of v = x' are the bytes of
 * v + 0x808080 (in [2^22, 3·2^22)) minus 128, i.e. XOR 0x80 (checked against tc_digits for every
 * |v| <= 2^22), gathered by PRMT: ~3× fewer instructions than digit by digit. Shared by the one- and
 * multi-token GEMVs (matmul_gemv_tc.cu) and the producers' preparation here. */
template <int BITS>
__device__ __forceinline__ void xp_octet_planes(const float (&xv)[8], float up, uint32_t (&pl)[3][2]) {
    uint32_t vb[8];
#pragma unroll
    for (int j = 0; j < 8; j++) vb[j] = (uint32_t)__float2int_rn(__fmul_rn(xv[j], up)) + 0x808080u;
#pragma unroll
    for (int w = 0; w < 2; w++) {
        const int cc = BITS == 4 ? w : 4 * w, st = BITS == 4 ? 2 : 1;
#pragma unroll
        for (int p = 0; p < 3; p++) {
            const uint32_t sel = p | ((p + 4) << 4);
            const uint32_t lo = __byte_perm(vb[cc], vb[cc + st], sel), hi = __byte_perm(vb[cc + 2 * st], vb[cc + 3 * st], sel);
            pl[p][w] = __byte_perm(lo, hi, 0x5410) ^ 0x80808080u;
        }
    }
}

__host__ __device__ inline int xp_span(int bits) { return 512 / bits; }
__host__ __device__ inline int xp_span_b(int bits) { return 512 / bits / 8 * 24 + 16; }
__host__ __device__ inline int xp_nspans(int bits, int K) { const int ch = 4 * (512 / bits); return (K + ch - 1) / ch * 4; }
/* bytes of the prepared x (the copy the GEMV makes: a multiple of 16 when (K / U) % 4 == 0) */
__host__ __device__ inline size_t xp_bytes(int bits, int nu, int K) {
    const int ns = xp_nspans(bits, K), U = xp_span(bits) / nu;
    return (size_t)(ns + 1) * xp_span_b(bits) + sizeof(float) * (size_t)(K / U) + sizeof(float) * (size_t)ns;
}

/* e for max|x| = m as the GEMV picks it: |x·2^e| < 2^22 */
__device__ __forceinline__ int xp_exp(float m) {
    int ex = 0;
    if (m > 0.f && m <= 3.0e38f) { frexpf(m, &ex); ex = 22 - ex; ex = ex > 120 ? 120 : ex < -120 ? -120 : ex; }
    return ex;
}

/* Columns [c0, c0 + ncols) of x (c0, ncols multiples of the span; hs: those columns in shared
 * memory, zeros past K, complete: the caller synchronized) → their spans' digit planes, 2^-e and
 * their units' Σx in d. gex: the exponent of every span, or XP_SPAN_EXP (each span's own). Every
 * thread of the block calls it (warp-uniform loops: the per-span maximum is a shuffle). */
template <int BITS, int NU>
__device__ __forceinline__ void xp_emit(const xp_dst &d, const float *hs, int c0, int ncols, int gex) {
    constexpr int SPAN = 512 / BITS, NOCT = SPAN / 8, SPAN_B = NOCT * 24 + 16, U = SPAN / NU;
    const int K = d.K, ns = xp_nspans(BITS, K);
    float *xsum = (float *)(d.p + (size_t)(ns + 1) * SPAN_B), *xinv = xsum + K / U;
    const int noct = ncols / 8, lane = threadIdx.x & 31;
    const float4 *h4 = (const float4 *)hs;
    for (int base = threadIdx.x - lane; base < noct; base += blockDim.x) {
        const int ob = base + lane; /* octet within the slice */
        const bool in = ob < noct;
        const float4 v0 = in ? h4[2 * ob] : make_float4(0.f, 0.f, 0.f, 0.f), v1 = in ? h4[2 * ob + 1] : make_float4(0.f, 0.f, 0.f, 0.f);
        int ex = gex;
        if (gex == XP_SPAN_EXP) { /* the span's max over its NOCT lanes (slices start on spans: lane groups of NOCT are spans) */
            float m = fmaxf(fmaxf(fmaxf(fabsf(v0.x), fabsf(v0.y)), fmaxf(fabsf(v0.z), fabsf(v0.w))),
                            fmaxf(fmaxf(fabsf(v1.x), fabsf(v1.y)), fmaxf(fabsf(v1.z), fabsf(v1.w))));
#pragma unroll
            for (int o = 1; o < NOCT; o <<= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
            ex = xp_exp(m);
        }
        if (in) {
        const float up = __int_as_float((127 + ex) << 23);
        const float xv[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
        uint32_t pl[3][2];
        xp_octet_planes<BITS>(xv, up, pl); /* the GEMV's one-pass digits */
        const int go = c0 / 8 + ob, span = go / NOCT; /* global octet, span */
        uint2 *dst = (uint2 *)(d.p + (size_t)span * SPAN_B + (go % NOCT) * 24);
#pragma unroll
        for (int p = 0; p < 3; p++) dst[p] = make_uint2(pl[p][0], pl[p][1]);
        if (go % NOCT == 0) xinv[span] = __int_as_float((127 - ex) << 23);
        }
    }
    /* Σx per unit in column order, as the GEMV adds it */
    const int u0 = c0 / U, nu_ = ncols / U;
    for (int u = threadIdx.x; u < nu_ && u0 + u < K / U; u += blockDim.x) {
        float s = 0.f;
#pragma unroll 4
        for (int j = 0; j < U / 4; j++) {
            const float4 v = h4[u * (U / 4) + j];
            s = __fadd_rn(__fadd_rn(__fadd_rn(__fadd_rn(s, v.x), v.y), v.z), v.w);
        }
        xsum[u0 + u] = s;
    }
}

/* xp_emit for d's (bits, nu) */
__device__ __forceinline__ void xp_emit_any(const xp_dst &d, const float *hs, int c0, int ncols, int gex) {
    switch (d.bits * 8 + d.nu) {
    case 33: xp_emit<4, 1>(d, hs, c0, ncols, gex); break;
    case 34: xp_emit<4, 2>(d, hs, c0, ncols, gex); break;
    case 36: xp_emit<4, 4>(d, hs, c0, ncols, gex); break;
    case 65: xp_emit<8, 1>(d, hs, c0, ncols, gex); break;
    default: xp_emit<8, 2>(d, hs, c0, ncols, gex); break;
    }
}

/* the zero span (the B operand of lanes that supply no column) */
__device__ __forceinline__ void xp_zero_span(const xp_dst &d) {
    const int sb = xp_span_b(d.bits);
    uint4 *z = (uint4 *)(d.p + (size_t)xp_nspans(d.bits, d.K) * sb);
    for (int i = threadIdx.x; i < sb / 16; i += blockDim.x) z[i] = make_uint4(0, 0, 0, 0);
}

/* the columns a producer covers: whole chunks of four spans (zeros past K) */
__host__ __device__ inline int xp_ncols(const xp_dst &d) { return xp_nspans(d.bits, d.K) * xp_span(d.bits); }

#endif
