/* threadpool.c — see threadpool.h. Task i of n goes to thread i % n_threads; a generation
 * counter publishes each job, a done counter collects it. */
#include "base/threadpool.h"
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

struct threadpool {
    int n;                      /* threads including the caller */
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint gen;            /* bumped per job */
    atomic_int done;            /* workers finished with the current job */
    atomic_int quit;
    threadpool_fn fn;
    void *ctx;
    int n_tasks;
};

typedef struct { threadpool_t *tp; int id; } worker_arg_t;

static void do_tasks(threadpool_t *tp, int id) {
    for (int i = id; i < tp->n_tasks; i += tp->n) tp->fn(tp->ctx, i, tp->n_tasks);
}

static void *worker(void *p) {
    worker_arg_t *wa = p;
    threadpool_t *tp = wa->tp;
    int id = wa->id;
    free(wa);
    unsigned seen = 0;
    for (;;) {
        int spins = 0;
        unsigned g;
        while ((g = atomic_load_explicit(&tp->gen, memory_order_acquire)) == seen && !atomic_load(&tp->quit)) {
            if (++spins < 20000) { __builtin_ia32_pause(); continue; }
            pthread_mutex_lock(&tp->mu);
            while (atomic_load(&tp->gen) == seen && !atomic_load(&tp->quit)) pthread_cond_wait(&tp->cv, &tp->mu);
            pthread_mutex_unlock(&tp->mu);
        }
        if (atomic_load(&tp->quit)) return NULL;
        seen = g;
        do_tasks(tp, id);
        atomic_fetch_add_explicit(&tp->done, 1, memory_order_acq_rel);
    }
}

int cpu_count(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

threadpool_t *threadpool_create(int n_threads) {
    if (n_threads <= 0) n_threads = cpu_count();
    threadpool_t *tp = calloc(1, sizeof *tp);
    if (!tp) return NULL;
    tp->n = n_threads;
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->cv, NULL);
    tp->threads = calloc((size_t)n_threads, sizeof(pthread_t));
    for (int i = 1; i < n_threads; i++) {
        worker_arg_t *wa = malloc(sizeof *wa);
        wa->tp = tp;
        wa->id = i;
        pthread_create(&tp->threads[i], NULL, worker, wa);
    }
    return tp;
}

void threadpool_destroy(threadpool_t *tp) {
    if (!tp) return;
    pthread_mutex_lock(&tp->mu);
    atomic_store(&tp->quit, 1);
    pthread_cond_broadcast(&tp->cv);
    pthread_mutex_unlock(&tp->mu);
    for (int i = 1; i < tp->n; i++) pthread_join(tp->threads[i], NULL);
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->cv);
    free(tp->threads);
    free(tp);
}

int threadpool_size(const threadpool_t *tp) { return tp->n; }

void threadpool_run(threadpool_t *tp, int n, threadpool_fn fn, void *ctx) {
    if (n <= 0) return;
    if (tp->n == 1 || n == 1) {
        for (int i = 0; i < n; i++) fn(ctx, i, n);
        return;
    }
    tp->fn = fn;
    tp->ctx = ctx;
    tp->n_tasks = n;
    atomic_store(&tp->done, 0);
    pthread_mutex_lock(&tp->mu);
    atomic_fetch_add_explicit(&tp->gen, 1, memory_order_acq_rel);
    pthread_cond_broadcast(&tp->cv);
    pthread_mutex_unlock(&tp->mu);
    do_tasks(tp, 0);
    while (atomic_load_explicit(&tp->done, memory_order_acquire) < tp->n - 1) __builtin_ia32_pause();
}
