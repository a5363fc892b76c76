/* sbuf.h — a growable byte buffer (NUL-terminated), kiln's one string builder.
 *
 * The server's JSON bodies, SSE events and parser hold-back, and the tokenizer's
 * normalized text and decoded pieces, all go through this. Allocation failure is treated like the rest of kiln treats it (abort via xrealloc
 * semantics would hide bugs in tests), so sbuf functions return -1 on OOM and callers that
 * cannot sensibly recover just propagate it. */
#ifndef KILN_SBUF_H
#define KILN_SBUF_H

#include <stdarg.h>
#include <stddef.h>

typedef struct sbuf {
    char *p;      /* NUL-terminated when len > 0 or cap > 0 */
    size_t len, cap;
} sbuf_t;

int sbuf_reserve(sbuf_t *b, size_t extra);
int sbuf_add(sbuf_t *b, const char *s, size_t n);
int sbuf_adds(sbuf_t *b, const char *s);
int sbuf_addc(sbuf_t *b, char c);
int sbuf_printf(sbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s as the inside of a JSON string (escaped, no quotes). s must be UTF-8. */
int sbuf_add_json_str(sbuf_t *b, const char *s, size_t n);
/* Drops the first n bytes. O(len); buffers here stay small (hold-back, one SSE batch). */
void sbuf_consume(sbuf_t *b, size_t n);
void sbuf_clear(sbuf_t *b);
void sbuf_free(sbuf_t *b);
/* Hands the string to the caller (malloc'd, never NULL) and empties the buffer. */
char *sbuf_take(sbuf_t *b);

#endif
