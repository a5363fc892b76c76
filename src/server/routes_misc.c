/* routes_misc.c — GET /health, GET /metrics, POST /tokenize, POST /detokenize.
 *
 * /health answers 200 as soon as the server listens, which is after the model loaded:
 * kiln serve loads first and binds second, so there is no "loading" state to report.
 * /tokenize takes {"prompt": "..."} (add_special_tokens, default true) or chat
 * {"messages": [...]} rendered through the template, and returns vLLM's shape
 * {"count", "max_model_len", "tokens"}; /detokenize takes {"tokens": [...]}. */
#include <stdlib.h>
#include <string.h>
#include "server/srv.h"

int route_health(conn_t *c) { return reply_json(c, 200, json_pack("{s:s}", "status", "ok")); }

int route_metrics(conn_t *c) {
    char *t = metrics_render(&c->s->metrics, c->s->eng);
    int rc = reply_text(c, 200, "text/plain; version=0.0.4", t, strlen(t));
    free(t);
    return rc;
}

int route_tokenize(conn_t *c, json_t *req) {
    server_t *s = c->s;
    api_err_t ae = {0};
    int32_t *ids = NULL;
    int n = 0, add = 1;
    char *text = NULL;
    if (p_bool(req, "add_special_tokens", &add, &ae)) return reply_error(c, &ae);
    json_t *p = json_object_get(req, "prompt");
    if (json_object_get(req, "messages")) {
        gen_t *g = gen_new(c, G_CHAT);
        int bad = !g || prompt_chat(s, req, API_OPENAI, g, &text, &ae);
        gen_free(g);
        if (bad) return reply_error(c, &ae);
        add = 0;
    } else if (json_is_string(p)) {
        text = strdup(json_string_value(p));
    } else {
        api_fail(&ae, 400, "prompt", "send {\"prompt\": \"text\"} or {\"messages\": [...]}");
        return reply_error(c, &ae);
    }
    int rc = prompt_tokenize(s, text, add, &ids, &n, &ae);
    free(text);
    if (rc) return reply_error(c, &ae);
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    free(ids);
    return reply_json(c, 200, json_pack("{s:i, s:i, s:o}", "count", n, "max_model_len", s->ctx_len, "tokens", a));
}

int route_detokenize(conn_t *c, json_t *req) {
    server_t *s = c->s;
    api_err_t ae = {0};
    json_t *t = json_object_get(req, "tokens");
    if (!json_is_array(t)) {
        api_fail(&ae, 400, "tokens", "'tokens' must be an array of token ids");
        return reply_error(c, &ae);
    }
    if (!s->tok) {
        api_fail(&ae, 400, NULL, "this model has no tokenizer.json");
        return reply_error(c, &ae);
    }
    size_t n = json_array_size(t), i;
    int32_t *ids = malloc(sizeof(int32_t) * (n + 1));
    json_t *v;
    json_array_foreach(t, i, v) {
        json_int_t id = json_is_integer(v) ? json_integer_value(v) : -1;
        if (id < 0 || id >= tokenizer_vocab_size(s->tok)) {
            free(ids);
            api_fail(&ae, 400, "tokens", "tokens[%zu] is not a token id in [0, %d)", i, tokenizer_vocab_size(s->tok));
            return reply_error(c, &ae);
        }
        ids[i] = (int32_t)id;
    }
    err_t e = {0};
    char *text = tokenizer_decode(s->tok, ids, (int)n, 0, &e);
    free(ids);
    if (!text) {
        api_fail(&ae, 400, "tokens", "%s", e.msg);
        return reply_error(c, &ae);
    }
    json_t *o = json_pack("{s:s}", "prompt", text);
    free(text);
    if (!o) {
        api_fail(&ae, 400, "tokens", "these tokens do not decode to valid UTF-8 on their own");
        return reply_error(c, &ae);
    }
    return reply_json(c, 200, o);
}
