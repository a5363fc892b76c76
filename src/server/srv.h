/* srv.h — the server's private structures, shared by its files:
 *
 *   http.c            daemon, per-connection state, body limits, routing, auth, logging
 *   cors.c            allowed browser origins, CORS headers, OPTIONS preflights
 *   waker.c           engine notify -> MHD resume, safe against late notifies; a client
 *                     that hangs up while its connection is suspended -> cancel
 *   gen.c             one generation: submit, drain events, reasoning/tool pipeline
 *   sse.c             OpenAI and Anthropic event formatting (stream and final JSON)
 *   routes_openai.c   /v1/chat/completions, /v1/completions, /v1/models
 *   routes_anthropic.c /v1/messages, /v1/messages/count_tokens
 *   routes_misc.c     /health, /metrics, /tokenize, /detokenize
 *   prompt.c          messages -> chat template input -> token ids
 *   params.c          typed, range-checked request parameters (errors name the parameter)
 *   metrics.c         Prometheus counters and histograms
 *   json_body.c       body parsing: UTF-8 check, JSON errors with line/column
 */
#ifndef KILN_SRV_H
#define KILN_SRV_H

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include "chat/chat_template.h"
#include "kiln.h"
#include "server/reasoning.h"
#include "base/sbuf.h"
#include "server/server.h"
#include "server/toolcall.h"
#include "tokenizer/tokenizer.h"

typedef enum route {
    R_CHAT, R_COMPLETIONS, R_MODELS, R_MODEL, R_MESSAGES, R_COUNT_TOKENS,
    R_HEALTH, R_METRICS, R_TOKENIZE, R_DETOKENIZE, R_UNKNOWN, R_COUNT
} route_t;
extern const char *const route_names[R_COUNT];

typedef enum api { API_OPENAI, API_ANTHROPIC } api_t;

/* ---- metrics.c ---- */
#define HIST_BUCKETS 14
typedef struct hist {
    uint64_t b[HIST_BUCKETS + 1]; /* cumulative on output; here per bucket, last = +Inf */
    uint64_t n;
    double sum;
} hist_t;

typedef struct metrics {
    pthread_mutex_t mu;
    uint64_t req_by_status[R_COUNT][600];
    uint64_t prompt_tokens, completion_tokens, cached_tokens;
    uint64_t cancelled_disconnect, streams_active;
    hist_t ttft, itl, e2e;
} metrics_t;

void metrics_init(metrics_t *m);
void metrics_free(metrics_t *m);
void metrics_request(metrics_t *m, route_t r, int status);
void metrics_observe(metrics_t *m, hist_t *h, double v);
void metrics_tokens(metrics_t *m, int prompt, int completion, int cached);
/* Prometheus text exposition, engine stats included. */
char *metrics_render(metrics_t *m, kiln_engine_t *eng);

/* ---- the server ---- */
enum { CORS_OFF, CORS_LOOPBACK, CORS_ANY, CORS_LIST };

struct server {
    kiln_engine_t *eng;
    const tokenizer_t *tok;      /* may be NULL: chat and text routes then answer 400   */
    const model_config_t *cfg;
    server_opts_t o;
    int ctx_len;                 /* the engine's context limit (kiln_engine_ctx_len)      */
    int cors_mode;               /* CORS_*; cors.c                                        */
    char **cors_list;
    int n_cors;
    char model_id[256];
    char *api_key;
    chat_template_t *tmpl;       /* NULL when the model has none                        */
    tc_format_t tool_format;
    const rs_markers_t *reason;  /* reasoning markup (<think>, Gemma 4's channel) or NULL */
    int32_t *special_markers;    /* special token ids whose text the parsers need       */
    int n_special_markers;
    struct MHD_Daemon *d;
    metrics_t metrics;
    atomic_int stopping;
    atomic_long next_id;
    /* waker.c: live connections by slot, for notify and for shutdown */
    pthread_mutex_t wk_mu;
    struct conn **slots;
    struct wslot **tickets;      /* one per slot, never moved or freed while serving */
    int n_slots, cap_slots;
    int *free_slots, n_free;
    uint32_t wk_seq;             /* registrations so far: tells a slot's holders apart     */
    int watch_ep, watch_stop;    /* waker.c: epoll set of suspended sockets, its stop eventfd */
    pthread_t watch_thr;
    int watching;
};

/* An API error on its way to the client. */
typedef struct api_err {
    int status;                  /* 400, 401, 404, 405, 413, 429, 500 */
    char param[64];              /* the parameter at fault, or "" */
    err_t e;
} api_err_t;
int api_fail(api_err_t *ae, int status, const char *param, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

struct gen;

/* Per-request state (MHD's con_cls). Reference-counted: MHD's request and, for streams,
 * the response's content reader each hold one. */
typedef struct conn {
    server_t *s;
    struct MHD_Connection *mc;
    atomic_int refs;
    route_t route;
    api_t api;
    char method[16];
    char path[256];
    sbuf_t body;
    int too_big, handled;
    double t0;
    int status;                  /* what we answered (for the log and metrics) */
    char cors[256];              /* Access-Control-Allow-Origin to send, "" for none */
    /* suspend/resume handshake with the engine's notify (waker.c) */
    atomic_int suspended, wake;
    int slot;                    /* waker slot, -1 when not registered */
    uint32_t wseq;               /* which registration of the slot is ours */
    int fd;                      /* the socket, watched for a hang-up while suspended */
    atomic_int gone;             /* the client hung up while we were suspended */
    struct gen *g;
} conn_t;

/* ---- waker.c ---- */
int waker_init(server_t *s);
/* Stops the hang-up watcher thread (after the daemon stopped), then frees the table. */
void waker_free(server_t *s);
/* Registers c and returns the notify argument to give the engine (0 when out of memory). */
void *waker_register(server_t *s, conn_t *c);
void waker_unregister(server_t *s, conn_t *c);
void waker_notify(void *arg);     /* the engine's notify callback */
/* Suspends c unless a wake is pending; returns 1 if suspended. Call from MHD callbacks. */
int conn_suspend(conn_t *c);
/* Wakes every registered connection (shutdown). */
void waker_wake_all(server_t *s);

/* ---- cors.c ---- */
int cors_init(server_t *s, const char *spec, err_t *e);   /* --cors-origin; see server.h */
void cors_free(server_t *s);
void cors_for_request(conn_t *c, const char *origin);    /* sets c->cors */
void cors_headers(conn_t *c, struct MHD_Response *r);
int cors_options(conn_t *c, const char *methods);        /* answers an OPTIONS request */
const char *cors_describe(const server_t *s);

/* ---- http.c helpers used by the routes ---- */
int reply_queue(conn_t *c, int status, struct MHD_Response *r); /* adds the common headers; destroys r */
int reply_json(conn_t *c, int status, json_t *body);            /* steals body */
int reply_text(conn_t *c, int status, const char *ctype, const char *text, size_t n);
int reply_error(conn_t *c, const api_err_t *ae);
int reply_stream(conn_t *c);                                     /* 200 text/event-stream from c->g */
void conn_unref(conn_t *c);

/* ---- json_body.c ---- */
/* Parses a request body: UTF-8 checked (400 with the byte offset), JSON errors with line
 * and column, must be an object. */
json_t *body_parse(const char *s, size_t n, api_err_t *ae);
int utf8_valid(const char *s, size_t n, size_t *bad);

/* ---- params.c ---- */
/* Optional typed fields: absent or null leaves *out alone and returns 0. */
int p_number(json_t *o, const char *key, double lo, double hi, double *out, api_err_t *ae);
int p_int(json_t *o, const char *key, long lo, long hi, long *out, api_err_t *ae);
int p_bool(json_t *o, const char *key, int *out, api_err_t *ae);
int p_string(json_t *o, const char *key, const char **out, api_err_t *ae);
/* Fails on keys this route does not take that would change the result if ignored. */
int p_reject(json_t *o, const char *key, const char *why, api_err_t *ae);

/* ---- gen.c ---- */
typedef enum gen_kind { G_CHAT, G_COMPLETION, G_MESSAGES } gen_kind_t;

typedef struct gen_call {
    char id[40];
    char name[256];
    sbuf_t args;
    int block;                   /* anthropic content block index */
} gen_call_t;

typedef struct gen {
    conn_t *c;
    server_t *s;
    gen_kind_t kind;
    int stream;
    kiln_request_t *r;
    kiln_request_params_t params;
    int32_t *prompt;
    int n_prompt;
    char *stop_copy[KILN_MAX_STOP];
    int32_t *bias_ids;
    float *bias_vals;
    /* pipeline */
    int use_rs;
    reasoning_split_t rs;
    tc_parser_t *tc;
    char *tc_prime;              /* forced call opening (tool_choice), fed to the parser first */
    int single_call;             /* parallel_tool_calls: false — stop after the first call    */
    int calls_closed;            /* ... and it has ended: the rest of the output is dropped   */
    /* results */
    sbuf_t content, reasoning;
    gen_call_t *calls;
    int n_calls;
    json_t *lp_content;          /* OpenAI chat logprobs.content entries not yet sent */
    json_t *lp_all;              /* all of them (non-stream) */
    json_t *lp_legacy;           /* completions: {tokens, token_logprobs, top_logprobs, text_offset} */
    size_t text_offset;
    int want_logprobs, top_logprobs;
    int include_usage, echo;
    char *echo_text;
    kiln_finish_t finish;
    char *stop_str;
    char *error;
    int n_gen, n_cached, done;
    double t_first, t_last;
    /* output */
    sbuf_t out;                  /* SSE bytes ready to send (stream) */
    char id[64];
    long created;
    int role_sent;
    int block_open, block_index; /* anthropic: the open content block (-1 none) and the next index */
    int block_type;              /* 0 text, 1 thinking, 2 tool_use */
    double last_ping;
} gen_t;

gen_t *gen_new(conn_t *c, gen_kind_t kind);
void gen_free(gen_t *g);
/* Submits; on failure fills ae (400 too long / invalid, 429 queue full, 503 stopping). */
int gen_submit(gen_t *g, api_err_t *ae);
/* Drains available events through the pipeline; returns 1 once the final event is in. */
int gen_drain(gen_t *g);
/* The non-stream response body (after gen_drain returned 1). */
json_t *gen_final_json(gen_t *g);

/* ---- sse.c: the API-specific formatting ---- */
void fmt_stream_begin(gen_t *g);
void fmt_reasoning(gen_t *g, const char *s, size_t n);
void fmt_content(gen_t *g, const char *s, size_t n);
void fmt_call_begin(gen_t *g, int index, const char *name);
void fmt_call_args(gen_t *g, int index, const char *s, size_t n);
void fmt_call_end(gen_t *g, int index);
void fmt_stream_end(gen_t *g);
json_t *fmt_final(gen_t *g);
void fmt_stream_error(gen_t *g, const char *msg);
const char *openai_finish(gen_t *g);

/* ---- prompt.c ---- */
/* OpenAI chat / Anthropic messages request -> rendered prompt text. */
int prompt_chat(server_t *s, json_t *req, api_t api, gen_t *g, char **text, api_err_t *ae);
int prompt_tokenize(server_t *s, const char *text, int add_special, int32_t **ids, int *n, api_err_t *ae);
/* Normalized tools in OpenAI shape (new reference) from either API; NULL when none. */
json_t *tools_openai(json_t *req, api_t api, api_err_t *ae, int *bad);

/* ---- routes ---- */
int route_chat(conn_t *c, json_t *req);
int route_completions(conn_t *c, json_t *req);
int route_models(conn_t *c, const char *id);
int route_messages(conn_t *c, json_t *req);
int route_count_tokens(conn_t *c, json_t *req);
int route_health(conn_t *c);
int route_metrics(conn_t *c);
int route_tokenize(conn_t *c, json_t *req);
int route_detokenize(conn_t *c, json_t *req);
/* Shared by the OpenAI and Anthropic routes: sampling, stop, max_tokens. */
int common_sampling(server_t *s, json_t *req, api_t api, gen_t *g, api_err_t *ae);
/* Finishes a generation route: stream response, or suspend until done (non-stream). */
int run_generation(conn_t *c, gen_t *g);
/* Called again by http.c on resume for a non-stream generation. */
int continue_generation(conn_t *c);

double now_mono(void);

#endif
