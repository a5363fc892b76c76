/* sample_pool.c — a few threads that sample a step's rows side by side.
 *
 * After a forward the engine turns each row's logits into a token. That is a pass over
 * the whole vocabulary per row (an argmax, or a softmax and a draw): ~40-90 µs per row at
 * a 152k vocabulary even when vectorized, because the [rows, vocab] logits (39 MB at 64
 * rows) come from memory, not cache. At 64 rows that is milliseconds per step on one
 * thread, next to a ~14 ms GPU forward. Rows are independent, so they are spread here.
 *
 * The workers sleep on a condition variable between jobs and never spin: on the CPU
 * backend they share cores with the matmul threads, and a spinning sampler would steal
 * time from the forward that follows. A job is a task count; tasks are claimed from one
 * word that packs (job generation, task count, next task), so a worker that wakes late
 * cannot take a task of a job it did not see, and the caller runs whatever nobody took —
 * it waits only for tasks that are running elsewhere. Each thread has its own sampler
 * scratch; what a task computes depends only on its row, so tokens do not depend on
 * which thread ran it. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include "base/threadpool.h"
#include "engine/engine_int.h"

struct sample_pool {
    int n;                      /* threads including the caller */
    pthread_t *th;
    sampler_scratch_t *ss;      /* [n] */
    pthread_mutex_t mu;
    pthread_cond_t cv, done_cv;
    unsigned gen;               /* guarded by mu */
    int quit;
    _Atomic uint64_t claim;     /* gen << 32 | n_tasks << 16 | next */
    atomic_int done;
    sample_task_fn fn;
    void *ctx;
};

typedef struct { sample_pool_t *p; int id; } worker_arg_t;

static void do_tasks(sample_pool_t *p, unsigned gen, int id) {
    uint64_t c = atomic_load(&p->claim);
    for (;;) {
        int i = (int)(c & 0xffff), n = (int)(c >> 16 & 0xffff);
        if ((unsigned)(c >> 32) != gen || i >= n) return;
        if (!atomic_compare_exchange_weak(&p->claim, &c, c + 1)) continue;
        p->fn(p->ctx, i, &p->ss[id]);
        if (atomic_fetch_add(&p->done, 1) + 1 == n) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done_cv);
            pthread_mutex_unlock(&p->mu);
        }
        c = atomic_load(&p->claim);
    }
}

static void *worker(void *arg) {
    worker_arg_t *wa = arg;
    sample_pool_t *p = wa->p;
    int id = wa->id;
    free(wa);
    unsigned seen = 0;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (p->gen == seen && !p->quit) pthread_cond_wait(&p->cv, &p->mu);
        seen = p->gen;
        int quit = p->quit;
        pthread_mutex_unlock(&p->mu);
        if (quit) return NULL;
        do_tasks(p, seen, id);
    }
}

sample_pool_t *sample_pool_new(int n_threads, int vocab) {
    if (n_threads <= 0) n_threads = cpu_count() < 8 ? cpu_count() : 8;
    sample_pool_t *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->ss = calloc((size_t)n_threads, sizeof(sampler_scratch_t));
    p->th = calloc((size_t)n_threads, sizeof(pthread_t));
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    if (!p->ss || !p->th) goto err;
    for (int i = 0; i < n_threads; i++)
        if (sampler_scratch_init(&p->ss[i], vocab) != 0) goto err;
    p->n = 1;
    for (int i = 1; i < n_threads; i++) {
        worker_arg_t *wa = malloc(sizeof *wa);
        if (!wa) break;
        wa->p = p;
        wa->id = i;
        if (pthread_create(&p->th[i], NULL, worker, wa) != 0) { free(wa); break; }
        p->n++;
    }
    return p;
err:
    for (int i = 0; p->ss && i < n_threads; i++) sampler_scratch_free(&p->ss[i]);
    free(p->ss);
    free(p->th);
    free(p);
    return NULL;
}

int sample_pool_size(const sample_pool_t *p) { return p->n; }



void sample_pool_run(sample_pool_t *p, int n, sample_task_fn fn, void *ctx) {
    if (n <= 0) return;
    if (p->n == 1 || n == 1 || n > 0xffff) {
        for (int i = 0; i < n; i++) fn(ctx, i, &p->ss[0]);
        return;
    }
    /* no task of the previous job is unclaimed or running: nobody reads fn/ctx now */
    p->fn = fn;
    p->ctx = ctx;
    atomic_store(&p->done, 0);
    pthread_mutex_lock(&p->mu);
    unsigned g = ++p->gen;
    atomic_store(&p->claim, (uint64_t)g << 32 | (uint64_t)n << 16);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    do_tasks(p, g, 0);
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->done) < n) pthread_cond_wait(&p->done_cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void sample_pool_free(sample_pool_t *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->th[i], NULL);
    for (int i = 0; i < p->n; i++) sampler_scratch_free(&p->ss[i]);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    pthread_cond_destroy(&p->done_cv);
    free(p->ss);
    free(p->th);
    free(p);
}
