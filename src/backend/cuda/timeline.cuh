/* timeline.cuh — a decode step's kernel timeline in CUDA graphs, for diagnosis only (build option
 * KILN_CUDA_TIMELINE=ON: -DKILN_CUDA_TIMELINE; a plain build compiles none of this).
 *
 * Why: kiln's decode step is a chain of PDL launches inside a CUDA graph, and the device image
 * has no Nsight Systems; ncu serializes kernels, so the hops between them (a PDL release, a
 * one-block norm, the attention's latency chain) cannot be seen there. Every PDL kernel calls
 * pdl_wait() once; with the option on, thread 0 of each block stamps %globaltimer just before the
 * wait (arrive) and after it (release, i.e. when the kernel before had completed) into a device
 * buffer, with the grid and block sizes that name the kernel. bench/cuda/timeline.py groups the
 * records into launches (in release order a launch's blocks are contiguous: the next launch
 * cannot release before this one completes) and gives each launch's span in the chain.
 *
 * Without relocatable device code each .cu file has its own copy of a __device__ variable, so
 * each registers a setter (a static object's constructor) that the host calls once with the one
 * shared buffer (cuda_timeline_start, timeline.cu). Records past the capacity are dropped. */
#ifndef KILN_CUDA_TIMELINE_CUH
#define KILN_CUDA_TIMELINE_CUH
#ifdef KILN_CUDA_TIMELINE
struct tl_rec {
    unsigned long long arrive, release;
    unsigned grid, block, bid, smid; /* gridDim and blockDim as products, blockIdx flattened */
};
struct tl_dev {
    unsigned *n;
    tl_rec *buf;
    unsigned cap;
};
static __device__ tl_dev tl_d; /* this file's copy */
void cuda_timeline_register(void (*set)(const tl_dev *));
void cuda_timeline_start(void); /* timeline.cu: the buffer, if KILN_CUDA_TIMELINE names a file */
void cuda_timeline_dump(void);  /* the records into that file, then recording stops */
static void tl_set_this(const tl_dev *d) { cudaMemcpyToSymbol(tl_d, d, sizeof *d); }
static struct tl_reg_t { tl_reg_t() { cuda_timeline_register(tl_set_this); } } tl_reg_inst;
__device__ __forceinline__ unsigned long long tl_now(void) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
    return t;
}
/* thread 0: n consecutive records reserved with one atomic (NULL for other threads, when off or full). pdl_wait
 * reserves its record before griddepcontrol.wait, so a block resident early pays the atomic's round trip (~1 us with
 * every block of a launch on one counter) before the release, not after it */
__device__ __forceinline__ tl_rec *tl_reserve(unsigned n) {
    if (threadIdx.x | threadIdx.y | threadIdx.z) return nullptr;
    const tl_dev d = tl_d;
    if (!d.buf) return nullptr;
    const unsigned i = atomicAdd(d.n, n);
    return i + n <= d.cap ? d.buf + i : nullptr;
}
__device__ __forceinline__ void tl_put(tl_rec *slot, unsigned long long arrive, unsigned long long rel, unsigned grid, unsigned block) {
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;\n" : "=r"(sm));
    tl_rec r;
    r.arrive = arrive; r.release = rel;
    r.grid = grid; r.block = block;
    r.bid = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z); r.smid = sm;
    *slot = r;
}
__device__ __forceinline__ void tl_mark(tl_rec *slot, unsigned long long arrive) {
    if (slot) tl_put(slot, arrive, tl_now(), gridDim.x * gridDim.y * gridDim.z, blockDim.x * blockDim.y * blockDim.z);
}
/* phase stamps inside a kernel: TL_STAMPS(n) at its top reserves n records for thread 0 (one atomic, before the PDL
 * wait), TL_STAMP(id) writes record (id - 1) % 10 of them — %globaltimer as a record with grid 0 and block = id, no
 * atomic on the kernel's path (session 63's first stamps took one each: ~1 us of thread 0's time a stamp, and the
 * block's barriers waited for it). timeline.py attributes a stamp to the launch whose span holds it; call it where
 * the whole block has passed (after a barrier) for the stamp to mean the block's phase. Records reserved and not
 * written stay zero (the buffer is cleared at start) and are skipped. */
__device__ __forceinline__ void tl_stamp(tl_rec *base, unsigned id) {
    if (base) { const unsigned long long t = tl_now(); tl_put(base + (id - 1) % 10, t, t, 0, id); }
}
#define TL_STAMPS(n) tl_rec *const tl_sp_ = tl_reserve(n)
#define TL_STAMP(id) tl_stamp(tl_sp_, id)
#endif
#ifndef TL_STAMP
#define TL_STAMPS(n) do { } while (0)
#define TL_STAMP(id) do { } while (0)
#endif
#endif
