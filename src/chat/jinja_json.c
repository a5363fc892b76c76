/* jinja_json.c — JSON in (jansson -> values) and JSON out (Python's json.dumps).
 *
 * transformers replaces jinja2's tojson with json.dumps(x, ensure_ascii=False, indent=None,
 * separators=None, sort_keys=False), so the output must be byte-identical to Python's
 * encoder: ", " and ": " separators by default ("," and ": " once indent is given), floats
 * in repr form (1.0, 1e-05), NaN/Infinity spelled like Python, control characters as
 * \u00XX, everything else raw unless ensure_ascii. Dict keys that are numbers, booleans or
 * None are converted as Python does ("1", "true", "null").
 */
#include "chat/jinja_int.h"
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int jv_from_json(jr *r, const json_t *j, jv *out, int depth) {
    if (depth > JV_MAX_NEST) return jr_fail(r, "LimitError", "input JSON nested more than %d levels", JV_MAX_NEST);
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        jdict *d = jd_new(r);
        if (!d) return -1;
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)j, key, val) {
            jv v;
            if (jv_from_json(r, val, &v, depth + 1)) return -1;
            if (jd_set_s(r, d, key, strlen(key), v)) return -1;
        }
        out->k = JV_DICT;
        out->flag = 0;
        out->u.d = d;
        return 0;
    }
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        jlist *l = jl_new(r, n);
        if (!l) return -1;
        for (size_t i = 0; i < n; i++)
            if (jv_from_json(r, json_array_get(j, i), &l->v[l->n++], depth + 1)) return -1;
        out->k = JV_LIST;
        out->flag = 0;
        out->u.l = l;
        return 0;
    }
    case JSON_STRING: return jv_str(r, json_string_value(j), json_string_length(j), out);
    case JSON_INTEGER: *out = jv_int((int64_t)json_integer_value(j)); return 0;
    case JSON_REAL: *out = jv_float(json_real_value(j)); return 0;
    case JSON_TRUE: *out = jv_bool(1); return 0;
    case JSON_FALSE: *out = jv_bool(0); return 0;
    default: *out = jv_none(); return 0;
    }
}

static int write_json_string(jr *r, jbuf *b, const char *p, size_t n, bool ascii) {
    if (jb_putc(r, b, '"')) return -1;
    size_t i = 0, run = 0;
    while (i < n) {
        unsigned char c = (unsigned char)p[i];
        const char *esc = NULL;
        char tmp[16];
        size_t k = 1;
        if (c == '"') esc = "\\\"";
        else if (c == '\\') esc = "\\\\";
        else if (c == '\n') esc = "\\n";
        else if (c == '\r') esc = "\\r";
        else if (c == '\t') esc = "\\t";
        else if (c == '\b') esc = "\\b";
        else if (c == '\f') esc = "\\f";
        else if (c < 0x20) { snprintf(tmp, sizeof tmp, "\\u%04x", c); esc = tmp; }
        else if (c >= 0x80 && ascii) {
            uint32_t cp;
            k = u8_decode(p + i, n - i, &cp);
            if (cp >= 0x10000) {
                uint32_t v = cp - 0x10000;
                snprintf(tmp, sizeof tmp, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
            } else snprintf(tmp, sizeof tmp, "\\u%04x", cp);
            esc = tmp;
        }
        if (esc) {
            if (run && jb_put(r, b, p + i - run, run)) return -1;
            run = 0;
            if (jb_puts(r, b, esc)) return -1;
            i += k;
        } else {
            run++;
            i++;
        }
    }
    if (run && jb_put(r, b, p + n - run, run)) return -1;
    return jb_putc(r, b, '"');
}

static int json_float(jr *r, jbuf *b, double f) {
    char tmp[40];
    if (isnan(f)) return jb_puts(r, b, "NaN");
    if (isinf(f)) return jb_puts(r, b, f < 0 ? "-Infinity" : "Infinity");
    jv_float_repr(f, tmp);
    return jb_puts(r, b, tmp);
}

static int newline_indent(jr *r, jbuf *b, const jjson_opts *o, int level) {
    if (jb_putc(r, b, '\n')) return -1;
    for (int i = 0; i < level; i++)
        if (jb_put(r, b, o->indent, o->indent_n)) return -1;
    return 0;
}

/* Python's json key coercion. */
static int json_key(jr *r, jv k, jv *out) {
    char tmp[64];
    switch (k.k) {
    case JV_STR: *out = k; return 0;
    case JV_BOOL: return jv_strz(r, k.u.b ? "true" : "false", out);
    case JV_NONE: return jv_strz(r, "null", out);
    case JV_INT: snprintf(tmp, sizeof tmp, "%" PRId64, k.u.i); return jv_strdup(r, tmp, strlen(tmp), out);
    case JV_FLOAT:
        if (isnan(k.u.f)) return jv_strz(r, "NaN", out);
        if (isinf(k.u.f)) return jv_strz(r, k.u.f < 0 ? "-Infinity" : "Infinity", out);
        jv_float_repr(k.u.f, tmp);
        return jv_strdup(r, tmp, strlen(tmp), out);
    default:
        return jr_fail(r, "TypeError", "keys must be str, int, float, bool or None, not %s", jv_type_name(k));
    }
}

int jv_write_json(jr *r, jbuf *b, jv v, const jjson_opts *o, int depth) {
    if (depth > JV_MAX_NEST) return jr_fail(r, "ValueError", "Circular reference detected");
    switch (v.k) {
    case JV_NONE: return jb_puts(r, b, "null");
    case JV_BOOL: return jb_puts(r, b, v.u.b ? "true" : "false");
    case JV_INT: { char tmp[32]; snprintf(tmp, sizeof tmp, "%" PRId64, v.u.i); return jb_puts(r, b, tmp); }
    case JV_FLOAT: return json_float(r, b, v.u.f);
    case JV_STR: return write_json_string(r, b, v.u.s->p, v.u.s->n, o->ensure_ascii);
    case JV_LIST: case JV_TUPLE: {
        if (v.u.l->n == 0) return jb_puts(r, b, "[]");
        if (jb_putc(r, b, '[')) return -1;
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i && jb_put(r, b, o->item_sep, o->item_sep_n)) return -1;
            if (o->indent && newline_indent(r, b, o, depth + 1)) return -1;
            if (jv_write_json(r, b, v.u.l->v[i], o, depth + 1)) return -1;
        }
        if (o->indent && newline_indent(r, b, o, depth)) return -1;
        return jb_putc(r, b, ']');
    }
    case JV_DICT: {
        const jdict *d = v.u.d;
        if (d->n == 0) return jb_puts(r, b, "{}");
        size_t *order = ja_alloc(&r->a, d->n * sizeof *order);
        if (!order) return jr_oom(r);
        for (size_t i = 0; i < d->n; i++) order[i] = i;
        if (o->sort_keys) {
            /* stable insertion sort by Python ordering of the keys; O(n^2) worst case, and
             * n is a dict's size, bounded by the memory cap */
            for (size_t i = 1; i < d->n; i++) {
                size_t x = order[i], j = i;
                while (j > 0) {
                    int c;
                    if (jv_cmp(r, d->k[order[j - 1]], d->k[x], &c, "<")) return -1;
                    if (c <= 0) break;
                    order[j] = order[j - 1];
                    j--;
                }
                order[j] = x;
            }
        }
        if (jb_putc(r, b, '{')) return -1;
        for (size_t i = 0; i < d->n; i++) {
            jv k;
            if (json_key(r, d->k[order[i]], &k)) return -1;
            if (i && jb_put(r, b, o->item_sep, o->item_sep_n)) return -1;
            if (o->indent && newline_indent(r, b, o, depth + 1)) return -1;
            if (write_json_string(r, b, k.u.s->p, k.u.s->n, o->ensure_ascii)) return -1;
            if (jb_put(r, b, o->key_sep, o->key_sep_n)) return -1;
            if (jv_write_json(r, b, d->v[order[i]], o, depth + 1)) return -1;
        }
        if (o->indent && newline_indent(r, b, o, depth)) return -1;
        return jb_putc(r, b, '}');
    }
    default:
        return jr_fail(r, "TypeError", "Object of type %s is not JSON serializable",
                       v.k == JV_NS ? "Namespace" : v.k == JV_MACRO ? "Macro" : jv_type_name(v));
    }
}
