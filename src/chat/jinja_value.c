/* jinja_value.c — the value model, with Python's rules.
 *
 * Templates are written against Python objects, so the output depends on Python details:
 * `{{ [1, 'a'] }}` prints `[1, 'a']`, `{{ 1.0 }}` prints `1.0`, `{{ none }}` prints `None`,
 * `1 == 1.0 == True`, and a dict keeps insertion order. This file implements str(), repr(),
 * equality, ordering and truthiness for the value kinds in jinja_int.h, plus the
 * insertion-ordered dict (linear below 9 keys, hashed above: tool schemas are small but a
 * hostile input is not).
 */
#include "chat/jinja_int.h"
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ---------------------------------------------------------------- errors */

int jr_fail(jr *r, const char *kind, const char *fmt, ...) {
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return err_set(r->e, "line %d, column %d: %s: %s", r->line, r->col, kind, msg);
}

int jr_oom(jr *r) {
    return jr_fail(r, "LimitError", "template needs more than %zu bytes of memory", r->lim.max_memory);
}

int jr_step(jr *r, uint64_t n) {
    r->steps += n;
    if (r->steps > r->lim.max_steps)
        return jr_fail(r, "LimitError", "template exceeds %" PRIu64 " steps (loop iterations)",
                       r->lim.max_steps);
    return 0;
}

/* ---------------------------------------------------------------- constructors */

int jv_str(jr *r, const char *p, size_t n, jv *out) {
    jstr *s = ja_alloc(&r->a, sizeof *s);
    if (!s) return jr_oom(r);
    s->p = p;
    s->n = n;
    out->k = JV_STR;
    out->flag = 0;
    out->u.s = s;
    return 0;
}

int jv_strdup(jr *r, const char *p, size_t n, jv *out) {
    char *c = ja_alloc(&r->a, n + 1);
    if (!c) return jr_oom(r);
    if (n) memcpy(c, p, n);
    return jv_str(r, c, n, out);
}

int jv_strz(jr *r, const char *z, jv *out) { return jv_str(r, z, strlen(z), out); }

int jv_strf(jr *r, jv *out, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    if ((size_t)n >= sizeof tmp) n = sizeof tmp - 1;
    return jv_strdup(r, tmp, (size_t)n, out);
}

jv jv_undeff(jr *r, const char *fmt, ...) {
    char tmp[600];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    if ((size_t)n >= sizeof tmp) n = sizeof tmp - 1;
    char *c = ja_alloc(&r->a, (size_t)n + 1);
    if (c) memcpy(c, tmp, (size_t)n);
    return jv_undef(c);  /* on OOM: a plain undefined; the next allocation reports it */
}

jlist *jl_new(jr *r, size_t cap) {
    jlist *l = ja_alloc(&r->a, sizeof *l);
    if (!l) { jr_oom(r); return NULL; }
    if (cap) {
        if (cap > SIZE_MAX / sizeof(jv)) { jr_oom(r); return NULL; }
        l->v = ja_alloc(&r->a, cap * sizeof(jv));
        if (!l->v) { jr_oom(r); return NULL; }
        l->cap = cap;
    }
    return l;
}

int jl_push(jr *r, jlist *l, jv v) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        if (cap > SIZE_MAX / sizeof(jv)) return jr_oom(r);
        jv *nv = ja_alloc(&r->a, cap * sizeof(jv));
        if (!nv) return jr_oom(r);
        if (l->n) memcpy(nv, l->v, l->n * sizeof(jv));
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
    return 0;
}

int jv_list(jr *r, size_t cap, jv *out) {
    jlist *l = jl_new(r, cap);
    if (!l) return -1;
    out->k = JV_LIST;
    out->flag = 0;
    out->u.l = l;
    return 0;
}

jdict *jd_new(jr *r) {
    jdict *d = ja_alloc(&r->a, sizeof *d);
    if (!d) jr_oom(r);
    return d;
}

/* ---------------------------------------------------------------- hashing */

bool jv_hashable(jv v) {
    switch (v.k) {
    case JV_LIST: case JV_DICT: case JV_NS: return false;
    case JV_TUPLE:
        for (size_t i = 0; i < v.u.l->n; i++)
            if (!jv_hashable(v.u.l->v[i])) return false;
        return true;
    default: return true;
    }
}

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33;
    return x;
}

static uint64_t jv_hash(jv v, int depth) {
    switch (v.k) {
    case JV_STR: {
        uint64_t h = 1469598103934665603ull;
        for (size_t i = 0; i < v.u.s->n; i++) { h ^= (unsigned char)v.u.s->p[i]; h *= 1099511628211ull; }
        return h;
    }
    case JV_BOOL: case JV_INT: return mix64((uint64_t)jv_intval(v));
    case JV_FLOAT: {
        double f = v.u.f;
        if (f == floor(f) && fabs(f) < 9.2e18) return mix64((uint64_t)(int64_t)f);  /* 1.0 == 1 */
        uint64_t bits;
        memcpy(&bits, &f, sizeof bits);
        return mix64(bits);
    }
    case JV_TUPLE: {
        uint64_t h = 0x345678;
        if (depth > JV_MAX_NEST) return h;
        for (size_t i = 0; i < v.u.l->n; i++) h = mix64(h ^ jv_hash(v.u.l->v[i], depth + 1));
        return h;
    }
    case JV_NONE: return 0x9e3779b97f4a7c15ull;
    default: return mix64((uint64_t)(uintptr_t)v.u.s);
    }
}

static bool jd_find(const jdict *d, jv k, size_t *at) {
    if (d->idx) {
        size_t mask = d->idx_cap - 1, h = (size_t)jv_hash(k, 0) & mask;
        for (;;) {
            uint32_t e = d->idx[h];
            if (!e) return false;
            if (jv_eq(d->k[e - 1], k)) { *at = e - 1; return true; }
            h = (h + 1) & mask;
        }
    }
    for (size_t i = 0; i < d->n; i++)
        if (jv_eq(d->k[i], k)) { *at = i; return true; }
    return false;
}

static int jd_reindex(jr *r, jdict *d, size_t want) {
    size_t cap = 16;
    while (cap < want * 2) cap *= 2;
    uint32_t *idx = ja_alloc(&r->a, cap * sizeof *idx);
    if (!idx) return jr_oom(r);
    for (size_t i = 0; i < d->n; i++) {
        size_t h = (size_t)jv_hash(d->k[i], 0) & (cap - 1);
        while (idx[h]) h = (h + 1) & (cap - 1);
        idx[h] = (uint32_t)(i + 1);
    }
    d->idx = idx;
    d->idx_cap = cap;
    return 0;
}

int jd_set(jr *r, jdict *d, jv k, jv v) {
    size_t at;
    if (jd_find(d, k, &at)) { d->v[at] = v; return 0; }
    if (d->n >= UINT32_MAX - 1) return jr_oom(r);
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        jv *nk = ja_alloc(&r->a, cap * sizeof(jv)), *nv = ja_alloc(&r->a, cap * sizeof(jv));
        if (!nk || !nv) return jr_oom(r);
        if (d->n) { memcpy(nk, d->k, d->n * sizeof(jv)); memcpy(nv, d->v, d->n * sizeof(jv)); }
        d->k = nk; d->v = nv; d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n] = v;
    d->n++;
    if (d->n > 8) {
        if (!d->idx || d->n * 2 > d->idx_cap) return jd_reindex(r, d, d->n);
        size_t mask = d->idx_cap - 1, h = (size_t)jv_hash(k, 0) & mask;
        while (d->idx[h]) h = (h + 1) & mask;
        d->idx[h] = (uint32_t)d->n;
    }
    return 0;
}

bool jd_get(const jdict *d, jv k, jv *out) {
    size_t at;
    if (!jd_find(d, k, &at)) return false;
    *out = d->v[at];
    return true;
}

bool jd_get_s(const jdict *d, const char *p, size_t n, jv *out) {
    jstr s = {n, p};
    jv k = {JV_STR, 0, {0}};
    k.u.s = &s;
    return jd_get(d, k, out);
}

int jd_set_s(jr *r, jdict *d, const char *p, size_t n, jv v) {
    jv k;
    if (jv_str(r, p, n, &k)) return -1;
    return jd_set(r, d, k, v);
}

/* ---------------------------------------------------------------- truth, equality, order */

bool jv_truthy(jv v) {
    switch (v.k) {
    case JV_UNDEF: case JV_NONE: return false;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0.0;
    case JV_STR: return v.u.s->n != 0;
    case JV_LIST: case JV_TUPLE: return v.u.l->n != 0;
    case JV_DICT: return v.u.d->n != 0;
    default: return true;
    }
}

static bool eq_depth(jv a, jv b, int depth) {
    if (depth > JV_MAX_NEST) return false;
    if (jv_is_num(a) && jv_is_num(b)) {
        if (jv_is_intlike(a) && jv_is_intlike(b)) return jv_intval(a) == jv_intval(b);
        return jv_num(a) == jv_num(b);
    }
    if (a.k != b.k) return false;
    switch (a.k) {
    case JV_UNDEF: case JV_NONE: return true;
    case JV_STR: return a.u.s->n == b.u.s->n && !memcmp(a.u.s->p, b.u.s->p, a.u.s->n);
    case JV_LIST: case JV_TUPLE:
        if (a.u.l == b.u.l) return true;
        if (a.u.l->n != b.u.l->n) return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!eq_depth(a.u.l->v[i], b.u.l->v[i], depth + 1)) return false;
        return true;
    case JV_DICT: {
        if (a.u.d == b.u.d) return true;
        if (a.u.d->n != b.u.d->n) return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            jv o;
            if (!jd_get(b.u.d, a.u.d->k[i], &o) || !eq_depth(a.u.d->v[i], o, depth + 1)) return false;
        }
        return true;
    }
    case JV_FUNC:
        return a.u.fn->fn == b.u.fn->fn && eq_depth(a.u.fn->self, b.u.fn->self, depth + 1);
    default: return a.u.s == b.u.s;  /* identity for namespaces, macros, loops */
    }
}

bool jv_eq(jv a, jv b) { return eq_depth(a, b, 0); }

const char *jv_type_name(jv v) {
    static const char *names[] = {"Undefined", "NoneType", "bool", "int", "float", "str", "list",
                                  "tuple", "dict", "Namespace", "builtin_function_or_method",
                                  "Macro", "LoopContext"};
    return v.k < sizeof names / sizeof names[0] ? names[v.k] : "object";
}

static int cmp_depth(jr *r, jv a, jv b, int *res, const char *op, int depth) {
    if (a.k == JV_UNDEF) return jr_undef_error(r, a);
    if (b.k == JV_UNDEF) return jr_undef_error(r, b);
    if (depth > JV_MAX_NEST) return jr_fail(r, "LimitError", "values nested too deeply to compare");
    if (jv_is_num(a) && jv_is_num(b)) {
        if (jv_is_intlike(a) && jv_is_intlike(b)) {
            int64_t x = jv_intval(a), y = jv_intval(b);
            *res = (x > y) - (x < y);
        } else {
            double x = jv_num(a), y = jv_num(b);
            *res = (x > y) - (x < y);  /* NaN compares as equal-ish: every comparison false */
            if (isnan(x) || isnan(y)) *res = 2;  /* marker: unordered */
        }
        return 0;
    }
    if (a.k == JV_STR && b.k == JV_STR) {
        size_t n = a.u.s->n < b.u.s->n ? a.u.s->n : b.u.s->n;
        int c = n ? memcmp(a.u.s->p, b.u.s->p, n) : 0;
        *res = c ? (c > 0 ? 1 : -1) : (a.u.s->n > b.u.s->n) - (a.u.s->n < b.u.s->n);
        return 0;
    }
    if (a.k == b.k && (a.k == JV_LIST || a.k == JV_TUPLE)) {
        size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (eq_depth(a.u.l->v[i], b.u.l->v[i], depth + 1)) continue;
            return cmp_depth(r, a.u.l->v[i], b.u.l->v[i], res, op, depth + 1);
        }
        *res = (a.u.l->n > b.u.l->n) - (a.u.l->n < b.u.l->n);
        return 0;
    }
    return jr_fail(r, "TypeError", "'%s' not supported between instances of '%s' and '%s'", op,
                   jv_type_name(a), jv_type_name(b));
}

int jv_cmp(jr *r, jv a, jv b, int *res, const char *op) { return cmp_depth(r, a, b, res, op, 0); }

/* ---------------------------------------------------------------- str() and repr() */

/* Python's repr(float): the shortest digits that round-trip, fixed notation for
 * 1e-4 <= |f| < 1e16, otherwise d.ddde±XX. */
void jv_float_repr(double f, char out[40]) {
    if (isnan(f)) { strcpy(out, "nan"); return; }
    if (isinf(f)) { strcpy(out, f < 0 ? "-inf" : "inf"); return; }
    if (f == 0) { strcpy(out, signbit(f) ? "-0.0" : "0.0"); return; }
    char tmp[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    /* tmp = [-]d[.ddd]e±XX */
    char digits[24];
    int nd = 0, neg = 0;
    const char *p = tmp;
    if (*p == '-') { neg = 1; p++; }
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') digits[nd++] = *p;
    int exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    int decpt = exp10 + 1;
    char *o = out;
    if (neg) *o++ = '-';
    if (decpt <= -4 || decpt > 16) {
        *o++ = digits[0];
        if (nd > 1) { *o++ = '.'; memcpy(o, digits + 1, (size_t)nd - 1); o += nd - 1; }
        sprintf(o, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
        return;
    }
    if (decpt <= 0) {
        *o++ = '0'; *o++ = '.';
        for (int i = 0; i < -decpt; i++) *o++ = '0';
        memcpy(o, digits, (size_t)nd); o += nd;
    } else if (decpt >= nd) {
        memcpy(o, digits, (size_t)nd); o += nd;
        for (int i = 0; i < decpt - nd; i++) *o++ = '0';
        *o++ = '.'; *o++ = '0';
    } else {
        memcpy(o, digits, (size_t)decpt); o += decpt;
        *o++ = '.';
        memcpy(o, digits + decpt, (size_t)(nd - decpt)); o += nd - decpt;
    }
    *o = 0;
}

static bool py_isprintable(uint32_t cp) {
    if (cp < 0x20 || cp == 0x7F) return false;
    if (cp < 0x7F) return true;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO: case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
        return false;
    default: return true;
    }
}

static int write_str_repr(jr *r, jbuf *b, const char *p, size_t n) {
    bool has_sq = memchr(p, '\'', n) != NULL, has_dq = memchr(p, '"', n) != NULL;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    if (jb_putc(r, b, q)) return -1;
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t k = u8_decode(p + i, n - i, &cp);
        char esc[16];
        if (cp == (uint32_t)q || cp == '\\') { esc[0] = '\\'; esc[1] = (char)cp; esc[2] = 0; }
        else if (cp == '\n') strcpy(esc, "\\n");
        else if (cp == '\r') strcpy(esc, "\\r");
        else if (cp == '\t') strcpy(esc, "\\t");
        else if (py_isprintable(cp)) {
            if (jb_put(r, b, p + i, k)) return -1;
            i += k;
            continue;
        } else if (cp < 0x100) snprintf(esc, sizeof esc, "\\x%02x", cp);
        else if (cp < 0x10000) snprintf(esc, sizeof esc, "\\u%04x", cp);
        else snprintf(esc, sizeof esc, "\\U%08x", cp);
        if (jb_puts(r, b, esc)) return -1;
        i += k;
    }
    return jb_putc(r, b, q);
}

static int write_repr_depth(jr *r, jbuf *b, jv v, int depth);

static int write_dict_repr(jr *r, jbuf *b, const jdict *d, int depth) {
    if (jb_putc(r, b, '{')) return -1;
    for (size_t i = 0; i < d->n; i++) {
        if (i && jb_puts(r, b, ", ")) return -1;
        if (write_repr_depth(r, b, d->k[i], depth + 1) || jb_puts(r, b, ": ") ||
            write_repr_depth(r, b, d->v[i], depth + 1))
            return -1;
    }
    return jb_putc(r, b, '}');
}

static int write_repr_depth(jr *r, jbuf *b, jv v, int depth) {
    if (depth > JV_MAX_NEST) return jr_fail(r, "LimitError", "value nested too deeply to print");
    switch (v.k) {
    case JV_STR: return write_str_repr(r, b, v.u.s->p, v.u.s->n);
    case JV_LIST: case JV_TUPLE: {
        bool tup = v.k == JV_TUPLE;
        if (jb_putc(r, b, tup ? '(' : '[')) return -1;
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i && jb_puts(r, b, ", ")) return -1;
            if (write_repr_depth(r, b, v.u.l->v[i], depth + 1)) return -1;
        }
        if (tup && v.u.l->n == 1 && jb_putc(r, b, ',')) return -1;
        return jb_putc(r, b, tup ? ')' : ']');
    }
    case JV_DICT: return write_dict_repr(r, b, v.u.d, depth);
    case JV_NS:
        if (jb_puts(r, b, "<Namespace ")) return -1;
        if (write_dict_repr(r, b, v.u.d, depth)) return -1;
        return jb_putc(r, b, '>');
    case JV_UNDEF: return 0;
    default: return jv_write_str(r, b, v);
    }
}

int jv_write_repr(jr *r, jbuf *b, jv v) { return write_repr_depth(r, b, v, 0); }

int jv_write_str(jr *r, jbuf *b, jv v) {
    char tmp[64];
    switch (v.k) {
    case JV_UNDEF: return 0;
    case JV_NONE: return jb_puts(r, b, "None");
    case JV_BOOL: return jb_puts(r, b, v.u.b ? "True" : "False");
    case JV_INT: snprintf(tmp, sizeof tmp, "%" PRId64, v.u.i); return jb_puts(r, b, tmp);
    case JV_FLOAT: jv_float_repr(v.u.f, tmp); return jb_puts(r, b, tmp);
    case JV_STR: return jb_put(r, b, v.u.s->p, v.u.s->n);
    case JV_LIST: case JV_TUPLE: case JV_DICT: case JV_NS: return write_repr_depth(r, b, v, 0);
    case JV_FUNC:
        snprintf(tmp, sizeof tmp, "<built-in method %s>", v.u.fn->name ? v.u.fn->name : "?");
        return jb_puts(r, b, tmp);
    case JV_MACRO: {
        const jnode *d = v.u.m->def;
        if (d->kind == NS_CALLBLOCK) return jb_puts(r, b, "<Macro 'caller'>");
        if (jb_puts(r, b, "<Macro ")) return -1;
        if (write_str_repr(r, b, d->name.p, d->name.n)) return -1;
        return jb_putc(r, b, '>');
    }
    case JV_LOOP:
        snprintf(tmp, sizeof tmp, "<LoopContext %zu/%zu>", v.u.loop->i + 1, v.u.loop->items->n);
        return jb_puts(r, b, tmp);
    }
    return 0;
}

int jv_to_str(jr *r, jv v, jv *out) {
    if (v.k == JV_STR) { *out = v; return 0; }
    jbuf b;
    jb_init(&b, r->lim.max_output);
    if (jv_write_str(r, &b, v)) return -1;
    return jb_to_str(r, &b, out);
}
