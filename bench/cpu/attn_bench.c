/* attn_bench.c — times the CPU backend's attention op alone (one layer).
 *
 * The model benchmarks mix attention with the matmuls; this isolates it. One row of T
 * query tokens at positions [P, P+T) attends over a paged f16/bf16/f32 cache of P+T
 * positions (block size 16, blocks in order): T=512 P=0 is a first prefill chunk, T=160
 * P=1888 the uncached tail of a 2048-token prompt, T=1 a decode step. Shapes default to
 * qwen3-0.6b (16 query heads, 8 KV heads, head_dim 128). The best of --iters calls is
 * reported (mean_ms: the mean of all) with the causal FLOPs (4 · head_dim · heads per
 * query-key pair) per second.
 * With --threads 1 (the default) the time is the process CPU time, which other work on a
 * shared machine disturbs less than the wall clock; with more threads it is wall time.
 *
 * --cold M: before each call, read M MiB of other memory (not timed), so the K/V come from
 * DRAM as in a decode step (which streams the weights between two layers' attention). The
 * read runs through the backend's pool (an `add` of zeros over M/2 MiB), so its threads are
 * awake when the call starts, as in a decode step (a read on the caller alone let the
 * pool's worker fall asleep: the 2-thread cold time then held its futex wake-up);
 * --huge: K/V on transparent huge pages (madvise), as the CPU backend allocates its cache.
 * --pre 1: time what a qwen3 layer runs from q/k/v to the attention output: q/k rms_norm per
 * head, rope q and k, the cache write at the tokens' slots (the last positions), attention, as
 * separate ops; --pre 2: the same through norm_rope_kv_attention (one op). q and k are
 * restored before each call (not timed), so every call sees the same inputs.
 * --kt 0|1: K rows, or K transposed per block (kv_view_t.k_t); default: what the backend's
 * pool would choose (the CPU backend: transposed; KILN_KV_KT=0: rows). The same values either
 * way (check is equal).
 *
 * --kv q8: the int8 cache (`--kv-dtype q8`), codes and per-row scales written by the backend's kv_write.
 * Usage: kiln-attn-bench [--T T] [--pos P] [--threads N] [--kv f16|bf16|f32|q8] [--heads H]
 *                        [--kv-heads K] [--head-dim D] [--window W] [--iters I] [--backend cpu|cpu-ref]
 *                        [--cold MIB] [--huge 0|1] [--pre 0|1|2] [--kt 0|1] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include "backend/backend.h"

static double now(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    int T = 160, P = 1888, nt = 1, nh = 16, nkv = 8, hd = 128, window = 0, iters = 5, bs = 16, cold = 0, huge = 0, pre = 0, kt = -1;
    dtype_t dt = DT_F16;
    const char *bname = "cpu";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) { fprintf(stderr, "attn_bench: %s needs a value\n", a); return 2; }
        i++;
        if (!strcmp(a, "--T")) T = atoi(v);
        else if (!strcmp(a, "--pos")) P = atoi(v);
        else if (!strcmp(a, "--threads")) nt = atoi(v);
        else if (!strcmp(a, "--heads")) nh = atoi(v);
        else if (!strcmp(a, "--kv-heads")) nkv = atoi(v);
        else if (!strcmp(a, "--head-dim")) hd = atoi(v);
        else if (!strcmp(a, "--window")) window = atoi(v);
        else if (!strcmp(a, "--iters")) iters = atoi(v);
        else if (!strcmp(a, "--cold")) cold = atoi(v);
        else if (!strcmp(a, "--huge")) huge = atoi(v);
        else if (!strcmp(a, "--kt")) kt = atoi(v);
        else if (!strcmp(a, "--pre")) pre = atoi(v);
        else if (!strcmp(a, "--backend")) bname = v;
        else if (!strcmp(a, "--kv")) {
            if (!strcmp(v, "f16")) dt = DT_F16;
            else if (!strcmp(v, "bf16")) dt = DT_BF16;
            else if (!strcmp(v, "f32")) dt = DT_F32;
            else if (!strcmp(v, "q8")) dt = DT_I8;
            else { fprintf(stderr, "attn_bench: --kv f16|bf16|f32|q8\n"); return 2; }
        } else { fprintf(stderr, "attn_bench: unknown option %s\n", a); return 2; }
    }
    if (T < 1 || P < 0 || nt < 1 || nkv < 1 || nh < nkv || nh % nkv || hd < 1 || iters < 1 || window < 0) {
        fprintf(stderr, "attn_bench: bad sizes\n");
        return 2;
    }
    err_t e;
    backend_t *be = backend_create(bname, nt, &e);
    if (!be) { fprintf(stderr, "attn_bench: %s\n", e.msg); return 1; }
    int ctx = P + T, nb = (ctx + bs - 1) / bs;
    size_t per = (size_t)nkv * hd, n = (size_t)nb * bs * per, qn = (size_t)T * nh * hd;
    size_t kvb = (n * dtype_size(dt) + ((size_t)2 << 20) - 1) & ~(((size_t)2 << 20) - 1);
    void *K = aligned_alloc((size_t)2 << 20, kvb), *V = aligned_alloc((size_t)2 << 20, kvb);
    if (huge && K && V) { madvise(K, kvb, MADV_HUGEPAGE); madvise(V, kvb, MADV_HUGEPAGE); }
    size_t coldn = (size_t)(cold > 0 ? cold : 0) << 18;
    float *cb = coldn ? malloc(coldn * 4) : NULL; /* zeros (written: real pages, not the zero page) */
    if (cb) memset(cb, 0, coldn * 4);                /* cb[0, n/2) += cb[n/2, n) keeps them */
    volatile float sink = 0;
    int32_t *table = malloc(sizeof(int32_t) * nb), *pos = malloc(sizeof(int32_t) * T), rs[2] = {0, T};
    float *q = malloc(sizeof(float) * qn), *out = malloc(sizeof(float) * qn);
    if (!K || !V || !table || !pos || !q || !out) { fprintf(stderr, "attn_bench: out of memory\n"); return 1; }
    if (kt < 0) kt = be->ops->kv_k_transposed ? be->ops->kv_k_transposed(be, bs, hd, dt) : 0;
    kv_view_t kview = {K, V, dt, bs, nkv, hd, kt};
    if (dt == DT_I8) { /* codes through the cache writer, slot by slot (per-row scales) */
        kview.ks = malloc(sizeof(float) * (size_t)nb * bs * nkv);
        kview.vs = malloc(sizeof(float) * (size_t)nb * bs * nkv);
        float *kr = malloc(sizeof(float) * per * 2), *vr = kr + per;
        if (!kview.ks || !kview.vs || !kr) { fprintf(stderr, "attn_bench: out of memory\n"); return 1; }
        for (size_t sl = 0; sl < (size_t)nb * bs; sl++) {
            for (size_t e = 0; e < per; e++) kr[e] = sinf((float)(sl * per + e) * 0.37f), vr[e] = cosf((float)(sl * per + e) * 0.11f);
            int32_t slot = (int32_t)sl;
            be->ops->kv_write(be, &kview, kr, vr, &slot, 1);
        }
        free(kr);
    } else
        for (size_t i = 0; i < n; i++) {
            store_from_f32(K, dt, kv_k_at(&kview, i / per, i % per), sinf((float)i * 0.37f));
            store_from_f32(V, dt, i, cosf((float)i * 0.11f));
        }
    for (int i = 0; i < nb; i++) table[i] = i;
    for (int i = 0; i < T; i++) pos[i] = P + i;
    for (size_t i = 0; i < qn; i++) q[i] = sinf((float)i) * 0.5f;
    const int32_t *tables[1] = {table};
    attn_args_t a = {1, rs, pos, tables, nh, nkv, hd, 1.0f / sqrtf((float)hd), 0.f, window, kview};
    /* --pre: the new tokens' k and v, norm weights, rope frequencies, slots */
    float *q0 = malloc(sizeof(float) * qn), *k0 = malloc(sizeof(float) * T * per), *kx = malloc(sizeof(float) * T * per);
    float *vx = malloc(sizeof(float) * T * per), *nw = malloc(sizeof(float) * hd), *inv = malloc(sizeof(float) * hd);
    int32_t *slots = malloc(sizeof(int32_t) * T);
    memcpy(q0, q, sizeof(float) * qn);
    for (size_t i = 0; i < (size_t)T * per; i++) k0[i] = cosf((float)i), vx[i] = sinf((float)i * 0.3f);
    for (int i = 0; i < hd; i++) nw[i] = 1.0f + 0.01f * i, inv[i] = powf(10000.f, -2.0f * (i / 2) / hd);
    for (int i = 0; i < T; i++) slots[i] = pos[i];
    clockid_t clk = nt == 1 ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC;
    double best = INFINITY, pairs = 0, total = 0;
    for (int it = 0; it < iters; it++) {
        if (cb) {
            be->ops->add(be, cb, cb + coldn / 2, coldn / 2);
            sink += cb[it % (coldn / 2)];
        }
        if (pre) memcpy(q, q0, sizeof(float) * qn), memcpy(kx, k0, sizeof(float) * T * per);
        double t0 = now(clk);
        if (pre == 1) {
            be->ops->rms_norm(be, q, q, nw, 0.f, T * nh, hd, 1e-6f);
            be->ops->rms_norm(be, kx, kx, nw, 0.f, T * nkv, hd, 1e-6f);
            be->ops->rope(be, q, pos, T, nh, hd, hd, inv, 1.0f);
            be->ops->rope(be, kx, pos, T, nkv, hd, hd, inv, 1.0f);
            be->ops->kv_write(be, &a.kv, kx, vx, slots, T);
            be->ops->attention(be, out, q, T, &a);
        } else if (pre == 2)
            be->ops->norm_rope_kv_attention(be, out, q, kx, vx, nw, nw, 1e-6f, hd, inv, 1.0f, slots, T, &a);
        else be->ops->attention(be, out, q, T, &a);
        double t = now(clk) - t0;
        if (t < best) best = t;
        total += t;
    }
    for (int i = 0; i < T; i++) {
        int lo = window > 0 && pos[i] - window + 1 > 0 ? pos[i] - window + 1 : 0;
        pairs += pos[i] - lo + 1;
    }
    printf("{\"backend\": \"%s\", \"simd\": \"%s\", \"threads\": %d, \"T\": %d, \"pos\": %d, \"kv\": \"%s\", \"heads\": %d, "
           "\"kv_heads\": %d, \"head_dim\": %d, \"kt\": %d, \"ms\": %.3f, \"mean_ms\": %.3f, \"gflop_s\": %.1f, \"check\": %.6f}\n",
           bname, backend_simd_name(be), nt, T, P, kv_dtype_name(dt), nh, nkv, hd, kt, best * 1e3, total / iters * 1e3, pairs * 4.0 * hd * nh / best / 1e9,
           out[qn / 2]);
    free(q0); free(k0); free(kx); free(vx); free(nw); free(inv); free(slots);
    free(cb); free(K); free(V); free(table); free(pos); free(q); free(out);
    backend_destroy(be);
    return 0;
}
