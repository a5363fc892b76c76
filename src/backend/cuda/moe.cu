/* moe.cu — MoE routing and the routed experts on the device (backend.h: moe_route,
 * moe_experts), so a MoE layer's decode step needs no host round trip (and can be captured
 * into the step's CUDA graph with everything else).
 *
 * References: ref_moe_route / ref_moe_experts (backend/cpu/moe.c).
 *
 *   moe_route_kernel    one warp per token: max, p = expf(l - max), the sum of p in id order
 *                       (one lane, sequential), p / sum, k arg-max passes (ties to the lower
 *                       id), renormalize, · escale. Bitwise the host's moe_topk: expf is
 *                       glibc's algorithm (below), every other step is one IEEE operation in
 *                       the host's order, and the comparisons are exact.
 *   moe_gateup_kernel   a block = 8 rows of one (token, expert) pair, a warp per row: gate and
 *                       up dot products in f32 (the weight dequantized as the GEMV's wload does:
 *                       scale·code + bias), then act(g)·u as glu_kernel computes it
 *   moe_down_kernel     the same for the down projection of each pair
 *   moe_scatter_kernel  out[t, c] = Σ wts · y over the token's experts in ascending id, starting
 *                       from 0, as the host loop's add_rows_scaled calls add
 *
 * The experts' f32 dot products differ from what op->matmul gives a gathered batch of one
 * expert's tokens only in the summation order (and the bf16 hi + lo split of x on the tensor-core
 * paths): within ~1e-6 of ref_moe_experts (tested). A pair reads its expert's weights on its own:
 * for decode (a few pairs per expert at most) that is what per-expert matmuls read too, so the
 * pair kernels take steps of up to KILN_CUDA_MOE tokens (default 1; 0: none). Measured
 * (qwen3.5-moe-35b q4 synth, engine steady decode, bench/cuda/RESULTS.md session 23): at one
 * row the pairs are ~20 % faster (fewer launches), at 2 rows even, from 4 rows the grouped
 * kernels win (+8 % at 4, +10-25 % at 8, 2× at 64 against pairs up to 64).
 *
 * Longer steps (prefill, batched decode) go to moe_gemm.cu's grouped GEMMs: every expert's
 * weights read once per tile of up to 128 of its pairs, on tensor cores, still without a host
 * round trip. Where those kernels do not take the weights (other bit widths, unaligned views;
 * "cuda-f32", whose matmuls are all f32; KILN_CUDA_MOE_GEMM=0) moe_experts declines and the model
 * downloads the device's ids and weights (bitwise the host's routing) for its per-expert loop. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/moe_util.cuh"

/* --- expf, bitwise glibc's (sysdeps/ieee754/flt-32/e_expf.c, from Arm's optimized-routines,
 * MIT): x·32/ln2 = k + r, 2^(k/32) from a table of 32 doubles, 2^(r/32) by a cubic, all in
 * double, one rounding to float at the end. The constants are that implementation's; the
 * operations are written as the x86-64 FMA build of glibc evaluates them. Checked against the
 * host's expf (glibc 2.36) on every float in [-104, 0] — the range softmax uses — with 0
 * differences (the variant without the fused r = z - k differs once). --- */
__constant__ unsigned long long moe_exp_tab[32] = {
    0x3FF0000000000000ull, 0x3FEFD9B0D3158574ull, 0x3FEFB5586CF9890Full, 0x3FEF9301D0125B51ull, 0x3FEF72B83C7D517Bull,
    0x3FEF54873168B9AAull, 0x3FEF387A6E756238ull, 0x3FEF1E9DF51FDEE1ull, 0x3FEF06FE0A31B715ull, 0x3FEEF1A7373AA9CBull,
    0x3FEEDEA64C123422ull, 0x3FEECE086061892Dull, 0x3FEEBFDAD5362A27ull, 0x3FEEB42B569D4F82ull, 0x3FEEAB07DD485429ull,
    0x3FEEA47EB03A5585ull, 0x3FEEA09E667F3BCDull, 0x3FEE9F75E8EC5F74ull, 0x3FEEA11473EB0187ull, 0x3FEEA589994CCE13ull,
    0x3FEEACE5422AA0DBull, 0x3FEEB737B0CDC5E5ull, 0x3FEEC49182A3F090ull, 0x3FEED503B23E255Dull, 0x3FEEE89F995AD3ADull,
    0x3FEEFF76F2FB5E47ull, 0x3FEF199BDD85529Cull, 0x3FEF3720DCEF9069ull, 0x3FEF5818DCFBA487ull, 0x3FEF7C97337B9B5Full,
    0x3FEFA4AFA2A490DAull, 0x3FEFD0765B6E4540ull};

__device__ __forceinline__ float moe_expf(float x) {
    if (isnan(x)) return x + x;
    if (x < -0x1.9fe368p6f) return 0.f;              /* below log(2^-150), -inf included */
    if (x > 0x1.62e42ep6f) return __int_as_float(0x7f800000); /* overflow */
    const double c0 = 0x1.c6af84b912394p-5 / 32 / 32 / 32, c1 = 0x1.ebfce50fac4f3p-3 / 32 / 32, c2 = 0x1.62e42ff0c52d6p-1 / 32;
    const double inv = 0x1.71547652b82fep+0 * 32, shift = 0x1.8p+52;
    const double xd = (double)x;
    double kd = __fma_rn(inv, xd, shift);
    const unsigned long long ki = (unsigned long long)__double_as_longlong(kd);
    kd = __dsub_rn(kd, shift);
    const double r = __fma_rn(inv, xd, -kd);
    const unsigned long long t = moe_exp_tab[ki % 32] + (ki << 47);
    const double s = __longlong_as_double((long long)t);
    const double z = __fma_rn(c0, r, c1), r2 = __dmul_rn(r, r);
    double y = __fma_rn(c2, r, 1.0);
    y = __fma_rn(z, r2, y);
    return __double2float_rn(__dmul_rn(y, s));
}

/* One warp per token; p[E] in shared memory. */
__global__ void moe_route_kernel(int32_t *ids, float *wts, const float *logits, int E, int k, int renorm, const float *escale) {
    extern __shared__ float p[];
    __shared__ float sw[MOE_MAX_K];
    __shared__ int si[MOE_MAX_K];
    const int t = blockIdx.x, lane = threadIdx.x;
    const float *l = logits + (size_t)t * E;
    float mx = -INFINITY; /* "> mx" as the host: NaN never wins; the max is exact in any order */
    for (int i = lane; i < E; i += 32) { const float v = l[i]; if (v > mx) mx = v; }
#pragma unroll
    for (int o = 16; o; o >>= 1) { const float v = __shfl_xor_sync(0xffffffffu, mx, o); if (v > mx) mx = v; }
    for (int i = lane; i < E; i += 32) p[i] = moe_expf(__fsub_rn(l[i], mx));
    __syncwarp();
    float sum = 0.f;
    if (lane == 0)
        for (int i = 0; i < E; i++) sum = __fadd_rn(sum, p[i]);
    sum = __shfl_sync(0xffffffffu, sum, 0);
    for (int i = lane; i < E; i += 32) p[i] = __fdiv_rn(p[i], sum);
    __syncwarp();
    if (isnan(sum)) { /* then every p is NaN: the host's first unused id is never replaced */
        for (int j = lane; j < k; j += 32) { si[j] = j; sw[j] = p[j]; }
    } else { /* p in [0, 1]: a taken id is marked -1, below every p */
        for (int j = 0; j < k; j++) {
            float bv = -2.f;
            int bi = E;
            for (int i = lane; i < E; i += 32)
                if (p[i] > bv) { bv = p[i]; bi = i; } /* ascending: equal p keeps the lower id */
#pragma unroll
            for (int o = 16; o; o >>= 1) {
                const float v = __shfl_xor_sync(0xffffffffu, bv, o);
                const int i = __shfl_xor_sync(0xffffffffu, bi, o);
                if (v > bv || (v == bv && i < bi)) { bv = v; bi = i; }
            }
            if (lane == 0) { si[j] = bi; sw[j] = bv; p[bi] = -1.f; }
            __syncwarp();
        }
    }
    __syncwarp();
    if (lane == 0) {
        if (renorm) {
            float s = 0.f;
            for (int j = 0; j < k; j++) s = __fadd_rn(s, sw[j]);
            for (int j = 0; j < k; j++) sw[j] = __fdiv_rn(sw[j], s);
        }
        for (int j = 0; j < k; j++) {
            ids[(size_t)t * k + j] = si[j];
            wts[(size_t)t * k + j] = escale ? __fmul_rn(sw[j], escale[si[j]]) : sw[j];
        }
    }
}

/* Σ_c W[r, c] · x[c] by one warp: each lane's columns in order (fmaf), then a butterfly (every
 * lane ends with the same sum). MLX 4/8-bit with word-aligned groups and bf16 with 8-column rows
 * read whole words / 16 bytes; anything else goes through wload. */
template <int BITS>
__device__ __forceinline__ float moe_dot_q(const dweight_t &w, int r, const float *__restrict__ x, int lane) {
    constexpr int CPW = 32 / BITS;
    const int nw = w.cols / CPW, ng = w.cols / w.group;
    const uint32_t *row = (const uint32_t *)w.data + (size_t)r * nw;
    const size_t g0 = (size_t)r * ng;
    float acc = 0.f;
    for (int i = lane; i < nw; i += 32) {
        const uint32_t v = __ldg(row + i);
        const int c0 = i * CPW;
        const size_t gi = g0 + c0 / w.group;
        const float s = ld_f(w.scales, w.sb_dtype, gi), b = ld_f(w.biases, w.sb_dtype, gi);
#pragma unroll
        for (int j = 0; j < CPW; j++) acc = fmaf(fmaf(s, (float)((v >> (BITS * j)) & ((1u << BITS) - 1)), b), x[c0 + j], acc);
    }
    return acc;
}

__device__ __forceinline__ float moe_dot(const dweight_t &w, int r, const float *__restrict__ x) {
    const int K = w.cols, lane = threadIdx.x & 31;
    float acc = 0.f;
    if (w.dtype == DT_U32 && w.bits == 4 && K % 8 == 0 && w.group % 8 == 0) acc = moe_dot_q<4>(w, r, x, lane);
    else if (w.dtype == DT_U32 && w.bits == 8 && K % 4 == 0 && w.group % 4 == 0) acc = moe_dot_q<8>(w, r, x, lane);
    else if (w.dtype == DT_BF16 && K % 8 == 0) {
        const uint4 *row = (const uint4 *)((const __nv_bfloat16 *)w.data + (size_t)r * K);
        for (int i = lane; i < K / 8; i += 32) {
            const uint4 v = __ldg(row + i);
            const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int j = 0; j < 4; j++) {
                acc = fmaf(__uint_as_float(u[j] << 16), x[8 * i + 2 * j], acc);
                acc = fmaf(__uint_as_float(u[j] & 0xffff0000u), x[8 * i + 2 * j + 1], acc);
            }
        }
    } else {
        for (int c = lane; c < K; c += 32) acc = fmaf(wload(w, r, c), x[c], acc);
    }
#pragma unroll
    for (int o = 16; o; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    return acc;
}

#define MOE_ROWS 8 /* rows per block: a warp each */

/* act[p, Ie] = act(gate[e] · x[t]) · (up[e] · x[t]) for pair p = t·k + j, e = ids[p]. */
__global__ void __launch_bounds__(32 * MOE_ROWS) moe_gateup_kernel(float *act, const float *x, const int32_t *ids, const dweight_t *tab,
                                                                   int E, int k, int Ie, int H, int gelu) {
    const int p = blockIdx.y, r = blockIdx.x * MOE_ROWS + threadIdx.x / 32;
    if (r >= Ie) return;
    const int e = ids[p];
    float a = 0.f;
    if (e >= 0 && e < E) {
        const float *xr = x + (size_t)(p / k) * H;
        const float gv = moe_dot(tab[e], r, xr), uv = moe_dot(tab[E + e], r, xr);
        if (!gelu) a = gv / (1.0f + expf(-gv));
        else a = 0.5f * gv * (1.0f + tanhf(0.7978845608028654f * (gv + 0.044715f * gv * gv * gv)));
        a = a * uv;
    }
    if ((threadIdx.x & 31) == 0) act[(size_t)p * Ie + r] = a;
}

/* y[p, H] = down[e] · act[p]. */
__global__ void __launch_bounds__(32 * MOE_ROWS) moe_down_kernel(float *y, const float *act, const int32_t *ids, const dweight_t *tab,
                                                                 int E, int Ie, int H) {
    const int p = blockIdx.y, r = blockIdx.x * MOE_ROWS + threadIdx.x / 32;
    if (r >= H) return;
    const int e = ids[p];
    const float v = e >= 0 && e < E ? moe_dot(tab[2 * E + e], r, act + (size_t)p * Ie) : 0.f;
    if ((threadIdx.x & 31) == 0) y[(size_t)p * H + r] = v;
}

/* out[t, c] = Σ over the token's pairs in ascending expert id of wts · y (fmaf from 0: what
 * add_rows_scaled_kernel's y += wt · x gives on a zeroed out). */
__global__ void moe_scatter_kernel(float *out, const float *y, const int32_t *ids, const float *wts, int T, int k, int H) {
    const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)T * H) return;
    const int t = (int)(i / H), c = (int)(i % H);
    const int32_t *id = ids + (size_t)t * k;
    float acc = 0.f;
    int last = -1;
    for (int n = 0; n < k; n++) {
        const int j = moe_next(id, k, last);
        if (j < 0) break;
        last = id[j];
        acc = fmaf(wts[(size_t)t * k + j], y[((size_t)t * k + j) * H + c], acc);
    }
    out[i] = acc;
}

/* Per backend: each layer's expert table (device dweight_t [gate E][up E][down E]), found by
 * the host address of its gate array and checked against the weights' device structs. */
typedef struct moe_tab {
    const weight_t *g, *u, *d;
    int E;
    const void **keys; /* [3E] the weights' w->device when built */
    dweight_t *dev;
    dweight_t *host;   /* [3E] the table's host copy (moe_gemm.cu reads formats from it) */
    int gemm_ok;       /* cuda_moe_gemm_ok(host) == 0 */
} moe_tab_t;

typedef struct moe_state {
    moe_tab_t *tabs;
    int n, cap;
    void *act, *y;
    size_t act_bytes, y_bytes;
    void *gbuf[6];     /* moe_gemm.cu's scratch */
    size_t gbytes[6];
} moe_state_t;

int cuda_moe_gemm_ok(const dweight_t *w, int E);
void cuda_moe_gemm(cuda_impl_t *c, void **bufs, size_t *bytes, float *out, const float *x, int T, int k, const int32_t *ids, const float *wts,
                   const dweight_t *tab, const dweight_t *hw, int E, int gelu);

/* Read per call (the tests switch them): the pair kernels' largest step, the grouped kernels on/off. */
static int moe_max_t(void) {
    const char *e = getenv("KILN_CUDA_MOE");
    const int v = e ? atoi(e) : 1;
    return v < 0 ? 0 : v;
}
static int moe_gemm_on(void) {
    const char *e = getenv("KILN_CUDA_MOE_GEMM");
    return !e || strcmp(e, "0");
}

static const moe_tab_t *moe_table(cuda_impl_t *c, const weight_t *g, const weight_t *u, const weight_t *d, int E) {
    if (!c->moe) c->moe = calloc(1, sizeof(moe_state_t));
    moe_state_t *m = (moe_state_t *)c->moe;
    moe_tab_t *tb = NULL;
    for (int i = 0; i < m->n; i++)
        if (m->tabs[i].g == g && m->tabs[i].u == u && m->tabs[i].d == d && m->tabs[i].E == E) { tb = &m->tabs[i]; break; }
    if (tb) {
        int same = 1;
        for (int e = 0; e < E && same; e++)
            same = tb->keys[e] == g[e].device && tb->keys[E + e] == u[e].device && tb->keys[2 * E + e] == d[e].device;
        if (same) return tb;
        cuda_sync(c);
        cudaCheck(cudaFree(tb->dev));
        free(tb->keys);
        free(tb->host);
    } else {
        if (m->n == m->cap) {
            m->cap = m->cap ? 2 * m->cap : 64;
            m->tabs = (moe_tab_t *)realloc(m->tabs, sizeof(moe_tab_t) * m->cap);
        }
        tb = &m->tabs[m->n++];
        tb->g = g; tb->u = u; tb->d = d; tb->E = E;
        cuda_sync(c);
    }
    dweight_t *h = (dweight_t *)malloc(sizeof(dweight_t) * 3 * E);
    tb->keys = (const void **)malloc(sizeof(void *) * 3 * E);
    for (int e = 0; e < E; e++) {
        const weight_t *w3[3] = {&g[e], &u[e], &d[e]};
        for (int q = 0; q < 3; q++) {
            h[q * E + e] = *(const dweight_t *)w3[q]->device;
            tb->keys[q * E + e] = w3[q]->device;
        }
    }
    cudaCheck(cudaMalloc((void **)&tb->dev, sizeof(dweight_t) * 3 * E));
    /* on the backend's stream, waited for: cudaMemcpy goes on the legacy stream, which the
     * non-blocking stream does not follow, and returns before a pageable copy lands */
    cudaCheck(cudaMemcpyAsync(tb->dev, h, sizeof(dweight_t) * 3 * E, cudaMemcpyHostToDevice, c->stream));
    cudaCheck(cudaStreamSynchronize(c->stream));
    tb->host = h;
    tb->gemm_ok = cuda_moe_gemm_ok(h, E) == 0;
    return tb;
}

void cuda_moe_free(cuda_impl_t *c) {
    moe_state_t *m = (moe_state_t *)c->moe;
    if (!m) return;
    for (int i = 0; i < m->n; i++) { cudaFree(m->tabs[i].dev); free(m->tabs[i].keys); free(m->tabs[i].host); }
    free(m->tabs);
    cudaFree(m->act); cudaFree(m->y);
    for (int i = 0; i < 6; i++) cudaFree(m->gbuf[i]);
    free(m);
    c->moe = NULL;
}

int cuda_moe_route(backend_t *be, int32_t *ids, float *wts, const float *logits, int T, int E, int k, int renorm, const float *escale) {
    if (T <= 0 || E < 1 || E > 1024 || k < 1 || k > E || k > MOE_MAX_K) return 1;
    cuda_impl_t *c = cuda_impl(be);
    moe_route_kernel<<<T, 32, sizeof(float) * E, c->stream>>>(ids, wts, logits, E, k, renorm, escale);
    cudaLaunchCheck();
    return 0;
}

int cuda_moe_experts(backend_t *be, float *out, const float *x, int T, int k, const int32_t *ids, const float *wts, const weight_t *gate,
                     const weight_t *up, const weight_t *down, int E, act_t act) {
    if (T <= 0) return 0;
    cuda_impl_t *c = cuda_impl(be);
    const int H = down[0].rows, Ie = gate[0].rows, P = T * k;
    const int pairs = T <= moe_max_t();
    /* "cuda-f32" keeps every matmul in f32: the per-expert loop there */
    if (!pairs && (!moe_gemm_on() || c->gemm_min_t == 0x7fffffff)) return 1;
    const moe_tab_t *tb = moe_table(c, gate, up, down, E);
    if (!pairs && !tb->gemm_ok) return 1;
    const dweight_t *tab = tb->dev;
    cuda_capture_tick(c); /* counts as a matmul for the captured step's segments */
    moe_state_t *m = (moe_state_t *)c->moe;
    if (!pairs) {
        cuda_moe_gemm(c, m->gbuf, m->gbytes, out, x, T, k, ids, wts, tab, tb->host, E, act == ACT_GELU_TANH);
        return 0;
    }
    float *a = (float *)cuda_scratch(c, &m->act, &m->act_bytes, sizeof(float) * P * Ie);
    float *y = (float *)cuda_scratch(c, &m->y, &m->y_bytes, sizeof(float) * P * H);
    moe_gateup_kernel<<<dim3(cdiv(Ie, MOE_ROWS), P), 32 * MOE_ROWS, 0, c->stream>>>(a, x, ids, tab, E, k, Ie, H, act == ACT_GELU_TANH);
    cudaLaunchCheck();
    moe_down_kernel<<<dim3(cdiv(H, MOE_ROWS), P), 32 * MOE_ROWS, 0, c->stream>>>(y, a, ids, tab, E, Ie, H);
    cudaLaunchCheck();
    moe_scatter_kernel<<<cdiv((long)T * H, 256), 256, 0, c->stream>>>(out, y, ids, wts, T, k, H);
    cudaLaunchCheck();
    return 0;
}
