/* engine_int.h — the engine's private structures, shared by engine.c (thread and
 * scheduler) and request.c (event channel, stop strings). */
#ifndef KILN_ENGINE_INT_H
#define KILN_ENGINE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include "kiln.h"
#include "kv/snap_store.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "engine/sampler.h"
#include "engine/sample_dev.h"

typedef enum { REQ_INCOMING, REQ_WAITING, REQ_RUNNING, REQ_DONE } req_state_t;

struct kiln_request {
    kiln_engine_t *eng;
    atomic_int refs;               /* the handle and the engine                       */
    atomic_int cancel;
    /* --- owned by the engine thread --- */
    req_state_t state;
    kiln_request_params_t p;       /* deep copy; strings and arrays owned              */
    int32_t *tokens;               /* prompt then generated                           */
    int n_tokens, n_prompt, n_gen, cap_tokens;
    int n_computed;                /* tokens whose K/V are in the cache                */
    kv_seq_t seq;
    kv_seq_t seq_swa;              /* sliding-window group (kv/swa.h), when the model has one */
    int n_hashed;                  /* leading blocks of seq that carry their hash      */
    uint64_t last_hash;
    detok_t *detok;
    char *held;                    /* text held back for possible stop strings         */
    size_t held_len;
    uint64_t seq_no;               /* admission order: preemption takes the newest     */
    void *tail_snap;               /* hybrid: state at the latest block boundary passed
                                      while decoding, published to the store at the end */
    uint64_t tail_snap_hash;
    kiln_request_t *next;          /* in the incoming or waiting list                 */
    /* --- the channel: guarded by mu --- */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    kiln_event_t *events;
    int ev_head, ev_count, ev_cap;
    int finished;                  /* the final event has been queued                  */
    void (*notify)(void *);
    void *notify_arg;
    int notifying;                 /* callbacks running now (outside the lock)         */
    kiln_request_info_t info;
};

struct kiln_engine {
    kiln_engine_opts_t o;
    model_t *m;
    tokenizer_t *tok;
    uint64_t ns;                   /* prefix-cache namespace: model fingerprint + KV dtype */
    size_t state_bytes;            /* hybrid models: one recurrent-state snapshot (else 0) */
    int snap_every;                /* snapshot spacing in blocks                      */
    snap_store_t snaps;
    pthread_t thread;
    pthread_mutex_t mu;            /* guards incoming, stop, stats                    */
    pthread_cond_t cv;
    kiln_request_t *incoming, *incoming_tail;
    int n_incoming;
    int stopping;
    /* engine thread only */
    kiln_request_t *waiting, *waiting_tail;
    int n_waiting;
    kiln_request_t **running;
    int n_running, cap_running;
    uint64_t next_seq_no;
    float *logits;                 /* [max_batch, vocab]                              */
    float *lp;                     /* [vocab] logprob scratch                         */
    float *raw;                    /* [vocab] a row's logits before sampling (logprobs) */
    sampler_scratch_t ss;
    struct sample_pool *pool;      /* samples a step's rows side by side (sample_pool.c) */
    struct sample_dev *dev;        /* samples on the device (sample_dev.c), else NULL  */
    kiln_stats_t stats;            /* copied out under mu                             */
};

/* sample_pool.c: n_threads 0: min(cores, 8). Tasks get their thread's scratch. */
typedef struct sample_pool sample_pool_t;
typedef void (*sample_task_fn)(void *ctx, int task, sampler_scratch_t *ss);
sample_pool_t *sample_pool_new(int n_threads, int vocab);
int sample_pool_size(const sample_pool_t *p);
void sample_pool_run(sample_pool_t *p, int n_tasks, sample_task_fn fn, void *ctx);
void sample_pool_free(sample_pool_t *p);

/* sample_dev.c (engine/sample_dev.h): the rows i with sample_row[i] (logits rows of
 * dev_logits, in order) sampled by the backend's op sample; tok_by_row[i] gets their
 * tokens. 0, or -1 when out of memory. */
int sample_dev_run(sample_dev_t *d, backend_t *be, float *dev_logits, kiln_request_t *const *req, const int *sample_row,
                   int n_rows, int32_t *tok_by_row);

/* request.c */
kiln_request_t *request_new(kiln_engine_t *eng, const kiln_request_params_t *p, err_t *e);
void request_unref(kiln_request_t *r);
/* Queues an event (engine thread) and calls notify. Takes ownership of ev's strings. */
void request_emit(kiln_request_t *r, kiln_event_t *ev);
/* Feeds a sampled token through detok and stop strings; fills ev->text. Returns 1 when
 * a stop string matched (ev->stop_str set, text cut as requested). */
int request_text(kiln_request_t *r, int32_t token, kiln_event_t *ev);
/* Text still held back at the end (flushed detok + held); malloc'd. */
char *request_text_flush(kiln_request_t *r);

#endif
