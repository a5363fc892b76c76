/* jinja_int.h — the insides of the Jinja interpreter, shared by its files:
 *
 *   jinja_arena.c   bump allocator with a byte cap, growable output buffers, UTF-8 helpers
 *   jinja_value.c   the value model: Python-like values, str()/repr(), equality, ordering
 *   jinja_lexer.c   source -> tokens, with jinja2's whitespace rules (trim/lstrip blocks)
 *   jinja_parser.c  tokens -> immutable syntax tree
 *   jinja_interp.c  tree walker: statements, expressions, scopes, macros, loops
 *   jinja_filters.c filters and tests
 *   jinja_methods.c Python methods on str/list/dict, attribute lookup, global functions
 *   jinja_json.c    jansson -> values, and tojson (Python's json.dumps)
 *
 * Values are small structs passed by value; everything they point to lives in the render's
 * arena, so nothing is reference counted and nothing is freed before the render ends. The
 * price is that a template building a string in a loop (`ns.s = ns.s + x`) keeps every
 * intermediate copy; the arena's byte cap turns that into a clean error instead of a hang.
 */
#ifndef KILN_JINJA_INT_H
#define KILN_JINJA_INT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "chat/jinja.h"

/* ---------------------------------------------------------------- arena */

typedef struct ja_chunk ja_chunk;
typedef struct jarena {
    ja_chunk *head;
    size_t total;  /* bytes obtained from malloc so far */
    size_t limit;  /* refuse to go past this */
} jarena;

/* Zeroed memory, or NULL when the cap is reached or malloc fails. */
void *ja_alloc(jarena *a, size_t n);
void ja_free_all(jarena *a);

/* ---------------------------------------------------------------- values */

typedef enum {
    JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_TUPLE, JV_DICT,
    JV_NS, JV_FUNC, JV_MACRO, JV_LOOP
} jv_kind;

typedef struct jstr {
    size_t n;
    const char *p;  /* not NUL-terminated; may point into the tree, the input JSON or the arena */
} jstr;

struct jlist;
struct jdict;
struct jfunc;
struct jmacro;
struct jloop;

typedef struct jv {
    uint8_t k;      /* jv_kind */
    uint8_t flag;   /* JV_UNDEF: 1 = unsafe attribute (SecurityError when used) */
    union {
        int b;
        int64_t i;
        double f;
        jstr *s;
        struct jlist *l;   /* JV_LIST, JV_TUPLE */
        struct jdict *d;   /* JV_DICT, JV_NS */
        struct jfunc *fn;
        struct jmacro *m;
        struct jloop *loop;
        const char *undef; /* JV_UNDEF: the message jinja2 would raise with, or NULL */
    } u;
} jv;

typedef struct jlist {
    size_t n, cap;
    jv *v;
} jlist;

/* Insertion-ordered, like Python's dict; an open-addressing index appears past 8 keys. */
typedef struct jdict {
    size_t n, cap;
    jv *k, *v;
    uint32_t *idx;  /* slot -> entry+1, 0 = empty; NULL while small */
    size_t idx_cap;
} jdict;

/* ---------------------------------------------------------------- syntax tree */

typedef enum {
    /* expressions */
    NX_CONST, NX_NAME, NX_LIST, NX_TUPLE, NX_DICT, NX_ATTR, NX_ITEM, NX_SLICE, NX_CALL,
    NX_FILTER, NX_TEST, NX_NOT, NX_NEG, NX_POS, NX_BIN, NX_CMP, NX_AND, NX_OR, NX_COND,
    NX_CONCAT, NX_NSREF,
    /* statements */
    NS_BODY, NS_DATA, NS_PRINT, NS_IF, NS_FOR, NS_SET, NS_SETBLOCK, NS_MACRO, NS_CALLBLOCK,
    NS_FILTERBLOCK, NS_WITH, NS_BREAK, NS_CONTINUE
} jnode_kind;

/* Binary and comparison operators. */
enum { OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW,
       CMP_EQ, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE, CMP_IN, CMP_NOTIN };

struct jr;
typedef struct jargs {
    int np, nk;
    jv *pos;
    jstr *kn;
    jv *kv;
} jargs;

typedef int (*jfilter_fn)(struct jr *r, jv v, const jargs *a, jv *out);
typedef struct jfilter_def {
    const char *name;
    jfilter_fn fn;
} jfilter_def;

/* Field use per kind is listed in jinja_parser.c's story comment. */
typedef struct jnode {
    uint8_t kind, op;
    uint8_t flags;        /* NS_FOR: 1 = recursive; NX_FILTER/NX_TEST: 1 = deferred unknown */
    int line, col;
    jv cval;
    jstr name, name2;
    struct jnode *a, *b, *c, *d, *e;
    struct jnode **v;
    int nv;
    struct jnode **kv;
    jstr *kn;
    int nk;
    uint8_t *ops;         /* NX_CMP: operator per operand in v */
    const jfilter_def *fdef;
} jnode;

struct jinja_template {
    jarena a;             /* owns every node and literal */
    jnode *root;
    char *src;            /* the normalized source */
};

/* ---------------------------------------------------------------- tokens */

typedef enum {
    T_EOF, T_DATA, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END,
    T_NAME, T_STRING, T_INT, T_FLOAT, T_OP
} jtok_kind;

typedef struct jtok {
    uint8_t kind;
    int line, col;
    const char *p;        /* T_NAME, T_OP, T_INT/FLOAT text; T_DATA text */
    size_t n;
    /* decoded literal: strings are unescaped into the arena */
    jstr str;
    int64_t ival;
    double fval;
} jtok;

/* Splits src (already newline-normalized, NUL-terminated) into tokens in the arena. */
int jinja_lex(jarena *a, const char *src, size_t len, jtok **toks, size_t *ntoks, err_t *e);
int jinja_parse_tokens(jinja_template_t *t, jtok *toks, size_t ntoks, err_t *e);

/* ---------------------------------------------------------------- render state */

typedef struct jbuf {
    char *p;
    size_t n, cap;
    size_t limit;         /* error past this many bytes */
} jbuf;

typedef struct jscope {
    struct jscope *parent;
    jdict vars;
} jscope;

typedef int (*jfn)(struct jr *r, jv self, const jargs *a, jv *out);
typedef struct jfunc {
    jfn fn;
    jv self;
    const char *name;
} jfunc;

typedef struct jmacro {
    const jnode *def;     /* NS_MACRO, or NS_CALLBLOCK for a caller() */
    jscope *closure;
    jv caller;            /* JV_UNDEF unless invoked from a call block */
} jmacro;

typedef struct jloop {
    jlist *items;
    size_t i;
    int depth0;
    const jnode *node;    /* the NS_FOR, for loop(...) recursion */
    jscope *scope;        /* scope the for statement runs in */
    jv last_changed;
    bool has_changed;
} jloop;

typedef struct jr {
    jarena a;
    err_t *e;
    jinja_limits_t lim;
    jinja_options_t opt;
    jbuf *out;
    uint64_t steps;
    int depth;
    uintptr_t stack_floor; /* enter() fails below this stack address (see jinja_render) */
    jscope *sc;
    jdict *globals;       /* render variables, then built-in globals */
    int line, col;        /* position of the node being evaluated, for error messages */
} jr;

/* Error helpers: all return -1. jr_fail prefixes "line L, column C: KIND: ". */
int jr_fail(jr *r, const char *kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int jr_oom(jr *r);
int jr_step(jr *r, uint64_t n);   /* counts work against max_steps */

/* ---------------------------------------------------------------- value helpers */

static inline jv jv_undef(const char *msg) { jv v = {JV_UNDEF, 0, {0}}; v.u.undef = msg; return v; }
static inline jv jv_none(void) { jv v = {JV_NONE, 0, {0}}; return v; }
static inline jv jv_bool(int b) { jv v = {JV_BOOL, 0, {0}}; v.u.b = !!b; return v; }
static inline jv jv_int(int64_t i) { jv v = {JV_INT, 0, {0}}; v.u.i = i; return v; }
static inline jv jv_float(double f) { jv v = {JV_FLOAT, 0, {0}}; v.u.f = f; return v; }
static inline bool jv_is_num(jv v) { return v.k == JV_INT || v.k == JV_FLOAT || v.k == JV_BOOL; }
static inline bool jv_is_intlike(jv v) { return v.k == JV_INT || v.k == JV_BOOL; }
static inline int64_t jv_intval(jv v) { return v.k == JV_BOOL ? v.u.b : v.u.i; }
static inline double jv_num(jv v) { return v.k == JV_FLOAT ? v.u.f : (double)jv_intval(v); }
static inline bool jv_is_seq(jv v) { return v.k == JV_LIST || v.k == JV_TUPLE; }

/* Strings: jv_str wraps existing bytes (no copy), jv_strdup copies into the arena. */
int jv_str(jr *r, const char *p, size_t n, jv *out);
int jv_strdup(jr *r, const char *p, size_t n, jv *out);
int jv_strz(jr *r, const char *z, jv *out);
int jv_strf(jr *r, jv *out, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* An undefined value whose message is formatted now. */
jv jv_undeff(jr *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

jlist *jl_new(jr *r, size_t cap);
int jl_push(jr *r, jlist *l, jv v);
int jv_list(jr *r, size_t cap, jv *out);       /* empty list value */
jdict *jd_new(jr *r);
int jd_set(jr *r, jdict *d, jv k, jv v);
bool jd_get(const jdict *d, jv k, jv *out);
bool jd_get_s(const jdict *d, const char *p, size_t n, jv *out);
int jd_set_s(jr *r, jdict *d, const char *p, size_t n, jv v);
bool jv_hashable(jv v);

bool jv_truthy(jv v);
bool jv_eq(jv a, jv b);
/* Python ordering: *res <0, 0, >0; TypeError for mismatched types. */
int jv_cmp(jr *r, jv a, jv b, int *res, const char *opname);
const char *jv_type_name(jv v);

/* Python str() and repr() appended to b. */
int jv_write_str(jr *r, jbuf *b, jv v);
int jv_write_repr(jr *r, jbuf *b, jv v);
/* str(v) as a value (strings returned as is). */
int jv_to_str(jr *r, jv v, jv *out);
void jv_float_repr(double f, char out[40]);

/* Output buffers. */
int jb_put(jr *r, jbuf *b, const char *p, size_t n);
int jb_putc(jr *r, jbuf *b, char c);
int jb_puts(jr *r, jbuf *b, const char *z);
void jb_init(jbuf *b, size_t limit);
int jb_to_str(jr *r, jbuf *b, jv *out);

/* UTF-8 / Python string helpers. */
size_t u8_decode(const char *p, size_t n, uint32_t *cp);   /* bytes consumed (>=1) */
size_t u8_encode(uint32_t cp, char out[4]);
size_t u8_len(const char *p, size_t n);                    /* code points */
bool u8_valid(const char *p, size_t n, size_t *bad_at);
bool py_isspace(uint32_t cp);
/* Byte offset of code point index i (clamped to n). */
size_t u8_offset(const char *p, size_t n, size_t i);

/* ---------------------------------------------------------------- interpreter services */

int jr_call(jr *r, jv fn, const jargs *a, jv *out);
int jr_getattr(jr *r, jv obj, const char *name, size_t n, jv *out);
int jr_getitem(jr *r, jv obj, jv key, jv *out);
/* Materializes any iterable into a list (strings into characters, dicts into keys). */
int jr_iterate(jr *r, jv v, jlist **out);
int jr_undef_error(jr *r, jv u);   /* raises the error an undefined carries */
int jr_apply_filter(jr *r, const char *name, jv v, const jargs *a, jv *out);
int jr_apply_test(jr *r, const char *name, jv v, const jargs *a, bool *res);
int jr_binop(jr *r, int op, jv a, jv b, jv *out);

/* jinja_methods.c */
int jm_method(jr *r, jv obj, const char *name, size_t n, jv *out, bool *found);
int jm_install_globals(jr *r, jdict *g);

/* String helpers shared by methods and filters (jinja_methods.c). */
int js_strip(jr *r, jv s, jv chars, int mode, jv *out);          /* mode: 1 left, 2 right, 3 both */
int js_case(jr *r, jv s, int mode, jv *out);                      /* 0 lower 1 upper 2 title 3 capitalize 4 swapcase */
int js_replace(jr *r, jv s, jv old, jv nw, int64_t count, jv *out);
int js_split(jr *r, jv s, jv sep, int64_t maxsplit, bool right, jv *out);
int js_splitlines(jr *r, jv s, bool keepends, jlist **out);
int js_pad(jr *r, jv s, int64_t width, const char *fill, size_t filln, int mode, jv *out); /* 0 ljust 1 rjust 2 center */
int jm_dict_items(jr *r, const jdict *d, jv *out);
int jm_percent_format(jr *r, jv fmt, jv args, jv *out);

/* jinja_filters.c */
const jfilter_def *jinja_find_filter(const char *name, size_t n);
const jfilter_def *jinja_find_test(const char *name, size_t n);
/* Argument helpers for filters and functions: the i-th positional or the named kwarg. */
bool ja_arg(const jargs *a, int i, const char *name, jv *out);
int ja_check(jr *r, const jargs *a, int maxpos, const char *const *names, const char *fname);

/* jinja_json.c */
int jv_from_json(jr *r, const json_t *j, jv *out, int depth);
typedef struct jjson_opts {
    bool ensure_ascii, sort_keys;
    const char *indent;       /* NULL = compact */
    size_t indent_n;
    const char *item_sep, *key_sep;
    size_t item_sep_n, key_sep_n;
} jjson_opts;
int jv_write_json(jr *r, jbuf *b, jv v, const jjson_opts *o, int depth);

/* Depth cap for recursive walks over values (repr, equality, JSON). */
#define JV_MAX_NEST 256

#endif
