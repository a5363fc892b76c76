/* moe_util.cuh — what moe.cu (routing, per-pair experts) and moe_gemm.cu (grouped experts) must
 * agree on: the largest top-k, and the order a token's expert outputs are summed in (ascending
 * expert id, the host loop's add_rows_scaled order — the two paths give the same sum order). */
#ifndef KILN_CUDA_MOE_UTIL_CUH
#define KILN_CUDA_MOE_UTIL_CUH

#define MOE_MAX_K 64

/* the index j < k of the smallest id[j] above last, -1 when none is left */
__device__ __forceinline__ int moe_next(const int32_t *id, int k, int last) {
    int j = -1;
    for (int q = 0; q < k; q++)
        if (id[q] > last && (j < 0 || id[q] < id[j])) j = q;
    return j;
}

#endif
