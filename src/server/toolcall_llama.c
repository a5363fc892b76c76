/* toolcall_llama.c — Llama 3.x JSON tool calls.
 *
 * Llama 3.1+ templates ask the model to answer a tool call with nothing but
 * {"name": "f", "parameters": {...}} (3.1 may put <|python_tag|> first; several calls are
 * separated by ';'). So the decision is made on the first non-blank characters of the
 * reply: `{` or <|python_tag|> starts JSON mode, anything else makes the whole reply plain
 * text and the parser a pass-through. In JSON mode each object is emitted as a call when
 * it closes; if one does not parse as a call, everything held is given back as text. */
#include "server/toolcall_int.h"
#include <stdlib.h>
#include <string.h>

enum { S_START, S_JSON, S_PLAIN };

#define TAG "<|python_tag|>"

static void give_back(tc_parser_t *p, const tc_sink_t *k) {
    tc_emit_text(p, k, p->raw.p ? p->raw.p : "", p->raw.len);
    tc_emit_text(p, k, p->buf.p ? p->buf.p : "", p->buf.len);
    sbuf_clear(&p->raw);
    sbuf_clear(&p->buf);
    p->scanned = 0;
    p->state = S_PLAIN;
}

void tc_step_llama(tc_parser_t *p, const tc_sink_t *k, int final) {
    sbuf_t *b = &p->buf;
    for (;;) {
        switch (p->state) {
        case S_START: {
            size_t w = tc_skip_ws(b->p, b->len);
            const char *s = b->p + w;
            size_t n = b->len - w;
            if (n == 0 || (n < strlen(TAG) && tc_prefix_of(s, n, TAG))) {
                if (final) give_back(p, k);
                return;
            }
            if (n >= strlen(TAG) && !memcmp(s, TAG, strlen(TAG))) {
                sbuf_add(&p->raw, b->p, w + strlen(TAG));
                sbuf_consume(b, w + strlen(TAG));
                p->state = S_JSON;
                memset(&p->js, 0, sizeof p->js);
                continue;
            }
            if (s[0] == '{') { p->state = S_JSON; memset(&p->js, 0, sizeof p->js); continue; }
            p->state = S_PLAIN;
            continue;
        }
        case S_JSON: {
            /* Between objects: whitespace and ';' separators. */
            if (!p->js.started) {
                size_t i = 0;
                while (i < b->len && (b->p[i] == ';' || b->p[i] == ' ' || b->p[i] == '\n' || b->p[i] == '\t' || b->p[i] == '\r')) i++;
                sbuf_add(&p->raw, b->p, i);
                sbuf_consume(b, i);
                if (!b->len) {
                    if (final) {
                        if (!p->n_calls) give_back(p, k);
                        else sbuf_clear(&p->raw);
                    }
                    return;
                }
                if (b->p[0] != '{') {
                    if (p->n_calls) { sbuf_clear(&p->raw); p->state = S_PLAIN; continue; }
                    give_back(p, k);
                    return;
                }
            }
            size_t i = p->scanned;
            while (i < b->len && !p->js.done && json_scan_char(&p->js, b->p[i])) i++;
            p->scanned = i;
            if (!p->js.done) {
                if (final) give_back(p, k);
                return;
            }
            json_error_t je;
            json_t *o = json_loadb(b->p, i, 0, &je);
            json_t *nm = json_object_get(o, "name");
            json_t *args = json_object_get(o, "parameters");
            if (!args) args = json_object_get(o, "arguments");
            if (!json_is_string(nm) || (args && !json_is_object(args))) {
                json_decref(o);
                give_back(p, k);
                return;
            }
            tc_whole_call(p, k, json_string_value(nm), args);
            json_decref(o);
            sbuf_consume(b, i);
            sbuf_clear(&p->raw);
            memset(&p->js, 0, sizeof p->js);
            p->scanned = 0;
            continue;
        }
        case S_PLAIN:
            tc_emit_text(p, k, b->p, b->len);
            sbuf_clear(b);
            return;
        }
    }
}
