/* jinja_lexer.c — template source to tokens, following jinja2's lexer rule for rule.
 *
 * Whitespace is where chat templates are most fragile, so the rules here mirror
 * jinja2.lexer with trim_blocks=True and lstrip_blocks=True:
 *   - `{%-`, `{{-`, `{#-` strip all whitespace (Python's str.rstrip) before the tag;
 *   - otherwise, for `{%` and `{#` (never `{{`), lstrip_blocks removes spaces and tabs
 *     between the start of the line and the tag, unless the tag starts with `+`; "start of
 *     the line" includes the position right after a previous tag whose match ended in \n;
 *   - `-%}`, `-}}`, `-#}` strip all whitespace after the tag;
 *   - `%}` and `#}` (trim_blocks) swallow one newline right after them; `+%}` does not;
 *   - `{% raw %}` does not trim the newline after it, `{% endraw %}` does.
 * Inside tags: names, strings (with Python unicode-escape rules), ints (0x/0o/0b, `_`
 * separators), floats, operators; brackets are balanced so that `}}` inside a dict literal
 * does not end the tag. The source was newline-normalized by the caller (\r\n and \r to \n,
 * one trailing newline dropped, as keep_trailing_newline=False does).
 */
#include "chat/jinja_int.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct lexer {
    jarena *a;
    const char *s;
    size_t n;
    err_t *e;
    jtok *t;
    size_t nt, ct;
    /* position tracking: offsets only move forward */
    size_t track_off;
    int track_line, track_col;
} lexer;

/* Line and column (in code points, 1-based) of a byte offset; incremental, O(distance). */
static void where(lexer *L, size_t off, int *line, int *col) {
    if (off < L->track_off) { L->track_off = 0; L->track_line = 1; L->track_col = 1; }
    for (size_t i = L->track_off; i < off && i < L->n; i++) {
        if (L->s[i] == '\n') { L->track_line++; L->track_col = 1; }
        else if (((unsigned char)L->s[i] & 0xC0) != 0x80) L->track_col++;
    }
    L->track_off = off;
    *line = L->track_line;
    *col = L->track_col;
}

static int lex_fail(lexer *L, size_t off, const char *msg) {
    int line, col;
    where(L, off, &line, &col);
    return err_set(L->e, "line %d, column %d: TemplateSyntaxError: %s", line, col, msg);
}

/* The token array is malloc'd (realloc keeps one copy); the caller frees it after parsing. */
static jtok *push(lexer *L, int kind, size_t off, size_t n) {
    if (L->nt == L->ct) {
        size_t cap = L->ct ? L->ct * 2 : 256;
        jtok *nt = realloc(L->t, cap * sizeof *nt);
        if (!nt) { err_set(L->e, "out of memory tokenizing the template"); return NULL; }
        L->t = nt;
        L->ct = cap;
    }
    jtok *t = &L->t[L->nt++];
    memset(t, 0, sizeof *t);
    t->kind = (uint8_t)kind;
    t->p = L->s + off;
    t->n = n;
    where(L, off, &t->line, &t->col);
    return t;
}

/* Python whitespace (str.isspace / regex \s) at p; returns its byte length or 0. */
static size_t ws_at(const char *p, size_t n) {
    if (!n) return 0;
    uint32_t cp;
    size_t k = u8_decode(p, n, &cp);
    return py_isspace(cp) ? k : 0;
}

static size_t skip_ws(const char *s, size_t n, size_t i) {
    size_t k;
    while (i < n && (k = ws_at(s + i, n - i))) i += k;
    return i;
}

/* Length of text after Python's rstrip(). */
static size_t rstrip_len(const char *s, size_t n) {
    while (n > 0) {
        size_t st = n - 1;
        while (st > 0 && ((unsigned char)s[st] & 0xC0) == 0x80) st--;
        if (!ws_at(s + st, n - st)) break;
        n = st;
    }
    return n;
}

/* Emits text [from, to) as data, applying the strip rules of the tag that follows.
 * sign: '-', '+' or 0; lstrip: whether lstrip_blocks applies to that tag kind. */
static int emit_data(lexer *L, size_t from, size_t to, char sign, bool lstrip, bool line_starting) {
    size_t len = to - from;
    const char *text = L->s + from;
    if (sign == '-') {
        len = rstrip_len(text, len);
    } else if (sign != '+' && lstrip) {
        size_t l_pos = 0;
        for (size_t i = len; i > 0; i--)
            if (text[i - 1] == '\n') { l_pos = i; break; }
        if (l_pos > 0 || line_starting) {
            bool only = true;
            for (size_t i = l_pos; i < len; i++)
                if (text[i] != ' ' && text[i] != '\t') { only = false; break; }
            if (only) len = l_pos;
        }
    }
    if (len == 0) return 0;
    return push(L, T_DATA, from, len) ? 0 : -1;
}

/* Matches `{%[-+]?\s*NAME\s*` at i; returns the offset after it, or 0. */
static size_t match_block_word(lexer *L, size_t i, const char *word, char *sign) {
    const char *s = L->s;
    size_t n = L->n, wl = strlen(word);
    if (i + 2 > n || s[i] != '{' || s[i + 1] != '%') return 0;
    i += 2;
    *sign = 0;
    if (i < n && (s[i] == '-' || s[i] == '+')) *sign = s[i++];
    i = skip_ws(s, n, i);
    if (i + wl > n || memcmp(s + i, word, wl)) return 0;
    i += wl;
    return skip_ws(s, n, i);
}

/* Decodes a string literal body [p, p+n) with Python's unicode-escape rules. */
static int unescape(lexer *L, size_t off, const char *p, size_t n, jstr *out) {
    char *o = ja_alloc(L->a, n + 1);
    if (!o) return err_set(L->e, "template too large");
    size_t k = 0, i = 0;
    while (i < n) {
        char c = p[i];
        if (c != '\\') { o[k++] = c; i++; continue; }
        if (i + 1 >= n) { o[k++] = '\\'; i++; continue; }
        char d = p[++i];
        uint32_t cp;
        int nhex = 0;
        switch (d) {
        case '\n': i++; continue;
        case '\\': o[k++] = '\\'; i++; continue;
        case '\'': o[k++] = '\''; i++; continue;
        case '"': o[k++] = '"'; i++; continue;
        case 'a': o[k++] = '\a'; i++; continue;
        case 'b': o[k++] = '\b'; i++; continue;
        case 'f': o[k++] = '\f'; i++; continue;
        case 'n': o[k++] = '\n'; i++; continue;
        case 'r': o[k++] = '\r'; i++; continue;
        case 't': o[k++] = '\t'; i++; continue;
        case 'v': o[k++] = '\v'; i++; continue;
        case 'x': nhex = 2; break;
        case 'u': nhex = 4; break;
        case 'U': nhex = 8; break;
        case 'N': return lex_fail(L, off, "\\N{...} escapes are not supported");
        default:
            if (d >= '0' && d <= '7') {
                cp = 0;
                for (int m = 0; m < 3 && i < n && p[i] >= '0' && p[i] <= '7'; m++) cp = cp * 8 + (uint32_t)(p[i++] - '0');
                k += u8_encode(cp, o + k);
                continue;
            }
            if ((unsigned char)d >= 0x80) {
                /* Python backslash-replaces non-ASCII before decoding: "\é" becomes "\xe9" */
                uint32_t c2;
                size_t cl = u8_decode(p + i, n - i, &c2);
                char tmp[16];
                int tl = snprintf(tmp, sizeof tmp, c2 < 0x100 ? "\\x%02x" : c2 < 0x10000 ? "\\u%04x" : "\\U%08x", c2);
                /* the output can be longer than the input here: regrow */
                char *no = ja_alloc(L->a, k + (size_t)tl + (n - i) + 1);
                if (!no) return err_set(L->e, "template too large");
                memcpy(no, o, k);
                o = no;
                memcpy(o + k, tmp, (size_t)tl);
                k += (size_t)tl;
                i += cl;
                continue;
            }
            o[k++] = '\\';  /* unknown escape: kept as is */
            continue;
        }
        i++;
        cp = 0;
        for (int m = 0; m < nhex; m++, i++) {
            char h = i < n ? p[i] : 0;
            int v = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
            if (v < 0) return lex_fail(L, off, nhex == 2 ? "truncated \\xXX escape" : nhex == 4 ? "truncated \\uXXXX escape" : "truncated \\UXXXXXXXX escape");
            cp = cp * 16 + (uint32_t)v;
        }
        if (cp > 0x10FFFF) return lex_fail(L, off, "illegal Unicode character in escape");
        if (cp >= 0xD800 && cp <= 0xDFFF) return lex_fail(L, off, "surrogate code point in string escape is not supported");
        k += u8_encode(cp, o + k);
    }
    o[k] = 0;
    out->p = o;
    out->n = k;
    return 0;
}

static bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* (\d+_)*\d+ at i; returns the end or i when absent. */
static size_t digits_us(const char *s, size_t n, size_t i) {
    size_t j = i;
    if (j >= n || !is_digit(s[j])) return i;
    for (;;) {
        while (j < n && is_digit(s[j])) j++;
        if (j + 1 < n && s[j] == '_' && is_digit(s[j + 1])) { j++; continue; }
        return j;
    }
}

static int lex_number(lexer *L, size_t *pi) {
    const char *s = L->s;
    size_t n = L->n, i = *pi, start = i;
    bool after_dot = i > 0 && s[i - 1] == '.';
    if (!after_dot) {
        size_t j = digits_us(s, n, i), f = j;
        bool isf = false;
        if (f < n && s[f] == '.' && f + 1 < n && is_digit(s[f + 1])) { f = digits_us(s, n, f + 1); isf = true; }
        if (f < n && (s[f] == 'e' || s[f] == 'E')) {
            size_t g = f + 1;
            if (g < n && (s[g] == '+' || s[g] == '-')) g++;
            size_t h = digits_us(s, n, g);
            if (h > g) { f = h; isf = true; }
        }
        if (isf) {
            char buf[128];
            size_t k = 0;
            for (size_t m = start; m < f && k < sizeof buf - 1; m++)
                if (s[m] != '_') buf[k++] = s[m];
            buf[k] = 0;
            jtok *t = push(L, T_FLOAT, start, f - start);
            if (!t) return -1;
            t->fval = strtod(buf, NULL);
            *pi = f;
            return 0;
        }
    }
    /* integer: 0b / 0o / 0x, [1-9](_?\d)*, 0(_?0)* */
    int base = 10;
    size_t j = i;
    if (s[i] == '0' && i + 1 < n && strchr("bBoOxX", s[i + 1]) && s[i + 1]) {
        char b = (char)(s[i + 1] | 0x20);
        base = b == 'b' ? 2 : b == 'o' ? 8 : 16;
        j = i + 2;
        size_t m = j;
        for (;;) {
            size_t q = m;
            if (q < n && s[q] == '_') q++;
            char c = q < n ? (char)(s[q] | 0x20) : 0;
            bool ok = base == 2 ? (c == '0' || c == '1') : base == 8 ? (c >= '0' && c <= '7')
                                                                  : (is_digit(c) || (c >= 'a' && c <= 'f'));
            if (!ok) break;
            m = q + 1;
        }
        if (m == j) { base = 10; j = i + 1; }
        else j = m;
    } else if (s[i] == '0') {
        j = i + 1;
        while (j < n && (s[j] == '0' || (s[j] == '_' && j + 1 < n && s[j + 1] == '0'))) j += s[j] == '_' ? 2 : 1;
    } else {
        j = i + 1;
        while (j < n && (is_digit(s[j]) || (s[j] == '_' && j + 1 < n && is_digit(s[j + 1])))) j += s[j] == '_' ? 2 : 1;
    }
    char buf[128];
    size_t k = 0;
    for (size_t m = (base == 10 ? i : i + 2); m < j && k < sizeof buf - 1; m++)
        if (s[m] != '_') buf[k++] = s[m];
    buf[k] = 0;
    errno = 0;
    unsigned long long v = strtoull(buf, NULL, base);
    if (errno || v > INT64_MAX || j - i > 100) return lex_fail(L, i, "integer literal too large");
    jtok *t = push(L, T_INT, i, j - i);
    if (!t) return -1;
    t->ival = (int64_t)v;
    *pi = j;
    return 0;
}

static const char *const two_ops[] = {"//", "**", "==", "!=", ">=", "<="};

/* Lexes the inside of a {{ }} or {% %} tag starting at *pi. Returns 0 with *pi after the
 * closing delimiter (and *ended_nl set when the match ended in \n), or 1 at end of input. */
static int lex_tag(lexer *L, size_t *pi, bool block, bool *ended_nl) {
    const char *s = L->s;
    size_t n = L->n, i = *pi;
    char stack[JINJA_MAX_PARSE_DEPTH];
    int sp = 0;
    for (;;) {
        if (sp == 0) {
            /* end rules come before everything else, as in jinja2 */
            if (block) {
                if (i + 3 <= n && s[i] == '+' && s[i + 1] == '%' && s[i + 2] == '}') {
                    if (!push(L, T_BLOCK_END, i, 3)) return -1;
                    *pi = i + 3; *ended_nl = false; return 0;
                }
                if (i + 3 <= n && s[i] == '-' && s[i + 1] == '%' && s[i + 2] == '}') {
                    if (!push(L, T_BLOCK_END, i, 3)) return -1;
                    size_t j = skip_ws(s, n, i + 3);
                    *pi = j; *ended_nl = j > i + 3 && s[j - 1] == '\n'; return 0;
                }
                if (i + 2 <= n && s[i] == '%' && s[i + 1] == '}') {
                    if (!push(L, T_BLOCK_END, i, 2)) return -1;
                    size_t j = i + 2;
                    if (j < n && s[j] == '\n') j++;
                    *pi = j; *ended_nl = j > i + 2; return 0;
                }
            } else {
                if (i + 3 <= n && s[i] == '-' && s[i + 1] == '}' && s[i + 2] == '}') {
                    if (!push(L, T_VAR_END, i, 3)) return -1;
                    size_t j = skip_ws(s, n, i + 3);
                    *pi = j; *ended_nl = j > i + 3 && s[j - 1] == '\n'; return 0;
                }
                if (i + 2 <= n && s[i] == '}' && s[i + 1] == '}') {
                    if (!push(L, T_VAR_END, i, 2)) return -1;
                    *pi = i + 2; *ended_nl = false; return 0;
                }
            }
        }
        size_t w = skip_ws(s, n, i);
        if (w != i) { i = w; continue; }
        if (i >= n) { *pi = i; return 1; }
        char c = s[i];
        if (is_digit(c)) {
            if (lex_number(L, &i)) return -1;
            continue;
        }
        if (is_name_start(c)) {
            size_t j = i + 1;
            while (j < n && is_name_char(s[j])) j++;
            if (!push(L, T_NAME, i, j - i)) return -1;
            i = j;
            continue;
        }
        if (c == '\'' || c == '"') {
            size_t j = i + 1;
            while (j < n && s[j] != c) j += (s[j] == '\\' && j + 1 < n) ? 2 : 1;
            if (j >= n) {
                char msg[64];
                if (c == '\'') snprintf(msg, sizeof msg, "unexpected char \"'\" at %zu", i);
                else snprintf(msg, sizeof msg, "unexpected char '\"' at %zu", i);
                return lex_fail(L, i, msg);
            }
            jtok *t = push(L, T_STRING, i, j + 1 - i);
            if (!t) return -1;
            if (unescape(L, i, s + i + 1, j - i - 1, &t->str)) return -1;
            i = j + 1;
            continue;
        }
        size_t ol = 0;
        for (size_t k = 0; k < sizeof two_ops / sizeof two_ops[0]; k++)
            if (i + 2 <= n && s[i] == two_ops[k][0] && s[i + 1] == two_ops[k][1]) { ol = 2; break; }
        if (!ol && strchr("+-/*%~[](){}><=.:|,;", c) && c) ol = 1;
        if (!ol) {
            char msg[64];
            if ((unsigned char)c < 0x80 && c >= 0x20) snprintf(msg, sizeof msg, "unexpected char '%c' at %zu", c, i);
            else snprintf(msg, sizeof msg, "unexpected char (byte 0x%02x) at %zu", (unsigned char)c, i);
            return lex_fail(L, i, msg);
        }
        if (ol == 1 && (c == '(' || c == '[' || c == '{')) {
            if (sp >= (int)sizeof stack) return lex_fail(L, i, "brackets nested too deeply");
            stack[sp++] = c;
        } else if (ol == 1 && (c == ')' || c == ']' || c == '}')) {
            char want = c == ')' ? '(' : c == ']' ? '[' : '{';
            char msg[64];
            if (sp == 0) { snprintf(msg, sizeof msg, "unexpected '%c'", c); return lex_fail(L, i, msg); }
            if (stack[sp - 1] != want) {
                char exp = stack[sp - 1] == '(' ? ')' : stack[sp - 1] == '[' ? ']' : '}';
                snprintf(msg, sizeof msg, "unexpected '%c', expected '%c'", c, exp);
                return lex_fail(L, i, msg);
            }
            sp--;
        }
        if (!push(L, T_OP, i, ol)) return -1;
        i += ol;
    }
}

static int lex_all(lexer *L);

int jinja_lex(jarena *a, const char *s, size_t n, jtok **toks, size_t *ntoks, err_t *e) {
    lexer L = {.a = a, .s = s, .n = n, .e = e, .track_line = 1, .track_col = 1};
    if (lex_all(&L)) {
        free(L.t);
        return -1;
    }
    *toks = L.t;
    *ntoks = L.nt;
    return 0;
}

static int lex_all(lexer *L) {
    const char *s = L->s;
    size_t n = L->n;
    size_t pos = 0;
    bool line_starting = true;
    while (pos < n) {
        /* the earliest {{, {% or {# */
        size_t t = pos;
        char kind = 0;
        while (t + 1 < n) {
            const char *q = memchr(s + t, '{', n - t - 1);
            if (!q) { t = n; break; }
            t = (size_t)(q - s);
            if (s[t + 1] == '{' || s[t + 1] == '%' || s[t + 1] == '#') { kind = s[t + 1]; break; }
            t++;
        }
        if (!kind) {
            if (!push(L, T_DATA, pos, n - pos)) return -1;
            break;
        }
        char sign = (t + 2 < n && (s[t + 2] == '-' || s[t + 2] == '+')) ? s[t + 2] : 0;
        /* {% raw %} */
        char rs;
        size_t after = kind == '%' ? match_block_word(L, t, "raw", &rs) : 0;
        if (after) {
            size_t end = 0;
            bool ok = false;
            if (after + 3 <= n && s[after] == '-' && s[after + 1] == '%' && s[after + 2] == '}') { end = skip_ws(s, n, after + 3); ok = true; }
            else if (after + 2 <= n && s[after] == '%' && s[after + 1] == '}') { end = after + 2; ok = true; }
            if (ok) {
                if (emit_data(L, pos, t, sign, true, line_starting)) return -1;
                line_starting = end > 0 && s[end - 1] == '\n';
                /* find {% endraw %} */
                size_t q = end, body_end = 0, stop = 0;
                char es = 0;
                while (q + 1 < n) {
                    const char *f = memchr(s + q, '{', n - q);
                    if (!f) break;
                    q = (size_t)(f - s);
                    size_t aft = match_block_word(L, q, "endraw", &es);
                    if (aft) {
                        if (aft + 3 <= n && s[aft] == '+' && s[aft + 1] == '%' && s[aft + 2] == '}') { stop = aft + 3; }
                        else if (aft + 3 <= n && s[aft] == '-' && s[aft + 1] == '%' && s[aft + 2] == '}') { stop = skip_ws(s, n, aft + 3); }
                        else if (aft + 2 <= n && s[aft] == '%' && s[aft + 1] == '}') {
                            stop = aft + 2;
                            if (stop < n && s[stop] == '\n') stop++;
                        }
                        if (stop) { body_end = q; break; }
                    }
                    q++;
                }
                if (!stop) return lex_fail(L, t, "Missing end of raw directive");
                if (emit_data(L, end, body_end, es, true, line_starting)) return -1;
                line_starting = s[stop - 1] == '\n';
                pos = stop;
                continue;
            }
        }
        if (emit_data(L, pos, t, sign, kind != '{', line_starting)) return -1;
        size_t body = t + 2 + (sign ? 1 : 0);
        if (kind == '#') {
            size_t q = body;
            const char *f = NULL;
            while (q + 1 < n) {
                f = memchr(s + q, '#', n - q - 1);
                if (!f) break;
                q = (size_t)(f - s);
                if (s[q + 1] == '}') break;
                q++;
                f = NULL;
            }
            if (!f) return lex_fail(L, t, "Missing end of comment tag");
            size_t stop = q + 2;
            char cs = q > body ? s[q - 1] : 0;
            if (cs == '-') stop = skip_ws(s, n, stop);
            else if (cs != '+' && stop < n && s[stop] == '\n') stop++;
            line_starting = s[stop - 1] == '\n';
            pos = stop;
            continue;
        }
        if (!push(L, kind == '{' ? T_VAR_BEGIN : T_BLOCK_BEGIN, t, body - t)) return -1;
        size_t i = body;
        bool nl = false;
        int rc = lex_tag(L, &i, kind == '%', &nl);
        if (rc < 0) return -1;
        if (rc == 1) { pos = n; break; }
        line_starting = nl;
        pos = i;
    }
    if (!push(L, T_EOF, n, 0)) return -1;
    return 0;
}
