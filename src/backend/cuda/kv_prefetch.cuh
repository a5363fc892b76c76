/* kv_prefetch.cuh — a batch-1 decode attention's cache rows into L2 from the one-token GEMV before it.
 *
 * Why: at 2048 positions a llama-3-8b layer's attention reads 8.4 MB of K/V, all of it after its
 * blocks become resident — when the q/k/v GEMV's blocks leave their SMs — and the phase stamps
 * (session 63, bench/cuda/RESULTS.md) put the slowest block's tiles ~5 µs after the fastest: that
 * burst from DRAM sits on the step's critical path. The q/k/v GEMV's blocks are resident much earlier
 * (during the norm before it, while DRAM is nearly idle) and wait for x with nothing to do. The
 * model names the attention to come (backend.h attn_prefetch, before the q/k/v projection); the
 * next one-token GEMV launch carries the hint (kv_pf_t, cuda_common.cuh) and, before its PDL wait,
 * each of its blocks asks L2 for its share of the cache blocks the attention will read — K and V of
 * blocks lo/bs .. p/bs of row 0's table, one bulk prefetch of a whole cache block (all KV heads) each.
 *
 * Only a hint: cp.async.bulk.prefetch.L2 returns nothing to the kernel, so no result can change
 * (the row the attention writes at p may be fetched before that write: L2 is where the write lands,
 * so the later reads see it). The position and block table come from the attention's own uploaded
 * work list, written by a copy that every kernel of the chain follows. Trade-off: 8.4 MB more DRAM
 * traffic in a phase where the GEMV's first items also load, for an attention whose K/V then come
 * from L2 — to be measured, not assumed: opt-in (KILN_CUDA_KV_PF=1, =2 with an L2 evict_last policy) until a
 * device call runs bench/cuda/call_s64a.sh (session 64 had no device). The previous try, the next
 * layer's K/V from the attention a whole layer ahead (bench/cuda/attn_next_kv_prefetch.patch), lost
 * 0.5-1 %: 0.4 GB of weights streamed between the prefetch and the use. */
#ifndef KILN_KV_PREFETCH_CUH
#define KILN_KV_PREFETCH_CUH

#include "backend/cuda/cuda_common.cuh"

/* Lane `lane` of one warp of each block: this block's pieces i = blockIdx.x + gridDim.x·(lane + 32j) of
 * the 2·nb (K, V) cache blocks, i even K, odd V of table entry j0 + i/2. h.k NULL: nothing. h.evict_last
 * (KILN_CUDA_KV_PF=2, an A/B): with an L2 evict_last policy, so the GEMV's weight stream evicts them last. */
__device__ __forceinline__ void kv_pf_issue(const kv_pf_t &h, int lane) {
    if (!h.k) return;
    const int p = __ldcg(h.pos);
    const int lo = h.window > 0 && p - h.window + 1 > 0 ? p - h.window + 1 : 0;
    const int j0 = lo / h.bs, nb = p / h.bs - j0 + 1;
    uint64_t pol = 0;
    if (h.evict_last) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(pol));
    for (int i = blockIdx.x + gridDim.x * lane; i < 2 * nb; i += 32 * gridDim.x) {
        const int id = __ldcg(h.tables + j0 + (i >> 1));
        const char *src = (i & 1 ? h.v : h.k) + (size_t)id * h.bytes;
        if (h.evict_last)
            asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;\n" ::"l"(src), "r"(h.bytes), "l"(pol) : "memory");
        else asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src), "r"(h.bytes) : "memory");
    }
}

#endif
