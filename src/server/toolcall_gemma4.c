/* toolcall_gemma4.c — Gemma 4 tool calls:
 *
 *   <|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>
 *
 * Keys are bare, strings are delimited by the <|"|> token, numbers, booleans, nested {…}
 * and […] are as in JSON. The body is converted to JSON when <tool_call|> arrives (a
 * character-level stream of a non-JSON syntax would have to be re-quoted anyway), so a
 * Gemma call streams as one arguments delta. */
#include "server/toolcall_int.h"
#include <stdlib.h>
#include <string.h>

enum { S_TEXT, S_CALL };

#define OPEN "<|tool_call>"
#define CLOSE "<tool_call|>"
#define QUOTE "<|\"|>"

typedef struct { const char *s; size_t n, i; int depth; } rd_t;

static void ws(rd_t *r) { r->i += tc_skip_ws(r->s + r->i, r->n - r->i); }
static int at(rd_t *r, const char *m) { size_t l = strlen(m); return r->n - r->i >= l && !memcmp(r->s + r->i, m, l); }

static json_t *value(rd_t *r);

static json_t *quoted(rd_t *r) {
    r->i += strlen(QUOTE);
    const char *end = memmem(r->s + r->i, r->n - r->i, QUOTE, strlen(QUOTE));
    if (!end) return NULL;
    json_t *v = json_stringn(r->s + r->i, (size_t)(end - (r->s + r->i)));
    r->i = (size_t)(end - r->s) + strlen(QUOTE);
    return v;
}

static json_t *object(rd_t *r) {
    r->i++;
    json_t *o = json_object();
    ws(r);
    if (r->i < r->n && r->s[r->i] == '}') { r->i++; return o; }
    for (;;) {
        ws(r);
        char *key = NULL;
        if (at(r, QUOTE)) {
            json_t *k = quoted(r);
            if (k) key = strdup(json_string_value(k));
            json_decref(k);
        } else {
            size_t st = r->i;
            while (r->i < r->n && r->s[r->i] != ':' && r->s[r->i] != '}' && r->s[r->i] != ',') r->i++;
            size_t e = r->i;
            while (e > st && (r->s[e - 1] == ' ' || r->s[e - 1] == '\n')) e--;
            if (e > st) key = strndup(r->s + st, e - st);
        }
        ws(r);
        if (!key || r->i >= r->n || r->s[r->i] != ':') { free(key); json_decref(o); return NULL; }
        r->i++;
        json_t *v = value(r);
        if (!v) { free(key); json_decref(o); return NULL; }
        json_object_set_new(o, key, v);
        free(key);
        ws(r);
        if (r->i < r->n && r->s[r->i] == ',') { r->i++; continue; }
        if (r->i < r->n && r->s[r->i] == '}') { r->i++; return o; }
        json_decref(o);
        return NULL;
    }
}

static json_t *array(rd_t *r) {
    r->i++;
    json_t *a = json_array();
    ws(r);
    if (r->i < r->n && r->s[r->i] == ']') { r->i++; return a; }
    for (;;) {
        json_t *v = value(r);
        if (!v) { json_decref(a); return NULL; }
        json_array_append_new(a, v);
        ws(r);
        if (r->i < r->n && r->s[r->i] == ',') { r->i++; continue; }
        if (r->i < r->n && r->s[r->i] == ']') { r->i++; return a; }
        json_decref(a);
        return NULL;
    }
}

static json_t *value(rd_t *r) {
    if (++r->depth > 64) return NULL;
    ws(r);
    json_t *v = NULL;
    if (r->i >= r->n) v = NULL;
    else if (at(r, QUOTE)) v = quoted(r);
    else if (r->s[r->i] == '{') v = object(r);
    else if (r->s[r->i] == '[') v = array(r);
    else {
        size_t st = r->i;
        while (r->i < r->n && r->s[r->i] != ',' && r->s[r->i] != '}' && r->s[r->i] != ']') r->i++;
        size_t e = r->i;
        while (e > st && (r->s[e - 1] == ' ' || r->s[e - 1] == '\n')) e--;
        json_error_t je;
        v = e > st ? json_loadb(r->s + st, e - st, JSON_DECODE_ANY, &je) : NULL;
        if (!v && e > st) v = json_stringn(r->s + st, e - st); /* a bare word: the model meant a string */
    }
    r->depth--;
    return v;
}

/* body: `call:NAME{...}` */
static void convert(tc_parser_t *p, const tc_sink_t *k, const char *s, size_t n) {
    rd_t r = {s, n, 0, 0};
    ws(&r);
    json_t *args = NULL;
    if (at(&r, "call:")) {
        r.i += 5;
        size_t st = r.i;
        while (r.i < n && s[r.i] != '{') r.i++;
        if (r.i < n && r.i > st) {
            char name[256];
            snprintf(name, sizeof name, "%.*s", (int)(r.i - st), s + st);
            args = object(&r);
            if (args) {
                tc_whole_call(p, k, name, args);
                json_decref(args);
                return;
            }
        }
    }
    tc_emit_text(p, k, OPEN, strlen(OPEN));
    tc_emit_text(p, k, s, n);
    tc_emit_text(p, k, CLOSE, strlen(CLOSE));
}

void tc_step_gemma4(tc_parser_t *p, const tc_sink_t *k, int final) {
    sbuf_t *b = &p->buf;
    for (;;) {
        size_t safe = 0;
        long a;
        if (p->state == S_TEXT) {
            a = tc_find(b->p, b->len, OPEN, &safe);
            if (a < 0) {
                if (final) safe = b->len;
                tc_emit_text(p, k, b->p, safe);
                sbuf_consume(b, safe);
                return;
            }
            tc_emit_text(p, k, b->p, (size_t)a);
            sbuf_consume(b, (size_t)a + strlen(OPEN));
            p->state = S_CALL;
            continue;
        }
        a = tc_find(b->p, b->len, CLOSE, &safe);
        if (a < 0) {
            if (final) {
                tc_emit_text(p, k, OPEN, strlen(OPEN));
                tc_emit_text(p, k, b->p, b->len);
                sbuf_clear(b);
            }
            return;
        }
        convert(p, k, b->p, (size_t)a);
        sbuf_consume(b, (size_t)a + strlen(CLOSE));
        p->state = S_TEXT;
    }
}
