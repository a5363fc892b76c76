/* jinja_parser.c — tokens to a syntax tree, with jinja2's grammar and precedence.
 *
 * The grammar follows jinja2.parser closely, including its quirks, because templates are
 * written against them:
 *   expr    := or ('if' or ('else' expr)?)*        (a missing else yields undefined)
 *   or      := and ('or' and)*;  and := not ('and' not)*;  not := 'not' not | compare
 *   compare := math1 (('=='|'!='|'<'|'<='|'>'|'>='|'in'|'not' 'in') math1)*
 *   math1   := concat (('+'|'-') concat)*;  concat := math2 ('~' math2)*
 *   math2   := pow (('*'|'/'|'//'|'%') pow)*;  pow := unary ('**' unary)*  (left-assoc)
 *   unary   := ('-'|'+') unary | primary postfix* (filter | test | call)*
 * so `|filter` and `is test` bind tighter than any operator: `1 + 2 is odd` is
 * `1 + (2 is odd)`, and `-x|abs` is `abs(-x)`.
 *
 * Node fields by kind (see jnode in jinja_int.h):
 *   NX_CONST cval | NX_NAME name | NX_LIST/NX_TUPLE v | NX_DICT v=keys kv=values
 *   NX_ATTR a.name | NX_ITEM a[b] | NX_SLICE a:b:c | NX_CALL a(v, kn=kv, *c, **d)
 *   NX_FILTER a|name(v, kn=kv) (a NULL inside filter blocks) | NX_TEST a is name(v, kn=kv)
 *   NX_NOT/NEG/POS a | NX_BIN a op b | NX_CMP a (ops[i] v[i])* | NX_AND/OR a b
 *   NX_COND b if a else c | NX_CONCAT v | NX_NSREF name.name2
 *   NS_BODY v | NS_DATA cval | NS_PRINT v | NS_IF a: b else c | NS_FOR a in b if e: c else d
 *   NS_SET a = b | NS_SETBLOCK a, body b, filter c | NS_MACRO name(v = kv): b
 *   NS_CALLBLOCK call a, caller params v = kv, body b | NS_FILTERBLOCK a: b
 *   NS_WITH v = kv: b | NS_BREAK | NS_CONTINUE
 * Unknown filters and tests are an error at parse time, except inside an `if` or a
 * conditional expression, where jinja2 defers the error to the moment they run.
 */
#include "chat/jinja_int.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct P {
    jinja_template_t *t;
    jtok *tk;
    size_t n, i;
    err_t *e;
    int depth;
    int soft;       /* >0 inside if / conditional expressions */
    int in_loop;    /* >0 where break/continue are legal */
    const char *tags[JINJA_MAX_PARSE_DEPTH + 8];   /* open block tags, for error messages */
    int ntags;
    const char *const *ends[JINJA_MAX_PARSE_DEPTH + 8]; /* end tags being looked for */
    int nends;
} P;

static jtok *cur(P *p) { return &p->tk[p->i]; }
static jtok *peek(P *p) { return &p->tk[p->i + 1 < p->n ? p->i + 1 : p->n - 1]; }
static jtok *adv(P *p) { jtok *t = cur(p); if (p->i + 1 < p->n) p->i++; return t; }

static bool tok_is_op(const jtok *t, const char *op) {
    return t->kind == T_OP && t->n == strlen(op) && !memcmp(t->p, op, t->n);
}
static bool tok_is_name(const jtok *t, const char *nm) {
    return t->kind == T_NAME && t->n == strlen(nm) && !memcmp(t->p, nm, t->n);
}

static void describe(const jtok *t, char *buf, size_t cap) {
    switch (t->kind) {
    case T_EOF: snprintf(buf, cap, "end of template"); break;
    case T_VAR_BEGIN: snprintf(buf, cap, "begin of print statement"); break;
    case T_VAR_END: snprintf(buf, cap, "end of print statement"); break;
    case T_BLOCK_BEGIN: snprintf(buf, cap, "begin of statement block"); break;
    case T_BLOCK_END: snprintf(buf, cap, "end of statement block"); break;
    case T_STRING: snprintf(buf, cap, "string"); break;
    case T_INT: snprintf(buf, cap, "integer"); break;
    case T_FLOAT: snprintf(buf, cap, "float"); break;
    case T_DATA: snprintf(buf, cap, "template data"); break;
    default: snprintf(buf, cap, "%.*s", (int)(t->n > 40 ? 40 : t->n), t->p); break;
    }
}

static int failt(P *p, const jtok *t, const char *kind, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int failt(P *p, const jtok *t, const char *kind, const char *fmt, ...) {
    char msg[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return err_set(p->e, "line %d, column %d: %s: %s", t->line, t->col, kind, msg);
}
#define fail(p, ...) failt((p), cur(p), "TemplateSyntaxError", __VA_ARGS__)

static int eof_fail(P *p, const char *what) {
    return fail(p, "unexpected end of template, expected '%s'.", what);
}

static int expect_op(P *p, const char *op) {
    if (!tok_is_op(cur(p), op)) {
        if (cur(p)->kind == T_EOF) return eof_fail(p, op);
        char d[64];
        describe(cur(p), d, sizeof d);
        return fail(p, "expected token '%s', got '%s'", op, d);
    }
    adv(p);
    return 0;
}

static int expect_kind(P *p, int kind, const char *what) {
    if (cur(p)->kind != kind) {
        if (cur(p)->kind == T_EOF) return eof_fail(p, what);
        char d[64];
        describe(cur(p), d, sizeof d);
        return fail(p, "expected token '%s', got '%s'", what, d);
    }
    adv(p);
    return 0;
}

static int expect_name(P *p, const char *nm) {
    if (!tok_is_name(cur(p), nm)) {
        if (cur(p)->kind == T_EOF) return eof_fail(p, nm);
        char d[64];
        describe(cur(p), d, sizeof d);
        return fail(p, "expected token '%s', got '%s'", nm, d);
    }
    adv(p);
    return 0;
}

static jnode *nn(P *p, int kind, const jtok *at) {
    jnode *n = ja_alloc(&p->t->a, sizeof *n);
    if (!n) { err_set(p->e, "template too large"); return NULL; }
    n->kind = (uint8_t)kind;
    n->line = at->line;
    n->col = at->col;
    return n;
}

static jstr *tokname(P *p, const jtok *t, jstr *out) {
    out->p = t->p;
    out->n = t->n;
    return out;
}

/* Growable node arrays in the template arena. */
typedef struct nvec { jnode **v; int n, cap; } nvec;
static int nv_push(P *p, nvec *a, jnode *x) {
    if (a->n == a->cap) {
        int cap = a->cap ? a->cap * 2 : 4;
        jnode **nv = ja_alloc(&p->t->a, (size_t)cap * sizeof *nv);
        if (!nv) return err_set(p->e, "template too large");
        if (a->n) memcpy(nv, a->v, (size_t)a->n * sizeof *nv);
        a->v = nv;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return 0;
}

static int enter(P *p) {
    if (++p->depth > JINJA_MAX_PARSE_DEPTH)
        return fail(p, "template nested too deeply (more than %d levels)", JINJA_MAX_PARSE_DEPTH);
    return 0;
}
#define LEAVE(p) ((p)->depth--)

static jnode *parse_expr(P *p, bool with_cond);
static jnode *parse_or(P *p);
static jnode *parse_unary(P *p, bool with_filter);
static jnode *parse_primary(P *p);
static jnode *parse_postfix(P *p, jnode *node);
static jnode *parse_filter(P *p, jnode *node, bool start_inline);
static jnode *parse_tuple(P *p, bool simplified, bool with_cond, const char *const *extra_end, bool explicit_parens);

static bool is_tuple_end(P *p, const char *const *extra_end) {
    jtok *t = cur(p);
    if (t->kind == T_VAR_END || t->kind == T_BLOCK_END || tok_is_op(t, ")")) return true;
    if (extra_end)
        for (int i = 0; extra_end[i]; i++)
            if (tok_is_name(t, extra_end[i])) return true;
    return false;
}

static jnode *parse_tuple(P *p, bool simplified, bool with_cond, const char *const *extra_end, bool explicit_parens) {
    jtok *start = cur(p);
    nvec args = {0};
    bool is_tuple = false;
    for (;;) {
        if (args.n && expect_op(p, ",")) return NULL;
        if (is_tuple_end(p, extra_end)) break;
        jnode *x = simplified ? parse_primary(p) : parse_expr(p, with_cond);
        if (!x || nv_push(p, &args, x)) return NULL;
        if (tok_is_op(cur(p), ",")) is_tuple = true;
        else break;
    }
    if (!is_tuple) {
        if (args.n) return args.v[0];
        if (!explicit_parens) {
            char d[64];
            describe(cur(p), d, sizeof d);
            fail(p, "Expected an expression, got '%s'", d);
            return NULL;
        }
    }
    jnode *n = nn(p, NX_TUPLE, start);
    if (!n) return NULL;
    n->v = args.v;
    n->nv = args.n;
    return n;
}

static jnode *parse_expr(P *p, bool with_cond) {
    if (enter(p)) return NULL;
    jtok *start = cur(p);
    jnode *e1 = parse_or(p);
    if (!e1) return NULL;
    if (with_cond) {
        while (tok_is_name(cur(p), "if")) {
            adv(p);
            p->soft++;
            jnode *test = parse_or(p), *e3 = NULL;
            if (!test) return NULL;
            if (tok_is_name(cur(p), "else")) {
                adv(p);
                if (!(e3 = parse_expr(p, true))) return NULL;
            }
            p->soft--;
            jnode *c = nn(p, NX_COND, start);
            if (!c) return NULL;
            c->a = test;
            c->b = e1;
            c->c = e3;
            e1 = c;
        }
    }
    LEAVE(p);
    return e1;
}

static jnode *parse_not(P *p);

static jnode *parse_and(P *p) {
    jnode *l = parse_not(p);
    while (l && tok_is_name(cur(p), "and")) {
        jtok *t = adv(p);
        jnode *r = parse_not(p), *n = nn(p, NX_AND, t);
        if (!r || !n) return NULL;
        n->a = l; n->b = r; l = n;
    }
    return l;
}

static jnode *parse_or(P *p) {
    jnode *l = parse_and(p);
    while (l && tok_is_name(cur(p), "or")) {
        jtok *t = adv(p);
        jnode *r = parse_and(p), *n = nn(p, NX_OR, t);
        if (!r || !n) return NULL;
        n->a = l; n->b = r; l = n;
    }
    return l;
}

static jnode *parse_compare(P *p);

static jnode *parse_not(P *p) {
    if (tok_is_name(cur(p), "not")) {
        jtok *t = adv(p);
        if (enter(p)) return NULL;
        jnode *x = parse_not(p), *n = nn(p, NX_NOT, t);
        LEAVE(p);
        if (!x || !n) return NULL;
        n->a = x;
        return n;
    }
    return parse_compare(p);
}

static jnode *parse_math1(P *p);

static jnode *parse_compare(P *p) {
    jtok *start = cur(p);
    jnode *expr = parse_math1(p);
    if (!expr) return NULL;
    nvec ops = {0};
    uint8_t opc[64];
    for (;;) {
        jtok *t = cur(p);
        int op = 0;
        if (tok_is_op(t, "==")) op = CMP_EQ;
        else if (tok_is_op(t, "!=")) op = CMP_NE;
        else if (tok_is_op(t, "<")) op = CMP_LT;
        else if (tok_is_op(t, "<=")) op = CMP_LE;
        else if (tok_is_op(t, ">")) op = CMP_GT;
        else if (tok_is_op(t, ">=")) op = CMP_GE;
        else if (tok_is_name(t, "in")) op = CMP_IN;
        else if (tok_is_name(t, "not") && tok_is_name(peek(p), "in")) { op = CMP_NOTIN; adv(p); }
        else break;
        adv(p);
        if (ops.n >= (int)sizeof opc) { fail(p, "too many chained comparisons"); return NULL; }
        jnode *r = parse_math1(p);
        if (!r || nv_push(p, &ops, r)) return NULL;
        opc[ops.n - 1] = (uint8_t)op;
    }
    if (!ops.n) return expr;
    jnode *n = nn(p, NX_CMP, start);
    if (!n) return NULL;
    n->a = expr;
    n->v = ops.v;
    n->nv = ops.n;
    n->ops = ja_alloc(&p->t->a, (size_t)ops.n);
    if (!n->ops) { err_set(p->e, "template too large"); return NULL; }
    memcpy(n->ops, opc, (size_t)ops.n);
    return n;
}

static jnode *binop(P *p, jtok *t, int op, jnode *l, jnode *r) {
    if (!l || !r) return NULL;
    jnode *n = nn(p, NX_BIN, t);
    if (!n) return NULL;
    n->op = (uint8_t)op;
    n->a = l;
    n->b = r;
    return n;
}

static jnode *parse_pow(P *p) {
    jnode *l = parse_unary(p, true);
    while (l && tok_is_op(cur(p), "**")) {
        jtok *t = adv(p);
        l = binop(p, t, OP_POW, l, parse_unary(p, true));
    }
    return l;
}

static jnode *parse_math2(P *p) {
    jnode *l = parse_pow(p);
    for (;;) {
        if (!l) return NULL;
        jtok *t = cur(p);
        int op = tok_is_op(t, "*") ? OP_MUL : tok_is_op(t, "/") ? OP_DIV : tok_is_op(t, "//") ? OP_FLOORDIV
               : tok_is_op(t, "%") ? OP_MOD : 0;
        if (!op) return l;
        adv(p);
        l = binop(p, t, op, l, parse_pow(p));
    }
}

static jnode *parse_concat(P *p) {
    jtok *start = cur(p);
    jnode *first = parse_math2(p);
    if (!first || !tok_is_op(cur(p), "~")) return first;
    nvec args = {0};
    if (nv_push(p, &args, first)) return NULL;
    while (tok_is_op(cur(p), "~")) {
        adv(p);
        jnode *x = parse_math2(p);
        if (!x || nv_push(p, &args, x)) return NULL;
    }
    jnode *n = nn(p, NX_CONCAT, start);
    if (!n) return NULL;
    n->v = args.v;
    n->nv = args.n;
    return n;
}

static jnode *parse_math1(P *p) {
    jnode *l = parse_concat(p);
    for (;;) {
        if (!l) return NULL;
        jtok *t = cur(p);
        int op = tok_is_op(t, "+") ? OP_ADD : tok_is_op(t, "-") ? OP_SUB : 0;
        if (!op) return l;
        adv(p);
        l = binop(p, t, op, l, parse_concat(p));
    }
}

/* ( args, name=value, *a, **kw ) into n->v / n->kn,kv / n->c / n->d */
static int parse_call_args(P *p, jnode *n) {
    jtok *lp = cur(p);
    if (expect_op(p, "(")) return -1;
    nvec args = {0}, kvals = {0};
    jstr kn[128];
    bool require_comma = false;
    while (!tok_is_op(cur(p), ")")) {
        if (require_comma) {
            if (expect_op(p, ",")) return -1;
            if (tok_is_op(cur(p), ")")) break;
        }
        if (tok_is_op(cur(p), "*")) {
            if (n->c || n->d) return failt(p, lp, "TemplateSyntaxError", "invalid syntax for function call expression");
            adv(p);
            if (!(n->c = parse_expr(p, true))) return -1;
        } else if (tok_is_op(cur(p), "**")) {
            if (n->d) return failt(p, lp, "TemplateSyntaxError", "invalid syntax for function call expression");
            adv(p);
            if (!(n->d = parse_expr(p, true))) return -1;
        } else if (cur(p)->kind == T_NAME && tok_is_op(peek(p), "=")) {
            if (n->d) return failt(p, lp, "TemplateSyntaxError", "invalid syntax for function call expression");
            if (kvals.n >= (int)(sizeof kn / sizeof kn[0])) return fail(p, "too many keyword arguments");
            tokname(p, cur(p), &kn[kvals.n]);
            adv(p);
            adv(p);
            jnode *x = parse_expr(p, true);
            if (!x || nv_push(p, &kvals, x)) return -1;
        } else {
            if (n->c || n->d || kvals.n) return failt(p, lp, "TemplateSyntaxError", "invalid syntax for function call expression");
            jnode *x = parse_expr(p, true);
            if (!x || nv_push(p, &args, x)) return -1;
        }
        require_comma = true;
    }
    if (expect_op(p, ")")) return -1;
    n->v = args.v;
    n->nv = args.n;
    n->kv = kvals.v;
    n->nk = kvals.n;
    if (kvals.n) {
        n->kn = ja_alloc(&p->t->a, (size_t)kvals.n * sizeof(jstr));
        if (!n->kn) return err_set(p->e, "template too large");
        memcpy(n->kn, kn, (size_t)kvals.n * sizeof(jstr));
    }
    return 0;
}

/* name or dotted.name for filters and tests, into a fresh arena string */
static int dotted_name(P *p, jstr *out) {
    if (cur(p)->kind != T_NAME) {
        char d[64];
        describe(cur(p), d, sizeof d);
        return fail(p, "expected token 'name', got '%s'", d);
    }
    const char *start = cur(p)->p;
    const char *end = start + cur(p)->n;
    adv(p);
    while (tok_is_op(cur(p), ".") && peek(p)->kind == T_NAME) {
        adv(p);
        end = cur(p)->p + cur(p)->n;
        adv(p);
    }
    out->p = start;
    out->n = (size_t)(end - start);
    /* dotted names contain no spaces in practice; keep the source slice */
    return 0;
}

static jnode *parse_filter(P *p, jnode *node, bool start_inline) {
    while (tok_is_op(cur(p), "|") || start_inline) {
        if (!start_inline) adv(p);
        start_inline = false;
        jtok *t = cur(p);
        jnode *f = nn(p, NX_FILTER, t);
        if (!f || dotted_name(p, &f->name)) return NULL;
        f->fdef = jinja_find_filter(f->name.p, f->name.n);
        if (!f->fdef) {
            if (!p->soft) {
                failt(p, t, "TemplateAssertionError", "No filter named '%.*s'.", (int)f->name.n, f->name.p);
                return NULL;
            }
            f->flags = 1;
        }
        if (tok_is_op(cur(p), "(") && parse_call_args(p, f)) return NULL;
        f->a = node;
        node = f;
    }
    return node;
}

static jnode *parse_test(P *p, jnode *node) {
    jtok *is = adv(p);  /* 'is' */
    bool negated = false;
    if (tok_is_name(cur(p), "not")) { adv(p); negated = true; }
    jtok *t = cur(p);
    jnode *n = nn(p, NX_TEST, is);
    if (!n || dotted_name(p, &n->name)) return NULL;
    n->fdef = jinja_find_test(n->name.p, n->name.n);
    if (!n->fdef) {
        if (!p->soft) {
            failt(p, t, "TemplateAssertionError", "No test named '%.*s'.", (int)n->name.n, n->name.p);
            return NULL;
        }
        n->flags = 1;
    }
    jtok *c = cur(p);
    if (tok_is_op(c, "(")) {
        if (parse_call_args(p, n)) return NULL;
    } else if ((c->kind == T_NAME || c->kind == T_STRING || c->kind == T_INT || c->kind == T_FLOAT ||
                tok_is_op(c, "(") || tok_is_op(c, "[") || tok_is_op(c, "{")) &&
               !tok_is_name(c, "else") && !tok_is_name(c, "or") && !tok_is_name(c, "and")) {
        if (tok_is_name(c, "is")) { fail(p, "You cannot chain multiple tests with is"); return NULL; }
        jnode *arg = parse_primary(p);
        if (!arg || !(arg = parse_postfix(p, arg))) return NULL;
        n->v = ja_alloc(&p->t->a, sizeof(jnode *));
        if (!n->v) { err_set(p->e, "template too large"); return NULL; }
        n->v[0] = arg;
        n->nv = 1;
    }
    n->a = node;
    if (negated) {
        jnode *x = nn(p, NX_NOT, is);
        if (!x) return NULL;
        x->a = n;
        return x;
    }
    return n;
}

static jnode *parse_filter_expr(P *p, jnode *node) {
    for (;;) {
        if (!node) return NULL;
        if (tok_is_op(cur(p), "|")) node = parse_filter(p, node, false);
        else if (tok_is_name(cur(p), "is")) node = parse_test(p, node);
        else if (tok_is_op(cur(p), "(")) {
            jnode *c = nn(p, NX_CALL, cur(p));
            if (!c || parse_call_args(p, c)) return NULL;
            c->a = node;
            node = c;
        } else return node;
    }
}

static jnode *parse_subscribed(P *p) {
    jtok *start = cur(p);
    jnode *parts[3] = {NULL, NULL, NULL};
    if (tok_is_op(cur(p), ":")) {
        adv(p);
    } else {
        jnode *x = parse_expr(p, true);
        if (!x) return NULL;
        if (!tok_is_op(cur(p), ":")) return x;
        adv(p);
        parts[0] = x;
    }
    if (!tok_is_op(cur(p), ":") && !tok_is_op(cur(p), "]") && !tok_is_op(cur(p), ",")) {
        if (!(parts[1] = parse_expr(p, true))) return NULL;
    }
    if (tok_is_op(cur(p), ":")) {
        adv(p);
        if (!tok_is_op(cur(p), "]") && !tok_is_op(cur(p), ",")) {
            if (!(parts[2] = parse_expr(p, true))) return NULL;
        }
    }
    jnode *n = nn(p, NX_SLICE, start);
    if (!n) return NULL;
    n->a = parts[0];
    n->b = parts[1];
    n->c = parts[2];
    return n;
}

static jnode *parse_postfix(P *p, jnode *node) {
    for (;;) {
        if (!node) return NULL;
        jtok *t = cur(p);
        if (tok_is_op(t, ".")) {
            adv(p);
            jtok *a = cur(p);
            if (a->kind == T_NAME) {
                jnode *n = nn(p, NX_ATTR, t);
                if (!n) return NULL;
                tokname(p, a, &n->name);
                n->a = node;
                adv(p);
                node = n;
            } else if (a->kind == T_INT) {
                jnode *n = nn(p, NX_ITEM, t), *k = nn(p, NX_CONST, a);
                if (!n || !k) return NULL;
                k->cval = jv_int(a->ival);
                n->a = node;
                n->b = k;
                adv(p);
                node = n;
            } else {
                fail(p, "expected name or number");
                return NULL;
            }
        } else if (tok_is_op(t, "[")) {
            adv(p);
            nvec args = {0};
            while (!tok_is_op(cur(p), "]")) {
                if (args.n && expect_op(p, ",")) return NULL;
                if (tok_is_op(cur(p), "]")) break;
                jnode *x = parse_subscribed(p);
                if (!x || nv_push(p, &args, x)) return NULL;
            }
            if (expect_op(p, "]")) return NULL;
            if (!args.n) { failt(p, t, "TemplateSyntaxError", "expected an index or slice"); return NULL; }
            jnode *n = nn(p, NX_ITEM, t);
            if (!n) return NULL;
            n->a = node;
            if (args.n == 1) n->b = args.v[0];
            else {
                jnode *tu = nn(p, NX_TUPLE, t);
                if (!tu) return NULL;
                tu->v = args.v;
                tu->nv = args.n;
                n->b = tu;
            }
            node = n;
        } else if (tok_is_op(t, "(")) {
            jnode *c = nn(p, NX_CALL, t);
            if (!c || parse_call_args(p, c)) return NULL;
            c->a = node;
            node = c;
        } else return node;
    }
}

static jnode *parse_unary(P *p, bool with_filter) {
    jtok *t = cur(p);
    jnode *node;
    if (enter(p)) return NULL;
    if (tok_is_op(t, "-") || tok_is_op(t, "+")) {
        adv(p);
        jnode *x = parse_unary(p, false);
        node = nn(p, tok_is_op(t, "-") ? NX_NEG : NX_POS, t);
        if (!x || !node) return NULL;
        node->a = x;
    } else {
        node = parse_primary(p);
    }
    node = parse_postfix(p, node);
    if (with_filter) node = parse_filter_expr(p, node);
    LEAVE(p);
    return node;
}

static jnode *parse_primary(P *p) {
    jtok *t = cur(p);
    jnode *n;
    if (enter(p)) return NULL;
    if (t->kind == T_NAME) {
        n = nn(p, NX_CONST, t);
        if (!n) return NULL;
        if (tok_is_name(t, "true") || tok_is_name(t, "True")) n->cval = jv_bool(1);
        else if (tok_is_name(t, "false") || tok_is_name(t, "False")) n->cval = jv_bool(0);
        else if (tok_is_name(t, "none") || tok_is_name(t, "None")) n->cval = jv_none();
        else { n->kind = NX_NAME; tokname(p, t, &n->name); }
        adv(p);
    } else if (t->kind == T_STRING) {
        n = nn(p, NX_CONST, t);
        if (!n) return NULL;
        size_t total = 0, k = p->i;
        while (p->tk[k].kind == T_STRING) total += p->tk[k++].str.n;
        jstr *s = ja_alloc(&p->t->a, sizeof *s);
        char *buf = ja_alloc(&p->t->a, total + 1);
        if (!s || !buf) { err_set(p->e, "template too large"); return NULL; }
        size_t off = 0;
        while (cur(p)->kind == T_STRING) {
            memcpy(buf + off, cur(p)->str.p, cur(p)->str.n);
            off += cur(p)->str.n;
            adv(p);
        }
        s->p = buf;
        s->n = total;
        n->cval.k = JV_STR;
        n->cval.u.s = s;
    } else if (t->kind == T_INT || t->kind == T_FLOAT) {
        n = nn(p, NX_CONST, t);
        if (!n) return NULL;
        n->cval = t->kind == T_INT ? jv_int(t->ival) : jv_float(t->fval);
        adv(p);
    } else if (tok_is_op(t, "(")) {
        adv(p);
        n = parse_tuple(p, false, true, NULL, true);
        if (!n || expect_op(p, ")")) return NULL;
    } else if (tok_is_op(t, "[")) {
        adv(p);
        nvec items = {0};
        while (!tok_is_op(cur(p), "]")) {
            if (items.n && expect_op(p, ",")) return NULL;
            if (tok_is_op(cur(p), "]")) break;
            jnode *x = parse_expr(p, true);
            if (!x || nv_push(p, &items, x)) return NULL;
        }
        if (expect_op(p, "]")) return NULL;
        n = nn(p, NX_LIST, t);
        if (!n) return NULL;
        n->v = items.v;
        n->nv = items.n;
    } else if (tok_is_op(t, "{")) {
        adv(p);
        nvec keys = {0}, vals = {0};
        while (!tok_is_op(cur(p), "}")) {
            if (keys.n && expect_op(p, ",")) return NULL;
            if (tok_is_op(cur(p), "}")) break;
            jnode *k = parse_expr(p, true);
            if (!k || expect_op(p, ":")) return NULL;
            jnode *v = parse_expr(p, true);
            if (!v || nv_push(p, &keys, k) || nv_push(p, &vals, v)) return NULL;
        }
        if (expect_op(p, "}")) return NULL;
        n = nn(p, NX_DICT, t);
        if (!n) return NULL;
        n->v = keys.v;
        n->kv = vals.v;
        n->nv = keys.n;
    } else {
        char d[64];
        describe(t, d, sizeof d);
        fail(p, "unexpected '%s'", d);
        return NULL;
    }
    LEAVE(p);
    return n;
}

/* ---------------------------------------------------------------- statements */

static jnode *subparse(P *p, const char *const *end_tags);

static bool can_assign(const jnode *n) {
    if (n->kind == NX_NAME) return true;
    if (n->kind == NX_TUPLE) {
        for (int i = 0; i < n->nv; i++)
            if (!can_assign(n->v[i])) return false;
        return true;
    }
    return false;
}

static jnode *parse_assign_target(P *p, bool name_only, const char *const *extra_end, bool with_ns) {
    jtok *t = cur(p);
    jnode *target;
    if (name_only) {
        if (t->kind != T_NAME) {
            char d[64];
            describe(t, d, sizeof d);
            fail(p, "expected token 'name', got '%s'", d);
            return NULL;
        }
        target = nn(p, NX_NAME, t);
        if (!target) return NULL;
        tokname(p, t, &target->name);
        adv(p);
    } else if (with_ns && t->kind == T_NAME && tok_is_op(peek(p), ".")) {
        target = nn(p, NX_NSREF, t);
        if (!target) return NULL;
        tokname(p, t, &target->name);
        adv(p);
        adv(p);
        if (cur(p)->kind != T_NAME) {
            char d[64];
            describe(cur(p), d, sizeof d);
            fail(p, "expected token 'name', got '%s'", d);
            return NULL;
        }
        tokname(p, cur(p), &target->name2);
        adv(p);
        return target;
    } else {
        target = parse_tuple(p, true, true, extra_end, false);
        if (!target) return NULL;
    }
    if (!can_assign(target) || (target->kind == NX_NAME && target->name.n == 0)) {
        const char *what = target->kind == NX_CONST ? "const" : target->kind == NX_TUPLE ? "tuple" : "expression";
        failt(p, t, "TemplateSyntaxError", "can't assign to '%s'", what);
        return NULL;
    }
    return target;
}

/* Expects the block end of the opening tag, parses a body up to one of end_tags (left
 * as the current token), optionally consuming the end tag's name. */
static jnode *parse_statements(P *p, const char *const *end_tags, bool drop_needle) {
    if (tok_is_op(cur(p), ":")) adv(p);
    if (expect_kind(p, T_BLOCK_END, "end of statement block")) return NULL;
    jnode *body = subparse(p, end_tags);
    if (!body) return NULL;
    if (cur(p)->kind == T_EOF) {
        char looking[200] = "";
        size_t off = 0;
        for (int i = 0; end_tags[i]; i++)
            off += (size_t)snprintf(looking + off, sizeof looking - off, "%s'%s'", i ? " or " : "", end_tags[i]);
        fail(p, "Unexpected end of template. Jinja was looking for the following tags: %s. The innermost block that needs to be closed is '%s'.",
             looking, p->ntags ? p->tags[p->ntags - 1] : "?");
        return NULL;
    }
    if (drop_needle) adv(p);
    return body;
}

static int parse_signature(P *p, jnode *n) {
    if (expect_op(p, "(")) return -1;
    nvec args = {0}, defs = {0};
    bool any_default = false;
    while (!tok_is_op(cur(p), ")")) {
        if (args.n && expect_op(p, ",")) return -1;
        jnode *a = parse_assign_target(p, true, NULL, false);
        if (!a) return -1;
        jnode *d = NULL;
        if (tok_is_op(cur(p), "=")) {
            adv(p);
            if (!(d = parse_expr(p, true))) return -1;
            any_default = true;
        } else if (any_default) {
            return fail(p, "non-default argument follows default argument");
        }
        if (nv_push(p, &args, a) || nv_push(p, &defs, d)) return -1;
    }
    if (expect_op(p, ")")) return -1;
    n->v = args.v;
    n->kv = defs.v;
    n->nv = args.n;
    return 0;
}

static const char *const END_FOR[] = {"endfor", "else", NULL};
static const char *const END_FOR2[] = {"endfor", NULL};
static const char *const END_IF[] = {"elif", "else", "endif", NULL};
static const char *const END_IF2[] = {"endif", NULL};
static const char *const END_SET[] = {"endset", NULL};
static const char *const END_MACRO[] = {"endmacro", NULL};
static const char *const END_CALL[] = {"endcall", NULL};
static const char *const END_FILTER[] = {"endfilter", NULL};
static const char *const END_WITH[] = {"endwith", NULL};
static const char *const END_GEN[] = {"endgeneration", NULL};
static const char *const RECURSIVE[] = {"recursive", NULL};
static const char *const IN[] = {"in", NULL};

static jnode *parse_for(P *p, jtok *t) {
    jnode *n = nn(p, NS_FOR, t);
    if (!n) return NULL;
    if (!(n->a = parse_assign_target(p, false, IN, false))) return NULL;
    if (expect_name(p, "in")) return NULL;
    int soft = p->soft;
    p->soft = 0;
    if (!(n->b = parse_tuple(p, false, false, RECURSIVE, false))) return NULL;
    if (tok_is_name(cur(p), "if")) {
        adv(p);
        if (!(n->e = parse_expr(p, true))) return NULL;
    }
    if (tok_is_name(cur(p), "recursive")) { adv(p); n->flags = 1; }
    p->in_loop++;
    n->c = parse_statements(p, END_FOR, false);
    p->in_loop--;
    if (!n->c) return NULL;
    if (tok_is_name(adv(p), "else")) {
        if (!(n->d = parse_statements(p, END_FOR2, true))) return NULL;
    }
    p->soft = soft;
    return n;
}

static jnode *parse_if(P *p, jtok *t) {
    jnode *result = nn(p, NS_IF, t), *node = result;
    if (!result) return NULL;
    p->soft++;
    for (;;) {
        if (!(node->a = parse_tuple(p, false, false, NULL, false))) return NULL;
        if (!(node->b = parse_statements(p, END_IF, false))) return NULL;
        jtok *e = adv(p);
        if (tok_is_name(e, "elif")) {
            jnode *x = nn(p, NS_IF, cur(p));
            if (!x) return NULL;
            node->c = x;
            node = x;
            continue;
        }
        if (tok_is_name(e, "else")) {
            if (!(node->c = parse_statements(p, END_IF2, true))) return NULL;
        }
        break;
    }
    p->soft--;
    return result;
}

static jnode *parse_set(P *p, jtok *t) {
    jnode *target = parse_assign_target(p, false, NULL, true);
    if (!target) return NULL;
    if (tok_is_op(cur(p), "=")) {
        adv(p);
        jnode *n = nn(p, NS_SET, t);
        if (!n) return NULL;
        n->a = target;
        if (!(n->b = parse_tuple(p, false, true, NULL, false))) return NULL;
        return n;
    }
    jnode *n = nn(p, NS_SETBLOCK, t);
    if (!n) return NULL;
    n->a = target;
    if (tok_is_op(cur(p), "|") && !(n->c = parse_filter(p, NULL, false))) return NULL;
    if (!(n->b = parse_statements(p, END_SET, true))) return NULL;
    return n;
}

/* Which of the special names kwargs / varargs / caller a macro body mentions: jinja2 only
 * accepts extra keyword or positional arguments (and a caller) when the body uses them. */
static int scan_special(const jnode *n) {
    if (!n) return 0;
    int f = 0;
    if (n->kind == NX_NAME) {
        if (n->name.n == 6 && !memcmp(n->name.p, "kwargs", 6)) f |= 1;
        if (n->name.n == 7 && !memcmp(n->name.p, "varargs", 7)) f |= 2;
        if (n->name.n == 6 && !memcmp(n->name.p, "caller", 6)) f |= 4;
    }
    f |= scan_special(n->a) | scan_special(n->b) | scan_special(n->c) | scan_special(n->d) | scan_special(n->e);
    for (int i = 0; i < n->nv; i++) f |= scan_special(n->v[i]);
    int nk = (n->kind == NX_DICT || n->kind == NS_MACRO || n->kind == NS_CALLBLOCK || n->kind == NS_WITH) ? n->nv : n->nk;
    for (int i = 0; n->kv && i < nk; i++) f |= scan_special(n->kv[i]);
    return f;
}

static jnode *parse_macro(P *p, jtok *t) {
    jnode *n = nn(p, NS_MACRO, t);
    if (!n) return NULL;
    jnode *name = parse_assign_target(p, true, NULL, false);
    if (!name) return NULL;
    n->name = name->name;
    if (parse_signature(p, n)) return NULL;
    int in_loop = p->in_loop, soft = p->soft;
    p->in_loop = 0;
    p->soft = 0;
    n->b = parse_statements(p, END_MACRO, true);
    p->in_loop = in_loop;
    p->soft = soft;
    if (!n->b) return NULL;
    n->op = (uint8_t)scan_special(n->b);
    return n;
}

static jnode *parse_call_block(P *p, jtok *t) {
    jnode *n = nn(p, NS_CALLBLOCK, t);
    if (!n) return NULL;
    if (tok_is_op(cur(p), "(") && parse_signature(p, n)) return NULL;
    jnode *call = parse_expr(p, true);
    if (!call) return NULL;
    if (call->kind != NX_CALL) { failt(p, t, "TemplateSyntaxError", "expected call"); return NULL; }
    n->a = call;
    int in_loop = p->in_loop, soft = p->soft;
    p->in_loop = 0;
    p->soft = 0;
    n->b = parse_statements(p, END_CALL, true);
    p->in_loop = in_loop;
    p->soft = soft;
    if (!n->b) return NULL;
    n->op = (uint8_t)scan_special(n->b);
    return n;
}

static jnode *parse_filter_block(P *p, jtok *t) {
    jnode *n = nn(p, NS_FILTERBLOCK, t);
    if (!n) return NULL;
    if (!(n->a = parse_filter(p, NULL, true))) return NULL;
    int soft = p->soft;
    p->soft = 0;
    n->b = parse_statements(p, END_FILTER, true);
    p->soft = soft;
    return n->b ? n : NULL;
}

static jnode *parse_with(P *p, jtok *t) {
    jnode *n = nn(p, NS_WITH, t);
    if (!n) return NULL;
    nvec targets = {0}, values = {0};
    while (cur(p)->kind != T_BLOCK_END) {
        if (targets.n && expect_op(p, ",")) return NULL;
        jnode *tg = parse_assign_target(p, false, NULL, false);
        if (!tg || expect_op(p, "=")) return NULL;
        jnode *v = parse_expr(p, true);
        if (!v || nv_push(p, &targets, tg) || nv_push(p, &values, v)) return NULL;
    }
    n->v = targets.v;
    n->kv = values.v;
    n->nv = targets.n;
    int soft = p->soft;
    p->soft = 0;
    n->b = parse_statements(p, END_WITH, true);
    p->soft = soft;
    return n->b ? n : NULL;
}

static jnode *parse_print(P *p, jtok *t) {
    jnode *n = nn(p, NS_PRINT, t);
    if (!n) return NULL;
    nvec items = {0};
    while (cur(p)->kind != T_BLOCK_END) {
        if (items.n && expect_op(p, ",")) return NULL;
        jnode *x = parse_expr(p, true);
        if (!x || nv_push(p, &items, x)) return NULL;
    }
    n->v = items.v;
    n->nv = items.n;
    return n;
}

static int fail_unknown_tag(P *p, jtok *t) {
    char msg[600];
    size_t off = (size_t)snprintf(msg, sizeof msg, "Encountered unknown tag '%.*s'.", (int)(t->n > 60 ? 60 : t->n), t->p);
    if (p->nends) {
        const char *const *ends = p->ends[p->nends - 1];
        bool expected = false;
        for (int k = 0; k < p->nends; k++)
            for (int i = 0; p->ends[k][i]; i++)
                if (tok_is_name(t, p->ends[k][i])) expected = true;
        off += (size_t)snprintf(msg + off, sizeof msg - off, expected
                                ? " You probably made a nesting mistake. Jinja is expecting this tag, but currently looking for "
                                : " Jinja was looking for the following tags: ");
        for (int i = 0; ends[i] && off < sizeof msg; i++)
            off += (size_t)snprintf(msg + off, sizeof msg - off, "%s'%s'", i ? " or " : "", ends[i]);
        if (off < sizeof msg) off += (size_t)snprintf(msg + off, sizeof msg - off, ".");
    }
    if (p->ntags && off < sizeof msg)
        snprintf(msg + off, sizeof msg - off, " The innermost block that needs to be closed is '%s'.", p->tags[p->ntags - 1]);
    return failt(p, t, "TemplateSyntaxError", "%s", msg);
}

static jnode *parse_statement(P *p) {
    jtok *t = cur(p);
    if (t->kind != T_NAME) { fail(p, "tag name expected"); return NULL; }
    static const char *const names[] = {"for", "if", "set", "macro", "call", "filter", "with", "print",
                                        "generation", "break", "continue", NULL};
    const char *tag = NULL;
    for (int i = 0; names[i]; i++)
        if (tok_is_name(t, names[i])) tag = names[i];
    if (!tag) {
        static const char *const unsupported[] = {"block", "extends", "include", "import", "from", "autoescape", NULL};
        for (int i = 0; unsupported[i]; i++)
            if (tok_is_name(t, unsupported[i])) {
                fail(p, "tag '%s' is not supported in chat templates (there is no template loader)", unsupported[i]);
                return NULL;
            }
        fail_unknown_tag(p, t);
        return NULL;
    }
    if (enter(p)) return NULL;
    p->tags[p->ntags++] = tag;
    adv(p);
    jnode *n = NULL;
    if (!strcmp(tag, "for")) n = parse_for(p, t);
    else if (!strcmp(tag, "if")) n = parse_if(p, t);
    else if (!strcmp(tag, "set")) n = parse_set(p, t);
    else if (!strcmp(tag, "macro")) n = parse_macro(p, t);
    else if (!strcmp(tag, "call")) n = parse_call_block(p, t);
    else if (!strcmp(tag, "filter")) n = parse_filter_block(p, t);
    else if (!strcmp(tag, "with")) n = parse_with(p, t);
    else if (!strcmp(tag, "print")) n = parse_print(p, t);
    else if (!strcmp(tag, "generation")) {
        /* transformers' AssistantTracker: {% generation %} renders its body unchanged */
        n = parse_statements(p, END_GEN, true);
    } else {
        bool brk = !strcmp(tag, "break");
        if (!p->in_loop) { failt(p, t, "TemplateSyntaxError", "'%s' outside of a loop", tag); return NULL; }
        n = nn(p, brk ? NS_BREAK : NS_CONTINUE, t);
    }
    p->ntags--;
    LEAVE(p);
    return n;
}

/* Body until one of end_tags (the current token is then that tag's name) or EOF. */
static jnode *subparse(P *p, const char *const *end_tags) {
    jnode *body = nn(p, NS_BODY, cur(p));
    if (!body) return NULL;
    nvec items = {0};
    if (end_tags) p->ends[p->nends++] = end_tags;
    for (;;) {
        jtok *t = cur(p);
        if (t->kind == T_EOF) break;
        if (t->kind == T_DATA) {
            jnode *d = nn(p, NS_DATA, t);
            if (!d) return NULL;
            jstr *s = ja_alloc(&p->t->a, sizeof *s);
            if (!s) { err_set(p->e, "template too large"); return NULL; }
            s->p = t->p;
            s->n = t->n;
            d->cval.k = JV_STR;
            d->cval.u.s = s;
            if (nv_push(p, &items, d)) return NULL;
            adv(p);
        } else if (t->kind == T_VAR_BEGIN) {
            adv(p);
            jnode *d = nn(p, NS_PRINT, t);
            if (!d) return NULL;
            jnode *x = parse_tuple(p, false, true, NULL, false);
            if (!x) return NULL;
            d->v = ja_alloc(&p->t->a, sizeof(jnode *));
            if (!d->v) { err_set(p->e, "template too large"); return NULL; }
            d->v[0] = x;
            d->nv = 1;
            if (expect_kind(p, T_VAR_END, "end of print statement")) return NULL;
            if (nv_push(p, &items, d)) return NULL;
        } else if (t->kind == T_BLOCK_BEGIN) {
            adv(p);
            if (end_tags) {
                bool hit = false;
                for (int i = 0; end_tags[i]; i++)
                    if (tok_is_name(cur(p), end_tags[i])) hit = true;
                if (hit) break;
            }
            jnode *s = parse_statement(p);
            if (!s) return NULL;
            if (nv_push(p, &items, s)) return NULL;
            if (expect_kind(p, T_BLOCK_END, "end of statement block")) return NULL;
        } else {
            char d[64];
            describe(t, d, sizeof d);
            fail(p, "unexpected '%s'", d);
            return NULL;
        }
    }
    if (end_tags) p->nends--;
    body->v = items.v;
    body->nv = items.n;
    return body;
}

int jinja_parse_tokens(jinja_template_t *t, jtok *toks, size_t ntoks, err_t *e) {
    P *p = calloc(1, sizeof *p);
    if (!p) return err_set(e, "out of memory");
    p->t = t;
    p->tk = toks;
    p->n = ntoks;
    p->e = e;
    jnode *root = subparse(p, NULL);
    int rc = -1;
    if (root) {
        if (cur(p)->kind != T_EOF) {
            char d[64];
            describe(cur(p), d, sizeof d);
            fail(p, "unexpected '%s'", d);
        } else {
            t->root = root;
            rc = 0;
        }
    }
    free(p);
    return rc;
}
