/* jinja_methods.c — the Python methods templates call, and the global functions.
 *
 * Chat templates are written by people who think in Python: `message.content.split('</think>')
 * [-1].lstrip('\n')`, `d.items()`, `'%s' % x`, `ns = namespace(found=false)`. jinja2 just
 * exposes the real Python objects; here each method is re-implemented with CPython's rules
 * (split() on runs of Unicode whitespace, strip(chars) on a character set, find() counting
 * code points, ...). Like transformers' ImmutableSandboxedEnvironment, methods that mutate
 * a list or dict (append, pop, update, ...) are refused with SecurityError unless the
 * caller asked for allow_mutation.
 *
 * Case mapping uses utf8proc's simple (one-to-one) mappings; Python uses the full ones, so
 * 'ß'.upper() gives 'ß' here and 'SS' in Python. Chat templates apply upper/lower to role
 * names and ASCII keywords, where the two agree.
 */
#include "chat/jinja_int.h"
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

/* ---------------------------------------------------------------- argument helpers */

bool ja_arg(const jargs *a, int i, const char *name, jv *out) {
    if (i >= 0 && i < a->np) { *out = a->pos[i]; return true; }
    if (name)
        for (int k = 0; k < a->nk; k++)
            if (a->kn[k].n == strlen(name) && !memcmp(a->kn[k].p, name, a->kn[k].n)) { *out = a->kv[k]; return true; }
    return false;
}

int ja_check(jr *r, const jargs *a, int maxpos, const char *const *names, const char *fname) {
    if (a->np > maxpos)
        return jr_fail(r, "TypeError", "%s() takes at most %d argument%s (%d given)", fname, maxpos,
                       maxpos == 1 ? "" : "s", a->np);
    for (int k = 0; k < a->nk; k++) {
        bool ok = false;
        for (int i = 0; names && names[i]; i++)
            if (a->kn[k].n == strlen(names[i]) && !memcmp(a->kn[k].p, names[i], a->kn[k].n)) {
                if (i < a->np)
                    return jr_fail(r, "TypeError", "%s() got multiple values for argument '%s'", fname, names[i]);
                ok = true;
            }
        if (!ok)
            return jr_fail(r, "TypeError", "%s() got an unexpected keyword argument '%.*s'", fname, (int)a->kn[k].n,
                           a->kn[k].p);
    }
    return 0;
}

static int need_str(jr *r, jv v, const char *what) {
    if (v.k == JV_STR) return 0;
    if (v.k == JV_UNDEF) return jr_undef_error(r, v);
    return jr_fail(r, "TypeError", "%s must be str, not %s", what, jv_type_name(v));
}

static int need_int(jr *r, jv v, const char *what, int64_t *out) {
    if (jv_is_intlike(v)) { *out = jv_intval(v); return 0; }
    if (v.k == JV_UNDEF) return jr_undef_error(r, v);
    return jr_fail(r, "TypeError", "%s: '%s' object cannot be interpreted as an integer", what, jv_type_name(v));
}

/* ---------------------------------------------------------------- string helpers */

/* Membership of the code point at p in a strip() character set (NULL = whitespace). */
static size_t strip_at(const char *p, size_t n, const jstr *chars) {
    uint32_t cp;
    size_t k = u8_decode(p, n, &cp);
    if (!chars) return py_isspace(cp) ? k : 0;
    for (size_t i = 0; i < chars->n;) {
        uint32_t c2;
        size_t k2 = u8_decode(chars->p + i, chars->n - i, &c2);
        if (c2 == cp && k2 == k && !memcmp(chars->p + i, p, k)) return k;
        i += k2;
    }
    return 0;
}

int js_strip(jr *r, jv s, jv chars, int mode, jv *out) {
    const jstr *cs = NULL;
    if (chars.k == JV_STR) cs = chars.u.s;
    else if (chars.k != JV_NONE && chars.k != JV_UNDEF)
        return jr_fail(r, "TypeError", "strip arg must be None or str");
    const char *p = s.u.s->p;
    size_t b = 0, e = s.u.s->n, k;
    if (mode & 1)
        while (b < e && (k = strip_at(p + b, e - b, cs))) b += k;
    if (mode & 2)
        while (e > b) {
            size_t st = e - 1;
            while (st > b && ((unsigned char)p[st] & 0xC0) == 0x80) st--;
            if (!strip_at(p + st, e - st, cs)) break;
            e = st;
        }
    return jv_str(r, p + b, e - b, out);
}

static bool is_cased_cat(int cat) {
    return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}

/* mode: 0 lower, 1 upper, 2 Python title(), 3 capitalize(), 4 swapcase() */
int js_case(jr *r, jv s, int mode, jv *out) {
    const char *p = s.u.s->p;
    size_t n = s.u.s->n;
    char *buf = ja_alloc(&r->a, n * 2 + 8);  /* simple mappings change length by at most a factor ~1.5 */
    if (!buf) return jr_oom(r);
    size_t o = 0;
    bool prev_cased = false, first = true;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = u8_decode(p + i, n - i, &cp);
        uint32_t m = cp;
        switch (mode) {
        case 0: m = (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp); break;
        case 1: m = (uint32_t)utf8proc_toupper((utf8proc_int32_t)cp); break;
        case 2:
            m = prev_cased ? (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp) : (uint32_t)utf8proc_totitle((utf8proc_int32_t)cp);
            prev_cased = is_cased_cat(utf8proc_category((utf8proc_int32_t)cp));
            break;
        case 3:
            m = first ? (uint32_t)utf8proc_totitle((utf8proc_int32_t)cp) : (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp);
            break;
        case 4: {
            int cat = utf8proc_category((utf8proc_int32_t)cp);
            m = cat == UTF8PROC_CATEGORY_LU ? (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp)
              : cat == UTF8PROC_CATEGORY_LL ? (uint32_t)utf8proc_toupper((utf8proc_int32_t)cp) : cp;
            break;
        }
        }
        first = false;
        if (cp < 0x80 && m < 0x80) buf[o++] = (char)m;
        else if (m == cp) { memcpy(buf + o, p + i, k); o += k; }
        else o += u8_encode(m, buf + o);
        i += k;
    }
    return jv_str(r, buf, o, out);
}

int js_replace(jr *r, jv s, jv old, jv nw, int64_t count, jv *out) {
    const char *p = s.u.s->p;
    size_t n = s.u.s->n, on = old.u.s->n, nn = nw.u.s->n;
    jbuf b;
    jb_init(&b, r->lim.max_memory);
    if (on == 0) {
        /* "" matches between every code point and at both ends */
        int64_t done = 0;
        for (size_t i = 0;; ) {
            if (count < 0 || done < count) { if (jb_put(r, &b, nw.u.s->p, nn)) return -1; done++; }
            if (i >= n) break;
            uint32_t cp;
            size_t k = u8_decode(p + i, n - i, &cp);
            if (jb_put(r, &b, p + i, k)) return -1;
            i += k;
        }
        return jb_to_str(r, &b, out);
    }
    size_t i = 0;
    int64_t done = 0;
    while (i < n) {
        const char *f = (count < 0 || done < count) ? memmem(p + i, n - i, old.u.s->p, on) : NULL;
        if (!f) break;
        size_t at = (size_t)(f - p);
        if (jb_put(r, &b, p + i, at - i) || jb_put(r, &b, nw.u.s->p, nn)) return -1;
        i = at + on;
        done++;
    }
    if (done == 0) { *out = s; return 0; }
    if (jb_put(r, &b, p + i, n - i)) return -1;
    return jb_to_str(r, &b, out);
}

static int push_str(jr *r, jlist *l, const char *p, size_t n) {
    jv v;
    if (jv_str(r, p, n, &v)) return -1;
    return jl_push(r, l, v);
}

/* str.split / str.rsplit */
int js_split(jr *r, jv s, jv sep, int64_t maxsplit, bool right, jv *out) {
    const char *p = s.u.s->p;
    size_t n = s.u.s->n;
    jlist *l = jl_new(r, 4);
    if (!l) return -1;
    if (sep.k == JV_NONE || sep.k == JV_UNDEF) {
        /* runs of whitespace; leading/trailing whitespace ignored */
        if (!right) {
            size_t i = 0;
            int64_t splits = 0;
            for (;;) {
                size_t k;
                while (i < n && (k = strip_at(p + i, n - i, NULL))) i += k;
                if (i >= n) break;
                if (maxsplit >= 0 && splits >= maxsplit) {
                    size_t e = n;
                    while (e > i) {
                        size_t st = e - 1;
                        while (st > i && ((unsigned char)p[st] & 0xC0) == 0x80) st--;
                        if (!strip_at(p + st, e - st, NULL)) break;
                        e = st;
                    }
                    if (push_str(r, l, p + i, e - i)) return -1;
                    break;
                }
                size_t st = i;
                while (i < n && !strip_at(p + i, n - i, NULL)) { uint32_t cp; i += u8_decode(p + i, n - i, &cp); }
                if (push_str(r, l, p + st, i - st)) return -1;
                splits++;
            }
        } else {
            /* collect words left to right, then merge the head for maxsplit */
            jv all;
            if (js_split(r, s, jv_none(), -1, false, &all)) return -1;
            jlist *w = all.u.l;
            if (maxsplit < 0 || (size_t)maxsplit >= w->n) { *out = all; return 0; }
            size_t keep = (size_t)maxsplit;
            /* head: from the start of the first word to the end of word (n - keep - 1) */
            const char *hs = w->v[0].u.s->p, *he = w->v[w->n - keep - 1].u.s->p + w->v[w->n - keep - 1].u.s->n;
            if (push_str(r, l, hs, (size_t)(he - hs))) return -1;
            for (size_t i = w->n - keep; i < w->n; i++)
                if (jl_push(r, l, w->v[i])) return -1;
        }
    } else {
        if (sep.k != JV_STR) return jr_fail(r, "TypeError", "must be str or None, not %s", jv_type_name(sep));
        size_t sn = sep.u.s->n;
        if (sn == 0) return jr_fail(r, "ValueError", "empty separator");
        if (!right) {
            size_t i = 0;
            int64_t splits = 0;
            for (;;) {
                const char *f = (maxsplit < 0 || splits < maxsplit) ? memmem(p + i, n - i, sep.u.s->p, sn) : NULL;
                if (!f) { if (push_str(r, l, p + i, n - i)) return -1; break; }
                if (push_str(r, l, p + i, (size_t)(f - p) - i)) return -1;
                i = (size_t)(f - p) + sn;
                splits++;
            }
        } else {
            /* from the right: find matches backwards */
            size_t end = n;
            int64_t splits = 0;
            jlist *rev = jl_new(r, 4);
            if (!rev) return -1;
            for (;;) {
                const char *f = NULL;
                if ((maxsplit < 0 || splits < maxsplit) && end >= sn)
                    for (size_t k = end - sn + 1; k-- > 0;)
                        if (!memcmp(p + k, sep.u.s->p, sn)) { f = p + k; break; }
                if (!f) { if (push_str(r, rev, p, end)) return -1; break; }
                size_t at = (size_t)(f - p);
                if (push_str(r, rev, p + at + sn, end - at - sn)) return -1;
                end = at;
                splits++;
            }
            for (size_t i = rev->n; i-- > 0;)
                if (jl_push(r, l, rev->v[i])) return -1;
        }
    }
    out->k = JV_LIST;
    out->flag = 0;
    out->u.l = l;
    return 0;
}

/* ---------------------------------------------------------------- printf-style % */

static int fmt_one(jr *r, jbuf *b, char conv, const char *flags, int width, int prec, jv v) {
    char spec[32], tmp[512];
    jbuf sb;
    if (conv == 's' || conv == 'r' || conv == 'a') {
        jb_init(&sb, r->lim.max_output);
        if (conv == 's' ? jv_write_str(r, &sb, v) : jv_write_repr(r, &sb, v)) return -1;
        const char *p = sb.p ? sb.p : "";
        size_t n = sb.n, cps = u8_len(p, n);
        if (prec >= 0 && (size_t)prec < cps) { n = u8_offset(p, n, (size_t)prec); cps = (size_t)prec; }
        bool left = strchr(flags, '-') != NULL;
        size_t pad = width > 0 && (size_t)width > cps ? (size_t)width - cps : 0;
        for (size_t i = 0; !left && i < pad; i++) if (jb_putc(r, b, ' ')) return -1;
        if (jb_put(r, b, p, n)) return -1;
        for (size_t i = 0; left && i < pad; i++) if (jb_putc(r, b, ' ')) return -1;
        return 0;
    }
    if (v.k == JV_UNDEF) return jr_undef_error(r, v);
    if (!jv_is_num(v))
        return jr_fail(r, "TypeError", "%%%c format: a real number is required, not %s", conv, jv_type_name(v));
    if (width > 200) width = 200;
    if (prec > 100) prec = 100;
    if (conv == 'd' || conv == 'i' || conv == 'u' || conv == 'x' || conv == 'X' || conv == 'o') {
        int64_t x = jv_is_intlike(v) ? jv_intval(v) : (int64_t)jv_num(v);
        char c = conv == 'i' || conv == 'u' ? 'd' : conv;
        if (c == 'd') snprintf(spec, sizeof spec, "%%%s*lld", flags);
        else snprintf(spec, sizeof spec, "%%%s*ll%c", flags, c);
        if (c != 'd' && x < 0) {
            snprintf(spec, sizeof spec, "-%%%s*ll%c", flags, c);
            snprintf(tmp, sizeof tmp, spec, width > 0 ? width - 1 : 0, (unsigned long long)(-x));
        } else
            snprintf(tmp, sizeof tmp, spec, width, (long long)x);
        return jb_puts(r, b, tmp);
    }
    if (conv && strchr("eEfFgG", conv)) { /* conv 0: strchr would find the terminator */
        double f = jv_num(v);
        snprintf(spec, sizeof spec, "%%%s*.*%c", flags, conv);
        snprintf(tmp, sizeof tmp, spec, width, prec < 0 ? 6 : prec, f);
        return jb_puts(r, b, tmp);
    }
    if (conv > 32 && conv < 127) return jr_fail(r, "ValueError", "unsupported format character '%c' (0x%x)", conv, conv);
    return jr_fail(r, "ValueError", "unsupported format character (0x%x)", (unsigned char)conv);
}

int jm_percent_format(jr *r, jv fmt, jv args, jv *out) {
    const char *p = fmt.u.s->p;
    size_t n = fmt.u.s->n, ai = 0;
    jbuf b;
    jb_init(&b, r->lim.max_output);
    const jlist *tup = args.k == JV_TUPLE ? args.u.l : NULL;
    bool used_single = false;
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '%') { if (jb_putc(r, &b, p[i])) return -1; continue; }
        if (++i >= n) return jr_fail(r, "ValueError", "incomplete format");
        if (p[i] == '%') { if (jb_putc(r, &b, '%')) return -1; continue; }
        jv v;
        bool have = false;
        if (p[i] == '(') {
            size_t e = i + 1;
            while (e < n && p[e] != ')') e++;
            if (e >= n) return jr_fail(r, "ValueError", "incomplete format key");
            if (args.k != JV_DICT) return jr_fail(r, "TypeError", "format requires a mapping");
            if (!jd_get_s(args.u.d, p + i + 1, e - i - 1, &v))
                return jr_fail(r, "KeyError", "'%.*s'", (int)(e - i - 1), p + i + 1);
            have = true;
            i = e + 1;
        }
        char flags[8] = "";
        int nf = 0;
        while (i < n && p[i] && strchr("-+ #0", p[i]) && nf < 6) flags[nf++] = p[i++];
        flags[nf] = 0;
        int width = 0, prec = -1;
        /* digits saturate at 10^7 rather than overflow; widths that large fail on output size */
        while (i < n && p[i] >= '0' && p[i] <= '9') { width = width < 10000000 ? width * 10 + (p[i] - '0') : width; i++; }
        if (i < n && p[i] == '.') {
            i++;
            prec = 0;
            while (i < n && p[i] >= '0' && p[i] <= '9') { prec = prec < 10000000 ? prec * 10 + (p[i] - '0') : prec; i++; }
        }
        if (i >= n) return jr_fail(r, "ValueError", "incomplete format");
        if (!have) {
            if (tup) {
                if (ai >= tup->n) return jr_fail(r, "TypeError", "not enough arguments for format string");
                v = tup->v[ai++];
            } else {
                if (used_single) return jr_fail(r, "TypeError", "not enough arguments for format string");
                v = args;
                used_single = true;
            }
        }
        if (fmt_one(r, &b, p[i], flags, width, prec, v)) return -1;
    }
    if (tup && ai < tup->n) return jr_fail(r, "TypeError", "not all arguments converted during string formatting");
    if (!tup && !used_single && args.k != JV_DICT)
        return jr_fail(r, "TypeError", "not all arguments converted during string formatting");
    return jb_to_str(r, &b, out);
}

/* ---------------------------------------------------------------- str methods */

static int m_strip_any(jr *r, jv self, const jargs *a, jv *out, int mode, const char *name) {
    static const char *const names[] = {"chars", NULL};
    if (ja_check(r, a, 1, names, name)) return -1;
    jv chars = jv_none();
    ja_arg(a, 0, "chars", &chars);
    return js_strip(r, self, chars, mode, out);
}
static int m_strip(jr *r, jv self, const jargs *a, jv *out) { return m_strip_any(r, self, a, out, 3, "strip"); }
static int m_lstrip(jr *r, jv self, const jargs *a, jv *out) { return m_strip_any(r, self, a, out, 1, "lstrip"); }
static int m_rstrip(jr *r, jv self, const jargs *a, jv *out) { return m_strip_any(r, self, a, out, 2, "rstrip"); }

static int m_split_any(jr *r, jv self, const jargs *a, jv *out, bool right) {
    static const char *const names[] = {"sep", "maxsplit", NULL};
    if (ja_check(r, a, 2, names, right ? "rsplit" : "split")) return -1;
    jv sep = jv_none(), ms;
    int64_t maxsplit = -1;
    ja_arg(a, 0, "sep", &sep);
    if (ja_arg(a, 1, "maxsplit", &ms) && need_int(r, ms, "maxsplit", &maxsplit)) return -1;
    return js_split(r, self, sep, maxsplit, right, out);
}
static int m_split(jr *r, jv self, const jargs *a, jv *out) { return m_split_any(r, self, a, out, false); }
static int m_rsplit(jr *r, jv self, const jargs *a, jv *out) { return m_split_any(r, self, a, out, true); }

static int m_affix(jr *r, jv self, const jargs *a, jv *out, bool end) {
    const char *fname = end ? "endswith" : "startswith";
    if (a->np < 1 || a->np > 3 || a->nk) return jr_fail(r, "TypeError", "%s() takes from 1 to 3 positional arguments", fname);
    const char *p = self.u.s->p;
    size_t n = self.u.s->n;
    if (a->np >= 2) {
        int64_t st, en = (int64_t)u8_len(p, n);
        if (a->pos[1].k != JV_NONE && need_int(r, a->pos[1], fname, &st)) return -1;
        if (a->pos[1].k == JV_NONE) st = 0;
        if (a->np == 3 && a->pos[2].k != JV_NONE && need_int(r, a->pos[2], fname, &en)) return -1;
        int64_t len = (int64_t)u8_len(p, n);
        if (st < 0) st = st + len < 0 ? 0 : st + len;
        if (en < 0) en = en + len < 0 ? 0 : en + len;
        if (st > len) { *out = jv_bool(0); return 0; }
        if (en > len) en = len;
        if (en < st) en = st;
        size_t bs = u8_offset(p, n, (size_t)st), be = u8_offset(p, n, (size_t)en);
        p += bs;
        n = be - bs;
    }
    jv pre = a->pos[0];
    const jv *cands = &pre;
    size_t nc = 1;
    if (pre.k == JV_TUPLE) { cands = pre.u.l->v; nc = pre.u.l->n; }
    for (size_t i = 0; i < nc; i++) {
        if (cands[i].k != JV_STR)
            return jr_fail(r, "TypeError", "%s first arg must be str or a tuple of str, not %s", fname, jv_type_name(cands[i]));
        size_t k = cands[i].u.s->n;
        if (k <= n && !memcmp(end ? p + n - k : p, cands[i].u.s->p, k)) { *out = jv_bool(1); return 0; }
    }
    *out = jv_bool(0);
    return 0;
}
static int m_startswith(jr *r, jv self, const jargs *a, jv *out) { return m_affix(r, self, a, out, false); }
static int m_endswith(jr *r, jv self, const jargs *a, jv *out) { return m_affix(r, self, a, out, true); }

static int m_noargs(jr *r, const jargs *a, const char *name) {
    if (a->np || a->nk) return jr_fail(r, "TypeError", "%s() takes no arguments", name);
    return 0;
}
static int m_upper(jr *r, jv self, const jargs *a, jv *out) { return m_noargs(r, a, "upper") ? -1 : js_case(r, self, 1, out); }
static int m_lower(jr *r, jv self, const jargs *a, jv *out) { return m_noargs(r, a, "lower") ? -1 : js_case(r, self, 0, out); }
static int m_title(jr *r, jv self, const jargs *a, jv *out) { return m_noargs(r, a, "title") ? -1 : js_case(r, self, 2, out); }
static int m_capitalize(jr *r, jv self, const jargs *a, jv *out) { return m_noargs(r, a, "capitalize") ? -1 : js_case(r, self, 3, out); }
static int m_swapcase(jr *r, jv self, const jargs *a, jv *out) { return m_noargs(r, a, "swapcase") ? -1 : js_case(r, self, 4, out); }

static int m_replace(jr *r, jv self, const jargs *a, jv *out) {
    static const char *const names[] = {"old", "new", "count", NULL};
    if (ja_check(r, a, 3, names, "replace")) return -1;
    jv old, nw, c;
    int64_t count = -1;
    if (!ja_arg(a, 0, "old", &old) || !ja_arg(a, 1, "new", &nw))
        return jr_fail(r, "TypeError", "replace() expected at least 2 arguments");
    if (need_str(r, old, "replace() argument 1") || need_str(r, nw, "replace() argument 2")) return -1;
    if (ja_arg(a, 2, "count", &c) && need_int(r, c, "replace", &count)) return -1;
    return js_replace(r, self, old, nw, count, out);
}

/* find / rfind / index / rindex / count: code point results */
static int m_search(jr *r, jv self, const jargs *a, jv *out, int mode, const char *name) {
    if (a->np < 1 || a->np > 3 || a->nk) return jr_fail(r, "TypeError", "%s() takes from 1 to 3 positional arguments", name);
    if (need_str(r, a->pos[0], "substring")) return -1;
    const char *p = self.u.s->p, *q = a->pos[0].u.s->p;
    size_t n = self.u.s->n, qn = a->pos[0].u.s->n, len = u8_len(p, n);
    int64_t st = 0, en = (int64_t)len;
    if (a->np >= 2 && a->pos[1].k != JV_NONE && need_int(r, a->pos[1], name, &st)) return -1;
    if (a->np >= 3 && a->pos[2].k != JV_NONE && need_int(r, a->pos[2], name, &en)) return -1;
    if (st < 0) st = st + (int64_t)len < 0 ? 0 : st + (int64_t)len;
    if (en < 0) en = en + (int64_t)len < 0 ? 0 : en + (int64_t)len;
    if (en > (int64_t)len) en = (int64_t)len;
    int64_t found = -1, count = 0;
    if (st <= en) {
        size_t bs = u8_offset(p, n, (size_t)st), be = u8_offset(p, n, (size_t)en);
        if (mode == 4) {
            if (qn == 0) count = en - st + 1;
            else
                for (size_t i = bs; i + qn <= be;) {
                    const char *f = memmem(p + i, be - i, q, qn);
                    if (!f) break;
                    count++;
                    i = (size_t)(f - p) + qn;
                }
            *out = jv_int(count);
            return 0;
        }
        if (mode == 0 || mode == 2) {
            const char *f = qn ? memmem(p + bs, be - bs, q, qn) : p + bs;
            if (f) found = (int64_t)u8_len(p, (size_t)(f - p));
        } else {
            for (size_t k = be >= qn ? be - qn + 1 : 0; k-- > bs;)
                if (!memcmp(p + k, q, qn)) { found = (int64_t)u8_len(p, k); break; }
            if (qn == 0) found = en;
        }
    } else if (mode == 4) { *out = jv_int(0); return 0; }
    if (found < 0 && (mode == 2 || mode == 3)) return jr_fail(r, "ValueError", "substring not found");
    *out = jv_int(found);
    return 0;
}
static int m_find(jr *r, jv s, const jargs *a, jv *o) { return m_search(r, s, a, o, 0, "find"); }
static int m_rfind(jr *r, jv s, const jargs *a, jv *o) { return m_search(r, s, a, o, 1, "rfind"); }
static int m_sindex(jr *r, jv s, const jargs *a, jv *o) { return m_search(r, s, a, o, 2, "index"); }
static int m_rindex(jr *r, jv s, const jargs *a, jv *o) { return m_search(r, s, a, o, 3, "rindex"); }
static int m_scount(jr *r, jv s, const jargs *a, jv *o) { return m_search(r, s, a, o, 4, "count"); }

static int m_join(jr *r, jv self, const jargs *a, jv *out) {
    if (a->np != 1 || a->nk) return jr_fail(r, "TypeError", "join() takes exactly one argument");
    jlist *items;
    if (jr_iterate(r, a->pos[0], &items)) return -1;
    jbuf b;
    jb_init(&b, r->lim.max_output);
    for (size_t i = 0; i < items->n; i++) {
        if (items->v[i].k != JV_STR)
            return jr_fail(r, "TypeError", "sequence item %zu: expected str instance, %s found", i, jv_type_name(items->v[i]));
        if (i && jb_put(r, &b, self.u.s->p, self.u.s->n)) return -1;
        if (jb_put(r, &b, items->v[i].u.s->p, items->v[i].u.s->n)) return -1;
    }
    return jb_to_str(r, &b, out);
}

static int m_is(jr *r, jv self, const jargs *a, jv *out, int kind, const char *name) {
    if (m_noargs(r, a, name)) return -1;
    const char *p = self.u.s->p;
    size_t n = self.u.s->n;
    bool any = false, ok = n > 0, has_cased = false, all_cased_ok = true;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += u8_decode(p + i, n - i, &cp);
        int cat = utf8proc_category((utf8proc_int32_t)cp);
        bool alpha = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
        bool digit = cat == UTF8PROC_CATEGORY_ND;
        bool numeric = cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
        switch (kind) {
        case 0: ok = ok && digit; break;
        case 1: ok = ok && alpha; break;
        case 2: ok = ok && (alpha || numeric); break;
        case 3: ok = ok && py_isspace(cp); break;
        case 4: /* isupper */
            if (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LT) has_cased = true;
            if (cat == UTF8PROC_CATEGORY_LL) all_cased_ok = false;
            break;
        case 5: /* islower */
            if (cat == UTF8PROC_CATEGORY_LL) has_cased = true;
            if (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LT) all_cased_ok = false;
            break;
        case 6: ok = ok && numeric; break;
        }
        any = true;
    }
    (void)any;
    if (kind == 4 || kind == 5) ok = has_cased && all_cased_ok;
    *out = jv_bool(ok);
    return 0;
}
static int m_isdigit(jr *r, jv s, const jargs *a, jv *o) { return m_is(r, s, a, o, 0, "isdigit"); }
static int m_isalpha(jr *r, jv s, const jargs *a, jv *o) { return m_is(r, s, a, o, 1, "isalpha"); }
static int m_isalnum(jr *r, jv s, const jargs *a, jv *o) { return m_is(r, s, a, o, 2, "isalnum"); }
static int m_isspace(jr *r, jv s, const jargs *a, jv *o) { return m_is(r, s, a, o, 3, "isspace"); }
static int m_isupper(jr *r, jv s, const jargs *a, jv *o) { return m_is(r, s, a, o, 4, "isupper"); }
static int m_islower(jr *r, jv s, const jargs *a, jv *o) { return m_is(r, s, a, o, 5, "islower"); }
static int m_isnumeric(jr *r, jv s, const jargs *a, jv *o) { return m_is(r, s, a, o, 6, "isnumeric"); }

/* Python's str.splitlines() line boundaries. */
static size_t line_break_at(const char *p, size_t n) {
    unsigned char c = (unsigned char)p[0];
    if (c == '\r') return (n > 1 && p[1] == '\n') ? 2 : 1;
    if (c == '\n' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e)) return 1;
    if (c >= 0x80) {
        uint32_t cp;
        size_t k = u8_decode(p, n, &cp);
        if (cp == 0x85 || cp == 0x2028 || cp == 0x2029) return k;
    }
    return 0;
}

int js_splitlines(jr *r, jv s, bool keepends, jlist **out) {
    const char *p = s.u.s->p;
    size_t n = s.u.s->n, st = 0;
    jlist *l = jl_new(r, 4);
    if (!l) return -1;
    for (size_t i = 0; i < n;) {
        size_t k = line_break_at(p + i, n - i);
        if (!k) { uint32_t cp; i += u8_decode(p + i, n - i, &cp); continue; }
        if (push_str(r, l, p + st, (keepends ? i + k : i) - st)) return -1;
        i += k;
        st = i;
    }
    if (st < n && push_str(r, l, p + st, n - st)) return -1;
    *out = l;
    return 0;
}

static int m_splitlines(jr *r, jv self, const jargs *a, jv *out) {
    static const char *const names[] = {"keepends", NULL};
    if (ja_check(r, a, 1, names, "splitlines")) return -1;
    jv ke = jv_bool(0);
    ja_arg(a, 0, "keepends", &ke);
    jlist *l;
    if (js_splitlines(r, self, jv_truthy(ke), &l)) return -1;
    out->k = JV_LIST;
    out->flag = 0;
    out->u.l = l;
    return 0;
}

/* ljust / rjust / center / zfill */
int js_pad(jr *r, jv s, int64_t width, const char *fill, size_t filln, int mode, jv *out) {
    size_t len = u8_len(s.u.s->p, s.u.s->n);
    if (width <= (int64_t)len) { *out = s; return 0; }
    if ((uint64_t)width > r->lim.max_output) return jr_fail(r, "LimitError", "padding width %" PRId64 " too large", width);
    size_t marg = (size_t)width - len, left;
    if (mode == 0) left = 0;
    else if (mode == 1) left = marg;
    else left = marg / 2 + (marg & (size_t)width & 1);
    jbuf b;
    jb_init(&b, r->lim.max_output);
    for (size_t i = 0; i < left; i++) if (jb_put(r, &b, fill, filln)) return -1;
    if (jb_put(r, &b, s.u.s->p, s.u.s->n)) return -1;
    for (size_t i = 0; i < marg - left; i++) if (jb_put(r, &b, fill, filln)) return -1;
    return jb_to_str(r, &b, out);
}

static int m_just(jr *r, jv self, const jargs *a, jv *out, int mode, const char *name) {
    if (a->np < 1 || a->np > 2 || a->nk) return jr_fail(r, "TypeError", "%s() takes 1 or 2 arguments", name);
    int64_t w;
    if (need_int(r, a->pos[0], name, &w)) return -1;
    const char *fill = " ";
    size_t fn = 1;
    if (a->np == 2) {
        if (a->pos[1].k != JV_STR || u8_len(a->pos[1].u.s->p, a->pos[1].u.s->n) != 1)
            return jr_fail(r, "TypeError", "The fill character must be exactly one character long");
        fill = a->pos[1].u.s->p;
        fn = a->pos[1].u.s->n;
    }
    return js_pad(r, self, w, fill, fn, mode, out);
}
static int m_ljust(jr *r, jv s, const jargs *a, jv *o) { return m_just(r, s, a, o, 0, "ljust"); }
static int m_rjust(jr *r, jv s, const jargs *a, jv *o) { return m_just(r, s, a, o, 1, "rjust"); }
static int m_center(jr *r, jv s, const jargs *a, jv *o) { return m_just(r, s, a, o, 2, "center"); }

static int m_zfill(jr *r, jv self, const jargs *a, jv *out) {
    if (a->np != 1 || a->nk) return jr_fail(r, "TypeError", "zfill() takes exactly one argument");
    int64_t w;
    if (need_int(r, a->pos[0], "zfill", &w)) return -1;
    const char *p = self.u.s->p;
    size_t n = self.u.s->n, len = u8_len(p, n);
    if (w <= (int64_t)len) { *out = self; return 0; }
    if ((uint64_t)w > r->lim.max_output) return jr_fail(r, "LimitError", "zfill width too large");
    jbuf b;
    jb_init(&b, r->lim.max_output);
    size_t start = 0;
    if (n && (p[0] == '+' || p[0] == '-')) { if (jb_putc(r, &b, p[0])) return -1; start = 1; }
    for (int64_t i = 0; i < w - (int64_t)len; i++) if (jb_putc(r, &b, '0')) return -1;
    if (jb_put(r, &b, p + start, n - start)) return -1;
    return jb_to_str(r, &b, out);
}

static bool all_digits(const char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i] < '0' || p[i] > '9') return false;
    return n > 0;
}

/* str.format: {} {0} {name} {name.attr} {name[key]} with optional !r/!s and a simple spec
 * ([[fill]align][width][.precision][type]). */
static int m_format(jr *r, jv self, const jargs *a, jv *out) {
    const char *p = self.u.s->p;
    size_t n = self.u.s->n;
    jbuf b;
    jb_init(&b, r->lim.max_output);
    int auto_idx = 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '}' ) {
            if (i + 1 < n && p[i + 1] == '}') { if (jb_putc(r, &b, '}')) return -1; i++; continue; }
            return jr_fail(r, "ValueError", "Single '}' encountered in format string");
        }
        if (c != '{') { if (jb_putc(r, &b, c)) return -1; continue; }
        if (i + 1 < n && p[i + 1] == '{') { if (jb_putc(r, &b, '{')) return -1; i++; continue; }
        size_t e = i + 1;
        while (e < n && p[e] != '}') e++;
        if (e >= n) return jr_fail(r, "ValueError", "expected '}' before end of string");
        const char *f = p + i + 1;
        size_t fl = e - i - 1, nl = 0;
        while (nl < fl && f[nl] != '.' && f[nl] != '[' && f[nl] != '!' && f[nl] != ':') nl++;
        jv v;
        if (nl == 0) {
            if (auto_idx >= a->np) return jr_fail(r, "IndexError", "Replacement index %d out of range for positional args tuple", auto_idx);
            v = a->pos[auto_idx++];
        } else if (all_digits(f, nl)) {
            /* an all-digit field name is a positional index; anything else is a keyword */
            size_t idx = 0;
            for (size_t q = 0; q < nl; q++) idx = idx < 100000000 ? idx * 10 + (size_t)(f[q] - '0') : idx;
            if (idx >= (size_t)a->np)
                return jr_fail(r, "IndexError", "Replacement index %zu out of range for positional args tuple", idx);
            v = a->pos[idx];
        } else {
            bool got = false;
            for (int k = 0; k < a->nk; k++)
                if (a->kn[k].n == nl && !memcmp(a->kn[k].p, f, nl)) { v = a->kv[k]; got = true; }
            if (!got) return jr_fail(r, "KeyError", "'%.*s'", (int)nl, f);
        }
        size_t q = nl;
        while (q < fl && (f[q] == '.' || f[q] == '[')) {
            if (f[q] == '.') {
                size_t s = ++q;
                while (q < fl && f[q] != '.' && f[q] != '[' && f[q] != '!' && f[q] != ':') q++;
                if (jr_getattr(r, v, f + s, q - s, &v)) return -1;
            } else {
                size_t s = ++q;
                while (q < fl && f[q] != ']') q++;
                jv key;
                bool digits = s < q;
                int64_t kv = 0;
                for (size_t d = s; d < q; d++) {
                    if (f[d] < '0' || f[d] > '9') { digits = false; break; }
                    kv = kv < 100000000000000LL ? kv * 10 + (f[d] - '0') : kv;
                }
                if (digits) key = jv_int(kv);
                else if (jv_str(r, f + s, q - s, &key)) return -1;
                if (jr_getitem(r, v, key, &v)) return -1;
                q++;
            }
        }
        char conv = 's';
        if (q < fl && f[q] == '!') { conv = q + 1 < fl ? f[q + 1] : 's'; q += 2; }
        const char *spec = q < fl && f[q] == ':' ? f + q + 1 : NULL;
        size_t sl = spec ? (size_t)(f + fl - spec) : 0;
        jbuf vb;
        jb_init(&vb, r->lim.max_output);
        char align = 0, fill = ' ', type = 0;
        int width = 0, prec = -1;
        if (spec) {
            size_t k = 0;
            if (sl >= 2 && spec[1] && strchr("<>^", spec[1])) { fill = spec[0]; align = spec[1]; k = 2; }
            else if (sl >= 1 && spec[0] && strchr("<>^", spec[0])) { align = spec[0]; k = 1; }
            if (k < sl && spec[k] == '0') { fill = '0'; if (!align) align = '='; k++; }
            while (k < sl && spec[k] >= '0' && spec[k] <= '9') { width = width < 10000000 ? width * 10 + (spec[k] - '0') : width; k++; }
            if (k < sl && spec[k] == '.') {
                k++;
                prec = 0;
                while (k < sl && spec[k] >= '0' && spec[k] <= '9') { prec = prec < 10000000 ? prec * 10 + (spec[k] - '0') : prec; k++; }
            }
            if (k < sl) type = spec[k];
        }
        if (type && strchr("dfFeEgGxXo%", type) && jv_is_num(v)) {
            if (fmt_one(r, &vb, type == '%' ? 'f' : type, "", 0, prec, v)) return -1;
            if (!align) align = '>';
        } else if (conv == 'r') {
            if (jv_write_repr(r, &vb, v)) return -1;
        } else {
            if (jv_write_str(r, &vb, v)) return -1;
            if (prec >= 0 && vb.n) vb.n = u8_offset(vb.p, vb.n, (size_t)prec);
            if (!align) align = jv_is_num(v) ? '>' : '<';
        }
        jv sv;
        if (jv_str(r, vb.p ? vb.p : "", vb.n, &sv)) return -1;
        if (width > 0) {
            char fs[1] = {fill};
            if (js_pad(r, sv, width, fs, 1, align == '<' ? 0 : align == '^' ? 2 : 1, &sv)) return -1;
        }
        if (jb_put(r, &b, sv.u.s->p, sv.u.s->n)) return -1;
        i = e;
    }
    return jb_to_str(r, &b, out);
}

/* ---------------------------------------------------------------- list, dict methods */

static int m_lindex(jr *r, jv self, const jargs *a, jv *out) {
    if (a->np < 1 || a->nk) return jr_fail(r, "TypeError", "index() takes at least 1 argument");
    for (size_t i = 0; i < self.u.l->n; i++)
        if (jv_eq(self.u.l->v[i], a->pos[0])) { *out = jv_int((int64_t)i); return 0; }
    return jr_fail(r, "ValueError", "value is not in list");
}

static int m_lcount(jr *r, jv self, const jargs *a, jv *out) {
    if (a->np != 1 || a->nk) return jr_fail(r, "TypeError", "count() takes exactly one argument");
    int64_t c = 0;
    for (size_t i = 0; i < self.u.l->n; i++) c += jv_eq(self.u.l->v[i], a->pos[0]);
    *out = jv_int(c);
    return 0;
}

static int m_append(jr *r, jv self, const jargs *a, jv *out) {
    if (a->np != 1 || a->nk) return jr_fail(r, "TypeError", "append() takes exactly one argument");
    if (jl_push(r, self.u.l, a->pos[0])) return -1;
    *out = jv_none();
    return 0;
}

static int m_extend(jr *r, jv self, const jargs *a, jv *out) {
    if (a->np != 1 || a->nk) return jr_fail(r, "TypeError", "extend() takes exactly one argument");
    jlist *items;
    if (jr_iterate(r, a->pos[0], &items)) return -1;
    for (size_t i = 0; i < items->n; i++)
        if (jl_push(r, self.u.l, items->v[i])) return -1;
    *out = jv_none();
    return 0;
}

static int m_lpop(jr *r, jv self, const jargs *a, jv *out) {
    jlist *l = self.u.l;
    int64_t i = -1;
    if (a->np > 1 || a->nk) return jr_fail(r, "TypeError", "pop() takes at most 1 argument");
    if (a->np && need_int(r, a->pos[0], "pop", &i)) return -1;
    if (l->n == 0) return jr_fail(r, "IndexError", "pop from empty list");
    if (i < 0) i += (int64_t)l->n;
    if (i < 0 || (size_t)i >= l->n) return jr_fail(r, "IndexError", "pop index out of range");
    *out = l->v[i];
    memmove(l->v + i, l->v + i + 1, (l->n - (size_t)i - 1) * sizeof(jv));
    l->n--;
    return 0;
}

static int m_insert(jr *r, jv self, const jargs *a, jv *out) {
    jlist *l = self.u.l;
    int64_t i;
    if (a->np != 2 || a->nk) return jr_fail(r, "TypeError", "insert expected 2 arguments");
    if (need_int(r, a->pos[0], "insert", &i)) return -1;
    if (i < 0) i += (int64_t)l->n;
    if (i < 0) i = 0;
    if ((size_t)i > l->n) i = (int64_t)l->n;
    if (jl_push(r, l, jv_none())) return -1;
    memmove(l->v + i + 1, l->v + i, (l->n - (size_t)i - 1) * sizeof(jv));
    l->v[i] = a->pos[1];
    *out = jv_none();
    return 0;
}

static int make_pair(jr *r, jv a, jv b, jv *out) {
    jlist *t = jl_new(r, 2);
    if (!t) return -1;
    t->v[0] = a;
    t->v[1] = b;
    t->n = 2;
    out->k = JV_TUPLE;
    out->flag = 0;
    out->u.l = t;
    return 0;
}

int jm_dict_items(jr *r, const jdict *d, jv *out) {
    jlist *l = jl_new(r, d->n);
    if (!l) return -1;
    for (size_t i = 0; i < d->n; i++)
        if (make_pair(r, d->k[i], d->v[i], &l->v[l->n++])) return -1;
    out->k = JV_LIST;
    out->flag = 0;
    out->u.l = l;
    return 0;
}

static int m_items(jr *r, jv self, const jargs *a, jv *out) {
    if (m_noargs(r, a, "items")) return -1;
    return jm_dict_items(r, self.u.d, out);
}

static int m_keys(jr *r, jv self, const jargs *a, jv *out) {
    if (m_noargs(r, a, "keys")) return -1;
    jlist *l = jl_new(r, self.u.d->n);
    if (!l) return -1;
    for (size_t i = 0; i < self.u.d->n; i++) l->v[l->n++] = self.u.d->k[i];
    out->k = JV_LIST; out->flag = 0; out->u.l = l;
    return 0;
}

static int m_values(jr *r, jv self, const jargs *a, jv *out) {
    if (m_noargs(r, a, "values")) return -1;
    jlist *l = jl_new(r, self.u.d->n);
    if (!l) return -1;
    for (size_t i = 0; i < self.u.d->n; i++) l->v[l->n++] = self.u.d->v[i];
    out->k = JV_LIST; out->flag = 0; out->u.l = l;
    return 0;
}

static int m_get(jr *r, jv self, const jargs *a, jv *out) {
    if (a->np < 1 || a->np > 2 || a->nk) return jr_fail(r, "TypeError", "get expected 1 or 2 arguments, got %d", a->np);
    if (!jv_hashable(a->pos[0])) return jr_fail(r, "TypeError", "unhashable type: '%s'", jv_type_name(a->pos[0]));
    if (jd_get(self.u.d, a->pos[0], out)) return 0;
    *out = a->np == 2 ? a->pos[1] : jv_none();
    return 0;
}

static int m_copy(jr *r, jv self, const jargs *a, jv *out) {
    if (m_noargs(r, a, "copy")) return -1;
    jdict *d = jd_new(r);
    if (!d) return -1;
    for (size_t i = 0; i < self.u.d->n; i++)
        if (jd_set(r, d, self.u.d->k[i], self.u.d->v[i])) return -1;
    out->k = JV_DICT; out->flag = 0; out->u.d = d;
    return 0;
}

static int m_update(jr *r, jv self, const jargs *a, jv *out) {
    if (a->np > 1) return jr_fail(r, "TypeError", "update expected at most 1 argument");
    if (a->np) {
        if (a->pos[0].k != JV_DICT) return jr_fail(r, "TypeError", "update() argument must be a dict");
        const jdict *o = a->pos[0].u.d;
        for (size_t i = 0; i < o->n; i++)
            if (jd_set(r, self.u.d, o->k[i], o->v[i])) return -1;
    }
    for (int k = 0; k < a->nk; k++)
        if (jd_set_s(r, self.u.d, a->kn[k].p, a->kn[k].n, a->kv[k])) return -1;
    *out = jv_none();
    return 0;
}

static int m_setdefault(jr *r, jv self, const jargs *a, jv *out) {
    if (a->np < 1 || a->np > 2 || a->nk) return jr_fail(r, "TypeError", "setdefault expected 1 or 2 arguments");
    if (!jv_hashable(a->pos[0])) return jr_fail(r, "TypeError", "unhashable type: '%s'", jv_type_name(a->pos[0]));
    if (jd_get(self.u.d, a->pos[0], out)) return 0;
    *out = a->np == 2 ? a->pos[1] : jv_none();
    return jd_set(r, self.u.d, a->pos[0], *out);
}

/* ---------------------------------------------------------------- dispatch */

typedef struct mdef {
    const char *name;
    jfn fn;
    bool mutates;
} mdef;

static const mdef STR_METHODS[] = {
    {"strip", m_strip, 0}, {"lstrip", m_lstrip, 0}, {"rstrip", m_rstrip, 0}, {"split", m_split, 0},
    {"rsplit", m_rsplit, 0}, {"startswith", m_startswith, 0}, {"endswith", m_endswith, 0},
    {"upper", m_upper, 0}, {"lower", m_lower, 0}, {"title", m_title, 0}, {"capitalize", m_capitalize, 0},
    {"swapcase", m_swapcase, 0}, {"replace", m_replace, 0}, {"find", m_find, 0}, {"rfind", m_rfind, 0},
    {"index", m_sindex, 0}, {"rindex", m_rindex, 0}, {"count", m_scount, 0}, {"join", m_join, 0},
    {"isdigit", m_isdigit, 0}, {"isalpha", m_isalpha, 0}, {"isalnum", m_isalnum, 0},
    {"isspace", m_isspace, 0}, {"isupper", m_isupper, 0}, {"islower", m_islower, 0},
    {"isnumeric", m_isnumeric, 0}, {"isdecimal", m_isdigit, 0}, {"splitlines", m_splitlines, 0},
    {"ljust", m_ljust, 0}, {"rjust", m_rjust, 0}, {"center", m_center, 0}, {"zfill", m_zfill, 0},
    {"format", m_format, 0}, {NULL, NULL, 0}};

static const mdef LIST_METHODS[] = {
    {"index", m_lindex, 0}, {"count", m_lcount, 0}, {"append", m_append, 1}, {"extend", m_extend, 1},
    {"pop", m_lpop, 1}, {"insert", m_insert, 1}, {"remove", NULL, 1}, {"reverse", NULL, 1},
    {"sort", NULL, 1}, {"clear", NULL, 1}, {"copy", NULL, 0}, {NULL, NULL, 0}};

static const mdef DICT_METHODS[] = {
    {"items", m_items, 0}, {"keys", m_keys, 0}, {"values", m_values, 0}, {"get", m_get, 0},
    {"copy", m_copy, 0}, {"update", m_update, 1}, {"setdefault", m_setdefault, 1}, {"pop", NULL, 1},
    {"popitem", NULL, 1}, {"clear", NULL, 1}, {NULL, NULL, 0}};

static int bind(jr *r, jfn fn, jv self, const char *name, jv *out) {
    jfunc *f = ja_alloc(&r->a, sizeof *f);
    if (!f) return jr_oom(r);
    f->fn = fn;
    f->self = self;
    f->name = name;
    out->k = JV_FUNC;
    out->flag = 0;
    out->u.fn = f;
    return 0;
}

static int loop_cycle(jr *r, jv self, const jargs *a, jv *out) {
    if (a->np == 0) return jr_fail(r, "TypeError", "no items for cycling given");
    *out = a->pos[self.u.loop->i % (size_t)a->np];
    return 0;
}

static int loop_changed(jr *r, jv self, const jargs *a, jv *out) {
    jloop *lp = self.u.loop;
    jlist *l = jl_new(r, (size_t)a->np);
    if (!l) return -1;
    for (int i = 0; i < a->np; i++) l->v[l->n++] = a->pos[i];
    jv cur = {JV_LIST, 0, {0}};
    cur.u.l = l;
    if (!lp->has_changed || !jv_eq(cur, lp->last_changed)) {
        lp->has_changed = true;
        lp->last_changed = cur;
        *out = jv_bool(1);
    } else *out = jv_bool(0);
    return 0;
}

static bool name_is(const char *p, size_t n, const char *z) { return strlen(z) == n && !memcmp(p, z, n); }

static int loop_attr(jr *r, jv obj, const char *name, size_t n, jv *out, bool *found) {
    const jloop *lp = obj.u.loop;
    size_t len = lp->items->n, i = lp->i;
    *found = true;
    if (name_is(name, n, "index")) *out = jv_int((int64_t)i + 1);
    else if (name_is(name, n, "index0")) *out = jv_int((int64_t)i);
    else if (name_is(name, n, "revindex")) *out = jv_int((int64_t)(len - i));
    else if (name_is(name, n, "revindex0")) *out = jv_int((int64_t)(len - i - 1));
    else if (name_is(name, n, "first")) *out = jv_bool(i == 0);
    else if (name_is(name, n, "last")) *out = jv_bool(i + 1 == len);
    else if (name_is(name, n, "length")) *out = jv_int((int64_t)len);
    else if (name_is(name, n, "depth")) *out = jv_int(lp->depth0 + 1);
    else if (name_is(name, n, "depth0")) *out = jv_int(lp->depth0);
    else if (name_is(name, n, "previtem")) *out = i > 0 ? lp->items->v[i - 1] : jv_undef("there is no previous item");
    else if (name_is(name, n, "nextitem")) *out = i + 1 < len ? lp->items->v[i + 1] : jv_undef("there is no next item");
    else if (name_is(name, n, "cycle")) return bind(r, loop_cycle, obj, "cycle", out);
    else if (name_is(name, n, "changed")) return bind(r, loop_changed, obj, "changed", out);
    else *found = false;
    return 0;
}

int jm_method(jr *r, jv obj, const char *name, size_t n, jv *out, bool *found) {
    *found = false;
    const mdef *table = NULL;
    if (obj.k == JV_STR) table = STR_METHODS;
    else if (obj.k == JV_LIST || obj.k == JV_TUPLE) table = LIST_METHODS;
    else if (obj.k == JV_DICT) table = DICT_METHODS;
    else if (obj.k == JV_LOOP) return loop_attr(r, obj, name, n, out, found);
    if (!table) return 0;
    for (const mdef *m = table; m->name; m++) {
        if (!name_is(name, n, m->name)) continue;
        if (obj.k == JV_TUPLE && m->mutates) return 0;
        *found = true;
        if (m->mutates && !r->opt.allow_mutation) {
            *out = jv_undeff(r, "access to attribute '%s' of '%s' object is unsafe.", m->name, jv_type_name(obj));
            out->flag = 1;
            return 0;
        }
        if (!m->fn) {
            *out = jv_undeff(r, "'%s' of '%s' objects is not supported by this implementation", m->name, jv_type_name(obj));
            return 0;
        }
        return bind(r, m->fn, obj, m->name, out);
    }
    return 0;
}

/* ---------------------------------------------------------------- globals */

static int g_range(jr *r, jv self, const jargs *a, jv *out) {
    if (a->nk) return jr_fail(r, "TypeError", "range() takes no keyword arguments");
    if (a->np < 1 || a->np > 3) return jr_fail(r, "TypeError", "range expected 1 to 3 arguments, got %d", a->np);
    int64_t v[3] = {0, 0, 1};
    for (int i = 0; i < a->np; i++)
        if (need_int(r, a->pos[i], "range", &v[i])) return -1;
    int64_t start = a->np == 1 ? 0 : v[0], stop = a->np == 1 ? v[0] : v[1], step = a->np == 3 ? v[2] : 1;
    if (step == 0) return jr_fail(r, "ValueError", "range() arg 3 must not be zero");
    int64_t count = 0;
    if (step > 0 && start < stop) count = (int64_t)(((uint64_t)stop - (uint64_t)start - 1) / (uint64_t)step + 1);
    else if (step < 0 && stop < start) count = (int64_t)(((uint64_t)start - (uint64_t)stop - 1) / (uint64_t)(-step) + 1);
    if (count > 100000)
        return jr_fail(r, "OverflowError", "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    jlist *l = jl_new(r, (size_t)count);
    if (!l) return -1;
    for (int64_t i = 0; i < count; i++) l->v[l->n++] = jv_int(start + i * step);
    out->k = JV_LIST; out->flag = 0; out->u.l = l;
    return 0;
}

static int build_dict(jr *r, const jargs *a, jdict *d, const char *fname) {
    if (a->np > 1) return jr_fail(r, "TypeError", "%s expected at most 1 positional argument, got %d", fname, a->np);
    if (a->np == 1) {
        jv src = a->pos[0];
        if (src.k == JV_DICT || src.k == JV_NS) {
            for (size_t i = 0; i < src.u.d->n; i++)
                if (jd_set(r, d, src.u.d->k[i], src.u.d->v[i])) return -1;
        } else {
            jlist *items;
            if (jr_iterate(r, src, &items)) return -1;
            for (size_t i = 0; i < items->n; i++) {
                jv it = items->v[i];
                if (!jv_is_seq(it) || it.u.l->n != 2)
                    return jr_fail(r, "ValueError", "dictionary update sequence element #%zu has the wrong length", i);
                if (!jv_hashable(it.u.l->v[0])) return jr_fail(r, "TypeError", "unhashable type: '%s'", jv_type_name(it.u.l->v[0]));
                if (jd_set(r, d, it.u.l->v[0], it.u.l->v[1])) return -1;
            }
        }
    }
    for (int k = 0; k < a->nk; k++)
        if (jd_set_s(r, d, a->kn[k].p, a->kn[k].n, a->kv[k])) return -1;
    return 0;
}

static int g_namespace(jr *r, jv self, const jargs *a, jv *out) {
    jdict *d = jd_new(r);
    if (!d || build_dict(r, a, d, "namespace")) return -1;
    out->k = JV_NS; out->flag = 0; out->u.d = d;
    return 0;
}

static int g_dict(jr *r, jv self, const jargs *a, jv *out) {
    jdict *d = jd_new(r);
    if (!d || build_dict(r, a, d, "dict")) return -1;
    out->k = JV_DICT; out->flag = 0; out->u.d = d;
    return 0;
}

static int g_raise(jr *r, jv self, const jargs *a, jv *out) {
    jv msg = jv_none();
    if (!ja_arg(a, 0, "message", &msg)) return jr_fail(r, "TypeError", "raise_exception() missing 1 required positional argument: 'message'");
    jbuf b;
    jb_init(&b, 800);
    if (msg.k == JV_STR) {
        size_t n = msg.u.s->n > 800 ? 800 : msg.u.s->n;
        return jr_fail(r, "TemplateError", "%.*s", (int)n, msg.u.s->p);
    }
    if (jv_write_str(r, &b, msg)) return -1;
    return jr_fail(r, "TemplateError", "%s", b.p ? b.p : "");
}

static int g_strftime_now(jr *r, jv self, const jargs *a, jv *out) {
    jv f;
    if (!ja_arg(a, 0, "format", &f)) return jr_fail(r, "TypeError", "strftime_now() missing 1 required positional argument: 'format'");
    if (need_str(r, f, "strftime() argument 1")) return -1;
    if (f.u.s->n > 200) return jr_fail(r, "ValueError", "strftime format too long");
    char fmt[256], buf[1024];
    memcpy(fmt, f.u.s->p, f.u.s->n);
    fmt[f.u.s->n] = 0;
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    size_t n = fmt[0] ? strftime(buf, sizeof buf, fmt, &tm) : 0;
    return jv_strdup(r, buf, n, out);
}

int jm_install_globals(jr *r, jdict *g) {
    static const struct { const char *name; jfn fn; } G[] = {
        {"range", g_range}, {"namespace", g_namespace}, {"dict", g_dict},
        {"raise_exception", g_raise}, {"strftime_now", g_strftime_now}};
    for (size_t i = 0; i < sizeof G / sizeof G[0]; i++) {
        jv f;
        if (bind(r, G[i].fn, jv_none(), G[i].name, &f)) return -1;
        if (jd_set_s(r, g, G[i].name, strlen(G[i].name), f)) return -1;
    }
    return 0;
}
