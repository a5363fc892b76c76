/* attention_mma.cu — prefill and mixed-step attention on tensor cores (flash attention 2
 * with mma.sync m16n8k16, f32 accumulation) over the paged f16/bf16 KV cache.
 *
 * Same contract as attention.cu's kernels (ref_attention: per token and head, softmax over
 * the row's cached positions [lo, pos] of q·k·scale, optionally cap·tanh(s/cap), weighted
 * sum of V), for the steps where the CUDA-core tiled kernel was the prefill bottleneck.
 *
 *  - A block (4 warps) owns 64 query vectors of one KV head: a tile of a row's consecutive
 *    tokens × the query heads of the GQA group (query qi = token (qi / heads) × head
 *    (qi % heads)); warp w owns queries 16w..16w+15, the m16 of the MMAs.
 *  - K and V of 64 positions at a time go through the block table into shared memory with
 *    cp.async (two stages: the next tile loads while this one is used), padded rows so the
 *    ldmatrix reads are conflict-free; K feeds S = Q·Kᵀ (ldmatrix), V feeds O += P·V
 *    (ldmatrix.trans).
 *  - Exactness: K and V are used as stored (f16/bf16 products are exact in f32). Q (f32)
 *    and P (f32 softmax weights) are split into two 16-bit terms, hi = r(x), lo = r(x - hi),
 *    and both are multiplied (SPLIT): 22 significant bits for f16, 16 for bf16, so the only
 *    roundings left are the f32 accumulations — the same idea as matmul.cu's split bf16 GEMM.
 *    Under the precision policy (backend_t.act_bf16_ok, matmul.cu) llama/qwen3 round Q and P
 *    once instead (half the MMAs: 11 significant bits with the f16 cache kiln bench uses, 8
 *    with bf16); KILN_CUDA_FA=single / split force one for every model;
 *    KILN_CUDA_FA=0 turns this kernel off (the tiled CUDA-core kernel runs instead).
 *  - Online softmax in base 2 (scores × log2 e, exp2f), the running max and sum per query
 *    row in registers (each thread holds two rows of the m16 tile: lane/4 and lane/4 + 8);
 *    a row whose keys are all masked so far keeps max -inf and contributes nothing.
 *  - Only the "cuda" backend uses it: "cuda-f32" keeps the exact CUDA-core kernel (the 1e-4
 *    path), and an f32 cache or head_dim other than 32/64/128/256 goes there too.
 *  - head_dim 256 (Qwen3.5, Gemma 3/4): Q·scale is kept in shared memory instead of registers
 *    (O alone takes 128 per thread) and read by ldmatrix per k-step; 198 KB of shared memory,
 *    one block (4 warps) an SM, 120 bytes spilled in the split form. Session 23: a 2048-token
 *    layer of the qwen3.5-moe synth 8787 µs on attention.cu's CUDA-core kernel → 378 µs here;
 *    gemma3-1b bf16 prefill 2.37×. Steps with too
 *    few tiles to fill the GPU (decode, small mixed batches) stay on attention.cu's kernels,
 *    which split the key range; this kernel never splits. */
#include <math.h>
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/mma_util.cuh"
#include "backend/cuda/fa_args.cuh" /* fa_dev_t, fa_args_fill */

#define FQ 64      /* query vectors per block: 4 warps × m16 */
#define FK 64      /* keys per shared-memory tile            */
#define FWARPS 4
/* Cost (ncu, qwen3-0.6b at 2048 tokens, hd 128, Q and P rounded once): 143-149 us a layer, ~120
 * TFLOP/s, 42 % of the prefill; 232 registers, so 2 blocks (8 warps) an SM. Neither 8 warps a block
 * (one K/V tile for 128 query vectors) nor registers capped for 3 blocks an SM (168, 140 bytes
 * spilled) changed that: 148-151 us, prefill -1.1 % / -2.7 % (bench/cuda/RESULTS.md, session 15). */


__device__ __forceinline__ void ldsm_x4(uint32_t *r, const void *p) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t *r, const void *p) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
/* 16 bytes global → shared; src_bytes 0 writes zeros (keys past the end: V must not hold
 * garbage, a NaN times a zero weight is still NaN) */
__device__ __forceinline__ void cp16(void *dst, const void *src, int src_bytes) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes));
}

template <int HD, typename T16, bool SPLIT>
__global__ void __launch_bounds__(32 * FWARPS) attn_mma_kernel(fa_dev_t a) {
    constexpr int LD = HD + 8;          /* smem row stride in 16-bit elements (16-byte rows, no bank conflicts) */
    constexpr int KS = HD / 16;         /* k-steps of Q·Kᵀ                                                   */
    constexpr int NO = HD / 8;          /* n-tiles of the output                                             */
    constexpr int CPR = HD / 8;         /* 16-byte chunks per K/V row                                        */
    /* head_dim 256: Q's fragments (128 registers split) do not fit beside the 128 of O, so Q·scale
     * waits in shared memory (hi, then lo: [FQ][LD] each) and each k-step's A comes by ldmatrix */
    constexpr bool QSM = HD > 128;
    extern __shared__ __align__(16) unsigned short fsm[];
    unsigned short *Ks = fsm, *Vs = fsm + 2 * FK * LD; /* [2 stages][FK][LD] each */
    unsigned short *Qs = fsm + 4 * FK * LD;            /* QSM: [2][FQ][LD]          */
    const int tile_i = a.n_tiles - 1 - blockIdx.x;      /* longest key ranges first (causal prefill) */
    const int kvh = blockIdx.y / a.n_chunks, chunk = blockIdx.y % a.n_chunks;
    const attn_tile_t tile = a.tiles[tile_i];
    const int h0 = kvh * a.group + chunk * a.hc;
    const int nh_here = min(a.hc, a.group - chunk * a.hc);
    const int nq = tile.n * nh_here;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c4 = lane & 3;
    const int *bt = a.tables + (size_t)tile.row * a.max_blocks;
    const size_t per_tok = (size_t)a.n_kv_heads * HD;

    /* the block's key range: positions are consecutive within a row */
    const int p_first = a.pos[tile.t0], p_last = a.pos[tile.t0 + tile.n - 1];
    const int kv_lo = a.window > 0 ? max(0, p_first - a.window + 1) : 0, kv_hi = p_last + 1;

    auto load_tile = [&](int stage, int j0) {
        const int nk = min(FK, kv_hi - j0);
        unsigned short *kd = Ks + stage * FK * LD, *vd = Vs + stage * FK * LD;
#pragma unroll
        for (int i = threadIdx.x; i < FK * CPR; i += 32 * FWARPS) {
            const int kk = i / CPR, ch = i % CPR, kp = j0 + min(kk, nk - 1);
            const size_t off = ((size_t)bt[kp / a.block_size] * a.block_size + kp % a.block_size) * per_tok + (size_t)kvh * HD + ch * 8;
            const int bytes = kk < nk ? 16 : 0;
            cp16(kd + kk * LD + ch * 8, (const unsigned short *)a.k + off, bytes);
            cp16(vd + kk * LD + ch * 8, (const unsigned short *)a.v + off, bytes);
        }
        asm volatile("cp.async.commit_group;\n" ::);
    };
    load_tile(0, kv_lo);

    /* this thread's two query rows (r = 16·warp + g and + 8): position, window start, validity */
    int pq[2], lq[2];
    uint32_t qa[QSM ? 1 : KS][4], ql[SPLIT && !QSM ? KS : 1][4];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int qi = warp * 16 + g + 8 * h;
        const int t = tile.t0 + (qi < nq ? qi / nh_here : 0);
        pq[h] = qi < nq ? a.pos[t] : -1; /* an unused row: every key masked */
        lq[h] = a.window > 0 ? max(0, a.pos[t] - a.window + 1) : 0;
    }
    /* Q·scale as A fragments: a0 (row g, k 2c..), a1 (row g+8), a2 (row g, k+8), a3 (row g+8, k+8) */
    {
        const float *qrow[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int qi = warp * 16 + g + 8 * h;
            const int t = tile.t0 + qi / nh_here, hh = h0 + qi % nh_here;
            qrow[h] = qi < nq ? a.q + ((size_t)t * a.n_heads + hh) * HD : NULL;
        }
#pragma unroll
        for (int ks = 0; ks < KS; ks++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const int h = r & 1, col = ks * 16 + 2 * c4 + (r >> 1) * 8;
                float2 v = make_float2(0.f, 0.f);
                if (qrow[h]) v = *(const float2 *)(qrow[h] + col);
                v.x *= a.scale; v.y *= a.scale;
                uint32_t hi, lo = 0;
                if (SPLIT) mma16_split2<T16>(v.x, v.y, hi, lo);
                else hi = mma16_t<T16>::pack(v.x, v.y);
                if constexpr (QSM) {
                    unsigned short *qp = Qs + (warp * 16 + g + 8 * h) * LD + col;
                    *(uint32_t *)qp = hi;
                    if (SPLIT) *(uint32_t *)(qp + FQ * LD) = lo;
                } else {
                    qa[ks][r] = hi;
                    if (SPLIT) ql[SPLIT ? ks : 0][r] = lo;
                }
            }
        if constexpr (QSM) __syncwarp(); /* a warp reads back only its own 16 rows */
    }
    float o[NO][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
#pragma unroll
    for (int i = 0; i < NO; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    const float LOG2E = 1.4426950408889634f;

    int stage = 0;
    for (int j0 = kv_lo; j0 < kv_hi; j0 += FK, stage ^= 1) {
        if (j0 + FK < kv_hi) {
            load_tile(stage ^ 1, j0 + FK);
            asm volatile("cp.async.wait_group 1;\n" ::);
        } else
            asm volatile("cp.async.wait_group 0;\n" ::);
        __syncthreads();
        const unsigned short *kt = Ks + stage * FK * LD, *vt = Vs + stage * FK * LD;
        /* S = Q·Kᵀ: 8 n-tiles of 8 keys */
        float s[FK / 8][4];
#pragma unroll
        for (int nt = 0; nt < FK / 8; nt++) {
            s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
            for (int ks = 0; ks < KS; ks += 2) {
                /* matrices: keys nt·8.., dims 16ks + 8m; thread gives row (lane & 7) of matrix lane >> 3 */
                uint32_t b[4];
                ldsm_x4(b, kt + (nt * 8 + (lane & 7)) * LD + ks * 16 + (lane >> 3) * 8);
                if constexpr (QSM) {
                    /* A of k-steps ks, ks+1: matrices rows 8(m & 1).., dims 16ks + 8(m >> 1) (+16) */
                    const unsigned short *qp = Qs + (warp * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * LD + ks * 16 + (lane >> 4) * 8;
                    uint32_t q0[4], q1[4];
                    ldsm_x4(q0, qp);
                    ldsm_x4(q1, qp + 16);
                    mma16_t<T16>::mma(s[nt], q0, b[0], b[1]);
                    mma16_t<T16>::mma(s[nt], q1, b[2], b[3]);
                    if (SPLIT) {
                        ldsm_x4(q0, qp + FQ * LD);
                        ldsm_x4(q1, qp + FQ * LD + 16);
                        mma16_t<T16>::mma(s[nt], q0, b[0], b[1]);
                        mma16_t<T16>::mma(s[nt], q1, b[2], b[3]);
                    }
                } else {
                    mma16_t<T16>::mma(s[nt], qa[ks], b[0], b[1]);
                    mma16_t<T16>::mma(s[nt], qa[ks + 1], b[2], b[3]);
                    if (SPLIT) {
                        mma16_t<T16>::mma(s[nt], ql[SPLIT ? ks : 0], b[0], b[1]);
                        mma16_t<T16>::mma(s[nt], ql[SPLIT ? ks + 1 : 0], b[2], b[3]);
                    }
                }
            }
        }
        /* mask, soft-cap, base-2 scores; the tile's row maxima */
        float mt[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int nt = 0; nt < FK / 8; nt++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const int h = r >> 1, kp = j0 + nt * 8 + 2 * c4 + (r & 1);
                float v = s[nt][r];
                if (a.softcap > 0.f) v = a.softcap * tanhf(v / a.softcap);
                v *= LOG2E;
                const bool ok = kp < kv_hi && kp >= lq[h] && kp <= pq[h];
                s[nt][r] = ok ? v : -INFINITY;
                mt[h] = fmaxf(mt[h], s[nt][r]);
            }
        float mu[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            mt[h] = fmaxf(mt[h], __shfl_xor_sync(0xffffffffu, mt[h], 1));
            mt[h] = fmaxf(mt[h], __shfl_xor_sync(0xffffffffu, mt[h], 2));
            const float mn = fmaxf(m[h], mt[h]);
            mu[h] = mn == -INFINITY ? 0.f : mn; /* nothing valid yet: exp2(-inf - 0) = 0 */
            const float corr = exp2f(m[h] - mu[h]);
            m[h] = mn;
            l[h] *= corr;
#pragma unroll
            for (int i = 0; i < NO; i++) { o[i][2 * h] *= corr; o[i][2 * h + 1] *= corr; }
        }
        /* P = exp2(s - m) as A fragments over the keys (two n-tiles of S make one k16 step) */
#pragma unroll
        for (int kk = 0; kk < FK / 16; kk++) {
            uint32_t pa[4], pl[4];
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const int nt = 2 * kk + (r >> 1), h = r & 1;
                const float p0 = exp2f(s[nt][2 * h] - mu[h]), p1 = exp2f(s[nt][2 * h + 1] - mu[h]);
                l[h] += p0 + p1;
                if (SPLIT) mma16_split2<T16>(p0, p1, pa[r], pl[r]);
                else pa[r] = mma16_t<T16>::pack(p0, p1);
            }
#pragma unroll
            for (int dn = 0; dn < NO; dn += 2) {
                /* matrices: keys 16kk + 8(m & 1), dims 8(dn + (m >> 1)); transposed → b0, b1 of dn and dn + 1 */
                uint32_t b[4];
                const int mm = lane >> 3;
                ldsm_x4_t(b, vt + (kk * 16 + (mm & 1) * 8 + (lane & 7)) * LD + (dn + (mm >> 1)) * 8);
                mma16_t<T16>::mma(o[dn], pa, b[0], b[1]);
                mma16_t<T16>::mma(o[dn + 1], pa, b[2], b[3]);
                if (SPLIT) {
                    mma16_t<T16>::mma(o[dn], pl, b[0], b[1]);
                    mma16_t<T16>::mma(o[dn + 1], pl, b[2], b[3]);
                }
            }
        }
        __syncthreads(); /* this stage is reloaded two tiles on */
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
        const int qi = warp * 16 + g + 8 * h;
        if (qi >= nq) continue;
        const int t = tile.t0 + qi / nh_here, hh = h0 + qi % nh_here;
        float *orow = a.out + ((size_t)t * a.n_heads + hh) * HD;
        const float inv = 1.0f / l[h];
#pragma unroll
        for (int i = 0; i < NO; i++) *(float2 *)(orow + i * 8 + 2 * c4) = make_float2(o[i][2 * h] * inv, o[i][2 * h + 1] * inv);
        if (a.out16 && a.out16_half) {
            __half *o16 = (__half *)a.out16 + ((size_t)t * a.n_heads + hh) * HD;
#pragma unroll
            for (int i = 0; i < NO; i++) *(__half2 *)(o16 + i * 8 + 2 * c4) = __floats2half2_rn(o[i][2 * h] * inv, o[i][2 * h + 1] * inv);
        } else if (a.out16) {
            __nv_bfloat16 *o16 = a.out16 + ((size_t)t * a.n_heads + hh) * HD;
#pragma unroll
            for (int i = 0; i < NO; i++) *(__nv_bfloat162 *)(o16 + i * 8 + 2 * c4) = __floats2bfloat162_rn(o[i][2 * h] * inv, o[i][2 * h + 1] * inv);
        }
    }
}

template <int HD, typename T16, bool SPLIT>
static void fa_launch(cuda_impl_t *c, const fa_dev_t &a, dim3 grid) {
    const size_t smem = sizeof(unsigned short) * (4 * FK + (HD > 128 ? 2 * FQ : 0)) * (HD + 8);
    static size_t set = 48 * 1024;
    if (smem > set) {
        cudaCheck(cudaFuncSetAttribute(attn_mma_kernel<HD, T16, SPLIT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        set = smem;
    }
    attn_mma_kernel<HD, T16, SPLIT><<<grid, 32 * FWARPS, smem, c->stream>>>(a);
    cudaLaunchCheck();
}

int cuda_attention_wg(backend_t *be, float *out, const float *q, int T, const attn_args_t *aa); /* attention_wgmma.cu */

extern "C" int kiln_cuda_attn_mma_hd256_calls; /* head_dim 256 steps this kernel ran (the tests check the path ran) */
int kiln_cuda_attn_mma_hd256_calls;

/* 1 if the step ran here; 0: not a shape for this kernel (the caller uses attention.cu's). */
int cuda_attention_mma(backend_t *be, float *out, const float *q, int T, const attn_args_t *aa) {
    cuda_impl_t *c = cuda_impl(be);
    const kv_view_t *kv = &aa->kv;
    const int form = fa_form(be); /* Q and P as hi + lo, or rounded once (fa_args.cuh) */
    if (form < 0) return 0;
    const bool split = form == 1;
    const int hd = aa->head_dim;
    /* Q and P rounded once: the wgmma kernel (attention_wgmma.cu) when the step fills the GPU
     * with its blocks — head_dim 128 by default, 64 too with KILN_CUDA_FA_WG=1/2/3; =0 never */
    if (c->gemm_min_t != 0x7fffffff && !split && cuda_attention_wg(be, out, q, T, aa)) return 1;
    if (c->gemm_min_t == 0x7fffffff || (kv->dtype != DT_F16 && kv->dtype != DT_BF16) || (hd != 32 && hd != 64 && hd != 128 && hd != 256)) return 0;
    /* decode steps and steps too small to fill the GPU without a key split: attention.cu (blocks
     * needed by default one per two SMs, so a 512-token chunk of a small model still comes here) */
    attn_tiles_t tl;
    int hc, n_chunks, TQ;
    if (!fa_tiles_plan(c, aa, T, FQ, tl, hc, n_chunks, TQ)) return 0;
    fa_dev_t a;
    fa_args_fill(a, c, q, out, T, aa, tl, hc, n_chunks); /* out16: the o projection rounds out to bf16: done here */
    dim3 grid(tl.n_tiles, aa->n_kv_heads * n_chunks);
    const bool f16 = kv->dtype == DT_F16;
#define FA_GO(HD_)                                                                   \
    do {                                                                             \
        if (f16) split ? fa_launch<HD_, __half, true>(c, a, grid) : fa_launch<HD_, __half, false>(c, a, grid); \
        else split ? fa_launch<HD_, __nv_bfloat16, true>(c, a, grid) : fa_launch<HD_, __nv_bfloat16, false>(c, a, grid); \
    } while (0)
    if (hd == 32) FA_GO(32);
    else if (hd == 64) FA_GO(64);
    else if (hd == 128) FA_GO(128);
    else { FA_GO(256); kiln_cuda_attn_mma_hd256_calls++; }
#undef FA_GO
    if (a.out16 && a.out16_half) cuda_x16h_set(c, out, (size_t)T * aa->n_heads * hd);
    else if (a.out16) cuda_x16_set(c, out, (size_t)T * aa->n_heads * hd);
    return 1;
}
