/* toolcall.c — the parts every tool-call format shares: text emission with whitespace
 * hold-back, call bookkeeping, marker search, a JSON value scanner, format detection.
 *
 * Whitespace rule: a run of whitespace is held until something follows it. If text follows,
 * the run is emitted with it; if a call follows (or the output ends after a call), it is
 * dropped. This is what keeps "\n\n<tool_call>" and the newlines between calls out of the
 * content, at the price of delaying trailing whitespace of plain text by one token. */
#include "server/toolcall_int.h"
#include <stdlib.h>
#include <string.h>

static int is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

size_t tc_skip_ws(const char *s, size_t n) {
    size_t i = 0;
    while (i < n && is_ws(s[i])) i++;
    return i;
}

void tc_emit_text(tc_parser_t *p, const tc_sink_t *k, const char *s, size_t n) {
    size_t i = n;
    while (i > 0 && is_ws(s[i - 1])) i--;          /* s[i..n) is trailing whitespace */
    if (i > 0) {
        if (p->ws.len) k->text(k->u, p->ws.p, p->ws.len);
        sbuf_clear(&p->ws);
        k->text(k->u, s, i);
    }
    sbuf_add(&p->ws, s + i, n - i);
}

void tc_begin(tc_parser_t *p, const tc_sink_t *k, const char *name) {
    sbuf_clear(&p->ws);
    p->in_call = 1;
    k->call_begin(k->u, p->n_calls++, name);
}

void tc_args(tc_parser_t *p, const tc_sink_t *k, const char *s, size_t n) {
    if (n) k->call_args(k->u, p->n_calls - 1, s, n);
}

void tc_end(tc_parser_t *p, const tc_sink_t *k) {
    if (!p->in_call) return;
    p->in_call = 0;
    k->call_end(k->u, p->n_calls - 1);
}

void tc_whole_call(tc_parser_t *p, const tc_sink_t *k, const char *name, json_t *args) {
    tc_begin(p, k, name);
    char *s = args ? json_dumps(args, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    if (s) tc_args(p, k, s, strlen(s));
    else tc_args(p, k, "{}", 2);
    free(s);
    tc_end(p, k);
}

long tc_find(const char *s, size_t n, const char *m, size_t *safe) {
    size_t ml = strlen(m);
    if (n >= ml) {
        const char *hit = memmem(s, n, m, ml);
        if (hit) return hit - s;
    }
    /* The longest suffix of s that is a proper prefix of m must be held back. */
    size_t keep = ml - 1 < n ? ml - 1 : n;
    for (; keep > 0; keep--)
        if (!memcmp(s + n - keep, m, keep)) break;
    *safe = n - keep;
    return -1;
}

int tc_prefix_of(const char *s, size_t n, const char *m) {
    size_t ml = strlen(m);
    return !memcmp(s, m, n < ml ? n : ml);
}

int json_scan_char(json_scan_t *js, char c) {
    if (js->done) return 0;
    if (!js->started) {
        if (is_ws(c)) return 1;
        js->started = 1;
        if (c == '{' || c == '[') { js->depth = 1; return 1; }
        if (c == '"') { js->in_str = 1; js->scalar = 1; return 1; }
        js->scalar = 2;                            /* number or literal */
        return 1;
    }
    if (js->scalar == 2) {
        if (c == ',' || c == '}' || c == ']' || is_ws(c)) { js->done = 1; return 0; }
        return 1;
    }
    if (js->in_str) {
        if (js->esc) js->esc = 0;
        else if (c == '\\') js->esc = 1;
        else if (c == '"') {
            js->in_str = 0;
            if (js->scalar) js->done = 1;
        }
        return 1;
    }
    if (c == '"') js->in_str = 1;
    else if (c == '{' || c == '[') js->depth++;
    else if (c == '}' || c == ']') {
        if (--js->depth == 0) js->done = 1;
    }
    return 1;
}

tc_parser_t *tc_parser_new(tc_format_t fmt, json_t *tools) {
    if (fmt == TC_NONE) return NULL;
    tc_parser_t *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->fmt = fmt;
    p->tools = tools ? json_incref(tools) : NULL;
    return p;
}

void tc_parser_free(tc_parser_t *p) {
    if (!p) return;
    json_decref(p->tools);
    sbuf_free(&p->buf);
    sbuf_free(&p->ws);
    sbuf_free(&p->raw);
    free(p);
}

static void step(tc_parser_t *p, const tc_sink_t *k, int final) {
    switch (p->fmt) {
    case TC_HERMES: tc_step_hermes(p, k, final); break;
    case TC_QWEN_XML: tc_step_qwen_xml(p, k, final); break;
    case TC_LLAMA_JSON: tc_step_llama(p, k, final); break;
    case TC_GEMMA4: tc_step_gemma4(p, k, final); break;
    default: break;
    }
}

void tc_push(tc_parser_t *p, const char *s, size_t n, const tc_sink_t *k) {
    if (!n) return;
    sbuf_add(&p->buf, s, n);
    step(p, k, 0);
}

void tc_finish(tc_parser_t *p, const tc_sink_t *k) {
    step(p, k, 1);
    tc_end(p, k);
    if (p->ws.len && !p->n_calls) k->text(k->u, p->ws.p, p->ws.len);
    sbuf_clear(&p->ws);
}

int tc_calls(const tc_parser_t *p) { return p ? p->n_calls : 0; }

static const char *names[] = {"none", "hermes", "qwen-xml", "llama-json", "gemma4"};

const char *tc_format_name(tc_format_t f) { return f >= 0 && f <= TC_GEMMA4 ? names[f] : "?"; }

int tc_format_parse(const char *s) {
    for (int i = 0; i <= TC_GEMMA4; i++)
        if (!strcmp(s, names[i])) return i;
    return -1;
}

tc_format_t tc_detect(const char *src, int (*token_exists)(void *u, const char *tok), void *u) {
    if (token_exists && token_exists(u, "<|tool_call>")) return TC_GEMMA4;
    if (src && strstr(src, "<|tool_call>")) return TC_GEMMA4;
    if (src && strstr(src, "<function=") && strstr(src, "<parameter=")) return TC_QWEN_XML;
    if (src && strstr(src, "<tool_call>")) return TC_HERMES;
    if (token_exists && token_exists(u, "<|python_tag|>")) return TC_LLAMA_JSON;
    if (src && (strstr(src, "<|python_tag|>") || strstr(src, "ipython"))) return TC_LLAMA_JSON;
    return TC_HERMES; /* the most common convention; a template without tools still parses */
}
