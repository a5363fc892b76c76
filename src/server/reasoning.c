/* reasoning.c — see reasoning.h.
 *
 * States: BEFORE (nothing but whitespace seen; the reply may still open a block),
 * AFTER_OPEN (just opened a block whose marker ends in whitespace: it is swallowed),
 * INSIDE (reasoning), AFTER_CLOSE (just closed; whitespace is swallowed until the answer begins),
 * CONTENT (everything from here on is content, markers included — a model that writes
 * "<think>" in its answer is quoting it). */
#include "server/reasoning.h"
#include <string.h>

enum { BEFORE, AFTER_OPEN, INSIDE, AFTER_CLOSE, CONTENT };

const rs_markers_t RS_THINK = {"<think>", "<think>", "</think>", 0};
const rs_markers_t RS_GEMMA4 = {"gemma4", "<|channel>thought", "<channel|>", 1};

static int is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

void rs_init(reasoning_split_t *r, const rs_markers_t *m, int started_inside) {
    memset(r, 0, sizeof *r);
    r->m = m;
    r->state = started_inside ? (m->eat_ws ? AFTER_OPEN : INSIDE) : BEFORE;
}

void rs_free(reasoning_split_t *r) { sbuf_free(&r->hold); }

/* Longest suffix of s[0..n) that is a proper prefix of m. */
static size_t partial(const char *s, size_t n, const char *m) {
    size_t ml = strlen(m), keep = ml - 1 < n ? ml - 1 : n;
    for (; keep > 0; keep--)
        if (!memcmp(s + n - keep, m, keep)) return keep;
    return 0;
}

static void run(reasoning_split_t *r, const rs_sink_t *k, int final) {
    sbuf_t *b = &r->hold;
    for (;;) {
        if (!b->len) return;
        switch (r->state) {
        case BEFORE: {
            size_t w = 0;
            while (w < b->len && is_ws(b->p[w])) w++;
            const char *open = r->m->open;
            size_t n = b->len - w, ol = strlen(open);
            if (n >= ol && !memcmp(b->p + w, open, ol)) {
                sbuf_consume(b, w + ol);
                r->state = r->m->eat_ws ? AFTER_OPEN : INSIDE;
                continue;
            }
            if (!final && (n == 0 || (n < ol && !memcmp(b->p + w, open, n)))) return; /* still undecided */
            r->state = CONTENT;
            continue;
        }
        case AFTER_OPEN: {
            size_t w = 0;
            while (w < b->len && is_ws(b->p[w])) w++;
            sbuf_consume(b, w);
            if (b->len) r->state = INSIDE;
            continue;
        }
        case INSIDE: {
            const char *close = r->m->close;
            const char *hit = memmem(b->p, b->len, close, strlen(close));
            if (hit) {
                size_t at = (size_t)(hit - b->p);
                if (at) k->reasoning(k->u, b->p, at);
                sbuf_consume(b, at + strlen(close));
                r->state = AFTER_CLOSE;
                continue;
            }
            size_t safe = final ? b->len : b->len - partial(b->p, b->len, close);
            if (safe) k->reasoning(k->u, b->p, safe);
            sbuf_consume(b, safe);
            return;
        }
        case AFTER_CLOSE: {
            size_t w = 0;
            while (w < b->len && is_ws(b->p[w])) w++;
            sbuf_consume(b, w);
            if (b->len) r->state = CONTENT;
            continue;
        }
        case CONTENT:
            k->content(k->u, b->p, b->len);
            sbuf_clear(b);
            return;
        }
    }
}

void rs_push(reasoning_split_t *r, const char *s, size_t n, const rs_sink_t *k) {
    if (!n) return;
    sbuf_add(&r->hold, s, n);
    run(r, k, 0);
}

void rs_finish(reasoning_split_t *r, const rs_sink_t *k) {
    run(r, k, 1);
    sbuf_clear(&r->hold);
}

int rs_prompt_opens(const char *prompt, const rs_markers_t *m) {
    size_t n = strlen(prompt), ol = strlen(m->open);
    while (n > 0 && is_ws(prompt[n - 1])) n--;
    while (ol > 0 && is_ws(m->open[ol - 1])) ol--;
    return n >= ol && !memcmp(prompt + n - ol, m->open, ol);
}
