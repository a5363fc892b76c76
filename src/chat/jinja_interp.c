/* jinja_interp.c — walks the syntax tree and writes the output.
 *
 * Scoping follows what jinja2's compiler produces, not what its docs summarize:
 *   - every for-loop iteration runs in a fresh scope whose lookups fall through to the
 *     enclosing one, so a `{% set %}` in a loop body is gone at the next iteration and
 *     after the loop (namespace() objects are how templates carry state out);
 *   - `if` bodies do not open a scope; `with`, macro bodies, call blocks and for-else do;
 *   - a macro sees the scope it was defined in (at call time), plus its arguments,
 *     `varargs`, `kwargs` and `caller`.
 * Undefined values behave like jinja2's default Undefined: they print as nothing, are
 * false, iterate as empty, and raise UndefinedError on attribute access, calls and
 * arithmetic.
 *
 * Statements return 0, -1 (error, message in r->e), or EXEC_BREAK / EXEC_CONTINUE which
 * travel up to the innermost loop. Recursion (nested expressions, macro calls) is counted
 * in r->depth and capped, so no template can exhaust the C stack.
 */
#include "chat/jinja_int.h"
#include <inttypes.h>
#include <pthread.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXEC_BREAK 1
#define EXEC_CONTINUE 2
/* Frames of eval/exec recursion allowed per unit of lim.max_depth. */
#define FRAMES_PER_DEPTH 10

static int eval(jr *r, const jnode *n, jv *out);
static int exec_node(jr *r, const jnode *n);

static void at(jr *r, const jnode *n) {
    r->line = n->line;
    r->col = n->col;
}

static int enter(jr *r) {
    if (++r->depth > r->lim.max_depth * FRAMES_PER_DEPTH)
        return jr_fail(r, "LimitError", "maximum recursion depth exceeded");
    /* and the stack itself: how many bytes a level takes depends on the build (an -O0
     * sanitizer build's frames are several times a release build's), the thread's stack on
     * who called us; the frame count alone let a self-calling macro overflow an ASan build */
    if ((uintptr_t)__builtin_frame_address(0) < r->stack_floor)
        return jr_fail(r, "LimitError", "maximum recursion depth exceeded (the thread's stack is nearly used up)");
    return 0;
}

/* The lowest stack address a render may reach: the calling thread's stack bottom plus a
 * margin for what runs below the deepest eval (printf, jansson, the arena; a quarter of the
 * stack, at most 256 KiB), or, when the stack's extent is unknown, 1 MiB below the caller. */
static uintptr_t stack_floor_find(int *known) {
    uintptr_t here = (uintptr_t)__builtin_frame_address(0);
    pthread_attr_t at;
    void *lo = NULL;
    size_t size = 0;
    if (pthread_getattr_np(pthread_self(), &at) == 0) {
        if (pthread_attr_getstack(&at, &lo, &size)) lo = NULL;
        pthread_attr_destroy(&at);
    }
    size_t margin = size / 4 < ((size_t)256 << 10) ? size / 4 : (size_t)256 << 10;
    *known = lo && here > (uintptr_t)lo + margin;
    if (*known) return (uintptr_t)lo + margin;
    return here > (1u << 20) ? here - (1u << 20) : 0;
}

/* Once per thread: a thread's stack does not move, and pthread_getattr_np reads
 * /proc/self/maps for the main thread (the unknown-extent fallback is per call: it depends on
 * where the caller stands). */
static uintptr_t stack_floor(void) {
    static __thread uintptr_t lowest;
    static __thread int known;
    if (known) return lowest;
    uintptr_t f = stack_floor_find(&known);
    if (known) lowest = f;
    return f;
}

/* ---------------------------------------------------------------- scopes */

static jscope *scope_push(jr *r) {
    jscope *s = ja_alloc(&r->a, sizeof *s);
    if (!s) { jr_oom(r); return NULL; }
    s->parent = r->sc;
    r->sc = s;
    return s;
}

static bool lookup(jr *r, const char *p, size_t n, jv *out) {
    for (jscope *s = r->sc; s; s = s->parent)
        if (s->vars.n && jd_get_s(&s->vars, p, n, out)) return true;
    return jd_get_s(r->globals, p, n, out);
}

/* Names come from the (immutable) tree, so the key can point at the node's string: no
 * allocation per assignment, which matters for long loops. */
static int assign_name(jr *r, const jstr *name, jv v) {
    jv k = {JV_STR, 0, {0}};
    k.u.s = (jstr *)name;
    return jd_set(r, &r->sc->vars, k, v);
}

static jstr LOOP_NAME = {4, "loop"};

int jr_undef_error(jr *r, jv u) {
    if (u.flag == 1) return jr_fail(r, "SecurityError", "%s", u.u.undef ? u.u.undef : "unsafe access");
    return jr_fail(r, "UndefinedError", "%s", u.u.undef ? u.u.undef : "value is undefined");
}

/* ---------------------------------------------------------------- iteration */

int jr_iterate(jr *r, jv v, jlist **out) {
    switch (v.k) {
    case JV_LIST: case JV_TUPLE: {
        /* Lists cannot change under an immutable sandbox, so iterate them in place; with
         * allow_mutation a loop works on a snapshot (Python would see appends live). */
        if (!r->opt.allow_mutation) { *out = v.u.l; return 0; }
        jlist *l = jl_new(r, v.u.l->n);
        if (!l) return -1;
        if (v.u.l->n) memcpy(l->v, v.u.l->v, v.u.l->n * sizeof(jv));
        l->n = v.u.l->n;
        *out = l;
        return 0;
    }
    case JV_DICT: {
        jlist *l = jl_new(r, v.u.d->n);
        if (!l) return -1;
        if (v.u.d->n) memcpy(l->v, v.u.d->k, v.u.d->n * sizeof(jv));
        l->n = v.u.d->n;
        *out = l;
        return 0;
    }
    case JV_STR: {
        const char *p = v.u.s->p;
        size_t n = v.u.s->n;
        jlist *l = jl_new(r, u8_len(p, n));
        if (!l) return -1;
        for (size_t i = 0; i < n;) {
            uint32_t cp;
            size_t k = u8_decode(p + i, n - i, &cp);
            if (jv_str(r, p + i, k, &l->v[l->n++])) return -1;
            i += k;
        }
        *out = l;
        return 0;
    }
    case JV_UNDEF:
        if (v.flag == 1) return jr_undef_error(r, v);
        *out = jl_new(r, 0);
        return *out ? 0 : -1;
    default:
        return jr_fail(r, "TypeError", "'%s' object is not iterable", jv_type_name(v));
    }
}

/* ---------------------------------------------------------------- arithmetic */

static int type_err2(jr *r, const char *op, jv a, jv b) {
    return jr_fail(r, "TypeError", "unsupported operand type(s) for %s: '%s' and '%s'", op, jv_type_name(a),
                   jv_type_name(b));
}

static int overflow(jr *r) { return jr_fail(r, "OverflowError", "integer result does not fit in 64 bits"); }

static int repeat(jr *r, jv seq, int64_t times, jv *out) {
    if (times < 0) times = 0;
    if (seq.k == JV_STR) {
        size_t n = seq.u.s->n;
        if (n && (uint64_t)times > (r->lim.max_memory / n)) return jr_oom(r);
        char *buf = ja_alloc(&r->a, n * (size_t)times + 1);
        if (!buf) return jr_oom(r);
        for (int64_t i = 0; i < times; i++) memcpy(buf + (size_t)i * n, seq.u.s->p, n);
        return jv_str(r, buf, n * (size_t)times, out);
    }
    size_t n = seq.u.l->n;
    if (n && (uint64_t)times > (r->lim.max_memory / sizeof(jv) / n)) return jr_oom(r);
    jlist *l = jl_new(r, n * (size_t)times);
    if (!l) return -1;
    for (int64_t i = 0; i < times; i++)
        for (size_t k = 0; k < n; k++) l->v[l->n++] = seq.u.l->v[k];
    out->k = seq.k;
    out->flag = 0;
    out->u.l = l;
    return 0;
}

int jr_binop(jr *r, int op, jv a, jv b, jv *out) {
    static const char *const names[] = {"", "+", "-", "*", "/", "//", "%", "**"};
    if (a.k == JV_UNDEF) return jr_undef_error(r, a);
    if (b.k == JV_UNDEF) return jr_undef_error(r, b);
    bool ints = jv_is_intlike(a) && jv_is_intlike(b), nums = jv_is_num(a) && jv_is_num(b);
    int64_t x = ints ? jv_intval(a) : 0, y = ints ? jv_intval(b) : 0, z;
    switch (op) {
    case OP_ADD:
        if (ints) { if (__builtin_add_overflow(x, y, &z)) return overflow(r); *out = jv_int(z); return 0; }
        if (nums) { *out = jv_float(jv_num(a) + jv_num(b)); return 0; }
        if (a.k == JV_STR && b.k == JV_STR) {
            size_t n = a.u.s->n + b.u.s->n;
            char *buf = ja_alloc(&r->a, n + 1);
            if (!buf) return jr_oom(r);
            memcpy(buf, a.u.s->p, a.u.s->n);
            memcpy(buf + a.u.s->n, b.u.s->p, b.u.s->n);
            return jv_str(r, buf, n, out);
        }
        if ((a.k == JV_LIST || a.k == JV_TUPLE) && a.k == b.k) {
            jlist *l = jl_new(r, a.u.l->n + b.u.l->n);
            if (!l) return -1;
            if (a.u.l->n) memcpy(l->v, a.u.l->v, a.u.l->n * sizeof(jv));
            if (b.u.l->n) memcpy(l->v + a.u.l->n, b.u.l->v, b.u.l->n * sizeof(jv));
            l->n = a.u.l->n + b.u.l->n;
            out->k = a.k;
            out->flag = 0;
            out->u.l = l;
            return 0;
        }
        if (a.k == JV_STR || a.k == JV_LIST || a.k == JV_TUPLE)
            return jr_fail(r, "TypeError", "can only concatenate %s (not \"%s\") to %s", jv_type_name(a),
                           jv_type_name(b), jv_type_name(a));
        return type_err2(r, "+", a, b);
    case OP_SUB:
        if (ints) { if (__builtin_sub_overflow(x, y, &z)) return overflow(r); *out = jv_int(z); return 0; }
        if (nums) { *out = jv_float(jv_num(a) - jv_num(b)); return 0; }
        return type_err2(r, "-", a, b);
    case OP_MUL:
        if (ints) { if (__builtin_mul_overflow(x, y, &z)) return overflow(r); *out = jv_int(z); return 0; }
        if (nums) { *out = jv_float(jv_num(a) * jv_num(b)); return 0; }
        if ((a.k == JV_STR || jv_is_seq(a)) && jv_is_intlike(b)) return repeat(r, a, jv_intval(b), out);
        if ((b.k == JV_STR || jv_is_seq(b)) && jv_is_intlike(a)) return repeat(r, b, jv_intval(a), out);
        if (a.k == JV_STR || jv_is_seq(a) || b.k == JV_STR || jv_is_seq(b))
            return jr_fail(r, "TypeError", "can't multiply sequence by non-int of type '%s'",
                           jv_type_name(a.k == JV_STR || jv_is_seq(a) ? b : a));
        return type_err2(r, "*", a, b);
    case OP_DIV:
        if (!nums) return type_err2(r, "/", a, b);
        if (jv_num(b) == 0) return jr_fail(r, "ZeroDivisionError", "division by zero");
        *out = jv_float(jv_num(a) / jv_num(b));
        return 0;
    case OP_FLOORDIV:
        if (ints) {
            if (y == 0) return jr_fail(r, "ZeroDivisionError", "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) return overflow(r);
            z = x / y;
            if ((x % y != 0) && ((x < 0) != (y < 0))) z--;
            *out = jv_int(z);
            return 0;
        }
        if (!nums) return type_err2(r, "//", a, b);
        if (jv_num(b) == 0) return jr_fail(r, "ZeroDivisionError", "float floor division by zero");
        *out = jv_float(floor(jv_num(a) / jv_num(b)));
        return 0;
    case OP_MOD:
        if (a.k == JV_STR) return jm_percent_format(r, a, b, out);
        if (ints) {
            if (y == 0) return jr_fail(r, "ZeroDivisionError", "integer modulo by zero");
            if (y == -1) { *out = jv_int(0); return 0; }
            z = x % y;
            if (z != 0 && ((z < 0) != (y < 0))) z += y;
            *out = jv_int(z);
            return 0;
        }
        if (!nums) return type_err2(r, "%", a, b);
        {
            double fa = jv_num(a), fb = jv_num(b);
            if (fb == 0) return jr_fail(r, "ZeroDivisionError", "float modulo");
            double m = fmod(fa, fb);
            if (m != 0 && ((m < 0) != (fb < 0))) m += fb;
            *out = jv_float(m);
            return 0;
        }
    case OP_POW:
        if (ints && y >= 0) {
            int64_t res = 1, base = x, e = y;
            while (e) {
                if (e & 1) { if (__builtin_mul_overflow(res, base, &res)) return overflow(r); }
                e >>= 1;
                if (e && __builtin_mul_overflow(base, base, &base)) return overflow(r);
            }
            *out = jv_int(res);
            return 0;
        }
        if (!nums) return type_err2(r, "** or pow()", a, b);
        if (jv_num(a) == 0 && jv_num(b) < 0)
            return jr_fail(r, "ZeroDivisionError", "0.0 cannot be raised to a negative power");
        *out = jv_float(pow(jv_num(a), jv_num(b)));
        return 0;
    }
    return jr_fail(r, "TypeError", "unknown operator %s", op < 8 ? names[op] : "?");
}

static int contains(jr *r, jv item, jv container, bool *res) {
    switch (container.k) {
    case JV_STR:
        if (item.k == JV_UNDEF) return jr_undef_error(r, item);
        if (item.k != JV_STR)
            return jr_fail(r, "TypeError", "'in <string>' requires string as left operand, not %s", jv_type_name(item));
        *res = item.u.s->n == 0 || memmem(container.u.s->p, container.u.s->n, item.u.s->p, item.u.s->n) != NULL;
        return 0;
    case JV_LIST: case JV_TUPLE:
        *res = false;
        for (size_t i = 0; i < container.u.l->n; i++)
            if (jv_eq(container.u.l->v[i], item)) { *res = true; break; }
        return 0;
    case JV_DICT:
        if (!jv_hashable(item)) return jr_fail(r, "TypeError", "unhashable type: '%s'", jv_type_name(item));
        { jv tmp; *res = jd_get(container.u.d, item, &tmp); }
        return 0;
    case JV_UNDEF:
        if (container.flag == 1) return jr_undef_error(r, container);
        *res = false;
        return 0;
    default:
        return jr_fail(r, "TypeError", "argument of type '%s' is not iterable", jv_type_name(container));
    }
}

static int compare(jr *r, int op, jv a, jv b, bool *res) {
    int c;
    switch (op) {
    case CMP_EQ: *res = jv_eq(a, b); return 0;
    case CMP_NE: *res = !jv_eq(a, b); return 0;
    case CMP_IN: return contains(r, a, b, res);
    case CMP_NOTIN: if (contains(r, a, b, res)) return -1; *res = !*res; return 0;
    }
    const char *name = op == CMP_LT ? "<" : op == CMP_LE ? "<=" : op == CMP_GT ? ">" : ">=";
    if (jv_cmp(r, a, b, &c, name)) return -1;
    if (c == 2) { *res = false; return 0; }  /* NaN */
    *res = op == CMP_LT ? c < 0 : op == CMP_LE ? c <= 0 : op == CMP_GT ? c > 0 : c >= 0;
    return 0;
}

/* ---------------------------------------------------------------- attribute and item access */

static jv no_attr(jr *r, jv obj, const char *name, size_t n) {
    if (obj.k == JV_NONE) return jv_undeff(r, "'None' has no attribute '%.*s'", (int)n, name);
    if (obj.k == JV_NS) return jv_undeff(r, "'jinja2.utils.Namespace object' has no attribute '%.*s'", (int)n, name);
    return jv_undeff(r, "'%s object' has no attribute '%.*s'", jv_type_name(obj), (int)n, name);
}

int jr_getattr(jr *r, jv obj, const char *name, size_t n, jv *out) {
    if (obj.k == JV_UNDEF) return jr_undef_error(r, obj);
    bool found = false;
    if (obj.k == JV_NS) {
        if (jd_get_s(obj.u.d, name, n, out)) return 0;
        *out = no_attr(r, obj, name, n);
        return 0;
    }
    /* Python attributes (methods) first, then items: `d.items` is the method even when the
     * dict has an "items" key, as in jinja2's sandboxed getattr. */
    if (jm_method(r, obj, name, n, out, &found)) return -1;
    if (found) return 0;
    if (obj.k == JV_DICT && jd_get_s(obj.u.d, name, n, out)) return 0;
    *out = no_attr(r, obj, name, n);
    return 0;
}

int jr_getitem(jr *r, jv obj, jv key, jv *out) {
    if (obj.k == JV_UNDEF) return jr_undef_error(r, obj);
    switch (obj.k) {
    case JV_DICT:
        if (jv_hashable(key) && jd_get(obj.u.d, key, out)) return 0;
        break;
    case JV_LIST: case JV_TUPLE: case JV_STR:
        if (jv_is_intlike(key)) {
            int64_t i = jv_intval(key);
            size_t len = obj.k == JV_STR ? u8_len(obj.u.s->p, obj.u.s->n) : obj.u.l->n;
            if (i < 0) i += (int64_t)len;
            if (i >= 0 && (uint64_t)i < len) {
                if (obj.k != JV_STR) { *out = obj.u.l->v[i]; return 0; }
                size_t off = u8_offset(obj.u.s->p, obj.u.s->n, (size_t)i);
                uint32_t cp;
                size_t k = u8_decode(obj.u.s->p + off, obj.u.s->n - off, &cp);
                return jv_str(r, obj.u.s->p + off, k, out);
            }
            *out = jv_undeff(r, "%s object has no element %" PRId64, jv_type_name(obj), jv_intval(key));
            return 0;
        }
        break;
    default: break;
    }
    if (key.k == JV_STR) return jr_getattr(r, obj, key.u.s->p, key.u.s->n, out);
    if (obj.k == JV_NONE) { *out = jv_undeff(r, "None has no element"); return 0; }
    jbuf b;
    jb_init(&b, r->lim.max_output);
    if (jv_write_repr(r, &b, key)) return -1;
    *out = jv_undeff(r, "%s object has no element %s", jv_type_name(obj), b.p ? b.p : "");
    return 0;
}

/* Python's slice index arithmetic (PySlice_AdjustIndices). */
static int slice_value(jr *r, jv obj, jv vs, jv ve, jv vst, jv *out) {
    if (obj.k == JV_UNDEF) return jr_undef_error(r, obj);
    if (obj.k != JV_STR && obj.k != JV_LIST && obj.k != JV_TUPLE) {
        if (obj.k == JV_DICT) return jr_fail(r, "TypeError", "unhashable type: 'slice'");
        return jr_fail(r, "TypeError", "'%s' object is not subscriptable", jv_type_name(obj));
    }
    jv parts[3] = {vs, ve, vst};
    for (int i = 0; i < 3; i++)
        if (parts[i].k != JV_NONE && !jv_is_intlike(parts[i]))
            return jr_fail(r, "TypeError", "slice indices must be integers or None or have an __index__ method");
    int64_t step = vst.k == JV_NONE ? 1 : jv_intval(vst);
    if (step == 0) return jr_fail(r, "ValueError", "slice step cannot be zero");
    bool ascii = true;
    if (obj.k == JV_STR)
        for (size_t i = 0; i < obj.u.s->n; i++)
            if ((unsigned char)obj.u.s->p[i] >= 0x80) { ascii = false; break; }
    int64_t len = obj.k == JV_STR ? (int64_t)(ascii ? obj.u.s->n : u8_len(obj.u.s->p, obj.u.s->n)) : (int64_t)obj.u.l->n;
    int64_t start, stop;
    if (vs.k == JV_NONE) start = step < 0 ? len - 1 : 0;
    else {
        start = jv_intval(vs);
        if (start < 0) { start += len; if (start < 0) start = step < 0 ? -1 : 0; }
        else if (start >= len) start = step < 0 ? len - 1 : len;
    }
    if (ve.k == JV_NONE) stop = step < 0 ? -1 : len;
    else {
        stop = jv_intval(ve);
        if (stop < 0) { stop += len; if (stop < 0) stop = step < 0 ? -1 : 0; }
        else if (stop >= len) stop = step < 0 ? len - 1 : len;
    }
    int64_t count = 0;
    if (step > 0 && start < stop) count = (stop - start - 1) / step + 1;
    else if (step < 0 && stop < start) count = (start - stop - 1) / (-step) + 1;
    if (obj.k == JV_STR) {
        if (ascii && step == 1) return jv_str(r, obj.u.s->p + start, (size_t)count, out);
        /* decode offsets once: O(n) */
        size_t n = obj.u.s->n;
        size_t *offs = ja_alloc(&r->a, ((size_t)len + 1) * sizeof *offs);
        char *buf = ja_alloc(&r->a, n + 1);
        if (!offs || !buf) return jr_oom(r);
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if (((unsigned char)obj.u.s->p[i] & 0xC0) != 0x80) offs[k++] = i;
        offs[k] = n;
        size_t o = 0;
        for (int64_t c = 0, i = start; c < count; c++, i += step) {
            size_t cl = offs[i + 1] - offs[i];
            memcpy(buf + o, obj.u.s->p + offs[i], cl);
            o += cl;
        }
        return jv_str(r, buf, o, out);
    }
    jlist *l = jl_new(r, (size_t)count);
    if (!l) return -1;
    for (int64_t c = 0, i = start; c < count; c++, i += step) l->v[l->n++] = obj.u.l->v[i];
    out->k = obj.k;
    out->flag = 0;
    out->u.l = l;
    return 0;
}

/* ---------------------------------------------------------------- calls */

static int eval_args(jr *r, const jnode *n, jargs *a, int extra_kw) {
    memset(a, 0, sizeof *a);
    size_t np = (size_t)n->nv, nk = (size_t)n->nk + (size_t)extra_kw;
    jv star = {0}, dstar = {0};
    if (n->c) {
        if (eval(r, n->c, &star)) return -1;
        if (star.k != JV_UNDEF) {
            jlist *l;
            if (jr_iterate(r, star, &l)) return -1;
            star.k = JV_LIST;
            star.u.l = l;
            np += l->n;
        } else star.k = JV_LIST, star.u.l = NULL;
    }
    if (n->d) {
        if (eval(r, n->d, &dstar)) return -1;
        if (dstar.k != JV_DICT && dstar.k != JV_UNDEF)
            return jr_fail(r, "TypeError", "argument after ** must be a mapping, not %s", jv_type_name(dstar));
        if (dstar.k == JV_DICT) nk += dstar.u.d->n;
    }
    a->pos = ja_alloc(&r->a, (np + 1) * sizeof(jv));
    a->kn = ja_alloc(&r->a, (nk + 1) * sizeof(jstr));
    a->kv = ja_alloc(&r->a, (nk + 1) * sizeof(jv));
    if (!a->pos || !a->kn || !a->kv) return jr_oom(r);
    for (int i = 0; i < n->nv; i++)
        if (eval(r, n->v[i], &a->pos[a->np++])) return -1;
    if (n->c && star.u.l)
        for (size_t i = 0; i < star.u.l->n; i++) a->pos[a->np++] = star.u.l->v[i];
    for (int i = 0; i < n->nk; i++) {
        a->kn[a->nk] = n->kn[i];
        if (eval(r, n->kv[i], &a->kv[a->nk++])) return -1;
    }
    if (dstar.k == JV_DICT)
        for (size_t i = 0; i < dstar.u.d->n; i++) {
            jv k = dstar.u.d->k[i];
            if (k.k != JV_STR) return jr_fail(r, "TypeError", "keywords must be strings");
            a->kn[a->nk] = *k.u.s;
            a->kv[a->nk++] = dstar.u.d->v[i];
        }
    return 0;
}

static int exec_body_capture(jr *r, const jnode *body, jv *out);
static int run_for(jr *r, const jnode *n, jlist *items, int depth0, jscope *outer);

static int call_macro(jr *r, jmacro *m, const jargs *a, jv *out) {
    const jnode *d = m->def;
    const char *mname = d->kind == NS_CALLBLOCK ? "caller" : NULL;
    char namebuf[80];
    if (!mname) {
        snprintf(namebuf, sizeof namebuf, "%.*s", (int)(d->name.n > 60 ? 60 : d->name.n), d->name.p);
        mname = namebuf;
    }
    bool want_kwargs = d->op & 1, want_varargs = d->op & 2, want_caller = d->op & 4;
    if (a->np > d->nv && !want_varargs)
        return jr_fail(r, "TypeError", "macro '%s' takes not more than %d argument(s)", mname, d->nv);
    jscope *saved = r->sc;
    r->sc = m->closure;
    jscope *s = scope_push(r);
    if (!s) { r->sc = saved; return -1; }
    bool *used = ja_alloc(&r->a, (size_t)a->nk + 1);
    if (!used) { r->sc = saved; return jr_oom(r); }
    int rc = -1;
    /* arguments: positional, then keywords, then defaults (evaluated in the macro scope,
     * so a default can use an earlier argument), then undefined */
    for (int i = 0; i < d->nv; i++) {
        jv v;
        bool have = false;
        if (i < a->np) { v = a->pos[i]; have = true; }
        else {
            for (int k = 0; k < a->nk; k++)
                if (!used[k] && a->kn[k].n == d->v[i]->name.n && !memcmp(a->kn[k].p, d->v[i]->name.p, a->kn[k].n)) {
                    v = a->kv[k];
                    used[k] = true;
                    have = true;
                    break;
                }
        }
        if (!have) {
            if (d->kv && d->kv[i]) {
                if (eval(r, d->kv[i], &v)) goto out;
            } else {
                v = jv_undeff(r, "parameter '%.*s' was not provided", (int)d->v[i]->name.n, d->v[i]->name.p);
            }
        }
        if (assign_name(r, &d->v[i]->name, v)) goto out;
    }
    jv caller = m->caller;
    for (int k = 0; k < a->nk; k++)
        if (!used[k] && a->kn[k].n == 6 && !memcmp(a->kn[k].p, "caller", 6)) {
            caller = a->kv[k];
            used[k] = true;
        }
    if (want_caller) {
        if (caller.k == JV_UNDEF && !caller.u.undef) caller = jv_undef("No caller defined");
        if (jd_set_s(r, &s->vars, "caller", 6, caller)) goto out;
    }
    jdict *kw = jd_new(r);
    if (!kw) goto out;
    for (int k = 0; k < a->nk; k++) {
        if (used[k]) continue;
        if (!want_kwargs) {
            jr_fail(r, "TypeError", "macro '%s' takes no keyword argument '%.*s'", mname, (int)a->kn[k].n, a->kn[k].p);
            goto out;
        }
        if (jd_set_s(r, kw, a->kn[k].p, a->kn[k].n, a->kv[k])) goto out;
    }
    if (want_kwargs) {
        jv kv = {JV_DICT, 0, {0}};
        kv.u.d = kw;
        if (jd_set_s(r, &s->vars, "kwargs", 6, kv)) goto out;
    }
    if (want_varargs) {
        jlist *l = jl_new(r, a->np > d->nv ? (size_t)(a->np - d->nv) : 0);
        if (!l) goto out;
        for (int i = d->nv; i < a->np; i++) l->v[l->n++] = a->pos[i];
        jv t = {JV_TUPLE, 0, {0}};
        t.u.l = l;
        if (jd_set_s(r, &s->vars, "varargs", 7, t)) goto out;
    }
    if (jr_step(r, 1)) goto out;
    rc = exec_body_capture(r, d->b, out);
out:
    r->sc = saved;
    return rc;
}

int jr_call(jr *r, jv fn, const jargs *a, jv *out) {
    switch (fn.k) {
    case JV_FUNC: return fn.u.fn->fn(r, fn.u.fn->self, a, out);
    case JV_MACRO: return call_macro(r, fn.u.m, a, out);
    case JV_UNDEF: return jr_undef_error(r, fn);
    case JV_LOOP: {
        jloop *lp = fn.u.loop;
        if (!(lp->node->flags & 1))
            return jr_fail(r, "TypeError", "The loop must be marked 'recursive' to call it.");
        if (a->np != 1 || a->nk) return jr_fail(r, "TypeError", "loop() takes exactly one argument");
        jlist *items;
        if (jr_iterate(r, a->pos[0], &items)) return -1;
        jbuf buf, *saved = r->out;
        jb_init(&buf, r->lim.max_output);
        r->out = &buf;
        int rc = run_for(r, lp->node, items, lp->depth0 + 1, lp->scope);
        r->out = saved;
        if (rc) return rc;
        return jb_to_str(r, &buf, out);
    }
    default: return jr_fail(r, "TypeError", "'%s' object is not callable", jv_type_name(fn));
    }
}

/* ---------------------------------------------------------------- filters and tests */

static int eval_filter(jr *r, const jnode *n, jv input, jv *out) {
    jv v;
    if (n->a) {
        if (eval(r, n->a, &v)) return -1;
    } else v = input;
    jargs a;
    if (eval_args(r, n, &a, 0)) return -1;
    at(r, n);
    if (!n->fdef) return jr_fail(r, "TemplateRuntimeError", "No filter named '%.*s'.", (int)n->name.n, n->name.p);
    return n->fdef->fn(r, v, &a, out);
}

/* A filter chain from a filter block or block set: the innermost filter has a == NULL and
 * receives the captured body. */
static int apply_chain(jr *r, const jnode *f, jv input, jv *out) {
    if (!f) { *out = input; return 0; }
    if (f->a) {
        jv inner;
        if (apply_chain(r, f->a, input, &inner)) return -1;
        jargs a;
        if (eval_args(r, f, &a, 0)) return -1;
        at(r, f);
        if (!f->fdef) return jr_fail(r, "TemplateRuntimeError", "No filter named '%.*s'.", (int)f->name.n, f->name.p);
        return f->fdef->fn(r, inner, &a, out);
    }
    return eval_filter(r, f, input, out);
}

int jr_apply_filter(jr *r, const char *name, jv v, const jargs *a, jv *out) {
    const jfilter_def *f = jinja_find_filter(name, strlen(name));
    if (!f) return jr_fail(r, "TemplateRuntimeError", "No filter named '%s'.", name);
    jargs empty = {0};
    return f->fn(r, v, a ? a : &empty, out);
}

int jr_apply_test(jr *r, const char *name, jv v, const jargs *a, bool *res) {
    const jfilter_def *f = jinja_find_test(name, strlen(name));
    if (!f) return jr_fail(r, "TemplateRuntimeError", "No test named '%s'.", name);
    jargs empty = {0};
    jv out;
    if (f->fn(r, v, a ? a : &empty, &out)) return -1;
    *res = jv_truthy(out);
    return 0;
}

/* ---------------------------------------------------------------- expressions */

static int eval(jr *r, const jnode *n, jv *out) {
    if (enter(r)) return -1;
    int rc = 0;
    at(r, n);
    switch (n->kind) {
    case NX_CONST: *out = n->cval; break;
    case NX_NAME:
        if (!lookup(r, n->name.p, n->name.n, out))
            *out = jv_undeff(r, "'%.*s' is undefined", (int)n->name.n, n->name.p);
        break;
    case NX_LIST: case NX_TUPLE: {
        jlist *l = jl_new(r, (size_t)n->nv);
        if (!l) { rc = -1; break; }
        for (int i = 0; i < n->nv && !rc; i++) rc = eval(r, n->v[i], &l->v[l->n++]);
        out->k = n->kind == NX_LIST ? JV_LIST : JV_TUPLE;
        out->flag = 0;
        out->u.l = l;
        break;
    }
    case NX_DICT: {
        jdict *d = jd_new(r);
        if (!d) { rc = -1; break; }
        for (int i = 0; i < n->nv && !rc; i++) {
            jv k, v;
            if ((rc = eval(r, n->v[i], &k)) || (rc = eval(r, n->kv[i], &v))) break;
            if (!jv_hashable(k)) { at(r, n->v[i]); rc = jr_fail(r, "TypeError", "unhashable type: '%s'", jv_type_name(k)); break; }
            rc = jd_set(r, d, k, v);
        }
        out->k = JV_DICT;
        out->flag = 0;
        out->u.d = d;
        break;
    }
    case NX_ATTR: {
        jv obj;
        if ((rc = eval(r, n->a, &obj))) break;
        at(r, n);
        rc = jr_getattr(r, obj, n->name.p, n->name.n, out);
        break;
    }
    case NX_ITEM: {
        jv obj;
        if ((rc = eval(r, n->a, &obj))) break;
        if (n->b->kind == NX_SLICE) {
            jv parts[3] = {jv_none(), jv_none(), jv_none()};
            const jnode *sl = n->b;
            if (sl->a && (rc = eval(r, sl->a, &parts[0]))) break;
            if (sl->b && (rc = eval(r, sl->b, &parts[1]))) break;
            if (sl->c && (rc = eval(r, sl->c, &parts[2]))) break;
            at(r, n);
            rc = slice_value(r, obj, parts[0], parts[1], parts[2], out);
        } else {
            jv key;
            if ((rc = eval(r, n->b, &key))) break;
            at(r, n);
            rc = jr_getitem(r, obj, key, out);
        }
        break;
    }
    case NX_CALL: {
        jv fn;
        jargs a;
        if ((rc = eval(r, n->a, &fn)) || (rc = eval_args(r, n, &a, 0))) break;
        at(r, n);
        rc = jr_call(r, fn, &a, out);
        break;
    }
    case NX_FILTER: rc = eval_filter(r, n, jv_undef(NULL), out); break;
    case NX_TEST: {
        jv v;
        jargs a;
        if ((rc = eval(r, n->a, &v)) || (rc = eval_args(r, n, &a, 0))) break;
        at(r, n);
        if (!n->fdef) { rc = jr_fail(r, "TemplateRuntimeError", "No test named '%.*s'.", (int)n->name.n, n->name.p); break; }
        jv res;
        if ((rc = n->fdef->fn(r, v, &a, &res))) break;
        *out = jv_bool(jv_truthy(res));
        break;
    }
    case NX_NOT: {
        jv v;
        if ((rc = eval(r, n->a, &v))) break;
        *out = jv_bool(!jv_truthy(v));
        break;
    }
    case NX_NEG: case NX_POS: {
        jv v;
        if ((rc = eval(r, n->a, &v))) break;
        at(r, n);
        if (v.k == JV_UNDEF) { rc = jr_undef_error(r, v); break; }
        if (!jv_is_num(v)) {
            rc = jr_fail(r, "TypeError", "bad operand type for unary %c: '%s'", n->kind == NX_NEG ? '-' : '+', jv_type_name(v));
            break;
        }
        if (v.k == JV_FLOAT) *out = jv_float(n->kind == NX_NEG ? -v.u.f : v.u.f);
        else if (n->kind == NX_POS) *out = jv_int(jv_intval(v));
        else if (jv_intval(v) == INT64_MIN) rc = overflow(r);
        else *out = jv_int(-jv_intval(v));
        break;
    }
    case NX_BIN: {
        jv a, b;
        if ((rc = eval(r, n->a, &a)) || (rc = eval(r, n->b, &b))) break;
        at(r, n);
        rc = jr_binop(r, n->op, a, b, out);
        break;
    }
    case NX_CMP: {
        jv left;
        if ((rc = eval(r, n->a, &left))) break;
        bool res = true;
        for (int i = 0; i < n->nv && res; i++) {
            jv right;
            if ((rc = eval(r, n->v[i], &right))) break;
            at(r, n);
            if ((rc = compare(r, n->ops[i], left, right, &res))) break;
            left = right;
        }
        *out = jv_bool(res);
        break;
    }
    case NX_AND: case NX_OR: {
        jv l;
        if ((rc = eval(r, n->a, &l))) break;
        bool t = jv_truthy(l);
        if ((n->kind == NX_AND) != t) *out = l;
        else rc = eval(r, n->b, out);
        break;
    }
    case NX_COND: {
        jv t;
        if ((rc = eval(r, n->a, &t))) break;
        if (jv_truthy(t)) rc = eval(r, n->b, out);
        else if (n->c) rc = eval(r, n->c, out);
        else *out = jv_undeff(r, "the inline if-expression on line %d evaluated to false and no else section was defined.", n->line);
        break;
    }
    case NX_CONCAT: {
        jbuf b;
        jb_init(&b, r->lim.max_output);
        for (int i = 0; i < n->nv && !rc; i++) {
            jv v;
            if ((rc = eval(r, n->v[i], &v))) break;
            rc = jv_write_str(r, &b, v);
        }
        if (!rc) rc = jb_to_str(r, &b, out);
        break;
    }
    default:
        rc = jr_fail(r, "TemplateRuntimeError", "cannot evaluate this node as an expression");
    }
    r->depth--;
    return rc;
}

/* ---------------------------------------------------------------- statements */

static int unpack(jr *r, const jnode *target, jv v) {
    if (target->kind == NX_NAME) return assign_name(r, &target->name, v);
    jlist *items;
    if (v.k == JV_UNDEF) return jr_undef_error(r, v);
    if (jr_iterate(r, v, &items)) return -1;
    if (items->n < (size_t)target->nv)
        return jr_fail(r, "ValueError", "not enough values to unpack (expected %d, got %zu)", target->nv, items->n);
    if (items->n > (size_t)target->nv)
        return jr_fail(r, "ValueError", "too many values to unpack (expected %d)", target->nv);
    for (int i = 0; i < target->nv; i++)
        if (unpack(r, target->v[i], items->v[i])) return -1;
    return 0;
}

static int exec_body(jr *r, const jnode *body) {
    for (int i = 0; i < body->nv; i++) {
        int rc = exec_node(r, body->v[i]);
        if (rc) return rc;
    }
    return 0;
}

static int exec_body_capture(jr *r, const jnode *body, jv *out) {
    jbuf buf, *saved = r->out;
    jb_init(&buf, r->lim.max_output);
    r->out = &buf;
    int rc = exec_body(r, body);
    r->out = saved;
    if (rc > 0) rc = 0;  /* break/continue cannot cross a capture; the parser forbids it */
    if (rc) return rc;
    return jb_to_str(r, &buf, out);
}

static int run_for(jr *r, const jnode *n, jlist *items, int depth0, jscope *outer) {
    jloop *lp = ja_alloc(&r->a, sizeof *lp);
    if (!lp) return jr_oom(r);
    jscope *saved = r->sc;
    r->sc = outer;
    int rc = 0;
    if (n->e) {
        /* `for x in xs if cond`: filter first, so loop.length and loop.last see the result */
        jlist *kept = jl_new(r, items->n);
        if (!kept) { rc = -1; goto out; }
        for (size_t i = 0; i < items->n; i++) {
            if ((rc = jr_step(r, 1))) goto out;
            jscope *s = scope_push(r);
            if (!s) { rc = -1; goto out; }
            jv t;
            if ((rc = unpack(r, n->a, items->v[i])) || (rc = eval(r, n->e, &t))) goto out;
            r->sc = outer;
            if (jv_truthy(t)) kept->v[kept->n++] = items->v[i];
        }
        items = kept;
    }
    lp->items = items;
    lp->depth0 = depth0;
    lp->node = n;
    lp->scope = outer;
    lp->last_changed = jv_undef(NULL);
    jv loopv = {JV_LOOP, 0, {0}};
    loopv.u.loop = lp;
    /* One scope for all iterations, emptied at the start of each: the same visibility as a
     * fresh scope per iteration, without allocating per iteration. */
    r->sc = outer;
    jscope *iter = scope_push(r);
    if (!iter) { rc = -1; goto out; }
    for (size_t i = 0; i < items->n; i++) {
        if ((rc = jr_step(r, 1))) goto out;
        lp->i = i;
        iter->vars.n = 0;
        iter->vars.idx = NULL;
        iter->vars.idx_cap = 0;
        r->sc = iter;
        if ((rc = assign_name(r, &LOOP_NAME, loopv))) goto out;
        at(r, n);
        if ((rc = unpack(r, n->a, items->v[i]))) goto out;
        rc = exec_body(r, n->c);
        if (rc == EXEC_BREAK) { rc = 0; break; }
        if (rc == EXEC_CONTINUE) rc = 0;
        if (rc) goto out;
    }
    r->sc = outer;
    if (items->n == 0 && n->d) {
        if (!scope_push(r)) { rc = -1; goto out; }
        rc = exec_body(r, n->d);
    }
out:
    r->sc = saved;
    return rc;
}

static int write_value(jr *r, jv v) { return jv_write_str(r, r->out, v); }

static int exec_node(jr *r, const jnode *n) {
    if (enter(r)) return -1;
    int rc = 0;
    at(r, n);
    switch (n->kind) {
    case NS_BODY: rc = exec_body(r, n); break;
    case NS_DATA: rc = jb_put(r, r->out, n->cval.u.s->p, n->cval.u.s->n); break;
    case NS_PRINT:
        for (int i = 0; i < n->nv && !rc; i++) {
            jv v;
            if ((rc = eval(r, n->v[i], &v))) break;
            rc = write_value(r, v);
        }
        break;
    case NS_IF: {
        const jnode *c = n;
        while (c) {
            jv t;
            if ((rc = eval(r, c->a, &t))) break;
            if (jv_truthy(t)) { rc = exec_body(r, c->b); break; }
            if (c->c && c->c->kind == NS_IF) c = c->c;
            else { if (c->c) rc = exec_body(r, c->c); break; }
        }
        break;
    }
    case NS_FOR: {
        jv it;
        jlist *items;
        if ((rc = eval(r, n->b, &it))) break;
        at(r, n);
        if ((rc = jr_iterate(r, it, &items))) break;
        rc = run_for(r, n, items, 0, r->sc);
        break;
    }
    case NS_SET: {
        jv v;
        if ((rc = eval(r, n->b, &v))) break;
        at(r, n);
        if (n->a->kind == NX_NSREF) {
            jv ns;
            if (!lookup(r, n->a->name.p, n->a->name.n, &ns) || ns.k != JV_NS) {
                rc = jr_fail(r, "TemplateRuntimeError", "cannot assign attribute on non-namespace object");
                break;
            }
            rc = jd_set_s(r, ns.u.d, n->a->name2.p, n->a->name2.n, v);
        } else rc = unpack(r, n->a, v);
        break;
    }
    case NS_SETBLOCK: {
        jv body, v;
        if ((rc = exec_body_capture(r, n->b, &body))) break;
        if ((rc = apply_chain(r, n->c, body, &v))) break;
        at(r, n);
        if (n->a->kind == NX_NSREF) {
            jv ns;
            if (!lookup(r, n->a->name.p, n->a->name.n, &ns) || ns.k != JV_NS) {
                rc = jr_fail(r, "TemplateRuntimeError", "cannot assign attribute on non-namespace object");
                break;
            }
            rc = jd_set_s(r, ns.u.d, n->a->name2.p, n->a->name2.n, v);
        } else rc = unpack(r, n->a, v);
        break;
    }
    case NS_FILTERBLOCK: {
        jv body, v;
        if ((rc = exec_body_capture(r, n->b, &body))) break;
        if ((rc = apply_chain(r, n->a, body, &v))) break;
        rc = write_value(r, v);
        break;
    }
    case NS_MACRO: {
        jmacro *m = ja_alloc(&r->a, sizeof *m);
        if (!m) { rc = jr_oom(r); break; }
        m->def = n;
        m->closure = r->sc;
        m->caller = jv_undef(NULL);
        jv v = {JV_MACRO, 0, {0}};
        v.u.m = m;
        rc = assign_name(r, &n->name, v);
        break;
    }
    case NS_CALLBLOCK: {
        jmacro *m = ja_alloc(&r->a, sizeof *m);
        if (!m) { rc = jr_oom(r); break; }
        m->def = n;
        m->closure = r->sc;
        m->caller = jv_undef(NULL);
        jv callerv = {JV_MACRO, 0, {0}}, fn, res;
        callerv.u.m = m;
        jargs a;
        if ((rc = eval(r, n->a->a, &fn)) || (rc = eval_args(r, n->a, &a, 1))) break;
        a.kn[a.nk].p = "caller";
        a.kn[a.nk].n = 6;
        a.kv[a.nk++] = callerv;
        at(r, n);
        if ((rc = jr_call(r, fn, &a, &res))) break;
        rc = write_value(r, res);
        break;
    }
    case NS_WITH: {
        jv *vals = ja_alloc(&r->a, ((size_t)n->nv + 1) * sizeof(jv));
        if (!vals) { rc = jr_oom(r); break; }
        for (int i = 0; i < n->nv && !rc; i++) rc = eval(r, n->kv[i], &vals[i]);
        if (rc) break;
        jscope *saved = r->sc;
        if (!scope_push(r)) { rc = -1; break; }
        for (int i = 0; i < n->nv && !rc; i++) rc = unpack(r, n->v[i], vals[i]);
        if (!rc) rc = exec_body(r, n->b);
        r->sc = saved;
        break;
    }
    case NS_BREAK: rc = EXEC_BREAK; break;
    case NS_CONTINUE: rc = EXEC_CONTINUE; break;
    default: rc = jr_fail(r, "TemplateRuntimeError", "cannot execute this node as a statement");
    }
    r->depth--;
    return rc;
}

/* ---------------------------------------------------------------- entry points */

void jinja_limits_default(jinja_limits_t *lim) {
    lim->max_memory = JINJA_DEFAULT_MAX_MEMORY;
    lim->max_output = JINJA_DEFAULT_MAX_OUTPUT;
    lim->max_steps = JINJA_DEFAULT_MAX_STEPS;
    lim->max_depth = JINJA_DEFAULT_MAX_DEPTH;
}

jinja_template_t *jinja_parse(const char *source, size_t len, err_t *e) {
    if (len > JINJA_MAX_SOURCE) { err_set(e, "template is %zu bytes, more than the %zu allowed", len, JINJA_MAX_SOURCE); return NULL; }
    size_t bad;
    if (!u8_valid(source, len, &bad)) { err_set(e, "template is not valid UTF-8 (byte offset %zu)", bad); return NULL; }
    jinja_template_t *t = calloc(1, sizeof *t);
    if (!t) { err_set(e, "out of memory"); return NULL; }
    t->a.limit = (size_t)256 * len + ((size_t)1 << 20);  /* nodes and literals; ~160 bytes a node */
    /* keep_trailing_newline=False and newline normalization, as jinja2's lexer does */
    t->src = malloc(len + 1);
    if (!t->src) { err_set(e, "out of memory"); goto err; }
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        if (source[i] == '\r') {
            t->src[k++] = '\n';
            if (i + 1 < len && source[i + 1] == '\n') i++;
        } else t->src[k++] = source[i];
    }
    if (k > 0 && t->src[k - 1] == '\n') k--;
    t->src[k] = 0;
    jtok *toks;
    size_t ntoks;
    if (jinja_lex(&t->a, t->src, k, &toks, &ntoks, e)) goto err;
    int rc = jinja_parse_tokens(t, toks, ntoks, e);
    free(toks);
    if (rc) goto err;
    return t;
err:
    jinja_free(t);
    return NULL;
}

void jinja_free(jinja_template_t *t) {
    if (!t) return;
    ja_free_all(&t->a);
    free(t->src);
    free(t);
}

int jinja_render(const jinja_template_t *t, const json_t *vars, const jinja_options_t *opts,
                 const jinja_limits_t *lim, char **out, size_t *out_len, err_t *e) {
    jr *r = calloc(1, sizeof *r);
    if (!r) return err_set(e, "out of memory");
    int rc = -1;
    *out = NULL;
    if (out_len) *out_len = 0;
    r->e = e;
    r->stack_floor = stack_floor();
    if (lim) r->lim = *lim;
    else jinja_limits_default(&r->lim);
    if (opts) r->opt = *opts;
    r->a.limit = r->lim.max_memory;
    r->line = 1;
    r->col = 1;
    jbuf buf;
    jb_init(&buf, r->lim.max_output);
    r->out = &buf;
    r->globals = jd_new(r);
    if (!r->globals || jm_install_globals(r, r->globals)) goto done;
    if (vars) {
        if (!json_is_object(vars)) { err_set(e, "template variables must be a JSON object"); goto done; }
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)vars, key, val) {
            jv v;
            if (jv_from_json(r, val, &v, 0)) goto done;
            if (jd_set_s(r, r->globals, key, strlen(key), v)) goto done;
        }
    }
    if (!scope_push(r)) goto done;
    int x = exec_node(r, t->root);
    if (x < 0) goto done;
    *out = malloc(buf.n + 1);
    if (!*out) { err_set(e, "out of memory"); goto done; }
    if (buf.n) memcpy(*out, buf.p, buf.n);
    (*out)[buf.n] = 0;
    if (out_len) *out_len = buf.n;
    rc = 0;
done:
    ja_free_all(&r->a);
    free(r);
    return rc;
}
