/* gen.c — one generation, from submit to the last event, for any of the three APIs.
 *
 * The engine hands back detokenized text per token (stop strings and partial UTF-8
 * already held back). Here that text runs through a two-stage pipeline:
 *
 *   text ─▶ reasoning split (<think>…</think>,  ─▶ reasoning ───────────────▶ fmt_reasoning
 *           Gemma 4's <|channel>thought…<channel|>)
 *                                              └▶ content ─▶ tool-call parser ─▶ fmt_content
 *                                                                            └▶ fmt_call_*
 *
 * and the fmt_* functions (sse.c) either append SSE events to `out` (streaming) or
 * accumulate the final message. Everything here runs on the MHD thread that owns the
 * connection, under no lock: the engine thread only queues events and wakes us. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "server/srv.h"

gen_t *gen_new(conn_t *c, gen_kind_t kind) {
    gen_t *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->c = c;
    g->s = c->s;
    g->kind = kind;
    g->block_open = -1;
    g->created = (long)time(NULL);
    sampling_defaults(&g->params.sampling);
    long n = atomic_fetch_add(&c->s->next_id, 1);
    const char *pre = kind == G_MESSAGES ? "msg_" : kind == G_CHAT ? "chatcmpl-" : "cmpl-";
    snprintf(g->id, sizeof g->id, "%skiln%08lx%06lx", pre, (unsigned long)g->created & 0xffffffff, (unsigned long)n & 0xffffff);
    g->lp_content = json_array();
    g->lp_all = json_array();
    return g;
}

void gen_free(gen_t *g) {
    if (!g) return;
    if (g->r) {
        kiln_request_set_notify(g->r, NULL, NULL);
        kiln_request_free(g->r);
    }
    free(g->prompt);
    for (int i = 0; i < KILN_MAX_STOP; i++) free(g->stop_copy[i]);
    free(g->bias_ids);
    free(g->bias_vals);
    rs_free(&g->rs);
    tc_parser_free(g->tc);
    free(g->tc_prime);
    sbuf_free(&g->content);
    sbuf_free(&g->reasoning);
    for (int i = 0; i < g->n_calls; i++) sbuf_free(&g->calls[i].args);
    free(g->calls);
    json_decref(g->lp_content);
    json_decref(g->lp_all);
    json_decref(g->lp_legacy);
    free(g->echo_text);
    free(g->stop_str);
    free(g->error);
    sbuf_free(&g->out);
    free(g);
}

/* ---- the pipeline ---- */

static void tc_text(void *u, const char *s, size_t n) { fmt_content(u, s, n); }

static void tc_call_begin(void *u, int index, const char *name) {
    gen_t *g = u;
    gen_call_t *nc = realloc(g->calls, sizeof(gen_call_t) * (g->n_calls + 1));
    if (!nc) return;
    g->calls = nc;
    gen_call_t *c = &g->calls[g->n_calls++];
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    long n = atomic_fetch_add(&g->s->next_id, 1);
    snprintf(c->id, sizeof c->id, "%s%08lx%06lx", g->kind == G_MESSAGES ? "toolu_" : "call_",
             (unsigned long)g->created & 0xffffffff, (unsigned long)n & 0xffffff);
    fmt_call_begin(g, index, name);
}

static void tc_call_args(void *u, int index, const char *s, size_t n) {
    gen_t *g = u;
    if (index < 0 || index >= g->n_calls) return;
    sbuf_add(&g->calls[index].args, s, n);
    fmt_call_args(g, index, s, n);
}

static void tc_call_end(void *u, int index) {
    gen_t *g = u;
    if (index < 0 || index >= g->n_calls) return;
    fmt_call_end(g, index);
    if (g->single_call && !g->calls_closed) {
        /* parallel_tool_calls: false — one call is the answer; stop generating now */
        g->calls_closed = 1;
        if (g->r) kiln_cancel(g->r);
    }
}

static const tc_sink_t *tc_sink(gen_t *g) {
    static __thread tc_sink_t k;
    k = (tc_sink_t){g, tc_text, tc_call_begin, tc_call_args, tc_call_end};
    return &k;
}

static void rs_reason(void *u, const char *s, size_t n) { fmt_reasoning(u, s, n); }

static void rs_content(void *u, const char *s, size_t n) {
    gen_t *g = u;
    if (g->tc) tc_push(g->tc, s, n, tc_sink(g));
    else fmt_content(g, s, n);
}

static void feed(gen_t *g, const char *s, size_t n) {
    if (!n || g->calls_closed) return;
    if (g->use_rs) {
        rs_sink_t k = {g, rs_reason, rs_content};
        rs_push(&g->rs, s, n, &k);
    } else {
        rs_content(g, s, n);
    }
}

static void finish_pipeline(gen_t *g) {
    if (g->use_rs) {
        rs_sink_t k = {g, rs_reason, rs_content};
        rs_finish(&g->rs, &k);
    }
    if (g->tc && !g->calls_closed) tc_finish(g->tc, tc_sink(g));
}

/* ---- submit ---- */

int gen_submit(gen_t *g, api_err_t *ae) {
    server_t *s = g->s;
    int code = 0;
    err_t e = {0};
    g->params.prompt = g->prompt;
    g->params.n_prompt = g->n_prompt;
    g->r = kiln_submit(s->eng, &g->params, &code, &e);
    if (!g->r) {
        int st = code == KILN_ERR_QUEUE_FULL ? 429 : code == KILN_ERR_STOPPED ? 503 : 400;
        return api_fail(ae, st, code == KILN_ERR_TOO_LONG ? "max_tokens" : NULL, "%s", e.msg);
    }
    void *ticket = waker_register(s, g->c);
    if (!ticket) return api_fail(ae, 500, NULL, "out of memory");
    kiln_request_set_notify(g->r, waker_notify, ticket);
    if (g->tc && g->tc_prime) tc_push(g->tc, g->tc_prime, strlen(g->tc_prime), tc_sink(g));
    if (g->stream) fmt_stream_begin(g);
    return 0;
}

/* ---- events ---- */

static char *token_text(server_t *s, int32_t id) {
    err_t e = {0};
    char *t = s->tok ? tokenizer_decode(s->tok, &id, 1, 0, &e) : NULL;
    if (!t) { t = malloc(16); snprintf(t, 16, "<%d>", id); }
    return t;
}

static json_t *bytes_of(const char *t) {
    json_t *a = json_array();
    for (const unsigned char *p = (const unsigned char *)t; *p; p++) json_array_append_new(a, json_integer(*p));
    return a;
}

static void record_logprobs(gen_t *g, const kiln_event_t *ev) {
    if (!g->want_logprobs) return;
    char *t = token_text(g->s, ev->token);
    json_t *top = json_array();
    for (int i = 0; i < ev->n_top && i < g->top_logprobs; i++) {
        char *tt = token_text(g->s, ev->top_ids[i]);
        json_array_append_new(top, json_pack("{s:s, s:f, s:o}", "token", tt, "logprob", (double)ev->top_logprobs[i], "bytes", bytes_of(tt)));
        free(tt);
    }
    json_t *ent = json_pack("{s:s, s:f, s:o, s:o}", "token", t, "logprob", (double)ev->logprob, "bytes", bytes_of(t), "top_logprobs", top);
    free(t);
    json_array_append(g->lp_content, ent);
    json_array_append_new(g->lp_all, ent);
}

/* Special tokens are dropped by the engine's detokenizer; the few that are markup for the
 * reasoning and tool-call parsers are put back so the parsers see them. */
static void feed_special(gen_t *g, int32_t tok) {
    server_t *s = g->s;
    for (int i = 0; i < s->n_special_markers; i++)
        if (s->special_markers[i] == tok) {
            const char *t = tokenizer_id_to_token(s->tok, tok);
            if (t) feed(g, t, strlen(t));
            return;
        }
}

/* Times come from the events (when the engine queued each token), not from when this
 * thread got round to draining them, so the inter-token histogram and the logged rate
 * measure the engine's pace whatever the wake-up latency. */
int gen_drain(gen_t *g) {
    if (g->done) return 1;
    server_t *s = g->s;
    kiln_event_t ev;
    while (kiln_request_next(g->r, &ev, 0)) {
        if (ev.token >= 0) {
            g->n_gen++;
            if (g->t_first == 0) {
                g->t_first = ev.t;
                kiln_request_info_t info;
                kiln_request_info(g->r, &info);
                metrics_observe(&s->metrics, &s->metrics.ttft, ev.t - info.t_submit);
            } else {
                metrics_observe(&s->metrics, &s->metrics.itl, ev.t - g->t_last);
            }
            g->t_last = ev.t;
            record_logprobs(g, &ev);
        }
        if (ev.text) feed(g, ev.text, strlen(ev.text));
        if (ev.token >= 0 && s->n_special_markers) feed_special(g, ev.token);
        if (ev.finish) {
            g->finish = ev.finish;
            /* our own cancel after the single allowed tool call is a normal end */
            if (g->calls_closed && g->finish == KILN_FINISH_CANCELLED) g->finish = KILN_FINISH_STOP;
            if (ev.stop_str) g->stop_str = strdup(ev.stop_str);
            if (ev.error) g->error = strdup(ev.error);
            kiln_event_clear(&ev);
            finish_pipeline(g);
            kiln_request_info_t info;
            kiln_request_info(g->r, &info);
            g->n_cached = info.n_cached;
            g->done = 1;
            metrics_tokens(&s->metrics, g->n_prompt, g->n_gen, g->n_cached);
            if (info.t_done > 0) metrics_observe(&s->metrics, &s->metrics.e2e, info.t_done - info.t_submit);
            if (g->stream) fmt_stream_end(g);
            break;
        }
        kiln_event_clear(&ev);
    }
    return g->done;
}

json_t *gen_final_json(gen_t *g) { return fmt_final(g); }
