/* matmul_bfmma.cu — bf16 weights at 3..64 tokens (batched decode) on mma.sync, in place of
 * cuBLASLt (KILN_CUDA_BFMMA=0: cuBLASLt as before).
 *
 * Why: a 64-row qwen3-0.6b step ran each bf16 matmul as a conversion kernel (x to bf16, or to
 * hi + lo) plus a cuBLASLt GEMM, 14 launches per layer for 7 small weights (2..6 MB each), and
 * gate/up/GLU as five. Here one launch rounds x in registers, reads the weights once (also for
 * the hi + lo split: two MMAs per weight fragment), q/k/v share a launch and gate/up write the
 * GLU directly.
 *
 * A block = 4 warps = 64 weight rows × all tokens (8·NT, NT = 1/2/4/8) × a contiguous range of
 * 64-column stages of K. Per stage the weight tile (64 × 64 bf16, 16-byte chunks XOR-swizzled by
 * row) and the x tile (f32, rows padded to 72 floats) come through a 4-stage cp.async ring; warp
 * w takes k-step w (columns 16w..16w+15) of every stage for all 64 rows: A by ldmatrix.x4, B = x
 * rounded to bf16 (single) or split hi = bf16(x), lo = bf16(x − hi) (two MMAs into the same f32
 * accumulator). The four warps' sums are added in warp order through shared memory; with K split
 * over S blocks (S = K/256 up to 8, by K only) those blocks are one thread-block cluster: each
 * keeps its [T][64] partial in shared memory and, after a cluster barrier, block r adds tokens
 * [rT/S, (r+1)T/S) of all S partials in split order through distributed shared memory — no extra
 * launch, no global scratch, deterministic. (A first form wrote the partials to global memory and
 * let the last block of a tile add them: 30-40 µs per qwen3-0.6b matmul, the last block's dependent
 * L2 round trips.) Nothing depends on T or on the other weights of a launch, so a token's outputs
 * are bitwise the same at any T in 3..64 and in a multi launch as alone, and the GLU tile (32 gate
 * rows + the same 32 up rows) gives bitwise matmul_multi + glu.
 * PDL: the first stages' weight tiles are issued before griddepcontrol.wait, x after it.
 * Fusions (KILN_CUDA_BFMMA_FUSE=1|2, opt-in: measured slower, below): NORM — the matmul's input is
 * rms_norm(x) of the residual stream x (rms_matmul_multi / rms_matmul_glu; K <= 1024), acc — y += the
 * sums (matmul_add), so a qwen3-0.6b layer is 6 launches instead of 8.
 * X16 (KILN_CUDA_X16, default on; x16.cuh): where x's producer (the norms, this kernel's GLU)
 * also wrote bf16(x), the ring holds those 2-byte values instead of f32 — half the x bytes from L2
 * per block (x is re-read by every 64-row tile), 70 KB of shared memory instead of 107 (the 200
 * registers still allow two blocks an SM), no conversions — and the MMAs get the same operands:
 * bitwise. The GLU epilogue writes bf16 of its outputs too when asked (the down projection's x).
 * Measured: a 64-row qwen3-0.6b step 2.43 → 2.35 ms (session 15, helper-94); x's bytes are not
 * what bounds this kernel (its time follows blocks per SM). */
#include "backend/cuda/bfmma.cuh"
#include "backend/cuda/x16.cuh"
#include "backend/cuda/mma_util.cuh"
#include "backend/cuda/glu_act.cuh"
#include <cooperative_groups.h>

#define BFM_ROWS 64
#define BFM_KC 64 /* columns per stage */
#define BFM_NS 4  /* ring stages */
#define BFM_XP 72 /* x row pitch in floats (X16: in bf16, 144 bytes: rows 4 banks apart) */
#define BFM_MAXW 4

typedef struct bfm_slot {
    const __nv_bfloat16 *W, *Wu; /* Wu: GLU's up weight (W = gate) */
    float *y;
    int N;                       /* rows of W (GLU: of gate = of up = outputs per token) */
    int tiles, S, blk0;          /* row tiles, K splits (the cluster size), first block */
} bfm_slot_t;
typedef struct bfm_args {
    bfm_slot_t s[BFM_MAXW];
    const float *x;
    const __nv_bfloat16 *x16; /* X16: bf16(x), written by x's producer */
    __nv_bfloat16 *y16;       /* GLU: bf16 of the outputs as well (NULL: not) */
    int n, T, K, glu, gelu;
    /* fusions (KILN_CUDA_BFMMA_FUSE): norm — x is the residual stream and the matmul's input is
     * rms_norm(x)·(off + nw) (nw NULL: no weight); 1: in the prologue, bitwise as rmsnorm.cu's
     * rms_norm4_kernel computes it; 2: x·(off + nw) rounded, the sums scaled by 1/rms; acc — y += the
     * sums (the residual add) instead of y = */
    const float *nw;
    float off, eps;
    int norm, acc;
} bfm_args_t;

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"((unsigned)__cvta_generic_to_shared(p)));
}

/* the ring (or the epilogue's warp sums over it, if larger), then (norm) the row partials
 * [8·NT][2] and the rows' 1/rms [8·NT] */
template <int NT, int RW, bool X16 = false> static constexpr size_t bfm_smem() {
    constexpr size_t ring = (size_t)BFM_NS * (RW * BFM_ROWS * BFM_KC * 2 + 8 * NT * BFM_XP * (X16 ? 2 : 4));
    constexpr size_t red = (size_t)4 * 8 * NT * (RW * BFM_ROWS + 4) * 4;
    return (ring > red ? ring : red) + 8 * NT * 3 * 4;
}

/* The norm's statistics (NORM 1 and 2): for each (token, 128-column chunk) of the split's range
 * (whole in the ring: nst <= BFM_NS) one thread replays rms_norm4_kernel's warp for that chunk —
 * lane l's fmaf of the float4 at column 4l in x, y, z, w order, then the xor tree's pairs level by
 * level (lane 0's value) — into pss[t][c]; then 1/rms of token t from the chunks of all splits
 * (distributed shared memory) added in chunk order (rms_norm4_kernel's 8 warp sums, zero past K) */
__device__ __forceinline__ void bfm_chunk_sums(float *pss, const unsigned char *smem, int stb, int wst, int T, int nch, int tid, int nth) {
    for (int it = tid; it < T * nch; it += nth) {
        const int t = it / nch, c = it - t * nch;
        float v[32];
#pragma unroll
        for (int l = 0; l < 32; l++) {
            const float4 q4 = *(const float4 *)((const float *)(smem + (2 * c + (l >> 4)) * stb + wst) + t * BFM_XP + 4 * (l & 15));
            float ss = 0.f;
            ss = fmaf(q4.x, q4.x, ss); ss = fmaf(q4.y, q4.y, ss); ss = fmaf(q4.z, q4.z, ss); ss = fmaf(q4.w, q4.w, ss);
            v[l] = ss;
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
#pragma unroll
            for (int l = 0; l < o; l++) v[l] = v[l] + v[l + o];
        pss[t * 2 + c] = v[0];
    }
}
__device__ __forceinline__ float bfm_inv(cooperative_groups::cluster_group &cl, float *pss, int t, int nch, int K, float eps) {
    float v[8];
#pragma unroll
    for (int i = 0; i < 8; i++) v[i] = i < K / 128 ? cl.map_shared_rank(pss, i / nch)[t * 2 + i % nch] : 0.f;
    float tot = 0.f;
#pragma unroll
    for (int i = 0; i < 8; i++) tot += v[i];
    return 1.0f / sqrtf(tot / (float)K + eps);
}

/* RW = 1: 64 rows, 4 warps; RW = 2: 128 rows, 8 warps (warp w: k-step w % 4, rows 64·(w / 4)..),
 * x read once per 128 rows instead of 64 */
template <int NT, int SPLIT, int RW, int NORM = 0, bool X16 = false>
__global__ void __launch_bounds__(128 * RW) bfm_kernel(const bfm_args_t a) {
    static_assert(!X16 || (!SPLIT && !NORM), "X16: the single rounding, no norm");
    extern __shared__ __align__(16) unsigned char smem[];
    constexpr int XR = 8 * NT, ROWS = BFM_ROWS * RW, NTH = 128 * RW, RP = ROWS + 4;
    constexpr int XB = X16 ? 2 : 4; /* bytes of an x value in the ring */
    constexpr int WST = ROWS * BFM_KC * 2, STB = WST + XR * BFM_XP * XB;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, ks = warp & 3, half = warp >> 2;
    int si = 0;
    while (si + 1 < a.n && (int)blockIdx.x >= a.s[si + 1].blk0) si++;
    const bfm_slot_t &sl = a.s[si];
    const int b = blockIdx.x - sl.blk0, tile = b / sl.S, split = b % sl.S, S = sl.S;
    const int T = a.T, K = a.K, N = sl.N, kst = K / BFM_KC, glu = a.glu;
    const int st0 = (int)((long)split * kst / S), nst = (int)((long)(split + 1) * kst / S) - st0;
    /* this thread's four weight chunks per stage: rows tid/8 + (ROWS/4)·i, 16-byte chunk tid%8 */
    const __nv_bfloat16 *wrow[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int r = tid / 8 + (ROWS / 4) * i;
        int n = glu ? tile * (ROWS / 2) + (r % (ROWS / 2)) : tile * ROWS + r;
        if (n > N - 1) n = N - 1;
        wrow[i] = (glu && r >= ROWS / 2 ? sl.Wu : sl.W) + (size_t)n * K + (size_t)st0 * BFM_KC + (tid & 7) * 8;
    }
    auto load_w = [&](int st) {
        unsigned char *ws = smem + (st % BFM_NS) * STB;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int r = tid / 8 + (ROWS / 4) * i, ch = tid & 7;
            cp_async16(ws + r * 128 + ((ch ^ (r & 7)) << 4), wrow[i] + st * BFM_KC);
        }
    };
    const float *xg = a.x + (size_t)st0 * BFM_KC;
    const __nv_bfloat16 *xg16 = X16 ? a.x16 + (size_t)st0 * BFM_KC : nullptr;
    auto load_x = [&](int st) {
        if (X16) { /* 8 16-byte chunks a token */
            __nv_bfloat16 *xs = (__nv_bfloat16 *)(smem + (st % BFM_NS) * STB + WST);
            for (int c = tid; c < T * 8; c += NTH) {
                const int t = c >> 3, ch = c & 7;
                cp_async16(xs + t * BFM_XP + ch * 8, xg16 + (size_t)t * K + st * BFM_KC + ch * 8);
            }
            return;
        }
        float *xs = (float *)(smem + (st % BFM_NS) * STB + WST);
        for (int c = tid; c < T * 16; c += NTH) {
            const int t = c >> 4, ch = c & 15;
            cp_async16(xs + t * BFM_XP + ch * 4, xg + (size_t)t * K + st * BFM_KC + ch * 4);
        }
    };
    /* rows of x past T stay zero in every stage (cp.async never writes them) */
    for (int s = 0; s < BFM_NS; s++) {
        uint32_t *xs = (uint32_t *)(smem + s * STB + WST);
        for (int i = T * BFM_XP * XB / 4 + tid; i < XR * BFM_XP * XB / 4; i += NTH) xs[i] = 0u;
    }
    float invt[NT]; /* NORM 1: 1/rms of tokens 8j + g */
    float *pss = (float *)(smem + BFM_NS * STB), *sinv = pss + XR * 2; /* NORM: past the ring */
    const int nch = nst / 2;
    if (NORM == 1) {
        /* bitwise rms_norm4_kernel + this matmul (host: S >= 2, nst <= BFM_NS, 128-column chunks
         * whole in every split, K <= 1024): the split's whole range of W and x in the ring at once,
         * the statistics (bfm_chunk_sums, one cluster barrier, bfm_inv), then x scaled as it is
         * converted in the loop below, (x·inv)·(off + nw) as rms_norm4_kernel scales it */
        for (int s = 0; s < nst; s++) load_w(s);
        pdl_wait();
        for (int s = 0; s < nst; s++) load_x(s);
        cp_commit();
        cp_wait<0>();
        __syncthreads();
        bfm_chunk_sums(pss, smem, STB, WST, T, nch, tid, NTH);
        cooperative_groups::cluster_group cl = cooperative_groups::this_cluster();
        cl.sync();
        if (tid < T) sinv[tid] = bfm_inv(cl, pss, tid, nch, K, a.eps);
        else if (tid < XR) sinv[tid] = 0.f; /* tokens past T: x is zero there */
        __syncthreads();
#pragma unroll
        for (int j = 0; j < NT; j++) invt[j] = sinv[j * 8 + (lane >> 2)];
    } else {
#pragma unroll
        for (int s = 0; s < BFM_NS - 1; s++)
            if (s < nst) load_w(s);
        pdl_wait(); /* x (and y) belong to earlier kernels */
#pragma unroll
        for (int s = 0; s < BFM_NS - 1; s++) {
            if (s < nst) load_x(s);
            cp_commit();
        }
    }
    float acc[4][NT][4];
#pragma unroll
    for (int m = 0; m < 4; m++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[m][j][e] = 0.f;
    const int g = lane >> 2, q = lane & 3;
    for (int i = 0; i < nst; i++) {
        cp_wait<BFM_NS - 2>();
        __syncthreads();
        if (NORM != 1 && i + BFM_NS - 1 < nst) { load_w(i + BFM_NS - 1); load_x(i + BFM_NS - 1); }
        cp_commit();
        const unsigned char *ws = smem + (i % BFM_NS) * STB;
        const float *xs = (const float *)(ws + WST);
        uint32_t af[4][4];
#pragma unroll
        for (int m = 0; m < 4; m++) {
            const int r = half * 64 + m * 16 + (lane & 15), ch = 2 * ks + (lane >> 4);
            ldsm_x4(af[m], ws + r * 128 + ((ch ^ (r & 7)) << 4));
        }
        float f0 = 1.f, f1 = 1.f, f2 = 1.f, f3 = 1.f; /* NORM 1/2: off + nw of this thread's four columns */
        if (NORM && a.nw) {
            const float *wp = a.nw + (size_t)(st0 + i) * BFM_KC + 16 * ks + 2 * q;
            const float2 w0 = __ldg((const float2 *)wp), w1 = __ldg((const float2 *)(wp + 8));
            f0 = a.off + w0.x; f1 = a.off + w0.y; f2 = a.off + w1.x; f3 = a.off + w1.y;
        }
        if constexpr (X16) { /* bf16(x) as its producer rounded it: the pairs the rounding below would make */
            const __nv_bfloat16 *xh = (const __nv_bfloat16 *)(ws + WST);
#pragma unroll
            for (int j = 0; j < NT; j++) {
                const __nv_bfloat16 *xp = xh + (j * 8 + g) * BFM_XP + 16 * ks + 2 * q;
                const uint32_t b0 = *(const uint32_t *)xp, b1 = *(const uint32_t *)(xp + 8);
#pragma unroll
                for (int m = 0; m < 4; m++) mma_bf16(acc[m][j], af[m], b0, b1);
            }
        } else {
#pragma unroll
            for (int j = 0; j < NT; j++) {
                const float *xp = xs + (j * 8 + g) * BFM_XP + 16 * ks + 2 * q;
                float2 v0 = *(const float2 *)xp, v1 = *(const float2 *)(xp + 8);
                if (NORM == 1) { /* rms_norm4_kernel's (x·inv)·(off + w); · 1.0f without a weight is exact */
                    v0.x = (v0.x * invt[j]) * f0; v0.y = (v0.y * invt[j]) * f1;
                    v1.x = (v1.x * invt[j]) * f2; v1.y = (v1.y * invt[j]) * f3;
                } else if (NORM == 2 && a.nw) { /* x·(off + w) rounded; 1/rms applied to the sums */
                    v0.x *= f0; v0.y *= f1; v1.x *= f2; v1.y *= f3;
                }
                const __nv_bfloat162 h0 = __floats2bfloat162_rn(v0.x, v0.y), h1 = __floats2bfloat162_rn(v1.x, v1.y);
                const uint32_t b0 = bf2_bits(h0), b1 = bf2_bits(h1);
#pragma unroll
                for (int m = 0; m < 4; m++) mma_bf16(acc[m][j], af[m], b0, b1);
                if (SPLIT) {
                    const float2 f0 = __bfloat1622float2(h0), f1 = __bfloat1622float2(h1);
                    const uint32_t l0 = bf2_bits(__floats2bfloat162_rn(v0.x - f0.x, v0.y - f0.y));
                    const uint32_t l1 = bf2_bits(__floats2bfloat162_rn(v1.x - f1.x, v1.y - f1.y));
#pragma unroll
                    for (int m = 0; m < 4; m++) mma_bf16(acc[m][j], af[m], l0, l1);
                }
            }
        }
    }
    cp_wait<0>();
    __syncthreads();
    pdl_trigger();
    if (NORM == 2) { /* the statistics from x still in the ring (nst <= BFM_NS), before red covers it */
        bfm_chunk_sums(pss, smem, STB, WST, T, nch, tid, NTH);
        __syncthreads();
    }
    /* the four k-step warps' sums of a row, added in k-step order: red[ks][token][row] */
    float *red = (float *)smem;
#pragma unroll
    for (int m = 0; m < 4; m++)
#pragma unroll
        for (int j = 0; j < NT; j++) {
            float *rp = red + ((size_t)ks * XR + j * 8 + 2 * q) * RP + half * 64 + m * 16 + g;
            rp[0] = acc[m][j][0];
            rp[RP] = acc[m][j][1];
            rp[8] = acc[m][j][2];
            rp[RP + 8] = acc[m][j][3];
        }
    __syncthreads();
    constexpr int WS = XR * RP;
    if (S == 1) {
        if (glu) {
            for (int e = tid; e < T * (ROWS / 2); e += NTH) {
                const int t = e / (ROWS / 2), r = e % (ROWS / 2), n = tile * (ROWS / 2) + r;
                const float *p = red + t * RP + r;
                const float vg = ((p[0] + p[WS]) + p[2 * WS]) + p[3 * WS];
                const float vu = ((p[ROWS / 2] + p[WS + ROWS / 2]) + p[2 * WS + ROWS / 2]) + p[3 * WS + ROWS / 2];
                if (n < N) {
                    const float v = glu_act(vg, vu, a.gelu);
                    sl.y[(size_t)t * N + n] = v;
                    if (a.y16) a.y16[(size_t)t * N + n] = __float2bfloat16_rn(v);
                }
            }
        } else {
            for (int e = tid; e < T * ROWS; e += NTH) {
                const int t = e / ROWS, r = e % ROWS, n = tile * ROWS + r;
                const float *p = red + t * RP + r;
                if (n < N) {
                    const float v = ((p[0] + p[WS]) + p[2 * WS]) + p[3 * WS];
                    float *yp = sl.y + (size_t)t * N + n;
                    *yp = a.acc ? __fadd_rn(*yp, v) : v;
                }
            }
        }
        return;
    }
    /* K split over the S blocks of a cluster (rank = split): each block's [T][ROWS] partial in its
     * own shared memory (over red: first into registers), one cluster barrier, then rank r adds
     * tokens [rT/S, (r+1)T/S) of all S partials in split order (distributed shared memory), one
     * more barrier before leaving */
    constexpr int PER = XR * ROWS / NTH;
    float pv[PER];
#pragma unroll
    for (int i = 0; i < PER; i++) {
        const int e = tid + i * NTH, t = e / ROWS, r = e % ROWS;
        const float *p = red + t * RP + r;
        pv[i] = t < T ? ((p[0] + p[WS]) + p[2 * WS]) + p[3 * WS] : 0.f;
    }
    __syncthreads();
    float *own = red;
#pragma unroll
    for (int i = 0; i < PER; i++) own[tid + i * NTH] = pv[i];
    cooperative_groups::cluster_group cl = cooperative_groups::this_cluster();
    cl.sync();
    const float *rem[8];
#pragma unroll
    for (int s = 0; s < 8; s++) rem[s] = s < S ? cl.map_shared_rank(own, s) : own;
    const int t0 = split * T / S, t1 = (split + 1) * T / S;
    if (NORM == 2) { /* 1/rms of this block's tokens (every block's chunk sums are in before cl.sync) */
        if (tid < t1 - t0) sinv[tid] = bfm_inv(cl, pss, t0 + tid, nch, K, a.eps);
        __syncthreads();
    }
    if (glu) {
        for (int e = t0 * (ROWS / 2) + tid; e < t1 * (ROWS / 2); e += NTH) {
            const int t = e / (ROWS / 2), r = e % (ROWS / 2), n = tile * (ROWS / 2) + r, i = t * ROWS + r;
            float gg[8], uu[8];
#pragma unroll
            for (int s = 0; s < 8; s++)
                if (s < S) { gg[s] = rem[s][i]; uu[s] = rem[s][i + ROWS / 2]; }
            float vg = gg[0], vu = uu[0];
#pragma unroll
            for (int s = 1; s < 8; s++)
                if (s < S) { vg += gg[s]; vu += uu[s]; }
            if (NORM == 2) { vg *= sinv[t - t0]; vu *= sinv[t - t0]; }
            if (n < N) {
                const float v = glu_act(vg, vu, a.gelu);
                sl.y[(size_t)t * N + n] = v;
                if (a.y16) a.y16[(size_t)t * N + n] = __float2bfloat16_rn(v);
            }
        }
    } else {
        /* four outputs per thread at a time: their partials and (acc) their y loaded together */
        const int e1 = t1 * ROWS;
        for (int eb = t0 * ROWS + tid; eb < e1; eb += 4 * NTH) {
            float sum[4], yo[4];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int e = eb + u * NTH, t = e / ROWS, n = tile * ROWS + e % ROWS;
                sum[u] = 0.f;
                yo[u] = 0.f;
                if (e < e1) {
                    float v[8];
#pragma unroll
                    for (int s = 0; s < 8; s++)
                        if (s < S) v[s] = rem[s][e];
                    sum[u] = v[0];
#pragma unroll
                    for (int s = 1; s < 8; s++)
                        if (s < S) sum[u] += v[s];
                    if (NORM == 2) sum[u] *= sinv[t - t0];
                    if (a.acc && n < N) yo[u] = sl.y[(size_t)t * N + n];
                }
            }
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int e = eb + u * NTH, t = e / ROWS, n = tile * ROWS + e % ROWS;
                if (e < e1 && n < N) sl.y[(size_t)t * N + n] = a.acc ? __fadd_rn(yo[u], sum[u]) : sum[u];
            }
        }
    }
    cl.sync(); /* the other blocks may still read this one's partial */
}

/* --- host side --- */

/* KILN_CUDA_BFMMA: 0 = off (cuBLASLt), N = up to N tokens (default 64, at most 64) */
static int bfm_max_t(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("KILN_CUDA_BFMMA");
        v = e ? atoi(e) : 64;
        if (v < 0) v = 0;
        if (v > 64) v = 64;
    }
    return v;
}

/* K splits (the cluster size): ~4 stages (256 columns) per split, a power of two up to 8 — by K
 * only, so every weight of a multi launch has the same and a token's sums never depend on T */
/* KILN_CUDA_BFMMA_KSPLIT=C: ~C columns per split instead of 256 (a multiple of 64; read once; for
 * the 64-row step's A/B: fewer splits = fewer blocks and less reduction, more stages a block) */
static int bfm_kcols(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("KILN_CUDA_BFMMA_KSPLIT");
        v = e && atoi(e) >= 64 && atoi(e) % 64 == 0 ? atoi(e) : 256;
    }
    return v;
}
static int bfm_splits(int K) {
    int S = K / bfm_kcols();
    if (S > 8) S = 8;
    if (S < 1) S = 1;
    while (S & (S - 1)) S &= S - 1;
    return S;
}

template <int NT, int SPLIT, int RW, int NORM = 0, bool X16 = false> static void bfm_launch(cuda_impl_t *c, const bfm_args_t &a, int blocks, int S) {
    static int attr;
    const size_t sm = bfm_smem<NT, RW, X16>();
    if (!attr) {
        cudaCheck(cudaFuncSetAttribute(bfm_kernel<NT, SPLIT, RW, NORM, X16>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
        attr = 1;
    }
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[2];
    const int na = cuda_pdl_cluster_attrs(at, true, S);
    cfg.gridDim = dim3(blocks); cfg.blockDim = dim3(128 * RW); cfg.dynamicSmemBytes = sm; cfg.stream = c->stream;
    cfg.attrs = at; cfg.numAttrs = na;
    cudaCheck(cudaLaunchKernelEx(&cfg, bfm_kernel<NT, SPLIT, RW, NORM, X16>, a));
}

/* the instantiation for (NT, split): NT = 1/2/4/8 token tiles of 8 by T */
template <int RW, int NORM> static void bfm_launch_nt(cuda_impl_t *c, const bfm_args_t &a, int blocks, int S, int NT, int split) {
    switch (NT * 2 + (split ? 1 : 0)) {
    case 2: bfm_launch<1, 0, RW, NORM>(c, a, blocks, S); break;
    case 3: bfm_launch<1, 1, RW, NORM>(c, a, blocks, S); break;
    case 4: bfm_launch<2, 0, RW, NORM>(c, a, blocks, S); break;
    case 5: bfm_launch<2, 1, RW, NORM>(c, a, blocks, S); break;
    case 8: bfm_launch<4, 0, RW, NORM>(c, a, blocks, S); break;
    case 9: bfm_launch<4, 1, RW, NORM>(c, a, blocks, S); break;
    case 16: bfm_launch<8, 0, RW, NORM>(c, a, blocks, S); break;
    default: bfm_launch<8, 1, RW, NORM>(c, a, blocks, S); break;
    }
}

template <int RW> static void bfm_launch_t(cuda_impl_t *c, const bfm_args_t &a, int blocks, int S, int T, int split) {
    const int NT = T <= 8 ? 1 : T <= 16 ? 2 : T <= 32 ? 4 : 8;
    if (RW == 1 && a.x16) { /* x in bf16 from its producer (host: single rounding, no norm) */
        switch (NT) {
        case 1: bfm_launch<1, 0, 1, 0, true>(c, a, blocks, S); break;
        case 2: bfm_launch<2, 0, 1, 0, true>(c, a, blocks, S); break;
        case 4: bfm_launch<4, 0, 1, 0, true>(c, a, blocks, S); break;
        default: bfm_launch<8, 0, 1, 0, true>(c, a, blocks, S); break;
        }
    } else if (RW == 1 && a.norm == 1) bfm_launch_nt<1, 1>(c, a, blocks, S, NT, split); /* the norm in the prologue: 64-row blocks only */
    else if (RW == 1 && a.norm == 2) bfm_launch_nt<1, 2>(c, a, blocks, S, NT, split); /* 1/rms applied to the sums */
    else bfm_launch_nt<RW, 0>(c, a, blocks, S, NT, split);
}

/* KILN_CUDA_BFMMA_ROWS=64|128: rows per block (default 64) */
static int bfm_rw(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("KILN_CUDA_BFMMA_ROWS");
        v = e && atoi(e) == 128 ? 2 : 1;
    }
    return v;
}

/* the weights it takes: bf16, K % 64, 16-byte aligned rows, and small enough that a 64-row tile
 * re-reading x per stage stays cheap next to the weight (llama-3-8b's q/o/gate/up/down, lm_heads
 * stay on cuBLASLt: at 151936 × 1024 this kernel measured 237 µs against cuBLASLt's 92) */
static int bfm_ok(const dweight_t *w, int K) {
    return w->dtype == DT_BF16 && w->cols == K && K % BFM_KC == 0 && !((uintptr_t)w->data & 15) && w->rows > 0 && w->rows <= 8192 &&
           (size_t)w->rows * K <= ((size_t)8 << 20);
}

/* KILN_CUDA_BFMMA_FUSE (opt-in, read once): the fused decode ops (rms_matmul_multi, rms_matmul_glu,
 * matmul_add) at 3..64 tokens here. 1: the norm bitwise rms_norm4_kernel's, applied before the
 * rounding (the whole split range waits in the ring for the statistics); 2: x·(off + w) rounded and
 * the sums scaled by 1/rms (the statistics from the ring after the loop; the same precision class,
 * not bitwise the separate ops); 0 / unset (default): they decline, the model runs add_rms_norm +
 * the plain launches. Measured SLOWER at 64 rows (qwen3-0.6b bf16 c=64 16.6-17.3k tok/s with 1 or 2
 * against 19.1-19.6k without, the same binary; bench/cuda/RESULTS.md, session 14, helper-90). */
int cuda_bfmma_fuse_on(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("KILN_CUDA_BFMMA_FUSE");
        v = !e ? 0 : !strcmp(e, "1") ? 1 : !strcmp(e, "2") ? 2 : 0;
    }
    return v;
}

/* y[i] = x·W[i]ᵀ for n bf16 weights of one K (glu: n = 2, y[0] = act(x·Wgᵀ) ⊙ (x·Wuᵀ)); split:
 * x as hi + lo; ex (NULL: none): the norm of x in the prologue / y += in the stores (bfm_args_t).
 * Returns -1 (nothing launched) where it does not apply. */
int cuda_bfmma_ex(cuda_impl_t *c, int n, float *const *y, const float *x, int T, const dweight_t *const *w, int split, int glu, int gelu,
                  const bfm_ext_t *ex) {
    if (T < 3 || T > bfm_max_t() || n < 1 || n > BFM_MAXW || ((uintptr_t)x & 15)) return -1;
    const int K = w[0]->cols;
    for (int i = 0; i < n; i++)
        if (!bfm_ok(w[i], K)) return -1;
    if (glu && (n != 2 || w[0]->rows != w[1]->rows)) return -1;
    bfm_args_t a = {};
    a.x = x; a.T = T; a.K = K; a.glu = glu; a.gelu = gelu;
    const int S = bfm_splits(K), ns = glu ? 1 : n, rw = bfm_rw(), rows = BFM_ROWS * rw;
    if (ex && ex->norm) {
        /* rms_norm4_kernel's order at one float4 per thread (256 < K <= 1024, K % 128 == 0), each
         * split's range whole 128-column chunks and at most the ring (bfm_kernel's norm) */
        if (rw != 1 || K <= 256 || K > 1024 || K % 128 || S < 2 || (K / S) % 128 || K / S > BFM_NS * BFM_KC || ((uintptr_t)ex->nw & 15)) return -1;
        a.norm = ex->norm == 2 ? 2 : 1; a.nw = ex->nw; a.off = ex->off; a.eps = ex->eps;
    }
    if (ex && ex->acc) {
        if (glu) return -1;
        a.acc = 1;
    }
    int blocks = 0;
    for (int i = 0; i < ns; i++) {
        bfm_slot_t &s = a.s[i];
        s.W = (const __nv_bfloat16 *)w[i]->data;
        s.Wu = glu ? (const __nv_bfloat16 *)w[1]->data : NULL;
        s.y = y[i];
        s.N = w[i]->rows;
        s.S = S;
        s.tiles = glu ? cdiv(s.N, rows / 2) : cdiv(s.N, rows);
        s.blk0 = blocks;
        blocks += s.tiles * S;
    }
    a.n = ns;
    /* X16: x's bf16 copy from its producer (single rounding, no norm, 64-row blocks); the GLU's
     * outputs in bf16 too where a next matmul may want them */
    const size_t nx = (size_t)T * K, ny = (size_t)T * a.s[0].N;
    static int bx = -1; /* KILN_CUDA_BFMMA_X16=0: this kernel converts x itself (the A/B of its own X16 use) */
    if (bx < 0) bx = !(getenv("KILN_CUDA_BFMMA_X16") && !strcmp(getenv("KILN_CUDA_BFMMA_X16"), "0"));
    if (bx && !split && !a.norm && rw == 1) {
        a.x16 = cuda_x16_get(c, x, nx);
        if (!a.x16) cuda_x16_note(c, nx); /* the next producer of as many floats writes the copy */
    }
    if (bx && glu && !split) a.y16 = cuda_x16_want(c, ny); /* after get: another buffer than x16's */
    if (rw == 2) bfm_launch_t<2>(c, a, blocks, S, T, split);
    else bfm_launch_t<1>(c, a, blocks, S, T, split);
    if (a.y16) cuda_x16_set(c, y[0], ny);
    return 0;
}
int cuda_bfmma(cuda_impl_t *c, int n, float *const *y, const float *x, int T, const dweight_t *const *w, int split, int glu, int gelu) {
    return cuda_bfmma_ex(c, n, y, x, T, w, split, glu, gelu, NULL);
}
