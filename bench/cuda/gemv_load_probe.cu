/* gemv_load_probe.cu — does the batch-1 q4 GEMV's load pattern cap its streaming rate?
 *
 * ncu (bench/cuda/RESULTS.md, session 40) has matmul_gemv_tc.cu's lm_head launch (295 MB, steady
 * state: 8016 tiles) at ~3.3 TB/s, 73 % of the read probe, where the bf16 GEMV's lm_head (1 GB)
 * streams at 4.42 TB/s (98 %). This probe keeps the q4 kernel's loads and drops its arithmetic:
 * warps walk items of 16 rows × 256 bytes (a weight of RB bytes a row), each warp a contiguous run
 * of items, DEPTH items in flight in registers (the kernel keeps 2), SPIN dependent FMAs per item
 * standing in for the MMAs, and the lanes' byte offsets in a row's 256-byte chunk as
 *   PAT 0: matmul_gemv_tc.cu's — lane (g, q) reads rows g and g + 8, bytes 64q + 16j (j = 0..3):
 *          one load instruction touches every 32-byte sector of the chunk half
 *   PAT 1: interleaved — bytes 16q + 64j: instruction j reads 64 contiguous bytes a row
 *   PAT 2: contiguous items — 4 KB of consecutive bytes, lane l at 16l + 512j (j = 0..7): the
 *          bf16 GEMV's kind of stream, the ceiling for this item size
 * GB/s = bytes / time (best of 5 launches over a 1 GiB buffer: every launch from HBM).
 *
 *   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o gemv_load_probe bench/cuda/gemv_load_probe.cu
 *   ./gemv_load_probe            (one JSON line per variant) */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdint.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); return 1; } } while (0)

__device__ __forceinline__ uint4 ldnc(const char *p) {
    uint4 v;
    asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

template <int PAT>
__device__ __forceinline__ void ld_item(uint4 (&b)[8], const char *W, int RB, long long it, int lane) {
    const int cpr = RB / 256, g = lane >> 2, q = lane & 3;
    const long long tile = it / cpr;
    const int chunk = (int)(it - tile * cpr);
    if constexpr (PAT == 2) {
        const char *p = W + it * 4096;
#pragma unroll
        for (int j = 0; j < 8; j++) b[j] = ldnc(p + 16 * lane + 512 * j);
    } else {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const char *p = W + (tile * 16 + g + 8 * r) * (long long)RB + chunk * 256;
#pragma unroll
            for (int j = 0; j < 4; j++) b[4 * r + j] = ldnc(p + (PAT == 0 ? 64 * q + 16 * j : 16 * q + 64 * j));
        }
    }
}

/* BAR (DEPTH 2 only): every second item the block's warps in groups of 4 meet at a named barrier, as the GEMV's
 * tile groups do at a tile's end — 1: the next item's loads after the barrier (main before session 40), 2: before */
template <int PAT, int DEPTH, int SPIN, int BAR = 0>
__global__ void __launch_bounds__(512) probe(const char *W, int RB, long long nitems, unsigned *sink) {
    const int lane = threadIdx.x & 31, NW = blockDim.x >> 5;
    const long long gw = (long long)blockIdx.x * NW + (threadIdx.x >> 5), NWg = (long long)gridDim.x * NW;
    const long long ib = nitems * gw / NWg, ie = nitems * (gw + 1) / NWg;
    uint4 buf[DEPTH][8];
    unsigned acc = 0;
    float f = (float)lane;
#pragma unroll
    for (int d = 0; d < DEPTH; d++)
        if (ib + d < ie) ld_item<PAT>(buf[d], W, RB, ib + d, lane);
    for (long long base = ib; base < ie; base += DEPTH) {
#pragma unroll
        for (int d = 0; d < DEPTH; d++) {
            if (base + d < ie) {
#pragma unroll
                for (int j = 0; j < 8; j++) acc ^= buf[d][j].x ^ buf[d][j].y ^ buf[d][j].z ^ buf[d][j].w;
                f += (float)(acc & 1);
#pragma unroll 8
                for (int s = 0; s < SPIN; s++) f = fmaf(f, 0.999f, 1e-3f);
                if (BAR == 2 && base + d + DEPTH < ie) ld_item<PAT>(buf[d], W, RB, base + d + DEPTH, lane);
                if (BAR && d == DEPTH - 1) asm volatile("bar.sync %0, 128;\n" ::"r"(1 + (int)((threadIdx.x >> 5) >> 2)) : "memory");
                if (BAR != 2 && base + d + DEPTH < ie) ld_item<PAT>(buf[d], W, RB, base + d + DEPTH, lane);
            }
        }
    }
    if (acc == 0x9e3779b9u && f == 1.2345f) *sink = acc;
}

template <int PAT, int DEPTH, int SPIN, int BAR = 0>
static int run(const char *W, size_t bytes, int RB, int threads, int per_sm, int sms, unsigned *sink) {
    const long long nitems = (long long)(bytes / 4096);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const int grid = sms * per_sm;
    float best = 1e30f;
    for (int r = 0; r < 6; r++) {
        CK(cudaEventRecord(e0));
        probe<PAT, DEPTH, SPIN, BAR><<<grid, threads>>>(W, RB, nitems, sink);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (r > 0 && ms < best) best = ms;
    }
    int occ = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, probe<PAT, DEPTH, SPIN, BAR>, threads, 0);
    printf("{\"pat\": %d, \"depth\": %d, \"spin\": %d, \"bar\": %d, \"threads\": %d, \"blocks_per_sm\": %d, \"occupancy\": %d, \"RB\": %d, \"us\": %.1f, \"gb_s\": %.1f}\n",
           PAT, DEPTH, SPIN, BAR, threads, per_sm, occ, RB, best * 1e3, (double)nitems * 4096 / (best * 1e-3) / 1e9);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return 0;
}

int main(void) {
    cudaDeviceProp pr;
    CK(cudaGetDeviceProperties(&pr, 0));
    const size_t bytes = (size_t)1 << 30;
    char *W;
    unsigned *sink;
    CK(cudaMalloc(&W, bytes));
    CK(cudaMalloc(&sink, 4));
    CK(cudaMemset(W, 0x5a, bytes));
    const int sms = pr.multiProcessorCount;
    /* RB 2048: K = 4096 at 4 bits (llama-3-8b q/k/v, o, gate/up, lm_head); 7168: K = 14336 (down) */
    int rc = 0;
    for (int RB = 2048; RB <= 7168; RB += 5120) {
        rc |= run<0, 2, 0>(W, bytes, RB, 256, 2, sms, sink);
        rc |= run<1, 2, 0>(W, bytes, RB, 256, 2, sms, sink);
        rc |= run<2, 2, 0>(W, bytes, RB, 256, 2, sms, sink);
        rc |= run<0, 2, 150>(W, bytes, RB, 256, 2, sms, sink);
        rc |= run<1, 2, 150>(W, bytes, RB, 256, 2, sms, sink);
        rc |= run<0, 3, 150>(W, bytes, RB, 256, 2, sms, sink);
        rc |= run<0, 2, 0>(W, bytes, RB, 512, 1, sms, sink);
        rc |= run<0, 2, 0>(W, bytes, RB, 128, 4, sms, sink);
        rc |= run<0, 3, 0>(W, bytes, RB, 256, 2, sms, sink);
        rc |= run<1, 3, 0>(W, bytes, RB, 256, 2, sms, sink);
        rc |= run<0, 2, 0>(W, bytes, RB, 256, 3, sms, sink);
        rc |= run<0, 2, 150, 1>(W, bytes, RB, 256, 2, sms, sink);
        rc |= run<0, 2, 150, 2>(W, bytes, RB, 256, 2, sms, sink);
    }
    return rc;
}
