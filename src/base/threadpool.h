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
void threadpool_destroy(threadpool_t *tp);
int threadpool_size(const threadpool_t *tp);
/* Runs fn for i in [0, n); returns when all are done. Not reentrant. */
void threadpool_run(threadpool_t *tp, int n, threadpool_fn fn, void *ctx);
int cpu_count(void);

#endif
