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
 * PDL: the first stages' weight tiles are issued before griddepcontrol.wait, x after it. */
#include "backend/cuda/mma_util.cuh"
#include "backend/cuda/glu_act.cuh"
#include <cooperative_groups.h>

#define BFM_ROWS 64
#define BFM_KC 64 /* columns per stage */
#define BFM_NS 4  /* ring stages */
#define BFM_XP 72 /* x row pitch in floats */
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
    int n, T, K, glu, gelu;
} bfm_args_t;

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"((unsigned)__cvta_generic_to_shared(p)));
}

template <int NT, int RW> static constexpr size_t bfm_smem() {
    return (size_t)BFM_NS * (RW * BFM_ROWS * BFM_KC * 2 + 8 * NT * BFM_XP * 4);
}

/* RW = 1: 64 rows, 4 warps; RW = 2: 128 rows, 8 warps (warp w: k-step w % 4, rows 64·(w / 4)..),
 * x read once per 128 rows instead of 64 */
template <int NT, int SPLIT, int RW>
__global__ void __launch_bounds__(128 * RW) bfm_kernel(const bfm_args_t a) {
    extern __shared__ __align__(16) unsigned char smem[];
    constexpr int XR = 8 * NT, ROWS = BFM_ROWS * RW, NTH = 128 * RW, RP = ROWS + 4;
    constexpr int WST = ROWS * BFM_KC * 2, STB = WST + XR * BFM_XP * 4;
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
    auto load_x = [&](int st) {
        float *xs = (float *)(smem + (st % BFM_NS) * STB + WST);
        for (int c = tid; c < T * 16; c += NTH) {
            const int t = c >> 4, ch = c & 15;
            cp_async16(xs + t * BFM_XP + ch * 4, xg + (size_t)t * K + st * BFM_KC + ch * 4);
        }
    };
    /* rows of x past T stay zero in every stage (cp.async never writes them) */
    for (int s = 0; s < BFM_NS; s++) {
        float *xs = (float *)(smem + s * STB + WST);
        for (int i = T * BFM_XP + tid; i < XR * BFM_XP; i += NTH) xs[i] = 0.f;
    }
#pragma unroll
    for (int s = 0; s < BFM_NS - 1; s++)
        if (s < nst) load_w(s);
    pdl_wait(); /* x (and y) belong to earlier kernels */
#pragma unroll
    for (int s = 0; s < BFM_NS - 1; s++) {
        if (s < nst) load_x(s);
        cp_commit();
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
        if (i + BFM_NS - 1 < nst) { load_w(i + BFM_NS - 1); load_x(i + BFM_NS - 1); }
        cp_commit();
        const unsigned char *ws = smem + (i % BFM_NS) * STB;
        const float *xs = (const float *)(ws + WST);
        uint32_t af[4][4];
#pragma unroll
        for (int m = 0; m < 4; m++) {
            const int r = half * 64 + m * 16 + (lane & 15), ch = 2 * ks + (lane >> 4);
            ldsm_x4(af[m], ws + r * 128 + ((ch ^ (r & 7)) << 4));
        }
#pragma unroll
        for (int j = 0; j < NT; j++) {
            const float *xp = xs + (j * 8 + g) * BFM_XP + 16 * ks + 2 * q;
            const float2 v0 = *(const float2 *)xp, v1 = *(const float2 *)(xp + 8);
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
    cp_wait<0>();
    __syncthreads();
    pdl_trigger();
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
                if (n < N) sl.y[(size_t)t * N + n] = glu_act(vg, vu, a.gelu);
            }
        } else {
            for (int e = tid; e < T * ROWS; e += NTH) {
                const int t = e / ROWS, r = e % ROWS, n = tile * ROWS + r;
                const float *p = red + t * RP + r;
                if (n < N) sl.y[(size_t)t * N + n] = ((p[0] + p[WS]) + p[2 * WS]) + p[3 * WS];
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
            if (n < N) sl.y[(size_t)t * N + n] = glu_act(vg, vu, a.gelu);
        }
    } else {
        for (int e = t0 * ROWS + tid; e < t1 * ROWS; e += NTH) {
            const int t = e / ROWS, r = e % ROWS, n = tile * ROWS + r;
            float v[8];
#pragma unroll
            for (int s = 0; s < 8; s++)
                if (s < S) v[s] = rem[s][e];
            float sum = v[0];
#pragma unroll
            for (int s = 1; s < 8; s++)
                if (s < S) sum += v[s];
            if (n < N) sl.y[(size_t)t * N + n] = sum;
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
static int bfm_splits(int K) {
    int S = K / 256;
    if (S > 8) S = 8;
    if (S < 1) S = 1;
    while (S & (S - 1)) S &= S - 1;
    return S;
}

template <int NT, int SPLIT, int RW> static void bfm_launch(cuda_impl_t *c, const bfm_args_t &a, int blocks, int S) {
    static int attr;
    const size_t sm = bfm_smem<NT, RW>();
    if (!attr) {
        cudaCheck(cudaFuncSetAttribute(bfm_kernel<NT, SPLIT, RW>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
        attr = 1;
    }
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[2];
    const int na = cuda_pdl_cluster_attrs(at, true, S);
    cfg.gridDim = dim3(blocks); cfg.blockDim = dim3(128 * RW); cfg.dynamicSmemBytes = sm; cfg.stream = c->stream;
    cfg.attrs = at; cfg.numAttrs = na;
    cudaCheck(cudaLaunchKernelEx(&cfg, bfm_kernel<NT, SPLIT, RW>, a));
}

template <int RW> static void bfm_launch_t(cuda_impl_t *c, const bfm_args_t &a, int blocks, int S, int T, int split) {
    const int NT = T <= 8 ? 1 : T <= 16 ? 2 : T <= 32 ? 4 : 8;
    switch (NT * 2 + (split ? 1 : 0)) {
    case 2: bfm_launch<1, 0, RW>(c, a, blocks, S); break;
    case 3: bfm_launch<1, 1, RW>(c, a, blocks, S); break;
    case 4: bfm_launch<2, 0, RW>(c, a, blocks, S); break;
    case 5: bfm_launch<2, 1, RW>(c, a, blocks, S); break;
    case 8: bfm_launch<4, 0, RW>(c, a, blocks, S); break;
    case 9: bfm_launch<4, 1, RW>(c, a, blocks, S); break;
    case 16: bfm_launch<8, 0, RW>(c, a, blocks, S); break;
    default: bfm_launch<8, 1, RW>(c, a, blocks, S); break;
    }
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

/* y[i] = x·W[i]ᵀ for n bf16 weights of one K (glu: n = 2, y[0] = act(x·Wgᵀ) ⊙ (x·Wuᵀ)); split:
 * x as hi + lo. Returns -1 (nothing launched) where it does not apply. */
int cuda_bfmma(cuda_impl_t *c, int n, float *const *y, const float *x, int T, const dweight_t *const *w, int split, int glu, int gelu) {
    if (T < 3 || T > bfm_max_t() || n < 1 || n > BFM_MAXW || ((uintptr_t)x & 15)) return -1;
    const int K = w[0]->cols;
    for (int i = 0; i < n; i++)
        if (!bfm_ok(w[i], K)) return -1;
    if (glu && (n != 2 || w[0]->rows != w[1]->rows)) return -1;
    bfm_args_t a = {};
    a.x = x; a.T = T; a.K = K; a.glu = glu; a.gelu = gelu;
    const int S = bfm_splits(K), ns = glu ? 1 : n, rw = bfm_rw(), rows = BFM_ROWS * rw;
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
    if (rw == 2) bfm_launch_t<2>(c, a, blocks, S, T, split);
    else bfm_launch_t<1>(c, a, blocks, S, T, split);
    return 0;
}
