/* tok_pretokenizer.c — HF pre-tokenizers: ByteLevel, Split, Metaspace, Digits, Punctuation,
 * Whitespace, WhitespaceSplit, BertPreTokenizer, CharDelimiterSplit, Sequence.
 *
 * Every splitting pre-tokenizer is the same two steps, as in HF's NormalizedString::split:
 *   1. find_matches: spans covering the piece, each marked match / not (a regex, a literal,
 *      or "each character for which a predicate holds" — consecutive such characters are
 *      separate matches, exactly like HF's `Fn(char) -> bool` pattern);
 *   2. a SplitDelimiterBehavior decides what to keep: Removed, Isolated, MergedWithPrevious,
 *      MergedWithNext, Contiguous (after `invert` flips the marks). Empty results are dropped.
 * ByteLevel and Metaspace also rewrite text (bytes → printable code points; ' ' → '▁'), so a
 * stage writes its output pieces into a fresh plist rather than slicing the input.
 */
#include "tokenizer/tok_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* GPT-2's pattern, used by ByteLevel when use_regex is true. */
static const char *GPT2_RE =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* bytes 33..126, 161..172, 174..255 map to themselves; the rest to 256, 257, ... in order. */
const uint16_t tk_bytelevel_b2u[256] = {
    256, 257, 258, 259, 260, 261, 262, 263, 264, 265, 266, 267, 268, 269, 270, 271,
    272, 273, 274, 275, 276, 277, 278, 279, 280, 281, 282, 283, 284, 285, 286, 287,
    288, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47,
    48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63,
    64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79,
    80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91, 92, 93, 94, 95,
    96, 97, 98, 99, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111,
    112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 289,
    290, 291, 292, 293, 294, 295, 296, 297, 298, 299, 300, 301, 302, 303, 304, 305,
    306, 307, 308, 309, 310, 311, 312, 313, 314, 315, 316, 317, 318, 319, 320, 321,
    322, 161, 162, 163, 164, 165, 166, 167, 168, 169, 170, 171, 172, 323, 174, 175,
    176, 177, 178, 179, 180, 181, 182, 183, 184, 185, 186, 187, 188, 189, 190, 191,
    192, 193, 194, 195, 196, 197, 198, 199, 200, 201, 202, 203, 204, 205, 206, 207,
    208, 209, 210, 211, 212, 213, 214, 215, 216, 217, 218, 219, 220, 221, 222, 223,
    224, 225, 226, 227, 228, 229, 230, 231, 232, 233, 234, 235, 236, 237, 238, 239,
    240, 241, 242, 243, 244, 245, 246, 247, 248, 249, 250, 251, 252, 253, 254, 255,
};
static int16_t u2b_table[324];
static pthread_once_t bl_once = PTHREAD_ONCE_INIT;
static void bl_init(void) {
    for (int i = 0; i < 324; i++) u2b_table[i] = -1;
    for (int b = 0; b < 256; b++) u2b_table[tk_bytelevel_b2u[b]] = (int16_t)b;
}
int tk_bytelevel_u2b(uint32_t cp) {
    pthread_once(&bl_once, bl_init);
    return cp < 324 ? u2b_table[cp] : -1;
}

static int parse_behavior(const char *s, int *b) {
    static const char *names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
    for (int i = 0; i < 5; i++)
        if (!strcmp(s, names[i])) { *b = i; return 0; }
    return -1;
}

int tk_pretok_load(tk_pretok_t **out, json_t *j, const char *path, err_t *e) {
    *out = NULL;
    if (!j || json_is_null(j)) return 0;
    const char *type = tk_js_str(j, "type");
    if (!json_is_object(j) || !type) return err_set(e, "%s: expected an object with a \"type\"", path);
    tk_pretok_t *p = calloc(1, sizeof *p);
    if (!p) return err_set(e, "out of memory");
    *out = p;
    if (!strcmp(type, "Sequence")) {
        p->type = PRE_SEQUENCE;
        json_t *arr = json_object_get(j, "pretokenizers");
        if (!json_is_array(arr)) return err_set(e, "%s.pretokenizers: expected an array", path);
        p->n_kids = (int)json_array_size(arr);
        p->kids = calloc(p->n_kids ? p->n_kids : 1, sizeof *p->kids);
        if (!p->kids) return err_set(e, "out of memory");
        for (int i = 0; i < p->n_kids; i++) {
            char sub[256];
            snprintf(sub, sizeof sub, "%s.pretokenizers[%d]", path, i);
            if (tk_pretok_load(&p->kids[i], json_array_get(arr, i), sub, e)) return -1;
        }
        return 0;
    }
    if (!strcmp(type, "ByteLevel")) {
        p->type = PRE_BYTELEVEL;
        p->add_prefix_space = tk_js_bool(j, "add_prefix_space", 1);
        p->use_regex = tk_js_bool(j, "use_regex", 1);
        if (p->use_regex) {
            if (tk_rx_compile(&p->re, GPT2_RE, e)) return err_prefix(e, "%s", path);
            p->has_re = 1;
        }
        return 0;
    }
    if (!strcmp(type, "Split")) {
        p->type = PRE_SPLIT;
        int is_re;
        const char *s;
        size_t n;
        if (tk_js_pattern(j, path, &is_re, &s, &n, e)) return -1;
        const char *b = tk_js_str(j, "behavior");
        if (!b || parse_behavior(b, &p->behavior))
            return err_set(e, "%s.behavior: expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous", path);
        p->invert = tk_js_bool(j, "invert", 0);
        if (is_re) {
            if (tk_rx_compile(&p->re, s, e)) return err_prefix(e, "%s.pattern", path);
            p->has_re = 1;
        } else if (n == 0) {
            /* an empty literal matches between every character: let the regex engine do it */
            if (tk_rx_compile_literal(&p->re, s, n, e)) return err_prefix(e, "%s.pattern", path);
            p->has_re = 1;
        } else {
            p->lit = malloc(n + 1);
            if (!p->lit) return err_set(e, "out of memory");
            memcpy(p->lit, s, n);
            p->lit[n] = 0;
            p->lit_len = n;
        }
        return 0;
    }
    if (!strcmp(type, "Metaspace")) {
        p->type = PRE_METASPACE;
        if (tk_js_char(j, "replacement", path, 0x2581, &p->repl, e)) return -1;
        sbuf_t b = {0};
        tk_sb_put_cp(&b, p->repl);
        memcpy(p->repl_utf8, b.p, b.len + 1);
        free(b.p);
        const char *ps = tk_js_str(j, "prepend_scheme");
        json_t *aps = json_object_get(j, "add_prefix_space");
        if (!ps) p->prepend = 1;
        else if (!strcmp(ps, "always")) p->prepend = 1;
        else if (!strcmp(ps, "never")) p->prepend = 0;
        else if (!strcmp(ps, "first")) p->prepend = 2;
        else return err_set(e, "%s.prepend_scheme: expected always, never or first, got \"%s\"", path, ps);
        if (json_is_false(aps)) {
            if (ps && p->prepend != 0)
                return err_set(e, "%s: add_prefix_space does not match declared prepend_scheme", path);
            p->prepend = 0;
        }
        p->split = tk_js_bool(j, "split", 1);
        return 0;
    }
    if (!strcmp(type, "Digits")) {
        p->type = PRE_DIGITS;
        p->individual_digits = tk_js_bool(j, "individual_digits", 0);
        return 0;
    }
    if (!strcmp(type, "Punctuation")) {
        p->type = PRE_PUNCT;
        const char *b = tk_js_str(j, "behavior");
        p->behavior = SPLIT_ISOLATED;
        if (b && parse_behavior(b, &p->behavior))
            return err_set(e, "%s.behavior: unknown behavior \"%s\"", path, b);
        return 0;
    }
    if (!strcmp(type, "Whitespace")) {
        p->type = PRE_WHITESPACE;
        if (tk_rx_compile(&p->re, "\\w+|[^\\w\\s]+", e)) return err_prefix(e, "%s", path);
        p->has_re = 1;
        return 0;
    }
    if (!strcmp(type, "WhitespaceSplit")) { p->type = PRE_WS_SPLIT; return 0; }
    if (!strcmp(type, "BertPreTokenizer")) { p->type = PRE_BERT; return 0; }
    if (!strcmp(type, "CharDelimiterSplit")) {
        p->type = PRE_CHAR_DELIM;
        json_t *d = json_object_get(j, "delimiter");
        if (!json_is_string(d)) return err_set(e, "%s.delimiter: expected a single character", path);
        return tk_js_char(j, "delimiter", path, 0, &p->repl, e);
    }
    return err_set(e, "%s: unsupported pre-tokenizer type \"%s\"", path, type);
}

void tk_pretok_free(tk_pretok_t *p) {
    if (!p) return;
    for (int i = 0; i < p->n_kids; i++) tk_pretok_free(p->kids[i]);
    free(p->kids);
    tk_rx_free(&p->re);
    free(p->lit);
    free(p);
}

/* ---- find_matches ----------------------------------------------------------------------- */
static int lit_spans(const char *s, size_t n, const char *lit, size_t ln, spans_t *out) {
    out->n = 0;
    if (n == 0) return tk_spans_push(out, 0, 0, 0);
    size_t prev = 0, i = 0;
    while (i < n) {
        const char *hit = memmem(s + i, n - i, lit, ln);
        if (!hit) break;
        size_t at = (size_t)(hit - s);
        if (at != prev && tk_spans_push(out, prev, at, 0)) return -1;
        if (tk_spans_push(out, at, at + ln, 1)) return -1;
        prev = i = at + ln;
    }
    if (prev != n && tk_spans_push(out, prev, n, 0)) return -1;
    return 0;
}

enum { PRED_WS, PRED_NUM, PRED_PUNCT, PRED_CHAR };
static int pred_spans(const char *s, size_t n, int pred, uint32_t ch, spans_t *out) {
    out->n = 0;
    if (n == 0) return tk_spans_push(out, 0, 0, 0);
    size_t last = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int k = tk_utf8_next(s + i, n - i, &cp);
        int hit = pred == PRED_WS ? tk_uc_is_whitespace(cp) : pred == PRED_NUM ? tk_uc_is_numeric(cp)
                : pred == PRED_PUNCT ? tk_uc_is_punct(cp) : cp == ch;
        if (hit) {
            if (last < i && tk_spans_push(out, last, i, 0)) return -1;
            if (tk_spans_push(out, i, i + k, 1)) return -1;
            last = i + k;
        }
        i += k;
    }
    if (last < n && tk_spans_push(out, last, n, 0)) return -1;
    return 0;
}

/* Applies invert + behavior to the spans in place; what remains are the pieces to keep. */
static void behave(spans_t *sp, int behavior, int invert) {
    span_t *v = sp->v;
    int n = sp->n, k = 0;
    if (invert)
        for (int i = 0; i < n; i++) v[i].m = !v[i].m;
    switch (behavior) {
    case SPLIT_ISOLATED: k = n; break;
    case SPLIT_REMOVED:
        for (int i = 0; i < n; i++)
            if (!v[i].m) v[k++] = v[i];
        break;
    case SPLIT_MERGED_PREV: {
        int prev_match = 0;
        for (int i = 0; i < n; i++) {
            span_t x = v[i];
            if (x.m && !prev_match && k > 0) v[k - 1].e = x.e;
            else v[k++] = x;
            prev_match = x.m;
        }
        break;
    }
    case SPLIT_MERGED_NEXT: {
        /* fold from the right, then the kept spans are v[k..n) in order */
        int prev_match = 0;
        k = n;
        for (int i = n - 1; i >= 0; i--) {
            span_t x = v[i];
            if (x.m && !prev_match && k < n) v[k].s = x.s;
            else v[--k] = x;
            prev_match = x.m;
        }
        memmove(v, v + k, sizeof *v * (n - k));
        k = n - k;
        break;
    }
    case SPLIT_CONTIGUOUS: {
        int prev_match = 0;
        for (int i = 0; i < n; i++) {
            span_t x = v[i];
            if (x.m == prev_match && k > 0) v[k - 1].e = x.e;
            else v[k++] = x;
            prev_match = x.m;
        }
        break;
    }
    }
    sp->n = k;
}

/* Emits the kept spans of piece text s as new pieces. */
static int emit(plist_t *out, const char *s, const spans_t *sp, int first) {
    for (int i = 0; i < sp->n; i++) {
        span_t x = sp->v[i];
        if (x.e == x.s) continue;
        if (tk_pl_add(out, s + x.s, x.e - x.s, first && x.s == 0)) return -1;
    }
    return 0;
}

/* Maps bytes to HF's printable code points and emits the result as one piece. */
static int tk_bytelevel_emit(plist_t *out, const char *s, size_t n, int first, sbuf_t *tmp) {
    tmp->len = 0;
    if (tk_sb_reserve(tmp, n * 2)) return -1;
    for (size_t i = 0; i < n; i++) {
        uint16_t u = tk_bytelevel_b2u[(unsigned char)s[i]];
        if (u < 0x80) tmp->p[tmp->len++] = (char)u;
        else {
            tmp->p[tmp->len++] = (char)(0xC0 | u >> 6);
            tmp->p[tmp->len++] = (char)(0x80 | (u & 63));
        }
    }
    return tk_pl_add(out, tmp->p, tmp->len, first);
}

static int one_piece(const tk_pretok_t *p, const char *s, size_t n, int first, plist_t *out, enc_ctx_t *cx, err_t *e) {
    spans_t *sp = &cx->spans;
    switch (p->type) {
    case PRE_SPLIT:
        if (p->has_re) { if (tk_rx_find_spans(&p->re, s, n, sp, cx->md, e)) return -1; }
        else if (lit_spans(s, n, p->lit, p->lit_len, sp)) goto oom;
        behave(sp, p->behavior, p->invert);
        return emit(out, s, sp, first) ? err_set(e, "out of memory") : 0;
    case PRE_BYTELEVEL: {
        const char *t = s;
        size_t tn = n;
        if (p->add_prefix_space && !(n > 0 && s[0] == ' ')) {
            cx->tmp2.len = 0;
            if (tk_sb_putc(&cx->tmp2, ' ') || tk_sb_put(&cx->tmp2, s, n)) goto oom;
            t = cx->tmp2.p;
            tn = cx->tmp2.len;
        }
        if (!p->use_regex) return tk_bytelevel_emit(out, t, tn, first, &cx->tmp) ? err_set(e, "out of memory") : 0;
        if (tk_rx_find_spans(&p->re, t, tn, sp, cx->md, e)) return -1;
        for (int i = 0; i < sp->n; i++) {
            span_t x = sp->v[i];
            if (x.e > x.s && tk_bytelevel_emit(out, t + x.s, x.e - x.s, first && x.s == 0, &cx->tmp)) goto oom;
        }
        return 0;
    }
    case PRE_METASPACE: {
        sbuf_t *b = &cx->tmp2;
        b->len = 0;
        int rl = (int)strlen(p->repl_utf8);
        int starts = n >= (size_t)rl && !memcmp(s, p->repl_utf8, rl);
        if (n > 0 && s[0] == ' ') starts = 1; /* the space becomes the replacement */
        if (!starts && (p->prepend == 1 || (p->prepend == 2 && first)) && tk_sb_put(b, p->repl_utf8, rl)) goto oom;
        for (size_t i = 0; i < n; i++)
            if (s[i] == ' ' ? tk_sb_put(b, p->repl_utf8, rl) : tk_sb_putc(b, s[i])) goto oom;
        if (!p->split) return tk_pl_add(out, b->p ? b->p : "", b->len, first) ? err_set(e, "out of memory") : 0;
        if (pred_spans(b->p ? b->p : "", b->len, PRED_CHAR, p->repl, sp)) goto oom;
        behave(sp, SPLIT_MERGED_NEXT, 0);
        return emit(out, b->p, sp, first) ? err_set(e, "out of memory") : 0;
    }
    case PRE_DIGITS:
        if (pred_spans(s, n, PRED_NUM, 0, sp)) goto oom;
        behave(sp, p->individual_digits ? SPLIT_ISOLATED : SPLIT_CONTIGUOUS, 0);
        return emit(out, s, sp, first) ? err_set(e, "out of memory") : 0;
    case PRE_PUNCT:
        if (pred_spans(s, n, PRED_PUNCT, 0, sp)) goto oom;
        behave(sp, p->behavior, 0);
        return emit(out, s, sp, first) ? err_set(e, "out of memory") : 0;
    case PRE_WHITESPACE:
        if (tk_rx_find_spans(&p->re, s, n, sp, cx->md, e)) return -1;
        behave(sp, SPLIT_REMOVED, 1);
        return emit(out, s, sp, first) ? err_set(e, "out of memory") : 0;
    case PRE_WS_SPLIT:
    case PRE_CHAR_DELIM:
        if (pred_spans(s, n, p->type == PRE_WS_SPLIT ? PRED_WS : PRED_CHAR, p->repl, sp)) goto oom;
        behave(sp, SPLIT_REMOVED, 0);
        return emit(out, s, sp, first) ? err_set(e, "out of memory") : 0;
    case PRE_BERT: {
        /* whitespace (Removed), then punctuation (Isolated) on each result */
        spans_t ws = {0};
        if (pred_spans(s, n, PRED_WS, 0, &ws)) { free(ws.v); goto oom; }
        behave(&ws, SPLIT_REMOVED, 0);
        for (int i = 0; i < ws.n; i++) {
            span_t w = ws.v[i];
            if (w.e == w.s) continue;
            if (pred_spans(s + w.s, w.e - w.s, PRED_PUNCT, 0, sp)) { free(ws.v); goto oom; }
            if (emit(out, s + w.s, sp, first && w.s == 0)) { free(ws.v); goto oom; }
        }
        free(ws.v);
        return 0;
    }
    }
    return err_set(e, "pre-tokenizer: unknown type %d", p->type);
oom:
    return err_set(e, "out of memory");
}

int tk_pretok_apply(const tk_pretok_t *p, plist_t *l, plist_t *scratch, enc_ctx_t *cx, err_t *e) {
    if (p->type == PRE_SEQUENCE) {
        for (int i = 0; i < p->n_kids; i++)
            if (tk_pretok_apply(p->kids[i], l, scratch, cx, e)) return -1;
        return 0;
    }
    tk_pl_clear(scratch);
    for (int i = 0; i < l->n; i++) {
        piece_t pc = l->p[i];
        if (one_piece(p, l->text.p + pc.off, pc.len, pc.first, scratch, cx, e)) return -1;
    }
    plist_t x = *l;
    *l = *scratch;
    *scratch = x;
    return 0;
}
