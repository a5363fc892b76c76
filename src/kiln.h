/* kiln.h — the public C API: an engine that owns a model and serves many requests.
 *
 * kiln_engine_start loads the model and starts the engine thread (DESIGN §1: one thread
 * owns the model, the KV pool and the scheduler). Any thread may submit requests and
 * cancel them; each request has its own event channel that the engine fills with one
 * event per generated token (text already detokenized, held back while a stop string or
 * an incomplete UTF-8 sequence may still be forming) and a final event with the finish
 * reason. A consumer either polls (kiln_request_next with a timeout) or registers a
 * notify callback, called on the engine thread whenever new events are ready (the HTTP
 * server uses it to resume a suspended connection). Library-first: the server and the
 * CLI are just users of this file. */
#ifndef KILN_H
#define KILN_H

#include <stddef.h>
#include <stdint.h>
#include "base/err.h"
#include "engine/sampler.h"
#include "load/config.h"

typedef struct kiln_engine kiln_engine_t;
typedef struct kiln_request kiln_request_t;
struct tokenizer;

typedef struct kiln_engine_opts {
    const char *model_dir;
    const char *backend;       /* "cpu" (default), "cpu-ref", "cuda"                       */
    int threads;               /* 0: all cores                                             */
    dtype_t kv_dtype;          /* default DT_F16 (serving); tests use DT_F32               */
    int block_size;            /* tokens per KV block (16)                                 */
    double kv_cache_gb;        /* pool size in GB; 0 (default): auto, engine/kv_budget.c ... */
    int kv_tokens;             /* ... or in tokens, if > 0 (wins over kv_cache_gb)         */
    int step_tokens;           /* token budget per step (0: 512 on the CPU, 2048 on CUDA)   */
    int max_batch;             /* rows per step (default 64)                               */
    int max_queue;             /* waiting requests before submit refuses (default 1024)   */
    int ctx_len;               /* context limit (default: the model's max_position_embeddings) */
    int prefix_cache;          /* 1 (default): reuse cached prefix blocks                  */
    int load_tokenizer;        /* 1 (default): load tokenizer.json if the model has one    */
    dtype_t buffer_dtype;      /* see model_opts_t (DT_F32 default)                        */
    double weight_cache_gb;    /* CUDA: GB for quantized weights kept dequantized for prefill
                                  (0 default: off; < 0: auto, up to 1/8 of the device)    */
    int snapshot_interval;     /* hybrid models: recurrent-state snapshot spacing in tokens,
                                  rounded to whole blocks (default 256)                    */
    double snapshot_share;     /* hybrid models: share of the cache budget for snapshots (0.25) */
    int sample_threads;        /* threads sampling a step's rows (0: threads if set, at most
                                  8, else min(cores, 8); 1: on the engine thread alone)   */
} kiln_engine_opts_t;

void kiln_engine_opts_default(kiln_engine_opts_t *o);
kiln_engine_t *kiln_engine_start(const kiln_engine_opts_t *o, err_t *e);
/* Cancels everything still running, stops the thread, frees the model. */
void kiln_engine_stop(kiln_engine_t *eng);
const model_config_t *kiln_engine_config(const kiln_engine_t *eng);
/* NULL when the model has no tokenizer.json. */
const struct tokenizer *kiln_engine_tokenizer(const kiln_engine_t *eng);
const char *kiln_engine_model_dir(const kiln_engine_t *eng);
/* The context limit requests are checked against (--ctx or the model's). */
int kiln_engine_ctx_len(const kiln_engine_t *eng);

#define KILN_MAX_STOP 16
#define KILN_MAX_TOP_LOGPROBS 20

typedef struct kiln_request_params {
    const int32_t *prompt;     /* copied at submit */
    int n_prompt;
    int max_tokens;            /* > 0 */
    sampling_params_t sampling;/* copied (logit_bias arrays too) */
    const int32_t *stop_ids;   /* extra stop token ids (EOS ids always stop unless ignore_eos) */
    int n_stop_ids;
    const char *stop[KILN_MAX_STOP]; /* stop strings (matched on the detokenized output) */
    int n_stop;
    int ignore_eos;
    int logprobs;              /* 1: report the chosen token's logprob                   */
    int top_logprobs;          /* 0..KILN_MAX_TOP_LOGPROBS alternatives per token        */
    int include_stop_str;      /* 1: keep the matched stop string in the text            */
    int keep_special;          /* 1: special tokens appear in the text (tool-call markers) */
} kiln_request_params_t;

typedef enum kiln_finish {
    KILN_NOT_FINISHED, KILN_FINISH_STOP, KILN_FINISH_LENGTH, KILN_FINISH_CANCELLED, KILN_FINISH_ERROR
} kiln_finish_t;

typedef struct kiln_event {
    int32_t token;             /* -1 on a final event that carries no token              */
    char *text;                /* newly final text (malloc'd, may be ""); free with kiln_event_clear */
    float logprob;
    int n_top;
    int32_t top_ids[KILN_MAX_TOP_LOGPROBS];
    float top_logprobs[KILN_MAX_TOP_LOGPROBS];
    kiln_finish_t finish;      /* set on the last event of the request                    */
    char *error;               /* with KILN_FINISH_ERROR                                  */
    int stop_id;               /* with FINISH_STOP: the stop token id, or -1              */
    const char *stop_str;      /* with FINISH_STOP: the stop string matched, or NULL; it
                                  points into the request: valid until kiln_request_free */
    double t;                  /* when the engine queued it (CLOCK_MONOTONIC seconds)    */
} kiln_event_t;

/* Submit errors carry a code so the server can map them: */
enum { KILN_ERR_INVALID = 1, KILN_ERR_TOO_LONG = 2, KILN_ERR_QUEUE_FULL = 3, KILN_ERR_STOPPED = 4 };

/* Returns NULL with e set and *code one of the KILN_ERR_* values. */
kiln_request_t *kiln_submit(kiln_engine_t *eng, const kiln_request_params_t *p, int *code, err_t *e);
/* Waits up to timeout_ms (-1: forever, 0: poll) for the next event; returns 1 with *ev
 * filled, 0 on timeout. After the event with finish != 0 there are no more. */
int kiln_request_next(kiln_request_t *r, kiln_event_t *ev, int timeout_ms);
/* Called on the engine thread after events are queued (keep it short, never block). Once
 * kiln_request_set_notify(r, NULL, NULL) or kiln_request_free(r) has returned, the old
 * callback is not running and will not run again. */
void kiln_request_set_notify(kiln_request_t *r, void (*fn)(void *), void *arg);
void kiln_cancel(kiln_request_t *r);
/* Releases the handle; cancels the request if still running. */
void kiln_request_free(kiln_request_t *r);
void kiln_event_clear(kiln_event_t *ev);

typedef struct kiln_request_info {
    int n_prompt, n_cached;    /* prompt tokens, of which served from the prefix cache    */
    int n_generated;
    double t_submit, t_first_token, t_done; /* CLOCK_MONOTONIC seconds (0: not yet)     */
} kiln_request_info_t;
void kiln_request_info(kiln_request_t *r, kiln_request_info_t *info);

typedef struct kiln_stats {
    int waiting, running;
    int kv_blocks_total, kv_blocks_used, kv_blocks_cached;
    uint64_t prompt_tokens, generated_tokens, cached_tokens, computed_prompt_tokens;
    uint64_t requests_finished, requests_cancelled, preemptions, steps;
    uint64_t snapshots_saved, snapshots_restored; /* hybrid models */
    /* sliding-window models (DESIGN §5): the sliding layers' own pool, and the most blocks
     * of it one sequence has held between steps (at most ceil(window/block_size) + 1) */
    int kv_swa_blocks_total, kv_swa_blocks_used, kv_swa_blocks_cached, kv_swa_seq_blocks_max;
    /* where the engine thread's time goes, summed over the `steps` that ran a forward
     * (seconds, CLOCK_MONOTONIC): schedule = taking submissions, cancels, building the
     * step (block allocation, prefix attach, preemption); forward = model_forward (on a GPU
     * this includes waiting for the device and the logits copy); post = everything after
     * it (hashing, sampling, stop checks, text, events, finishing) and publishing stats.
     * step_rows: rows summed over those steps. Idle waits for work are not counted. */
    double time_schedule_s, time_forward_s, time_post_s;
    uint64_t step_rows;
} kiln_stats_t;
void kiln_stats(kiln_engine_t *eng, kiln_stats_t *s);

#endif
