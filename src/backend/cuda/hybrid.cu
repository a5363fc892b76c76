/* hybrid.cu — ops the hybrid and MoE families (qwen3_5, gemma3/4) appended to backend.h.
 *
 * References (backend/cpu): ref_sigmoid_mul, ref_scale, ref_add_rows_scaled (gate.c,
 * moe.c) and ref_conv1d_causal (conv1d.c). The element-wise ones first, then the causal
 * depthwise conv1d with carried state, taking its per-row state pointers from the host like
 * the block tables of attention. The gated delta rule has a file of its own (deltanet.cu). */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/conv_util.cuh"

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
 * A thread per (channel, run of CONV_TT consecutive tokens): the channel's K taps and the K-1
 * inputs before the current token in registers, so each input is read once per run (the
 * window slides; at a row's first token it is refilled from the row's state), and the runs
 * of a channel go in parallel (the CPU walks the tokens in order; the sum over k is in the
 * same order, k ascending, so the outputs are the same floats). K ≤ CONV_KMAX (Qwen3.5 and
 * Qwen3-Next: 4). Measured (H200, qwen3.5-2b bf16, 2048 tokens, 6144 channels): a thread per
 * (token, channel) reading its K-1 inputs and taps from memory 64 µs a layer; this one:
 * bench/cuda/RESULTS.md, session 24.
 * The state update is a second kernel (it must not run while the first still reads state),
 * except in decode steps (every row one token): there the thread that read a row's window
 * writes it back shifted — the same floats, one launch fewer a layer. */
#define CONV_TT 16

__device__ __forceinline__ int row_of(const int32_t *row_start, int n_rows, int t) {
    int lo = 0, hi = n_rows - 1; /* the last r with row_start[r] <= t */
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (row_start[mid] <= t) lo = mid; else hi = mid - 1;
    }
    return lo;
}

__global__ void conv1d_kernel(float *y, const float *x, int n_rows, const int32_t *row_start, float *const *state,
                              const float *w, int C, int K, int T, int act, int upd) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int H = K - 1;
    float wc[CONV_KMAX], win[CONV_KMAX]; /* taps; win[k], k < H: the input H - k tokens before the current one */
#pragma unroll
    for (int k = 0; k < CONV_KMAX; k++) wc[k] = k < K ? w[(size_t)c * K + k] : 0.f;
    for (int tb = blockIdx.y * CONV_TT; tb < T; tb += gridDim.y * CONV_TT) {
        const int te = min(T, tb + CONV_TT);
        int r = row_of(row_start, n_rows, tb), rend = row_start[r + 1];
        /* the window of token t (step index), t in row r */
        auto fill = [&](int t) {
            const int i = t - row_start[r];
            const float *st = state[r];
#pragma unroll
            for (int k = 0; k < CONV_KMAX - 1; k++)
                if (k < H) {
                    const int j = i - H + k;
                    win[k] = j >= 0 ? x[(size_t)(t - i + j) * C + c] : st[(size_t)(H + j) * C + c];
                }
        };
        fill(tb);
        for (int t = tb; t < te; t++) {
            if (t >= rend) { /* the next row (skipping empty ones) starts here */
                while (t >= rend) rend = row_start[++r + 1];
                fill(t);
            }
            const float xt = x[(size_t)t * C + c];
            y[(size_t)t * C + c] = conv_out(wc, win, H, xt, act);
#pragma unroll
            for (int k = 0; k < CONV_KMAX - 1; k++)
                if (k + 1 < H) win[k] = win[k + 1];
                else if (k + 1 == H) win[k] = xt;
            if (upd) { /* a decode step (every row one token): the row's new state is the window now */
                float *st = state[r];
#pragma unroll
                for (int k = 0; k < CONV_KMAX - 1; k++)
                    if (k < H) st[(size_t)k * C + c] = win[k];
            }
        }
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

void cuda_conv1d_causal(backend_t *be, float *y, const float *x, int n_rows, const int32_t *row_start, float *const *state,
                        const float *w, int C, int K, act_t act) {
    if (n_rows <= 0 || C <= 0 || K <= 0) return;
    const int T = row_start[n_rows];
    if (T <= 0) return;
    cuda_impl_t *c = cuda_impl(be);
    size_t po;
    const char *d = cuda_rows_to_dev(c, n_rows, row_start, state, &po);
    const int32_t *drs = (const int32_t *)d;
    float *const *dst = (float *const *)(d + po);
    if (K > CONV_KMAX) {
        fprintf(stderr, "kiln cuda: conv1d_causal with kernel size %d is not supported (at most %d)\n", K, CONV_KMAX);
        abort();
    }
    const int runs = cdiv(T, CONV_TT);
    dim3 grid(cdiv(C, 128), runs < 65535 ? runs : 65535);
    int upd = T == n_rows; /* decode: every row one token, its state updated in the same kernel */
    for (int r = 0; upd && r < n_rows; r++) upd = row_start[r + 1] - row_start[r] == 1;
    conv1d_kernel<<<grid, 128, 0, c->stream>>>(y, x, n_rows, drs, dst, w, C, K, T, (int)act, upd);
    cudaLaunchCheck();
    if (K > 1 && !upd) {
        conv1d_state_kernel<<<dim3(cdiv(C, 128), n_rows), 128, 0, c->stream>>>(x, n_rows, drs, dst, C, K);
        cudaLaunchCheck();
    }
}
