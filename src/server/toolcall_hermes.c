/* toolcall_hermes.c — <tool_call>{"name": "f", "arguments": {...}}</tool_call> (Hermes,
 * Qwen2.5, Qwen3, and the default for templates that use <tool_call>).
 *
 * The head `{"name": "f", "arguments":` is parsed as soon as it is complete, the call is
 * begun, and the arguments value then streams out as the model writes it, with a JSON value
 * scanner finding its end. A head in another key order (arguments first) falls back to
 * buffering the whole call and parsing it at </tool_call>. */
#include "server/toolcall_int.h"
#include <stdlib.h>
#include <string.h>

enum { S_TEXT, S_HEAD, S_ARGS, S_TAIL, S_WHOLE };

#define OPEN "<tool_call>"
#define CLOSE "</tool_call>"

/* Reads a JSON string starting at s[*i] == '"'; returns 1 with *out malloc'd, 0 if
 * incomplete, -1 if malformed. */
static int read_str(const char *s, size_t n, size_t *i, char **out) {
    size_t j = *i + 1;
    int esc = 0;
    for (; j < n; j++) {
        if (esc) esc = 0;
        else if (s[j] == '\\') esc = 1;
        else if (s[j] == '"') break;
    }
    if (j >= n) return 0;
    json_error_t je;
    json_t *v = json_loadb(s + *i, j + 1 - *i, JSON_DECODE_ANY, &je);
    if (!v || !json_is_string(v)) { json_decref(v); return -1; }
    *out = strdup(json_string_value(v));
    json_decref(v);
    *i = j + 1;
    return 1;
}

/* Parses `{ "name" : "f" , "arguments" :` at the start of s. 1: done (*used bytes), 0: need
 * more, -1: some other shape. */
static int parse_head(const char *s, size_t n, char *name, size_t cap, size_t *used) {
    size_t i = tc_skip_ws(s, n);
    if (i == n) return 0;
    if (s[i++] != '{') return -1;
    i += tc_skip_ws(s + i, n - i);
    if (i == n) return 0;
    if (s[i] != '"') return -1;
    char *key = NULL, *val = NULL;
    int r = read_str(s, n, &i, &key);
    if (r <= 0) return r;
    int ok = !strcmp(key, "name");
    free(key);
    if (!ok) return -1;
    i += tc_skip_ws(s + i, n - i);
    if (i == n) return 0;
    if (s[i++] != ':') return -1;
    i += tc_skip_ws(s + i, n - i);
    if (i == n) return 0;
    if (s[i] != '"') return -1;
    r = read_str(s, n, &i, &val);
    if (r <= 0) return r;
    snprintf(name, cap, "%s", val);
    free(val);
    i += tc_skip_ws(s + i, n - i);
    if (i == n) return 0;
    if (s[i++] != ',') return -1;
    i += tc_skip_ws(s + i, n - i);
    if (i == n) return 0;
    if (s[i] != '"') return -1;
    r = read_str(s, n, &i, &key);
    if (r <= 0) return r;
    ok = !strcmp(key, "arguments") || !strcmp(key, "parameters");
    free(key);
    if (!ok) return -1;
    i += tc_skip_ws(s + i, n - i);
    if (i == n) return 0;
    if (s[i++] != ':') return -1;
    *used = i;
    return 1;
}

/* Whether </tool_call> occurs in s outside JSON strings. An incomplete head waits while the
 * marker is inside a string (`{"name": "f</tool_call>"` may still become a head): looking
 * for it anywhere made the call depend on whether the head had arrived whole (fuzz_toolcall). */
static int close_outside_strings(const char *s, size_t n) {
    int in = 0, esc = 0;
    for (size_t i = 0; i < n; i++) {
        if (in) {
            if (esc) esc = 0;
            else if (s[i] == '\\') esc = 1;
            else if (s[i] == '"') in = 0;
        } else if (s[i] == '"') {
            in = 1;
        } else if (s[i] == '<' && n - i >= strlen(CLOSE) && !memcmp(s + i, CLOSE, strlen(CLOSE))) {
            return 1;
        }
    }
    return 0;
}

/* Gives the raw call back as text: the model wrote something that is not a call. */
static void give_back(tc_parser_t *p, const tc_sink_t *k) {
    tc_emit_text(p, k, OPEN, strlen(OPEN));
    tc_emit_text(p, k, p->raw.p ? p->raw.p : "", p->raw.len);
    sbuf_clear(&p->raw);
}

static void whole(tc_parser_t *p, const tc_sink_t *k, const char *s, size_t n, int closed) {
    json_error_t je;
    json_t *o = json_loadb(s, n, 0, &je);
    json_t *nm = json_object_get(o, "name");
    json_t *args = json_object_get(o, "arguments");
    if (!args) args = json_object_get(o, "parameters");
    if (json_is_string(nm)) {
        tc_whole_call(p, k, json_string_value(nm), args);
    } else {
        sbuf_clear(&p->raw);
        sbuf_add(&p->raw, s, n);
        if (closed) sbuf_adds(&p->raw, CLOSE);
        give_back(p, k);
    }
    json_decref(o);
}

void tc_step_hermes(tc_parser_t *p, const tc_sink_t *k, int final) {
    sbuf_t *b = &p->buf;
    for (;;) {
        size_t safe = 0;
        long at;
        switch (p->state) {
        case S_TEXT:
            at = tc_find(b->p, b->len, OPEN, &safe);
            if (at < 0) {
                if (final) safe = b->len;
                tc_emit_text(p, k, b->p, safe);
                sbuf_consume(b, safe);
                return;
            }
            tc_emit_text(p, k, b->p, (size_t)at);
            sbuf_consume(b, (size_t)at + strlen(OPEN));
            sbuf_clear(&p->raw);
            p->state = S_HEAD;
            continue;
        case S_HEAD: {
            size_t used = 0;
            int r = parse_head(b->p, b->len, p->name, sizeof p->name, &used);
            if (r == 1) {
                tc_begin(p, k, p->name);
                sbuf_consume(b, used);
                memset(&p->js, 0, sizeof p->js);
                p->state = S_ARGS;
                continue;
            }
            if (r < 0 || close_outside_strings(b->p, b->len)) { p->state = S_WHOLE; continue; }
            if (final) { whole(p, k, b->p, b->len, 0); sbuf_clear(b); p->state = S_TEXT; }
            return;
        }
        case S_ARGS: {
            size_t i = 0, start = 0;
            int seen = p->js.started;
            for (; i < b->len && !p->js.done; i++) {
                if (!json_scan_char(&p->js, b->p[i])) break;
                if (!seen && p->js.started) { start = i; seen = 1; }
                if (!seen) start = i + 1;
            }
            tc_args(p, k, b->p + start, i - start);
            sbuf_consume(b, i);
            if (p->js.done || (final && p->js.scalar == 2)) { p->state = S_TAIL; continue; }
            if (final) { tc_end(p, k); p->state = S_TEXT; }
            return;
        }
        case S_TAIL:
            /* `}` of the outer object, then </tool_call>; anything else in between is noise. */
            at = tc_find(b->p, b->len, CLOSE, &safe);
            if (at < 0) {
                sbuf_consume(b, safe);
                if (final) { tc_end(p, k); sbuf_clear(b); p->state = S_TEXT; }
                return;
            }
            sbuf_consume(b, (size_t)at + strlen(CLOSE));
            tc_end(p, k);
            p->state = S_TEXT;
            continue;
        case S_WHOLE:
            at = tc_find(b->p, b->len, CLOSE, &safe);
            if (at < 0) {
                if (final) { whole(p, k, b->p, b->len, 0); sbuf_clear(b); p->state = S_TEXT; }
                return;
            }
            whole(p, k, b->p, (size_t)at, 1);
            sbuf_consume(b, (size_t)at + strlen(CLOSE));
            p->state = S_TEXT;
            continue;
        }
    }
}
