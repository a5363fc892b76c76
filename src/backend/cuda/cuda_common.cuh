/* cuda_common.cuh — what every CUDA kernel file of the backend shares: the error-check
 * helpers (llm.c's cudaCheck: file, line and a hint), the backend's private state, the
 * device-side view of a weight, and scalar loads that decode any stored dtype.
 *
 * Only .cu files include this; the rest of kiln sees the backend through backend.h. */
#ifndef KILN_CUDA_COMMON_CUH
#define KILN_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cublasLt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "backend/backend.h"
#include "base/log.h"
}

/* A failed CUDA call is a bug or a broken device, not bad user input: print where and
 * why, then stop (the backend's ops return void, like the CPU's). */
void cuda_fail(cudaError_t err, const char *what, const char *file, int line);
void cublas_fail(cublasStatus_t st, const char *what, const char *file, int line);
#define cudaCheck(call) do { cudaError_t err_ = (call); if (err_ != cudaSuccess) cuda_fail(err_, #call, __FILE__, __LINE__); } while (0)
#define cublasCheck(call) do { cublasStatus_t st_ = (call); if (st_ != CUBLAS_STATUS_SUCCESS) cublas_fail(st_, #call, __FILE__, __LINE__); } while (0)
/* After a kernel launch: catches bad launch configurations at once. */
#define cudaLaunchCheck() cudaCheck(cudaGetLastError())

/* A weight as the kernels see it: the device copies of codes/data, scales and biases. */
typedef struct dweight {
    const void *data;       /* dense [rows, cols] in dtype; quantized [rows, cols*bits/32] u32 */
    const void *scales;     /* [rows, cols/group] in sb_dtype                                    */
    const void *biases;
    int rows, cols;
    int dtype, bits, group, sb_dtype; /* dtype_t values; bits: the codes' width on the device */
    int hbits;              /* the codes' width as stored (host): bits, or 2/3/5/6 where widen.cu made them 4/8 */
    /* where the host copy was, for views: a weight whose host bytes lie inside an uploaded
     * one (hyb_rows: a fused expert's gate/up rows) points into its device copy */
    const void *h_data, *h_scales, *h_biases;
    size_t data_bytes, sb_bytes;
    int alias;              /* a view: not freed at destroy */
    float *qd_wpart;        /* matmul_dequant.cu: the bound's QD_NP partial maxima and their maximum (device, its own even in a view; NULL until a prefill needs it) */
    __half *qd_f16;         /* matmul_dequant.cu: the weight dequantized to f16 (scaled by its 2^s), kept after its first prefill
                             * within the backend's weight cache budget (qdc_*); NULL: dequantized each prefill */
} dweight_t;

/* bytes of the weight's f16 form (the weight cache's unit: matmul_dequant.cu) */
static inline size_t dweight_f16_bytes(const dweight_t *w) { return (size_t)w->rows * w->cols * 2; }

/* The backend's state. One stream carries every op, so ops are ordered without events. */
typedef struct cuda_impl {
    cudaStream_t stream;
    cublasLtHandle_t lt;
    void *lt_workspace;
    size_t lt_workspace_bytes;
    /* host arrays (ints, rope frequencies) go through a pinned ring into a device ring.
     * Two rings take turns: after a synchronization (a full ring, a download) uploads go to
     * the other one, so a pointer an op got before it (not yet read by a kernel: attention's
     * tables, then its rope frequencies) still holds its bytes. Trade-off: twice the ring
     * memory (2 x 4 MB pinned + device) for not making each op upload everything at once.
     * An op must not see two restarts (its uploads fit one ring: it grows to twice the
     * largest single upload). */
    char *pin, *dring, *pin_alt, *dring_alt;
    size_t ring_cap, ring_off, ring_cap_alt;
    struct { const void *host; size_t bytes, off; } recent[16];
    int n_recent, next_recent;
    /* scratch: activations converted for cuBLASLt, dequantized weights, split-K partials */
    void *act16; size_t act16_bytes;
    void *ysplit; size_t ysplit_bytes; /* [2T, N] f32: the hi and lo halves of a split bf16 GEMM */
    void *wdeq; size_t wdeq_bytes;
    /* matmul_dequant.cu's weight cache: quantized weights kept dequantized (dweight_t.qd_f16) up to
     * qdc_budget bytes (KILN_CUDA_QDEQ_CACHE_GB / backend_t's option; 0: off); qdc_used so far */
    size_t qdc_budget, qdc_used;
    int qdc_full;           /* an allocation failed: no more weights are kept */
    float *part; size_t part_bytes;
    float *qpart; size_t qpart_bytes; /* qmma_wide_kernel: the split-K slots' partial sums [KS][T][N] */
    /* a 2..64-token MLX matmul's split sums not yet added (KILN_CUDA_QWG_DEFER, matmul_wgmma.cu): y, its
     * partials [ks][T][N] in qpart; the add_rms_norm after it reads them, every other op flushes first */
    struct { float *y; const float *part; int ks, T, N; long used; } dfr;
    /* a prefill rms_mlp's residual add not yet done (KILN_CUDA_QD_DEFER, matmul_dequant.cu): x[t] += rs[t]·d[t] over
     * T rows of n; the next rms_matmul_multi on x does it in its norm, every other op flushes first */
    struct { float *x; const float *d, *rs; int T, n; long used; } dra;
    void *delta; size_t delta_bytes; /* deltanet.cu prefill forms: normalized q, k, (decay, beta), log decay per token; the chunk form's T, P·T, coefficients */
    char *host_scratch[2]; size_t host_scratch_bytes[2]; /* per-op packing of host arrays */
    /* every weight this backend uploaded, freed at destroy (models may alias weights) */
    dweight_t **weights; int n_weights, cap_weights;
    int widen_said, widen_kept_said; /* widen.cu's two load-time log lines, each said once (cuda_backend.cu widen_bits) */
    int gemm_min_t;         /* T at/above which matmul goes through cuBLASLt (bf16 activations) */
    int gemm_min_t_bf16;    /* the same for bf16 weights (earlier: no dequantization needed) */
    int qmma;               /* MLX 4/8-bit from T >= qmma to 64 on tensor cores (matmul_qmma.cu); KILN_CUDA_QMMA=N, 0: off */
    int qmma_max_t;         /* ... up to this many tokens (KILN_CUDA_QMMA_MAX_T, default 64; above: dequantize + TF32) */
    /* Precision of x in the cuBLASLt matmuls (matmul.cu): 1 = x rounded once to bf16, 0 = x as
     * bf16 hi + lo (two GEMMs); -1 = the model's policy, backend_t.act_bf16_ok (llama/qwen3: 1).
     * KILN_CUDA_ACT=bf16 / split force one. */
    int act_bf16;
    /* MLX 4/8-bit weights above qmma's sizes: 1 = dequantized to bf16 for a bf16 GEMM (with x
     * rounded once), 0 = to f32 for TF32; -1 = bf16 only where KILN_CUDA_ACT=bf16 is forced (the
     * policy alone keeps TF32: 1.03-1.28e-2 on the MLX fixtures). KILN_CUDA_QDEQ=bf16 / f32. */
    int deq_bf16;
    /* CUDA graphs (step_begin/step_end): a step's ops are captured from the stream and
     * replayed as one graph at its first synchronizing call (download); the executable graph
     * is kept per (T, node count) and updated in place with the next step's parameters */
    int graphs;             /* KILN_CUDA_GRAPH=0 turns capture off */
    int graph_gemm;         /* capture steps that use cuBLASLt too (KILN_CUDA_GRAPH_GEMM=0: no) */
    int capturing, cap_T;
    /* cap_sig: the cluster shapes of the launches captured since the segment began (cuda_pdl_cluster_attrs
     * folds each in). An executable graph is updated in place only from a capture of the same (T, segment,
     * node count, cap_sig): cudaGraphExecUpdate took a decode attention whose splits went from 1 to 2 at
     * 129 positions (no cluster → clusters of 2) as a success and replayed it without the clusters — an
     * unspecified launch failure (session 32: `kiln bench --prompt-tokens 16|64 --gen-tokens 128`) */
    unsigned cap_sig;
    int graph_sig;          /* KILN_CUDA_GRAPH_SIG=0: cap_sig left out of the key (reproduces that crash; tests only) */
    int step_T;             /* tokens of the step in progress (step_begin)              */
    /* segments: every seg_len matmuls the capture so far is launched and a new one starts,
     * so the GPU runs the first layers while the host records the next (KILN_CUDA_GRAPH_SEG,
     * 0 = the whole step as one graph). seg_first > 0: the first segment closes after
     * seg_first matmuls (default 2) and each next one is twice as long, up to seg_len (KILN_CUDA_GRAPH_SEG_FIRST),
     * so the GPU starts the step sooner instead of idling while the host records 16 matmuls */
    int seg, seg_ops, seg_len, seg_first;
    struct { cudaGraphExec_t exec; int T, seg; size_t nodes; unsigned sig; } gx[64];
    int n_gx, next_gx;
    long graph_launches, graph_instantiations;
    int sm_count;
    size_t smem_optin;
    int attn_want;          /* decode attention: split-K until ~this many blocks per SM (KILN_CUDA_ATTN_WANT, default 2) */
    int attn_tiled;         /* KILN_CUDA_ATTN=tiled: decode steps use the tiled attention kernel too */
    /* KILN_CUDA_STEP_STATS=T: host wall time of steps of T tokens, split into issuing the ops
     * (step_begin → logits download), waiting for the GPU (the download's sync) and the time
     * between steps (the caller: sampling, engine bookkeeping); printed at destroy */
    int stats_T, in_stat;
    long st_n;
    double st_begin, st_end, st_issue, st_wait, st_outside;
    void *moe;              /* moe.cu's state: the layers' expert tables, scratch (cuda_moe_free) */
    /* matmul.cu at prefill sizes: the bf16 GEMMs of one x run side by side, weight i > 0 on
     * side[i - 1] with a cuBLASLt workspace of its own (made on first use); fork/join by events.
     * mm_conc_min_t: the fewest tokens (KILN_CUDA_MM_CONC=N, 0: never). The uses counters are
     * for the tests: calls side by side, and fused prefill ops taken (matmul_add, rms_matmul_*) */
    cudaStream_t side[3];
    cudaEvent_t ev_fork, ev_join[3];
    void *side_ws[3];
    int mm_conc_min_t, n_side;
    long mm_conc_uses, lt_fused_uses;
    void *mlp_gu, *mlp16; /* cuda_lt_rms_mlp's gate and up outputs (f32, one buffer) and the GLU's bf16 */
    size_t mlp_gu_bytes, mlp16_bytes;
    void *qdf; size_t qdf_bytes; /* matmul_dequant.cu's fused prefill ops: x's exponent, the GEMMs' alphas, the rows' scales, x as f16 */
    long qd_fused_uses;         /* ... and how often they ran (tests) */
    /* the one-launch batch-1 MLP (matmul_gemv.cu gemvp_mlp_kernel): its GLU output, its grid barrier's
     * two counters (zero between launches), how many launches took it (tests) */
    float *mlp_g;
    size_t mlp_g_bytes;
    unsigned *mlp_ctr;
    long mlp_pers_uses;
} cuda_impl_t;

static inline cuda_impl_t *cuda_impl(backend_t *be) { return (cuda_impl_t *)be->impl; }

/* Copies a host array to device memory on the backend's stream; the device pointer stays
 * valid until the next synchronizing download. Same pointer with same bytes as a recent
 * call: the earlier copy is reused (positions are passed to many ops per step). */
const void *cuda_host_to_dev(cuda_impl_t *c, const void *host, size_t bytes);
/* A host buffer of at least `need` bytes (which = 0: attention, 1: rope); an op packs all
 * its host arrays into one so it makes a single cuda_host_to_dev call (the ring may restart
 * between two calls, which would clobber the first copy before the kernel reads it). */
void *cuda_host_buf(cuda_impl_t *c, int which, size_t need);
/* A step's row_start [n_rows+1] and per-row pointers [n_rows] (recurrent states) in one host
 * buffer (cuda_host_buf 1), one copy; *ptr_off: where the pointers start in the device copy. */
const char *cuda_rows_to_dev(cuda_impl_t *c, int n_rows, const int32_t *row_start, float *const *ptrs, size_t *ptr_off);

/* The work list both attention kernels read (attention.cu's CUDA-core kernels and
 * attention_mma.cu's tensor-core one): a step's rows cut into tiles of up to TQ consecutive
 * tokens, the rows' block tables packed [n_rows][max_blocks], and the positions, built on the
 * host in one buffer and copied with one cuda_host_to_dev: [pos T][tables][tiles]. */
typedef struct attn_tile { int t0, n, row, pad; } attn_tile_t;
typedef struct attn_tiles {
    int n_tiles, max_blocks; /* tiles; the longest block table                                  */
    int max_n, max_len;      /* most tokens in a tile; the longest key range (window applied)   */
    int multi;               /* some row has more than one token                                */
    const int32_t *pos, *tables; /* device copies (attn_tiles_upload)                           */
    const attn_tile_t *tiles;
} attn_tiles_t;
/* Counts only (no copies), so a caller can decline the step first. */
void attn_tiles_count(const attn_args_t *aa, int TQ, attn_tiles_t *t);
/* Packs and uploads what attn_tiles_count counted (t holds its counts). */
void attn_tiles_upload(cuda_impl_t *c, const attn_args_t *aa, int T, int TQ, attn_tiles_t *t);
/* Waits for the stream; a step being captured is ended and launched first (every path that
 * synchronizes calls this: the capture then stops for the rest of the step). */
void cuda_sync(cuda_impl_t *c);
/* Ends a capture in progress (if any) and launches it, without waiting. */
void cuda_capture_flush(cuda_impl_t *c);
/* Called once per matmul: after seg_len of them (seg_first, 2·seg_first, ... at the start of a
 * step), launches the captured segment and starts capturing the next. */
void cuda_capture_tick(cuda_impl_t *c);
/* Grows a device scratch buffer (contents are not kept). */
void *cuda_scratch(cuda_impl_t *c, void **buf, size_t *have, size_t need);

/* --- scalar decoding on the device --- */
__device__ __forceinline__ float ld_f(const void *p, int dt, size_t i) {
    switch (dt) {
    case DT_F32: return ((const float *)p)[i];
    case DT_F16: return __half2float(((const __half *)p)[i]);
    default: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    }
}

/* The code at (r, c) of an MLX weight (any bit width: the row's little-endian bit stream). */
__device__ __forceinline__ uint32_t wcode(const dweight_t &w, size_t r, int c) {
    const uint32_t *row = (const uint32_t *)w.data + r * w.cols / 32 * w.bits;
    unsigned long long bit = (unsigned long long)c * w.bits;
    unsigned long long word = bit >> 5, off = bit & 31;
    unsigned long long v = row[word] >> off;
    if (off + w.bits > 32) v |= (unsigned long long)row[word + 1] << (32 - off);
    return (uint32_t)(v & ((1u << w.bits) - 1));
}

/* Element (r, c) of a weight as f32: the device twin of weight_row_f32. */
__device__ __forceinline__ float wload(const dweight_t &w, int r, int c) {
    if (w.dtype != DT_U32) return ld_f(w.data, w.dtype, (size_t)r * w.cols + c);
    uint32_t code = wcode(w, (size_t)r, c);
    size_t g = (size_t)r * (w.cols / w.group) + c / w.group;
    return ld_f(w.scales, w.sb_dtype, g) * (float)code + ld_f(w.biases, w.sb_dtype, g);
}

/* Code word i of an MLX 4/8-bit weight (CPW = 32 / bits codes of one row, all in one group:
 * groups are multiples of 8 columns) with that group's scale and bias — the word walk of the
 * dequantizing kernels (matmul.cu, matmul_dequant.cu). wpr = cols / CPW, ng = cols / group; scale
 * and bias come multiplied by m (1: as stored; matmul_dequant.cu: its power of two). */
template <int CPW>
__device__ __forceinline__ uint32_t wword(const dweight_t &w, size_t i, size_t wpr, int ng, float m, float &sc, float &bi) {
    const uint32_t word = __ldg((const uint32_t *)w.data + i);
    const size_t r = i / wpr;
    const int c0 = (int)(i % wpr) * CPW;
    const size_t gi = r * ng + c0 / w.group;
    sc = ld_f(w.scales, w.sb_dtype, gi) * m;
    bi = ld_f(w.biases, w.sb_dtype, gi) * m;
    return word;
}

/* --- programmatic dependent launch (PDL, sm_90) ---
 * A kernel launched with cuda_launch_pdl may start while the kernel before it on the stream
 * is still running (once every block of that one has called pdl_trigger() or exited; stream
 * capture records this as a programmatic graph edge). It must call pdl_wait() before it reads
 * anything earlier kernels wrote or writes anything they may still read (pdl_wait returns when
 * the earlier grid has completed and its memory is visible); what it does before (weight loads,
 * address math) overlaps the earlier kernel's tail and its own launch. Read data an earlier
 * kernel wrote with plain or .cg loads, not ld.global.nc (read-only for the kernel's lifetime,
 * which now overlaps the writer). pdl_trigger() in a kernel lets the next PDL-launched kernel
 * start early; without PDL both are no-ops. KILN_CUDA_PDL=0: plain launches (A/B). */
/* the block's largest of each thread's mx (256 threads): an xor tree per warp, then the 8 warp maxima in warp order
 * through ws[8], which the caller has finished reading (rmsnorm.cu's per-row exponents, the GLU's in elementwise.cu) */
__device__ __forceinline__ float block_max256(float mx, float *ws) {
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    __syncthreads(); /* ws may still be read (rms_inv_block): reused for the maxima */
    if ((threadIdx.x & 31) == 0) ws[threadIdx.x >> 5] = mx;
    __syncthreads();
    float m = ws[0];
    for (int i = 1; i < 8; i++) m = fmaxf(m, ws[i]);
    return m;
}

#include "backend/cuda/timeline.cuh" /* KILN_CUDA_TIMELINE builds: pdl_wait stamps the block's wait */
__device__ __forceinline__ void pdl_wait(void) {
#ifdef KILN_CUDA_TIMELINE
    const unsigned long long tl_a = tl_now();
    tl_rec *const tl_r = tl_reserve(1);
#endif
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#ifdef KILN_CUDA_TIMELINE
    tl_mark(tl_r, tl_a);
#endif
}
__device__ __forceinline__ void pdl_trigger(void) { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }
static inline int cuda_pdl_on(void) {
    static int v = -1;
    if (v < 0) { const char *e = getenv("KILN_CUDA_PDL"); v = !(e && !strcmp(e, "0")); }
    return v;
}
template <typename... P, typename... A>
static inline void cuda_launch_pdl(cudaStream_t s, void (*kern)(P...), dim3 grid, dim3 block, size_t smem, A &&...args) {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.gridDim = grid; cfg.blockDim = block; cfg.dynamicSmemBytes = smem; cfg.stream = s;
    cfg.attrs = at; cfg.numAttrs = cuda_pdl_on() ? 1 : 0;
    cudaCheck(cudaLaunchKernelEx(&cfg, kern, static_cast<A &&>(args)...));
}

/* A launch's cluster shape into the capture's signature (cuda_impl_t.cap_sig; no-op outside a capture). */
static inline void cuda_capture_note_cluster(cuda_impl_t *c, unsigned x, unsigned y) {
    if (c->capturing) c->cap_sig = c->cap_sig * 0x9E3779B1u + (x << 8) + y + 1u;
}

/* Launch attributes for cudaLaunchKernelEx: PDL (when pdl and KILN_CUDA_PDL allow it) and clusters of
 * `cluster` blocks along x (1: none); fills at[0..2) and returns how many are set. The cluster size goes
 * into c's capture signature (a graph is not updated across cluster shapes); c NULL: an occupancy probe's
 * configuration, not a launch. */
static inline int cuda_pdl_cluster_attrs(cuda_impl_t *c, cudaLaunchAttribute at[2], bool pdl, int cluster) {
    int na = 0;
    if (c) cuda_capture_note_cluster(c, (unsigned)cluster, 1u);
    if (pdl && cuda_pdl_on()) {
        at[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[na].val.programmaticStreamSerializationAllowed = 1;
        na++;
    }
    if (cluster > 1) {
        at[na].id = cudaLaunchAttributeClusterDimension;
        at[na].val.clusterDim.x = cluster; at[na].val.clusterDim.y = 1; at[na].val.clusterDim.z = 1;
        na++;
    }
    return na;
}

static inline int cdiv(long a, long b) { return (int)((a + b - 1) / b); }

/* --- kernel families (one file each) --- */
void cuda_matmul(backend_t *be, float *y, const float *x, int T, const weight_t *w);
void cuda_matmul_multi(backend_t *be, int n, float *const *y, const float *x, int T, const weight_t *const *w);
/* MLX 4/8-bit matmuls past 64 tokens on the wgmma kernels: matmul.cu cuda_qwg_slices gives the runs of tokens
 * (bounds b[0..ns], at most QWG_MAX_SLICES; 0: not sliced), matmul_wgmma.cu cuda_qwg128_on whether the 128-token
 * tile is on */
#define QWG_MAX_SLICES 64
int cuda_qwg_slices(const cuda_impl_t *c, int T, const dweight_t *w, int *b);
int cuda_qwg128_on(void);
/* matmul_wgmma.cu's 2..8-token steps in the 16-token bucket (default since session 47; KILN_CUDA_QWG_S16=0: the
 * 8-token bucket, a launch per weight), so that q/k/v and gate/up take its multi launch (gate/up with the GLU in its
 * reduce) and the norms before them prepare x (wgx.cuh) as from 9 tokens — the same bits per token as the 8-token
 * bucket's launch per weight. Read once. Steps the tensor-core GEMV takes (2..cuda_gemv_tc_max_t() tokens,
 * matmul_gemv_tc.cu's gemv_tcm_kernel) stay there. */
int cuda_qwg_s16(void);
int cuda_gemv_tc_max_t(void); /* matmul_gemv_tc.cu: the most tokens gemv_tcm_kernel takes (1: only the one-token GEMV) */
void cuda_rms_norm(backend_t *be, float *y, const float *x, const float *w, float off, int T, int n, float eps);
void cuda_rope(backend_t *be, float *x, const int32_t *pos, int T, int nh, int hd, int rot, const float *inv, float ms);
void cuda_glu(backend_t *be, float *y, const float *g, const float *u, size_t n, act_t act);
void cuda_add(backend_t *be, float *y, const float *x, size_t n);
/* matmul_wgmma.cu's deferred split sums (KILN_CUDA_QWG_DEFER): on = asked for and xprep.cu's op wrappers
 * installed (cuda_xp_wrapped: they flush before every op but add_rms_norm); flush = launch the pending reduce */
int cuda_defer_on(cuda_impl_t *c);
void cuda_defer_flush(cuda_impl_t *c);      /* both deferrals: the split sums and the rowscale add */
void cuda_defer_flush_sums(cuda_impl_t *c); /* the split sums only (rms_matmul_multi's wrapper: it may take the add) */
int cuda_xp_wrapped(const cuda_impl_t *c);
void cuda_add_rms_norm(backend_t *be, float *x, float *y, const float *d, const float *w, float off, int T, int n, float eps);
void cuda_rope_kv_write(backend_t *be, float *q, float *k, const float *v, const int32_t *pos, int T, int nh, int nkv, int hd, int rot,
                        const float *inv, float ms, const kv_view_t *kv, const int32_t *slots);
void cuda_add_bias(backend_t *be, float *y, const float *b, int T, int n);
void cuda_gather_rows(backend_t *be, float *y, const float *x, const int32_t *idx, int n, int width);
void cuda_embed(backend_t *be, float *y, const int32_t *ids, int T, const weight_t *w, float scale);
void cuda_kv_write(backend_t *be, const kv_view_t *kv, const float *k, const float *v, const int32_t *slots, int T);
void cuda_attention(backend_t *be, float *out, const float *q, int T, const attn_args_t *a);
void cuda_norm_rope_kv_attention(backend_t *be, float *out, float *q, float *k, const float *v, const float *qn, const float *kn, float eps,
                                 int rot, const float *inv, float ms, const int32_t *slots, int T, const attn_args_t *a);
void cuda_sigmoid_mul(backend_t *be, float *y, const float *g, int T, int n, int g_width);
void cuda_scale(backend_t *be, float *y, float s, size_t n);
void cuda_add_rows_scaled(backend_t *be, float *y, const float *x, const int32_t *idx, const float *wt, int n, int width);
void cuda_conv1d_causal(backend_t *be, float *y, const float *x, int n_rows, const int32_t *row_start, float *const *state,
                        const float *w, int C, int K, act_t act);
void cuda_gated_delta(backend_t *be, float *out, const float *qkv, const float *a, const float *b, int T, const struct delta_args *d);
int cuda_post_norm_add(backend_t *be, float *x, float *y, float *d, const float *w1, const float *w2, float off, int T, int n, float eps);
int cuda_delta_decode(backend_t *be, float *y, const float *qkv, float *const *conv_state, const float *conv_w, int K, const float *a,
                      const float *b, const float *z, const float *nw, float eps, int T, const struct delta_args *d);
int cuda_moe_route(backend_t *be, int32_t *ids, float *wts, const float *logits, int T, int E, int k, int renorm, const float *escale);
int cuda_moe_experts(backend_t *be, float *out, const float *x, int T, int k, const int32_t *ids, const float *wts, const weight_t *gate,
                      const weight_t *up, const weight_t *down, int E, act_t act);
void cuda_moe_free(cuda_impl_t *c);
/* matmul_gemv.cu: gate/up GEMV with the GLU in its epilogue (backend.h, op matmul_glu) */
void cuda_matmul_glu(backend_t *be, float *y, float *g, float *u, const float *x, int T, const weight_t *wg, const weight_t *wu, act_t act);
/* matmul_gemv.cu: the GEMV with y += (matmul_add) or x's rms_norm in its prologue (rms_matmul_multi, rms_matmul_glu) */
int cuda_matmul_add(backend_t *be, float *y, const float *x, int T, const weight_t *w);
int cuda_rms_matmul_multi(backend_t *be, int n, float *const *y, const float *x, const float *nw, float off, float eps, int T,
                          const weight_t *const *w);
int cuda_rms_matmul_glu(backend_t *be, float *y, const float *x, const float *nw, float off, float eps, int T, const weight_t *wg,
                        const weight_t *wu, act_t act);
/* matmul_gemv_tc.cu: the same four ops for MLX 4/8-bit weights at one token (else the ones above) */
int cuda_tc_matmul_add(backend_t *be, float *y, const float *x, int T, const weight_t *w);
int cuda_tc_rms_matmul_multi(backend_t *be, int n, float *const *y, const float *x, const float *nw, float off, float eps, int T,
                             const weight_t *const *w);
int cuda_tc_rms_matmul_glu(backend_t *be, float *y, const float *x, const float *nw, float off, float eps, int T, const weight_t *wg,
                           const weight_t *wu, act_t act);
void cuda_tc_matmul_glu(backend_t *be, float *y, float *g, float *u, const float *x, int T, const weight_t *wg, const weight_t *wu, act_t act);
/* matmul.cu: matmul_add, rms_matmul_multi, rms_matmul_glu (tried first by the ones above) and
 * rms_mlp at prefill sizes (cuBLASLt, x rounded once); 0: done, -1: declined */
int cuda_lt_matmul_add(backend_t *be, float *y, const float *x, int T, const weight_t *w);
int cuda_lt_rms_matmul_multi(backend_t *be, int n, float *const *y, const float *x, const float *nw, float off, float eps, int T,
                             const weight_t *const *wt);
int cuda_lt_rms_matmul_glu(backend_t *be, float *y, const float *x, const float *nw, float off, float eps, int T, const weight_t *wg,
                           const weight_t *wu, act_t act);
int cuda_lt_rms_mlp(backend_t *be, float *x, const float *nw, float off, float eps, int T, const weight_t *wg, const weight_t *wu,
                    const weight_t *wd, act_t act);
/* backend.h rms_mlp on "cuda": one persistent launch at one token (matmul_gemv.cu), else cuda_lt_rms_mlp */
int cuda_rms_mlp(backend_t *be, float *x, const float *nw, float off, float eps, int T, const weight_t *wg, const weight_t *wu,
                 const weight_t *wd, act_t act);
/* sample.cu: sampling on the device (backend.h, op sample) */
void cuda_sample(backend_t *be, int32_t *tokens, float *logits, const sample_args_t *a);

#endif
