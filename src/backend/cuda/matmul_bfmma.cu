/* matmul_bfmma.cu — bf16 weights at 3..64 tokens (batched decode) on mma.sync, in place of
 * cuBLASLt (KILN_CUDA_BFMMA=0: cuBLASLt as before). Two kernels: bfm_kernel (v1, described here;
 * the hi/lo split, 128-row blocks and the fusions) and bfm2_kernel (v2, the default for the single
 * rounding since session 16; KILN_CUDA_BFMMA_V=1: v1 everywhere — its story sits above that kernel, further down).
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
    int nsl;   /* bfm2_kernel: ring slots (stages in flight at once) */
    int trig0; /* bfm2_kernel: pdl_trigger right after the prologue's loads (else after the main loop) */
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


/* --- v2 (default; KILN_CUDA_BFMMA_V=1: bfm_kernel above) ---
 * Why: ncu of the 64-row step (session 15) showed bfm_kernel's time following blocks per SM, not
 * bytes: each block is a short serial chain — 3 stages issued, the 4th only once the first landed
 * (two DRAM round trips for 32 KB of weights), 128 accumulator registers a thread (200 in all: two
 * blocks an SM, gate/up's 384 blocks two waves), then the four k-step warps' 64 × 64 sums added
 * through shared memory (64 KB written and read back) before the cluster's DSMEM reduction.
 * bfm2_kernel keeps the shape (64 weight rows × all tokens × the split's K range, the same K split
 * over a cluster, the same DSMEM reduction in split order) and changes the inside:
 *  - warp w owns weight rows 16w..16w+15 for every k-step (A by ldmatrix.x4 of its own rows, B =
 *    x by ldmatrix.x4 from the bf16 ring — each x fragment read by the four warps), so a thread
 *    holds 8·NT·... = 32 accumulators at 64 tokens, no cross-warp sum: the partial goes from
 *    registers straight to shared memory (or, unsplit, to y);
 *  - the whole split range in flight at once where it fits (a.nsl ring slots, up to 6 with X16:
 *    qwen3-0.6b's q/k/v/o/gate/up 4 stages, down 6 — one DRAM round trip), refilled slot by slot
 *    past that (K > 6·64·S: llama-3-8b's k/v);
 *  - fewer registers (123 at 64 tokens; __launch_bounds__(128, 4)) and the ring sized per launch so
 *    the grid is one wave where it can be (bfm2_slots: the most slots, up to the split's stages, at
 *    which cudaOccupancyMaxActiveClusters holds every cluster): q/k/v 4 X16 stages (70 KB, three
 *    blocks an SM, 92 clusters of 4 ≥ 64), gate/up's 384 blocks 3 slots (four an SM) — with 4 slots
 *    they were two waves (92 clusters < 96; ncu 19.8 µs against 11.9 for q/k/v's one wave);
 *  - pdl_trigger once the prologue's loads are out (KILN_CUDA_BFMMA_TRIG=late: after the main loop,
 *    as v1), so the next PDL kernel's blocks start and prefetch their weights during this one;
 *  - GLU tiles interleave gate and up by 8 rows (warp w: gate rows 8w..8w+7, then the same up
 *    rows), so an output's gate and up sums sit in one thread's c0/c2 (c1/c3) fragments.
 * Numerics: each output is one f32 chain over the split's k-steps in order (16 products an MMA),
 * then the splits added in order — a different order from bfm_kernel's (k-step-strided warps), so
 * v1 and v2 differ in the last bits; within v2 nothing depends on T, on the other weights of a
 * launch or on X16 (f32 x rounded per fragment gives the same operands): bitwise T-invariant,
 * multi = alone, GLU = matmul + matmul + glu, X16 = f32. Single rounding only (no hi/lo split,
 * no fused norm/add: those stay on v1).
 * Measured (session 16, helper-h97; ncu of a 64-row qwen3-0.6b step, µs a layer): q/k/v 18.6 -> 11.7,
 * o 9.5 -> 10.6 (f32 x from the attention: every warp converts the whole x tile), gate/up 18.9 ->
 * 14.7 (one wave), down 10.4 -> 11.5; the engine's 64-row step 2.36 -> 2.14 ms, steady c=64 decode
 * +9.6 %. What still bounds it: the per-warp chain (~2400 instructions a warp at ~6 cycles each with
 * two warps a scheduler; DRAM at < 1 TB/s) — a wgmma form would issue a stage in 4 instructions. */
__device__ __forceinline__ void ldsm_x2(uint32_t (&r)[2], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"((unsigned)__cvta_generic_to_shared(p)));
}
/* cp.async.wait_group with a count known only at run time (uniform across the block) */
__device__ __forceinline__ void cp_wait_dyn(int n) {
    switch (n) {
    case 0: cp_wait<0>(); break;
    case 1: cp_wait<1>(); break;
    case 2: cp_wait<2>(); break;
    case 3: cp_wait<3>(); break;
    case 4: cp_wait<4>(); break;
    default: cp_wait<5>(); break;
    }
}
#define BFM2_MAXSL 6 /* ring slots with X16 (f32 x: 4) */
#define BFM2_RP 68   /* partial row pitch in floats: [token][row] stores conflict-free */
template <int NT, bool X16> static size_t bfm2_stage() { return (size_t)BFM_ROWS * BFM_KC * 2 + 8 * NT * BFM_XP * (X16 ? 2 : 4); }
template <int NT, bool X16> static size_t bfm2_smem(int nsl) {
    const size_t ring = (size_t)nsl * bfm2_stage<NT, X16>(), part = (size_t)8 * NT * BFM2_RP * 4;
    return ring > part ? ring : part;
}

/* TS = 1 (default): warp w = weight rows 16w..16w+15 × all tokens; TS = 2 (opt-in,
 * KILN_CUDA_BFMMA_TS=2, grids of at most one block an SM: o, down): 8 warps, warp w = rows 16(w%4)..
 * × token half w/4 — the same sums (each output still one warp's chain over the same k-steps), half
 * the chain per warp, two warps a scheduler instead of one; measured slower (bfm2_ts_on) */
template <int NT, bool X16, int TS>
__global__ void __launch_bounds__(128 * TS, 4 / TS) bfm2_kernel(const bfm_args_t a) {
    extern __shared__ __align__(16) unsigned char smem[];
    constexpr int XR = 8 * NT, XB = X16 ? 2 : 4, WST = BFM_ROWS * BFM_KC * 2, STB = WST + XR * BFM_XP * XB, NTH = 128 * TS;
    constexpr int JN = NT / TS; /* token tiles of 8 a warp */
    static_assert(JN >= 1 && JN * TS == NT, "token split");
    const int tid = threadIdx.x, lane = tid & 31, warp = (tid >> 5) & 3, j0 = (tid >> 7) * JN, g = lane >> 2, q = lane & 3;
    int si = 0;
    while (si + 1 < a.n && (int)blockIdx.x >= a.s[si + 1].blk0) si++;
    const __nv_bfloat16 *W = a.s[si].W, *Wu = a.s[si].Wu;
    float *const y = a.s[si].y;
    const int N = a.s[si].N, S = a.s[si].S, b = blockIdx.x - a.s[si].blk0, tile = b / S, split = b % S;
    const int T = a.T, K = a.K, kst = K / BFM_KC, glu = a.glu, nsl = a.nsl;
    const int st0 = (int)((long)split * kst / S), nst = (int)((long)(split + 1) * kst / S) - st0;
    /* this thread's weight chunks per stage: local rows tid/8 + (NTH/8)i, 16-byte chunk tid%8; GLU:
     * local row r is gate (r%16 < 8) or up row tile·32 + 8·(r/16) + r%8 */
    constexpr int WCH = 4 / TS;
    const __nv_bfloat16 *wrow[WCH];
#pragma unroll
    for (int i = 0; i < WCH; i++) {
        const int r = tid / 8 + (NTH / 8) * i;
        int n = glu ? tile * 32 + 8 * (r / 16) + (r & 7) : tile * BFM_ROWS + r;
        if (n > N - 1) n = N - 1;
        wrow[i] = (glu && (r & 8) ? Wu : W) + (size_t)n * K + (size_t)st0 * BFM_KC + (tid & 7) * 8;
    }
    auto load_w = [&](int st) {
        unsigned char *ws = smem + (st % nsl) * STB;
#pragma unroll
        for (int i = 0; i < WCH; i++) {
            const int r = tid / 8 + (NTH / 8) * i, ch = tid & 7;
            cp_async16(ws + r * 128 + ((ch ^ (r & 7)) << 4), wrow[i] + st * BFM_KC);
        }
    };
    auto load_x = [&](int st) {
        unsigned char *xs = smem + (st % nsl) * STB + WST;
        if (X16) {
            const __nv_bfloat16 *xg = a.x16 + (size_t)(st0 + st) * BFM_KC;
            for (int c = tid; c < T * 8; c += NTH) cp_async16(xs + ((c >> 3) * BFM_XP + (c & 7) * 8) * 2, xg + (size_t)(c >> 3) * K + (c & 7) * 8);
        } else {
            const float *xg = a.x + (size_t)(st0 + st) * BFM_KC;
            for (int c = tid; c < T * 16; c += NTH) cp_async16(xs + ((c >> 4) * BFM_XP + (c & 15) * 4) * 4, xg + (size_t)(c >> 4) * K + (c & 15) * 4);
        }
    };
    /* tokens past T: zero in every slot (never written by cp.async; their outputs are not stored) */
    if (T < XR)
        for (int s = 0; s < nsl; s++) {
            uint32_t *xs = (uint32_t *)(smem + s * STB + WST);
            for (int i = T * BFM_XP * XB / 4 + tid; i < XR * BFM_XP * XB / 4; i += NTH) xs[i] = 0u;
        }
    for (int s = 0; s < nsl; s++)
        if (s < nst) load_w(s);
    pdl_wait(); /* x (and y) belong to earlier kernels */
    for (int s = 0; s < nsl; s++) { /* nsl groups (empty past nst): the loop's wait counts on it */
        if (s < nst) load_x(s);
        cp_commit();
    }
    if (a.trig0) pdl_trigger(); /* the next kernel's blocks may take free slots and issue their weight loads now */
    float acc[JN][4];
#pragma unroll
    for (int j = 0; j < JN; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[j][e] = 0.f;
    for (int i = 0; i < nst; i++) {
        cp_wait_dyn(nsl - 1); /* one group committed per slot, then one per iteration: stage i's is in */
        __syncthreads();
        const unsigned char *ws = smem + (i % nsl) * STB, *xs = ws + WST;
#pragma unroll
        for (int kk = 0; kk < BFM_KC / 16; kk++) {
            uint32_t af[4];
            {
                const int r = warp * 16 + (lane & 15), ch = 2 * kk + (lane >> 4);
                ldsm_x4(af, ws + r * 128 + ((ch ^ (r & 7)) << 4));
            }
            uint32_t bq[JN][2];
            if constexpr (X16) {
                if constexpr (JN == 1) {
                    uint32_t r2[2];
                    ldsm_x2(r2, xs + ((j0 * 8 + (lane & 7)) * BFM_XP + 16 * kk + ((lane >> 3) & 1) * 8) * 2);
                    bq[0][0] = r2[0]; bq[0][1] = r2[1];
                } else {
#pragma unroll
                    for (int jp = 0; jp < JN / 2; jp++) {
                        uint32_t r4[4];
                        const int t = (j0 + 2 * jp + (lane >> 4)) * 8 + (lane & 7);
                        ldsm_x4(r4, xs + (t * BFM_XP + 16 * kk + ((lane >> 3) & 1) * 8) * 2);
                        bq[2 * jp][0] = r4[0]; bq[2 * jp][1] = r4[1]; bq[2 * jp + 1][0] = r4[2]; bq[2 * jp + 1][1] = r4[3];
                    }
                }
            } else {
#pragma unroll
                for (int j = 0; j < JN; j++) {
                    const float *xp = (const float *)xs + ((j0 + j) * 8 + g) * BFM_XP + 16 * kk + 2 * q;
                    const float2 v0 = *(const float2 *)xp, v1 = *(const float2 *)(xp + 8);
                    bq[j][0] = bf2_bits(__floats2bfloat162_rn(v0.x, v0.y));
                    bq[j][1] = bf2_bits(__floats2bfloat162_rn(v1.x, v1.y));
                }
            }
#pragma unroll
            for (int j = 0; j < JN; j++) mma_bf16(acc[j], af, bq[j][0], bq[j][1]);
        }
        if (i + nsl < nst) { /* refill this slot (every warp is past it) */
            __syncthreads();
            load_w(i + nsl);
            load_x(i + nsl);
        }
        cp_commit();
    }
    if (!a.trig0) pdl_trigger();
    /* c0/c1: local row 16w + g, tokens 8(j0 + j) + 2q, +1; c2/c3: row 16w + g + 8 (GLU: gate / up of
     * output tile·32 + 8w + g) */
    if (S == 1) {
#pragma unroll
        for (int j = 0; j < JN; j++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int t = (j0 + j) * 8 + 2 * q + h;
                if (t >= T) continue;
                if (glu) {
                    const int n = tile * 32 + warp * 8 + g;
                    if (n < N) {
                        const float v = glu_act(acc[j][h], acc[j][2 + h], a.gelu);
                        y[(size_t)t * N + n] = v;
                        if (a.y16) a.y16[(size_t)t * N + n] = __float2bfloat16_rn(v);
                    }
                } else {
                    const int n = tile * BFM_ROWS + warp * 16 + g;
                    if (n < N) y[(size_t)t * N + n] = acc[j][h];
                    if (n + 8 < N) y[(size_t)t * N + n + 8] = acc[j][2 + h];
                }
            }
        return;
    }
    /* K split over the S blocks of a cluster (rank = split): the partial [token][local row] over the
     * ring's start, one cluster barrier, rank r adds tokens [rT/S, (r+1)T/S) of all S partials in
     * split order through distributed shared memory, one more barrier before leaving */
    __syncthreads(); /* every warp is done with the ring */
    float *own = (float *)smem;
#pragma unroll
    for (int j = 0; j < JN; j++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float *p = own + ((j0 + j) * 8 + 2 * q + h) * BFM2_RP + warp * 16 + g;
            p[0] = acc[j][h];
            p[8] = acc[j][2 + h];
        }
    cooperative_groups::cluster_group cl = cooperative_groups::this_cluster();
    cl.sync();
    const float *rem[8];
#pragma unroll
    for (int s = 0; s < 8; s++) rem[s] = s < S ? cl.map_shared_rank(own, s) : own;
    const int t0 = split * T / S, t1 = (split + 1) * T / S;
    constexpr int U = 4; /* outputs a thread takes at once: their S remote loads in flight together */
    if (glu) {
        const int e0 = t0 * 32, e1 = t1 * 32;
        for (int eb = e0 + tid; eb < e1; eb += U * NTH) {
            float vg[U], vu[U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int e = eb + u * NTH, t = e >> 5, o = e & 31, i = t * BFM2_RP + 16 * (o >> 3) + (o & 7);
                float gg[8], uu[8];
#pragma unroll
                for (int s = 0; s < 8; s++)
                    if (s < S && e < e1) { gg[s] = rem[s][i]; uu[s] = rem[s][i + 8]; }
                vg[u] = gg[0]; vu[u] = uu[0];
#pragma unroll
                for (int s = 1; s < 8; s++)
                    if (s < S) { vg[u] += gg[s]; vu[u] += uu[s]; }
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int e = eb + u * NTH, t = e >> 5, n = tile * 32 + (e & 31);
                if (e < e1 && n < N) {
                    const float v = glu_act(vg[u], vu[u], a.gelu);
                    y[(size_t)t * N + n] = v;
                    if (a.y16) a.y16[(size_t)t * N + n] = __float2bfloat16_rn(v);
                }
            }
        }
    } else {
        const int e0 = t0 * BFM_ROWS, e1 = t1 * BFM_ROWS;
        for (int eb = e0 + tid; eb < e1; eb += U * NTH) {
            float sum[U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int e = eb + u * NTH, i = (e >> 6) * BFM2_RP + (e & 63);
                float v[8];
#pragma unroll
                for (int s = 0; s < 8; s++)
                    if (s < S && e < e1) v[s] = rem[s][i];
                sum[u] = v[0];
#pragma unroll
                for (int s = 1; s < 8; s++)
                    if (s < S) sum[u] += v[s];
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int e = eb + u * NTH, t = e >> 6, n = tile * BFM_ROWS + (e & 63);
                if (e < e1 && n < N) y[(size_t)t * N + n] = sum[u];
            }
        }
    }
    cl.sync(); /* the other blocks may still read this one's partial */
}

template <int NT, bool X16, int TS> static void bfm2_attr(void) {
    static int attr;
    if (!attr) {
        cudaCheck(cudaFuncSetAttribute(bfm2_kernel<NT, X16, TS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bfm2_smem<NT, X16>(BFM2_MAXSL)));
        attr = 1;
    }
}
/* blocks of bfm2_kernel<NT, X16, 1> with nsl ring slots in clusters of S that can be resident at
 * once (cudaOccupancyMaxActiveClusters; S = 1: blocks an SM × SMs), cached per (NT, X16, S, nsl) */
template <int NT, bool X16> static int bfm2_resident(cuda_impl_t *c, int S, int nsl) {
    static int tab[4][BFM2_MAXSL + 1]; /* S = 1, 2, 4, 8 */
    const int si = S >= 8 ? 3 : S >= 4 ? 2 : S >= 2 ? 1 : 0;
    if (S != 1 << si) return 0; /* not a power of two (KILN_CUDA_BFMMA_KSPLIT): no fit */
    int &v = tab[si][nsl];
    if (!v) {
        bfm2_attr<NT, X16, 1>();
        const int smem = (int)bfm2_smem<NT, X16>(nsl), sms = c->sm_count > 0 ? c->sm_count : 132;
        int n = 0;
        if (S == 1) {
            if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, bfm2_kernel<NT, X16, 1>, 128, smem) != cudaSuccess) { cudaGetLastError(); n = 0; }
            n *= sms;
        } else {
            cudaLaunchConfig_t cfg = {};
            cudaLaunchAttribute at[2];
            cfg.numAttrs = cuda_pdl_cluster_attrs(NULL, at, false, S);
            cfg.gridDim = dim3(S * 64); cfg.blockDim = dim3(128); cfg.dynamicSmemBytes = smem; cfg.attrs = at;
            if (cudaOccupancyMaxActiveClusters(&n, (void *)bfm2_kernel<NT, X16, 1>, &cfg) != cudaSuccess) { cudaGetLastError(); n = 0; }
            n *= S;
        }
        v = n > 0 ? n : -1;
        if (getenv("KILN_CUDA_BFMMA_SHOW"))
            fprintf(stderr, "kiln cuda: bfm2_kernel<%d,%d> clusters of %d, %d slots (%d B): %d blocks resident\n", NT, (int)X16, S, nsl, smem, n);
    }
    return v > 0 ? v : 0;
}
/* KILN_CUDA_BFMMA_FIT=0: always the most slots (up to the split's stages), one wave or not */
static int bfm2_fit_on(void) {
    static int v = -1;
    if (v < 0) v = !(getenv("KILN_CUDA_BFMMA_FIT") && !strcmp(getenv("KILN_CUDA_BFMMA_FIT"), "0"));
    return v;
}
/* KILN_CUDA_BFMMA_TRIG=late: pdl_trigger after the main loop (v1's place); default early */
static int bfm2_trig0(void) {
    static int v = -1;
    if (v < 0) v = !(getenv("KILN_CUDA_BFMMA_TRIG") && !strcmp(getenv("KILN_CUDA_BFMMA_TRIG"), "late"));
    return v;
}
/* KILN_CUDA_BFMMA_TS=2 (opt-in): the 8-warp token split where a grid is at most one block an SM (o,
 * down). Measured SLOWER by ncu (session 16: o 10.6 -> 11.0 µs, down 11.5 -> 12.9 µs; more
 * instructions in all, the x fragments read by twice the warps), engine within noise: default 1 */
static int bfm2_ts_on(void) {
    static int v = -1;
    if (v < 0) v = getenv("KILN_CUDA_BFMMA_TS") && !strcmp(getenv("KILN_CUDA_BFMMA_TS"), "2");
    return v;
}
/* ring slots: the most (up to the split's stages, 6 with X16, 4 with f32 x) at which the whole grid
 * is resident at once; if none down to 2, the most (more waves either way: deep rings) */
template <int NT, bool X16> static int bfm2_slots(cuda_impl_t *c, int blocks, int S, int nst) {
    const int top = nst < (X16 ? BFM2_MAXSL : 4) ? nst : (X16 ? BFM2_MAXSL : 4);
    if (!bfm2_fit_on()) return top;
    for (int n = top; n >= 2; n--)
        if (bfm2_resident<NT, X16>(c, S, n) >= blocks) return n;
    return top;
}
template <int NT, bool X16> static void bfm2_launch(cuda_impl_t *c, bfm_args_t &a, int blocks, int S, int nst) {
    a.nsl = bfm2_slots<NT, X16>(c, blocks, S, nst);
    const int sms = c->sm_count > 0 ? c->sm_count : 132, ts = NT >= 2 && blocks <= sms && bfm2_ts_on() ? 2 : 1;
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[2];
    const int na = cuda_pdl_cluster_attrs(c, at, true, S);
    cfg.gridDim = dim3(blocks); cfg.blockDim = dim3(128 * ts); cfg.dynamicSmemBytes = bfm2_smem<NT, X16>(a.nsl); cfg.stream = c->stream;
    cfg.attrs = at; cfg.numAttrs = na;
    if constexpr (NT >= 2) {
        if (ts == 2) {
            bfm2_attr<NT, X16, 2>();
            cudaCheck(cudaLaunchKernelEx(&cfg, bfm2_kernel<NT, X16, 2>, a));
            return;
        }
    }
    bfm2_attr<NT, X16, 1>();
    cudaCheck(cudaLaunchKernelEx(&cfg, bfm2_kernel<NT, X16, 1>, a));
}
static void bfm2_launch_t(cuda_impl_t *c, bfm_args_t &a, int blocks, int S, int T) {
    const int NT = T <= 8 ? 1 : T <= 16 ? 2 : T <= 32 ? 4 : 8;
    const int nst = a.K / BFM_KC / S + ((a.K / BFM_KC) % S ? 1 : 0);
    a.trig0 = bfm2_trig0();
    switch (NT * 2 + (a.x16 ? 1 : 0)) {
    case 2: bfm2_launch<1, false>(c, a, blocks, S, nst); break;
    case 3: bfm2_launch<1, true>(c, a, blocks, S, nst); break;
    case 4: bfm2_launch<2, false>(c, a, blocks, S, nst); break;
    case 5: bfm2_launch<2, true>(c, a, blocks, S, nst); break;
    case 8: bfm2_launch<4, false>(c, a, blocks, S, nst); break;
    case 9: bfm2_launch<4, true>(c, a, blocks, S, nst); break;
    case 16: bfm2_launch<8, false>(c, a, blocks, S, nst); break;
    default: bfm2_launch<8, true>(c, a, blocks, S, nst); break;
    }
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
    const int na = cuda_pdl_cluster_attrs(c, at, true, S);
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

/* KILN_CUDA_BFMMA_V=1: bfm_kernel (v1) for every launch; default 2: bfm2_kernel where it applies
 * (single rounding, no fused norm/add, 64-row blocks, KILN_CUDA_BFMMA_FUSE unset or 0 — the fusions
 * exist only in v1 and must stay bitwise its separate ops, so with them on v1 runs everything) */
static int bfm_ver(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("KILN_CUDA_BFMMA_V");
        v = e && atoi(e) == 1 ? 1 : 2;
    }
    return v;
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
    if (bfm_ver() == 2 && !split && !a.norm && !a.acc && rw == 1 && !cuda_bfmma_fuse_on()) bfm2_launch_t(c, a, blocks, S, T);
    else if (rw == 2) bfm_launch_t<2>(c, a, blocks, S, T, split);
    else bfm_launch_t<1>(c, a, blocks, S, T, split);
    if (a.y16) cuda_x16_set(c, y[0], ny);
    return 0;
}
int cuda_bfmma(cuda_impl_t *c, int n, float *const *y, const float *x, int T, const dweight_t *const *w, int split, int glu, int gelu) {
    return cuda_bfmma_ex(c, n, y, x, T, w, split, glu, gelu, NULL);
}
