/* toolcall_int.h — what the tool-call parsers share (toolcall.c) and the per-format step
 * functions (toolcall_*.c). Each format is a small state machine over `buf`, the input not
 * yet consumed; step() consumes as much of it as it can decide on and returns, and is called
 * again with more input (final = 1 at the end of output). */
#ifndef KILN_TOOLCALL_INT_H
#define KILN_TOOLCALL_INT_H

#include "base/sbuf.h"
#include "server/toolcall.h"

/* A JSON value scanner: told one character at a time, says when a value is complete. */
typedef struct json_scan {
    int started, depth, in_str, esc, scalar, done;
} json_scan_t;
/* Feeds c; returns 1 if c belongs to the value, 0 if c is after the end (not consumed: the
 * end of a bare number/literal is only seen at the next character). Leading whitespace
 * before the value returns 1 but is not part of the value (check started). */
int json_scan_char(json_scan_t *js, char c);

struct tc_parser {
    tc_format_t fmt;
    json_t *tools;
    sbuf_t buf;        /* input not yet consumed */
    sbuf_t ws;         /* whitespace held back (dropped next to calls) */
    sbuf_t raw;        /* raw markup kept to give back as text if a call turns out malformed */
    int state;
    int n_calls;       /* calls begun */
    int in_call;       /* a call has begun and not ended */
    json_scan_t js;
    int nparams, pstring, pstart;
    size_t scanned;    /* bytes of buf already fed to js (llama) */
    char name[256];
};

void tc_emit_text(tc_parser_t *p, const tc_sink_t *k, const char *s, size_t n);
void tc_begin(tc_parser_t *p, const tc_sink_t *k, const char *name);
void tc_args(tc_parser_t *p, const tc_sink_t *k, const char *s, size_t n);
void tc_end(tc_parser_t *p, const tc_sink_t *k);
/* Emits a complete call (name, arguments as a JSON value). */
void tc_whole_call(tc_parser_t *p, const tc_sink_t *k, const char *name, json_t *args);

/* Finds marker m in s[0..n): its offset, or -1 with *safe = how many leading bytes can't be
 * part of an occurrence (the rest may be the marker's beginning). */
long tc_find(const char *s, size_t n, const char *m, size_t *safe);
/* 1 if s[0..n) is a (possibly complete) prefix of m or m is a prefix of s. */
int tc_prefix_of(const char *s, size_t n, const char *m);
size_t tc_skip_ws(const char *s, size_t n);

void tc_step_hermes(tc_parser_t *p, const tc_sink_t *k, int final);
void tc_step_qwen_xml(tc_parser_t *p, const tc_sink_t *k, int final);
void tc_step_llama(tc_parser_t *p, const tc_sink_t *k, int final);
void tc_step_gemma4(tc_parser_t *p, const tc_sink_t *k, int final);

#endif
