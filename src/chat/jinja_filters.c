/* jinja_filters.c — jinja2's built-in filters and tests, plus transformers' tojson.
 *
 * Each filter takes the value, positional and keyword arguments with jinja2's names and
 * defaults (`default(value, default_value='', boolean=False)`, `sort(reverse=False,
 * case_sensitive=False, attribute=None)`, ...), so templates that pass keywords work. String
 * filters apply str() first, as jinja2's soft_str does, so an undefined input gives ''.
 * Sorting is a stable merge sort with Python's ordering; comparing a str with an int raises
 * TypeError as Python would.
 *
 * Not provided (no chat template seen so far uses them): groupby, slice, striptags,
 * urlencode, urlize, wordwrap, xmlattr, filesizeformat, random. Using one is a clean
 * "No filter named ..." error.
 */
#include "chat/jinja_int.h"
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#define CHECK(maxpos, fname, ...)                                             \
    do {                                                                      \
        static const char *const names_[] = {__VA_ARGS__, NULL};              \
        if (ja_check(r, a, (maxpos), names_, (fname))) return -1;             \
    } while (0)

static int str_of(jr *r, jv v, jv *out) { return jv_to_str(r, v, out); }

static int set_list(jlist *l, jv *out) {
    out->k = JV_LIST;
    out->flag = 0;
    out->u.l = l;
    return 0;
}

/* ---------------------------------------------------------------- attribute getters */

/* jinja2's make_attrgetter: "a.b.0" walks getitem with ints for digit parts. */
static int get_path(jr *r, jv item, jv attr, jv *out) {
    if (attr.k != JV_STR) return jr_getitem(r, item, attr, out);
    const char *p = attr.u.s->p;
    size_t n = attr.u.s->n, i = 0;
    jv cur = item;
    while (i <= n) {
        size_t e = i;
        while (e < n && p[e] != '.') e++;
        bool digits = e > i;
        for (size_t k = i; k < e; k++) if (p[k] < '0' || p[k] > '9') digits = false;
        jv key;
        int64_t iv = 0;
        for (size_t k = i; digits && k < e; k++) iv = iv < 100000000000000LL ? iv * 10 + (p[k] - '0') : iv;
        if (digits) key = jv_int(iv);
        else if (jv_str(r, p + i, e - i, &key)) return -1;
        if (jr_getitem(r, cur, key, &cur)) return -1;
        i = e + 1;
        if (e >= n) break;
    }
    *out = cur;
    return 0;
}

static int lower_if_str(jr *r, jv v, bool case_sensitive, jv *out) {
    if (!case_sensitive && v.k == JV_STR) return js_case(r, v, 0, out);
    *out = v;
    return 0;
}

/* ---------------------------------------------------------------- sorting */

typedef struct skey { jv key, val; } skey;

static int merge_sort(jr *r, skey *v, skey *tmp, size_t n, bool reverse) {
    if (n < 2) return 0;
    size_t h = n / 2;
    if (merge_sort(r, v, tmp, h, reverse) || merge_sort(r, v + h, tmp, n - h, reverse)) return -1;
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int c;
        /* stable: take from the right only when strictly smaller (or larger, reversed) */
        if (jv_cmp(r, v[j].key, v[i].key, &c, "<")) return -1;
        bool take_right = reverse ? (c == 1) : (c == -1);
        tmp[k++] = take_right ? v[j++] : v[i++];
    }
    while (i < h) tmp[k++] = v[i++];
    while (j < n) tmp[k++] = v[j++];
    memcpy(v, tmp, n * sizeof *v);
    return 0;
}

static int sort_items(jr *r, jlist *items, jv attr, bool case_sensitive, bool reverse, skey **out) {
    skey *v = ja_alloc(&r->a, (items->n + 1) * sizeof *v), *tmp = ja_alloc(&r->a, (items->n + 1) * sizeof *v);
    if (!v || !tmp) return jr_oom(r);
    for (size_t i = 0; i < items->n; i++) {
        jv k = items->v[i];
        if (attr.k != JV_NONE && attr.k != JV_UNDEF && get_path(r, k, attr, &k)) return -1;
        if (lower_if_str(r, k, case_sensitive, &v[i].key)) return -1;
        v[i].val = items->v[i];
    }
    if (jr_step(r, items->n)) return -1;
    if (merge_sort(r, v, tmp, items->n, reverse)) return -1;
    *out = v;
    return 0;
}

static int f_sort(jr *r, jv v, const jargs *a, jv *out) {
    CHECK(3, "sort", "reverse", "case_sensitive", "attribute");
    jv rev = jv_bool(0), cs = jv_bool(0), attr = jv_none();
    ja_arg(a, 0, "reverse", &rev);
    ja_arg(a, 1, "case_sensitive", &cs);
    ja_arg(a, 2, "attribute", &attr);
    jlist *items;
    skey *s = NULL;
    if (jr_iterate(r, v, &items) || sort_items(r, items, attr, jv_truthy(cs), jv_truthy(rev), &s)) return -1;
    jlist *l = jl_new(r, items->n);
    if (!l) return -1;
    for (size_t i = 0; i < items->n; i++) l->v[l->n++] = s[i].val;
    return set_list(l, out);
}

static int f_dictsort(jr *r, jv v, const jargs *a, jv *out) {
    CHECK(3, "dictsort", "case_sensitive", "by", "reverse");
    jv cs = jv_bool(0), by = jv_none(), rev = jv_bool(0);
    ja_arg(a, 0, "case_sensitive", &cs);
    ja_arg(a, 1, "by", &by);
    ja_arg(a, 2, "reverse", &rev);
    if (v.k != JV_DICT) return jr_fail(r, "TypeError", "dictsort expects a mapping, got %s", jv_type_name(v));
    int pos = 0;
    if (by.k == JV_STR) {
        if (by.u.s->n == 5 && !memcmp(by.u.s->p, "value", 5)) pos = 1;
        else if (!(by.u.s->n == 3 && !memcmp(by.u.s->p, "key", 3)))
            return jr_fail(r, "FilterArgumentError", "You can only sort by either \"key\" or \"value\"");
    }
    jv items;
    if (jm_dict_items(r, v.u.d, &items)) return -1;
    skey *s = ja_alloc(&r->a, (items.u.l->n + 1) * sizeof *s), *tmp = ja_alloc(&r->a, (items.u.l->n + 1) * sizeof *s);
    if (!s || !tmp) return jr_oom(r);
    for (size_t i = 0; i < items.u.l->n; i++) {
        s[i].val = items.u.l->v[i];
        if (lower_if_str(r, items.u.l->v[i].u.l->v[pos], jv_truthy(cs), &s[i].key)) return -1;
    }
    if (merge_sort(r, s, tmp, items.u.l->n, jv_truthy(rev))) return -1;
    for (size_t i = 0; i < items.u.l->n; i++) items.u.l->v[i] = s[i].val;
    *out = items;
    return 0;
}

static int f_unique(jr *r, jv v, const jargs *a, jv *out) {
    CHECK(2, "unique", "case_sensitive", "attribute");
    jv cs = jv_bool(0), attr = jv_none();
    ja_arg(a, 0, "case_sensitive", &cs);
    ja_arg(a, 1, "attribute", &attr);
    jlist *items, *l, *seen;
    if (jr_iterate(r, v, &items)) return -1;
    if (!(l = jl_new(r, items->n)) || !(seen = jl_new(r, items->n))) return -1;
    jdict *idx = jd_new(r);
    if (!idx) return -1;
    for (size_t i = 0; i < items->n; i++) {
        jv k = items->v[i], dummy;
        if (attr.k != JV_NONE && get_path(r, k, attr, &k)) return -1;
        if (lower_if_str(r, k, jv_truthy(cs), &k)) return -1;
        if (!jv_hashable(k)) return jr_fail(r, "TypeError", "unhashable type: '%s'", jv_type_name(k));
        if (jd_get(idx, k, &dummy)) continue;
        if (jd_set(r, idx, k, jv_none())) return -1;
        l->v[l->n++] = items->v[i];
    }
    return set_list(l, out);
}

static int minmax(jr *r, jv v, const jargs *a, jv *out, bool want_max) {
    CHECK(2, want_max ? "max" : "min", "case_sensitive", "attribute");
    jv cs = jv_bool(0), attr = jv_none();
    ja_arg(a, 0, "case_sensitive", &cs);
    ja_arg(a, 1, "attribute", &attr);
    jlist *items;
    if (jr_iterate(r, v, &items)) return -1;
    if (!items->n) { *out = jv_undef("No aggregated item, sequence was empty."); return 0; }
    jv best = items->v[0], bestk;
    if (attr.k != JV_NONE && get_path(r, best, attr, &bestk)) return -1;
    if (attr.k == JV_NONE) bestk = best;
    if (lower_if_str(r, bestk, jv_truthy(cs), &bestk)) return -1;
    for (size_t i = 1; i < items->n; i++) {
        jv k = items->v[i];
        if (attr.k != JV_NONE && get_path(r, k, attr, &k)) return -1;
        if (lower_if_str(r, k, jv_truthy(cs), &k)) return -1;
        int c;
        if (jv_cmp(r, k, bestk, &c, want_max ? ">" : "<")) return -1;
        if (want_max ? c == 1 : c == -1) { best = items->v[i]; bestk = k; }
    }
    *out = best;
    return 0;
}
static int f_max(jr *r, jv v, const jargs *a, jv *out) { return minmax(r, v, a, out, true); }
static int f_min(jr *r, jv v, const jargs *a, jv *out) { return minmax(r, v, a, out, false); }

/* ---------------------------------------------------------------- sequences */

static int f_length(jr *r, jv v, const jargs *a, jv *out) {
    CHECK(0, "length", "");
    switch (v.k) {
    case JV_STR: *out = jv_int((int64_t)u8_len(v.u.s->p, v.u.s->n)); return 0;
    case JV_LIST: case JV_TUPLE: *out = jv_int((int64_t)v.u.l->n); return 0;
    case JV_DICT: *out = jv_int((int64_t)v.u.d->n); return 0;
    case JV_UNDEF: *out = jv_int(0); return 0;
    case JV_LOOP: *out = jv_int((int64_t)v.u.loop->items->n); return 0;
    default: return jr_fail(r, "TypeError", "object of type '%s' has no len()", jv_type_name(v));
    }
}

static int f_first(jr *r, jv v, const jargs *a, jv *out) {
    CHECK(0, "first", "");
    jlist *items;
    if (jr_iterate(r, v, &items)) return -1;
    *out = items->n ? items->v[0] : jv_undef("No first item, sequence was empty.");
    return 0;
}

static int f_last(jr *r, jv v, const jargs *a, jv *out) {
    CHECK(0, "last", "");
    jlist *items;
    if (jr_iterate(r, v, &items)) return -1;
    *out = items->n ? items->v[items->n - 1] : jv_undef("No last item, sequence was empty.");
    return 0;
}

static int f_list(jr *r, jv v, const jargs *a, jv *out) {
    CHECK(0, "list", "");
    jlist *items;
    if (jr_iterate(r, v, &items)) return -1;
    return set_list(items, out);
}

static int f_reverse(jr *r, jv v, const jargs *a, jv *out) {
    CHECK(0, "reverse", "");
    jlist *src, *items;
    if (jr_iterate(r, v, &src) || !(items = jl_new(r, src->n))) return -1;
    for (size_t i = src->n; i-- > 0;) items->v[items->n++] = src->v[i];
    if (v.k == JV_STR) {
        jbuf b;
        jb_init(&b, r->lim.max_output);
        for (size_t i = 0; i < items->n; i++)
            if (jb_put(r, &b, items->v[i].u.s->p, items->v[i].u.s->n)) return -1;
        return jb_to_str(r, &b, out);
    }
    return set_list(items, out);
}

static int f_join(jr *r, jv v, const jargs *a, jv *out) {
    CHECK(2, "join", "d", "attribute");
    jv d, attr = jv_none();
    if (!ja_arg(a, 0, "d", &d) && jv_strz(r, "", &d)) return -1;
    ja_arg(a, 1, "attribute", &attr);
    jv sep;
    if (str_of(r, d, &sep)) return -1;
    jlist *items;
    if (jr_iterate(r, v, &items)) return -1;
    jbuf b;
    jb_init(&b, r->lim.max_output);
    for (size_t i = 0; i < items->n; i++) {
        jv it = items->v[i];
        if (attr.k != JV_NONE && get_path(r, it, attr, &it)) return -1;
        if (i && jb_put(r, &b, sep.u.s->p, sep.u.s->n)) return -1;
        if (jv_write_str(r, &b, it)) return -1;
    }
    return jb_to_str(r, &b, out);
}

static int f_batch(jr *r, jv v, const jargs *a, jv *out) {
    CHECK(2, "batch", "linecount", "fill_with");
    jv lc, fill = jv_none();
    bool has_fill = ja_arg(a, 1, "fill_with", &fill);
    if (!ja_arg(a, 0, "linecount", &lc) || !jv_is_intlike(lc) || jv_intval(lc) <= 0)
        return jr_fail(r, "TypeError", "batch() needs a positive integer linecount");
    int64_t n = jv_intval(lc);
    jlist *items, *res;
    if (jr_iterate(r, v, &items) || !(res = jl_new(r, 4))) return -1;
    for (size_t i = 0; i < items->n; i += (size_t)n) {
        jlist *row = jl_new(r, (size_t)n);
        if (!row) return -1;
        for (int64_t k = 0; k < n && i + (size_t)k < items->n; k++) row->v[row->n++] = items->v[i + (size_t)k];
        if (has_fill && fill.k != JV_NONE)
            while ((int64_t)row->n < n) row->v[row->n++] = fill;
        jv rv = {JV_LIST, 0, {0}};
        rv.u.l = row;
        if (jl_push(r, res, rv)) return -1;
    }
    return set_list(res, out);
}

static int f_sum(jr *r, jv v, const jargs *a, jv *out) {
    CHECK(2, "sum", "attribute", "start");
    jv attr = jv_none(), acc = jv_int(0);
    ja_arg(a, 0, "attribute", &attr);
    ja_arg(a, 1, "start", &acc);
    jlist *items;
    if (jr_iterate(r, v, &items)) return -1;
    for (size_t i = 0; i < items->n; i++) {
        jv it = items->v[i];
        if (attr.k != JV_NONE && get_path(r, it, attr, &it)) return -1;
        if (jr_binop(r, OP_ADD, acc, it, &acc)) return -1;
    }
    *out = acc;
    return 0;
}

static int f_items(jr *r, jv v, const jargs *a, jv *out) {
    CHECK(0, "items", "");
    if (v.k == JV_UNDEF) return jv_list(r, 0, out);
    if (v.k != JV_DICT) return jr_fail(r, "TypeError", "Can only get item pairs from a mapping.");
    return jm_dict_items(r, v.u.d, out);
}

static int f_attr(jr *r, jv v, const jargs *a, jv *out) {
    CHECK(1, "attr", "name");
    jv name;
    if (!ja_arg(a, 0, "name", &name) || name.k != JV_STR) return jr_fail(r, "TypeError", "attr() needs an attribute name");
    return jr_getattr(r, v, name.u.s->p, name.u.s->n, out);
}

/* select / reject / selectattr / rejectattr / map share the "call a test or filter by name"
 * machinery. */
static int sel(jr *r, jv v, const jargs *a, jv *out, bool want, bool by_attr) {
    int first_arg = by_attr ? 1 : 0;
    jv attr = jv_none();
    if (by_attr && (a->np < 1 || a->pos[0].k != JV_STR)) return jr_fail(r, "TypeError", "selectattr/rejectattr need an attribute name");
    if (by_attr) attr = a->pos[0];
    const char *test = NULL;
    char tname[64];
    if (a->np > first_arg) {
        jv t = a->pos[first_arg];
        if (t.k != JV_STR || t.u.s->n >= sizeof tname) return jr_fail(r, "TypeError", "test name must be a string");
        memcpy(tname, t.u.s->p, t.u.s->n);
        tname[t.u.s->n] = 0;
        test = tname;
    }
    jargs targs = {0};
    if (test) {
        targs.np = a->np - first_arg - 1;
        targs.pos = a->pos + first_arg + 1;
        targs.nk = a->nk;
        targs.kn = a->kn;
        targs.kv = a->kv;
    }
    jlist *items, *l;
    if (jr_iterate(r, v, &items) || !(l = jl_new(r, items->n))) return -1;
    if (jr_step(r, items->n)) return -1;
    for (size_t i = 0; i < items->n; i++) {
        jv it = items->v[i];
        if (by_attr && get_path(r, it, attr, &it)) return -1;
        bool res;
        if (test) {
            if (jr_apply_test(r, test, it, &targs, &res)) return -1;
        } else res = jv_truthy(it);
        if (res == want) l->v[l->n++] = items->v[i];
    }
    return set_list(l, out);
}
static int f_select(jr *r, jv v, const jargs *a, jv *out) { return sel(r, v, a, out, true, false); }
static int f_reject(jr *r, jv v, const jargs *a, jv *out) { return sel(r, v, a, out, false, false); }
static int f_selectattr(jr *r, jv v, const jargs *a, jv *out) { return sel(r, v, a, out, true, true); }
static int f_rejectattr(jr *r, jv v, const jargs *a, jv *out) { return sel(r, v, a, out, false, true); }

static int f_map(jr *r, jv v, const jargs *a, jv *out) {
    jv attr, deflt = jv_undef(NULL);
    bool has_default = false;
    bool by_attr = false;
    for (int k = 0; k < a->nk; k++) {
        if (a->kn[k].n == 9 && !memcmp(a->kn[k].p, "attribute", 9)) { attr = a->kv[k]; by_attr = true; }
        else if (a->kn[k].n == 7 && !memcmp(a->kn[k].p, "default", 7)) { deflt = a->kv[k]; has_default = true; }
    }
    jlist *items, *l;
    if (jr_iterate(r, v, &items) || !(l = jl_new(r, items->n))) return -1;
    if (jr_step(r, items->n)) return -1;
    if (by_attr) {
        for (size_t i = 0; i < items->n; i++) {
            jv it;
            if (get_path(r, items->v[i], attr, &it)) return -1;
            if (it.k == JV_UNDEF && has_default) it = deflt;
            l->v[l->n++] = it;
        }
        return set_list(l, out);
    }
    if (a->np < 1 || a->pos[0].k != JV_STR) return jr_fail(r, "TypeError", "map() needs a filter name or attribute=");
    char fname[64];
    if (a->pos[0].u.s->n >= sizeof fname) return jr_fail(r, "TemplateRuntimeError", "No filter named '%.*s'.", 60, a->pos[0].u.s->p);
    memcpy(fname, a->pos[0].u.s->p, a->pos[0].u.s->n);
    fname[a->pos[0].u.s->n] = 0;
    jargs fa = {.np = a->np - 1, .pos = a->pos + 1, .nk = a->nk, .kn = a->kn, .kv = a->kv};
    for (size_t i = 0; i < items->n; i++)
        if (jr_apply_filter(r, fname, items->v[i], &fa, &l->v[l->n++])) return -1;
    return set_list(l, out);
}

/* ---------------------------------------------------------------- values */

static int f_default(jr *r, jv v, const jargs *a, jv *out) {
    CHECK(2, "default", "default_value", "boolean");
    jv d, b = jv_bool(0);
    if (!ja_arg(a, 0, "default_value", &d) && jv_strz(r, "", &d)) return -1;
    ja_arg(a, 1, "boolean", &b);
    if (v.k == JV_UNDEF || (jv_truthy(b) && !jv_truthy(v))) *out = d;
    else *out = v;
    return 0;
}

static int f_string(jr *r, jv v, const jargs *a, jv *out) { CHECK(0, "string", ""); return str_of(r, v, out); }
static int f_safe(jr *r, jv v, const jargs *a, jv *out) { CHECK(0, "safe", ""); return str_of(r, v, out); }

static int f_escape(jr *r, jv v, const jargs *a, jv *out) {
    CHECK(0, "escape", "");
    jv s;
    if (str_of(r, v, &s)) return -1;
    jbuf b;
    jb_init(&b, r->lim.max_output);
    for (size_t i = 0; i < s.u.s->n; i++) {
        char c = s.u.s->p[i];
        const char *rep = c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '"' ? "&#34;" : c == '\'' ? "&#39;" : NULL;
        if (rep ? jb_puts(r, &b, rep) : jb_putc(r, &b, c)) return -1;
    }
    return jb_to_str(r, &b, out);
}

static int f_abs(jr *r, jv v, const jargs *a, jv *out) {
    CHECK(0, "abs", "");
    if (v.k == JV_FLOAT) { *out = jv_float(fabs(v.u.f)); return 0; }
    if (jv_is_intlike(v)) {
        int64_t x = jv_intval(v);
        if (x == INT64_MIN) return jr_fail(r, "OverflowError", "integer result does not fit in 64 bits");
        *out = jv_int(x < 0 ? -x : x);
        return 0;
    }
    if (v.k == JV_UNDEF) return jr_undef_error(r, v);
    return jr_fail(r, "TypeError", "bad operand type for abs(): '%s'", jv_type_name(v));
}

/* Python float(str): strips whitespace, accepts inf/nan/underscores between digits. */
static bool parse_py_float(const char *p, size_t n, double *out) {
    char buf[128];
    size_t b = 0, e = n;
    while (b < e && (p[b] == ' ' || (p[b] >= '\t' && p[b] <= '\r'))) b++;
    while (e > b && (p[e - 1] == ' ' || (p[e - 1] >= '\t' && p[e - 1] <= '\r'))) e--;
    if (e == b || e - b >= sizeof buf) return false;
    size_t k = 0;
    for (size_t i = b; i < e; i++) {
        if (p[i] == '_') {
            if (i == b || i + 1 >= e || !(p[i - 1] >= '0' && p[i - 1] <= '9') || !(p[i + 1] >= '0' && p[i + 1] <= '9')) return false;
            continue;
        }
        buf[k++] = p[i];
    }
    buf[k] = 0;
    const char *s = buf + (buf[0] == '+' || buf[0] == '-');
    if (!strcasecmp(s, "inf") || !strcasecmp(s, "infinity") || !strcasecmp(s, "nan")) {
        *out = strtod(buf, NULL);
        return true;
    }
    if (strchr(buf, 'x') || strchr(buf, 'X') || strchr(buf, 'p') || strchr(buf, 'P')) return false;
    char *end;
    errno = 0;
    *out = strtod(buf, &end);
    return *end == 0;
}

static bool parse_py_int(const char *p, size_t n, int base, int64_t *out) {
    char buf[128];
    size_t b = 0, e = n;
    while (b < e && (p[b] == ' ' || (p[b] >= '\t' && p[b] <= '\r'))) b++;
    while (e > b && (p[e - 1] == ' ' || (p[e - 1] >= '\t' && p[e - 1] <= '\r'))) e--;
    if (e == b || e - b >= sizeof buf) return false;
    size_t k = 0;
    for (size_t i = b; i < e; i++) if (p[i] != '_') buf[k++] = p[i];
    buf[k] = 0;
    const char *s = buf;
    bool neg = false;
    if (*s == '+' || *s == '-') neg = *s++ == '-';
    if (base == 0 || base == 16 || base == 8 || base == 2) {
        if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X') && (base == 0 || base == 16)) { s += 2; base = 16; }
        else if (s[0] == '0' && (s[1] == 'o' || s[1] == 'O') && (base == 0 || base == 8)) { s += 2; base = 8; }
        else if (s[0] == '0' && (s[1] == 'b' || s[1] == 'B') && (base == 0 || base == 2)) { s += 2; base = 2; }
        else if (base == 0) base = 10;
    }
    if (!*s || *s == '+' || *s == '-' || *s == ' ') return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, base);
    if (*end || errno || v > (unsigned long long)INT64_MAX) return false;
    *out = neg ? -(int64_t)v : (int64_t)v;
    return true;
}

static int f_int(jr *r, jv v, const jargs *a, jv *out) {
    CHECK(2, "int", "default", "base");
    jv d = jv_int(0), base = jv_int(10);
    ja_arg(a, 0, "default", &d);
    ja_arg(a, 1, "base", &base);
    int64_t x;
    double f;
    if (jv_is_intlike(v)) { *out = jv_int(jv_intval(v)); return 0; }
    if (v.k == JV_FLOAT) {
        if (isfinite(v.u.f) && fabs(v.u.f) < 9.2e18) { *out = jv_int((int64_t)v.u.f); return 0; }
        *out = d;
        return 0;
    }
    if (v.k == JV_STR) {
        if (parse_py_int(v.u.s->p, v.u.s->n, jv_is_intlike(base) ? (int)jv_intval(base) : 10, &x)) { *out = jv_int(x); return 0; }
        if (parse_py_float(v.u.s->p, v.u.s->n, &f) && isfinite(f) && fabs(f) < 9.2e18) { *out = jv_int((int64_t)f); return 0; }
    }
    *out = d;
    return 0;
}

static int f_float(jr *r, jv v, const jargs *a, jv *out) {
    CHECK(1, "float", "default");
    jv d = jv_float(0.0);
    ja_arg(a, 0, "default", &d);
    double f;
    if (jv_is_num(v)) { *out = jv_float(jv_num(v)); return 0; }
    if (v.k == JV_STR && parse_py_float(v.u.s->p, v.u.s->n, &f)) { *out = jv_float(f); return 0; }
    *out = d;
    return 0;
}

static int f_round(jr *r, jv v, const jargs *a, jv *out) {
    CHECK(2, "round", "precision", "method");
    jv pv = jv_int(0), mv = jv_none();
    ja_arg(a, 0, "precision", &pv);
    ja_arg(a, 1, "method", &mv);
    if (!jv_is_num(v)) return jr_fail(r, "TypeError", "type %s doesn't define __round__ method", jv_type_name(v));
    if (!jv_is_intlike(pv)) return jr_fail(r, "TypeError", "round() precision must be an integer");
    int64_t prec = jv_intval(pv);
    double x = jv_num(v);
    const char *method = "common";
    char mbuf[16];
    if (mv.k == JV_STR && mv.u.s->n < sizeof mbuf) { memcpy(mbuf, mv.u.s->p, mv.u.s->n); mbuf[mv.u.s->n] = 0; method = mbuf; }
    if (strcmp(method, "common") && strcmp(method, "ceil") && strcmp(method, "floor"))
        return jr_fail(r, "FilterArgumentError", "method must be common, ceil or floor");
    if (!isfinite(x)) { *out = jv_float(x); return 0; }
    if (!strcmp(method, "common")) {
        if (prec >= 0 && prec <= 20) {
            /* correctly rounded (half to even on the exact binary value), like Python's round() */
            char tmp[400];
            snprintf(tmp, sizeof tmp, "%.*f", (int)prec, x);
            *out = jv_float(strtod(tmp, NULL));
        } else if (prec > 20) *out = jv_float(x);
        else {
            double m = pow(10.0, (double)-prec), q = x / m, rq = nearbyint(q);
            *out = jv_float(rq * m);
        }
        return 0;
    }
    double m = pow(10.0, (double)prec);
    *out = jv_float((!strcmp(method, "ceil") ? ceil(x * m) : floor(x * m)) / m);
    return 0;
}

static int f_format(jr *r, jv v, const jargs *a, jv *out) {
    if (a->np && a->nk) return jr_fail(r, "FilterArgumentError", "can't handle positional and keyword arguments at the same time");
    jv s;
    if (str_of(r, v, &s)) return -1;
    jv args;
    if (a->nk) {
        jdict *d = jd_new(r);
        if (!d) return -1;
        for (int k = 0; k < a->nk; k++) if (jd_set_s(r, d, a->kn[k].p, a->kn[k].n, a->kv[k])) return -1;
        args.k = JV_DICT; args.flag = 0; args.u.d = d;
    } else {
        jlist *l = jl_new(r, (size_t)a->np);
        if (!l) return -1;
        for (int i = 0; i < a->np; i++) l->v[l->n++] = a->pos[i];
        args.k = JV_TUPLE; args.flag = 0; args.u.l = l;
    }
    return jm_percent_format(r, s, args, out);
}

/* transformers' tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None,
 * sort_keys=False) */
static int f_tojson(jr *r, jv v, const jargs *a, jv *out) {
    CHECK(4, "tojson", "ensure_ascii", "indent", "separators", "sort_keys");
    jv ea = jv_bool(0), ind = jv_none(), seps = jv_none(), sk = jv_bool(0);
    ja_arg(a, 0, "ensure_ascii", &ea);
    ja_arg(a, 1, "indent", &ind);
    ja_arg(a, 2, "separators", &seps);
    ja_arg(a, 3, "sort_keys", &sk);
    jjson_opts o = {.ensure_ascii = jv_truthy(ea), .sort_keys = jv_truthy(sk)};
    char spaces[64];
    if (ind.k == JV_STR) { o.indent = ind.u.s->p; o.indent_n = ind.u.s->n; }
    else if (jv_is_intlike(ind)) {
        int64_t n = jv_intval(ind);
        if (n < 0) n = 0;
        if (n > 60) return jr_fail(r, "ValueError", "tojson indent %" PRId64 " is too large", n);
        memset(spaces, ' ', (size_t)n);
        o.indent = spaces;
        o.indent_n = (size_t)n;
    } else if (ind.k != JV_NONE && ind.k != JV_UNDEF)
        return jr_fail(r, "TypeError", "tojson indent must be an int or a str");
    if (jv_is_seq(seps) && seps.u.l->n == 2 && seps.u.l->v[0].k == JV_STR && seps.u.l->v[1].k == JV_STR) {
        o.item_sep = seps.u.l->v[0].u.s->p; o.item_sep_n = seps.u.l->v[0].u.s->n;
        o.key_sep = seps.u.l->v[1].u.s->p; o.key_sep_n = seps.u.l->v[1].u.s->n;
    } else if (seps.k != JV_NONE && seps.k != JV_UNDEF) {
        return jr_fail(r, "ValueError", "tojson separators must be a pair of strings");
    } else {
        o.item_sep = o.indent ? "," : ", ";
        o.item_sep_n = o.indent ? 1 : 2;
        o.key_sep = ": ";
        o.key_sep_n = 2;
    }
    jbuf b;
    jb_init(&b, r->lim.max_output);
    if (jv_write_json(r, &b, v, &o, 0)) return -1;
    return jb_to_str(r, &b, out);
}

static int f_pprint(jr *r, jv v, const jargs *a, jv *out) {
    CHECK(0, "pprint", "");
    jbuf b;
    jb_init(&b, r->lim.max_output);
    if (jv_write_repr(r, &b, v)) return -1;
    return jb_to_str(r, &b, out);
}

/* ---------------------------------------------------------------- strings */

static int f_case(jr *r, jv v, const jargs *a, jv *out, int mode, const char *name) {
    if (ja_check(r, a, 0, NULL, name)) return -1;
    jv s;
    return str_of(r, v, &s) || js_case(r, s, mode, out);
}
static int f_upper(jr *r, jv v, const jargs *a, jv *out) { return f_case(r, v, a, out, 1, "upper"); }
static int f_lower(jr *r, jv v, const jargs *a, jv *out) { return f_case(r, v, a, out, 0, "lower"); }
static int f_capitalize(jr *r, jv v, const jargs *a, jv *out) { return f_case(r, v, a, out, 3, "capitalize"); }

/* jinja2's title: split on runs of [-\s({[<], upper-case the first character of every
 * piece and lower-case the rest (not Python's str.title). */
static int f_title(jr *r, jv v, const jargs *a, jv *out) {
    CHECK(0, "title", "");
    jv s;
    if (str_of(r, v, &s)) return -1;
    const char *p = s.u.s->p;
    size_t n = s.u.s->n;
    jbuf b;
    jb_init(&b, r->lim.max_output);
    size_t i = 0;
    while (i < n) {
        /* a piece is either a separator run or a run of anything else */
        size_t st = i;
        uint32_t cp;
        size_t k = u8_decode(p + i, n - i, &cp);
        bool sep = py_isspace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
        i += k;
        while (i < n) {
            k = u8_decode(p + i, n - i, &cp);
            bool s2 = py_isspace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
            if (s2 != sep) break;
            i += k;
        }
        jv piece, first, rest;
        size_t fl = u8_decode(p + st, n - st, &cp);
        if (jv_str(r, p + st, fl, &first) || jv_str(r, p + st + fl, i - st - fl, &rest)) return -1;
        if (js_case(r, first, 1, &first) || js_case(r, rest, 0, &rest)) return -1;
        (void)piece;
        if (jb_put(r, &b, first.u.s->p, first.u.s->n) || jb_put(r, &b, rest.u.s->p, rest.u.s->n)) return -1;
    }
    return jb_to_str(r, &b, out);
}

static int f_trim(jr *r, jv v, const jargs *a, jv *out) {
    CHECK(1, "trim", "chars");
    jv s, chars = jv_none();
    ja_arg(a, 0, "chars", &chars);
    return str_of(r, v, &s) || js_strip(r, s, chars, 3, out);
}

static int f_replace(jr *r, jv v, const jargs *a, jv *out) {
    CHECK(3, "replace", "old", "new", "count");
    jv s, old, nw, c = jv_none();
    if (!ja_arg(a, 0, "old", &old) || !ja_arg(a, 1, "new", &nw))
        return jr_fail(r, "TypeError", "replace() missing required arguments 'old' and 'new'");
    ja_arg(a, 2, "count", &c);
    if (str_of(r, v, &s) || str_of(r, old, &old) || str_of(r, nw, &nw)) return -1;
    int64_t count = jv_is_intlike(c) ? jv_intval(c) : -1;
    return js_replace(r, s, old, nw, count, out);
}

static int f_center(jr *r, jv v, const jargs *a, jv *out) {
    CHECK(1, "center", "width");
    jv s, w = jv_int(80);
    ja_arg(a, 0, "width", &w);
    if (!jv_is_intlike(w)) return jr_fail(r, "TypeError", "center() width must be an integer");
    return str_of(r, v, &s) || js_pad(r, s, jv_intval(w), " ", 1, 2, out);
}

static int f_indent(jr *r, jv v, const jargs *a, jv *out) {
    CHECK(3, "indent", "width", "first", "blank");
    jv s, w = jv_int(4), first = jv_bool(0), blank = jv_bool(0);
    ja_arg(a, 0, "width", &w);
    ja_arg(a, 1, "first", &first);
    ja_arg(a, 2, "blank", &blank);
    jv ind;
    if (w.k == JV_STR) ind = w;
    else if (jv_is_intlike(w)) {
        int64_t n = jv_intval(w);
        if (n < 0) n = 0;
        if ((uint64_t)n > 4096) return jr_fail(r, "ValueError", "indent width too large");
        char *sp = ja_alloc(&r->a, (size_t)n + 1);
        if (!sp) return jr_oom(r);
        memset(sp, ' ', (size_t)n);
        if (jv_str(r, sp, (size_t)n, &ind)) return -1;
    } else return jr_fail(r, "TypeError", "indent width must be an int or a str");
    if (str_of(r, v, &s)) return -1;
    /* s += "\n" then splitlines(): a quirk jinja2 relies on */
    jv s2;
    jv nl;
    if (jv_strz(r, "\n", &nl) || jr_binop(r, OP_ADD, s, nl, &s2)) return -1;
    jlist *lines;
    if (js_splitlines(r, s2, false, &lines)) return -1;
    jbuf b;
    jb_init(&b, r->lim.max_output);
    if (jv_truthy(first) && jb_put(r, &b, ind.u.s->p, ind.u.s->n)) return -1;
    for (size_t i = 0; i < lines->n; i++) {
        jv ln = lines->v[i];
        if (i) {
            if (jb_putc(r, &b, '\n')) return -1;
            if ((jv_truthy(blank) || ln.u.s->n) && jb_put(r, &b, ind.u.s->p, ind.u.s->n)) return -1;
        }
        if (jb_put(r, &b, ln.u.s->p, ln.u.s->n)) return -1;
    }
    return jb_to_str(r, &b, out);
}

static int f_truncate(jr *r, jv v, const jargs *a, jv *out) {
    CHECK(4, "truncate", "length", "killwords", "end", "leeway");
    jv s, lenv = jv_int(255), kw = jv_bool(0), end, lw = jv_int(5);
    if (!ja_arg(a, 2, "end", &end) && jv_strz(r, "...", &end)) return -1;
    ja_arg(a, 0, "length", &lenv);
    ja_arg(a, 1, "killwords", &kw);
    ja_arg(a, 3, "leeway", &lw);
    if (lw.k == JV_NONE) lw = jv_int(5);
    if (!jv_is_intlike(lenv) || !jv_is_intlike(lw) || end.k != JV_STR) return jr_fail(r, "TypeError", "bad truncate() arguments");
    if (str_of(r, v, &s)) return -1;
    int64_t length = jv_intval(lenv), leeway = jv_intval(lw);
    int64_t endlen = (int64_t)u8_len(end.u.s->p, end.u.s->n), slen = (int64_t)u8_len(s.u.s->p, s.u.s->n);
    if (length < endlen) return jr_fail(r, "AssertionError", "expected length >= %" PRId64 ", got %" PRId64, endlen, length);
    if (leeway < 0) return jr_fail(r, "AssertionError", "expected leeway >= 0, got %" PRId64, leeway);
    if (slen <= length + leeway) { *out = s; return 0; }
    size_t cut = u8_offset(s.u.s->p, s.u.s->n, (size_t)(length - endlen));
    jbuf b;
    jb_init(&b, r->lim.max_output);
    if (!jv_truthy(kw)) {
        /* rsplit(" ", 1)[0] */
        size_t k = cut;
        while (k > 0 && s.u.s->p[k - 1] != ' ') k--;
        if (k > 0) cut = k - 1;
    }
    if (jb_put(r, &b, s.u.s->p, cut) || jb_put(r, &b, end.u.s->p, end.u.s->n)) return -1;
    return jb_to_str(r, &b, out);
}

static int f_wordcount(jr *r, jv v, const jargs *a, jv *out) {
    CHECK(0, "wordcount", "");
    jv s;
    if (str_of(r, v, &s)) return -1;
    int64_t count = 0;
    bool in = false;
    for (size_t i = 0; i < s.u.s->n;) {
        uint32_t cp;
        i += u8_decode(s.u.s->p + i, s.u.s->n - i, &cp);
        int cat = utf8proc_category((utf8proc_int32_t)cp);
        bool w = cp == '_' || (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
                 (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO) ||
                 cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_MC;
        if (w && !in) count++;
        in = w;
    }
    *out = jv_int(count);
    return 0;
}

/* ---------------------------------------------------------------- tests */

static int t_defined(jr *r, jv v, const jargs *a, jv *out) { *out = jv_bool(v.k != JV_UNDEF); return 0; }
static int t_undefined(jr *r, jv v, const jargs *a, jv *out) { *out = jv_bool(v.k == JV_UNDEF); return 0; }
static int t_none(jr *r, jv v, const jargs *a, jv *out) { *out = jv_bool(v.k == JV_NONE); return 0; }
static int t_boolean(jr *r, jv v, const jargs *a, jv *out) { *out = jv_bool(v.k == JV_BOOL); return 0; }
static int t_true(jr *r, jv v, const jargs *a, jv *out) { *out = jv_bool(v.k == JV_BOOL && v.u.b); return 0; }
static int t_false(jr *r, jv v, const jargs *a, jv *out) { *out = jv_bool(v.k == JV_BOOL && !v.u.b); return 0; }
static int t_integer(jr *r, jv v, const jargs *a, jv *out) { *out = jv_bool(v.k == JV_INT); return 0; }
static int t_float(jr *r, jv v, const jargs *a, jv *out) { *out = jv_bool(v.k == JV_FLOAT); return 0; }
static int t_number(jr *r, jv v, const jargs *a, jv *out) { *out = jv_bool(jv_is_num(v)); return 0; }
static int t_string(jr *r, jv v, const jargs *a, jv *out) { *out = jv_bool(v.k == JV_STR); return 0; }
static int t_mapping(jr *r, jv v, const jargs *a, jv *out) { *out = jv_bool(v.k == JV_DICT); return 0; }
static int t_iterable(jr *r, jv v, const jargs *a, jv *out) {
    *out = jv_bool(v.k == JV_STR || v.k == JV_LIST || v.k == JV_TUPLE || v.k == JV_DICT || v.k == JV_UNDEF || v.k == JV_LOOP);
    return 0;
}
static int t_sequence(jr *r, jv v, const jargs *a, jv *out) {
    *out = jv_bool(v.k == JV_STR || v.k == JV_LIST || v.k == JV_TUPLE || v.k == JV_DICT || v.k == JV_UNDEF);
    return 0;
}
static int t_callable(jr *r, jv v, const jargs *a, jv *out) {
    *out = jv_bool(v.k == JV_FUNC || v.k == JV_MACRO || v.k == JV_UNDEF || v.k == JV_LOOP);
    return 0;
}
static int t_escaped(jr *r, jv v, const jargs *a, jv *out) { *out = jv_bool(0); return 0; }

static int t_parity(jr *r, jv v, jv *out, int want) {
    if (v.k == JV_UNDEF) return jr_undef_error(r, v);
    jv m;
    if (jr_binop(r, OP_MOD, v, jv_int(2), &m)) return -1;
    *out = jv_bool(jv_is_num(m) && jv_num(m) == want);
    return 0;
}
static int t_odd(jr *r, jv v, const jargs *a, jv *out) { return t_parity(r, v, out, 1); }
static int t_even(jr *r, jv v, const jargs *a, jv *out) { return t_parity(r, v, out, 0); }

static int t_divisibleby(jr *r, jv v, const jargs *a, jv *out) {
    jv n, m;
    if (!ja_arg(a, 0, "num", &n)) return jr_fail(r, "TypeError", "divisibleby() missing 1 required positional argument: 'num'");
    if (jr_binop(r, OP_MOD, v, n, &m)) return -1;
    *out = jv_bool(jv_is_num(m) && jv_num(m) == 0);
    return 0;
}

static int t_cmp(jr *r, jv v, const jargs *a, jv *out, int op) {
    jv other;
    if (!ja_arg(a, 0, "other", &other)) return jr_fail(r, "TypeError", "test missing 1 required positional argument: 'other'");
    if (op == CMP_EQ) { *out = jv_bool(jv_eq(v, other)); return 0; }
    if (op == CMP_NE) { *out = jv_bool(!jv_eq(v, other)); return 0; }
    int c;
    const char *name = op == CMP_LT ? "<" : op == CMP_LE ? "<=" : op == CMP_GT ? ">" : ">=";
    if (jv_cmp(r, v, other, &c, name)) return -1;
    if (c == 2) { *out = jv_bool(0); return 0; }
    *out = jv_bool(op == CMP_LT ? c < 0 : op == CMP_LE ? c <= 0 : op == CMP_GT ? c > 0 : c >= 0);
    return 0;
}
static int t_eq(jr *r, jv v, const jargs *a, jv *o) { return t_cmp(r, v, a, o, CMP_EQ); }
static int t_ne(jr *r, jv v, const jargs *a, jv *o) { return t_cmp(r, v, a, o, CMP_NE); }
static int t_lt(jr *r, jv v, const jargs *a, jv *o) { return t_cmp(r, v, a, o, CMP_LT); }
static int t_le(jr *r, jv v, const jargs *a, jv *o) { return t_cmp(r, v, a, o, CMP_LE); }
static int t_gt(jr *r, jv v, const jargs *a, jv *o) { return t_cmp(r, v, a, o, CMP_GT); }
static int t_ge(jr *r, jv v, const jargs *a, jv *o) { return t_cmp(r, v, a, o, CMP_GE); }

static int t_sameas(jr *r, jv v, const jargs *a, jv *out) {
    jv o;
    if (!ja_arg(a, 0, "other", &o)) return jr_fail(r, "TypeError", "sameas() missing 1 required positional argument: 'other'");
    bool same;
    if (v.k != o.k) same = false;
    else switch (v.k) {
        case JV_NONE: case JV_UNDEF: same = v.k == JV_NONE; break;
        case JV_BOOL: same = v.u.b == o.u.b; break;
        case JV_INT: same = v.u.i == o.u.i && v.u.i >= -5 && v.u.i <= 256; break;  /* CPython's small-int cache */
        case JV_STR: same = v.u.s == o.u.s || (v.u.s->p == o.u.s->p && v.u.s->n == o.u.s->n); break;
        case JV_FLOAT: same = false; break;
        default: same = v.u.s == o.u.s;
    }
    *out = jv_bool(same);
    return 0;
}

static int t_in(jr *r, jv v, const jargs *a, jv *out) {
    jv seq;
    if (!ja_arg(a, 0, "seq", &seq)) return jr_fail(r, "TypeError", "in() missing 1 required positional argument: 'seq'");
    bool res = false;
    if (seq.k == JV_STR) {
        if (v.k != JV_STR) return jr_fail(r, "TypeError", "'in <string>' requires string as left operand, not %s", jv_type_name(v));
        res = v.u.s->n == 0 || memmem(seq.u.s->p, seq.u.s->n, v.u.s->p, v.u.s->n);
    } else if (jv_is_seq(seq)) {
        for (size_t i = 0; i < seq.u.l->n && !res; i++) res = jv_eq(seq.u.l->v[i], v);
    } else if (seq.k == JV_DICT) {
        jv tmp;
        res = jv_hashable(v) && jd_get(seq.u.d, v, &tmp);
    } else if (seq.k != JV_UNDEF) {
        return jr_fail(r, "TypeError", "argument of type '%s' is not iterable", jv_type_name(seq));
    }
    *out = jv_bool(res);
    return 0;
}

static int t_case(jr *r, jv v, jv *out, bool upper) {
    jv s, fn;
    jargs none = {0};
    if (jv_to_str(r, v, &s)) return -1;
    if (jr_getattr(r, s, upper ? "isupper" : "islower", 7, &fn)) return -1;
    return jr_call(r, fn, &none, out);
}
static int t_lower(jr *r, jv v, const jargs *a, jv *out) { return t_case(r, v, out, false); }
static int t_upper(jr *r, jv v, const jargs *a, jv *out) { return t_case(r, v, out, true); }

static int t_filter(jr *r, jv v, const jargs *a, jv *out) {
    *out = jv_bool(v.k == JV_STR && jinja_find_filter(v.u.s->p, v.u.s->n));
    return 0;
}
static int t_test(jr *r, jv v, const jargs *a, jv *out) {
    *out = jv_bool(v.k == JV_STR && jinja_find_test(v.u.s->p, v.u.s->n));
    return 0;
}

/* ---------------------------------------------------------------- tables */

static const jfilter_def FILTERS[] = {
    {"abs", f_abs}, {"attr", f_attr}, {"batch", f_batch}, {"capitalize", f_capitalize},
    {"center", f_center}, {"count", f_length}, {"d", f_default}, {"default", f_default},
    {"dictsort", f_dictsort}, {"e", f_escape}, {"escape", f_escape}, {"first", f_first},
    {"float", f_float}, {"forceescape", f_escape}, {"format", f_format}, {"indent", f_indent},
    {"int", f_int}, {"items", f_items}, {"join", f_join}, {"last", f_last}, {"length", f_length},
    {"list", f_list}, {"lower", f_lower}, {"map", f_map}, {"max", f_max}, {"min", f_min},
    {"pprint", f_pprint}, {"reject", f_reject}, {"rejectattr", f_rejectattr}, {"replace", f_replace},
    {"reverse", f_reverse}, {"round", f_round}, {"safe", f_safe}, {"select", f_select},
    {"selectattr", f_selectattr}, {"sort", f_sort}, {"string", f_string}, {"sum", f_sum},
    {"title", f_title}, {"tojson", f_tojson}, {"trim", f_trim}, {"truncate", f_truncate},
    {"unique", f_unique}, {"upper", f_upper}, {"wordcount", f_wordcount}, {NULL, NULL}};

static const jfilter_def TESTS[] = {
    {"boolean", t_boolean}, {"callable", t_callable}, {"defined", t_defined},
    {"divisibleby", t_divisibleby}, {"eq", t_eq}, {"equalto", t_eq}, {"==", t_eq},
    {"escaped", t_escaped}, {"even", t_even}, {"false", t_false}, {"filter", t_filter},
    {"float", t_float}, {"ge", t_ge}, {">=", t_ge}, {"gt", t_gt}, {"greaterthan", t_gt}, {">", t_gt},
    {"in", t_in}, {"integer", t_integer}, {"iterable", t_iterable}, {"le", t_le}, {"<=", t_le},
    {"lower", t_lower}, {"lt", t_lt}, {"lessthan", t_lt}, {"<", t_lt}, {"mapping", t_mapping},
    {"ne", t_ne}, {"!=", t_ne}, {"none", t_none}, {"number", t_number}, {"odd", t_odd},
    {"sameas", t_sameas}, {"sequence", t_sequence}, {"string", t_string}, {"test", t_test},
    {"true", t_true}, {"undefined", t_undefined}, {"upper", t_upper}, {NULL, NULL}};

static const jfilter_def *find(const jfilter_def *t, const char *name, size_t n) {
    for (; t->name; t++)
        if (strlen(t->name) == n && !memcmp(t->name, name, n)) return t;
    return NULL;
}

const jfilter_def *jinja_find_filter(const char *name, size_t n) { return find(FILTERS, name, n); }
const jfilter_def *jinja_find_test(const char *name, size_t n) { return find(TESTS, name, n); }
