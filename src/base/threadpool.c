/* threadpool.c — see threadpool.h. A job is published by bumping a generation counter;
 * its tasks are then claimed one at a time from a shared word that packs (generation,
 * next task), by the workers and by the caller alike, and a done counter collects them.
 *
 * Claiming instead of a fixed task-to-thread map matters on a shared machine: with a
 * static map the caller must wait for a worker that the OS has not scheduled yet, spinning
 * away its own time slice, once per loop — hundreds of times per decode step. Here the
 * caller simply runs the tasks nobody has taken, and only waits for tasks already running
 * elsewhere (yielding the CPU if that takes long). What a task computes depends only on
 * its index, so results do not depend on who runs it. The generation in the claim word
 * keeps a worker that wakes late from taking a task of a newer job it has not seen. */
#include "base/threadpool.h"
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* KILN_POOL_PROF=1: per task function, the caller's time in threadpool_run and the part of it
 * spent waiting for tasks running elsewhere (after it found none left to claim) with a
 * histogram of those waits, and the caller's time since the previous run ("gap-before": its
 * serial work while the workers spin), printed to stderr at threadpool_destroy. fn is printed
 * as its offset from threadpool_run (compare `nm kiln`). Also the other side: the workers'
 * wait for the caller (from the workers' last task end to the caller's own tasks' end; the
 * whole run when no worker got a task) with its histogram, the worker start latency (the
 * caller's entry to the first task a worker begins), worker 1's spin and sleep time between
 * jobs. KILN_POOL_PROF_SKIP=N leaves the first N runs out (a prefill's). Diagnostic only: it
 * reads the clock per task. */
#define PROF_MAX 32
typedef struct { threadpool_fn fn; long runs, n_tasks, wtasks, wruns; double run_s, wait_s, gap_s, wwait_s, wlat_s; long hn[8], wn[8]; double hs[8], ws[8]; } prof_t;
static const double prof_edge[7] = {1e-6, 2e-6, 5e-6, 10e-6, 20e-6, 50e-6, 200e-6};
static double now_s(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

struct threadpool {
    int n;                      /* threads including the caller */
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint gen;            /* bumped per job */
    _Atomic uint64_t claim;     /* gen << 32 | n_tasks << 16 | next unclaimed task */
    atomic_int done;            /* tasks finished in the current job */
    atomic_int quit;
    int spin;                   /* pauses before sleeping (workers) or yielding (caller); 0: sleep at once */
    pthread_cond_t done_cv;     /* sleeping pools: the caller waits here for the last task */
    threadpool_fn fn;
    void *ctx;
    int prof;                   /* KILN_POOL_PROF */
    double prof_last;           /* end of the previous run */
    _Atomic double prof_wbeg, prof_wend; /* a worker's first task start / last task end in the current job */
    atomic_int prof_wtasks;     /* tasks workers ran in the current job */
    atomic_llong prof_wspin, prof_wsleep; /* worker 1's time spinning / sleeping between jobs (ns) */
    atomic_long prof_nsleep;
    long prof_skip;             /* KILN_POOL_PROF_SKIP=N: leave the first N runs out (e.g. a prefill) */
    prof_t pr[PROF_MAX];
};

typedef struct { threadpool_t *tp; int id; } worker_arg_t;

static _Thread_local int worker_index;

int threadpool_worker_index(void) { return worker_index; }

/* Runs tasks of job `gen` until none is left unclaimed (or a newer job replaced it). The
 * task count lives in the claim word, so a successful claim is always a task of the job
 * whose fn/ctx are current: the caller cannot replace them before that task is done. */
static void do_tasks(threadpool_t *tp, unsigned gen) {
    uint64_t c = atomic_load_explicit(&tp->claim, memory_order_acquire);
    for (;;) {
        int i = (int)(c & 0xffff), n = (int)(c >> 16 & 0xffff);
        if ((unsigned)(c >> 32) != gen || i >= n) return;
        if (!atomic_compare_exchange_weak_explicit(&tp->claim, &c, c + 1, memory_order_acq_rel, memory_order_acquire)) continue;
        if (tp->prof && worker_index) { double z = 0; atomic_compare_exchange_strong(&tp->prof_wbeg, &z, now_s()); }
        tp->fn(tp->ctx, i, n);
        if (tp->prof && worker_index) { atomic_store(&tp->prof_wend, now_s()); atomic_fetch_add(&tp->prof_wtasks, 1); }
        if (atomic_fetch_add_explicit(&tp->done, 1, memory_order_acq_rel) + 1 == n && !tp->spin) {
            pthread_mutex_lock(&tp->mu);
            pthread_cond_signal(&tp->done_cv);
            pthread_mutex_unlock(&tp->mu);
        }
        c = atomic_load_explicit(&tp->claim, memory_order_acquire);
    }
}

static void *worker(void *p) {
    worker_arg_t *wa = p;
    threadpool_t *tp = wa->tp;
    worker_index = wa->id;
    free(wa);
    unsigned seen = 0;
    for (;;) {
        int spins = 0;
        unsigned g;
        double ws = tp->prof ? now_s() : 0, wsl = 0;
        while ((g = atomic_load_explicit(&tp->gen, memory_order_acquire)) == seen && !atomic_load(&tp->quit)) {
            if (++spins < tp->spin) { __builtin_ia32_pause(); continue; }
            if (tp->prof) { wsl = now_s(); if (worker_index == 1) tp->prof_nsleep++; }
            pthread_mutex_lock(&tp->mu);
            while (atomic_load(&tp->gen) == seen && !atomic_load(&tp->quit)) pthread_cond_wait(&tp->cv, &tp->mu);
            pthread_mutex_unlock(&tp->mu);
        }
        if (tp->prof && worker_index == 1) {
            double we = now_s();
            if (wsl > 0) {
                atomic_fetch_add(&tp->prof_wspin, (long long)((wsl - ws) * 1e9));
                atomic_fetch_add(&tp->prof_wsleep, (long long)((we - wsl) * 1e9));
            } else
                atomic_fetch_add(&tp->prof_wspin, (long long)((we - ws) * 1e9));
        }
        if (atomic_load(&tp->quit)) return NULL;
        seen = g;
        do_tasks(tp, g);
    }
}

int cpu_count(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static threadpool_t *create(int n_threads, int spin) {
    if (n_threads <= 0) n_threads = cpu_count();
    threadpool_t *tp = calloc(1, sizeof *tp);
    if (!tp) return NULL;
    tp->n = n_threads;
    tp->spin = spin;
    const char *pe = getenv("KILN_POOL_PROF");
    tp->prof = spin && pe && *pe == '1';
    if (tp->prof && getenv("KILN_POOL_PROF_SKIP")) tp->prof_skip = atol(getenv("KILN_POOL_PROF_SKIP"));
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->cv, NULL);
    pthread_cond_init(&tp->done_cv, NULL);
    tp->threads = calloc((size_t)n_threads, sizeof(pthread_t));
    for (int i = 1; i < n_threads; i++) {
        worker_arg_t *wa = malloc(sizeof *wa);
        wa->tp = tp;
        wa->id = i;
        pthread_create(&tp->threads[i], NULL, worker, wa);
    }
    return tp;
}

threadpool_t *threadpool_create(int n_threads) { return create(n_threads, 20000); }
threadpool_t *threadpool_create_sleeping(int n_threads) { return create(n_threads, 0); }

void threadpool_destroy(threadpool_t *tp) {
    if (!tp) return;
    if (tp->prof) fprintf(stderr, "pool_prof worker 1: spin %.1f ms, sleep %.1f ms (%ld sleeps)\n", atomic_load(&tp->prof_wspin) * 1e-6, atomic_load(&tp->prof_wsleep) * 1e-6, atomic_load(&tp->prof_nsleep));
    for (int k = 0; tp->prof && k < PROF_MAX && tp->pr[k].fn; k++) {
        prof_t *q = &tp->pr[k];
        fprintf(stderr, "pool_prof fn threadpool_run%+lld runs %ld tasks %ld (workers %ld) run %.1f ms wait %.1f ms (%.2f us/run) workers' wait for the caller %.1f ms (%.2f us/run) worker start %.2f us/run gap-before %.1f ms\n",
                (long long)((intptr_t)q->fn - (intptr_t)threadpool_run), q->runs, q->n_tasks, q->wtasks, q->run_s * 1e3, q->wait_s * 1e3, q->wait_s * 1e6 / q->runs, q->wwait_s * 1e3, q->wwait_s * 1e6 / q->runs, q->wlat_s * 1e6 / (q->wruns ? q->wruns : 1), q->gap_s * 1e3);
        for (int b = 0; b < 8; b++)
            fprintf(stderr, "  wait %s%5.0f us: %7ld runs %8.2f ms   workers %7ld runs %8.2f ms\n", b < 7 ? "<" : ">", (b < 7 ? prof_edge[b] : prof_edge[6]) * 1e6, q->hn[b], q->hs[b] * 1e3, q->wn[b], q->ws[b] * 1e3);
    }
    pthread_mutex_lock(&tp->mu);
    atomic_store(&tp->quit, 1);
    pthread_cond_broadcast(&tp->cv);
    pthread_mutex_unlock(&tp->mu);
    for (int i = 1; i < tp->n; i++) pthread_join(tp->threads[i], NULL);
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->cv);
    pthread_cond_destroy(&tp->done_cv);
    free(tp->threads);
    free(tp);
}

int threadpool_size(const threadpool_t *tp) { return tp->n; }

void threadpool_run(threadpool_t *tp, int n, threadpool_fn fn, void *ctx) {
    if (n <= 0) return;
    if (tp->n == 1 || n == 1 || n > 0xffff) {
        for (int i = 0; i < n; i++) fn(ctx, i, n);
        return;
    }
    double t0 = tp->prof ? now_s() : 0, t1 = 0;
    /* No task of the previous job is unclaimed or running, so nobody reads these now. */
    tp->fn = fn;
    tp->ctx = ctx;
    atomic_store(&tp->done, 0);
    if (tp->prof) { atomic_store(&tp->prof_wend, 0.0); atomic_store(&tp->prof_wbeg, 0.0); atomic_store(&tp->prof_wtasks, 0); }
    unsigned g = atomic_load(&tp->gen) + 1;
    atomic_store_explicit(&tp->claim, (uint64_t)g << 32 | (uint64_t)n << 16, memory_order_release);
    pthread_mutex_lock(&tp->mu);
    atomic_store_explicit(&tp->gen, g, memory_order_release);
    pthread_cond_broadcast(&tp->cv);
    pthread_mutex_unlock(&tp->mu);
    do_tasks(tp, g);
    if (tp->prof) t1 = now_s();
    if (!tp->spin) { /* the task that completes the job signals under mu: no lost wake-up */
        pthread_mutex_lock(&tp->mu);
        while (atomic_load_explicit(&tp->done, memory_order_acquire) < n) pthread_cond_wait(&tp->done_cv, &tp->mu);
        pthread_mutex_unlock(&tp->mu);
        return;
    }
    /* the rest are running on workers: spin briefly, then give the CPU away while waiting */
    for (int spins = 0; atomic_load_explicit(&tp->done, memory_order_acquire) < n; spins++) {
        if (spins < 20000) __builtin_ia32_pause();
        else sched_yield();
    }
    if (tp->prof && tp->prof_skip > 0) {
        if (!--tp->prof_skip) {
            atomic_store(&tp->prof_wspin, 0);
            atomic_store(&tp->prof_wsleep, 0);
            atomic_store(&tp->prof_nsleep, 0);
        }
        tp->prof_last = 0;
    }
    else if (tp->prof) {
        double t2 = now_s();
        int k = 0;
        while (k < PROF_MAX - 1 && tp->pr[k].fn && tp->pr[k].fn != fn) k++;
        prof_t *q = &tp->pr[k];
        q->fn = fn;
        q->runs++;
        q->n_tasks += n;
        q->run_s += t2 - t0;
        q->wait_s += t2 - t1;
        double we = atomic_load(&tp->prof_wend);
        int wt = atomic_load(&tp->prof_wtasks);
        q->wtasks += wt;
        if (wt) {
            q->wlat_s += atomic_load(&tp->prof_wbeg) - t0;
            q->wruns++;
        }
        double ww = wt && we < t1 ? t1 - we : !wt ? t1 - t0 : 0; /* !wt: the workers ran nothing */
        q->wwait_s += ww;
        int b = 0;
        while (b < 7 && t2 - t1 >= prof_edge[b]) b++;
        q->hn[b]++;
        q->hs[b] += t2 - t1;
        b = 0;
        while (b < 7 && ww >= prof_edge[b]) b++;
        q->wn[b]++;
        q->ws[b] += ww;
        if (tp->prof_last > 0) q->gap_s += t0 - tp->prof_last;
        tp->prof_last = t2;
    }
}
