/* server.c — starting and stopping the server: the chat template, what the model's
 * markup looks like (tool-call format, reasoning markers), metrics, the waker table, the daemon.
 *
 * Shutdown order matters: stop accepting, cancel every request in flight and let each
 * connection send its final event (MHD forbids stopping with suspended connections), stop
 * the daemon, and only then free the waker table — after the engine has gone quiet, since
 * a cancelled request's last notify may still be on its way from the engine thread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "base/log.h"
#include "server/srv.h"

int server_http_start(server_t *s, err_t *e);
void server_http_stop(server_t *s);

static int has_token(void *u, const char *t) { return u && tokenizer_token_to_id((const tokenizer_t *)u, t) >= 0; }

static const char *markers[] = {"<think>", "</think>", "<tool_call>", "</tool_call>", "<|tool_call>", "<tool_call|>", "<|\"|>",
                                "<|python_tag|>", "<|channel>", "<channel|>"};

/* The reasoning markup: Gemma 4's thought channel when the template or the vocabulary has
 * its <|channel> token (Gemma 4 templates write no <think>), else <think> when either knows
 * that, else none. */
static const rs_markers_t *reasoning_markers(const char *src, const tokenizer_t *tok) {
    if ((src && strstr(src, "<|channel>")) || has_token((void *)tok, "<|channel>")) return &RS_GEMMA4;
    if ((src && strstr(src, "<think>")) || has_token((void *)tok, "<think>")) return &RS_THINK;
    return NULL;
}

server_t *server_start(kiln_engine_t *eng, const server_opts_t *o, err_t *e) {
    server_t *s = calloc(1, sizeof *s);
    if (!s) { err_set(e, "out of memory"); return NULL; }
    s->eng = eng;
    s->o = *o;
    s->tok = kiln_engine_tokenizer(eng);
    s->cfg = kiln_engine_config(eng);
    s->ctx_len = kiln_engine_ctx_len(eng);
    if (o->api_key && *o->api_key) s->api_key = strdup(o->api_key);
    const char *dir = kiln_engine_model_dir(eng);
    if (o->model_id && *o->model_id) snprintf(s->model_id, sizeof s->model_id, "%s", o->model_id);
    else {
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s", dir);
        size_t n = strlen(tmp);
        while (n > 1 && tmp[n - 1] == '/') tmp[--n] = 0;
        const char *b = strrchr(tmp, '/');
        snprintf(s->model_id, sizeof s->model_id, "%s", b ? b + 1 : tmp);
    }
    err_t te = {0};
    s->tmpl = chat_template_load(dir, &te);
    if (!s->tmpl) log_warn("serve: no chat template (%s); /v1/chat/completions and /v1/messages will answer 400", te.msg);
    const char *src = s->tmpl ? chat_template_source(s->tmpl) : NULL;
    if (o->tool_format) {
        int f = tc_format_parse(o->tool_format);
        if (f < 0) { err_set(e, "--tool-format '%s': expected hermes, qwen-xml, llama-json, gemma4 or none", o->tool_format); goto err; }
        s->tool_format = (tc_format_t)f;
    } else {
        s->tool_format = tc_detect(src, has_token, (void *)s->tok);
    }
    s->reason = reasoning_markers(src, s->tok);
    if (s->tok) {
        s->special_markers = malloc(sizeof(int32_t) * (sizeof markers / sizeof markers[0]));
        for (size_t i = 0; i < sizeof markers / sizeof markers[0]; i++) {
            int32_t id = tokenizer_token_to_id(s->tok, markers[i]);
            if (id >= 0 && tokenizer_is_special(s->tok, id)) s->special_markers[s->n_special_markers++] = id;
        }
    }
    if (cors_init(s, o->cors_origin, e)) goto err;
    metrics_init(&s->metrics);
    waker_init(s);
    if (server_http_start(s, e)) {
        waker_free(s);
        metrics_free(&s->metrics);
        goto err;
    }
    log_info("serve: model '%s', context %d, tool calls: %s, reasoning split: %s, CORS: %s", s->model_id, s->ctx_len,
             tc_format_name(s->tool_format), s->reason ? s->reason->name : "off", cors_describe(s));
    return s;
err:
    cors_free(s);
    chat_template_free(s->tmpl);
    free(s->special_markers);
    free(s->api_key);
    free(s);
    return NULL;
}

void server_stop(server_t *s) {
    if (!s) return;
    atomic_store(&s->stopping, 1);
    server_http_stop(s);
    /* Wait (briefly) for the engine to finish the cancelled requests so no notify for
     * them can arrive after the waker table is gone. */
    for (int i = 0; i < 300; i++) {
        kiln_stats_t st;
        kiln_stats(s->eng, &st);
        if (!st.running && !st.waiting) break;
        usleep(10000);
    }
    waker_free(s);
    metrics_free(&s->metrics);
    cors_free(s);
    chat_template_free(s->tmpl);
    free(s->special_markers);
    free(s->api_key);
    free(s);
}
