/* timeline.cu — the host side of timeline.cuh (KILN_CUDA_TIMELINE builds only; empty otherwise):
 * the setters every .cu file registers, the buffer (KILN_CUDA_TIMELINE=FILE at backend creation;
 * KILN_CUDA_TIMELINE_CAP records, default 4M = 128 MB of device memory), and its dump at backend
 * destruction: "KILNTL1\n", the record count (u64), then the records as tl_rec (32 bytes each).
 * bench/cuda/timeline.py reads it. */
#include "backend/cuda/cuda_common.cuh"
#ifdef KILN_CUDA_TIMELINE
static void (*tl_setters[128])(const tl_dev *); /* zero before any constructor runs */
static int tl_nset;
static tl_dev tl_host;

void cuda_timeline_register(void (*set)(const tl_dev *)) {
    if (tl_nset < 128) tl_setters[tl_nset++] = set;
}
void cuda_timeline_start(void) {
    const char *f = getenv("KILN_CUDA_TIMELINE");
    if (!f || !*f || tl_host.buf) return;
    const char *c = getenv("KILN_CUDA_TIMELINE_CAP");
    tl_host.cap = c && atol(c) > 0 ? (unsigned)atol(c) : 4u << 20;
    if (cudaMalloc((void **)&tl_host.n, sizeof(unsigned)) != cudaSuccess ||
        cudaMalloc((void **)&tl_host.buf, sizeof(tl_rec) * (size_t)tl_host.cap) != cudaSuccess) {
        fprintf(stderr, "kiln: KILN_CUDA_TIMELINE: no device memory for %u records; off\n", tl_host.cap);
        tl_host.buf = NULL;
        return;
    }
    cudaMemset(tl_host.n, 0, sizeof(unsigned));
    cudaMemset(tl_host.buf, 0, sizeof(tl_rec) * (size_t)tl_host.cap); /* reserved stamps never written read as zero records */
    for (int i = 0; i < tl_nset; i++) tl_setters[i](&tl_host);
    fprintf(stderr, "kiln: KILN_CUDA_TIMELINE: recording up to %u block waits (%d files) into %s\n", tl_host.cap, tl_nset, f);
}
void cuda_timeline_dump(void) {
    if (!tl_host.buf) return;
    cudaDeviceSynchronize();
    unsigned n = 0;
    cudaMemcpy(&n, tl_host.n, sizeof n, cudaMemcpyDeviceToHost);
    const unsigned long long m = n < tl_host.cap ? n : tl_host.cap;
    tl_rec *h = (tl_rec *)malloc(sizeof(tl_rec) * (m ? m : 1));
    FILE *f = fopen(getenv("KILN_CUDA_TIMELINE"), "wb");
    if (h && f && cudaMemcpy(h, tl_host.buf, sizeof(tl_rec) * m, cudaMemcpyDeviceToHost) == cudaSuccess) {
        fwrite("KILNTL1\n", 1, 8, f);
        fwrite(&m, sizeof m, 1, f);
        fwrite(h, sizeof(tl_rec), m, f);
        fprintf(stderr, "kiln: KILN_CUDA_TIMELINE: %llu of %u block waits written\n", m, n);
    }
    if (f) fclose(f);
    free(h);
    tl_dev z = {NULL, NULL, 0};
    for (int i = 0; i < tl_nset; i++) tl_setters[i](&z);
    cudaFree(tl_host.n);
    cudaFree(tl_host.buf);
    tl_host.buf = NULL;
}
#endif
