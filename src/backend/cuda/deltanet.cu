/* deltanet.cu — the gated delta rule of Qwen3.5 / Qwen3-Next (gated DeltaNet) on the device.
 *
 * References (backend/cpu): ref_gated_delta_tokens (deltanet_ref.c, token by token) and
 * deltanet_chunk_body.h (the chunk-parallel WY form: its comment has the derivation). Per
 * token t of a row, on each value head's state S [dk][dv] (α = e^g the decay, β the gate):
 *     S = α S + k δᵀ,   δ = β (v − α Sᵀk),   o = Sᵀq     (q, k L2-normalized, q·dk^-½)
 * Three forms, picked per step by the host (cuda_gated_delta, at the end):
 * - gated_delta_kernel: decode steps (every row one token). The state of a row's DCOLS
 *   columns lives in registers, 8 lanes a column; per token the block normalizes q and k.
 * - delta_prep_kernel + delta_seq_kernel: the same recurrence for rows of many tokens, every
 *   token's normalized q, k and gates prepared first, then read in 32-token chunks from shared
 *   memory: no block barrier per token. Still one token after another.
 * - the chunk form, for the tokens of a row that fill whole aligned chunks of C absolute
 *   positions (backend.h's delta_args.chunk: the same split as the CPU's gated_delta_rows, so a
 *   token's form never depends on other rows or on how the engine cuts a prompt into steps):
 *   delta_chunk_prep_kernel computes, for every chunk and value head at once (nothing there
 *   depends on the state), T = (I + A)⁻¹ and P·T, so that the chunk's δ = T·R and
 *   o = e^G ⊙ Q S₀ + (P T)·R with R = β ⊙ (V − e^G ⊙ K S₀); delta_chunk_kernel then walks a row's
 *   chunks in order, each a handful of small matrix products on the state (K S₀ and Q S₀, T·R
 *   and PT·R, S = e^{G_last} S + Kᵀ diag(Γ) Δ). The tokens before a row's first whole chunk and
 *   after its last run through delta_seq_kernel, launched once before and once after.
 * Numerics: the token-by-token forms are f32 on CUDA cores; the chunk form's products run on
 * tensor cores in 3xTF32 (~21 significant bits a product, f32 accumulation) and the rest in f32.
 * Sums run in other orders than the CPU's, so the results agree to float rounding, not bitwise
 * (test_cuda_kernels: 0.7–2.0e-6 from the CPU's own split and from the token-by-token
 * reference). A token's result never depends on other rows. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/mma_util.cuh" /* cp.async */
#include "backend/cuda/conv_util.cuh"
#include "backend/cuda/glu_act.cuh"

/* --- the gated delta rule, token by token (ref_gated_delta_tokens, deltanet_ref.c) ---
 * A block owns DCOLS columns j of one value head's state S [dk][dv] for one row, held in
 * registers for the whole row: 8 lanes per column, lane s keeping rows i = s, s+8, ...
 * (NI = ceil(dk/8) of them). Per token the block L2-normalizes q and k into shared memory,
 * then each column does decay, Sᵀk (8-lane shuffle sum), δ, the rank-1 update and Sᵀq.
 * The state is read once and written once per row and step, so decode costs one pass over
 * S and a prefill row never goes back to memory between tokens.
 * Trade-offs: sums over i run as 8 interleaved partials, not the CPU's single ascending
 * chain, so results agree to float rounding (~1e-6), not bitwise. */
#define DLPC 8    /* lanes per column  */
#define DCOLS 16  /* columns per block */

typedef struct delta_dev {
    float *out;
    const float *qkv, *a, *b, *A_log, *dt_bias;
    const int32_t *row_start;
    const int32_t *seg; /* NULL, or [2][n_rows]: delta_seq_kernel walks tokens [seg[r], seg[n_rows + r]) of row r; the
                         * chunk kernel starts row r's first whole chunk at seg[r] */
    float *const *state;
    int n_rows, nk, nv, dk, dv, stride, q_off, k_off, v_off;
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

/* One token on a lane's rows of state column j (gated_delta_kernel and delta_decode_kernel share
 * it, so the fused decode op gives the separate ops' floats): decay, Sᵀk (the column's 8 lanes
 * summed by xor shuffles), δ = (v_j − Sᵀk)·β, S += k̂ δ, and o_j = Sᵀq̂ summed the same way.
 * qs, ks: the token's raw q and k (shared memory); iq, ik: 1/‖q‖, 1/‖k‖. */
template <int NI>
__device__ __forceinline__ float delta_col_token(float (&s)[NI], const float *qs, const float *ks, float iq, float ik, float q_scale, int sub,
                                                 int dk, float decay, float beta, float vj) {
    float kq[NI], qq[NI];
#pragma unroll
    for (int m = 0; m < NI; m++) {
        const int i = sub + DLPC * m;
        kq[m] = i < dk ? ks[i] * ik : 0.f;
        qq[m] = i < dk ? qs[i] * iq * q_scale : 0.f;
    }
    float kv = 0.f;
#pragma unroll
    for (int m = 0; m < NI; m++) {
        s[m] *= decay;
        kv += s[m] * kq[m];
    }
#pragma unroll
    for (int off = 1; off < DLPC; off <<= 1) kv += __shfl_xor_sync(0xffffffffu, kv, off);
    const float delta = (vj - kv) * beta;
    float o = 0.f;
#pragma unroll
    for (int m = 0; m < NI; m++) {
        s[m] += kq[m] * delta;
        o += s[m] * qq[m];
    }
#pragma unroll
    for (int off = 1; off < DLPC; off <<= 1) o += __shfl_xor_sync(0xffffffffu, o, off);
    return o;
}

/* A token's decay e^g and gate β of value head h (gated_delta_kernel, delta_decode_kernel). */
__device__ __forceinline__ float2 delta_gates(const float *a, const float *b, const float *A_log, const float *dt_bias, int nv, int t, int h) {
    const float x = a[(size_t)t * nv + h] + dt_bias[h];
    const float g = -expf(A_log[h]) * (x > 20.f ? x : log1pf(expf(x)));
    return make_float2(expf(g), 1.0f / (1.0f + expf(-b[(size_t)t * nv + h])));
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
            const float2 g = delta_gates(d.a, d.b, d.A_log, d.dt_bias, d.nv, t, h);
            gb[0] = g.x;
            gb[1] = g.y;
        }
        sq = block_sum(sq, red[0], nwarps); /* the sync inside also publishes qs, ks, gb */
        for (int off = 16; off > 0; off >>= 1) sk += __shfl_xor_sync(0xffffffffu, sk, off);
        if ((threadIdx.x & 31) == 0) red[1][threadIdx.x >> 5] = sk;
        __syncthreads();
        sk = 0.f;
        for (int i = 0; i < nwarps; i++) sk += red[1][i];
        const float iq = 1.0f / sqrtf(sq + 1e-6f), ik = 1.0f / sqrtf(sk + 1e-6f);
        const float vj = col ? row[d.v_off + (size_t)h * dv + j] : 0.f;
        const float o = delta_col_token<NI>(s, qs, ks, iq, ik, d.q_scale, sub, dk, gb[0], gb[1], vj);
        if (col && sub == 0) d.out[((size_t)t * d.nv + h) * dv + j] = o;
        __syncthreads(); /* everyone has read qs, ks, gb before the next token writes them */
    }
    delta_state<NI, true>(s, S, sub, j, dk, dv, col);
}

/* --- a decode step's DeltaNet core in one launch (backend.h delta_decode) ---
 * conv1d → gated_delta → the gated rms_norm → silu(z) ⊙ ·, which the separate ops run as four
 * launches (and, batch-1 qwen3.5-2b under ncu, ~18 µs a layer: 5.0 conv, 6.0 delta, 3.7 norm,
 * 3.0 glu). A block per (row, key head) with 8·dv threads: the threads below 2·dk run the conv
 * of the key head's q and k channels (conv_out, the separate conv's formula) and write their
 * new conv state; then for each of the key head's value heads in turn the threads below dv
 * convolve its v channels, every column's 8 lanes run the token on its state column
 * (delta_col_token, as gated_delta_kernel), and the row of dv outputs is normalized with
 * rms_norm_kernel<64>'s order (64 threads, strided fmaf sums, the xor tree, two warp sums)
 * and gated with glu_act — so y and both states are bitwise the separate ops'. The q/k norms
 * are gated_delta_kernel's block sums: its 128-thread block and this one hold one element a
 * thread and the extra warps add exact zeros.
 * Trade-offs: dk ≤ 128 and dv ≤ 128 (one element a thread in those sums; else declined), and
 * one block per key head (qwen3.5-2b: 16 blocks a row) reading 64 KB of state per value head:
 * few SMs, but a decode row's state is ~1 MB and the four launches' latency was the cost. The
 * state is read after the PDL wait: it is written only by this layer's delta op, earlier in
 * the stream. Rows reach their states through one table of byte offsets from row 0's (the
 * same for the conv and the delta state, and for every layer: uploaded once a step). */
/* 1/‖q‖ and 1/‖k‖ of a token's q and k in shared memory, summed as gated_delta_kernel sums them (a thread
 * per element, the xor tree, the warps in order: a block of more warps than its 4 adds exact zeros). Call
 * after the barrier that publishes qs and ks. */
__device__ __forceinline__ float2 delta_qk_inv(const float *qs, const float *ks, int dk, float (*red)[32]) {
    const int tid = threadIdx.x, nwarps = blockDim.x / 32;
    float sq = 0.f, sk = 0.f;
    for (int i = tid; i < dk; i += blockDim.x) {
        const float qv = qs[i], kv = ks[i];
        sq += qv * qv; sk += kv * kv;
    }
    sq = block_sum(sq, red[0], nwarps);
    for (int off = 16; off > 0; off >>= 1) sk += __shfl_xor_sync(0xffffffffu, sk, off);
    if ((tid & 31) == 0) red[1][tid >> 5] = sk;
    __syncthreads();
    sk = 0.f;
    for (int i = 0; i < nwarps; i++) sk += red[1][i];
    return make_float2(1.0f / sqrtf(sq + 1e-6f), 1.0f / sqrtf(sk + 1e-6f));
}

typedef struct delta_decode_dev {
    float *y;
    const float *x, *cw, *a, *b, *z, *nw, *A_log, *dt_bias;
    char *cs0, *ss0;        /* row 0's conv state [K-1][C] and delta state [nv][dk][dv] */
    const long long *rel;   /* [n_rows]: row r's states are row 0's + rel[r] bytes */
    int C, K, nk, nv, dk, dv, q_off, k_off, v_off;
    float q_scale, eps;
} delta_decode_dev_t;

/* the conv of channel c at row r's one token: the window from the conv state, which (WRITE) is then
 * shifted by one (conv1d_kernel's decode path does the same); WRITE false leaves the state as it is */
template <bool WRITE = true>
__device__ __forceinline__ float conv_decode(float *cs, const float *xr, const float *cw, int c, int C, int K) {
    const int H = K - 1;
    float wc[CONV_KMAX], win[CONV_KMAX];
#pragma unroll
    for (int k = 0; k < CONV_KMAX; k++) {
        wc[k] = k < K ? cw[(size_t)c * K + k] : 0.f;
        win[k] = k < H ? cs[(size_t)k * C + c] : 0.f;
    }
    const float xt = xr[c];
    const float y = conv_out(wc, win, H, xt, ACT_SILU);
    if (WRITE)
#pragma unroll
        for (int k = 0; k < CONV_KMAX - 1; k++)
            if (k < H) cs[(size_t)k * C + c] = k + 1 < H ? win[k + 1] : xt;
    return y;
}

/* The gated norm at the end of delta_decode, in rms_norm_kernel<64>'s order: threads 0..63 sum the squares of a
 * value head's dv outputs os (strided fmaf, an xor tree) into ws[0..1] (dd_norm_sums; a barrier must follow), then
 * channel j's y = silu(z)·((os[j]·inv)·w[j]) (dd_norm_out; glu_kernel's act) — shared by both decode kernels */
__device__ __forceinline__ void dd_norm_sums(const float *os, float *ws, int dv, int tid) {
    if (tid < 64) {
        float ss = 0.f;
        for (int i = tid; i < dv; i += 64) ss = fmaf(os[i], os[i], ss);
        for (int o2 = 16; o2 > 0; o2 >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o2);
        if ((tid & 31) == 0) ws[tid >> 5] = ss;
    }
}
__device__ __forceinline__ void dd_norm_out(const delta_decode_dev_t &p, const float *ws, const float *os, int r, int h, int dv, int j) {
    float tot = 0.f;
    for (int i = 0; i < 2; i++) tot += ws[i];
    const float inv = 1.0f / sqrtf(tot / (float)dv + p.eps);
    const float n = (os[j] * inv) * (p.nw ? (0.f + p.nw[j]) : 1.0f);
    const size_t yi = ((size_t)r * p.nv + h) * dv + j;
    p.y[yi] = glu_act(p.z[yi], n, 0);
}

template <int NI>
__global__ void __launch_bounds__(1024) delta_decode_kernel(delta_decode_dev_t p) {
    __shared__ float qs[DLPC * NI], ks[DLPC * NI], vs[128], os[128], red[2][32], gb[2], ws[2];
    const int kh = blockIdx.x, r = blockIdx.y, tid = threadIdx.x;
    const int sub = tid % DLPC, j = tid / DLPC, dk = p.dk, dv = p.dv, hpk = p.nv / p.nk;
    const bool col = j < dv;
    pdl_trigger();
    pdl_wait();
    const long long ro = p.rel[r];
    float *cs = (float *)(p.cs0 + ro);
    const float *xr = p.x + (size_t)r * p.C;
    if (tid < 2 * dk) { /* q and k of key head kh: conv, new conv state */
        const int i = tid < dk ? tid : tid - dk;
        const float v = conv_decode(cs, xr, p.cw, (tid < dk ? p.q_off : p.k_off) + kh * dk + i, p.C, p.K);
        if (tid < dk) qs[i] = v;
        else ks[i] = v;
    }
    __syncthreads();
    const float2 inq = delta_qk_inv(qs, ks, dk, red); /* gated_delta_kernel's norms */
    const float iq = inq.x, ik = inq.y;
    for (int hh = 0; hh < hpk; hh++) {
        const int h = kh * hpk + hh;
        if (tid < dv) vs[tid] = conv_decode(cs, xr, p.cw, p.v_off + h * dv + tid, p.C, p.K);
        if (tid == 0) {
            const float2 g = delta_gates(p.a, p.b, p.A_log, p.dt_bias, p.nv, r, h);
            gb[0] = g.x;
            gb[1] = g.y;
        }
        float *S = (float *)(p.ss0 + ro) + (size_t)h * dk * dv;
        float s[NI];
        delta_state<NI, false>(s, S, sub, j, dk, dv, col);
        __syncthreads(); /* vs, gb */
        const float o = delta_col_token<NI>(s, qs, ks, iq, ik, p.q_scale, sub, dk, gb[0], gb[1], col ? vs[j] : 0.f);
        if (col && sub == 0) os[j] = o;
        delta_state<NI, true>(s, S, sub, j, dk, dv, col);
        __syncthreads(); /* os */
        dd_norm_sums(os, ws, dv, tid);
        __syncthreads(); /* ws */
        if (tid < dv) dd_norm_out(p, ws, os, r, h, dv, tid);
        __syncthreads(); /* vs, os, gb, ws are rewritten for the next value head */
    }
}

/* The same op over a cluster of DD_NB blocks per (row, key head), DD_NB / hpk of them per value head,
 * each owning dv·hpk / DD_NB state columns (qwen3.5-2b: 8 blocks of 16 columns, 128 threads; the
 * MoE's 2 value heads a key head: 8 of 32): 8× the blocks of the kernel above, so the state
 * streams through 8× the SMs. Every block convolves the key head's q and k itself (256
 * channels) but only rank 0 writes their new conv state, after the cluster barrier that says
 * every block has read the old one; each v channel has one owner. The gated norm needs the
 * value head's whole output row: each block stores its columns' outputs into the shared memory
 * of every block of its value head (DSMEM), and after the second barrier each block sums the
 * whole row in rms_norm_kernel<64>'s order and writes its own columns — the same floats. */
#define DD_NB 8

__device__ __forceinline__ void dsmem_store(float *local, int rank, float v) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(local);
    uint32_t ra;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(ra) : "r"(a), "r"(rank));
    asm volatile("st.shared::cluster.f32 [%0], %1;\n" ::"r"(ra), "f"(v) : "memory");
}

template <int NI>
__global__ void __launch_bounds__(512) delta_decode_cl_kernel(delta_decode_dev_t p) {
    __shared__ float qs[DLPC * NI], ks[DLPC * NI], vs[128], os[128], red[2][32], gb[2], ws[2];
    const int hpk = p.nv / p.nk, bph = DD_NB / hpk, rank = blockIdx.x % DD_NB, kh = blockIdx.x / DD_NB, r = blockIdx.y;
    const int hl = rank / bph, h = kh * hpk + hl, cpb = (p.dv + bph - 1) / bph, j0 = (rank % bph) * cpb;
    const int tid = threadIdx.x, sub = tid % DLPC, jl = tid / DLPC, j = j0 + jl, dk = p.dk, dv = p.dv;
    const bool col = jl < cpb && j < dv;
    pdl_trigger();
    pdl_wait();
    const long long ro = p.rel[r];
    float *cs = (float *)(p.cs0 + ro);
    float *S = (float *)(p.ss0 + ro) + (size_t)h * dk * dv;
    const float *xr = p.x + (size_t)r * p.C;
    float s[NI];
    delta_state<NI, false>(s, S, sub, j, dk, dv, col);
    for (int c2 = tid; c2 < 2 * dk; c2 += blockDim.x) { /* q and k of key head kh (every block; the state stays) */
        const int i = c2 < dk ? c2 : c2 - dk;
        const float v = conv_decode<false>(cs, xr, p.cw, (c2 < dk ? p.q_off : p.k_off) + kh * dk + i, p.C, p.K);
        if (c2 < dk) qs[i] = v;
        else ks[i] = v;
    }
    if (tid < cpb && j0 + tid < dv) vs[tid] = conv_decode(cs, xr, p.cw, p.v_off + h * dv + j0 + tid, p.C, p.K); /* own v channels */
    if (tid == 0) {
        const float2 g = delta_gates(p.a, p.b, p.A_log, p.dt_bias, p.nv, r, h);
        gb[0] = g.x;
        gb[1] = g.y;
    }
    /* phase 1: this block has read the q/k conv windows (rank 0 may overwrite them) and has started
     * (others may store into its shared memory) */
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
    __syncthreads();
    const float2 inq = delta_qk_inv(qs, ks, dk, red); /* gated_delta_kernel's norms */
    const float iq = inq.x, ik = inq.y;
    const float o = delta_col_token<NI>(s, qs, ks, iq, ik, p.q_scale, sub, dk, gb[0], gb[1], col ? vs[jl] : 0.f);
    delta_state<NI, true>(s, S, sub, j, dk, dv, col);
    asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
    if (rank == 0) /* the q/k conv state, shifted by one: every old value read (one round of loads), then written */
        for (int c2 = tid; c2 < 2 * dk; c2 += blockDim.x) {
            const int c = (c2 < dk ? p.q_off : p.k_off) + kh * dk + (c2 < dk ? c2 : c2 - dk), H = p.K - 1;
            float nw[CONV_KMAX];
#pragma unroll
            for (int k = 0; k < CONV_KMAX - 1; k++)
                if (k < H) nw[k] = k + 1 < H ? cs[(size_t)(k + 1) * p.C + c] : xr[c];
#pragma unroll
            for (int k = 0; k < CONV_KMAX - 1; k++)
                if (k < H) cs[(size_t)k * p.C + c] = nw[k];
        }
    if (col && sub == 0)
        for (int b = 0; b < bph; b++) dsmem_store(&os[j], hl * bph + b, o);
    /* phase 2: the value head's outputs are in every one of its blocks */
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
    dd_norm_sums(os, ws, dv, tid);
    __syncthreads();
    if (tid < cpb && j0 + tid < dv) dd_norm_out(p, ws, os, r, h, dv, j0 + tid);
}

extern "C" int kiln_cuda_delta_decode_calls; /* steps delta_decode took (the tests check the path ran) */
int kiln_cuda_delta_decode_calls;

/* backend.h delta_decode. 0: done; -1: declined (nothing launched). KILN_CUDA_DELTA_DECODE=0: always declines (A/B);
 * KILN_CUDA_DD_V=1: the one-block-per-key-head kernel even where the cluster one could run. */
int cuda_delta_decode(backend_t *be, float *y, const float *qkv, float *const *conv_state, const float *conv_w, int K, const float *a,
                      const float *b, const float *z, const float *nw, float eps, int T, const struct delta_args *da) {
    static int off = -1, ver = -1;
    if (off < 0) { const char *e = getenv("KILN_CUDA_DELTA_DECODE"); off = e && !strcmp(e, "0"); }
    if (ver < 0) { const char *e = getenv("KILN_CUDA_DD_V"); ver = e ? atoi(e) : 2; }
    const int nk = da->n_k_heads, nv = da->n_v_heads, dk = da->dk, dv = da->dv, C = da->stride;
    if (off || T <= 0 || T != da->n_rows || K < 1 || K > CONV_KMAX || nk <= 0 || nv % nk || dk < 1 || dk > 128 || dv < 1 || dv > 128)
        return -1;
    if (da->q_off < 0 || da->k_off < 0 || da->v_off < 0 || da->q_off + nk * dk > C || da->k_off + nk * dk > C || da->v_off + nv * dv > C)
        return -1;
    cuda_impl_t *c = cuda_impl(be);
    /* which kernel: the cluster one where the value heads of a key head split DD_NB blocks evenly, else a block
     * per key head; threads: at least 128 (gated_delta_kernel's block: one q/k element a thread in the norms) and
     * 64 (the gated norm's), 2·dk for the q/k conv (the block kernel), 8 lanes a column */
    const int hpk = nv / nk, ni = cdiv(dk, DLPC), bph = DD_NB % hpk == 0 ? DD_NB / hpk : 0, cpb = bph ? (dv + bph - 1) / bph : 0;
    const int nt2 = std::max(128, (DLPC * cpb + 31) / 32 * 32), nt = std::max(128, std::max((2 * dk + 31) / 32 * 32, (DLPC * dv + 31) / 32 * 32));
    const bool cl = ver == 2 && hpk <= DD_NB && bph && nt2 <= 512;
    void (*kern)(delta_decode_dev_t) = cl ? (ni <= 4 ? delta_decode_cl_kernel<4> : ni <= 8 ? delta_decode_cl_kernel<8> : delta_decode_cl_kernel<16>)
                                          : (ni <= 4 ? delta_decode_kernel<4> : ni <= 8 ? delta_decode_kernel<8> : delta_decode_kernel<16>);
    const int threads = cl ? nt2 : nt;
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[2];
    cfg.gridDim = cl ? dim3(nk * DD_NB, T) : dim3(nk, T);
    cfg.blockDim = dim3(threads);
    cfg.stream = c->stream;
    cfg.attrs = at;
    /* one wave or decline: a block is a latency chain of ~10 µs, so a grid of several waves (a c=64 step) pays
     * that per wave where the separate ops' small blocks pack many to an SM (session 25, c=64: 3942 against
     * 6262 tok/s steady before this rule) */
    static void (*fit_k)(delta_decode_dev_t) = NULL;
    static int fit_t = 0, fit = 0; /* resident clusters (cl) or blocks */
    if (fit_k != kern || fit_t != threads) {
        cfg.numAttrs = cuda_pdl_cluster_attrs(NULL, at, false, cl ? DD_NB : 1);
        int per_sm = 0;
        if (cl ? cudaOccupancyMaxActiveClusters(&fit, kern, &cfg) != cudaSuccess
               : cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, threads, 0) != cudaSuccess) {
            cudaGetLastError();
            fit = per_sm = 0;
        }
        if (!cl) fit = per_sm * c->sm_count;
        fit_k = kern; fit_t = threads;
    }
    if (nk * T > fit) return -1;
    long long *rel = (long long *)cuda_host_buf(c, 1, sizeof(long long) * (size_t)T);
    for (int r = 0; r < T; r++) {
        if (da->row_start[r] != r || !da->state[r] || !conv_state[r]) return -1;
        rel[r] = (long long)((uintptr_t)da->state[r] - (uintptr_t)da->state[0]);
        if ((long long)((uintptr_t)conv_state[r] - (uintptr_t)conv_state[0]) != rel[r]) return -1; /* one table for both */
    }
    if (da->row_start[T] != T) return -1;
    delta_decode_dev_t p;
    p.y = y; p.x = qkv; p.cw = conv_w; p.a = a; p.b = b; p.z = z; p.nw = nw; p.A_log = da->A_log; p.dt_bias = da->dt_bias;
    p.cs0 = (char *)conv_state[0]; p.ss0 = (char *)da->state[0];
    p.rel = (const long long *)cuda_host_to_dev(c, rel, sizeof(long long) * (size_t)T);
    p.C = C; p.K = K; p.nk = nk; p.nv = nv; p.dk = dk; p.dv = dv; p.q_off = da->q_off; p.k_off = da->k_off; p.v_off = da->v_off;
    p.q_scale = da->q_scale; p.eps = eps;
    cfg.numAttrs = cuda_pdl_cluster_attrs(c, at, true, cl ? DD_NB : 1);
    cudaCheck(cudaLaunchKernelEx(&cfg, kern, p));
    kiln_cuda_delta_decode_calls++;
    return 0;
}

/* --- the prefill form: each token's inputs first, for all tokens at once, then the recurrence
 * with no block barrier ---
 * delta_prep_kernel: a warp per (token, key head) writes q̂ = q·(1/‖q‖)·q_scale and k̂ = k/‖k‖
 * (the 1/sqrtf(Σ + 1e-6) above, summed as 32 lane partials) into qn / kn [T, nk, dk], and its
 * lanes the (decay, beta) of the key head's value heads into gb [T, nv] (and, for the chunk
 * form, the log decay g into lg [T, nv]).
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
__global__ void delta_prep_kernel(delta_dev_t d, float *__restrict__ qn, float *__restrict__ kn, float2 *__restrict__ gb,
                                  float *__restrict__ lg, int T) {
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
        if (lg) lg[(size_t)t * d.nv + h] = g;
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
    const int t0 = d.seg ? d.seg[r] : d.row_start[r], t1 = d.seg ? d.seg[d.n_rows + r] : d.row_start[r + 1], nt = t1 - t0;
    if (nt <= 0) return; /* nothing of this row in this launch: the state stays as it is */
    float *S = d.state[r] + (size_t)h * dk * dv;
    float s[NI];
    delta_state<NI, false>(s, S, sub, j, dk, dv, col);
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


/* --- the chunk form (deltanet_chunk_body.h) ---
 * The products run on tensor cores in 3xTF32 (mma.sync m16n8k8; each operand split into its
 * TF32 high part and the remainder, three products summed: ~21 significant bits a product, f32
 * accumulation), the rest on CUDA cores.
 *
 * delta_chunk_prep_kernel: a block per (whole chunk, key head), CH tokens from cst[chunk], 8
 * warps. K and Q of the chunk into shared memory (dk zero-padded to a multiple of 16), the Gram
 * matrices [K; Q]·Kᵀ (2CH × CH, a warp per 16 × 8 tile), then per value head of the key head:
 * G (the cumulative log decay, summed in token order like the CPU), W = −A
 * (A_ts = β_t e^{G_t − G_s} k_t·k_s, s < t) and P (P_ts = e^{G_t − G_s} q_t·k_s, s ≤ t) over the
 * K/Q space, T = (I + A)⁻¹ by forward substitution on CUDA cores — four threads a column, each
 * holding CH/4 of its rows in registers, the finished row passed by a shuffle — and PT = P·T.
 * Out: T and PT [chunk][nv][CH][CH] (zeros above the diagonal) and per token
 * (β, e^G, e^{G_last − G}, e^{G_last}).
 * Trade-off: T and PT go through global memory (2·CH² floats per chunk and value head,
 * 32 KB at CH = 64), so the sequential kernel gets them as a copy instead of a solve. */
#define DCP_THREADS 256

/* x = hi + lo with hi = x's top 19 bits (sign, exponent, 10 mantissa bits: the TF32 value a
 * tensor core reads) and lo = x − hi exact; the core truncates lo to TF32 in turn, so hi + lo
 * carries ~21 significant bits. Two instructions (cvt.rna.tf32 is several on sm_90). */
__device__ __forceinline__ void tf32_split(float x, uint32_t &hi, uint32_t &lo) {
    hi = __float_as_uint(x) & 0xffffe000u;
    lo = __float_as_uint(x - __uint_as_float(hi));
}

__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* d += A·B over nk k-steps of 8 (NK > 0: NK of them, unrolled) in 3xTF32: A 16 rows, element (m, k)
 * at A[m·lda + k] (TA false) or A[k·lda + m] (TA: Kᵀ from K's rows); B 8 columns, element (k, n) at
 * B[k·ldb + n] (TB false) or B[n·ldb + k] (TB: the Grams' Kᵀ); g = lane / 4, q = lane % 4. hi·hi, hi·lo and lo·hi go to three
 * accumulators (shorter dependent chains), summed at the end. */
template <int NK, bool TA, bool TB = false>
__device__ __forceinline__ void mma3(float (&d)[4], const float *A, int lda, const float *B, int ldb, int nk, int g, int q) {
    float d1[4] = {}, d2[4] = {};
    const int n = NK > 0 ? NK : nk;
#pragma unroll (NK > 0 ? NK : 4)
    for (int kk = 0; kk < n; kk++) {
        const float *a = TA ? A + (size_t)8 * kk * lda : A + 8 * kk, *b = TB ? B + 8 * kk : B + (size_t)8 * kk * ldb;
        uint32_t ah[4], al[4], bh[2], bl[2];
        if (TA) {
            tf32_split(a[q * lda + g], ah[0], al[0]);
            tf32_split(a[q * lda + g + 8], ah[1], al[1]);
            tf32_split(a[(q + 4) * lda + g], ah[2], al[2]);
            tf32_split(a[(q + 4) * lda + g + 8], ah[3], al[3]);
        } else {
            tf32_split(a[g * lda + q], ah[0], al[0]);
            tf32_split(a[(g + 8) * lda + q], ah[1], al[1]);
            tf32_split(a[g * lda + q + 4], ah[2], al[2]);
            tf32_split(a[(g + 8) * lda + q + 4], ah[3], al[3]);
        }
        if (TB) {
            tf32_split(b[g * ldb + q], bh[0], bl[0]);
            tf32_split(b[g * ldb + q + 4], bh[1], bl[1]);
        } else {
            tf32_split(b[q * ldb + g], bh[0], bl[0]);
            tf32_split(b[(q + 4) * ldb + g], bh[1], bl[1]);
        }
        mma_tf32(d, ah, bh[0], bh[1]);
        mma_tf32(d1, ah, bl[0], bl[1]);
        mma_tf32(d2, al, bh[0], bh[1]);
    }
#pragma unroll
    for (int e = 0; e < 4; e++) d[e] += d1[e] + d2[e];
}

__host__ __device__ static inline int delta_dk16(int dk) { return (dk + 15) & ~15; }

template <int CH>
static size_t delta_chunk_prep_smem(int dk) {
    const size_t kq = 2 * (size_t)CH * (delta_dk16(dk) + 4), wp = 2 * (size_t)CH * (CH + 4);
    return sizeof(float) * ((kq > wp ? kq : wp) + 2 * (size_t)CH * (CH + 4) + 3 * CH);
}

template <int CH>
__global__ void __launch_bounds__(DCP_THREADS) delta_chunk_prep_kernel(delta_dev_t d, const float *__restrict__ qn, const float *__restrict__ kn,
                                                                      const float2 *__restrict__ gb, const float *__restrict__ lg,
                                                                      const int32_t *__restrict__ cst, float *__restrict__ Tm,
                                                                      float *__restrict__ PTm, float4 *__restrict__ coef) {
    extern __shared__ __align__(16) float dsm[];
    constexpr int L = CH + 4, NR = CH / 4; /* rows of CH + 4 floats: an A or B fragment's lanes in different banks */
    const int ci = blockIdx.x, kh = blockIdx.y, tid = threadIdx.x, dk = d.dk, dk16 = delta_dk16(dk), ldk = dk16 + 4, nv = d.nv;
    const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, q = lane & 3, nw = blockDim.x / 32;
    const int t0 = cst[ci], hpk = nv / d.nk;
    const size_t kq = 2 * (size_t)CH * ldk, wp = 2 * (size_t)CH * L;
    float *Ks = dsm, *Qs = Ks + CH * ldk;                      /* [CH][dk16+4]                      */
    float *W = dsm, *P = W + CH * L;                           /* [CH][CH+4] over Ks/Qs, after the Grams: −A then T, and P */
    float *Mk = dsm + (kq > wp ? kq : wp), *Mq = Mk + CH * L;  /* [CH][CH+4] k_t·k_s, q_t·k_s         */
    float *G = Mq + CH * L, *eG = G + CH, *bt = eG + CH;       /* [CH]                               */
    const int n4 = dk16 / 4;
    for (int u = tid; u < CH * n4; u += blockDim.x) {
        const int t = u / n4, c4 = u % n4;
        const size_t src = ((size_t)(t0 + t) * d.nk + kh) * dk + 4 * c4;
        const bool in = 4 * c4 < dk; /* dk % 4 == 0: a float4 is in or in the padding */
        *(float4 *)(Ks + t * ldk + 4 * c4) = in ? *(const float4 *)(kn + src) : make_float4(0.f, 0.f, 0.f, 0.f);
        *(float4 *)(Qs + t * ldk + 4 * c4) = in ? *(const float4 *)(qn + src) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    __syncthreads();
    /* [K; Q] Kᵀ: tile (16 rows of K or Q, 8 keys s) */
    for (int tile = warp; tile < (2 * CH / 16) * (CH / 8); tile += nw) {
        const int r0 = 16 * (tile / (CH / 8)), s0 = 8 * (tile % (CH / 8));
        const bool isq = r0 >= CH;
        const int tr = isq ? r0 - CH : r0;
        float m[4] = {};
        mma3<0, false, true>(m, (isq ? Qs : Ks) + tr * ldk, ldk, Ks + s0 * ldk, ldk, dk16 / 8, g, q);
        float *M = isq ? Mq : Mk;
        M[(tr + g) * L + s0 + 2 * q] = m[0];
        M[(tr + g) * L + s0 + 2 * q + 1] = m[1];
        M[(tr + g + 8) * L + s0 + 2 * q] = m[2];
        M[(tr + g + 8) * L + s0 + 2 * q + 1] = m[3];
    }
    const int j = tid >> 2, qq = tid & 3; /* the solve: column j, rows qq, qq + 4, ... */
    for (int x = 0; x < hpk; x++) {
        const int h = kh * hpk + x;
        if (tid < CH) {
            eG[tid] = lg[(size_t)(t0 + tid) * nv + h]; /* g, for the sum below */
            bt[tid] = gb[(size_t)(t0 + tid) * nv + h].y;
        }
        __syncthreads(); /* g, bt; the Grams (first head) */
        if (tid == 0) { /* in token order, like the CPU */
            float gs = 0.f;
#pragma unroll 16
            for (int t = 0; t < CH; t++) { gs += eG[t]; G[t] = gs; }
        }
        __syncthreads();
        if (tid < CH) eG[tid] = expf(G[tid]);
        for (int u = tid; u < CH * CH; u += blockDim.x) {
            const int t = u / CH, s = u % CH;
            const float gam = s <= t ? expf(G[t] - G[s]) : 0.f; /* above the diagonal: 0 (e^{+…} would overflow) */
            W[t * L + s] = s < t ? -bt[t] * gam * Mk[t * L + s] : 0.f;
            P[t * L + s] = gam * Mq[t * L + s];
        }
        __syncthreads();
        float Tr[NR];
        if (tid < 4 * CH) { /* whole warps: 4·CH is a multiple of 32 */
#pragma unroll
            for (int m = 0; m < NR; m++) Tr[m] = 4 * m + qq == j ? 1.f : 0.f;
            /* (I + A) T = I column by column: once row s of column j is final, it adds W[t][s]·T[s][j]
             * to every row t > s (in order of s, like a forward substitution) */
#pragma unroll
            for (int s = 0; s < CH; s++) {
                const float ts = __shfl_sync(0xffffffffu, Tr[s / 4], (threadIdx.x & 28) | (s & 3));
#pragma unroll
                for (int m = 0; m < NR; m++)
                    if (4 * m + 3 > s && 4 * m + qq > s) Tr[m] += W[(4 * m + qq) * L + s] * ts;
            }
        }
        __syncthreads(); /* every W read */
        if (tid < 4 * CH)
#pragma unroll
            for (int m = 0; m < NR; m++) W[(4 * m + qq) * L + j] = Tr[m];
        __syncthreads();
        const size_t base = ((size_t)ci * nv + h) * CH * CH;
        for (int u = tid; u < CH * CH; u += blockDim.x) Tm[base + u] = W[(u / CH) * L + u % CH];
        /* PT = P·T: tile (16 rows t, 8 columns) */
        for (int tile = warp; tile < (CH / 16) * (CH / 8); tile += nw) {
            const int r0 = 16 * (tile / (CH / 8)), c0 = 8 * (tile % (CH / 8));
            float pt[4] = {};
            mma3<CH / 8, false>(pt, P + r0 * L, L, W + c0, L, CH / 8, g, q);
            *(float2 *)(PTm + base + (size_t)(r0 + g) * CH + c0 + 2 * q) = make_float2(pt[0], pt[1]);
            *(float2 *)(PTm + base + (size_t)(r0 + g + 8) * CH + c0 + 2 * q) = make_float2(pt[2], pt[3]);
        }
        if (tid < CH) coef[((size_t)ci * nv + h) * CH + tid] = make_float4(bt[tid], eG[tid], expf(G[CH - 1] - G[tid]), expf(G[CH - 1]));
        __syncthreads(); /* the next head rewrites G, bt, W and P */
    }
}

/* delta_chunk_kernel: a block per (DCW = 16 columns, value head, row), CH/4 warps, walking the
 * row's whole chunks in order with the state's 16 columns in shared memory (f32). Per chunk,
 * three small products on tensor cores (mma.sync m16n8k8 TF32, each operand split into a TF32
 * high part and the TF32 of its remainder and three products summed — hi·hi, hi·lo, lo·hi —
 * so a product keeps ~22 significant bits, f32 accumulation: within float rounding of the
 * CUDA-core sums, not bitwise):
 *   1. [K; Q] S₀  (2CH × dk · dk × 16): warp w the rows 16·(w/2).., columns 8·(w%2)..; the K
 *      warps write R = β ⊙ (V − e^G ⊙ K S₀), the Q warps keep b = Q S₀ in their accumulators
 *   2. [T; PT] R  (2CH × CH · CH × 16), the same tiles: the K warps D = e^{G_last − G} ⊙ T R,
 *      the Q warps o = e^G ⊙ b + PT R (stored)
 *   3. S = e^{G_last} S + Kᵀ D  (dk × CH · CH × 16), a warp per 16 × 8 tile of S
 * Operands come straight from shared memory in the fragment layouts (rows padded to 4 mod 16
 * floats: the 32 lanes of an A load hit 32 banks; B and the state at a stride of 24). Copies
 * overlap the math: K, Q, V and the coefficients of the next chunk (two buffers) go out at the
 * top of a chunk, T and PT of the next (one buffer) after step 2, and step 2 waits for its own
 * T and PT only when it starts. dk is zero-padded to a multiple of 16 in shared memory.
 * 183 KB of shared memory at CH = 64, dk = 128: one block (16 warps) an SM.
 * Measured (H200, ncu, qwen3.5-2b bf16 2048-token prefill, a DeltaNet layer): the CUDA-core
 * form of this kernel (a thread per token and 4 columns) 323 µs, bound by shared-memory
 * bandwidth (L1 82 % busy: a float4 of S per 4 FMAs); this one: bench/cuda/RESULTS.md. */
#define DCW 16
#define DSS 24 /* row stride of S, R and D in shared memory: a B fragment's 32 lanes in 32 banks */


/* floats: K/Q [2][2][CH][dk16+4] (+4 a buffer: Q's shift), T and PT [CH][CH+4] (+4: PT's shift), V [2][CH][DCW],
 * coefficients [2][CH] (float4), S [dk16][DSS], R and D [CH][DSS] */
template <int CH>
static size_t delta_chunk_smem(int dk) {
    const size_t ldk = (size_t)delta_dk16(dk) + 4;
    return sizeof(float) * (4 * (size_t)CH * ldk + 8 + 2 * (size_t)CH * (CH + 4) + 4 + 2 * (size_t)CH * DCW + 8 * (size_t)CH +
                            (size_t)delta_dk16(dk) * DSS + 2 * (size_t)CH * DSS);
}

template <int CH>
__global__ void __launch_bounds__(8 * CH) delta_chunk_kernel(delta_dev_t d, const float *__restrict__ qn, const float *__restrict__ kn,
                                                             const int32_t *__restrict__ rch, const float *__restrict__ Tm,
                                                             const float *__restrict__ PTm, const float4 *__restrict__ coef) {
    extern __shared__ __align__(16) float dsm[];
    const int h = blockIdx.y, r = blockIdx.z, tid = threadIdx.x;
    const int c0 = rch[r], nch = rch[r + 1] - c0;
    if (nch <= 0) return; /* no whole chunk in this row */
    const int kh = h / (d.nv / d.nk), dk = d.dk, dk16 = delta_dk16(dk), dv = d.dv, ldk = dk16 + 4, LT = CH + 4;
    const int j0 = blockIdx.x * DCW, n4 = dk / 4, nw = blockDim.x / 32;
    const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, q = lane & 3;
    const int tc0 = d.seg[r];                          /* the row's first whole chunk starts at this token */
    const size_t kqb = 2 * (size_t)CH * ldk + 4;       /* one buffer: K [CH][dk16+4], 4 floats, Q [CH][dk16+4] */
    float *KQ = dsm;                                   /* [2] buffers                                        */
    float *Ts = KQ + 2 * kqb, *PTs = Ts + CH * LT + 4; /* [CH][CH+4], PT shifted by 4 floats (banks)          */
    float *Vs = PTs + CH * LT;                         /* [2][CH][DCW]                                       */
    float4 *Cf = (float4 *)(Vs + 2 * CH * DCW);        /* [2][CH] β, e^G, e^{G_last − G}, e^{G_last}          */
    float *Ss = (float *)(Cf + 2 * CH);                /* [dk16][DSS] the state's columns j0..j0+15           */
    float *Us = Ss + dk16 * DSS, *Ds = Us + CH * DSS;  /* [CH][DSS] R, D                                      */
    float *S = d.state[r] + (size_t)h * dk * dv;
    for (int u = tid; u < dk16 * DCW; u += blockDim.x) {
        const int i = u / DCW, c = u % DCW;
        Ss[i * DSS + c] = i < dk && j0 + c < dv ? S[(size_t)i * dv + j0 + c] : 0.f;
    }
    if (dk16 > dk) /* the padding columns of K and Q, both buffers: zero once */
        for (int u = tid; u < 4 * CH * (dk16 - dk); u += blockDim.x) {
            const int row = u / (dk16 - dk), c = dk + u % (dk16 - dk), b = row / (2 * CH), rr = row % (2 * CH);
            KQ[b * kqb + (rr < CH ? rr * ldk : CH * ldk + 4 + (rr - CH) * ldk) + c] = 0.f;
        }
    const int rstep = (int)blockDim.x % n4 == 0 ? (int)blockDim.x / n4 : 0, c4me = tid % n4, t1st = tid / n4;
    auto load_kqv = [&](int k) {
        float *Kb = KQ + (k & 1) * kqb, *Qb = Kb + CH * ldk + 4, *vb = Vs + (k & 1) * CH * DCW;
        float4 *cb = Cf + (k & 1) * CH;
        const int ci = c0 + k, t0 = tc0 + k * CH;
        if (rstep) /* n4 divides the block: a thread keeps its column (no division per piece) */
            for (int t = t1st; t < CH; t += rstep) {
                const size_t src = ((size_t)(t0 + t) * d.nk + kh) * dk + 4 * c4me;
                cp_async16(Kb + t * ldk + 4 * c4me, kn + src);
                cp_async16(Qb + t * ldk + 4 * c4me, qn + src);
            }
        else
            for (int u = tid; u < CH * n4; u += blockDim.x) {
                const int t = u / n4, c4 = u % n4;
                const size_t src = ((size_t)(t0 + t) * d.nk + kh) * dk + 4 * c4;
                cp_async16(Kb + t * ldk + 4 * c4, kn + src);
                cp_async16(Qb + t * ldk + 4 * c4, qn + src);
            }
        for (int u = tid; u < CH * DCW; u += blockDim.x) {
            const int t = u / DCW, c = u % DCW;
            if (j0 + c < dv) cp_async4(vb + u, d.qkv + (size_t)(t0 + t) * d.stride + d.v_off + (size_t)h * dv + j0 + c);
            else vb[u] = 0.f;
        }
        for (int u = tid; u < CH; u += blockDim.x) cp_async16(cb + u, coef + ((size_t)ci * d.nv + h) * CH + u);
        cp_commit();
    };
    auto load_tp = [&](int k) {
        const int ci = c0 + k;
        const float *tg = Tm + ((size_t)ci * d.nv + h) * CH * CH, *pg = PTm + ((size_t)ci * d.nv + h) * CH * CH;
        for (int u = tid; u < CH * CH / 4; u += blockDim.x) {
            const int t = u / (CH / 4), c4 = u % (CH / 4);
            cp_async16(Ts + t * LT + 4 * c4, tg + t * CH + 4 * c4);
            cp_async16(PTs + t * LT + 4 * c4, pg + t * CH + 4 * c4);
        }
        cp_commit();
    };
    load_kqv(0);
    load_tp(0);
    /* steps 1–2: warp → 16 rows of [K; Q] (then of [T; PT]) and 8 columns */
    const int isq = (warp >> 1) >= CH / 16, t0w = 16 * (warp >> 1) - (isq ? CH : 0), n0 = 8 * (warp & 1);
    const int ta = t0w + g, tb = ta + 8, na = n0 + 2 * q; /* this lane's accumulator rows and first column */
    for (int k = 0; k < nch; k++) {
        cp_wait<1>(); /* K, Q, V, coefficients of chunk k (T, PT of chunk k may still be on their way) */
        __syncthreads(); /* … for every thread; the last chunk's S update is visible */
        const bool more = k + 1 < nch;
        if (more) load_kqv(k + 1);
        const float *Kb = KQ + (k & 1) * kqb, *Xb = Kb + (isq ? CH * ldk + 4 : 0), *vb = Vs + (k & 1) * CH * DCW;
        const float4 *cb = Cf + (k & 1) * CH;
        /* 1. x = [K; Q] S₀ for this warp's tile */
        float x[4] = {};
        mma3<0, false>(x, Xb + t0w * ldk, ldk, Ss + n0, DSS, dk16 / 8, g, q);
        const float4 ca = cb[ta], cbb = cb[tb];
        if (!isq) { /* R = β (V − e^G a) */
            const float2 va = *(const float2 *)(vb + ta * DCW + na), vbb = *(const float2 *)(vb + tb * DCW + na);
            *(float2 *)(Us + ta * DSS + na) = make_float2(ca.x * (va.x - ca.y * x[0]), ca.x * (va.y - ca.y * x[1]));
            *(float2 *)(Us + tb * DSS + na) = make_float2(cbb.x * (vbb.x - cbb.y * x[2]), cbb.x * (vbb.y - cbb.y * x[3]));
        }
        if (more) cp_wait<1>(); /* T, PT of chunk k (the next chunk's K/Q copy may go on) */
        else cp_wait<0>();
        __syncthreads();
        /* 2. y = T R (K warps) or PT R (Q warps) */
        float y[4] = {};
        mma3<CH / 8, false>(y, (isq ? PTs : Ts) + t0w * LT, LT, Us + n0, DSS, CH / 8, g, q);
        if (isq) {
            if (j0 + na < dv) { /* dv % 4 == 0: columns na, na + 1 both valid or not */
                float *oa = d.out + ((size_t)(tc0 + k * CH + ta) * d.nv + h) * dv + j0 + na;
                float *ob = d.out + ((size_t)(tc0 + k * CH + tb) * d.nv + h) * dv + j0 + na;
                *(float2 *)oa = make_float2(ca.y * x[0] + y[0], ca.y * x[1] + y[1]);
                *(float2 *)ob = make_float2(cbb.y * x[2] + y[2], cbb.y * x[3] + y[3]);
            }
        } else {
            *(float2 *)(Ds + ta * DSS + na) = make_float2(ca.z * y[0], ca.z * y[1]);
            *(float2 *)(Ds + tb * DSS + na) = make_float2(cbb.z * y[2], cbb.z * y[3]);
        }
        const float glast = ca.w;
        __syncthreads(); /* D complete; T and PT read */
        if (more) load_tp(k + 1);
        /* 3. S = e^{G_last} S + Kᵀ D, a warp per 16 × 8 tile */
        for (int tile = warp; tile < dk16 / 8; tile += nw) {
            const int i0 = 16 * (tile >> 1), m0 = 8 * (tile & 1);
            float *sa = Ss + (i0 + g) * DSS + m0 + 2 * q, *sb = sa + 8 * DSS;
            float sv[4] = {glast * sa[0], glast * sa[1], glast * sb[0], glast * sb[1]};
            mma3<CH / 8, true>(sv, Kb + i0, ldk, Ds + m0, DSS, CH / 8, g, q);
            sa[0] = sv[0]; sa[1] = sv[1]; sb[0] = sv[2]; sb[1] = sv[3];
        }
    }
    __syncthreads();
    for (int u = tid; u < dk * DCW; u += blockDim.x) {
        const int i = u / DCW, c = u % DCW;
        if (j0 + c < dv) S[(size_t)i * dv + j0 + c] = Ss[i * DSS + c];
    }
}

extern "C" int kiln_cuda_delta_chunk_calls; /* steps the chunk form ran (the tests check the path ran) */
int kiln_cuda_delta_chunk_calls;

/* A kernel's dynamic shared memory above 48 KB needs an opt-in, once per kernel and size. */
static void smem_optin(const void *fn, size_t bytes, size_t *have) {
    if (bytes > *have) { cudaCheck(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes)); *have = bytes; }
}

static int smem_optin_max(void) {
    static int mx = 0;
    if (!mx) {
        int dev = 0;
        cudaCheck(cudaGetDevice(&dev));
        cudaCheck(cudaDeviceGetAttribute(&mx, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    }
    return mx;
}

/* delta_seq_kernel over every row's tokens (d.seg NULL: the whole row; else [seg[r], seg[n_rows + r])) at the
 * instantiation for dk, with its shared memory opted in once. */
static void delta_seq_launch(cuda_impl_t *c, const delta_dev_t &d, const float *qn, const float *kn, const float2 *gb) {
    const dim3 grid(cdiv(d.dv, DCOLS), d.nv, d.n_rows);
    const int ni = cdiv(d.dk, DLPC);
    const size_t smem = delta_seq_smem(d.dk);
    static size_t set[5] = {48 * 1024, 48 * 1024, 48 * 1024, 48 * 1024, 48 * 1024}; /* per kernel: the opt-in above 48 KB */
    auto go = [&](void (*kern)(delta_dev_t, const float *, const float *, const float2 *), int v) {
        smem_optin((const void *)kern, smem, &set[v]);
        kern<<<grid, DLPC * DCOLS, smem, c->stream>>>(d, qn, kn, gb);
    };
    if (ni <= 2) go(delta_seq_kernel<2>, 0);
    else if (ni <= 4) go(delta_seq_kernel<4>, 1);
    else if (ni <= 8) go(delta_seq_kernel<8>, 2);
    else if (ni <= 16) go(delta_seq_kernel<16>, 3);
    else go(delta_seq_kernel<32>, 4);
    cudaLaunchCheck();
}

/* The chunk form of one step at chunk size CH: split the rows like gated_delta_rows (tokens before the first aligned
 * chunk, whole chunks, the rest), launch. Returns 0 when no row has a whole chunk (the caller runs the rows token by
 * token). */
template <int CH>
static int delta_chunked(cuda_impl_t *c, delta_dev_t d, const delta_args_t *da, int T, const float *qn, const float *kn, const float2 *gb,
                         const float *lg, float *tail) {
    const int n = da->n_rows;
    /* row r: tokens [t0, th) before its first whole aligned chunk; returns its whole chunks from th */
    auto split = [&](int r, int *th) {
        const int t0 = da->row_start[r], t1 = da->row_start[r + 1];
        *th = t1;
        if (t1 <= t0) return 0;
        const int p0 = da->pos[t0], first = (p0 + CH - 1) / CH * CH;
        *th = t0 + (first - p0) < t1 ? t0 + (first - p0) : t1;
        return (t1 - *th) / CH;
    };
    int nch = 0, th;
    for (int r = 0; r < n; r++) nch += split(r, &th);
    if (!nch) return 0;
    /* one host buffer, one copy: row_start [n+1], state pointers [n], head [2n], tail [2n], rch [n+1], cst [nch] */
    const size_t rb = (sizeof(int32_t) * (size_t)(n + 1) + 15) & ~(size_t)15, pb = sizeof(float *) * (size_t)n;
    const size_t ib = sizeof(int32_t) * (6 * (size_t)n + 1 + nch);
    char *hb = (char *)cuda_host_buf(c, 1, rb + pb + ib);
    memset(hb, 0, rb);
    memcpy(hb, da->row_start, sizeof(int32_t) * (n + 1));
    memcpy(hb + rb, da->state, pb);
    int32_t *head = (int32_t *)(hb + rb + pb), *tl = head + 2 * n, *rch = tl + 2 * n, *cst = rch + n + 1;
    int nhead = 0, ntail = 0, ci = 0;
    for (int r = 0; r < n; r++) {
        const int t0 = da->row_start[r], t1 = da->row_start[r + 1], nc = split(r, &th);
        head[r] = t0; head[n + r] = th; /* head[n + r]: also where the row's chunks start (the chunk kernel's seg) */
        tl[r] = th + nc * CH; tl[n + r] = t1;
        rch[r] = ci;
        for (int k = 0; k < nc; k++) cst[ci++] = th + k * CH;
        nhead += th - t0;
        ntail += t1 - (th + nc * CH);
    }
    rch[n] = ci;
    const char *dv = (const char *)cuda_host_to_dev(c, hb, rb + pb + ib);
    d.row_start = (const int32_t *)dv;
    d.state = (float *const *)(dv + rb);
    const int32_t *dhead = (const int32_t *)(dv + rb + pb), *dtail = dhead + 2 * n, *drch = dtail + 2 * n, *dcst = drch + n + 1;
    float *Tm = tail, *PTm = Tm + (size_t)nch * da->n_v_heads * CH * CH;
    float4 *cf = (float4 *)(PTm + (size_t)nch * da->n_v_heads * CH * CH);
    auto seq = [&](const int32_t *seg) { /* delta_seq_kernel over each row's [seg[r], seg[n + r]) */
        delta_dev_t ds = d;
        ds.seg = seg;
        delta_seq_launch(c, ds, qn, kn, gb);
    };
    if (nhead) seq(dhead);
    static size_t set_prep = 48 * 1024, set_chunk = 48 * 1024;
    const size_t sp = delta_chunk_prep_smem<CH>(da->dk), sc = delta_chunk_smem<CH>(da->dk);
    smem_optin((const void *)delta_chunk_prep_kernel<CH>, sp, &set_prep);
    delta_chunk_prep_kernel<CH><<<dim3(nch, da->n_k_heads), DCP_THREADS, sp, c->stream>>>(d, qn, kn, gb, lg, dcst, Tm, PTm, cf);
    cudaLaunchCheck();
    smem_optin((const void *)delta_chunk_kernel<CH>, sc, &set_chunk);
    delta_dev_t dc = d;
    dc.seg = dhead + n; /* each row's first chunk token */
    delta_chunk_kernel<CH><<<dim3(cdiv(da->dv, DCW), da->n_v_heads, n), 8 * CH, sc, c->stream>>>(dc, qn, kn, drch, Tm, PTm, cf);
    cudaLaunchCheck();
    if (ntail) seq(dtail);
    kiln_cuda_delta_chunk_calls++;
    return 1;
}

/* Whether the chunk form takes this step's whole chunks at chunk size CH (else every token
 * runs token by token: the same results within rounding). */
template <int CH>
static bool delta_chunk_fits(const delta_args_t *da) {
    const int mx = smem_optin_max();
    return da->dk % 4 == 0 && da->dv % 4 == 0 && delta_chunk_smem<CH>(da->dk) <= (size_t)mx && delta_chunk_prep_smem<CH>(da->dk) <= (size_t)mx;
}

void cuda_gated_delta(backend_t *be, float *out, const float *qkv, const float *a, const float *b, int T, const struct delta_args *da) {
    if (T <= 0 || da->n_rows <= 0) return;
    if (da->dk > DLPC * 32 || da->n_k_heads <= 0 || da->n_v_heads % da->n_k_heads) {
        fprintf(stderr, "kiln cuda: gated_delta with key head dim %d (max %d) and %d/%d heads is not supported\n", da->dk, DLPC * 32,
                da->n_v_heads, da->n_k_heads);
        abort();
    }
    cuda_impl_t *c = cuda_impl(be);
    delta_dev_t d;
    d.out = out; d.qkv = qkv; d.a = a; d.b = b; d.A_log = da->A_log; d.dt_bias = da->dt_bias; d.seg = NULL;
    d.n_rows = da->n_rows; d.nk = da->n_k_heads; d.nv = da->n_v_heads; d.dk = da->dk; d.dv = da->dv;
    d.stride = da->stride; d.q_off = da->q_off; d.k_off = da->k_off; d.v_off = da->v_off; d.q_scale = da->q_scale;
    dim3 grid(cdiv(da->dv, DCOLS), da->n_v_heads, da->n_rows);
    const int ni = cdiv(da->dk, DLPC);
    const char *env = getenv("KILN_CUDA_DELTA");
    if (T > da->n_rows && !(env && !strcmp(env, "old"))) { /* a row of more than one token: the prefill forms */
        const int CH = da->chunk;
        const bool chunk = da->pos && !(env && !strcmp(env, "seq")) &&
                           ((CH == 64 && delta_chunk_fits<64>(da)) || (CH == 32 && delta_chunk_fits<32>(da)) || (CH == 16 && delta_chunk_fits<16>(da)));
        const size_t nq = (size_t)T * da->n_k_heads * da->dk, ng = (size_t)T * da->n_v_heads;
        /* qn, kn [T][nk][dk]; gb [T][nv] (float2); lg [T][nv]; for the chunk form T, PT [chunks][nv][CH][CH] and the
         * coefficients [chunks][nv][CH] (float4), at most T / CH chunks */
        const size_t head = (2 * nq + 3 * ng + 3) & ~(size_t)3;
        const size_t need = head + (chunk ? (size_t)(T / CH) * da->n_v_heads * (2 * (size_t)CH * CH + 4 * (size_t)CH) : 0);
        float *qn = (float *)cuda_scratch(c, &c->delta, &c->delta_bytes, sizeof(float) * need);
        float *kn = qn + nq;
        float2 *gb = (float2 *)(kn + nq);
        float *lg = chunk ? (float *)(gb + ng) : NULL;
        delta_prep_kernel<<<cdiv((long)T * da->n_k_heads * 32, 256), 256, 0, c->stream>>>(d, qn, kn, gb, lg, T);
        cudaLaunchCheck();
        if (chunk) {
            const int done = CH == 64 ? delta_chunked<64>(c, d, da, T, qn, kn, gb, lg, qn + head)
                             : CH == 32 ? delta_chunked<32>(c, d, da, T, qn, kn, gb, lg, qn + head)
                                        : delta_chunked<16>(c, d, da, T, qn, kn, gb, lg, qn + head);
            if (done) return;
        }
        size_t po;
        const char *dr = cuda_rows_to_dev(c, da->n_rows, da->row_start, da->state, &po);
        d.row_start = (const int32_t *)dr; d.state = (float *const *)(dr + po);
        delta_seq_launch(c, d, qn, kn, gb);
        return;
    }
    size_t po;
    const char *dr = cuda_rows_to_dev(c, da->n_rows, da->row_start, da->state, &po);
    d.row_start = (const int32_t *)dr; d.state = (float *const *)(dr + po);
    if (ni <= 2) gated_delta_kernel<2><<<grid, DLPC * DCOLS, 0, c->stream>>>(d);
    else if (ni <= 4) gated_delta_kernel<4><<<grid, DLPC * DCOLS, 0, c->stream>>>(d);
    else if (ni <= 8) gated_delta_kernel<8><<<grid, DLPC * DCOLS, 0, c->stream>>>(d);
    else if (ni <= 16) gated_delta_kernel<16><<<grid, DLPC * DCOLS, 0, c->stream>>>(d);
    else gated_delta_kernel<32><<<grid, DLPC * DCOLS, 0, c->stream>>>(d);
    cudaLaunchCheck();
}
