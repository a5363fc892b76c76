/* cpu_backend.c — the CPU backend: the op vtable over the reference and SIMD kernels.
 *
 * "cpu" picks the best SIMD family at start (cpuid; KILN_SIMD=off|avx2|avx512 forces
 * one) and spreads big ops over a fixed thread pool: matmul by output columns (the AMX
 * kernels share one prepared x and take blocks of 64 rows from a counter, the others one
 * slice each), attention
 * by (tile of tokens, KV head) items. The split is static and each element is computed whole by one thread, so
 * the thread count never changes a result. "cpu-ref" runs the scalar reference kernels
 * on one thread: the oracle the tests compare the fast path against. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_hybrid.h"
#include "backend/cpu/cpu_pack.h"
#include "base/threadpool.h"

/* a thread's last rope cos/sin (norm_rope_kv_attention): every layer of a decode step asks
 * for the same position and frequencies */
#define ROPE_CACHE_HALF 256
typedef struct { int pos, half; float ms; float inv[ROPE_CACHE_HALF], cs[ROPE_CACHE_HALF], sn[ROPE_CACHE_HALF]; } rope_cache_t;

typedef struct { void *p; size_t len; } cpu_map_t;

typedef struct cpu_impl {
    const simd_kernels_t *simd; /* NULL: reference kernels */
    int pack;                   /* KILN_PACK != 0 and the family has pack_layout */
    pack_registry_t packs;      /* the weights prepared so far (cpu_pack.h) */
    rope_cache_t *rope;         /* per thread */
    threadpool_t *pool;
    float **scratch;            /* per thread: attention scores and K/V conversion */
    size_t scratch_len;
    attn_tile_t *tiles;         /* attention tiles of the current step */
    int tiles_cap;
    pthread_mutex_t maps_mu;    /* the buffers cpu_alloc mapped (see lazy_map) */
    cpu_map_t *maps;
    int n_maps, maps_cap;
} cpu_impl_t;

const simd_kernels_t *simd_detect(void) {
    const char *f = getenv("KILN_SIMD");
    __builtin_cpu_init();
    int has512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    /* every AVX2 CPU also has F16C; clang cannot test "f16c" with __builtin_cpu_supports */
    int has2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (f && !strcmp(f, "off")) return NULL;
    if (f && !strcmp(f, "avx2")) return has2 ? &simd_avx2 : NULL;
    if (has512) {
        const char *a = getenv("KILN_AMX");
        if (!a || strcmp(a, "off")) amx_enable();
        return &simd_avx512;
    }
    if (has2) return &simd_avx2;
    return NULL;
}

/* KILN_HUGE_BUFFERS=1: buffers of 1 MB or more (the K/V pool's per-layer K and V, prefill
 * activations) are 2 MB-aligned, rounded up to 2 MB and madvised MADV_HUGEPAGE, so decode
 * attention's K/V stream pays no page walk per 4 KB. Opt-in: on this Zen 5 VM (bench/cpu/
 * RESULTS.md, session 7) qwen3-0.6b-q4 decode gained (+4 to +9%, 12 of 14 pairs) but
 * llama-3.2-1b-q4, whose K/V stays under 1 MB per layer, lost 2-5% (8 of 10 pairs) — maybe
 * every big buffer starting on the same cache sets once 2 MB-aligned. */
static int huge_buffers(void) {
    static int on = -1;
    if (on < 0) {
        const char *v = getenv("KILN_HUGE_BUFFERS");
        on = v && *v == '1';
    }
    return on;
}

/* Other buffers of 1 MB or more are fresh anonymous mappings: zero without a memset, and a
 * page costs memory only once touched — the K/V pool (sized for a whole context by default,
 * engine/kv_budget.c) takes RAM as requests fill it, not at start. The price is a page fault
 * on each page's first use (for K/V, inside the step that writes it). The mappings are listed
 * so cpu_free knows their length. */
#define LAZY_MIN ((size_t)1 << 20)

static void *lazy_map(cpu_impl_t *c, size_t n) {
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    pthread_mutex_lock(&c->maps_mu);
    if (c->n_maps == c->maps_cap) {
        int cap = c->maps_cap ? 2 * c->maps_cap : 64;
        cpu_map_t *m = realloc(c->maps, sizeof(cpu_map_t) * (size_t)cap);
        if (!m) { pthread_mutex_unlock(&c->maps_mu); munmap(p, n); return NULL; }
        c->maps = m;
        c->maps_cap = cap;
    }
    c->maps[c->n_maps++] = (cpu_map_t){p, n};
    pthread_mutex_unlock(&c->maps_mu);
    return p;
}

/* 1 where p was a lazy mapping (now unmapped) */
static int lazy_unmap(cpu_impl_t *c, void *p) {
    size_t len = 0;
    pthread_mutex_lock(&c->maps_mu);
    for (int i = c->n_maps - 1; i >= 0; i--)
        if (c->maps[i].p == p) {
            len = c->maps[i].len;
            c->maps[i] = c->maps[--c->n_maps];
            break;
        }
    pthread_mutex_unlock(&c->maps_mu);
    if (len) munmap(p, len);
    return len > 0;
}

static void *cpu_alloc(backend_t *be, size_t n) {
    void *p = NULL;
    const size_t H = (size_t)2 << 20;
    if (n >= LAZY_MIN && huge_buffers()) {
        size_t m = (n + H - 1) & ~(H - 1);
        if (posix_memalign(&p, H, m)) return NULL;
        madvise(p, m, MADV_HUGEPAGE);
    } else if (n >= LAZY_MIN) return lazy_map(be->impl, n);
    else if (posix_memalign(&p, 64, n ? n : 64)) return NULL;
    memset(p, 0, n);
    return p;
}
static void cpu_free(backend_t *be, void *p) {
    if (p && !lazy_unmap(be->impl, p)) free(p);
}
static void *cpu_upload(backend_t *be, const void *host, size_t n) {
    void *p = cpu_alloc(be, n);
    if (p && n) memcpy(p, host, n);
    return p;
}
static void cpu_download(backend_t *be, void *host, const void *src, size_t n) {
    if (n && host != src) memcpy(host, src, n);
}
/* --- weights in the kernels' own order (cpu_pack.h): never fails the load; a weight that
 * cannot be packed is used as stored --- */
static int cpu_prepare_weight(backend_t *be, weight_t *w, err_t *e) {
    cpu_impl_t *impl = be->impl;
    if (impl->pack) pack_prepare(&impl->packs, w, impl->simd->pack_layout);
    return 0;
}
static void cpu_release_weight(backend_t *be, weight_t *w) { pack_release(&((cpu_impl_t *)be->impl)->packs, w); }

/* --- matmul: columns split into one contiguous slice per task --- */
typedef struct { cpu_impl_t *impl; float *y; const float *x; int T; const weight_t *w; amx_share_t sh; mm_range_t *rg; int chunk; } mm_job_t;

/* KILN_MM_TAIL=0: every chunk r->chunk rows (the old split). Default: a chunk is a quarter of
 * what is left in the range (a multiple of 16, at least 16, at most r->chunk), so the last
 * chunks are short and a thread that runs out waits at most ~16 rows for the other's last one
 * (KILN_POOL_PROF, qwen3-0.6b-q4 on 2 threads: the caller's wait per decode GEMV pass, waits
 * under 200 us, 0.9-1.4 us with 32 KB chunks, 0.5-0.9 us with these).
 * Chunk starts stay multiples of 16, so each row runs the same code: the same bits. */
static atomic_int mm_tail = -1;

int mm_rows_next(mm_rows_t *r, int *j0, int *j1) {
    mm_range_t *me = &r->rg[r->self];
    int tail = atomic_load_explicit(&mm_tail, memory_order_relaxed);
    if (tail < 0) {
        const char *e = getenv("KILN_MM_TAIL");
        atomic_store_explicit(&mm_tail, tail = !(e && *e == '0'), memory_order_relaxed);
    }
    for (;;) {
        uint64_t v = atomic_load_explicit(&me->v, memory_order_relaxed);
        for (;;) { /* own range: the next chunk from its front */
            uint32_t lo = (uint32_t)v, hi = (uint32_t)(v >> 32);
            if (lo >= hi) break;
            uint32_t c = (uint32_t)r->chunk;
            if (tail) {
                uint32_t q = ((hi - lo) / 4 + 15) & ~15u;
                c = q < 16 ? 16 : q < c ? q : c;
            }
            uint32_t e = hi - lo > c ? lo + c : hi;
            if (atomic_compare_exchange_weak_explicit(&me->v, &v, e | (uint64_t)hi << 32, memory_order_relaxed, memory_order_relaxed)) {
                *j0 = (int)lo; *j1 = (int)e;
                return 1;
            }
        }
        /* empty: move the back half of the fullest range into this one */
        int best = -1;
        uint32_t most = 0;
        for (int i = 0; i < r->n; i++) {
            uint64_t u = atomic_load_explicit(&r->rg[i].v, memory_order_relaxed);
            uint32_t lo = (uint32_t)u, hi = (uint32_t)(u >> 32);
            if (hi > lo && hi - lo > most) { most = hi - lo; best = i; }
        }
        if (best < 0) return 0;
        uint64_t u = atomic_load_explicit(&r->rg[best].v, memory_order_relaxed);
        uint32_t lo = (uint32_t)u, hi = (uint32_t)(u >> 32);
        if (lo >= hi) continue;
        uint32_t s = (lo + (hi - lo) / 2 + 15) & ~15u; /* a multiple of 16 */
        if (s >= hi || hi - lo <= (uint32_t)r->chunk) s = lo; /* a last chunk: all of it */
        if (!atomic_compare_exchange_strong_explicit(&r->rg[best].v, &u, lo | (uint64_t)s << 32, memory_order_relaxed, memory_order_relaxed))
            continue;
        /* nobody else writes an empty range */
        atomic_store_explicit(&me->v, s | (uint64_t)hi << 32, memory_order_relaxed);
    }
}

/* One weight's share of task i of n (the whole matmul when n is 1). */
static void mm_part(mm_job_t *j, int i, int n) {
    int N = j->w->rows;
    /* AMX with several x rows: a shared x and blocks of rows from a counter. One row
     * (decode) keeps one contiguous slice per thread: one long weight stream each, which
     * measured 10-15% faster on qwen3-0.6b-q8 than interleaved blocks */
    if (j->impl->simd == &simd_avx512 && n > 1 && j->T > 1) {
        if (amx_q8_ok(j->w)) { amx_matmul_q8(j->y, j->x, j->T, j->w, 0, N, &j->sh); return; }
        if (amx_q4_ok(j->w)) { amx_matmul_q4(j->y, j->x, j->T, j->w, 0, N, &j->sh); return; }
        if (amx_bf16_ok(j->w)) { amx_matmul_bf16(j->y, j->x, j->T, j->w, 0, N, &j->sh); return; }
    }
    if (j->T == 1 && j->rg && j->impl->simd && j->impl->simd->matmul_rows) { /* decode: rows shared out (mm_rows_next) */
        mm_rows_t r = {j->rg, n, i, j->chunk};
        if (j->impl->simd->matmul_rows(j->y, j->x, j->w, &r)) return;
    }
    int per = ((N + n - 1) / n + 3) & ~3; /* multiples of 4 keep whole tiles per task */
    if (j->rg || j->w->layout) per = (per + 15) & ~15; /* the ranges' split; packed tiles */
    int j0 = i * per, j1 = j0 + per < N ? j0 + per : N;
    if (j0 >= j1) return;
    if (j->impl->simd) j->impl->simd->matmul(j->y, j->x, j->T, j->w, j0, j1);
    else ref_matmul(j->y, j->x, j->T, j->w, j0, j1);
}
static void mm_task(void *ctx, int i, int n) { mm_part(ctx, i, n); }

/* Threads one matmul of w would use: small ones are not worth a wake-up. */
static int mm_threads(cpu_impl_t *impl, int T, const weight_t *w) {
    return (size_t)T * w->rows * w->cols < 65536 ? 1 : threadpool_size(impl->pool);
}

/* Decode (T == 1) on nt > 1 threads: task i's rows start as the static slice i (rounded to
 * 16 rows), handed out in chunks of about 32 KB of weights (mm_rows_next). rg: nt ranges. */
static void mm_rows_init(mm_job_t *j, int nt, mm_range_t *rg) {
    j->rg = NULL;
    if (j->T != 1 || nt <= 1 || nt > MM_ROWS_MAX || !j->impl->simd || !j->impl->simd->matmul_rows) return;
    int N = j->w->rows, per = ((((N + nt - 1) / nt + 3) & ~3) + 15) & ~15;
    size_t row_bytes = (size_t)j->w->cols * (weight_is_quantized(j->w) ? (size_t)j->w->bits : 8 * dtype_size(j->w->dtype)) / 8;
    int chunk = (int)((32768 / (row_bytes ? row_bytes : 1) + 15) & ~(size_t)15);
    j->chunk = chunk < 16 ? 16 : chunk;
    for (int i = 0; i < nt; i++) {
        uint32_t lo = (uint32_t)(i * per < N ? i * per : N), hi = (uint32_t)((i + 1) * per < N ? (i + 1) * per : N);
        atomic_init(&rg[i].v, lo | (uint64_t)hi << 32);
    }
    j->rg = rg;
}

static void cpu_matmul(backend_t *be, float *y, const float *x, int T, const weight_t *w) {
    cpu_impl_t *impl = be->impl;
    mm_job_t job = {impl, y, x, T, w};
    mm_range_t rg[MM_ROWS_MAX];
    atomic_init(&job.sh.next, 0);
    atomic_init(&job.sh.prep_next, 0);
    atomic_init(&job.sh.prep_done, 0);
    atomic_init(&job.sh.buf, NULL);
    int nt = mm_threads(impl, T, w);
    mm_rows_init(&job, nt, rg);
    threadpool_run(impl->pool, nt, mm_task, &job);
    free(atomic_load(&job.sh.buf));
}

/* --- matmul_multi: y[i] = x · w[i]ᵀ for n weights in one pool dispatch. Task t runs, weight
 * after weight, exactly the part mm_part gives it in a matmul of that weight alone (same task
 * count, same slice or shared counter), so each y[i] is bitwise what matmul gives and no
 * thread waits for the others between weights. A weight whose AMX kernel, cols and group
 * match an earlier one's reuses that weight's prepared x (x_of): x is prepared once for q/k/v
 * and once for gate/up. --- */
#define MM_MULTI_MAX 8
typedef struct { int n, nt[MM_MULTI_MAX]; mm_job_t job[MM_MULTI_MAX]; } mm_multi_t;

static void mm_multi_task(void *ctx, int i, int n) {
    mm_multi_t *m = ctx;
    for (int k = 0; k < m->n; k++)
        if (i < m->nt[k]) mm_part(&m->job[k], i, m->nt[k]);
}

/* The AMX kernel the shared path of mm_part picks for w (0: none). */
static int mm_amx_kind(cpu_impl_t *impl, int T, int nt, const weight_t *w) {
    if (impl->simd != &simd_avx512 || nt <= 1 || T <= 1) return 0;
    return amx_q8_ok(w) ? 1 : amx_q4_ok(w) ? 2 : amx_bf16_ok(w) ? 3 : 0;
}

static void cpu_matmul_multi(backend_t *be, int n, float *const *y, const float *x, int T, const weight_t *const *w) {
    cpu_impl_t *impl = be->impl;
    if (n > MM_MULTI_MAX) {
        for (int k = 0; k < n; k++) cpu_matmul(be, y[k], x, T, w[k]);
        return;
    }
    mm_multi_t m = {.n = n};
    mm_range_t rg[MM_MULTI_MAX][MM_ROWS_MAX];
    int nt = 1, kind[MM_MULTI_MAX];
    for (int k = 0; k < n; k++) {
        mm_job_t *j = &m.job[k];
        *j = (mm_job_t){impl, y[k], x, T, w[k]};
        atomic_init(&j->sh.next, 0);
        atomic_init(&j->sh.prep_next, 0);
        atomic_init(&j->sh.prep_done, 0);
        atomic_init(&j->sh.buf, NULL);
        m.nt[k] = mm_threads(impl, T, w[k]);
        if (m.nt[k] > nt) nt = m.nt[k];
        mm_rows_init(j, m.nt[k], rg[k]);
        kind[k] = mm_amx_kind(impl, T, m.nt[k], w[k]);
        /* every thread that runs weight k ran weight p before it (same task count) and
         * waited there until p's x was prepared */
        for (int p = 0; p < k && kind[k]; p++)
            if (kind[p] == kind[k] && !m.job[p].sh.x_of && m.nt[p] == m.nt[k] && w[p]->cols == w[k]->cols &&
                w[p]->group == w[k]->group) {
                j->sh.x_of = &m.job[p].sh;
                break;
            }
    }
    threadpool_run(impl->pool, nt, mm_multi_task, &m);
    for (int k = 0; k < n; k++) free(atomic_load(&m.job[k].sh.buf));
}

/* One int8 KV row (codes[i·stride], *scale) = kv_q8_row(x[0, n)): the family's q8_row where
 * there is one (the same bits), through a row buffer for strided (transposed K) codes. */
static void kv_put_q8(const simd_kernels_t *simd, int8_t *codes, size_t stride, float *scale, const float *x, size_t n) {
    int8_t row[1024];
    if (!simd || !simd->q8_row || (stride != 1 && n > sizeof row)) {
        kv_q8_row(codes, stride, scale, x, n);
        return;
    }
    if (stride == 1) {
        simd->q8_row(codes, scale, x, (int)n);
        return;
    }
    simd->q8_row(row, scale, x, (int)n);
    for (size_t i = 0; i < n; i++) codes[i * stride] = row[i];
}

/* K[slot][e0, e0 + n) = k[0, n) in the cache dtype — the bits of ref_kv_write (f16 through
 * the SIMD converter, which rounds as store_from_f32) — in either K layout (kv_view_t.k_t:
 * element e of the slot bs apart, from the slot's offset in its transposed block). */
static void kv_put_k(const simd_kernels_t *simd, const kv_view_t *kv, size_t slot, size_t e0, const float *k, size_t n) {
    if (kv->dtype == DT_I8) { /* whole heads: each row's codes and scale (kv_q8_row, as ref_kv_write) */
        size_t hd = (size_t)kv->head_dim;
        for (size_t h = e0 / hd; h < (e0 + n) / hd; h++)
            kv_put_q8(simd, (int8_t *)kv->k + kv_k_at(kv, slot, h * hd), kv->k_t ? (size_t)kv->block_size : 1,
                      kv->ks + kv_s_at(kv, slot, h), k + (h * hd - e0), hd);
        return;
    }
    if (!kv->k_t) {
        size_t base = slot * kv->n_kv_heads * kv->head_dim + e0;
        if (kv->dtype == DT_F16 && simd && simd->from_f32) simd->from_f32((uint16_t *)kv->k + base, DT_F16, k, (int)n);
        else
            for (size_t i = 0; i < n; i++) store_from_f32(kv->k, kv->dtype, base + i, k[i]);
        return;
    }
    size_t bs = (size_t)kv->block_size, base = kv_k_at(kv, slot, e0);
    if (kv->dtype == DT_F16 && simd && simd->from_f32) {
        uint16_t h[256], *dst = (uint16_t *)kv->k + base;
        for (size_t c = 0; c < n; c += 256) {
            size_t m = n - c < 256 ? n - c : 256;
            simd->from_f32(h, DT_F16, k + c, (int)m);
            for (size_t i = 0; i < m; i++) dst[(c + i) * bs] = h[i];
        }
    } else
        for (size_t i = 0; i < n; i++) store_from_f32(kv->k, kv->dtype, base + i * bs, k[i]);
}

/* V[slot][e0, e0 + n) = v[0, n), as ref_kv_write (e0 and n whole heads for q8) */
static void kv_put_v(const simd_kernels_t *simd, const kv_view_t *kv, size_t slot, size_t e0, const float *v, size_t n) {
    size_t base = slot * kv->n_kv_heads * kv->head_dim + e0;
    if (kv->dtype == DT_I8) {
        size_t hd = (size_t)kv->head_dim;
        for (size_t h = e0 / hd; h < (e0 + n) / hd; h++)
            kv_put_q8(simd, (int8_t *)kv->v + base + (h * hd - e0), 1, kv->vs + kv_s_at(kv, slot, h), v + (h * hd - e0), hd);
    } else if (kv->dtype == DT_F16 && simd && simd->from_f32) simd->from_f32((uint16_t *)kv->v + base, DT_F16, v, (int)n);
    else
        for (size_t i = 0; i < n; i++) store_from_f32(kv->v, kv->dtype, base + i, v[i]);
}

/* --- per-row ops over the pool: rows [0, n) cut into one contiguous range per thread.
 * Each row (or element) is computed by the same reference code whichever thread runs it,
 * so results do not depend on the split; small ops stay on the caller (a wake-up costs
 * a few microseconds). --- */
typedef struct { int op; void *y; const void *a, *b, *c; float f0, f1; int i0, i1, i2, i3; size_t n; const simd_kernels_t *simd; } rows_job_t;
enum { R_NORM, R_ROPE, R_GLU, R_ADD, R_KV };

static void rows_task(void *ctx, int i, int nt) {
    rows_job_t *j = ctx;
    size_t per = (j->n + nt - 1) / nt;
    if (j->op == R_GLU || j->op == R_ADD) per = (per + 15) & ~(size_t)15;
    size_t r0 = (size_t)i * per, r1 = r0 + per < j->n ? r0 + per : j->n;
    if (r0 >= r1) return;
    int cnt = (int)(r1 - r0);
    switch (j->op) {
    case R_NORM:
        if (j->simd && j->simd->rms_norm) j->simd->rms_norm((float *)j->y + r0 * j->i0, (const float *)j->a + r0 * j->i0, j->b, j->f0, cnt, j->i0, j->f1);
        else ref_rms_norm((float *)j->y + r0 * j->i0, (const float *)j->a + r0 * j->i0, j->b, j->f0, cnt, j->i0, j->f1);
        break;
    case R_ROPE:
        ref_rope((float *)j->y + r0 * j->i0 * j->i1, (const int32_t *)j->a + r0, cnt, j->i0, j->i1, j->i2, j->b, j->f0);
        break;
    case R_GLU:
        if (j->i0 == ACT_GELU_TANH && j->simd) j->simd->gelu_glu((float *)j->y + r0, (const float *)j->a + r0, (const float *)j->b + r0, r1 - r0);
        else if (j->i0 == ACT_SILU && j->simd && j->simd->silu_glu) j->simd->silu_glu((float *)j->y + r0, (const float *)j->a + r0, (const float *)j->b + r0, r1 - r0);
        else ref_glu((float *)j->y + r0, (const float *)j->a + r0, (const float *)j->b + r0, r1 - r0, (act_t)j->i0);
        break;
    case R_ADD: {
        float *y = (float *)j->y;
        const float *x = j->a;
        for (size_t k = r0; k < r1; k++) y[k] += x[k];
        break;
    }
    case R_KV: {
        const kv_view_t *kv = j->y;
        size_t w = (size_t)kv->n_kv_heads * kv->head_dim;
        const float *k = (const float *)j->a, *v = (const float *)j->b;
        const int32_t *slots = j->c;
        if ((kv->dtype == DT_F16 && j->simd && j->simd->from_f32) || (kv->dtype == DT_I8 && j->simd && j->simd->q8_row))
            for (size_t t = r0; t < r1; t++) { /* the same bits as ref_kv_write */
                kv_put_k(j->simd, kv, (size_t)slots[t], 0, k + t * w, w);
                kv_put_v(j->simd, kv, (size_t)slots[t], 0, v + t * w, w);
            }
        else ref_kv_write(kv, k + r0 * w, v + r0 * w, slots + r0, cnt);
        break;
    }
    }
}

/* work: about how many elements the op touches; under 16k it runs on the caller */
static void rows_run(backend_t *be, rows_job_t *j, size_t work) {
    cpu_impl_t *impl = be->impl;
    int nt = threadpool_size(impl->pool);
    j->simd = impl->simd;
    if (work < 16384 || j->n < 2) nt = 1;
    if ((size_t)nt > j->n) nt = (int)j->n;
    threadpool_run(impl->pool, nt, rows_task, j);
}

static void cpu_rms_norm(backend_t *be, float *y, const float *x, const float *w, float off, int T, int n, float eps) {
    rows_job_t j = {R_NORM, y, x, w, NULL, off, eps, n, 0, 0, 0, (size_t)T};
    rows_run(be, &j, (size_t)T * n);
}
static void cpu_rope(backend_t *be, float *x, const int32_t *pos, int T, int nh, int hd, int rot, const float *inv, float ms) {
    rows_job_t j = {R_ROPE, x, pos, inv, NULL, ms, 0, nh, hd, rot, 0, (size_t)T};
    rows_run(be, &j, (size_t)T * nh * rot * 4); /* sin/cos per (token, pair) */
}
static void cpu_glu(backend_t *be, float *y, const float *g, const float *u, size_t n, act_t act) {
    rows_job_t j = {R_GLU, y, g, u, NULL, 0, 0, (int)act, 0, 0, 0, n};
    rows_run(be, &j, n * 8); /* expf per element */
}
static void cpu_add(backend_t *be, float *y, const float *x, size_t n) {
    rows_job_t j = {R_ADD, y, x, NULL, NULL, 0, 0, 0, 0, 0, 0, n};
    rows_run(be, &j, n / 4);
}
static void cpu_add_bias(backend_t *be, float *y, const float *b, int T, int n) {
    for (int t = 0; t < T; t++)
        for (int i = 0; i < n; i++) y[(size_t)t * n + i] += b[i];
}
static void cpu_gather_rows(backend_t *be, float *y, const float *x, const int32_t *idx, int n, int width) {
    for (int i = 0; i < n; i++) memmove(y + (size_t)i * width, x + (size_t)idx[i] * width, sizeof(float) * width);
}
static void cpu_embed(backend_t *be, float *y, const int32_t *ids, int T, const weight_t *w, float scale) {
    ref_embed(y, ids, T, w, scale);
}
static void cpu_kv_write(backend_t *be, const kv_view_t *kv, const float *k, const float *v, const int32_t *slots, int T) {
    rows_job_t j = {R_KV, (void *)kv, k, v, slots, 0, 0, 0, 0, 0, 0, (size_t)T};
    rows_run(be, &j, (size_t)T * kv->n_kv_heads * kv->head_dim * 4);
}

/* --- attention: the SIMD path hands out (tile, KV head) items from a shared counter
 * (attention_cpu.c); each task uses its own scratch, indexed by task, and there are never
 * more tasks than threads. cpu-ref: tokens split into contiguous slices. --- */
typedef struct { cpu_impl_t *impl; float *out; const float *q; int T; const attn_args_t *a;
                 const attn_tile_t *tiles; int n_tiles; atomic_int next; attn_split_t sp; } at_job_t;

static void at_task(void *ctx, int i, int n) {
    at_job_t *j = ctx;
    float *scratch = j->impl->scratch[i];
    if (j->impl->simd) {
        simd_attention_run(j->impl->simd, j->out, j->q, j->a, j->tiles, j->n_tiles, &j->sp, &j->next, scratch, threadpool_size(j->impl->pool));
        return;
    }
    int per = (j->T + n - 1) / n, t0 = i * per, t1 = t0 + per < j->T ? t0 + per : j->T;
    if (t0 < t1) ref_attention(j->out, j->q, t0, t1, j->a, scratch);
}

/* pre (or NULL): attn_split_t's hook, for a step whose tiles are all one token and unsplit */
static void cpu_attention_pre(backend_t *be, float *out, const float *q, int T, const attn_args_t *a,
                              void (*pre)(void *, int, int, int), void *pre_ctx) {
    cpu_impl_t *impl = be->impl;
    size_t need;
    if (impl->simd) need = simd_attention_scratch(a); /* per tile: independent of the context */
    else {                                            /* ref: one score per attended position */
        int maxp = 0;
        for (int t = 0; t < T; t++) if (a->pos[t] > maxp) maxp = a->pos[t];
        need = (size_t)maxp + 1;
    }
    int nt = threadpool_size(impl->pool);
    if (need > impl->scratch_len) {
        for (int i = 0; i < nt; i++) {
            free(impl->scratch[i]);
            impl->scratch[i] = malloc(sizeof(float) * need * 2);
            if (!impl->scratch[i]) abort();
        }
        impl->scratch_len = need * 2;
    }
    at_job_t job = {impl, out, q, T, a, NULL, 0, 0, {0}};
    atomic_init(&job.next, 0);
    int items = T;
    if (impl->simd) {
        if (impl->tiles_cap < T) {
            impl->tiles = realloc(impl->tiles, sizeof(attn_tile_t) * (size_t)T);
            if (!impl->tiles) abort();
            impl->tiles_cap = T;
        }
        job.tiles = impl->tiles;
        job.n_tiles = simd_attention_tiles(a, 0, T, impl->tiles);
        items = simd_attention_plan(&job.sp, a, job.tiles, job.n_tiles, nt);
        if (pre && (job.sp.items || job.n_tiles != T)) { /* not one item per (token, heads): all of it first */
            for (int t = 0; t < T; t++) pre(pre_ctx, t, 0, a->n_kv_heads);
            pre = NULL;
        }
        job.sp.pre = pre;
        job.sp.pre_ctx = pre_ctx;
    } else
        for (int t = 0; pre && t < T; t++) pre(pre_ctx, t, 0, a->n_kv_heads);
    threadpool_run(impl->pool, items < nt ? items : nt, at_task, &job);
    if (impl->simd) simd_attention_finish(impl->simd, out, a, job.tiles, job.n_tiles, &job.sp);
}
static void cpu_attention(backend_t *be, float *out, const float *q, int T, const attn_args_t *a) {
    cpu_attention_pre(be, out, q, T, a, NULL, NULL);
}

/* --- norm_rope_kv_attention: a step of decode rows in one pool pass. Each attention item
 * (a one-token tile t, KV heads [h0, h1)) first does what the separate ops would do to exactly
 * the data it then reads: the q/k norms, the rope of its query heads [h0·group, h1·group) and KV
 * heads, and the cache write of those KV heads at t's slot — the same kernels per head row and
 * element as cpu_rms_norm, cpu_rope (ref_rope's math, one cos/sin per pair for q and k alike)
 * and cpu_kv_write, so the bits are theirs. That takes the per-layer serial run on the caller
 * (two norms, two ropes with their sin/cos, the K/V stores' misses) while the worker spun, and
 * halves it over the threads. --- */
typedef struct { const cpu_impl_t *impl; float *q, *k; const float *v, *qn, *kn; float eps, ms; int rot; const float *inv;
                 const int32_t *slots; const attn_args_t *a; } nrka_t;

static void nrka_norm(const simd_kernels_t *simd, float *x, const float *w, int rows, int n, float eps) {
    if (simd && simd->rms_norm) simd->rms_norm(x, x, w, 0.f, rows, n, eps);
    else ref_rms_norm(x, x, w, 0.f, rows, n, eps);
}

static void nrka_pre(void *ctx, int t, int h0, int h1) {
    const nrka_t *c = ctx;
    const attn_args_t *a = c->a;
    int hd = a->head_dim, nh = a->n_heads, nkv = a->n_kv_heads, group = nh / nkv, nq = (h1 - h0) * group, nk = h1 - h0;
    float *qt = c->q + ((size_t)t * nh + (size_t)h0 * group) * hd, *kt = c->k + ((size_t)t * nkv + h0) * hd;
    if (c->qn) nrka_norm(c->impl->simd, qt, c->qn, nq, hd, c->eps);
    if (c->kn) nrka_norm(c->impl->simd, kt, c->kn, nk, hd, c->eps);
    int half = c->rot / 2;
    float p = (float)a->pos[t];
    /* ref_rope's cos/sin, kept from the last call on this thread when the position, mscale
     * and frequencies are the same (the same cosf/sinf of the same arguments: the same bits) */
    int ti = threadpool_worker_index();
    rope_cache_t *rc = ti < threadpool_size(c->impl->pool) ? &c->impl->rope[ti] : NULL; /* (a thread of another pool) */
    if (rc && half <= ROPE_CACHE_HALF && !(rc->pos == a->pos[t] && rc->half == half && rc->ms == c->ms &&
                                     !memcmp(rc->inv, c->inv, sizeof(float) * half))) {
        for (int i = 0; i < half; i++) {
            float ang = p * c->inv[i];
            rc->cs[i] = cosf(ang) * c->ms;
            rc->sn[i] = sinf(ang) * c->ms;
        }
        rc->pos = a->pos[t];
        rc->half = half;
        rc->ms = c->ms;
        memcpy(rc->inv, c->inv, sizeof(float) * half);
    }
    for (int i = 0; i < half; i++) { /* ref_rope, for these heads of q and k */
        float cs, sn;
        if (rc && half <= ROPE_CACHE_HALF) cs = rc->cs[i], sn = rc->sn[i];
        else {
            float ang = p * c->inv[i];
            cs = cosf(ang) * c->ms, sn = sinf(ang) * c->ms;
        }
        for (int h = 0; h < nq + nk; h++) {
            float *x = h < nq ? qt + (size_t)h * hd : kt + (size_t)(h - nq) * hd;
            float x0 = x[i], x1 = x[i + half];
            x[i] = x0 * cs - x1 * sn;
            x[i + half] = x1 * cs + x0 * sn;
        }
    }
    const kv_view_t *kv = &a->kv;
    size_t n = (size_t)nk * hd;
    const float *vt = c->v + ((size_t)t * nkv + h0) * hd;
    kv_put_k(c->impl->simd, kv, (size_t)c->slots[t], (size_t)h0 * hd, kt, n); /* as cpu_kv_write */
    kv_put_v(c->impl->simd, kv, (size_t)c->slots[t], (size_t)h0 * hd, vt, n);
}

static void cpu_norm_rope_kv_attention(backend_t *be, float *out, float *q, float *k, const float *v, const float *qn,
                                       const float *kn, float eps, int rot, const float *inv, float ms, const int32_t *slots,
                                       int T, const attn_args_t *a) {
    cpu_impl_t *impl = be->impl;
    int hd = a->head_dim, nh = a->n_heads, nkv = a->n_kv_heads;
    nrka_t c = {impl, q, k, v, qn, kn, eps, ms, rot, inv, slots, a};
    static int on = -1; /* KILN_FUSED_ATTN=0: the separate ops (A/B) */
    if (on < 0) {
        const char *e = getenv("KILN_FUSED_ATTN");
        on = !(e && *e == '0');
    }
    if (on && impl->simd && a->n_rows == T) { /* decode rows (else, or split: the pre work first, on the caller) */
        cpu_attention_pre(be, out, q, T, a, nrka_pre, &c);
        return;
    }
    if (qn) cpu_rms_norm(be, q, q, qn, 0.f, T * nh, hd, eps);
    if (kn) cpu_rms_norm(be, k, k, kn, 0.f, T * nkv, hd, eps);
    cpu_rope(be, q, a->pos, T, nh, hd, rot, inv, ms);
    cpu_rope(be, k, a->pos, T, nkv, hd, rot, inv, ms);
    cpu_kv_write(be, &a->kv, k, v, slots, T);
    cpu_attention(be, out, q, T, a);
}

/* --- hybrid ops (cpu_hybrid.h): the gated delta rule splits value heads over threads --- */
typedef struct { float *y; const float *x; int n_rows; const int32_t *row_start; float *const *state; const float *w;
                 int C, K; act_t act; } cv_job_t;

static void cv_task(void *ctx, int i, int n) {
    cv_job_t *j = ctx;
    int per = ((j->C + n - 1) / n + 15) & ~15, c0 = i * per, c1 = c0 + per < j->C ? c0 + per : j->C;
    if (c0 < c1) ref_conv1d_causal_cols(j->y, j->x, j->n_rows, j->row_start, j->state, j->w, j->C, j->K, j->act, c0, c1);
}

/* Channels split over threads (each channel whole on one thread: same sums). */
static void cpu_conv1d_causal(backend_t *be, float *y, const float *x, int n_rows, const int32_t *row_start,
                              float *const *state, const float *w, int C, int K, act_t act) {
    cpu_impl_t *impl = be->impl;
    cv_job_t job = {y, x, n_rows, row_start, state, w, C, K, act};
    int n = threadpool_size(impl->pool);
    if ((size_t)row_start[n_rows] * C * K < 65536) n = 1;
    threadpool_run(impl->pool, n, cv_task, &job);
}

typedef struct { float *out; const float *qkv, *a, *b; int T; const delta_args_t *d; delta_chunk_fn fn; } gd_job_t;

static void gd_task(void *ctx, int i, int n) {
    gd_job_t *j = ctx;
    int H = j->d->n_v_heads, per = (H + n - 1) / n, h0 = i * per, h1 = h0 + per < H ? h0 + per : H;
    if (h0 < h1) gated_delta_rows(j->out, j->qkv, j->a, j->b, j->d, h0, h1, j->fn);
}

/* Whole aligned chunks go through the chunk kernel of this backend's family (cpu-ref: the
 * scalar one); everything else token by token. */
static void cpu_gated_delta(backend_t *be, float *out, const float *qkv, const float *a, const float *b, int T,
                            const delta_args_t *d) {
    cpu_impl_t *impl = be->impl;
    delta_chunk_fn fn = impl->simd == &simd_avx512 ? delta_chunk_avx512 : impl->simd == &simd_avx2 ? delta_chunk_avx2 : delta_chunk_scalar;
    gd_job_t job = {out, qkv, a, b, T, d, fn};
    int n = threadpool_size(impl->pool);
    if (n > d->n_v_heads) n = d->n_v_heads;
    if ((size_t)T * d->n_v_heads * d->dk * d->dv < 65536) n = 1;
    threadpool_run(impl->pool, n, gd_task, &job);
}
static void cpu_sigmoid_mul(backend_t *be, float *y, const float *g, int T, int n, int gw) { ref_sigmoid_mul(y, g, T, n, gw); }
static void cpu_scale(backend_t *be, float *y, float s, size_t n) { ref_scale(y, s, n); }
static void cpu_add_rows_scaled(backend_t *be, float *y, const float *x, const int32_t *idx, const float *wt, int n, int width) {
    ref_add_rows_scaled(y, x, idx, wt, n, width);
}

/* int8 K/V (`--kv-dtype q8`): every CPU path reads and writes them (SIMD and cpu-ref) */
static int cpu_kv_q8(backend_t *be) { (void)be; return 1; }

/* K transposed per block (kv_view_t.k_t) for the SIMD families' attention tiles: a decode
 * score then reads each 16-key run of a (head, d) as one load, with no transpose. Blocks of a
 * multiple of 16 positions; cpu-ref keeps rows. KILN_KV_KT=0: rows (the A/B switch). */

static int cpu_kv_k_transposed(backend_t *be, int block_size, int head_dim, dtype_t dtype) {
    (void)head_dim, (void)dtype;
    const char *e = getenv("KILN_KV_KT");
    return ((cpu_impl_t *)be->impl)->simd && block_size % 16 == 0 && !(e && *e == '0');
}

/* The K/V pool is a lazy mapping (cpu_alloc): without this, the decode step that writes a block's
 * first row takes a page fault per 4 KB of it in every layer (qwen3-0.6b f16: 28 a token), and on
 * this project's VM a fault costs ~15 µs — ~5 % of a qwen3-0.6b q4 decode token (bench/cpu/RESULTS.md,
 * session 32). MADV_POPULATE_WRITE (Linux 5.14) faults a block's pages in with one call per layer
 * and buffer when the pool first hands the block out, without touching their contents.
 * KILN_KV_TOUCH=0: off (A/B); a kernel without it (EINVAL) turns it off. */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
static void cpu_touch(backend_t *be, void *p, size_t n) {
    (void)be;
    static int on = -1;
    static uintptr_t page = 4096;
    if (on < 0) {
        const char *e = getenv("KILN_KV_TOUCH");
        on = !(e && *e == '0');
        long ps = sysconf(_SC_PAGESIZE);
        if (ps > 0) page = (uintptr_t)ps;
    }
    if (!on || !p || !n) return;
    uintptr_t a = (uintptr_t)p & ~(page - 1), b = ((uintptr_t)p + n + page - 1) & ~(page - 1);
    if (madvise((void *)a, b - a, MADV_POPULATE_WRITE) && errno == EINVAL) on = 0;
}

static const backend_ops_t cpu_ops = {
    .name = "cpu", .alloc = cpu_alloc, .free = cpu_free, .upload = cpu_upload, .download = cpu_download,
    .prepare_weight = cpu_prepare_weight, .release_weight = cpu_release_weight, .matmul = cpu_matmul, .matmul_multi = cpu_matmul_multi, .rms_norm = cpu_rms_norm, .rope = cpu_rope,
    .glu = cpu_glu, .add = cpu_add, .add_bias = cpu_add_bias, .gather_rows = cpu_gather_rows, .embed = cpu_embed,
    .kv_write = cpu_kv_write, .attention = cpu_attention, .norm_rope_kv_attention = cpu_norm_rope_kv_attention,
    .conv1d_causal = cpu_conv1d_causal, .gated_delta = cpu_gated_delta, .sigmoid_mul = cpu_sigmoid_mul,
    .scale = cpu_scale, .add_rows_scaled = cpu_add_rows_scaled, .kv_k_transposed = cpu_kv_k_transposed, .kv_q8 = cpu_kv_q8, .touch = cpu_touch,
};

#ifdef KILN_HAVE_CUDA
/* CUDA builds (make cuda): "cuda" and "cuda-f32" go to backend/cuda (docs/cuda.md). */
#include "backend/cuda/cuda_backend.h"
#define IS_CUDA(be) (!strcmp((be)->ops->name, "cuda"))
#else
#define IS_CUDA(be) 0
#endif

backend_t *backend_create(const char *name, int n_threads, err_t *e) {
#ifdef KILN_HAVE_CUDA
    if (!strncmp(name, "cuda", 4)) return cuda_backend_create(name, n_threads, e);
#endif
    int ref = !strcmp(name, "cpu-ref");
    if (!ref && strcmp(name, "cpu") != 0) {
        err_set(e, "backend '%s' is not available in this build (cpu, cpu-ref%s)", name,
                !strcmp(name, "cuda") ? "; build with `make cuda` for cuda" : "");
        return NULL;
    }
    backend_t *be = calloc(1, sizeof *be);
    cpu_impl_t *impl = calloc(1, sizeof *impl);
    be->ops = &cpu_ops;
    be->impl = impl;
    impl->simd = ref ? NULL : simd_detect();
    const char *pk = getenv("KILN_PACK");
    impl->pack = impl->simd && impl->simd->pack_layout && !(pk && *pk == '0');
    be->n_threads = ref ? 1 : (n_threads > 0 ? n_threads : cpu_count());
    impl->pool = threadpool_create(be->n_threads);
    pthread_mutex_init(&impl->maps_mu, NULL);
    impl->scratch = calloc((size_t)be->n_threads, sizeof(float *));
    impl->rope = calloc((size_t)be->n_threads, sizeof(rope_cache_t));
    for (int i = 0; i < be->n_threads; i++) impl->rope[i].pos = -1;
    return be;
}

void backend_destroy(backend_t *be) {
    if (!be) return;
#ifdef KILN_HAVE_CUDA
    if (IS_CUDA(be)) { cuda_backend_destroy(be); return; }
#endif
    cpu_impl_t *impl = be->impl;
    for (int i = 0; i < threadpool_size(impl->pool); i++) free(impl->scratch[i]);
    free(impl->scratch);
    free(impl->rope);
    free(impl->tiles);
    pack_registry_free(&impl->packs);
    threadpool_destroy(impl->pool);
    for (int i = 0; i < impl->n_maps; i++) munmap(impl->maps[i].p, impl->maps[i].len); /* buffers never freed */
    free(impl->maps);
    pthread_mutex_destroy(&impl->maps_mu);
    free(impl);
    free(be);
}

const char *backend_simd_name(const backend_t *be) {
#ifdef KILN_HAVE_CUDA
    if (IS_CUDA(be)) return cuda_backend_kernel_name(be);
#endif
    const cpu_impl_t *impl = be->impl;
    if (impl->simd == &simd_avx512 && amx_enabled()) return "avx512+amx";
    if (impl->simd == &simd_avx2) { /* the integer 4/8-bit paths it takes (matmul_qi_avx2.c) */
        int m = avx2_qi_mode();
        return m == 2 ? "avx2+vnni" : m == 1 ? "avx2" : "avx2-fma"; /* fma: KILN_AVX2_INT=off */
    }
    return impl->simd ? impl->simd->name : "scalar";
}
