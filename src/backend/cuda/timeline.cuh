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
__device__ __forceinline__ void tl_mark(unsigned long long arrive) {
    if (threadIdx.x | threadIdx.y | threadIdx.z) return;
    const unsigned long long rel = tl_now();
    const tl_dev d = tl_d;
    if (!d.buf) return;
    const unsigned i = atomicAdd(d.n, 1u);
    if (i >= d.cap) return;
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;\n" : "=r"(sm));
    tl_rec r;
    r.arrive = arrive; r.release = rel;
    r.grid = gridDim.x * gridDim.y * gridDim.z; r.block = blockDim.x * blockDim.y * blockDim.z;
    r.bid = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z); r.smid = sm;
    d.buf[i] = r;
}
/* a phase stamp inside a kernel (TL_STAMP(id), id >= 1): thread 0 of the block records %globaltimer as a record
 * with grid 0 and block = id (timeline.py attributes it to the launch whose span holds it); call it where the
 * whole block has passed (after a barrier) for the stamp to mean the block's phase */
__device__ __forceinline__ void tl_stamp(unsigned id) {
    if (threadIdx.x | threadIdx.y | threadIdx.z) return;
    const unsigned long long t = tl_now();
    const tl_dev d = tl_d;
    if (!d.buf) return;
    const unsigned i = atomicAdd(d.n, 1u);
    if (i >= d.cap) return;
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;\n" : "=r"(sm));
    tl_rec r;
    r.arrive = t; r.release = t;
    r.grid = 0; r.block = id;
    r.bid = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z); r.smid = sm;
    d.buf[i] = r;
}
#define TL_STAMP(id) tl_stamp(id)
#endif
#ifndef TL_STAMP
#define TL_STAMP(id) do { } while (0)
#endif
#endif
