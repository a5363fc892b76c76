/* stream_chain.cu — the question to answer before a persistent batch-1 decode kernel is written: can ONE
 * persistent kernel stream a decode token's bytes through its dependency points (a llama layer's q/k/v →
 * attention's K/V → o → gate/up → down, each needing all of the one before) at the rate one plain read
 * reaches, and what does each way of crossing a dependency cost? (Session 56; not part of kiln.)
 *
 * No arithmetic beyond an XOR checksum of every 32-bit word: this measures the memory pipe and the
 * synchronization, not a GEMV. Every variant must reach the same checksum (each byte read once).
 *
 *   read      one grid-stride read of all the bytes, 4 × 16 B in flight a thread (the upper bound)
 *   launch    one launch per phase, the same read, captured in a CUDA graph: a dependency = a kernel boundary
 *   pdl       the same with programmatic dependent launch, as kiln's decode chain: a phase's blocks issue their
 *             first loads, griddepcontrol.wait, then the rest
 *   ring      ONE persistent kernel, a block per SM (cooperative launch: all resident): a producer warp streams
 *             the block's share of every phase in order by cp.async.bulk into a ring of NS shared-memory slots of
 *             16 KB; consumer warps checksum each slot and free it; at a phase's end each block adds 1 to the
 *             phase's counter (release) and the consumers wait for every block's count (acquire) before they
 *             touch the next phase. The producer does not wait: the ring keeps loading across the dependency.
 *   ringwait  the same, but the producer also waits for the counter: the pipe drains at every dependency
 *   pdlring   a launch per phase again (PDL, in a graph), each a block per SM with the producer/consumer ring of
 *             NS ≤ 6 slots (≤ 97 KB): two such blocks fit an SM, so the next phase's blocks become resident while
 *             this one runs and their producers fill the ring before the consumers' griddepcontrol.wait — a GEMV
 *             that leaves room for its successor, inside today's one-kernel-per-op chain
 *
 * Shapes: llama-3-8b or qwen3-0.6b at MLX q4 (group 64, bf16 scales and biases), the K/V of 2048 positions in
 * f16, and the lm_head, as kiln synth writes them. One "token" = every phase of every layer once.
 *
 * Build (here, no GPU needed): nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o stream_chain
 *   bench/cuda/stream_chain.cu
 * Run:  stream_chain [llama|qwen] [NS...]   prints one JSON object per variant */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#define CK(x)                                                                                                  \
    do {                                                                                                       \
        cudaError_t e_ = (x);                                                                                  \
        if (e_ != cudaSuccess) {                                                                               \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));                 \
            exit(1);                                                                                           \
        }                                                                                                      \
    } while (0)

#define MAXPH 512
#define SLOT 16384
#define NCW 4 /* consumer warps */

struct phases {
    int n;
    size_t off[MAXPH + 1]; /* byte offsets, 16-aligned */
};

/* ---- plain reads ---- */
__device__ __forceinline__ unsigned xor4(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }
/* a warp's XOR into *out */
__device__ __forceinline__ void xor_out(unsigned acc, unsigned *out) {
    for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, o);
    if ((threadIdx.x & 31) == 0) atomicXor(out, acc);
}

template <bool PDL>
__global__ void read_kernel(const uint4 *p, size_t n, unsigned *out) {
    if (PDL) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
    unsigned acc = 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    uint4 v[4];
#pragma unroll
    for (int b = 0; b < 4; b++) v[b] = i + b * stride < n ? __ldcs(p + i + b * stride) : make_uint4(0, 0, 0, 0);
    if (PDL) asm volatile("griddepcontrol.wait;\n" ::: "memory");
    for (;;) {
#pragma unroll
        for (int b = 0; b < 4; b++) acc ^= xor4(v[b]);
        i += 4 * stride;
        if (i >= n) break;
#pragma unroll
        for (int b = 0; b < 4; b++) v[b] = i + b * stride < n ? __ldcs(p + i + b * stride) : make_uint4(0, 0, 0, 0);
    }
    xor_out(acc, out);
}

__global__ void fill_kernel(uint4 *p, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u;
        p[i] = make_uint4(h, h ^ 0x9e3779b9u, h * 3u + 1u, ~h);
    }
}

/* ---- the persistent ring ---- */
__device__ __forceinline__ void mb_init(uint32_t a, int n) { asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(a), "r"(n) : "memory"); }
__device__ __forceinline__ void mb_wait(uint32_t a, uint32_t par) {
    asm volatile("{\n.reg .pred p;\nW_%=:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra W_%=;\n}\n" ::"r"(a), "r"(par) : "memory");
}
__device__ __forceinline__ void mb_arrive(uint32_t a) { asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(a) : "memory"); }
__device__ __forceinline__ unsigned ld_acquire(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void red_release(unsigned *p, unsigned v) { asm volatile("red.release.gpu.global.add.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory"); }
__device__ __forceinline__ void wait_count(const unsigned *p, unsigned target) {
    while ((int)(ld_acquire(p) - target) < 0) __nanosleep(32);
}

/* block b's share [lo, hi) of phase bytes [a, e): G contiguous ranges, 16-aligned */
__device__ __forceinline__ void share(size_t a, size_t e, int b, int G, size_t &lo, size_t &hi) {
    const size_t n16 = (e - a) / 16;
    lo = a + 16 * (n16 * b / G);
    hi = a + 16 * (n16 * (b + 1) / G);
}

/* the ring: NS slots of SLOT bytes, full[s] (one arrival: the producer's expect_tx, then the bytes) and empty[s]
 * (one arrival per consumer warp); k counts the block's slots over its whole life, so slot k % NS in its use k / NS */
struct ring {
    char *sm;
    uint64_t *full, *empty;
    int NS;
    __device__ uint32_t f(int s) const { return (uint32_t)__cvta_generic_to_shared(&full[s]); }
    __device__ uint32_t e(int s) const { return (uint32_t)__cvta_generic_to_shared(&empty[s]); }
    __device__ void init() const {
        if (threadIdx.x == 0) {
            for (int s = 0; s < NS; s++) { mb_init(f(s), 1); mb_init(e(s), NCW); }
            asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        }
        __syncthreads();
    }
    /* producer (one thread): bytes [lo, hi) of base into the next slots, each once its last use is freed */
    __device__ void produce(const char *base, size_t lo, size_t hi, unsigned &k) const {
        for (size_t o = lo; o < hi; o += SLOT, k++) {
            const int s = k % NS;
            const uint32_t bytes = (uint32_t)(hi - o < SLOT ? hi - o : SLOT);
            if (k >= (unsigned)NS) mb_wait(e(s), (k / NS - 1) & 1);
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(f(s)), "r"(bytes) : "memory");
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                             (uint32_t)__cvta_generic_to_shared(sm + (size_t)s * SLOT)),
                         "l"(base + o), "r"(bytes), "r"(f(s))
                         : "memory");
        }
    }
    /* consumers (the NCW warps): every warp its part of each slot of [lo, hi), XORed into acc, then the slot freed */
    __device__ void consume(size_t lo, size_t hi, unsigned &k, unsigned &acc) const {
        for (size_t o = lo; o < hi; o += SLOT, k++) {
            const int s = k % NS;
            const uint32_t bytes = (uint32_t)(hi - o < SLOT ? hi - o : SLOT);
            mb_wait(f(s), (k / NS) & 1);
            const uint4 *src = (const uint4 *)(sm + (size_t)s * SLOT);
            for (uint32_t i = threadIdx.x; i < bytes / 16; i += NCW * 32) acc ^= xor4(src[i]);
            __syncwarp();
            if ((threadIdx.x & 31) == 0) mb_arrive(e(s));
        }
    }
};

template <bool PWAIT>
__global__ void __launch_bounds__(32 * (NCW + 1)) ring_kernel(const char *base, const __grid_constant__ phases P, unsigned *ctr,
                                                              unsigned iter, int NS, unsigned *out) {
    extern __shared__ __align__(128) char sm[];
    __shared__ __align__(8) uint64_t full[32], empty[32];
    const ring R = {sm, full, empty, NS};
    const int G = gridDim.x;
    const unsigned target = (unsigned)G * (iter + 1);
    R.init();
    unsigned k = 0, acc = 0;
    if (threadIdx.x >> 5 == NCW) { /* producer: every phase in order, waiting for none (ringwait: for each) */
        if ((threadIdx.x & 31) == 0)
            for (int p = 0; p < P.n; p++) {
                if (PWAIT && p > 0) wait_count(ctr + p - 1, target);
                size_t lo, hi;
                share(P.off[p], P.off[p + 1], blockIdx.x, G, lo, hi);
                R.produce(base, lo, hi, k);
            }
        return;
    }
    for (int p = 0; p < P.n; p++) {
        if (p > 0) { /* the phase before complete in every block */
            if (threadIdx.x == 0) wait_count(ctr + p - 1, target);
            asm volatile("bar.sync 1, %0;\n" ::"r"(NCW * 32) : "memory");
        }
        size_t lo, hi;
        share(P.off[p], P.off[p + 1], blockIdx.x, G, lo, hi);
        R.consume(lo, hi, k, acc);
        /* the phase's share consumed (its results would be written here): count this block */
        asm volatile("bar.sync 1, %0;\n" ::"r"(NCW * 32) : "memory");
        if (threadIdx.x == 0) red_release(ctr + p, 1);
    }
    xor_out(acc, out);
}

/* pdlring: one phase per launch, a block per SM; the producer fills the ring at once (the bytes do not depend on the
 * kernel before), the consumers wait for that kernel (griddepcontrol.wait) before they read */
__global__ void __launch_bounds__(32 * (NCW + 1)) pring_kernel(const char *base, size_t pa, size_t pe, int NS, unsigned *out) {
    extern __shared__ __align__(128) char sm[];
    __shared__ __align__(8) uint64_t full[32], empty[32];
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
    const ring R = {sm, full, empty, NS};
    R.init();
    size_t lo, hi;
    share(pa, pe, blockIdx.x, gridDim.x, lo, hi);
    unsigned k = 0, acc = 0;
    if (threadIdx.x >> 5 == NCW) {
        if ((threadIdx.x & 31) == 0) R.produce(base, lo, hi, k);
        return;
    }
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    R.consume(lo, hi, k, acc);
    xor_out(acc, out);
}

/* ---- host ---- */
static void add(phases &P, size_t bytes) {
    if (P.n >= MAXPH) { fprintf(stderr, "too many phases\n"); exit(1); }
    P.off[P.n + 1] = P.off[P.n] + (bytes + 15) / 16 * 16;
    P.n++;
}
/* MLX q4, group 64: N·K/2 bytes of codes + N·(K/64) bf16 scales and as many biases */
static size_t q4(size_t N, size_t K) { return N * K / 2 + N * (K / 64) * 4; }

static void shapes(phases &P, const char *m, size_t &kv_total) {
    P.n = 0;
    P.off[0] = 0;
    kv_total = 0;
    size_t H, Q, KV, I, L, V, ctx = 2048;
    if (!strcmp(m, "qwen")) { H = 1024; Q = 2048; KV = 1024; I = 3072; L = 28; V = 151936; }
    else { H = 4096; Q = 4096; KV = 1024; I = 14336; L = 32; V = 128256; }
    for (size_t l = 0; l < L; l++) {
        add(P, q4(Q + 2 * KV, H));      /* q/k/v        */
        add(P, ctx * KV * 2 * 2);       /* K/V, f16     */
        kv_total += ctx * KV * 2 * 2;
        add(P, q4(H, Q));               /* o            */
        add(P, q4(2 * I, H));           /* gate/up      */
        add(P, q4(H, I));               /* down         */
    }
    add(P, q4(V, H)); /* lm_head */
}

int main(int argc, char **argv) {
    const char *model = argc > 1 ? argv[1] : "llama";
    std::vector<int> rings;
    for (int i = 2; i < argc; i++) rings.push_back(atoi(argv[i]));
    if (rings.empty()) rings = {4, 6, 8, 13};
    static phases P;
    size_t kvb;
    shapes(P, model, kvb);
    const size_t total = P.off[P.n];
    cudaDeviceProp pr;
    CK(cudaGetDeviceProperties(&pr, 0));
    const int SMS = pr.multiProcessorCount;
    char *buf;
    unsigned *ctr, *out;
    CK(cudaMalloc(&buf, total));
    CK(cudaMalloc(&ctr, sizeof(unsigned) * MAXPH));
    CK(cudaMalloc(&out, sizeof(unsigned)));
    CK(cudaMemset(ctr, 0, sizeof(unsigned) * MAXPH));
    fill_kernel<<<SMS * 8, 256>>>((uint4 *)buf, total / 16);
    CK(cudaDeviceSynchronize());
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const int WARM = 3, RUNS = 20;
    printf("{\"device\": \"%s\", \"sms\": %d, \"model\": \"%s\", \"phases\": %d, \"bytes\": %zu, \"kv_bytes\": %zu}\n", pr.name, SMS, model, P.n,
           total, kvb);

    /* copy probe (as bench/cuda/probe.cu: read + written bytes) */
    {
        const size_t cb = (size_t)1 << 31;
        char *a, *b;
        CK(cudaMalloc(&a, cb));
        CK(cudaMalloc(&b, cb));
        CK(cudaMemcpyAsync(b, a, cb, cudaMemcpyDeviceToDevice, st));
        float best = 1e30f;
        for (int r = 0; r < 5; r++) {
            CK(cudaEventRecord(e0, st));
            CK(cudaMemcpyAsync(b, a, cb, cudaMemcpyDeviceToDevice, st));
            CK(cudaEventRecord(e1, st));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            best = ms < best ? ms : best;
        }
        printf("{\"variant\": \"copy\", \"gb_s\": %.1f}\n", 2.0 * cb / (best * 1e-3) / 1e9);
        CK(cudaFree(a));
        CK(cudaFree(b));
    }

    auto report = [&](const char *v, int ns, float ms_best, float ms_mean, unsigned chk) {
        printf("{\"variant\": \"%s\", \"ring\": %d, \"us_token\": %.1f, \"us_mean\": %.1f, \"gb_s\": %.1f, \"check\": \"%08x\"}\n", v, ns,
               ms_best * 1e3, ms_mean * 1e3, total / (ms_best * 1e-3) / 1e9, chk);
        fflush(stdout);
    };
    auto timed = [&](const char *v, int ns, auto &&launch) {
        unsigned chk = 0;
        for (int r = 0; r < WARM; r++) launch();
        CK(cudaStreamSynchronize(st));
        float best = 1e30f, sum = 0.f;
        for (int r = 0; r < RUNS; r++) {
            CK(cudaMemsetAsync(out, 0, sizeof(unsigned), st));
            CK(cudaEventRecord(e0, st));
            launch();
            CK(cudaEventRecord(e1, st));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            best = ms < best ? ms : best;
            sum += ms;
            CK(cudaMemcpy(&chk, out, sizeof chk, cudaMemcpyDeviceToHost));
        }
        report(v, ns, best, sum / RUNS, chk);
    };

    /* read: one launch over everything */
    timed("read", 0, [&] { read_kernel<false><<<SMS * 4, 512, 0, st>>>((const uint4 *)buf, total / 16, out); });

    /* launch / pdl: a launch per phase, captured into a graph */
    for (int pdl = 0; pdl < 2; pdl++) {
        cudaGraph_t g;
        cudaGraphExec_t ge;
        CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
        for (int p = 0; p < P.n; p++) {
            const uint4 *src = (const uint4 *)(buf + P.off[p]);
            const size_t n = (P.off[p + 1] - P.off[p]) / 16;
            cudaLaunchConfig_t cfg = {};
            cudaLaunchAttribute at[1];
            cfg.gridDim = dim3(SMS * 4);
            cfg.blockDim = dim3(512);
            cfg.stream = st;
            at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
            at[0].val.programmaticStreamSerializationAllowed = 1;
            cfg.attrs = at;
            cfg.numAttrs = pdl;
            if (pdl) CK(cudaLaunchKernelEx(&cfg, read_kernel<true>, src, n, out));
            else CK(cudaLaunchKernelEx(&cfg, read_kernel<false>, src, n, out));
        }
        CK(cudaStreamEndCapture(st, &g));
        CK(cudaGraphInstantiate(&ge, g, 0));
        timed(pdl ? "pdl" : "launch", 0, [&] { CK(cudaGraphLaunch(ge, st)); });
        CK(cudaGraphExecDestroy(ge));
        CK(cudaGraphDestroy(g));
    }

    /* ring / ringwait: one persistent cooperative kernel a token */
    unsigned iter = 0;
    for (int ns : rings) {
        if (ns < 2 || ns > 13) continue; /* 13 × 16 KB = 208 KB of the 227 KB a block may take */
        /* at least 120 KB: one block an SM, whatever the ring (the grid is one block per SM) */
        const size_t smb = (size_t)ns * SLOT > 120 * 1024 ? (size_t)ns * SLOT : 120 * 1024;
        for (int pw = 0; pw < 2; pw++) {
            void *fn = pw ? (void *)ring_kernel<true> : (void *)ring_kernel<false>;
            CK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smb));
            timed(pw ? "ringwait" : "ring", ns, [&] {
                const char *b = buf;
                unsigned it = iter++;
                int nsv = ns;
                void *args[] = {(void *)&b, (void *)&P, (void *)&ctr, (void *)&it, (void *)&nsv, (void *)&out};
                CK(cudaLaunchCooperativeKernel(fn, dim3(SMS), dim3(32 * (NCW + 1)), args, smb, st));
            });
        }
    }

    /* pdlring: a launch per phase, two blocks an SM possible, in a graph */
    for (int ns : rings) {
        if (ns < 2 || ns > 6) continue;
        const size_t smb = (size_t)ns * SLOT;
        CK(cudaFuncSetAttribute(pring_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smb));
        cudaGraph_t g;
        cudaGraphExec_t ge;
        CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
        for (int p = 0; p < P.n; p++) {
            cudaLaunchConfig_t cfg = {};
            cudaLaunchAttribute at[1];
            cfg.gridDim = dim3(SMS);
            cfg.blockDim = dim3(32 * (NCW + 1));
            cfg.dynamicSmemBytes = smb;
            cfg.stream = st;
            at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
            at[0].val.programmaticStreamSerializationAllowed = 1;
            cfg.attrs = at;
            cfg.numAttrs = 1;
            CK(cudaLaunchKernelEx(&cfg, pring_kernel, (const char *)buf, P.off[p], P.off[p + 1], ns, out));
        }
        CK(cudaStreamEndCapture(st, &g));
        CK(cudaGraphInstantiate(&ge, g, 0));
        timed("pdlring", ns, [&] { CK(cudaGraphLaunch(ge, st)); });
        CK(cudaGraphExecDestroy(ge));
        CK(cudaGraphDestroy(g));
    }
    CK(cudaDeviceSynchronize());
    return 0;
}
