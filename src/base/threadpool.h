/* threadpool.h — a fixed pool of worker threads for data-parallel loops.
 *
 * The engine thread calls threadpool_run(pool, n, fn, ctx): fn(ctx, i, n) runs once for
 * each i in [0, n) with i spread over the workers and the caller. Work splitting is
 * static (task i always covers the same data), so results never depend on timing.
 * Workers spin briefly before sleeping: a decode step issues hundreds of small loops and
 * a condition-variable wake per loop would cost more than the loop. */
#ifndef KILN_THREADPOOL_H
#define KILN_THREADPOOL_H

typedef struct threadpool threadpool_t;
typedef void (*threadpool_fn)(void *ctx, int i, int n);

threadpool_t *threadpool_create(int n_threads); /* n_threads includes the caller */
/* The same pool, but nobody spins: workers sleep between jobs and the caller sleeps while
 * the last tasks finish elsewhere. For loops that share cores with a spinning pool. */
threadpool_t *threadpool_create_sleeping(int n_threads);
void threadpool_destroy(threadpool_t *tp);
int threadpool_size(const threadpool_t *tp);
/* Runs fn for i in [0, n); returns when all are done. Not reentrant. */
void threadpool_run(threadpool_t *tp, int n, threadpool_fn fn, void *ctx);
/* The calling thread's index in the pool it works for: 1..n-1 on a worker, 0 on any
 * other thread (the caller of threadpool_run). For per-thread scratch in tasks. */
int threadpool_worker_index(void);
int cpu_count(void);

#endif
