/* tok_regex.c — HF's regexes (Oniguruma syntax) on PCRE2.
 *
 * HF tokenizers compiles Split/ByteLevel patterns with Oniguruma in Unicode mode. PCRE2 in
 * UTF+UCP mode agrees on nearly everything these patterns use (\p{L}, \p{N}, (?i:...),
 * lookahead), with a few classes that mean something else:
 *   \s  onig: the White_Space property. PCRE2 UCP: \p{Z} + \h + \v, which adds U+180E.
 *       → \p{White_Space} (and \S → \P{White_Space}); both work inside [...] too.
 *   \w  onig: Alphabetic, marks, decimal digits, connector punctuation, joiners.
 *       → that set spelled with properties. \W outside a class is the negated set; inside
 *       a class it is left to PCRE2 (close, and no real tokenizer uses it there).
 *   \h  onig: a hex digit (PCRE2: horizontal space). \uHHHH: onig only → \x{HHHH}.
 * The rewrite walks the pattern once, tracking whether it is inside a character class.
 * Matching uses the JIT when available and falls back to the interpreter if the JIT stack
 * runs out (very long runs against backtracking patterns).
 */
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>

#define WORD_SET "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}"

static int translate(const char *p, sbuf_t *o) {
    size_t n = strlen(p);
    int in_class = 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char d = p[i + 1];
            const char *rep = NULL;
            switch (d) {
            case 's': rep = "\\p{White_Space}"; break;
            case 'S': rep = "\\P{White_Space}"; break;
            case 'w': rep = in_class ? WORD_SET : "[" WORD_SET "]"; break;
            case 'W': rep = in_class ? "\\W" : "[^" WORD_SET "]"; break;
            case 'h': rep = in_class ? "0-9a-fA-F" : "[0-9a-fA-F]"; break;
            case 'H': rep = in_class ? "\\H" : "[^0-9a-fA-F]"; break;
            default: break;
            }
            if (rep) {
                if (tk_sb_put(o, rep, strlen(rep))) return -1;
                i++;
                continue;
            }
            if (d == 'u' && i + 5 < n + 0 && strspn(p + i + 2, "0123456789abcdefABCDEF") >= 4) {
                if (tk_sb_put(o, "\\x{", 3) || tk_sb_put(o, p + i + 2, 4) || tk_sb_putc(o, '}')) return -1;
                i += 5;
                continue;
            }
            /* any other escape: copy the backslash and the whole next character */
            int l = tk_utf8_len_lead((unsigned char)d);
            if (i + 1 + l > n) l = (int)(n - i - 1);
            if (tk_sb_put(o, p + i, 1 + l)) return -1;
            i += l;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = 1;
            if (tk_sb_putc(o, c)) return -1;
            /* a ']' right after '[' or '[^' is a literal */
            if (i + 1 < n && p[i + 1] == '^') { if (tk_sb_putc(o, '^')) return -1; i++; }
            if (i + 1 < n && p[i + 1] == ']') { if (tk_sb_put(o, "\\]", 2)) return -1; i++; }
            continue;
        }
        if (in_class && c == '[') {
            /* onig nests classes; PCRE2 would take '[' literally except for [:posix:] */
            if (i + 1 < n && p[i + 1] == ':') { if (tk_sb_putc(o, c)) return -1; continue; }
            in_class++;
            if (tk_sb_putc(o, c)) return -1;
            continue;
        }
        if (in_class && c == ']') in_class--;
        if (tk_sb_putc(o, c)) return -1;
    }
    return 0;
}

static int compile_raw(tok_regex_t *r, const char *pat, size_t n, err_t *e) {
    int ec;
    PCRE2_SIZE eo;
    r->code = pcre2_compile((PCRE2_SPTR)pat, n, PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &ec, &eo, NULL);
    if (!r->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return err_set(e, "regex /%s/: %s at offset %zu", r->source ? r->source : "", (char *)msg, (size_t)eo);
    }
    pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE); /* best effort: the interpreter still works */
    return 0;
}

int tk_rx_compile(tok_regex_t *r, const char *pattern, err_t *e) {
    memset(r, 0, sizeof *r);
    if (tk_utf8_invalid_at(pattern, strlen(pattern)) != (size_t)-1)
        return err_set(e, "regex is not valid UTF-8");
    r->source = strdup(pattern);
    sbuf_t o = {0};
    if (!r->source || translate(pattern, &o)) { free(o.p); tk_rx_free(r); return err_set(e, "out of memory"); }
    int rc = compile_raw(r, o.p ? o.p : "", o.len, e);
    free(o.p);
    if (rc) tk_rx_free(r);
    return rc;
}

int tk_rx_compile_literal(tok_regex_t *r, const char *lit, size_t n, err_t *e) {
    memset(r, 0, sizeof *r);
    r->source = malloc(n + 1);
    sbuf_t o = {0};
    if (!r->source) return err_set(e, "out of memory");
    memcpy(r->source, lit, n);
    r->source[n] = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)lit[i];
        int special = c < 0x80 && !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'));
        if (c == 0) {
            if (tk_sb_put(&o, "\\x00", 4)) goto oom;
            continue;
        }
        if ((special && tk_sb_putc(&o, '\\')) || tk_sb_putc(&o, (char)c)) goto oom;
    }
    int rc = compile_raw(r, o.p ? o.p : "", o.len, e);
    free(o.p);
    if (rc) tk_rx_free(r);
    return rc;
oom:
    free(o.p);
    tk_rx_free(r);
    return err_set(e, "out of memory");
}

void tk_rx_free(tok_regex_t *r) {
    if (r->code) pcre2_code_free(r->code);
    free(r->source);
    memset(r, 0, sizeof *r);
}

int tk_rx_find_spans(const tok_regex_t *r, const char *s, size_t n, spans_t *out, pcre2_match_data *md,
                  err_t *e) {
    out->n = 0;
    if (n == 0) return tk_spans_push(out, 0, 0, 0);
    size_t prev = 0, pos = 0, last_match_end = (size_t)-1;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    while (pos <= n) {
        int rc = pcre2_match(r->code, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(r->code, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return err_set(e, "regex /%s/ at byte %zu: %s", r->source, pos, (char *)msg);
        }
        size_t ms = ov[0], me = ov[1];
        if (ms == me && me == last_match_end) {
            /* an empty match right after the previous one is skipped (Rust/onig iteration) */
            if (pos >= n) break;
            pos += tk_utf8_len_lead((unsigned char)s[pos]);
            continue;
        }
        if (prev != ms && tk_spans_push(out, prev, ms, 0)) return err_set(e, "out of memory");
        if (tk_spans_push(out, ms, me, 1)) return err_set(e, "out of memory");
        prev = me;
        last_match_end = me;
        if (me == ms) {
            if (pos >= n) break;
            pos = me; /* retry here; the rule above moves on by one character */
        } else {
            pos = me;
        }
    }
    if (prev != n && tk_spans_push(out, prev, n, 0)) return err_set(e, "out of memory");
    return 0;
}
