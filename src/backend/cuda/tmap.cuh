/* tmap.cuh — the driver's tensor-map encoder (cuTensorMapEncodeTiled) for the kernels that copy by the TMA engine
 * (attention_wgmma.cu's K/V pages, matmul_gemv_tc.cu's ring GEMV), found through the runtime's entry-point query so
 * that kiln links no libcuda. Looked up once; NULL where the driver has none (the callers then take their other path). */
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

typedef CUresult (*cuda_tmap_encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *, const cuuint64_t *,
                                        const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                        CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
static inline cuda_tmap_encode_fn cuda_tmap_encoder(void) {
    static cuda_tmap_encode_fn enc;
    static int tried;
    if (!tried) {
        tried = 1;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void **)&enc, 12000, cudaEnableDefault, &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess)
            enc = NULL;
        cudaGetLastError();
    }
    return enc;
}
