/* sbuf.c — see sbuf.h. Doubling growth; consume() moves the tail down, which is O(n) but
 * the buffers it is used on are hold-back windows and per-wakeup SSE batches (bytes to a
 * few KiB), so a ring buffer would buy nothing but code. */
#include "base/sbuf.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sbuf_reserve(sbuf_t *b, size_t extra) {
    if (b->len + extra + 1 <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + extra + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

int sbuf_add(sbuf_t *b, const char *s, size_t n) {
    if (sbuf_reserve(b, n)) return -1;
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

int sbuf_adds(sbuf_t *b, const char *s) { return sbuf_add(b, s, strlen(s)); }
int sbuf_addc(sbuf_t *b, char c) { return sbuf_add(b, &c, 1); }

int sbuf_printf(sbuf_t *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || sbuf_reserve(b, (size_t)n)) return -1;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

int sbuf_add_json_str(sbuf_t *b, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[7];
        if (c == '"') esc = "\\\"";
        else if (c == '\\') esc = "\\\\";
        else if (c == '\n') esc = "\\n";
        else if (c == '\r') esc = "\\r";
        else if (c == '\t') esc = "\\t";
        else if (c < 0x20) {
            u[0] = '\\'; u[1] = 'u'; u[2] = '0'; u[3] = '0'; u[4] = hex[c >> 4]; u[5] = hex[c & 15]; u[6] = 0;
            esc = u;
        }
        if (!esc) { run++; continue; }
        if (sbuf_add(b, s + i - run, run) || sbuf_adds(b, esc)) return -1;
        run = 0;
    }
    return sbuf_add(b, s + n - run, run);
}

void sbuf_consume(sbuf_t *b, size_t n) {
    if (n >= b->len) { sbuf_clear(b); return; }
    memmove(b->p, b->p + n, b->len - n);
    b->len -= n;
    b->p[b->len] = 0;
}

void sbuf_clear(sbuf_t *b) {
    b->len = 0;
    if (b->p) b->p[0] = 0;
}

void sbuf_free(sbuf_t *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

char *sbuf_take(sbuf_t *b) {
    char *p = b->p ? b->p : calloc(1, 1);
    b->p = NULL;
    b->len = b->cap = 0;
    return p;
}
