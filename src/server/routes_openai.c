/* routes_openai.c — POST /v1/chat/completions, POST /v1/completions, GET /v1/models.
 *
 * Parameter handling follows OpenAI's documented ranges; extensions that vLLM made
 * common are accepted too (top_k, min_p, repetition_penalty, ignore_eos,
 * chat_template_kwargs). Anything that would silently change the meaning of a request if
 * ignored (n > 1, response_format json, best_of, suffix) is a 400 instead. Sampling
 * defaults come from the model's generation_config.json. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "server/srv.h"

/* Sampling, stop strings and max_tokens: the parameters both APIs share (names differ). */
int common_sampling(server_t *s, json_t *req, api_t api, gen_t *g, api_err_t *ae) {
    sampling_params_t *sp = &g->params.sampling;
    const model_config_t *cfg = s->cfg;
    double t = isnan(cfg->gen_temperature) ? 1.0 : cfg->gen_temperature;
    double tp = isnan(cfg->gen_top_p) ? 1.0 : cfg->gen_top_p;
    double mp = isnan(cfg->gen_min_p) ? 0.0 : cfg->gen_min_p;
    double rp = isnan(cfg->gen_repetition_penalty) ? 1.0 : cfg->gen_repetition_penalty;
    long tk = cfg->gen_top_k > 0 ? cfg->gen_top_k : 0;
    double pp = 0, fp = 0;
    long seed = -1, max_tokens = -1;
    int V = cfg->vocab_size;
    if (p_number(req, "temperature", 0, api == API_ANTHROPIC ? 1 : 2, &t, ae)) return -1;
    if (p_number(req, "top_p", 0, 1, &tp, ae)) return -1;
    if (tp <= 0) return api_fail(ae, 400, "top_p", "'top_p' must be in (0, 1], got 0");
    if (p_int(req, "top_k", -1, V, &tk, ae)) return -1;
    if (tk < 0) tk = 0;
    if (p_number(req, "min_p", 0, 1, &mp, ae)) return -1;
    if (api == API_OPENAI) {
        if (p_number(req, "presence_penalty", -2, 2, &pp, ae)) return -1;
        if (p_number(req, "frequency_penalty", -2, 2, &fp, ae)) return -1;
        if (p_number(req, "repetition_penalty", 0.01, 10, &rp, ae)) return -1;
        if (p_int(req, "seed", -((long)1 << 53), (long)1 << 53, &seed, ae)) return -1;
        long mt = -1, mct = -1;
        if (p_int(req, "max_tokens", 1, 1 << 30, &mt, ae)) return -1;
        if (p_int(req, "max_completion_tokens", 1, 1 << 30, &mct, ae)) return -1;
        max_tokens = mct > 0 ? mct : mt;
        if (p_bool(req, "ignore_eos", &g->params.ignore_eos, ae)) return -1;
    } else {
        json_t *mt = json_object_get(req, "max_tokens");
        if (!mt) return api_fail(ae, 400, "max_tokens", "max_tokens: Field required");
        if (p_int(req, "max_tokens", 1, 1 << 30, &max_tokens, ae)) return -1;
    }
    sp->temperature = (float)t;
    sp->top_p = (float)tp;
    sp->top_k = (int)tk;
    sp->min_p = (float)mp;
    sp->presence_penalty = (float)pp;
    sp->frequency_penalty = (float)fp;
    sp->repetition_penalty = (float)rp;
    sp->seed = seed >= 0 ? (uint64_t)seed : (uint64_t)(now_mono() * 1e9) ^ (uint64_t)atomic_fetch_add(&s->next_id, 1) * 0x9e3779b97f4a7c15ull;
    g->params.max_tokens = (int)max_tokens; /* -1: resolved against the context after tokenizing */

    /* stop / stop_sequences */
    const char *skey = api == API_OPENAI ? "stop" : "stop_sequences";
    json_t *stop = json_object_get(req, skey);
    if (stop && !json_is_null(stop)) {
        json_t *list = json_is_string(stop) ? json_pack("[O]", stop) : json_incref(stop);
        if (!json_is_array(list) || json_array_size(list) > KILN_MAX_STOP) {
            json_decref(list);
            return api_fail(ae, 400, skey, "'%s' must be a string or an array of at most %d strings", skey, KILN_MAX_STOP);
        }
        size_t i;
        json_t *v;
        json_array_foreach(list, i, v) {
            const char *str = json_string_value(v);
            if (!str || !*str) { json_decref(list); return api_fail(ae, 400, skey, "%s[%zu] must be a non-empty string", skey, i); }
            g->stop_copy[g->params.n_stop] = strdup(str);
            g->params.stop[g->params.n_stop] = g->stop_copy[g->params.n_stop];
            g->params.n_stop++;
        }
        json_decref(list);
    }

    /* logit_bias: {"token id": bias} */
    json_t *lb = api == API_OPENAI ? json_object_get(req, "logit_bias") : NULL;
    if (lb && !json_is_null(lb)) {
        if (!json_is_object(lb)) return api_fail(ae, 400, "logit_bias", "'logit_bias' must be an object mapping token ids to numbers");
        size_t n = json_object_size(lb), k = 0;
        g->bias_ids = malloc(sizeof(int32_t) * (n + 1));
        g->bias_vals = malloc(sizeof(float) * (n + 1));
        const char *key;
        json_t *v;
        json_object_foreach(lb, key, v) {
            char *end;
            long id = strtol(key, &end, 10);
            if (!*key || *end || id < 0 || id >= V)
                return api_fail(ae, 400, "logit_bias", "logit_bias key '%s' is not a token id in [0, %d)", key, V);
            if (!json_is_number(v) || json_number_value(v) < -100 || json_number_value(v) > 100)
                return api_fail(ae, 400, "logit_bias", "logit_bias['%s'] must be a number in [-100, 100]", key);
            g->bias_ids[k] = (int32_t)id;
            g->bias_vals[k++] = (float)json_number_value(v);
        }
        sp->bias_ids = g->bias_ids;
        sp->bias_vals = g->bias_vals;
        sp->n_bias = (int)k;
    }
    int stream = 0;
    if (p_bool(req, "stream", &stream, ae)) return -1;
    g->stream = stream;
    return 0;
}

/* max_tokens left unset: as much as the context allows, capped by --default-max-tokens. */
static int resolve_max_tokens(server_t *s, gen_t *g, api_err_t *ae) {
    int ctx = s->ctx_len;
    if (g->n_prompt >= ctx)
        return api_fail(ae, 400, "messages", "the prompt is %d tokens, which leaves no room in the context of %d tokens", g->n_prompt, ctx);
    if (g->params.max_tokens < 0) {
        int room = ctx - g->n_prompt;
        g->params.max_tokens = s->o.default_max_tokens > 0 && s->o.default_max_tokens < room ? s->o.default_max_tokens : room;
    }
    return 0;
}

int continue_generation(conn_t *c) {
    gen_t *g = c->g;
    for (;;) {
        if (gen_drain(g)) {
            if (g->finish == KILN_FINISH_ERROR || g->finish == KILN_FINISH_CANCELLED) {
                api_err_t ae = {0};
                api_fail(&ae, g->finish == KILN_FINISH_ERROR ? 500 : 503, NULL, "%s",
                         g->finish == KILN_FINISH_ERROR ? (g->error ? g->error : "generation failed") : "the generation was cancelled (server shutting down)");
                return reply_error(c, &ae);
            }
            return reply_json(c, 200, gen_final_json(g));
        }
        if (conn_suspend(c)) return 0;
    }
}

int run_generation(conn_t *c, gen_t *g) {
    api_err_t ae = {0};
    c->g = g;
    if (resolve_max_tokens(c->s, g, &ae) || gen_submit(g, &ae)) return reply_error(c, &ae);
    if (g->stream) return reply_stream(c);
    return continue_generation(c);
}

static int chat_like_common(conn_t *c, json_t *req, gen_t *g, api_err_t *ae) {
    long n = 1;
    if (p_int(req, "n", 1, 128, &n, ae)) return -1;
    if (n != 1) return api_fail(ae, 400, "n", "'n' must be 1 (kiln returns one choice per request), got %ld", n);
    json_t *so = json_object_get(req, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) return api_fail(ae, 400, "stream_options", "'stream_options' must be an object");
        if (p_bool(so, "include_usage", &g->include_usage, ae)) { snprintf(ae->param, sizeof ae->param, "stream_options.include_usage"); return -1; }
    }
    return 0;
}

int route_chat(conn_t *c, json_t *req) {
    server_t *s = c->s;
    api_err_t ae = {0};
    char *text = NULL;
    gen_t *g = gen_new(c, G_CHAT);
    if (!g) { api_fail(&ae, 500, NULL, "out of memory"); goto err; }
    json_t *rf = json_object_get(req, "response_format");
    const char *rft = json_string_value(json_object_get(rf, "type"));
    if (rf && !json_is_null(rf) && (!rft || strcmp(rft, "text"))) {
        api_fail(&ae, 400, "response_format", "response_format '%s' is not supported yet (structured output has not landed)", rft ? rft : "?");
        goto err;
    }
    int lp = 0;
    long top = 0;
    if (p_bool(req, "logprobs", &lp, &ae) || p_int(req, "top_logprobs", 0, KILN_MAX_TOP_LOGPROBS, &top, &ae)) goto err;
    if (top > 0 && !lp) { api_fail(&ae, 400, "top_logprobs", "'top_logprobs' needs 'logprobs': true"); goto err; }
    g->want_logprobs = lp;
    g->top_logprobs = (int)top;
    g->params.logprobs = lp;
    g->params.top_logprobs = (int)top;
    int ptc = 1;
    if (p_bool(req, "parallel_tool_calls", &ptc, &ae)) goto err;
    g->single_call = !ptc;
    if (chat_like_common(c, req, g, &ae) || common_sampling(s, req, API_OPENAI, g, &ae)) goto err;
    if (prompt_chat(s, req, API_OPENAI, g, &text, &ae)) goto err;
    if (prompt_tokenize(s, text, 0, &g->prompt, &g->n_prompt, &ae)) goto err;
    free(text);
    return run_generation(c, g);
err:
    free(text);
    if (g && c->g != g) gen_free(g);
    return reply_error(c, &ae);
}

int route_completions(conn_t *c, json_t *req) {
    server_t *s = c->s;
    api_err_t ae = {0};
    gen_t *g = gen_new(c, G_COMPLETION);
    if (!g) { api_fail(&ae, 500, NULL, "out of memory"); goto err; }
    if (p_reject(req, "suffix", "is not supported (no fill-in-the-middle)", &ae)) goto err;
    long best_of = 1, lp = -1;
    if (p_int(req, "best_of", 1, 1, &best_of, &ae)) goto err;
    if (p_int(req, "logprobs", 0, KILN_MAX_TOP_LOGPROBS, &lp, &ae)) goto err;
    if (lp >= 0) {
        g->want_logprobs = 1;
        g->top_logprobs = (int)lp;
        g->params.logprobs = 1;
        g->params.top_logprobs = (int)lp;
    }
    if (p_bool(req, "echo", &g->echo, &ae)) goto err;
    if (chat_like_common(c, req, g, &ae) || common_sampling(s, req, API_OPENAI, g, &ae)) goto err;
    json_t *p = json_object_get(req, "prompt");
    if (json_is_array(p) && json_array_size(p) == 1 && (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0))))
        p = json_array_get(p, 0); /* a batch of one */
    if (json_is_string(p)) {
        if (!*json_string_value(p)) { api_fail(&ae, 400, "prompt", "'prompt' is empty"); goto err; }
        if (prompt_tokenize(s, json_string_value(p), 1, &g->prompt, &g->n_prompt, &ae)) goto err;
        if (g->echo) g->echo_text = strdup(json_string_value(p));
    } else if (json_is_array(p) && json_array_size(p) && json_is_integer(json_array_get(p, 0))) {
        size_t n = json_array_size(p), i;
        json_t *v;
        g->prompt = malloc(sizeof(int32_t) * n);
        json_array_foreach(p, i, v) {
            json_int_t id = json_is_integer(v) ? json_integer_value(v) : -1;
            if (id < 0 || id >= s->cfg->vocab_size) {
                api_fail(&ae, 400, "prompt", "prompt[%zu] is not a token id in [0, %d)", i, s->cfg->vocab_size);
                goto err;
            }
            g->prompt[i] = (int32_t)id;
        }
        g->n_prompt = (int)n;
        if (g->echo && s->tok) {
            err_t e = {0};
            g->echo_text = tokenizer_decode(s->tok, g->prompt, g->n_prompt, 0, &e);
        }
    } else if (json_is_array(p) && json_array_size(p) > 1) {
        api_fail(&ae, 400, "prompt", "'prompt' must be one prompt (a string or a list of token ids); batches are not supported");
        goto err;
    } else {
        api_fail(&ae, 400, "prompt", "'prompt' is required: a non-empty string or a list of token ids");
        goto err;
    }
    return run_generation(c, g);
err:
    if (g && c->g != g) gen_free(g);
    return reply_error(c, &ae);
}

int route_models(conn_t *c, const char *id) {
    server_t *s = c->s;
    json_t *m = json_pack("{s:s, s:s, s:i, s:s, s:i}", "id", s->model_id, "object", "model", "created", (json_int_t)0, "owned_by", "kiln",
                          "max_model_len", s->ctx_len);
    if (!id) return reply_json(c, 200, json_pack("{s:s, s:[o]}", "object", "list", "data", m));
    if (strcmp(id, s->model_id)) {
        json_decref(m);
        api_err_t ae = {0};
        api_fail(&ae, 404, "model", "the model '%s' does not exist; this server serves '%s'", id, s->model_id);
        return reply_error(c, &ae);
    }
    return reply_json(c, 200, m);
}
