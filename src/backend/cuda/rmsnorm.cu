/* rmsnorm.cu — y[T, n] = x / rms(x) * (w_offset + w), one block per row.
 *
 * Reference: ref_rms_norm in backend/cpu/ref.c. Each thread sums a strided slice, then a
 * fixed shuffle tree and a fixed pass over the warps: the order depends only on n, never
 * on T, so a row's result is the same in any batch. In place (y == x) is safe: a thread
 * writes exactly the elements it read. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/xprep.cuh"
#include "backend/cuda/x16.cuh"
#include "backend/cuda/wgx.cuh"

/* 1/rms of a row from each thread's partial sum of squares ss: an xor tree per warp, the NT/32 warp sums
 * through ws (shared) added in warp order — the one reduction of every norm kernel here (rms_norm_kernel's
 * order, which the fused kernels must keep to stay bitwise) */
template <int NT>
__device__ __forceinline__ float rms_inv_block(float ss, float *ws, int n, float eps) {
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if ((threadIdx.x & 31) == 0) ws[threadIdx.x >> 5] = ss;
    __syncthreads();
    float tot = 0.f;
    for (int i = 0; i < NT / 32; i++) tot += ws[i];
    return 1.0f / sqrtf(tot / (float)n + eps);
}

/* x·(1/rms)·(off + w) with the row's float4 of w already loaded (wv NULL: no weight) — the products of every float4
 * norm here (rms_norm4_kernel reads its w before the PDL wait) */
__device__ __forceinline__ float4 rms_scale4w(float4 o, float inv, const float4 *wv, float off) {
    if (wv) {
        o.x = (o.x * inv) * (off + wv->x); o.y = (o.y * inv) * (off + wv->y);
        o.z = (o.z * inv) * (off + wv->z); o.w = (o.w * inv) * (off + wv->w);
    } else {
        o.x *= inv; o.y *= inv; o.z *= inv; o.w *= inv;
    }
    return o;
}
/* the same of a row's float4 i, w read here (w NULL: no weight) */
__device__ __forceinline__ float4 rms_scale4(float4 o, float inv, const float *w, float off, int i) {
    if (!w) return rms_scale4w(o, inv, nullptr, off);
    const float4 wv = ((const float4 *)w)[i];
    return rms_scale4w(o, inv, &wv, off);
}

template <int NT>
__global__ void rms_norm_kernel(float *y, const float *x, const float *w, float off, int n, float eps) {
    __shared__ float warp_sums[NT / 32];
    const float *xr = x + (size_t)blockIdx.x * n;
    float *yr = y + (size_t)blockIdx.x * n;
    float ss = 0.f;
    for (int i = threadIdx.x; i < n; i += NT) ss = fmaf(xr[i], xr[i], ss);
    const float inv = rms_inv_block<NT>(ss, warp_sums, n, eps);
    for (int i = threadIdx.x; i < n; i += NT) yr[i] = (xr[i] * inv) * (w ? (off + w[i]) : 1.0f);
}

/* n % 4 == 0 and n <= 4·256·RV: each thread keeps its float4s of x in registers between the
 * sum of squares and the scaling (one read of x instead of two); same formula and f32 steps.
 * ADD (add_rms_norm): x += d first (the add op's f32 sum), x written back, then the same
 * norm of the new x into y; y may be d (each thread reads its d before the barrier and
 * writes y after it). */
/* PREP (one row, KILN_CUDA_XPREP, xprep.cuh): y also written in the q4/q8 GEMV's prepared form
 * to xp, with one exponent from max|y| over the row (bitwise what the GEMV computes from y) */
/* X16 (prefill, x16.cuh): y also rounded to bf16 into y16 (what the matmul's conversion writes);
 * Y32 = false (with X16: matmul.cu's fused prefill ops, whose h is not written): y16 only */
/* WG (9..64 rows, wgx.cuh): y also written in the 64-token 4/8-bit matmul's prepared form to wg — grid wg.NP
 * blocks, those past the rows writing their token's zeros only — with 2^e from max|y| over the row (bitwise
 * wg_xprep_kernel on y) */
/* DSUM (ADD with ds.ks > 1; KILN_CUDA_QWG_DEFER, matmul_wgmma.cu): d is not written yet — it is the sum of a 2..64-token
 * matmul's ks split partials ds.p[k][t][·] (ds.n4 float4s a split), added here in split order as wg_reduce_kernel
 * adds them (__fadd_rn, partial 0 first), so d's floats and everything after them are the separate launches' */
struct dsum_t { const float *p; int ks, n4; };
template <int RV, bool ADD = false, bool PREP = false, bool X16 = false, bool Y32 = true, bool WG = false>
__global__ void __launch_bounds__(256) rms_norm4_kernel(float *y, const float *x, const float *w, float off, int n, float eps,
                                                        const float *d, xp_dst xp, __nv_bfloat16 *y16, wgx_dst wg, dsum_t ds) {
    __shared__ float warp_sums[8];
    extern __shared__ float4 xp_h4[]; /* PREP: y, then zeros to whole chunks */
    TL_STAMPS(2); /* KILN_CUDA_TIMELINE builds: stamps 21 and 22 (timeline.cuh) */
    pdl_trigger(); /* PDL (cuda_common.cuh): the next kernel may launch; x is read after the wait */
    const int n4 = n / 4;
    /* the norm weight before the wait: no kernel writes it, and read after the reduction it was one more
     * memory round trip on the decode chain's critical path (a layer's weights leave it out of L2) */
    float4 wv[RV];
#pragma unroll
    for (int r = 0; r < RV; r++) {
        const int i = threadIdx.x + r * 256;
        wv[r] = w && i < n4 ? ((const float4 *)w)[i] : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    pdl_wait();
    if constexpr (WG) {
        if ((int)blockIdx.x >= wg.T) { /* a padding token of the bucket: zeros and 1, as wg_xprep_kernel writes them */
            for (int i = threadIdx.x; i < n / 4; i += 256) wgx_put(wg, blockIdx.x, i, make_float4(0.f, 0.f, 0.f, 0.f), 1.f);
            if (threadIdx.x == 0) wg.inv[blockIdx.x] = 1.f;
            return;
        }
    }
    const float4 *xr = (const float4 *)(x + (size_t)blockIdx.x * n);
    float4 *yr = (float4 *)(y + (size_t)blockIdx.x * n);
    float4 v[RV], dv[RV];
    float ss = 0.f;
    /* every load of x and d before the first store of x: written in one loop, each x store (x may alias d and y)
     * kept the next float4's loads behind it — RV dependent L2 round trips instead of one (the floats are the same) */
#pragma unroll
    for (int r = 0; r < RV; r++) {
        const int i = threadIdx.x + r * 256;
        v[r] = i < n4 ? xr[i] : make_float4(0.f, 0.f, 0.f, 0.f);
        if (ADD && i < n4) {
            if (ds.ks > 1) {
                const float4 *p = (const float4 *)ds.p + (size_t)blockIdx.x * n4 + i;
                dv[r] = p[0];
                for (int k = 1; k < ds.ks; k++) {
                    const float4 q = p[(size_t)k * ds.n4];
                    dv[r].x = __fadd_rn(dv[r].x, q.x); dv[r].y = __fadd_rn(dv[r].y, q.y); dv[r].z = __fadd_rn(dv[r].z, q.z); dv[r].w = __fadd_rn(dv[r].w, q.w);
                }
            } else
                dv[r] = ((const float4 *)(d + (size_t)blockIdx.x * n))[i];
        }
    }
#pragma unroll
    for (int r = 0; r < RV; r++) {
        const int i = threadIdx.x + r * 256;
        if (ADD && i < n4) {
            v[r].x += dv[r].x; v[r].y += dv[r].y; v[r].z += dv[r].z; v[r].w += dv[r].w;
            ((float4 *)xr)[i] = v[r];
        }
        ss = fmaf(v[r].x, v[r].x, ss); ss = fmaf(v[r].y, v[r].y, ss);
        ss = fmaf(v[r].z, v[r].z, ss); ss = fmaf(v[r].w, v[r].w, ss);
    }
    const float inv = rms_inv_block<256>(ss, warp_sums, n, eps);
    TL_STAMP(21); /* KILN_CUDA_TIMELINE builds: the block's sum of squares reduced */
    float mx = 0.f;
#pragma unroll
    for (int r = 0; r < RV; r++) {
        const int i = threadIdx.x + r * 256;
        if (i >= n4) break;
        const float4 o = rms_scale4w(v[r], inv, w ? &wv[r] : nullptr, off);
        if constexpr (Y32) yr[i] = o;
        if constexpr (X16) {
            const __nv_bfloat162 a = __floats2bfloat162_rn(o.x, o.y), b = __floats2bfloat162_rn(o.z, o.w);
            ((uint2 *)(y16 + (size_t)blockIdx.x * n))[i] = make_uint2(*(const uint32_t *)&a, *(const uint32_t *)&b);
        }
        if constexpr (PREP) xp_h4[i] = o;
        if constexpr (PREP || WG) mx = fmaxf(mx, fmaxf(fmaxf(fabsf(o.x), fabsf(o.y)), fmaxf(fabsf(o.z), fabsf(o.w))));
        if constexpr (WG) v[r] = o; /* kept for the prepared form below */
    }
    if constexpr (WG) {
        const int e = wg_exp(block_max256(mx, warp_sums));
        const float px = wg_pow2(e);
        if (threadIdx.x == 0) wg.inv[blockIdx.x] = wg_pow2(-e);
#pragma unroll
        for (int r = 0; r < RV; r++) {
            const int i = threadIdx.x + r * 256;
            if (i >= n4) break;
            wgx_put(wg, blockIdx.x, i, v[r], px);
        }
    }
    if constexpr (PREP) {
        const int nc4 = xp_ncols(xp) / 4;
        for (int i = n4 + threadIdx.x; i < nc4; i += 256) xp_h4[i] = make_float4(0.f, 0.f, 0.f, 0.f);
        xp_emit_any(xp, (const float *)xp_h4, 0, xp_ncols(xp), xp_exp(block_max256(mx, warp_sums)));
        xp_zero_span(xp);
    }
    TL_STAMP(22); /* thread 0's stores issued */
}

/* the PREP variants where the GEMV after this one will want y prepared (cuda_xp_want); 0: not taken */
template <bool ADD>
static int rms_norm4_prep(cuda_impl_t *c, float *y, const float *x, const float *w, float off, int T, int n, float eps, const float *d,
                          dsum_t ds = {}) {
    xp_dst xp;
    if (n <= 256 || n > 8192 || !cuda_xp_want(c, T, n, 0, &xp)) return 0;
    const size_t sm = sizeof(float) * xp_ncols(xp);
    if (sm > 48 * 1024) return 0;
    if (n <= 4096) cuda_launch_pdl(c->stream, rms_norm4_kernel<4, ADD, true>, 1, 256, sm, y, x, w, off, n, eps, d, xp, (__nv_bfloat16 *)nullptr, wgx_dst{}, ds);
    else cuda_launch_pdl(c->stream, rms_norm4_kernel<8, ADD, true>, 1, 256, sm, y, x, w, off, n, eps, d, xp, (__nv_bfloat16 *)nullptr, wgx_dst{}, ds);
    cuda_xp_set(c, y, &xp);
    return 1;
}

/* the WG variants where the 64-token 4/8-bit matmul after this one will want y prepared (wgx.cuh: 9..64 rows,
 * n % 64 == 0, a hint that matmul left); 0: not taken */
template <bool ADD>
static int rms_norm4_wgx(cuda_impl_t *c, float *y, const float *x, const float *w, float off, int T, int n, float eps, const float *d,
                         dsum_t ds = {}) {
    int NP = 0;
    unsigned char *buf = n > 256 && n <= 8192 ? cuda_wgx_want(c, T, n, &NP) : NULL; /* the rows and K: cuda_wgx_want's */
    if (!buf) return 0;
    const wgx_dst wg = {(__half *)buf, (float *)(buf + wgx_xbytes(n, NP)), T, NP};
    const xp_dst no = {};
    if (n <= 4096) cuda_launch_pdl(c->stream, rms_norm4_kernel<4, ADD, false, false, true, true>, NP, 256, 0, y, x, w, off, n, eps, d, no, (__nv_bfloat16 *)nullptr, wg, ds);
    else cuda_launch_pdl(c->stream, rms_norm4_kernel<8, ADD, false, false, true, true>, NP, 256, 0, y, x, w, off, n, eps, d, no, (__nv_bfloat16 *)nullptr, wg, ds);
    cuda_wgx_set(c, y, T, n, NP);
    return 1;
}

/* the 256 < n <= 8192 launches, with y's bf16 copy where a prefill matmul will want it (x16.cuh) */
template <bool ADD>
static void rms_norm4_launch(cuda_impl_t *c, float *y, const float *x, const float *w, float off, int T, int n, float eps, const float *d,
                             dsum_t ds = {}) {
    const xp_dst no = {};
    __nv_bfloat16 *y16 = cuda_x16_want(c, (size_t)T * n);
    if (y16 && n <= 4096) cuda_launch_pdl(c->stream, rms_norm4_kernel<4, ADD, false, true>, T, 256, 0, y, x, w, off, n, eps, d, no, y16, wgx_dst{}, ds);
    else if (y16) cuda_launch_pdl(c->stream, rms_norm4_kernel<8, ADD, false, true>, T, 256, 0, y, x, w, off, n, eps, d, no, y16, wgx_dst{}, ds);
    else if (n <= 4096) cuda_launch_pdl(c->stream, rms_norm4_kernel<4, ADD>, T, 256, 0, y, x, w, off, n, eps, d, no, (__nv_bfloat16 *)nullptr, wgx_dst{}, ds);
    else cuda_launch_pdl(c->stream, rms_norm4_kernel<8, ADD>, T, 256, 0, y, x, w, off, n, eps, d, no, (__nv_bfloat16 *)nullptr, wgx_dst{}, ds);
    if (y16) cuda_x16_set(c, y, (size_t)T * n);
}

/* y16 = bf16(rms_norm(x)) only, the f32 y not written: the copy rms_norm4_launch writes, bitwise
 * (matmul.cu's rms_matmul_multi / rms_matmul_glu at prefill sizes). 0: launched; -1: the sizes or
 * alignments rms_norm4_kernel does not take (nothing launched). */
int cuda_rms_norm_bf16(cuda_impl_t *c, __nv_bfloat16 *y16, const float *x, const float *w, float off, int T, int n, float eps) {
    if (T <= 0 || n % 4 || n <= 256 || n > 8192 || (((uintptr_t)x | (uintptr_t)w | (uintptr_t)y16) & 15)) return -1;
    const xp_dst no = {};
    if (n <= 4096) cuda_launch_pdl(c->stream, rms_norm4_kernel<4, false, false, true, false>, T, 256, 0, (float *)nullptr, x, w, off, n, eps, (const float *)nullptr, no, y16, wgx_dst{}, dsum_t{});
    else cuda_launch_pdl(c->stream, rms_norm4_kernel<8, false, false, true, false>, T, 256, 0, (float *)nullptr, x, w, off, n, eps, (const float *)nullptr, no, y16, wgx_dst{}, dsum_t{});
    return 0;
}

/* F16S (matmul_dequant.cu's fused prefill ops for MLX weights): y16 = f16(rms_norm(x)·2^e) only, e ONE exponent
 * for the whole matrix that needs no pass over it: every output obeys |x_i|/rms(x) ≤ √n (x_i² ≤ Σx², and eps
 * only lowers it), so |y| ≤ √n·max|off + w| = B, and e puts B·2^e in [2^14, 2^15) (wg_exp; the f32 sum of
 * squares may round ~n·2^-24 low: |y|·2^e stays under 2^15·1.001, below f16's 65504). Every block reduces
 * max|off + w| over the row's weights itself (the same floats in every block), block 0 stores e for the
 * GEMM's alpha. The floats are rms_norm4_kernel's (its loads, fmaf chain, reduction and products), so
 * f16(y·2^e) is what the dequantizing matmul's own conversion of y writes wherever both scalings keep y in
 * f16's normal range: a power of two moves no rounding there (its scan's e from max|y| may be up to
 * log2(√n·max|w| / max|y|) larger; only values ~2^-24 of B round differently, to f16's subnormal spacing:
 * docs/cuda.md, Numerics). */
/* ADD (KILN_CUDA_QD_DEFER: the rms_mlp before it left its residual add): x[t] += rs[t]·d[t] first, stored, with
 * add_rowscale_kernel's roundings (elementwise.cu), and the norm of that — bitwise the two launches */
template <int RV, bool ADD>
__global__ void __launch_bounds__(256) rms_norm_f16s_kernel(__half *y16, int *xe, const float *x, const float *w, float off, int n, float eps,
                                                            float *xa, const float *d, const float *rs) {
    __shared__ float warp_sums[8];
    pdl_trigger();
    pdl_wait();
    const float4 *xr = (const float4 *)(x + (size_t)blockIdx.x * n);
    const int n4 = n / 4;
    float4 v[RV];
    float ss = 0.f, wm = w ? 0.f : 1.f;
    const float s = ADD ? rs[blockIdx.x] : 0.f;
#pragma unroll
    for (int r = 0; r < RV; r++) {
        const int i = threadIdx.x + r * 256;
        v[r] = i < n4 ? xr[i] : make_float4(0.f, 0.f, 0.f, 0.f);
        if (ADD && i < n4) {
            const float4 b = ((const float4 *)(d + (size_t)blockIdx.x * n))[i];
            v[r] = make_float4(__fadd_rn(v[r].x, __fmul_rn(s, b.x)), __fadd_rn(v[r].y, __fmul_rn(s, b.y)), __fadd_rn(v[r].z, __fmul_rn(s, b.z)),
                               __fadd_rn(v[r].w, __fmul_rn(s, b.w)));
            ((float4 *)(xa + (size_t)blockIdx.x * n))[i] = v[r];
        }
        ss = fmaf(v[r].x, v[r].x, ss); ss = fmaf(v[r].y, v[r].y, ss);
        ss = fmaf(v[r].z, v[r].z, ss); ss = fmaf(v[r].w, v[r].w, ss);
        if (w && i < n4) {
            const float4 wv = ((const float4 *)w)[i];
            wm = fmaxf(wm, fmaxf(fmaxf(fabsf(off + wv.x), fabsf(off + wv.y)), fmaxf(fabsf(off + wv.z), fabsf(off + wv.w))));
        }
    }
    const float inv = rms_inv_block<256>(ss, warp_sums, n, eps);
    const int e = wg_exp(sqrtf((float)n) * block_max256(wm, warp_sums));
    const float px = wg_pow2(e);
    if (blockIdx.x == 0 && threadIdx.x == 0) *xe = e;
    uint2 *yr = (uint2 *)(y16 + (size_t)blockIdx.x * n);
#pragma unroll
    for (int r = 0; r < RV; r++) {
        const int i = threadIdx.x + r * 256;
        if (i >= n4) break;
        const float4 o = rms_scale4(v[r], inv, w, off, i);
        __align__(8) __half2 h[2] = {__floats2half2_rn(o.x * px, o.y * px), __floats2half2_rn(o.z * px, o.w * px)};
        yr[i] = *(const uint2 *)h;
    }
}

/* the F16S launch: 0 launched; -1 where rms_norm4_kernel's sizes or alignments do not hold (nothing launched). xa: NULL,
 * or x itself (writable) with the deferred add's d and rs (ADD above) */
int cuda_rms_norm_f16s(cuda_impl_t *c, __half *y16, int *xe, const float *x, const float *w, float off, int T, int n, float eps, float *xa,
                       const float *d, const float *rs) {
    if (T <= 0 || n % 4 || n <= 256 || n > 8192 || (((uintptr_t)x | (uintptr_t)w | (uintptr_t)y16 | (uintptr_t)d) & 15)) return -1;
    const bool small = n <= 4096;
    cuda_launch_pdl(c->stream,
                    xa ? (small ? rms_norm_f16s_kernel<4, true> : rms_norm_f16s_kernel<8, true>)
                       : (small ? rms_norm_f16s_kernel<4, false> : rms_norm_f16s_kernel<8, false>),
                    T, 256, 0, y16, xe, x, w, off, n, eps, xa, d, rs);
    return 0;
}

void cuda_rms_norm(backend_t *be, float *y, const float *x, const float *w, float off, int T, int n, float eps) {
    if (T <= 0) return;
    cudaStream_t s = cuda_impl(be)->stream;
    const int al = n % 4 == 0 && !((uintptr_t)x & 15) && !((uintptr_t)y & 15) && !((uintptr_t)w & 15);
    if (al && rms_norm4_prep<false>(cuda_impl(be), y, x, w, off, T, n, eps, (const float *)nullptr)) {
    } else if (al && rms_norm4_wgx<false>(cuda_impl(be), y, x, w, off, T, n, eps, (const float *)nullptr)) {
    } else if (al && n > 256 && n <= 8192) rms_norm4_launch<false>(cuda_impl(be), y, x, w, off, T, n, eps, (const float *)nullptr);
    else if (n <= 256) rms_norm_kernel<64><<<T, 64, 0, s>>>(y, x, w, off, n, eps);
    else rms_norm_kernel<256><<<T, 256, 0, s>>>(y, x, w, off, n, eps);
    cudaLaunchCheck();
}

/* backend.h post_norm_add (Gemma: x += post_norm(d); y = pre_norm(x)) in one launch: rms_norm4_kernel<4>'s
 * steps twice with the add between — a thread's float4s in the same order, the same fmaf chains, xor tree and
 * pass over the 8 warps, add_kernel's x + d' — so the floats are those of rms_norm, add and rms_norm.
 * TRIG (KILN_CUDA_PNA_TRIG, A/B): when the next kernel may launch — 0 at entry (as rms_norm4_kernel), 1 after
 * the wait (the default), 2 at exit. Session 25 measured a one-block norm that triggers at entry slowing qwen3.5 decode when
 * it replaced a plain add between two GEMVs (bench/cuda/RESULTS.md). */
template <int TRIG>
__global__ void __launch_bounds__(256) post_norm_add_kernel(float *x, float *y, const float *d, const float *w1, const float *w2, float off, int n,
                                                            float eps) {
    __shared__ float ws1[8], ws2[8];
    if (TRIG == 0) pdl_trigger();
    pdl_wait();
    if (TRIG == 1) pdl_trigger();
    const int n4 = n / 4;
    const float4 *dr = (const float4 *)(d + (size_t)blockIdx.x * n);
    float4 *xr = (float4 *)(x + (size_t)blockIdx.x * n), *yr = (float4 *)(y + (size_t)blockIdx.x * n);
    float4 v[4], u[4];
    float ss = 0.f;
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const int i = threadIdx.x + r * 256;
        v[r] = i < n4 ? dr[i] : make_float4(0.f, 0.f, 0.f, 0.f);
        u[r] = i < n4 ? xr[i] : make_float4(0.f, 0.f, 0.f, 0.f);
        ss = fmaf(v[r].x, v[r].x, ss); ss = fmaf(v[r].y, v[r].y, ss);
        ss = fmaf(v[r].z, v[r].z, ss); ss = fmaf(v[r].w, v[r].w, ss);
    }
    const float inv = rms_inv_block<256>(ss, ws1, n, eps);
    float s2 = 0.f;
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const int i = threadIdx.x + r * 256;
        if (i < n4) {
            float4 o = v[r];
            /* explicit roundings: the separate ops store d' and add it later, so no product may fuse into the add */
            if (w1) {
                const float4 wv = ((const float4 *)w1)[i];
                o.x = __fmul_rn(__fmul_rn(o.x, inv), __fadd_rn(off, wv.x)); o.y = __fmul_rn(__fmul_rn(o.y, inv), __fadd_rn(off, wv.y));
                o.z = __fmul_rn(__fmul_rn(o.z, inv), __fadd_rn(off, wv.z)); o.w = __fmul_rn(__fmul_rn(o.w, inv), __fadd_rn(off, wv.w));
            } else {
                o.x = __fmul_rn(o.x, inv); o.y = __fmul_rn(o.y, inv); o.z = __fmul_rn(o.z, inv); o.w = __fmul_rn(o.w, inv);
            }
            u[r].x = __fadd_rn(u[r].x, o.x); u[r].y = __fadd_rn(u[r].y, o.y); u[r].z = __fadd_rn(u[r].z, o.z); u[r].w = __fadd_rn(u[r].w, o.w);
            xr[i] = u[r];
        }
        s2 = fmaf(u[r].x, u[r].x, s2); s2 = fmaf(u[r].y, u[r].y, s2);
        s2 = fmaf(u[r].z, u[r].z, s2); s2 = fmaf(u[r].w, u[r].w, s2);
    }
    const float inv2 = rms_inv_block<256>(s2, ws2, n, eps);
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const int i = threadIdx.x + r * 256;
        if (i >= n4) break;
        yr[i] = rms_scale4(u[r], inv2, w2, off, i);
    }
}

/* backend.h post_norm_add where the separate ops would both run rms_norm4_kernel<4> (n % 4 == 0, 256 < n <= 4096,
 * 16-byte aligned) at decode-sized steps (T <= 64: prefill keeps the separate ops and their bf16 copies for the
 * matmuls, x16.cuh). KILN_CUDA_PNA=0: declines (A/B). */
int cuda_post_norm_add(backend_t *be, float *x, float *y, float *d, const float *w1, const float *w2, float off, int T, int n, float eps) {
    static int on = -1, trig = 0;
    if (on < 0) {
        const char *e = getenv("KILN_CUDA_PNA"), *t = getenv("KILN_CUDA_PNA_TRIG");
        on = !(e && !strcmp(e, "0"));
        trig = t ? atoi(t) : 1; /* default after the wait: session 25 call 7, gemma3-1b batch-1 664–683 tok/s against 642–647 at entry */
    }
    if (!on || T <= 0 || T > 64 || n % 4 || n <= 256 || n > 4096 ||
        (((uintptr_t)x | (uintptr_t)y | (uintptr_t)d | (uintptr_t)w1 | (uintptr_t)w2) & 15))
        return -1;
    cuda_impl_t *c = cuda_impl(be);
    if (trig == 1) cuda_launch_pdl(c->stream, post_norm_add_kernel<1>, T, 256, 0, x, y, (const float *)d, w1, w2, off, n, eps);
    else if (trig == 2) cuda_launch_pdl(c->stream, post_norm_add_kernel<2>, T, 256, 0, x, y, (const float *)d, w1, w2, off, n, eps);
    else cuda_launch_pdl(c->stream, post_norm_add_kernel<0>, T, 256, 0, x, y, (const float *)d, w1, w2, off, n, eps);
    return 0;
}

/* x[T, n] += d; y = rms_norm(x): the add and rms_norm ops in one launch (backend.h
 * add_rms_norm), bitwise the same results. Other sizes/alignments: the two ops. */
void cuda_add_rms_norm(backend_t *be, float *x, float *y, const float *d, const float *w, float off, int T, int n, float eps) {
    if (T <= 0) return;
    cuda_impl_t *c = cuda_impl(be);
    const int al = n % 4 == 0 && !((uintptr_t)x & 15) && !((uintptr_t)y & 15) && !((uintptr_t)w & 15) && !((uintptr_t)d & 15);
    /* d the deferred split sums of the matmul just before (KILN_CUDA_QWG_DEFER): summed here (DSUM) — only where the
     * norm overwrites d (y == d, llama's h = norm(x += h)), since d itself is never written then; any other pending
     * sums land first */
    dsum_t ds = {};
    if (c->dfr.y && c->dfr.y == d && y == d && c->dfr.T == T && c->dfr.N == n && al && n > 256 && n <= 8192) {
        ds = dsum_t{c->dfr.part, c->dfr.ks, T * n / 4};
        c->dfr.y = NULL;
        c->dfr.used++;
    } else
        cuda_defer_flush(c);
    if (al && rms_norm4_prep<true>(c, y, x, w, off, T, n, eps, d, ds)) {
    } else if (al && rms_norm4_wgx<true>(c, y, x, w, off, T, n, eps, d, ds)) {
    } else if (al && n > 256 && n <= 8192) rms_norm4_launch<true>(c, y, x, w, off, T, n, eps, d, ds);
    else {
        cuda_add(be, x, d, (size_t)T * n);
        cuda_rms_norm(be, y, x, w, off, T, n, eps);
        return;
    }
    cudaLaunchCheck();
}
