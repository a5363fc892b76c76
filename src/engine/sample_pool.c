/* sample_pool.c — a few threads that sample a step's rows side by side.
 *
 * After a forward the engine turns each row's logits into a token. That is a pass over
 * the whole vocabulary per row (an argmax, or a softmax and a draw): ~40-90 µs per row at
 * a 152k vocabulary even when vectorized, because the [rows, vocab] logits (39 MB at 64
 * rows) come from memory, not cache. At 64 rows that is milliseconds per step on one
 * thread, next to a ~14 ms GPU forward. Rows are independent, so they are spread here.
 *
 * The threads are a sleeping base/threadpool (nobody spins: on the CPU backend they share
 * cores with the matmul pool, and a spinning sampler would steal time from the forward
 * that follows); tasks are claimed, so the caller runs whatever nobody took. Each thread
 * has its own sampler scratch, picked by its pool index; what a task computes depends only
 * on its row, so tokens do not depend on which thread ran it. */
#include <stdlib.h>
#include "base/threadpool.h"
#include "engine/engine_int.h"

struct sample_pool {
    threadpool_t *tp;
    sampler_scratch_t *ss;      /* [threads], by threadpool_worker_index() */
    int n;
    sample_task_fn fn;          /* the current job */
    void *ctx;
};

sample_pool_t *sample_pool_new(int n_threads, int vocab) {
    if (n_threads <= 0) n_threads = cpu_count() < 8 ? cpu_count() : 8;
    sample_pool_t *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n_threads;
    p->ss = calloc((size_t)n_threads, sizeof(sampler_scratch_t));
    if (!p->ss) goto err;
    for (int i = 0; i < n_threads; i++)
        if (sampler_scratch_init(&p->ss[i], vocab) != 0) goto err;
    if (!(p->tp = threadpool_create_sleeping(n_threads))) goto err;
    return p;
err:
    sample_pool_free(p);
    return NULL;
}

int sample_pool_size(const sample_pool_t *p) { return p->n; }

static void run_one(void *ctx, int i, int n) {
    (void)n;
    sample_pool_t *p = ctx;
    p->fn(p->ctx, i, &p->ss[threadpool_worker_index()]);
}

void sample_pool_run(sample_pool_t *p, int n, sample_task_fn fn, void *ctx) {
    p->fn = fn;
    p->ctx = ctx;
    threadpool_run(p->tp, n, run_one, p);
}

void sample_pool_free(sample_pool_t *p) {
    if (!p) return;
    threadpool_destroy(p->tp);
    for (int i = 0; p->ss && i < p->n; i++) sampler_scratch_free(&p->ss[i]);
    free(p->ss);
    free(p);
}
