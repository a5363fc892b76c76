/* hybrid.cu — ops the hybrid and MoE families (qwen3_5, gemma3/4) appended to backend.h.
 *
 * References (backend/cpu): ref_sigmoid_mul, ref_scale, ref_add_rows_scaled (gate.c,
 * moe.c), ref_conv1d_causal (conv1d.c) and ref_gated_delta (deltanet_ref.c). The
 * element-wise ones first, then the causal depthwise conv1d with carried state and the
 * gated delta rule (gated DeltaNet), both taking their per-row state pointers from the
 * host like the block tables of attention. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/mma_util.cuh" /* cp.async */

__global__ void sigmoid_mul_kernel(float *y, const float *g, size_t total, int n, int gw) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        float gv = gw == 1 ? g[i / n] : g[i];
        y[i] *= 1.0f / (1.0f + expf(-gv));
    }
}

__global__ void scale_kernel(float *y, float s, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) y[i] *= s;
}

/* One thread per column walks i in order, so repeated indices add in the CPU's order. */
__global__ void add_rows_scaled_kernel(float *y, const float *x, const int32_t *idx, const float *wt, int n, int width) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= width) return;
    for (int i = 0; i < n; i++) y[(size_t)idx[i] * width + c] += wt[i] * x[(size_t)i * width + c];
}

static int grid_for(size_t n) { size_t b = (n + 255) / 256; return (int)(b < 65535 * 4 ? b : 65535 * 4); }

void cuda_sigmoid_mul(backend_t *be, float *y, const float *g, int T, int n, int g_width) {
    size_t total = (size_t)T * n;
    if (!total) return;
    sigmoid_mul_kernel<<<grid_for(total), 256, 0, cuda_impl(be)->stream>>>(y, g, total, n, g_width);
    cudaLaunchCheck();
}

void cuda_scale(backend_t *be, float *y, float s, size_t n) {
    if (!n) return;
    scale_kernel<<<grid_for(n), 256, 0, cuda_impl(be)->stream>>>(y, s, n);
    cudaLaunchCheck();
}

void cuda_add_rows_scaled(backend_t *be, float *y, const float *x, const int32_t *idx, const float *wt, int n, int width) {
    if (n <= 0) return;
    cuda_impl_t *c = cuda_impl(be);
    size_t ib = ((sizeof(int32_t) * n + 15) & ~(size_t)15), wb = sizeof(float) * n;
    char *hb = (char *)cuda_host_buf(c, 1, ib + wb);
    memcpy(hb, idx, sizeof(int32_t) * n);
    memcpy(hb + ib, wt, wb);
    const char *d = (const char *)cuda_host_to_dev(c, hb, ib + wb);
    add_rows_scaled_kernel<<<cdiv(width, 128), 128, 0, c->stream>>>(y, x, (const int32_t *)d, (const float *)(d + ib), n, width);
    cudaLaunchCheck();
}

/* --- causal depthwise conv1d with carried state (ref_conv1d_causal, conv1d.c) ---
 * One thread per (token, channel): y[t, c] reads the K-1 inputs before t in its row, from x
 * where they are in the step and from the row's state before that, so every token runs in
 * parallel (the CPU walks them in order; the sum over k is in the same order, k ascending).
 * The state update is a second kernel: it must not run while the first still reads state. */
__device__ __forceinline__ float act_dev(float v, int act) {
    if (act == ACT_SILU) return v / (1.0f + expf(-v));
    return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
}

__device__ __forceinline__ int row_of(const int32_t *row_start, int n_rows, int t) {
    int lo = 0, hi = n_rows - 1; /* the last r with row_start[r] <= t */
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (row_start[mid] <= t) lo = mid; else hi = mid - 1;
    }
    return lo;
}

__global__ void conv1d_kernel(float *y, const float *x, int n_rows, const int32_t *row_start, float *const *state,
                              const float *w, int C, int K, int T, int act) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int H = K - 1;
    for (int t = blockIdx.y; t < T; t += gridDim.y) {
        const int r = row_of(row_start, n_rows, t), i = t - row_start[r];
        const float *st = state[r], *wc = w + (size_t)c * K;
        float acc = 0.f;
        for (int k = 0; k < H; k++) {
            const int j = i - H + k;
            const float u = j >= 0 ? x[(size_t)(t - i + j) * C + c] : st[(size_t)(H + j) * C + c];
            acc += wc[k] * u;
        }
        acc += wc[H] * x[(size_t)t * C + c];
        y[(size_t)t * C + c] = act_dev(acc, act);
    }
}

/* New state of each row: the last K-1 inputs of [state ++ row]; ascending p reads st[p + n]
 * before anything overwrites it. */
__global__ void conv1d_state_kernel(const float *x, int n_rows, const int32_t *row_start, float *const *state, int C, int K) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y;
    if (c >= C || r >= n_rows) return;
    const int H = K - 1, t0 = row_start[r], n = row_start[r + 1] - t0;
    float *st = state[r];
    for (int p = 0; p < H; p++) {
        const int j = p - (H - n); /* index into the row's tokens; < 0: older state */
        st[(size_t)p * C + c] = j >= 0 ? x[(size_t)(t0 + j) * C + c] : st[(size_t)(p + n) * C + c];
    }
}

/* row_start [n_rows+1] and the row pointers [n_rows] in one host buffer, one copy */
static const char *rows_to_dev(cuda_impl_t *c, int n_rows, const int32_t *row_start, float *const *ptrs, size_t *ptr_off) {
    size_t rb = (sizeof(int32_t) * (size_t)(n_rows + 1) + 15) & ~(size_t)15, pb = sizeof(float *) * (size_t)n_rows;
    char *hb = (char *)cuda_host_buf(c, 1, rb + pb);
    memset(hb, 0, rb);
    memcpy(hb, row_start, sizeof(int32_t) * (n_rows + 1));
    memcpy(hb + rb, ptrs, pb);
    *ptr_off = rb;
    return (const char *)cuda_host_to_dev(c, hb, rb + pb);
}

void cuda_conv1d_causal(backend_t *be, float *y, const float *x, int n_rows, const int32_t *row_start, float *const *state,
                        const float *w, int C, int K, act_t act) {
    if (n_rows <= 0 || C <= 0 || K <= 0) return;
    const int T = row_start[n_rows];
    if (T <= 0) return;
    cuda_impl_t *c = cuda_impl(be);
    size_t po;
    const char *d = rows_to_dev(c, n_rows, row_start, state, &po);
    const int32_t *drs = (const int32_t *)d;
    float *const *dst = (float *const *)(d + po);
    dim3 grid(cdiv(C, 128), T < 65535 ? T : 65535);
    conv1d_kernel<<<grid, 128, 0, c->stream>>>(y, x, n_rows, drs, dst, w, C, K, T, (int)act);
    cudaLaunchCheck();
    if (K > 1) {
        conv1d_state_kernel<<<dim3(cdiv(C, 128), n_rows), 128, 0, c->stream>>>(x, n_rows, drs, dst, C, K);
        cudaLaunchCheck();
    }
}

/* --- the gated delta rule, token by token (ref_gated_delta_tokens, deltanet_ref.c) ---
 * A block owns DCOLS columns j of one value head's state S [dk][dv] for one row, held in
 * registers for the whole row: 8 lanes per column, lane s keeping rows i = s, s+8, ...
 * (NI = ceil(dk/8) of them). Per token the block L2-normalizes q and k into shared memory,
 * then each column does decay, Sᵀk (8-lane shuffle sum), δ, the rank-1 update and Sᵀq.
 * The state is read once and written once per row and step, so decode costs one pass over
 * S and a prefill row never goes back to memory between tokens.
 * Trade-offs: the tokens of a row run one after another (a chunk-parallel form, like the
 * CPU's WY transform on tensor cores, is the faster prefill: not done, d->chunk is ignored);
 * sums over i run as 8 interleaved partials, not the CPU's single ascending chain, so
 * results agree to float rounding (~1e-6), not bitwise. A token's result never depends on
 * other rows. */
#define DLPC 8    /* lanes per column  */
#define DCOLS 16  /* columns per block */

typedef struct delta_dev {
    float *out;
    const float *qkv, *a, *b, *A_log, *dt_bias;
    const int32_t *row_start;
    float *const *state;
    int nk, nv, dk, dv, stride, q_off, k_off, v_off;
    float q_scale;
} delta_dev_t;

/* Sum of v over the block; the __syncthreads inside also publishes what was written before. */
__device__ __forceinline__ float block_sum(float v, float *red, int nwarps) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float s = 0.f;
    for (int i = 0; i < nwarps; i++) s += red[i];
    return s;
}

/* A lane's rows i = sub, sub + 8, ... of state column j: loaded (STORE false) or stored back. */
template <int NI, bool STORE>
__device__ __forceinline__ void delta_state(float (&s)[NI], float *S, int sub, int j, int dk, int dv, bool col) {
#pragma unroll
    for (int m = 0; m < NI; m++) {
        const int i = sub + DLPC * m;
        if (STORE) { if (col && i < dk) S[(size_t)i * dv + j] = s[m]; }
        else s[m] = col && i < dk ? S[(size_t)i * dv + j] : 0.f;
    }
}

template <int NI>
__global__ void __launch_bounds__(DLPC * DCOLS) gated_delta_kernel(delta_dev_t d) {
    __shared__ float qs[DLPC * NI], ks[DLPC * NI], red[2][DLPC * DCOLS / 32], gb[2];
    const int h = blockIdx.y, r = blockIdx.z, kh = h / (d.nv / d.nk);
    const int sub = threadIdx.x % DLPC, j = blockIdx.x * DCOLS + threadIdx.x / DLPC;
    const int nwarps = blockDim.x / 32, dk = d.dk, dv = d.dv;
    const bool col = j < dv;
    float *S = d.state[r] + (size_t)h * dk * dv;
    float s[NI];
    delta_state<NI, false>(s, S, sub, j, dk, dv, col);
    const int t0 = d.row_start[r], t1 = d.row_start[r + 1];
    for (int t = t0; t < t1; t++) {
        const float *row = d.qkv + (size_t)t * d.stride;
        float sq = 0.f, sk = 0.f;
        for (int i = threadIdx.x; i < dk; i += blockDim.x) {
            const float qv = row[d.q_off + (size_t)kh * dk + i], kv = row[d.k_off + (size_t)kh * dk + i];
            qs[i] = qv; ks[i] = kv;
            sq += qv * qv; sk += kv * kv;
        }
        if (threadIdx.x == 0) {
            const float x = d.a[(size_t)t * d.nv + h] + d.dt_bias[h];
            const float g = -expf(d.A_log[h]) * (x > 20.f ? x : log1pf(expf(x)));
            gb[0] = expf(g);
            gb[1] = 1.0f / (1.0f + expf(-d.b[(size_t)t * d.nv + h]));
        }
        sq = block_sum(sq, red[0], nwarps); /* the sync inside also publishes qs, ks, gb */
        for (int off = 16; off > 0; off >>= 1) sk += __shfl_xor_sync(0xffffffffu, sk, off);
        if ((threadIdx.x & 31) == 0) red[1][threadIdx.x >> 5] = sk;
        __syncthreads();
        sk = 0.f;
        for (int i = 0; i < nwarps; i++) sk += red[1][i];
        const float iq = 1.0f / sqrtf(sq + 1e-6f), ik = 1.0f / sqrtf(sk + 1e-6f);
        const float decay = gb[0], beta = gb[1];
        float kq[NI], qq[NI];
#pragma unroll
        for (int m = 0; m < NI; m++) {
            const int i = sub + DLPC * m;
            kq[m] = i < dk ? ks[i] * ik : 0.f;
            qq[m] = i < dk ? qs[i] * iq * d.q_scale : 0.f;
        }
        float kv = 0.f;
#pragma unroll
        for (int m = 0; m < NI; m++) {
            s[m] *= decay;
            kv += s[m] * kq[m];
        }
#pragma unroll
        for (int off = 1; off < DLPC; off <<= 1) kv += __shfl_xor_sync(0xffffffffu, kv, off);
        const float vj = col ? row[d.v_off + (size_t)h * dv + j] : 0.f;
        const float delta = (vj - kv) * beta;
        float o = 0.f;
#pragma unroll
        for (int m = 0; m < NI; m++) {
            s[m] += kq[m] * delta;
            o += s[m] * qq[m];
        }
#pragma unroll
        for (int off = 1; off < DLPC; off <<= 1) o += __shfl_xor_sync(0xffffffffu, o, off);
        if (col && sub == 0) d.out[((size_t)t * d.nv + h) * dv + j] = o;
        __syncthreads(); /* everyone has read qs, ks, gb before the next token writes them */
    }
    delta_state<NI, true>(s, S, sub, j, dk, dv, col);
}

/* --- the prefill form: each token's inputs first, for all tokens at once, then the recurrence
 * with no block barrier ---
 * delta_prep_kernel: a warp per (token, key head) writes q̂ = q·(1/‖q‖)·q_scale and k̂ = k/‖k‖
 * (the 1/sqrtf(Σ + 1e-6) above, summed as 32 lane partials) into qn / kn [T, nk, dk], and its
 * lanes the (decay, beta) of the key head's value heads into gb [T, nv].
 * delta_seq_kernel: gated_delta_kernel's columns and per-token arithmetic (sums over i as two
 * partials per lane: half the dependent chain), its inputs in chunks of DCH tokens copied by
 * cp.async into shared memory one chunk ahead. Inside a chunk a column's 8 lanes wait for
 * nobody else: a token costs two 8-lane shuffle sums and the FMAs between them instead of three
 * block barriers, the norms and a global load.
 * Trade-off: one more launch and 2·T·nk·dk floats of scratch, so decode steps (one token per
 * row) keep gated_delta_kernel; KILN_CUDA_DELTA=old keeps it for every step. Measured (H200,
 * session 23, ncu): a 2048-token layer of the qwen3.5-moe synth 2.4 → 1.64 ms with the inputs
 * one token ahead in registers, 1.23 ms with the shared-memory chunks; qwen3.5-2b bf16 prefill
 * 20.8k → 48.5k tok/s against the old kernel. Still a token-by-token chain: the chunked (WY)
 * form on tensor cores is the next step for long prompts. */
__global__ void delta_prep_kernel(delta_dev_t d, float *__restrict__ qn, float *__restrict__ kn, float2 *__restrict__ gb, int T) {
    const int w = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
    if (w >= T * d.nk) return; /* whole warps */
    const int t = w / d.nk, kh = w % d.nk, dk = d.dk;
    const float *row = d.qkv + (size_t)t * d.stride;
    const float *qr = row + d.q_off + (size_t)kh * dk, *kr = row + d.k_off + (size_t)kh * dk;
    float sq = 0.f, sk = 0.f;
    for (int i = lane; i < dk; i += 32) { const float qv = qr[i], kv = kr[i]; sq += qv * qv; sk += kv * kv; }
    for (int off = 16; off > 0; off >>= 1) { sq += __shfl_xor_sync(0xffffffffu, sq, off); sk += __shfl_xor_sync(0xffffffffu, sk, off); }
    const float iq = 1.0f / sqrtf(sq + 1e-6f), ik = 1.0f / sqrtf(sk + 1e-6f);
    float *qo = qn + ((size_t)t * d.nk + kh) * dk, *ko = kn + ((size_t)t * d.nk + kh) * dk;
    for (int i = lane; i < dk; i += 32) { qo[i] = qr[i] * iq * d.q_scale; ko[i] = kr[i] * ik; }
    const int hpk = d.nv / d.nk;
    for (int x = lane; x < hpk; x += 32) {
        const int h = kh * hpk + x;
        const float a = d.a[(size_t)t * d.nv + h] + d.dt_bias[h];
        const float g = -expf(d.A_log[h]) * (a > 20.f ? a : log1pf(expf(a)));
        gb[(size_t)t * d.nv + h] = make_float2(expf(g), 1.0f / (1.0f + expf(-d.b[(size_t)t * d.nv + h])));
    }
}

#define DCH 32 /* tokens per shared-memory chunk of delta_seq_kernel */

/* dynamic shared memory: 2 buffers × (k̂ and q̂ [DCH][dk], v [DCH][DCOLS], (decay, beta) [DCH]) */
static size_t delta_seq_smem(int dk) { return sizeof(float) * 2 * (2 * (size_t)DCH * dk + DCH * DCOLS + 2 * DCH); }

template <int NI>
__global__ void __launch_bounds__(DLPC * DCOLS) delta_seq_kernel(delta_dev_t d, const float *__restrict__ qn, const float *__restrict__ kn, const float2 *__restrict__ gb) {
    extern __shared__ __align__(16) float dsm[];
    const int h = blockIdx.y, r = blockIdx.z, kh = h / (d.nv / d.nk);
    const int sub = threadIdx.x % DLPC, cj = threadIdx.x / DLPC, j0 = blockIdx.x * DCOLS, j = j0 + cj;
    const int dk = d.dk, dv = d.dv, tid = threadIdx.x;
    const bool col = j < dv;
    const size_t bufn = 2 * (size_t)DCH * dk + DCH * DCOLS + 2 * DCH;
    float *S = d.state[r] + (size_t)h * dk * dv;
    float s[NI];
    delta_state<NI, false>(s, S, sub, j, dk, dv, col);
    const int t0 = d.row_start[r], t1 = d.row_start[r + 1], nt = t1 - t0;
    /* a chunk of up to DCH tokens from tc into buffer b, by cp.async (16-byte pieces where dk allows) */
    auto load = [&](int b, int tc) {
        float *ks = dsm + b * bufn, *qs = ks + DCH * dk, *vs = qs + DCH * dk, *gs = vs + DCH * DCOLS;
        const int n = min(DCH, t1 - tc);
        if (dk % 4 == 0) {
            const int upr = dk / 4;
            for (int u = tid; u < n * upr; u += blockDim.x) {
                const int tt = u / upr, c4 = u % upr;
                const size_t src = ((size_t)(tc + tt) * d.nk + kh) * dk + 4 * c4;
                cp_async16(ks + tt * dk + 4 * c4, kn + src);
                cp_async16(qs + tt * dk + 4 * c4, qn + src);
            }
        } else {
            for (int u = tid; u < n * dk; u += blockDim.x) {
                const int tt = u / dk, c = u % dk;
                const size_t src = ((size_t)(tc + tt) * d.nk + kh) * dk + c;
                cp_async4(ks + tt * dk + c, kn + src);
                cp_async4(qs + tt * dk + c, qn + src);
            }
        }
        for (int u = tid; u < n * DCOLS; u += blockDim.x) {
            const int tt = u / DCOLS, c = u % DCOLS;
            if (j0 + c < dv) cp_async4(vs + u, d.qkv + (size_t)(tc + tt) * d.stride + d.v_off + (size_t)h * dv + j0 + c);
        }
        for (int u = tid; u < 2 * n; u += blockDim.x) cp_async4(gs + u, (const float *)(gb + (size_t)(tc + u / 2) * d.nv + h) + (u & 1));
        cp_commit();
    };
    if (nt > 0) load(0, t0);
    for (int tc = t0, b = 0; tc < t1; tc += DCH, b ^= 1) {
        if (tc + DCH < t1) { load(b ^ 1, tc + DCH); cp_wait<1>(); }
        else cp_wait<0>();
        __syncthreads(); /* chunk tc landed for every thread */
        const float *ks = dsm + b * bufn, *qs = ks + DCH * dk, *vs = qs + DCH * dk, *gs = vs + DCH * DCOLS;
        const int n = min(DCH, t1 - tc);
        for (int tt = 0; tt < n; tt++) {
            const float *kr = ks + tt * dk, *qr = qs + tt * dk;
            const float decay = gs[2 * tt], beta = gs[2 * tt + 1];
            /* two partial sums: half the dependent chain */
            float kv0 = 0.f, kv1 = 0.f;
#pragma unroll
            for (int m = 0; m < NI; m++) {
                const int i = sub + DLPC * m;
                const float kq = i < dk ? kr[i] : 0.f;
                s[m] *= decay;
                if (m & 1) kv1 += s[m] * kq;
                else kv0 += s[m] * kq;
            }
            float kv = kv0 + kv1;
#pragma unroll
            for (int off = 1; off < DLPC; off <<= 1) kv += __shfl_xor_sync(0xffffffffu, kv, off);
            const float vj = col ? vs[tt * DCOLS + cj] : 0.f;
            const float delta = (vj - kv) * beta;
            float o0 = 0.f, o1 = 0.f;
#pragma unroll
            for (int m = 0; m < NI; m++) {
                const int i = sub + DLPC * m;
                const float kq = i < dk ? kr[i] : 0.f, qq = i < dk ? qr[i] : 0.f;
                s[m] += kq * delta;
                if (m & 1) o1 += s[m] * qq;
                else o0 += s[m] * qq;
            }
            float o = o0 + o1;
#pragma unroll
            for (int off = 1; off < DLPC; off <<= 1) o += __shfl_xor_sync(0xffffffffu, o, off);
            if (col && sub == 0) d.out[((size_t)(tc + tt) * d.nv + h) * dv + j] = o;
        }
        __syncthreads(); /* buffer b is reloaded in the next round */
    }
    delta_state<NI, true>(s, S, sub, j, dk, dv, col);
}

void cuda_gated_delta(backend_t *be, float *out, const float *qkv, const float *a, const float *b, int T, const struct delta_args *da) {
    if (T <= 0 || da->n_rows <= 0) return;
    if (da->dk > DLPC * 32 || da->n_k_heads <= 0 || da->n_v_heads % da->n_k_heads) {
        fprintf(stderr, "kiln cuda: gated_delta with key head dim %d (max %d) and %d/%d heads is not supported\n", da->dk, DLPC * 32,
                da->n_v_heads, da->n_k_heads);
        abort();
    }
    cuda_impl_t *c = cuda_impl(be);
    size_t po;
    const char *dr = rows_to_dev(c, da->n_rows, da->row_start, da->state, &po);
    delta_dev_t d;
    d.out = out; d.qkv = qkv; d.a = a; d.b = b; d.A_log = da->A_log; d.dt_bias = da->dt_bias;
    d.row_start = (const int32_t *)dr; d.state = (float *const *)(dr + po);
    d.nk = da->n_k_heads; d.nv = da->n_v_heads; d.dk = da->dk; d.dv = da->dv;
    d.stride = da->stride; d.q_off = da->q_off; d.k_off = da->k_off; d.v_off = da->v_off; d.q_scale = da->q_scale;
    dim3 grid(cdiv(da->dv, DCOLS), da->n_v_heads, da->n_rows);
    const int ni = cdiv(da->dk, DLPC);
    const char *env = getenv("KILN_CUDA_DELTA");
    if (T > da->n_rows && !(env && !strcmp(env, "old"))) { /* a row of more than one token: the prefill form */
        const size_t nq = (size_t)T * da->n_k_heads * da->dk;
        float *qn = (float *)cuda_scratch(c, &c->delta, &c->delta_bytes, sizeof(float) * (2 * nq + 2 * (size_t)T * da->n_v_heads));
        float *kn = qn + nq;
        float2 *gb = (float2 *)(kn + nq);
        const long warps = (long)T * da->n_k_heads;
        delta_prep_kernel<<<cdiv(warps * 32, 256), 256, 0, c->stream>>>(d, qn, kn, gb, T);
        cudaLaunchCheck();
        const size_t smem = delta_seq_smem(da->dk);
        static size_t set[5] = {48 * 1024, 48 * 1024, 48 * 1024, 48 * 1024, 48 * 1024}; /* per kernel: the opt-in above 48 KB */
        auto go = [&](void (*kern)(delta_dev_t, const float *, const float *, const float2 *), int v) {
            if (smem > set[v]) { cudaCheck(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)); set[v] = smem; }
            kern<<<grid, DLPC * DCOLS, smem, c->stream>>>(d, qn, kn, gb);
        };
        if (ni <= 2) go(delta_seq_kernel<2>, 0);
        else if (ni <= 4) go(delta_seq_kernel<4>, 1);
        else if (ni <= 8) go(delta_seq_kernel<8>, 2);
        else if (ni <= 16) go(delta_seq_kernel<16>, 3);
        else go(delta_seq_kernel<32>, 4);
        cudaLaunchCheck();
        return;
    }
    if (ni <= 2) gated_delta_kernel<2><<<grid, DLPC * DCOLS, 0, c->stream>>>(d);
    else if (ni <= 4) gated_delta_kernel<4><<<grid, DLPC * DCOLS, 0, c->stream>>>(d);
    else if (ni <= 8) gated_delta_kernel<8><<<grid, DLPC * DCOLS, 0, c->stream>>>(d);
    else if (ni <= 16) gated_delta_kernel<16><<<grid, DLPC * DCOLS, 0, c->stream>>>(d);
    else gated_delta_kernel<32><<<grid, DLPC * DCOLS, 0, c->stream>>>(d);
    cudaLaunchCheck();
}
