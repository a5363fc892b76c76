/* elementwise.cu — the small memory-bound ops: GLU, add, add_bias, gather_rows.
 *
 * References: ref_glu (backend/cpu/ref.c) and the loops in cpu_backend.c. One thread per
 * element (grid-stride); the activations use the same full-precision expf/tanhf formulas
 * as the CPU (glu_act.cuh, shared with the GEMV that fuses the GLU: matmul_gemv.cu).
 * gather_rows takes its indices from the host and assumes y and x do not
 * overlap (the CPU's memmove allows it; no model relies on it). */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/glu_act.cuh"
#include "backend/cuda/xprep.cuh"
#include "backend/cuda/x16.cuh"
#include "backend/cuda/wgx.cuh"

__global__ void glu_kernel(float *y, const float *g, const float *u, size_t n, int gelu) {
    pdl_trigger(); /* PDL (cuda_common.cuh): the next kernel may launch; g, u read after the wait */
    pdl_wait();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) y[i] = glu_act(g[i], u[i], gelu);
}

/* glu four elements a thread (n % 4 == 0, 16-byte aligned: 20.6 against glu_kernel's 33.4 us for a
 * qwen3-0.6b layer at 2048 tokens, ncu), y also rounded to bf16 into y16 for the prefill matmul
 * after it where y16 is not NULL (x16.cuh); the same glu_act values in y. y NULL: y16 only
 * (matmul.cu's rms_mlp, whose GLU output only its down projection reads) */
__global__ void glu_x16_kernel(float4 *y, const float4 *g, const float4 *u, uint2 *y16, size_t n4, int gelu) {
    pdl_trigger();
    pdl_wait();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x) {
        const float4 a = g[i], b = u[i];
        const float4 o = make_float4(glu_act(a.x, b.x, gelu), glu_act(a.y, b.y, gelu), glu_act(a.z, b.z, gelu), glu_act(a.w, b.w, gelu));
        if (y) y[i] = o;
        if (y16) {
            const __nv_bfloat162 p = __floats2bfloat162_rn(o.x, o.y), q = __floats2bfloat162_rn(o.z, o.w);
            y16[i] = make_uint2(*(const uint32_t *)&p, *(const uint32_t *)&q);
        }
    }
}

/* glu at one token, y also written in the q4/q8 GEMV's prepared form (KILN_CUDA_XPREP, xprep.cuh).
 * ONE = false (XPREP bit 2): a block per 256 columns, an exponent per span from the span's own max (not
 * bitwise the GEMV's own preparation: each x' keeps at least its bits); ONE = true (XPREP bit 4): one
 * block of 1024 threads over the whole row, one exponent (bitwise). Same glu_act values in y. */
template <bool ONE>
__global__ void __launch_bounds__(1024) glu_xp_kernel(float *y, const float *g, const float *u, int n, int gelu, xp_dst xp) {
    extern __shared__ float4 glu_h4[];
    __shared__ float wmax[32];
    float *hs = (float *)glu_h4;
    pdl_trigger();
    pdl_wait();
    if (!ONE) {
        const int i = blockIdx.x * 256 + threadIdx.x;
        float v = 0.f;
        if (i < n) { v = glu_act(g[i], u[i], gelu); y[i] = v; }
        hs[threadIdx.x] = v;
        __syncthreads();
        xp_emit_any(xp, hs, blockIdx.x * 256, 256, XP_SPAN_EXP);
    } else {
        const int nc = xp_ncols(xp);
        float m = 0.f;
        for (int i = threadIdx.x; i < nc; i += blockDim.x) {
            float v = 0.f;
            if (i < n) { v = glu_act(g[i], u[i], gelu); y[i] = v; }
            hs[i] = v;
            m = fmaxf(m, fabsf(v));
        }
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        if ((threadIdx.x & 31) == 0) wmax[threadIdx.x >> 5] = m;
        __syncthreads();
        m = wmax[0];
        for (int i = 1; i < (int)(blockDim.x >> 5); i++) m = fmaxf(m, wmax[i]);
        xp_emit_any(xp, hs, 0, nc, xp_exp(m));
    }
    if (blockIdx.x == 0) xp_zero_span(xp);
}

__global__ void add_kernel(float *y, const float *x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) y[i] += x[i];
}

__global__ void add_bias_kernel(float *y, const float *b, size_t total, int n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) y[i] += b[i % n];
}

__global__ void gather_rows_kernel(float *y, const float *x, const int32_t *idx, int width) {
    const float *src = x + (size_t)idx[blockIdx.x] * width;
    float *dst = y + (size_t)blockIdx.x * width;
    for (int i = threadIdx.x; i < width; i += blockDim.x) dst[i] = src[i];
}
/* The rows the logits want (a decode step: every row's last token) with the indices as a kernel
 * parameter and rows of whole float4s: a block a row, each thread's loads all issued before its
 * stores (y and x do not overlap), under PDL. gather_rows_kernel took 8.6 us for one 4096-float row
 * (a load waited for the store before it: y and x might alias; ncu, llama-3-8b decode, session 31) —
 * a serialized step in every decode token between the final norm's input and lm_head. */
#define GR_MAXN 64
#define GR_PER 4 /* float4s a thread per pass: 256 threads x 4 = a 4096-float row in one pass */
struct gr_idx { int v[GR_MAXN]; };
__global__ void __launch_bounds__(256) gather_rows4_kernel(float4 *__restrict__ y, const float4 *__restrict__ x, const __grid_constant__ gr_idx ix, int w4) {
    pdl_trigger();
    const float4 *src = x + (size_t)ix.v[blockIdx.x] * w4;
    float4 *dst = y + (size_t)blockIdx.x * w4;
    pdl_wait();
    for (int i0 = threadIdx.x; i0 < w4; i0 += GR_PER * blockDim.x) {
        float4 v[GR_PER];
#pragma unroll
        for (int j = 0; j < GR_PER; j++)
            if (i0 + j * (int)blockDim.x < w4) v[j] = __ldcg(src + i0 + j * blockDim.x);
#pragma unroll
        for (int j = 0; j < GR_PER; j++)
            if (i0 + j * (int)blockDim.x < w4) dst[i0 + j * blockDim.x] = v[j];
    }
}

static int grid_for(size_t n) {
    size_t b = (n + 255) / 256;
    return (int)(b < 65535 * 4 ? b : 65535 * 4);
}

/* bf16(glu(g, u)) into y16 only (n % 4 == 0, all 16-byte aligned; matmul.cu's rms_mlp): the copy
 * cuda_glu writes beside y, bitwise */
void cuda_glu_bf16(cuda_impl_t *c, __nv_bfloat16 *y16, const float *g, const float *u, size_t n, act_t act) {
    cuda_launch_pdl(c->stream, glu_x16_kernel, grid_for(n / 4), 256, 0, (float4 *)nullptr, (const float4 *)g, (const float4 *)u, (uint2 *)y16,
                    n / 4, (int)(act == ACT_GELU_TANH));
}

/* f16(glu(g, u)·2^e_t) of each row t (a block a row, I/4 float4s over 256 threads, RV a thread), e_t from the
 * row's own max|glu| (wg_exp: the row's max lands in [2^14, 2^15)), rs[t] = 2^-e_t — the down projection's x
 * on matmul_dequant.cu's f16 GEMM, whose output row t the add below scales back. The glu_act values of
 * glu_x16_kernel; a row's scaling instead of one for the matrix keeps every row's values in f16's normal
 * range (a power of two moves no rounding there: the GEMM's sums are those of one global scaling times
 * 2^(e_t − e), exactly), and it needs no pass over the matrix before the write. */
template <int RV>
__global__ void __launch_bounds__(256) glu_f16row_kernel(uint2 *y16, float *rs, const float4 *g, const float4 *u, int I4, int gelu,
                                                         const float *un, const float *ud) {
    __shared__ float ws[8];
    pdl_trigger();
    pdl_wait();
    /* un/ud (gate and up as one batched GEMM with gate's alpha): up times its own alpha over gate's, a power of two — exact */
    const float uf = un ? __fdiv_rn(un[0], ud[0]) : 1.f;
    const size_t r0 = (size_t)blockIdx.x * I4;
    float4 v[RV];
    float m = 0.f;
#pragma unroll
    for (int r = 0; r < RV; r++) {
        const int i = threadIdx.x + r * 256;
        if (i >= I4) break;
        const float4 a = g[r0 + i], b = u[r0 + i];
        v[r] = make_float4(glu_act(a.x, __fmul_rn(b.x, uf), gelu), glu_act(a.y, __fmul_rn(b.y, uf), gelu), glu_act(a.z, __fmul_rn(b.z, uf), gelu),
                           glu_act(a.w, __fmul_rn(b.w, uf), gelu));
        m = fmaxf(m, fmaxf(fmaxf(fabsf(v[r].x), fabsf(v[r].y)), fmaxf(fabsf(v[r].z), fabsf(v[r].w))));
    }
    const int e = wg_exp(block_max256(m, ws));
    const float px = wg_pow2(e);
    if (threadIdx.x == 0) rs[blockIdx.x] = wg_pow2(-e);
#pragma unroll
    for (int r = 0; r < RV; r++) {
        const int i = threadIdx.x + r * 256;
        if (i >= I4) break;
        __align__(8) __half2 h[2] = {__floats2half2_rn(v[r].x * px, v[r].y * px), __floats2half2_rn(v[r].z * px, v[r].w * px)};
        y16[r0 + i] = *(const uint2 *)h;
    }
}

/* 0: launched; -1: I not a multiple of 4, over 16384, or pointers not 16-byte aligned (nothing launched) */
int cuda_glu_f16row(cuda_impl_t *c, __half *y16, float *rs, const float *g, const float *u, int T, int I, act_t act, const float *un,
                    const float *ud) {
    if (T <= 0 || I % 4 || I > 16384 || (((uintptr_t)y16 | (uintptr_t)g | (uintptr_t)u) & 15)) return -1;
    const int I4 = I / 4, gelu = act == ACT_GELU_TANH;
    if (I4 <= 256 * 4) cuda_launch_pdl(c->stream, glu_f16row_kernel<4>, T, 256, 0, (uint2 *)y16, rs, (const float4 *)g, (const float4 *)u, I4, gelu, un, ud);
    else if (I4 <= 256 * 8) cuda_launch_pdl(c->stream, glu_f16row_kernel<8>, T, 256, 0, (uint2 *)y16, rs, (const float4 *)g, (const float4 *)u, I4, gelu, un, ud);
    else cuda_launch_pdl(c->stream, glu_f16row_kernel<16>, T, 256, 0, (uint2 *)y16, rs, (const float4 *)g, (const float4 *)u, I4, gelu, un, ud);
    return 0;
}

/* x[t, :] += rs[t]·d[t, :] (n % 4 == 0, 16-byte aligned; a block a row): the down projection's rows scaled back
 * by the GLU's 2^-e_t (exact: a power of two) and added with one rounding, as the add op adds the GEMM's output */
__global__ void __launch_bounds__(256) add_rowscale_kernel(float4 *x, const float4 *d, const float *rs, int n4) {
    pdl_trigger();
    pdl_wait();
    const float s = rs[blockIdx.x];
    const size_t r0 = (size_t)blockIdx.x * n4;
    for (int i = threadIdx.x; i < n4; i += 256) {
        const float4 a = x[r0 + i], b = d[r0 + i];
        x[r0 + i] = make_float4(__fadd_rn(a.x, __fmul_rn(s, b.x)), __fadd_rn(a.y, __fmul_rn(s, b.y)), __fadd_rn(a.z, __fmul_rn(s, b.z)),
                                __fadd_rn(a.w, __fmul_rn(s, b.w)));
    }
}
void cuda_add_rowscale(cuda_impl_t *c, float *x, const float *d, const float *rs, int T, int n) {
    cuda_launch_pdl(c->stream, add_rowscale_kernel, T, 256, 0, (float4 *)x, (const float4 *)d, rs, n / 4);
}

void cuda_glu(backend_t *be, float *y, const float *g, const float *u, size_t n, act_t act) {
    if (!n) return;
    cuda_impl_t *c = cuda_impl(be);
    xp_dst xp;
    if (n < (1u << 30) && cuda_xp_want(c, 1, (int)n, 1, &xp)) { /* the GEMV after this one takes y prepared (xprep.cu) */
        const int nc = xp_ncols(xp), gelu = act == ACT_GELU_TANH;
        if (cuda_xp_mode(c) & 2) {
            cuda_launch_pdl(c->stream, glu_xp_kernel<false>, nc / 256, 256, sizeof(float) * 256, y, g, u, (int)n, gelu, xp);
            cuda_xp_set(c, y, &xp);
            return;
        }
        const size_t sm = sizeof(float) * nc;
        static size_t attr;
        if (sm > 48 * 1024 && sm > attr && sm <= c->smem_optin) {
            cudaCheck(cudaFuncSetAttribute(glu_xp_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
            attr = sm;
        }
        if (sm <= 48 * 1024 || sm <= attr) {
            cuda_launch_pdl(c->stream, glu_xp_kernel<true>, 1, 1024, sm, y, g, u, (int)n, gelu, xp);
            cuda_xp_set(c, y, &xp);
            return;
        }
    }
    /* aligned prefill sizes (from 2^20 elements, so decode keeps glu_kernel's launch) or where the
     * matmul after it converted as many floats before (x16.cuh: y's bf16 copy too): four elements a thread */
    __nv_bfloat16 *y16 = n % 4 == 0 && !(((uintptr_t)y | (uintptr_t)g | (uintptr_t)u) & 15) ? cuda_x16_want(c, n) : NULL;
    if (y16 || (n >= (1u << 20) && n % 4 == 0 && !(((uintptr_t)y | (uintptr_t)g | (uintptr_t)u) & 15))) {
        cuda_launch_pdl(c->stream, glu_x16_kernel, grid_for(n / 4), 256, 0, (float4 *)y, (const float4 *)g, (const float4 *)u, (uint2 *)y16,
                        n / 4, (int)(act == ACT_GELU_TANH));
        if (y16) cuda_x16_set(c, y, n);
        return;
    }
    cuda_launch_pdl(cuda_impl(be)->stream, glu_kernel, grid_for(n), 256, 0, y, g, u, n, (int)(act == ACT_GELU_TANH));
}

void cuda_add(backend_t *be, float *y, const float *x, size_t n) {
    if (!n) return;
    add_kernel<<<grid_for(n), 256, 0, cuda_impl(be)->stream>>>(y, x, n);
    cudaLaunchCheck();
}

void cuda_add_bias(backend_t *be, float *y, const float *b, int T, int n) {
    size_t total = (size_t)T * n;
    if (!total) return;
    add_bias_kernel<<<grid_for(total), 256, 0, cuda_impl(be)->stream>>>(y, b, total, n);
    cudaLaunchCheck();
}

void cuda_gather_rows(backend_t *be, float *y, const float *x, const int32_t *idx, int n, int width) {
    if (n <= 0) return;
    cuda_impl_t *c = cuda_impl(be);
    /* KILN_CUDA_GATHER4=0: always the plain kernel (A/B; read per call: the tests change it) */
    const char *ge = getenv("KILN_CUDA_GATHER4");
    if (n <= GR_MAXN && width % 4 == 0 && !(((uintptr_t)y | (uintptr_t)x) & 15) && !(ge && !strcmp(ge, "0"))) {
        gr_idx ix;
        memset(&ix, 0, sizeof ix);
        memcpy(ix.v, idx, sizeof(int32_t) * n);
        cuda_launch_pdl(c->stream, gather_rows4_kernel, dim3(n), dim3(256), 0, (float4 *)y, (const float4 *)x, ix, width / 4);
        return;
    }
    const int32_t *d = (const int32_t *)cuda_host_to_dev(c, idx, sizeof(int32_t) * n);
    gather_rows_kernel<<<n, 256, 0, c->stream>>>(y, x, d, width);
    cudaLaunchCheck();
}
