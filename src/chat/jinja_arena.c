/* jinja_arena.c — memory for one parse or one render, output buffers, and UTF-8 helpers.
 *
 * The arena is a list of malloc'd chunks with a bump pointer. Freeing happens once, at the
 * end. Every byte obtained from malloc counts against a cap, so a template that keeps
 * allocating (string doubling in a loop, `'x' * 10**9`) fails with an error instead of
 * taking the machine down. Big requests get a chunk of their own, so the waste from a
 * half-used chunk stays below one chunk size.
 *
 * Output buffers grow by doubling inside the arena; the old copy is abandoned, which at
 * most doubles the bytes a buffer costs. Good enough: it keeps every allocation in one
 * place and no error path has to free anything.
 */
#include "chat/jinja_int.h"
#include <stdlib.h>
#include <string.h>

#define JA_CHUNK 65536

struct ja_chunk {
    ja_chunk *next;
    size_t used, cap;
    max_align_t data[];
};

void *ja_alloc(jarena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    ja_chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > JA_CHUNK / 4 ? n : JA_CHUNK;
        size_t bytes = sizeof(ja_chunk) + cap;
        if (bytes < cap || a->total + bytes > a->limit) return NULL;
        ja_chunk *nc = malloc(bytes);
        if (!nc) return NULL;
        a->total += bytes;
        nc->used = 0;
        nc->cap = cap;
        if (c && cap != JA_CHUNK) {
            /* keep the current chunk on top: a dedicated big block goes second */
            nc->next = c->next;
            c->next = nc;
        } else {
            nc->next = c;
            a->head = nc;
        }
        c = nc;
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

void ja_free_all(jarena *a) {
    ja_chunk *c = a->head;
    while (c) {
        ja_chunk *nx = c->next;
        free(c);
        c = nx;
    }
    a->head = NULL;
    a->total = 0;
}

/* ---------------------------------------------------------------- buffers */

void jb_init(jbuf *b, size_t limit) {
    b->p = NULL;
    b->n = b->cap = 0;
    b->limit = limit;
}

int jb_put(jr *r, jbuf *b, const char *p, size_t n) {
    if (n == 0) return 0;
    if (b->n + n > b->limit || b->n + n < b->n)
        return jr_fail(r, "LimitError", "rendered output exceeds %zu bytes", b->limit);
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *np = ja_alloc(&r->a, cap);
        if (!np) return jr_oom(r);
        if (b->n) memcpy(np, b->p, b->n);
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

int jb_putc(jr *r, jbuf *b, char c) { return jb_put(r, b, &c, 1); }
int jb_puts(jr *r, jbuf *b, const char *z) { return jb_put(r, b, z, strlen(z)); }

int jb_to_str(jr *r, jbuf *b, jv *out) {
    return jv_str(r, b->p ? b->p : "", b->n, out);
}

/* ---------------------------------------------------------------- UTF-8 */

size_t u8_decode(const char *s, size_t n, uint32_t *cp) {
    const unsigned char *p = (const unsigned char *)s;
    if (n == 0) { *cp = 0; return 1; }
    unsigned c = p[0];
    if (c < 0x80) { *cp = c; return 1; }
    size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (len == 1 || len > n) { *cp = 0xFFFD; return 1; }
    uint32_t v = c & (0x3F >> (len - 1));
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80) { *cp = 0xFFFD; return 1; }
        v = (v << 6) | (p[i] & 0x3F);
    }
    *cp = v;
    return len;
}

size_t u8_encode(uint32_t cp, char out[4]) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xC0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12)); out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18)); out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t u8_len(const char *p, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)p[i] & 0xC0) != 0x80) k++;
    return k;
}

size_t u8_offset(const char *p, size_t n, size_t idx) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (((unsigned char)p[i] & 0xC0) != 0x80) {
            if (k == idx) return i;
            k++;
        }
    }
    return n;
}

bool u8_valid(const char *s, size_t n, size_t *bad_at) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        size_t len;
        uint32_t min;
        if (c < 0x80) { i++; continue; }
        else if (c >= 0xC2 && c < 0xE0) { len = 2; min = 0x80; }
        else if (c >= 0xE0 && c < 0xF0) { len = 3; min = 0x800; }
        else if (c >= 0xF0 && c < 0xF5) { len = 4; min = 0x10000; }
        else goto bad;
        if (i + len > n) goto bad;
        uint32_t v = c & (0x3F >> (len - 1));
        for (size_t k = 1; k < len; k++) {
            if ((p[i + k] & 0xC0) != 0x80) goto bad;
            v = (v << 6) | (p[i + k] & 0x3F);
        }
        if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) goto bad;
        i += len;
    }
    return true;
bad:
    if (bad_at) *bad_at = i;
    return false;
}

/* Python's str.isspace(): the characters with bidi class WS/B/S or category Zs. */
bool py_isspace(uint32_t c) {
    if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
    return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
           c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}
