/* wgmma_util.cuh — the Hopper warpgroup-MMA and mbarrier instructions that matmul_wgmma.cu
 * (MLX-quantized batched decode) and attention_wgmma.cu (prefill attention) both spell: the
 * wgmma fence / commit / wait, the generic→async proxy fence for shared memory that cp.async or
 * plain stores wrote before a wgmma reads it, a register fence that keeps reads of an
 * accumulator after the wait that completes it, and the shared-memory mbarrier init / wait /
 * arrive (also cp.async's arrival on completion). Inline only; each kernel file keeps its own
 * MMA shapes and layouts. */
#ifndef KILN_CUDA_WGMMA_UTIL_CUH
#define KILN_CUDA_WGMMA_UTIL_CUH

#include "backend/cuda/cuda_common.cuh"

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
/* cp.async wrote the stage through the generic proxy; wgmma reads it through the async proxy */
__device__ __forceinline__ void wg_proxy_fence() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void wg_reg_fence(float &v) { asm volatile("" : "+f"(v)::"memory"); }
/* mbarriers in shared memory: init with one arrival (a bulk copy's expect_tx) or n, wait for a
 * phase by its parity, arrive; cp_mb_arrive: this thread's earlier cp.async copies arrive when
 * they complete (noinc: counted in n) */
__device__ __forceinline__ void mb_init(uint32_t a) { asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(a) : "memory"); }
__device__ __forceinline__ void mb_wait(uint32_t a, int par) {
    asm volatile("{\n.reg .pred p;\nWG_WAIT_%=:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra WG_WAIT_%=;\n}\n" ::"r"(a), "r"(par)
                 : "memory");
}
__device__ __forceinline__ void mb_init_n(uint32_t a, int n) { asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(a), "r"(n) : "memory"); }
__device__ __forceinline__ void mb_arrive(uint32_t a) { asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(a) : "memory"); }
__device__ __forceinline__ void cp_mb_arrive(uint32_t a) { asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(a) : "memory"); }

#endif
