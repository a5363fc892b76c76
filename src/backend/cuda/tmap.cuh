/* tmap.cuh — driver entry points found through the runtime's entry-point query, so that kiln links no libcuda
 * (cuda_driver_entry: attention_wgmma.cu's cuMemGetAddressRange), and the tensor-map encoder (cuTensorMapEncodeTiled)
 * for the kernels that copy by the TMA engine (attention_wgmma.cu's K/V pages, matmul_gemv_tc.cu's ring GEMV). Each
 * looked up once; NULL where the driver has none (the callers then take their other path). */
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

/* a driver entry point by name (CUDA 12.0 ABI), NULL where the driver has none; the caller keeps it */
static inline void *cuda_driver_entry(const char *name) {
    void *fn = NULL;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q) != cudaSuccess || q != cudaDriverEntryPointSuccess)
        fn = NULL;
    cudaGetLastError();
    return fn;
}

typedef CUresult (*cuda_tmap_encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *, const cuuint64_t *,
                                        const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                        CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
static inline cuda_tmap_encode_fn cuda_tmap_encoder(void) {
    static cuda_tmap_encode_fn enc;
    static int tried;
    if (!tried) {
        tried = 1;
        enc = (cuda_tmap_encode_fn)cuda_driver_entry("cuTensorMapEncodeTiled");
    }
    return enc;
}
