/* fuzz_toolcall.c — libFuzzer target for the streaming parsers of model output: the four
 * tool-call formats (server/toolcall*.c) and the reasoning splitter (server/reasoning.c).
 *
 * Model output is not trusted input: a model can write any bytes, one token at a time. Input:
 * byte 0 picks the parser (and, for the splitter, whether the prompt opened the block), byte 1
 * seeds the chunking, the rest is the output text. Each parser is run twice — the whole text
 * in one push, then in chunks of 1..8 bytes — and must not crash, must emit a well-formed
 * event sequence (calls numbered from 0, begin → args* → end, every call closed by finish),
 * and must emit the same events either way once adjacent text (and argument) pieces are
 * joined: a reply cannot depend on where the tokens happened to break it.
 *   build-fuzz/fuzz_toolcall -max_total_time=300 tests/fuzz/corpus/toolcall
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/sbuf.h"
#include "server/reasoning.h"
#include "server/toolcall.h"

/* The event log: runs of one kind joined. kind: 'T' text, 'B' begin, 'A' args, 'E' end; for
 * the splitter 'R' reasoning and 'C' content. */
typedef struct { sbuf_t s; char last; int last_idx, open, next; } log_t;

static void put(log_t *l, char kind, int idx, const char *p, size_t n) {
    int join = (kind == 'T' || kind == 'A' || kind == 'R' || kind == 'C') && l->last == kind && l->last_idx == idx;
    if (!join) {
        sbuf_addc(&l->s, '\n');
        sbuf_addc(&l->s, kind);
        sbuf_printf(&l->s, "%d:", idx);
    }
    sbuf_add(&l->s, p, n);
    l->last = kind;
    l->last_idx = idx;
}

static void on_text(void *u, const char *s, size_t n) {
    if (n) put(u, 'T', -1, s, n);
}
static void on_begin(void *u, int index, const char *name) {
    log_t *l = u;
    if (l->open >= 0 || index != l->next) abort(); /* a call opened inside another, or out of order */
    l->open = index;
    l->next++;
    put(l, 'B', index, name, strlen(name));
}
static void on_args(void *u, int index, const char *s, size_t n) {
    log_t *l = u;
    if (index != l->open) abort(); /* arguments of a call that is not open */
    if (n) put(l, 'A', index, s, n);
}
static void on_end(void *u, int index) {
    log_t *l = u;
    if (index != l->open) abort();
    l->open = -1;
    put(l, 'E', index, "", 0);
}
static void on_reason(void *u, const char *s, size_t n) {
    if (n) put(u, 'R', -1, s, n);
}
static void on_content(void *u, const char *s, size_t n) {
    if (n) put(u, 'C', -1, s, n);
}

static const char TOOLS[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":"
    "{\"n\":{\"type\":\"integer\"},\"x\":{\"type\":\"number\"},\"s\":{\"type\":\"string\"},\"b\":{\"type\":\"boolean\"},"
    "\"o\":{\"type\":\"object\"},\"a\":{\"type\":\"array\"}}}}}]";

/* The next piece's length: all that is left, or (chunked) 1..8 bytes of it. */
static size_t piece(uint32_t *rng, size_t left, int chunked) {
    if (!chunked) return left;
    *rng = *rng * 1664525u + 1013904223u;
    size_t w = 1 + (*rng >> 24) % 8;
    return w < left ? w : left;
}

/* One run; chunk 0: the whole text at once. The log's text is returned (malloc'd). */
static char *run(int which, int inside, const char *text, size_t n, unsigned chunk_seed, int chunked) {
    log_t l = {0};
    l.open = -1;
    l.last_idx = -2;
    uint32_t rng = chunk_seed * 2654435761u + 1;
    if (which < 4) {
        static const tc_format_t fmts[4] = {TC_HERMES, TC_QWEN_XML, TC_LLAMA_JSON, TC_GEMMA4};
        json_t *tools = json_loads(TOOLS, 0, NULL);
        tc_parser_t *p = tc_parser_new(fmts[which], tools);
        json_decref(tools);
        tc_sink_t k = {&l, on_text, on_begin, on_args, on_end};
        for (size_t i = 0, c; i < n; i += c) tc_push(p, text + i, c = piece(&rng, n - i, chunked), &k);
        tc_finish(p, &k);
        if (l.open >= 0) abort(); /* finish leaves no call open */
        if (tc_calls(p) != l.next) abort();
        tc_parser_free(p);
    } else {
        reasoning_split_t r;
        rs_init(&r, which == 4 ? &RS_THINK : &RS_GEMMA4, inside);
        rs_sink_t k = {&l, on_reason, on_content};
        for (size_t i = 0, c; i < n; i += c) rs_push(&r, text + i, c = piece(&rng, n - i, chunked), &k);
        rs_finish(&r, &k);
        rs_free(&r);
    }
    char *out = sbuf_take(&l.s);
    return out ? out : calloc(1, 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    int which = data[0] % 6, inside = data[0] / 6 % 2;
    const char *text = (const char *)data + 2;
    size_t n = size - 2;
    char *a = run(which, inside, text, n, data[1], 0), *b = run(which, inside, text, n, data[1], 1);
    if (strcmp(a, b)) abort(); /* the events depend on the chunking */
    free(a);
    free(b);
    return 0;
}
