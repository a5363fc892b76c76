/* sse.c — how a generation looks on the wire, for each API.
 *
 * The pipeline in gen.c calls fmt_* as pieces of the reply become final. Streaming
 * requests turn each into a server-sent event appended to g->out (one event per call, so
 * one per token except where text is held back); non-streaming requests accumulate into
 * g->content / g->reasoning / g->calls, and fmt_final builds the response object.
 *
 *   OpenAI chat       data: {"object":"chat.completion.chunk", choices[0].delta: role |
 *                     content | reasoning_content | tool_calls[{index,id,function}]} ...
 *                     then a chunk with finish_reason, a usage chunk if asked, data: [DONE]
 *   OpenAI completion data: {"object":"text_completion", choices[0].text} ... [DONE]
 *   Anthropic         event: message_start, ping, content_block_start/delta/stop per
 *                     block (thinking, text, tool_use), message_delta, message_stop */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "server/srv.h"

static void sse_data(gen_t *g, json_t *o) {
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!s) return;
    sbuf_adds(&g->out, "data: ");
    sbuf_adds(&g->out, s);
    sbuf_adds(&g->out, "\n\n");
    free(s);
}

static void sse_event(gen_t *g, const char *name, json_t *o) {
    sbuf_printf(&g->out, "event: %s\n", name);
    sse_data(g, o);
}

const char *openai_finish(gen_t *g) {
    if (g->finish == KILN_FINISH_LENGTH) return "length";
    if (g->n_calls) return "tool_calls";
    return "stop";
}

static const char *anthropic_stop(gen_t *g) {
    if (g->finish == KILN_FINISH_LENGTH) return "max_tokens";
    if (g->n_calls) return "tool_use";
    if (g->stop_str) return "stop_sequence";
    return "end_turn";
}

/* Logprob entries in the legacy completions shape. */
static json_t *legacy_logprobs(gen_t *g, json_t *entries) {
    json_t *toks = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    size_t i;
    json_t *e;
    json_array_foreach(entries, i, e) {
        json_array_append(toks, json_object_get(e, "token"));
        json_array_append(lps, json_object_get(e, "logprob"));
        json_t *m = json_object(), *t;
        size_t j;
        json_array_foreach(json_object_get(e, "top_logprobs"), j, t)
            json_object_set(m, json_string_value(json_object_get(t, "token")), json_object_get(t, "logprob"));
        json_array_append_new(tops, m);
        json_array_append_new(offs, json_integer((json_int_t)g->text_offset));
        g->text_offset += strlen(json_string_value(json_object_get(e, "token")));
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", toks, "token_logprobs", lps, "top_logprobs", tops, "text_offset", offs);
}

/* The pending logprob entries for a chunk (and clears them), or null. */
static json_t *take_logprobs(gen_t *g) {
    if (!g->want_logprobs || !json_array_size(g->lp_content)) return json_null();
    json_t *lp = g->kind == G_COMPLETION ? legacy_logprobs(g, g->lp_content) : json_pack("{s:O}", "content", g->lp_content);
    json_decref(g->lp_content);
    g->lp_content = json_array();
    return lp;
}

static json_t *chunk(gen_t *g, json_t *delta, const char *finish) {
    json_t *ch = json_pack("{s:i, s:o, s:o, s:o}", "index", 0, "delta", delta, "logprobs", take_logprobs(g), "finish_reason",
                           finish ? json_string(finish) : json_null());
    json_t *o = json_pack("{s:s, s:s, s:i, s:s, s:[o]}", "id", g->id, "object", "chat.completion.chunk", "created", (json_int_t)g->created,
                          "model", g->s->model_id, "choices", ch);
    if (g->include_usage) json_object_set_new(o, "usage", json_null());
    return o;
}

static json_t *text_chunk(gen_t *g, const char *s, size_t n, const char *finish) {
    json_t *ch = json_pack("{s:s%, s:i, s:o, s:o}", "text", s, n, "index", 0, "logprobs", take_logprobs(g), "finish_reason",
                           finish ? json_string(finish) : json_null());
    json_t *o = json_pack("{s:s, s:s, s:i, s:s, s:[o]}", "id", g->id, "object", "text_completion", "created", (json_int_t)g->created,
                          "model", g->s->model_id, "choices", ch);
    if (g->include_usage) json_object_set_new(o, "usage", json_null());
    return o;
}

static json_t *usage_openai(gen_t *g) {
    return json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", g->n_prompt, "completion_tokens", g->n_gen, "total_tokens",
                     g->n_prompt + g->n_gen, "prompt_tokens_details", "cached_tokens", g->n_cached);
}

/* Anthropic: close the open block, open one of `type` if it is not the open one. */
static void block_close(gen_t *g) {
    if (g->block_open < 0) return;
    sse_event(g, "content_block_stop", json_pack("{s:s, s:i}", "type", "content_block_stop", "index", g->block_open));
    g->block_open = -1;
}

static void block_want(gen_t *g, int type) {
    if (g->block_open >= 0 && g->block_type == type) return;
    block_close(g);
    g->block_open = g->block_index++;
    g->block_type = type;
    json_t *cb = type == 1 ? json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", "", "signature", "")
                           : json_pack("{s:s, s:s}", "type", "text", "text", "");
    sse_event(g, "content_block_start", json_pack("{s:s, s:i, s:o}", "type", "content_block_start", "index", g->block_open, "content_block", cb));
}

void fmt_stream_begin(gen_t *g) {
    if (g->kind == G_CHAT) {
        sse_data(g, chunk(g, json_pack("{s:s, s:s}", "role", "assistant", "content", ""), NULL));
    } else if (g->kind == G_MESSAGES) {
        json_t *msg = json_pack("{s:s, s:s, s:s, s:[], s:s, s:n, s:n, s:{s:i, s:i, s:i, s:i}}", "id", g->id, "type", "message", "role",
                                "assistant", "content", "model", g->s->model_id, "stop_reason", "stop_sequence", "usage", "input_tokens",
                                g->n_prompt, "output_tokens", 0, "cache_read_input_tokens", 0, "cache_creation_input_tokens", 0);
        sse_event(g, "message_start", json_pack("{s:s, s:o}", "type", "message_start", "message", msg));
        sse_event(g, "ping", json_pack("{s:s}", "type", "ping"));
    } else if (g->echo && g->echo_text) {
        sse_data(g, text_chunk(g, g->echo_text, strlen(g->echo_text), NULL));
    }
}

void fmt_reasoning(gen_t *g, const char *s, size_t n) {
    if (!n) return;
    if (!g->stream) { sbuf_add(&g->reasoning, s, n); return; }
    if (g->kind == G_CHAT) {
        sse_data(g, chunk(g, json_pack("{s:s%}", "reasoning_content", s, n), NULL));
    } else if (g->kind == G_MESSAGES) {
        block_want(g, 1);
        sse_event(g, "content_block_delta", json_pack("{s:s, s:i, s:{s:s, s:s%}}", "type", "content_block_delta", "index", g->block_open,
                                                      "delta", "type", "thinking_delta", "thinking", s, n));
    } else {
        sbuf_add(&g->reasoning, s, n);
    }
}

void fmt_content(gen_t *g, const char *s, size_t n) {
    if (!n) return;
    if (!g->stream) { sbuf_add(&g->content, s, n); return; }
    if (g->kind == G_CHAT) {
        sse_data(g, chunk(g, json_pack("{s:s%}", "content", s, n), NULL));
    } else if (g->kind == G_COMPLETION) {
        sse_data(g, text_chunk(g, s, n, NULL));
    } else {
        block_want(g, 0);
        sse_event(g, "content_block_delta", json_pack("{s:s, s:i, s:{s:s, s:s%}}", "type", "content_block_delta", "index", g->block_open,
                                                      "delta", "type", "text_delta", "text", s, n));
    }
}

void fmt_call_begin(gen_t *g, int index, const char *name) {
    if (!g->stream) return;
    gen_call_t *c = &g->calls[index];
    if (g->kind == G_CHAT) {
        json_t *tc = json_pack("{s:i, s:s, s:s, s:{s:s, s:s}}", "index", index, "id", c->id, "type", "function", "function", "name", name,
                               "arguments", "");
        sse_data(g, chunk(g, json_pack("{s:[o]}", "tool_calls", tc), NULL));
    } else if (g->kind == G_MESSAGES) {
        block_close(g);
        g->block_open = g->block_index++;
        g->block_type = 2;
        c->block = g->block_open;
        sse_event(g, "content_block_start", json_pack("{s:s, s:i, s:{s:s, s:s, s:s, s:{}}}", "type", "content_block_start", "index",
                                                      g->block_open, "content_block", "type", "tool_use", "id", c->id, "name", name, "input"));
    }
}

void fmt_call_args(gen_t *g, int index, const char *s, size_t n) {
    if (!g->stream || !n) return;
    if (g->kind == G_CHAT) {
        json_t *tc = json_pack("{s:i, s:{s:s%}}", "index", index, "function", "arguments", s, n);
        sse_data(g, chunk(g, json_pack("{s:[o]}", "tool_calls", tc), NULL));
    } else if (g->kind == G_MESSAGES) {
        sse_event(g, "content_block_delta", json_pack("{s:s, s:i, s:{s:s, s:s%}}", "type", "content_block_delta", "index", g->calls[index].block,
                                                      "delta", "type", "input_json_delta", "partial_json", s, n));
    }
}

void fmt_call_end(gen_t *g, int index) {
    if (g->stream && g->kind == G_MESSAGES) block_close(g);
}

void fmt_stream_error(gen_t *g, const char *msg) {
    if (g->kind == G_MESSAGES) {
        sse_event(g, "error", json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type", "api_error", "message", msg));
    } else {
        sse_data(g, json_pack("{s:{s:s, s:s, s:n, s:n}}", "error", "message", msg, "type", "server_error", "param", "code"));
        sbuf_adds(&g->out, "data: [DONE]\n\n");
    }
}

void fmt_stream_end(gen_t *g) {
    if (g->finish == KILN_FINISH_ERROR || g->finish == KILN_FINISH_CANCELLED) {
        fmt_stream_error(g, g->finish == KILN_FINISH_ERROR ? (g->error ? g->error : "generation failed")
                                                          : "the generation was cancelled (server shutting down)");
        return;
    }
    if (g->kind == G_MESSAGES) {
        block_close(g);
        json_t *d = json_pack("{s:s, s:{s:s, s:o}, s:{s:i, s:i, s:i}}", "type", "message_delta", "delta", "stop_reason", anthropic_stop(g),
                              "stop_sequence", g->stop_str ? json_string(g->stop_str) : json_null(), "usage", "output_tokens", g->n_gen,
                              "input_tokens", g->n_prompt - g->n_cached, "cache_read_input_tokens", g->n_cached);
        sse_event(g, "message_delta", d);
        sse_event(g, "message_stop", json_pack("{s:s}", "type", "message_stop"));
        return;
    }
    if (g->kind == G_CHAT) sse_data(g, chunk(g, json_object(), openai_finish(g)));
    else sse_data(g, text_chunk(g, "", 0, openai_finish(g)));
    if (g->include_usage) {
        json_t *u = json_pack("{s:s, s:s, s:i, s:s, s:[], s:o}", "id", g->id, "object",
                              g->kind == G_CHAT ? "chat.completion.chunk" : "text_completion", "created", (json_int_t)g->created, "model",
                              g->s->model_id, "choices", "usage", usage_openai(g));
        sse_data(g, u);
    }
    sbuf_adds(&g->out, "data: [DONE]\n\n");
}

json_t *fmt_final(gen_t *g) {
    if (g->kind == G_MESSAGES) {
        json_t *content = json_array();
        if (g->reasoning.len)
            json_array_append_new(content, json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", g->reasoning.p, "signature", ""));
        if (g->content.len) json_array_append_new(content, json_pack("{s:s, s:s}", "type", "text", "text", g->content.p));
        for (int i = 0; i < g->n_calls; i++) {
            json_error_t je;
            json_t *in = json_loads(g->calls[i].args.p ? g->calls[i].args.p : "{}", 0, &je);
            if (!json_is_object(in)) { json_decref(in); in = json_object(); }
            json_array_append_new(content, json_pack("{s:s, s:s, s:s, s:o}", "type", "tool_use", "id", g->calls[i].id, "name", g->calls[i].name,
                                                     "input", in));
        }
        return json_pack("{s:s, s:s, s:s, s:s, s:o, s:s, s:o, s:{s:i, s:i, s:i, s:i}}", "id", g->id, "type", "message", "role", "assistant",
                         "model", g->s->model_id, "content", content, "stop_reason", anthropic_stop(g), "stop_sequence",
                         g->stop_str ? json_string(g->stop_str) : json_null(), "usage", "input_tokens", g->n_prompt - g->n_cached,
                         "output_tokens", g->n_gen, "cache_read_input_tokens", g->n_cached, "cache_creation_input_tokens", 0);
    }
    json_t *lp = json_null();
    if (g->want_logprobs)
        lp = g->kind == G_COMPLETION ? legacy_logprobs(g, g->lp_all) : json_pack("{s:O}", "content", g->lp_all);
    json_t *choice;
    if (g->kind == G_COMPLETION) {
        sbuf_t t = {0};
        if (g->echo && g->echo_text) sbuf_adds(&t, g->echo_text);
        sbuf_add(&t, g->content.p ? g->content.p : "", g->content.len);
        choice = json_pack("{s:s, s:i, s:o, s:s}", "text", t.p ? t.p : "", "index", 0, "logprobs", lp, "finish_reason", openai_finish(g));
        sbuf_free(&t);
    } else {
        json_t *msg = json_pack("{s:s, s:o}", "role", "assistant", "content",
                                g->content.len || !g->n_calls ? json_string(g->content.p ? g->content.p : "") : json_null());
        if (g->reasoning.len) json_object_set_new(msg, "reasoning_content", json_string(g->reasoning.p));
        if (g->n_calls) {
            json_t *calls = json_array();
            for (int i = 0; i < g->n_calls; i++)
                json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", g->calls[i].id, "type", "function", "function", "name",
                                                       g->calls[i].name, "arguments", g->calls[i].args.p ? g->calls[i].args.p : "{}"));
            json_object_set_new(msg, "tool_calls", calls);
        }
        choice = json_pack("{s:i, s:o, s:o, s:s}", "index", 0, "message", msg, "logprobs", lp, "finish_reason", openai_finish(g));
    }
    return json_pack("{s:s, s:s, s:i, s:s, s:[o], s:o}", "id", g->id, "object", g->kind == G_CHAT ? "chat.completion" : "text_completion",
                     "created", (json_int_t)g->created, "model", g->s->model_id, "choices", choice, "usage", usage_openai(g));
}
