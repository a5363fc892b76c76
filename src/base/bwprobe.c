/* bwprobe.c — see bwprobe.h. One pass: `threads` pthreads each sum a contiguous slice of
 * the buffer (a multiple of 32 floats), joined; the pass's time covers creation to the
 * last join, so a thread the OS runs late counts against the reading, as it would against
 * a decode step. The sums are kept so the loads cannot be optimized away. */
#include "base/bwprobe.h"
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

struct bwprobe {
    float *buf;
    size_t n; /* floats */
    void *map; /* KILN_PROBE_HUGE=1: the 2 MB-page mapping buf lies in */
    size_t map_bytes;
};

typedef struct { const float *p; size_t n; double out; } bw_job_t;

static double bw_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

__attribute__((target("avx2"))) static void *bw_read_avx2(void *a) {
    bw_job_t *j = a;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i + 32 <= j->n; i += 32) {
        s0 = _mm256_add_ps(s0, _mm256_load_ps(j->p + i));
        s1 = _mm256_add_ps(s1, _mm256_load_ps(j->p + i + 8));
        s2 = _mm256_add_ps(s2, _mm256_load_ps(j->p + i + 16));
        s3 = _mm256_add_ps(s3, _mm256_load_ps(j->p + i + 24));
    }
    float t[8];
    _mm256_storeu_ps(t, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    j->out = t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
    return NULL;
}

static void *bw_read_scalar(void *a) { /* pre-AVX2 CPUs */
    bw_job_t *j = a;
    float s[8] = {0};
    for (size_t i = 0; i + 8 <= j->n; i += 8)
        for (int k = 0; k < 8; k++) s[k] += j->p[i + k];
    j->out = s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
    return NULL;
}

bwprobe_t *bwprobe_create(size_t mib) {
    if (mib < 64) mib = 64;
    bwprobe_t *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = mib * 1024 * 1024 / 4;
    /* KILN_PROBE_HUGE=1: the buffer in 2 MB pages (MADV_HUGEPAGE), as the weights' copy is
     * (model.c); default: malloc'd memory, 4 KB pages where THP is "madvise" (the A/B switch,
     * bench/cpu/RESULTS.md session 11 helper-72) */
    const char *hv = getenv("KILN_PROBE_HUGE");
    if (hv && *hv == '1') {
        const size_t H = (size_t)2 << 20;
        p->map_bytes = p->n * 4 + H;
        p->map = mmap(NULL, p->map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p->map == MAP_FAILED) { free(p); return NULL; }
        p->buf = (float *)(((uintptr_t)p->map + H - 1) & ~(uintptr_t)(H - 1));
        madvise(p->buf, p->n * 4, MADV_HUGEPAGE);
    } else p->buf = aligned_alloc(64, p->n * 4);
    if (!p->buf) { free(p); return NULL; }
    for (size_t i = 0; i < p->n; i++) p->buf[i] = (float)(i & 1023);
    return p;
}

double bwprobe_read_gbs(bwprobe_t *p, int threads, int passes) {
    if (threads < 1) threads = 1;
    if (threads > 256) threads = 256;
    __builtin_cpu_init();
    void *(*fn)(void *) = __builtin_cpu_supports("avx2") ? bw_read_avx2 : bw_read_scalar;
    pthread_t th[256];
    bw_job_t jobs[256];
    size_t per = (p->n / threads) & ~(size_t)31;
    double best = 1e30, sink = 0;
    for (int pass = 0; pass < passes; pass++) {
        double t0 = bw_now();
        for (int t = 0; t < threads; t++) {
            jobs[t] = (bw_job_t){p->buf + per * t, per, 0};
            if (pthread_create(&th[t], NULL, fn, &jobs[t])) { fn(&jobs[t]); th[t] = 0; }
        }
        for (int t = 0; t < threads; t++) {
            if (th[t]) pthread_join(th[t], NULL);
            sink += jobs[t].out;
        }
        double dt = bw_now() - t0;
        if (dt < best) best = dt;
    }
    volatile double keep = sink;
    (void)keep;
    return (double)(per * threads) * 4 / best / 1e9;
}

void bwprobe_free(bwprobe_t *p) {
    if (!p) return;
    if (p->map) munmap(p->map, p->map_bytes);
    else free(p->buf);
    free(p);
}
