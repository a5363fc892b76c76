/* toolcall_qwen_xml.c — Qwen3.5 / Qwen3-Coder XML calls:
 *
 *   <tool_call>
 *   <function=get_weather>
 *   <parameter=city>
 *   Paris
 *   </parameter>
 *   </function>
 *   </tool_call>
 *
 * The arguments JSON is built as we go: `{` at <function=...>, `"key": ` at each
 * <parameter=key>, `}` at </function>. A parameter whose schema type is string (or that
 * the tool's schema does not describe) streams as an escaped JSON string; any other type is
 * collected until </parameter> and parsed as JSON (falling back to a string when it is
 * not valid JSON, as the model meant it literally). One newline after the opening tag and
 * one before the closing tag belong to the markup and are dropped. */
#include "server/toolcall_int.h"
#include <stdlib.h>
#include <string.h>

enum { S_TEXT, S_CALL, S_FUNC, S_PVAL, S_AFTER };

#define OPEN "<tool_call>"
#define CLOSE "</tool_call>"
#define FUNC "<function="
#define FEND "</function>"
#define PARAM "<parameter="
#define PEND "</parameter>"

/* Is parameter `key` of tool `fn` typed as something other than a string? */
static int param_is_string(json_t *tools, const char *fn, const char *key) {
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *f = json_object_get(t, "function");
        if (!f) f = t;
        const char *nm = json_string_value(json_object_get(f, "name"));
        if (!nm || strcmp(nm, fn)) continue;
        json_t *ps = json_object_get(f, "parameters");
        if (!ps) ps = json_object_get(f, "input_schema");
        json_t *ty = json_object_get(json_object_get(json_object_get(ps, "properties"), key), "type");
        if (json_is_string(ty)) return !strcmp(json_string_value(ty), "string");
        return 1;
    }
    return 1;
}

static void emit_pvalue(tc_parser_t *p, const tc_sink_t *k, const char *s, size_t n) {
    sbuf_t esc = {0};
    sbuf_add_json_str(&esc, s, n);
    tc_args(p, k, esc.p ? esc.p : "", esc.len);
    sbuf_free(&esc);
}

/* <tool_call> not followed by <function=...>: the opening tag was text. What follows it is
 * scanned again as text (it may hold the real call: giving all that was buffered back at
 * once made a later call's fate depend on how the tokens had split the output). */
static void give_back(tc_parser_t *p, const tc_sink_t *k) {
    tc_emit_text(p, k, OPEN, strlen(OPEN));
    p->state = S_TEXT;
}

void tc_step_qwen_xml(tc_parser_t *p, const tc_sink_t *k, int final) {
    sbuf_t *b = &p->buf;
    for (;;) {
        size_t safe = 0, w;
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
            p->state = S_CALL;
            continue;
        case S_CALL: {
            w = tc_skip_ws(b->p, b->len);
            const char *s = b->p + w;
            size_t n = b->len - w;
            if (n < strlen(FUNC) && tc_prefix_of(s, n, FUNC)) {
                if (!final) return;
                give_back(p, k);
                continue;
            }
            /* the name ends at a '>' within 256 bytes; a longer one is no name (looked for in
             * those 256 bytes only, however many have arrived: the same answer in any chunking) */
            int fn = n >= strlen(FUNC) && !memcmp(s, FUNC, strlen(FUNC));
            size_t lim = strlen(FUNC) + 256;
            char *gt = fn ? memchr(s, '>', n < lim ? n : lim) : NULL;
            if (!gt) {
                if (fn && !final && n < lim) return;
                give_back(p, k);
                continue;
            }
            size_t nl = (size_t)(gt - s) - strlen(FUNC);
            snprintf(p->name, sizeof p->name, "%.*s", (int)nl, s + strlen(FUNC));
            tc_begin(p, k, p->name);
            tc_args(p, k, "{", 1);
            p->nparams = 0;
            sbuf_consume(b, (size_t)(gt - b->p) + 1);
            p->state = S_FUNC;
            continue;
        }
        case S_FUNC: {
            w = tc_skip_ws(b->p, b->len);
            const char *s = b->p + w;
            size_t n = b->len - w;
            if (n >= strlen(FEND) && !memcmp(s, FEND, strlen(FEND))) {
                tc_args(p, k, "}", 1);
                tc_end(p, k);
                sbuf_consume(b, w + strlen(FEND));
                p->state = S_AFTER;
                continue;
            }
            if (n >= strlen(PARAM) && !memcmp(s, PARAM, strlen(PARAM))) {
                char *gt = memchr(s, '>', n);
                if (!gt) {
                    if (final) { tc_args(p, k, "}", 1); tc_end(p, k); sbuf_clear(b); p->state = S_TEXT; }
                    return;
                }
                char key[256];
                snprintf(key, sizeof key, "%.*s", (int)((size_t)(gt - s) - strlen(PARAM)), s + strlen(PARAM));
                sbuf_t kb = {0};
                sbuf_adds(&kb, p->nparams++ ? ", \"" : "\"");
                sbuf_add_json_str(&kb, key, strlen(key));
                sbuf_adds(&kb, "\": ");
                p->pstring = param_is_string(p->tools, p->name, key);
                if (p->pstring) sbuf_addc(&kb, '"');
                tc_args(p, k, kb.p, kb.len);
                sbuf_free(&kb);
                sbuf_consume(b, (size_t)(gt - b->p) + 1);
                p->pstart = 1;
                p->state = S_PVAL;
                continue;
            }
            if (n == 0 || ((tc_prefix_of(s, n, FEND) || tc_prefix_of(s, n, PARAM)) && n < strlen(PARAM))) {
                if (final) { tc_args(p, k, "}", 1); tc_end(p, k); sbuf_clear(b); p->state = S_TEXT; }
                return;
            }
            /* Junk inside a function: skip to the next tag. */
            char *lt = memchr(s + 1, '<', n - 1);
            sbuf_consume(b, lt ? (size_t)(lt - b->p) : b->len);
            continue;
        }
        case S_PVAL: {
            if (p->pstart) {
                if (!b->len) {
                    if (final) { if (p->pstring) tc_args(p, k, "\"", 1); tc_args(p, k, "}", 1); tc_end(p, k); p->state = S_TEXT; }
                    return;
                }
                if (b->p[0] == '\n') sbuf_consume(b, 1);
                p->pstart = 0;
            }
            at = tc_find(b->p, b->len, PEND, &safe);
            if (at < 0) {
                if (final) {
                    if (p->pstring) { emit_pvalue(p, k, b->p, b->len); tc_args(p, k, "\"", 1); }
                    else if (b->len) { emit_pvalue(p, k, b->p, b->len); }
                    tc_args(p, k, "}", 1);
                    tc_end(p, k);
                    sbuf_clear(b);
                    p->state = S_TEXT;
                    return;
                }
                if (p->pstring) {
                    if (safe > 0 && b->p[safe - 1] == '\n') safe--; /* may be the markup's newline */
                    emit_pvalue(p, k, b->p, safe);
                    sbuf_consume(b, safe);
                }
                return;
            }
            size_t vn = (size_t)at;
            if (vn > 0 && b->p[vn - 1] == '\n') vn--;
            if (p->pstring) {
                emit_pvalue(p, k, b->p, vn);
                tc_args(p, k, "\"", 1);
            } else {
                json_error_t je;
                json_t *v = json_loadb(b->p, vn, JSON_DECODE_ANY, &je);
                char *txt = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
                if (txt) tc_args(p, k, txt, strlen(txt));
                else { tc_args(p, k, "\"", 1); emit_pvalue(p, k, b->p, vn); tc_args(p, k, "\"", 1); }
                free(txt);
                json_decref(v);
            }
            sbuf_consume(b, (size_t)at + strlen(PEND));
            p->state = S_FUNC;
            continue;
        }
        case S_AFTER: /* </tool_call> after whitespace only; anything else is text again (a
                       * search of the whole buffer for it once swallowed the text between) */
            w = tc_skip_ws(b->p, b->len);
            if (b->len - w >= strlen(CLOSE) && !memcmp(b->p + w, CLOSE, strlen(CLOSE))) {
                sbuf_consume(b, w + strlen(CLOSE));
                p->state = S_TEXT;
                continue;
            }
            if (w < b->len && !tc_prefix_of(b->p + w, b->len - w, CLOSE)) { p->state = S_TEXT; continue; }
            if (final) { sbuf_clear(b); p->state = S_TEXT; }
            return;
        }
    }
}
