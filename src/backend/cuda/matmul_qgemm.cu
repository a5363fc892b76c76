/* matmul_qgemm.cu — y[T, N] = x[T, K] · Wᵀ for MLX 4/8-bit weights at prefill sizes, on
 * tensor cores, without dequantizing the weight.
 *
 * With w = scale·code + bias per group (MLX affine),
 *     y[t, n] = Σ_g  scale[n, g] · (Σ_{k∈g} code[n, k] · x[t, k])  +  bias[n, g] · (Σ_{k∈g} x[t, k])
 * The code sums run on mma.sync m16n8k16 (bf16 in, f32 accumulate): codes are integers
 * 0..255, exact in bf16, so each product code·x̂ is exact and only x's conversion rounds —
 * x̂ = bf16(x) once ("single": the precision policy's choice for llama/qwen3, like the dense
 * bf16 GEMM there), or x = hi + lo, two MMAs ("split": 16 significant bits, every other
 * architecture). Each group's partial sums (f32 registers) are scaled into the f32
 * accumulator: acc = bias·Σx̂ + (scale·partial + acc), Σx̂ summed in f32 from the same x̂, so
 * y = W·x̂ up to f32 sums: the error is that of rounding x in front of a bf16 GEMM. The
 * dequantizing path this replaces (matmul.cu: weight → f32, TF32 GEMM) rounds both operands
 * to 10 bits; rounding the dequantized weight to bf16 as well moved the MLX fixtures over
 * the 1e-2 bar (docs/cuda.md, Numerics).
 *
 * Two launches per matmul:
 *  1. qg_prep_kernel: x [T, K] f32 → x̂ [Tp, K] bf16 (the lo plane after it when split), T
 *     padded to a multiple of 128 with zeros, the columns of every 8-column unit stored in the
 *     order 0 4 1 5 2 6 3 7 (below); Σx̂ per group and token [K/group][Tp] f32.
 *  2. qgemm_kernel: a block = 128 weight rows × 128 tokens, 8 warps of 32 rows × 64 tokens
 *     (2 × 8 MMA tiles: 64 accumulators + 64 group partials per lane), K in stages of 64
 *     columns through a 4-stage cp.async ring (x̂ tile 16 KB, codes 4/8 KB, the stage's scale
 *     and bias words, Σx), one __syncthreads per stage. Blocks walk tokens fastest, so a
 *     wave shares a few row blocks' codes (read from HBM about once) and x̂ stays in L2.
 *
 * Fragment order (PTX mma.m16n8k16, lane = 4g + q): A (16 rows × 16 k) a0a1 = row g, k 2q,2q+1;
 * a2a3 row g+8; a4a5 row g, k 2q+8,2q+9; a6a7 row g+8. B (16 k × 8 tokens) b0b1 = k 2q,2q+1 of
 * token g, b2b3 k 2q+8,2q+9. The k order inside an MMA is free as long as A and B agree, so two
 * k-steps (32 columns) use: lane q takes columns 8q..8q+7 of the 32, k-step s holds columns
 * 8q + 2s + {0, 4} in its first register pair and 8q + 2s + 1 + {0, 4} in its second. For
 * 4-bit codes that is one code word per lane and row, decoded LOP3-style: (v >> 4i) & 0x000F000F
 * puts nibbles i and i+4 in the two bf16 halves, OR 0x4300 (2^7) makes them 128 + c, exact,
 * and 128 is subtracted: 3 instructions per register. 8-bit: two words per lane and row,
 * byte i of each through f32 (2^23 + c). x̂ is stored in the same order (0 4 1 5 2 6 3 7), so
 * one 16-byte shared load gives a lane its B registers for both k-steps of one token tile.
 *
 * Determinism: a token's outputs depend only on its own x row (an MMA column is the dot product
 * of one B column; k, group and stage order are fixed): bitwise the same alone or in any batch
 * that takes this kernel (tested), but not bitwise what qmma gives at ≤ 64 tokens (qmma splits
 * x into hi + lo per segment and adds the bias term with the exact Σx).
 *
 * Opt-in, not the default: KILN_CUDA_QGEMM=N takes it from N tokens (1: every MLX 4/8-bit matmul
 * that reaches the cuBLASLt section of cuda_matmul; unset or 0: the dequantize + TF32 path).
 * KILN_CUDA_QGEMM_SPLIT=0 leaves the split (non-llama/qwen3) models on the TF32 path.
 * Measured (H200, bench/cuda/RESULTS.md 2026-12-01 helper-37): correct and more precise than TF32
 * (MLX fixtures 8.3-8.9e-3 single, 1.0e-5..6.9e-5 split, vs TF32's 8.9e-4..3.5e-3) but SLOWER:
 * llama-3-8b q4 / q8 prefill (2048 tokens) 11 883 / 11 265 tok/s against 19 589 / 20 048 on
 * TF32, split 8 506; qwen3-0.6b q4 108.7k vs 134.4k — ~190 TFLOP/s effective. Likely limits
 * (not profiled): x̂ re-read from L2 by every 128-row block (gate/up: ~1.9 GB of x̂ per
 * matmul), 8 warps per SM with 64 accumulators + 64 group partials per lane (no room for larger
 * tiles), and the scale/bias FMAs at every group end (2 per accumulator per group). */
#include "backend/cuda/mma_util.cuh"

namespace {

constexpr int QG_BM = 128; /* weight rows per block */
constexpr int QG_BN = 128; /* tokens per block      */
constexpr int QG_BK = 64;  /* columns per stage     */
constexpr int QG_S = 4;    /* stages in the ring    */
constexpr int QG_THREADS = 256;

template <int BITS, int GROUP, int SPLIT> struct qg {
    static constexpr int CB = QG_BK * BITS / 8;       /* code bytes per row per stage: 32 / 64 */
    static constexpr int CSTR = BITS == 4 ? 48 : 96;  /* padded row stride: conflict-free loads */
    static constexpr int GPT = GROUP < QG_BK ? QG_BK / GROUP : 1; /* groups a stage touches */
    static constexpr int XT = QG_BN * QG_BK * 2;      /* one x̂ plane of a stage (16 KB)      */
    static constexpr int XB = XT * (SPLIT ? 2 : 1);
    static constexpr int CBY = QG_BM * CSTR;
    static constexpr int SBB = GPT * 2 * QG_BM * 4;   /* [GPT][scale, bias][128 rows] words   */
    static constexpr int XSB = GPT * QG_BN * 4;       /* [GPT][128 tokens] Σx                 */
    static constexpr int STAGE = XB + CBY + SBB + XSB;
};

template <int BITS, int GROUP, int SPLIT>
__global__ void __launch_bounds__(QG_THREADS, 1)
    qgemm_kernel(float *__restrict__ y, const __nv_bfloat16 *__restrict__ xq, const float *__restrict__ xsum, int T, int Tp, dweight_t w) {
    extern __shared__ __align__(128) unsigned char smem[];
    using C = qg<BITS, GROUP, SPLIT>;
    constexpr int CSTR = C::CSTR, CB = C::CB, GPT = C::GPT, UPR = CB / 16;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
    const int N = w.rows, K = w.cols, ng = K / GROUP, nk = K / QG_BK;
    const int t0 = blockIdx.x * QG_BN, r0 = blockIdx.y * QG_BM;
    const int wr = (warp & 3) * 32, wt = (warp >> 2) * 64; /* the warp's rows and tokens in the block */
    const size_t rowb = (size_t)K * BITS / 8;              /* code bytes per weight row */
    const unsigned char *codes = (const unsigned char *)w.data;

    auto load = [&](int s, int kt) {
        unsigned char *st = smem + (size_t)s * C::STAGE;
        const int k0 = kt * QG_BK, gi0 = k0 / GROUP;
#pragma unroll
        for (int p = 0; p <= SPLIT; p++)
#pragma unroll
            for (int i = 0; i < QG_BN * 8 / QG_THREADS; i++) { /* 128 tokens × 8 units of 16 bytes */
                const int id = tid + i * QG_THREADS, row = id >> 3, u = id & 7;
                cp_async16(st + p * C::XT + row * 128 + ((u ^ ((row & 1) << 2)) << 4), xq + (size_t)p * Tp * K + (size_t)(t0 + row) * K + k0 + u * 8);
            }
#pragma unroll
        for (int i = 0; i < QG_BM * UPR / QG_THREADS; i++) {
            const int id = tid + i * QG_THREADS, row = id / UPR, u = id % UPR, r = min(r0 + row, N - 1);
            cp_async16(st + C::XB + row * CSTR + u * 16, codes + (size_t)r * rowb + (size_t)k0 * BITS / 8 + u * 16);
        }
        unsigned char *sb = st + C::XB + C::CBY;
#pragma unroll
        for (int i = 0; i < GPT; i++) { /* thread: row tid & 127, scale (tid < 128) or bias word */
            const int row = tid & (QG_BM - 1), which = tid >> 7, r = min(r0 + row, N - 1);
            const size_t idx = (size_t)r * ng + gi0 + i;
            const unsigned char *base = (const unsigned char *)(which ? w.biases : w.scales);
            const uintptr_t a = w.sb_dtype == DT_F32 ? (uintptr_t)(base + idx * 4) : (uintptr_t)(base + idx * 2) & ~(uintptr_t)3;
            cp_async4(sb + ((i * 2 + which) * QG_BM + row) * 4, (const void *)a);
        }
        if (tid < GPT * 32) {
            const int i = tid >> 5, part = tid & 31;
            cp_async16(st + C::XB + C::CBY + C::SBB + (i * QG_BN + part * 4) * 4, xsum + (size_t)(gi0 + i) * Tp + t0 + part * 4);
        }
    };

    /* which half of a 16-bit scale/bias word holds row r's value of group gi: parity of the
     * value's address / 2 = (base/2 + r·ng + gi) */
    int sodd[2][2], bodd[2][2];
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const size_t ri = (size_t)min(r0 + wr + 16 * m + 8 * h + g, N - 1) * ng;
            sodd[m][h] = (int)((((uintptr_t)w.scales >> 1) + ri) & 1);
            bodd[m][h] = (int)((((uintptr_t)w.biases >> 1) + ri) & 1);
        }

    float acc[2][8][4], part[2][8][4];
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[m][j][i] = part[m][j][i] = 0.f;

#pragma unroll
    for (int s = 0; s < QG_S - 1; s++) {
        if (s < nk) load(s, s);
        cp_commit();
    }
    for (int kt = 0; kt < nk; kt++) {
        cp_wait<QG_S - 2>();
        __syncthreads(); /* stage kt visible to all; stage kt-1 free for the copy below */
        if (kt + QG_S - 1 < nk) load((kt + QG_S - 1) % QG_S, kt + QG_S - 1);
        cp_commit();
        const unsigned char *st = smem + (size_t)(kt % QG_S) * C::STAGE;
        const unsigned char *cs = st + C::XB;
        const uint32_t *sbw = (const uint32_t *)(st + C::XB + C::CBY);
        const float *xsm = (const float *)(st + C::XB + C::CBY + C::SBB);
#pragma unroll
        for (int c = 0; c < 2; c++) { /* 32 columns: two k-steps */
            uint32_t a[2][2][4];      /* [m tile][k-step][fragment] */
#pragma unroll
            for (int m = 0; m < 2; m++) {
                const unsigned char *ra = cs + (wr + 16 * m + g) * CSTR;
                qg_afrag<BITS>(a[m], ra, ra + 8 * CSTR, c, q);
            }
            /* the group's first columns: its partial sums start from zero (GROUP 128: zeroed at the flush) */
            const bool fresh = GROUP <= 64 && (32 * c) % GROUP == 0;
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const int row = wt + 8 * j + g;
                const unsigned char *xp = st + row * 128 + (((4 * c + q) ^ ((row & 1) << 2)) << 4);
                const uint4 xv = *(const uint4 *)xp;
#pragma unroll
                for (int m = 0; m < 2; m++) {
                    if (fresh) mma_bf16_z(part[m][j], a[m][0], xv.x, xv.y);
                    else mma_bf16(part[m][j], a[m][0], xv.x, xv.y);
                    mma_bf16(part[m][j], a[m][1], xv.z, xv.w);
                }
                if constexpr (SPLIT) {
                    const uint4 xl = *(const uint4 *)(xp + C::XT);
#pragma unroll
                    for (int m = 0; m < 2; m++) {
                        mma_bf16(part[m][j], a[m][0], xl.x, xl.y);
                        mma_bf16(part[m][j], a[m][1], xl.z, xl.w);
                    }
                }
            }
            /* end of a group: acc = bias·Σx̂ + (scale·partial + acc) */
            if ((kt * QG_BK + 32 * c + 32) % GROUP == 0) {
                const int gg = GROUP == 32 ? c : 0, gi = (kt * QG_BK + 32 * c) / GROUP;
                float sc[2][2], bi[2][2];
#pragma unroll
                for (int m = 0; m < 2; m++)
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const int row = wr + 16 * m + 8 * h + g;
                        sc[m][h] = sb_word_val(sbw[(gg * 2) * QG_BM + row], w.sb_dtype, sodd[m][h] ^ (gi & 1));
                        bi[m][h] = sb_word_val(sbw[(gg * 2 + 1) * QG_BM + row], w.sb_dtype, bodd[m][h] ^ (gi & 1));
                    }
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    const float2 xs = *(const float2 *)(xsm + gg * QG_BN + wt + 8 * j + 2 * q);
#pragma unroll
                    for (int m = 0; m < 2; m++)
#pragma unroll
                        for (int i = 0; i < 4; i++) {
                            acc[m][j][i] = __fmaf_rn(bi[m][i >> 1], (i & 1) ? xs.y : xs.x, __fmaf_rn(sc[m][i >> 1], part[m][j][i], acc[m][j][i]));
                            if (GROUP > 64) part[m][j][i] = 0.f;
                        }
                }
            }
        }
    }
    cp_wait<0>();
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int n = r0 + wr + 16 * m + g + 8 * (i >> 1), t = t0 + wt + 8 * j + 2 * q + (i & 1);
                if (n < N && t < T) y[(size_t)t * N + n] = acc[m][j][i];
            }
}

/* x [T, K] → x̂ [Tp, K] bf16 (then the lo plane when split), each 8-column unit in the order
 * 0 4 1 5 2 6 3 7, rows T..Tp-1 zero; Σx̂ [K/group][Tp] of the rounded x. A thread per unit; the GROUP/8
 * threads of a group are adjacent lanes (K % GROUP == 0, Tp·K/8 a multiple of 32). */
template <int SPLIT>
__global__ void qg_prep_kernel(__nv_bfloat16 *__restrict__ xq, float *__restrict__ xsum, const float *__restrict__ x, int T, int Tp, int K, int group) {
    const int upr = K / 8, gl = group / 8;
    const size_t n = (size_t)Tp * upr;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const int t = (int)(i / upr), u = (int)(i % upr);
        float4 a = make_float4(0.f, 0.f, 0.f, 0.f), b = a;
        if (t < T) {
            a = __ldg((const float4 *)(x + (size_t)t * K + 8 * u));
            b = __ldg((const float4 *)(x + (size_t)t * K + 8 * u + 4));
        }
        const __nv_bfloat162 h0 = __floats2bfloat162_rn(a.x, b.x), h1 = __floats2bfloat162_rn(a.y, b.y);
        const __nv_bfloat162 h2 = __floats2bfloat162_rn(a.z, b.z), h3 = __floats2bfloat162_rn(a.w, b.w);
        ((uint4 *)xq)[i] = make_uint4(bf2_bits(h0), bf2_bits(h1), bf2_bits(h2), bf2_bits(h3));
        /* x̂ as the MMAs see it (hi, or hi + lo): Σx̂ for the bias term, so that y = W·x̂ (with the
         * exact Σx the error would be scale·Σ code·(x̂ - x), codes 0..2^bits-1 not centred:
         * 0.014-0.027 on the MLX fixtures instead of W·(x̂ - x)) */
        float2 f0 = __bfloat1622float2(h0), f1 = __bfloat1622float2(h1), f2 = __bfloat1622float2(h2), f3 = __bfloat1622float2(h3);
        if (SPLIT) {
            const __nv_bfloat162 l0 = __floats2bfloat162_rn(__fsub_rn(a.x, f0.x), __fsub_rn(b.x, f0.y));
            const __nv_bfloat162 l1 = __floats2bfloat162_rn(__fsub_rn(a.y, f1.x), __fsub_rn(b.y, f1.y));
            const __nv_bfloat162 l2 = __floats2bfloat162_rn(__fsub_rn(a.z, f2.x), __fsub_rn(b.z, f2.y));
            const __nv_bfloat162 l3 = __floats2bfloat162_rn(__fsub_rn(a.w, f3.x), __fsub_rn(b.w, f3.y));
            ((uint4 *)xq)[n + i] = make_uint4(bf2_bits(l0), bf2_bits(l1), bf2_bits(l2), bf2_bits(l3));
            const float2 g0 = __bfloat1622float2(l0), g1 = __bfloat1622float2(l1), g2 = __bfloat1622float2(l2), g3 = __bfloat1622float2(l3);
            f0 = make_float2(__fadd_rn(f0.x, g0.x), __fadd_rn(f0.y, g0.y)); f1 = make_float2(__fadd_rn(f1.x, g1.x), __fadd_rn(f1.y, g1.y));
            f2 = make_float2(__fadd_rn(f2.x, g2.x), __fadd_rn(f2.y, g2.y)); f3 = make_float2(__fadd_rn(f3.x, g3.x), __fadd_rn(f3.y, g3.y));
        }
        /* f0 = (x̂0, x̂4), f1 = (x̂1, x̂5), ... */
        float s = __fadd_rn(__fadd_rn(__fadd_rn(f0.x, f1.x), __fadd_rn(f2.x, f3.x)), __fadd_rn(__fadd_rn(f0.y, f1.y), __fadd_rn(f2.y, f3.y)));
        for (int o = 1; o < gl; o <<= 1) s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, o));
        if (u % gl == 0) xsum[(size_t)(u / gl) * Tp + t] = s;
    }
}

template <int BITS, int GROUP, int SPLIT>
void launch(cuda_impl_t *c, float *y, const __nv_bfloat16 *xq, const float *xs, int T, int Tp, const dweight_t *w) {
    constexpr size_t smem = (size_t)QG_S * qg<BITS, GROUP, SPLIT>::STAGE;
    static bool attr;
    if (!attr) {
        cudaCheck(cudaFuncSetAttribute(qgemm_kernel<BITS, GROUP, SPLIT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        attr = true;
    }
    dim3 grid(Tp / QG_BN, cdiv(w->rows, QG_BM));
    qgemm_kernel<BITS, GROUP, SPLIT><<<grid, QG_THREADS, smem, c->stream>>>(y, xq, xs, T, Tp, *w);
}

template <int BITS, int SPLIT>
void launch_g(cuda_impl_t *c, float *y, const __nv_bfloat16 *xq, const float *xs, int T, int Tp, const dweight_t *w) {
    if (w->group == 32) launch<BITS, 32, SPLIT>(c, y, xq, xs, T, Tp, w);
    else if (w->group == 64) launch<BITS, 64, SPLIT>(c, y, xq, xs, T, Tp, w);
    else launch<BITS, 128, SPLIT>(c, y, xq, xs, T, Tp, w);
}

} // namespace

/* 0 when the weight and step suit the kernel (MLX 4/8-bit, groups 32/64/128, K % 64 == 0,
 * 16-byte aligned x and codes; KILN_CUDA_QGEMM as above) and it was launched; -1 otherwise.
 * split: x as bf16 hi + lo (two MMAs) instead of rounded once. */
int cuda_qgemm(cuda_impl_t *c, float *y, const float *x, int T, const dweight_t *w, int split) {
    const char *e = getenv("KILN_CUDA_QGEMM"); /* read per call: tests switch it; unset: off */
    const int min_t = e ? atoi(e) : 0;
    if (min_t <= 0 || T < min_t) return -1;
    if (split) {
        const char *es = getenv("KILN_CUDA_QGEMM_SPLIT");
        if (es && !strcmp(es, "0")) return -1;
    }
    if (w->dtype != DT_U32 || (w->bits != 4 && w->bits != 8) || (w->group != 32 && w->group != 64 && w->group != 128) || w->cols % QG_BK ||
        ((uintptr_t)x & 15) || ((uintptr_t)w->data & 15) || ((uintptr_t)w->scales & (w->sb_dtype == DT_F32 ? 3 : 1)) ||
        ((uintptr_t)w->biases & (w->sb_dtype == DT_F32 ? 3 : 1)))
        return -1;
    const int K = w->cols, Tp = (T + QG_BN - 1) / QG_BN * QG_BN;
    const size_t nq = (size_t)Tp * K;
    __nv_bfloat16 *xq = (__nv_bfloat16 *)cuda_scratch(c, &c->act16, &c->act16_bytes, nq * 2 * (split ? 2 : 1));
    float *xs = (float *)cuda_scratch(c, &c->wdeq, &c->wdeq_bytes, (size_t)(K / w->group) * Tp * sizeof(float));
    const size_t units = nq / 8;
    const int pg = (int)(units / 256 < 8192 ? (units + 255) / 256 : 8192);
    if (split) qg_prep_kernel<1><<<pg, 256, 0, c->stream>>>(xq, xs, x, T, Tp, K, w->group);
    else qg_prep_kernel<0><<<pg, 256, 0, c->stream>>>(xq, xs, x, T, Tp, K, w->group);
    cudaLaunchCheck();
    if (w->bits == 4) { if (split) launch_g<4, 1>(c, y, xq, xs, T, Tp, w); else launch_g<4, 0>(c, y, xq, xs, T, Tp, w); }
    else { if (split) launch_g<8, 1>(c, y, xq, xs, T, Tp, w); else launch_g<8, 0>(c, y, xq, xs, T, Tp, w); }
    cudaLaunchCheck();
    return 0;
}
