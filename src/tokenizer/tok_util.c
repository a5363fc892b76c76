/* tok_util.c — support code for the tokenizer: UTF-8 (buffers are base/sbuf.h), Rust-compatible
 * Unicode character classes (on utf8proc's tables), two open-addressing hash maps and a
 * string arena.
 *
 * The maps are plain linear probing at load ≤ 1/2: the vocab (up to ~260k strings) and the
 * merges (up to ~515k pairs) are built once and then only read, so there is no deletion and
 * no need for anything cleverer. Allocation failures return -1; callers turn that into an
 * "out of memory" error.
 */
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ---- buffers ------------------------------------------------------------------------- */
int tk_sb_put_cp(sbuf_t *b, uint32_t cp) {
    char u[4];
    int n;
    if (cp < 0x80) { u[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { u[0] = (char)(0xC0 | cp >> 6); u[1] = (char)(0x80 | (cp & 63)); n = 2; }
    else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | cp >> 12); u[1] = (char)(0x80 | ((cp >> 6) & 63));
        u[2] = (char)(0x80 | (cp & 63)); n = 3;
    } else {
        u[0] = (char)(0xF0 | cp >> 18); u[1] = (char)(0x80 | ((cp >> 12) & 63));
        u[2] = (char)(0x80 | ((cp >> 6) & 63)); u[3] = (char)(0x80 | (cp & 63)); n = 4;
    }
    return tk_sb_put(b, u, n);
}

int tk_iv_push(ivec_t *a, int32_t x) {
    if (a->n == a->cap) {
        int cap = a->cap ? a->cap * 2 : 16;
        int32_t *v = realloc(a->v, sizeof *v * cap);
        if (!v) return -1;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return 0;
}

int tk_iv_append(ivec_t *a, const int32_t *x, int n) {
    if (a->n + n > a->cap) {
        int cap = a->cap ? a->cap : 16;
        while (cap < a->n + n) cap *= 2;
        int32_t *v = realloc(a->v, sizeof *v * cap);
        if (!v) return -1;
        a->v = v;
        a->cap = cap;
    }
    if (n) memcpy(a->v + a->n, x, sizeof *x * n);
    a->n += n;
    return 0;
}

int tk_spans_push(spans_t *a, size_t s, size_t e, int m) {
    if (a->n == a->cap) {
        int cap = a->cap ? a->cap * 2 : 32;
        span_t *v = realloc(a->v, sizeof *v * cap);
        if (!v) return -1;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = (span_t){s, e, m};
    return 0;
}

int tk_pl_add(plist_t *l, const char *s, size_t n, int first) {
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 16;
        piece_t *p = realloc(l->p, sizeof *p * cap);
        if (!p) return -1;
        l->p = p;
        l->cap = cap;
    }
    size_t off = l->text.len;
    if (tk_sb_put(&l->text, s, n)) return -1;
    l->p[l->n++] = (piece_t){off, n, first};
    return 0;
}

void tk_pl_clear(plist_t *l) {
    l->n = 0;
    l->text.len = 0;
}

void tk_pl_free(plist_t *l) {
    free(l->text.p);
    free(l->p);
    memset(l, 0, sizeof *l);
}

int tk_sl_push(strlist_t *l, const char *s, size_t n) {
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 16;
        char **v = realloc(l->s, sizeof *v * cap);
        if (!v) return -1;
        l->s = v;
        size_t *w = realloc(l->len, sizeof *w * cap);
        if (!w) return -1;
        l->len = w;
        l->cap = cap;
    }
    char *c = malloc(n + 1);
    if (!c) return -1;
    if (n) memcpy(c, s, n);
    c[n] = 0;
    l->s[l->n] = c;
    l->len[l->n++] = n;
    return 0;
}

void tk_sl_free(strlist_t *l) {
    for (int i = 0; i < l->n; i++) free(l->s[i]);
    free(l->s);
    free(l->len);
    memset(l, 0, sizeof *l);
}

/* ---- UTF-8 ---------------------------------------------------------------------------- */
/* Length of the well-formed sequence at s (Unicode Table 3-7), or 0 if ill-formed; *sub gets
 * the length of its maximal valid prefix (for lossy decoding). */
static int tk_utf8_seq(const unsigned char *s, size_t n, int *sub) {
    unsigned c = s[0];
    *sub = 0;
    if (c < 0x80) return 1;
    int need;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c == 0xE0) { need = 2; lo = 0xA0; }
    else if (c >= 0xE1 && c <= 0xEC) need = 2;
    else if (c == 0xED) { need = 2; hi = 0x9F; }
    else if (c >= 0xEE && c <= 0xEF) need = 2;
    else if (c == 0xF0) { need = 3; lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) need = 3;
    else if (c == 0xF4) { need = 3; hi = 0x8F; }
    else return 0;
    int i;
    for (i = 1; i <= need; i++) {
        if ((size_t)i >= n) break;
        unsigned b = s[i];
        if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) break;
    }
    if (i > need) return need + 1;
    *sub = i; /* lead byte plus i-1 valid continuation bytes */
    return 0;
}

size_t tk_utf8_invalid_at(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (u[i] < 0x80) { i++; continue; }
        int sub, k = tk_utf8_seq(u + i, n - i, &sub);
        if (!k) return i;
        i += k;
    }
    return (size_t)-1;
}

int tk_utf8_next(const char *s, size_t n, uint32_t *cp) {
    const unsigned char *u = (const unsigned char *)s;
    unsigned c = u[0];
    if (c < 0x80 || n < 2) { *cp = c; return 1; }
    if (c < 0xE0) { *cp = (c & 31) << 6 | (u[1] & 63); return 2; }
    if (c < 0xF0 || n < 4) {
        if (n < 3) { *cp = c; return 1; }
        *cp = (c & 15) << 12 | (u[1] & 63) << 6 | (u[2] & 63);
        return 3;
    }
    *cp = (c & 7) << 18 | (u[1] & 63) << 12 | (u[2] & 63) << 6 | (u[3] & 63);
    return 4;
}

int tk_utf8_lossy(sbuf_t *out, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, run = 0;
    while (i < n) {
        if (u[i] < 0x80) { i++; continue; }
        int sub, k = tk_utf8_seq(u + i, n - i, &sub);
        if (k) { i += k; continue; }
        if (tk_sb_put(out, s + run, i - run) || tk_sb_put(out, "\xEF\xBF\xBD", 3)) return -1;
        i += sub ? sub : 1; /* one U+FFFD per maximal subpart */
        run = i;
    }
    return tk_sb_put(out, s + run, n - run);
}

/* ---- Unicode classes ------------------------------------------------------------------ */
int tk_uc_is_whitespace(uint32_t c) {
    return (c >= 9 && c <= 13) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

int tk_uc_is_numeric(uint32_t c) {
    int k = utf8proc_category((utf8proc_int32_t)c);
    return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

int tk_uc_is_punct(uint32_t c) {
    if (c < 0x80) return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
                         (c >= 123 && c <= 126);
    int k = utf8proc_category((utf8proc_int32_t)c);
    return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

int tk_uc_is_alnum(uint32_t c) {
    int k = utf8proc_category((utf8proc_int32_t)c);
    return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
           (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO);
}

int tk_uc_is_word(uint32_t c) {
    if (c == '_' || c == 0x200C || c == 0x200D) return 1;
    int k = utf8proc_category((utf8proc_int32_t)c);
    return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
           (k >= UTF8PROC_CATEGORY_MN && k <= UTF8PROC_CATEGORY_ME) || k == UTF8PROC_CATEGORY_ND ||
           k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_PC;
}

int tk_uc_is_control(uint32_t c) {
    int k = utf8proc_category((utf8proc_int32_t)c);
    return k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_CO ||
           k == UTF8PROC_CATEGORY_CS || k == UTF8PROC_CATEGORY_CN;
}

int tk_uc_is_mark(uint32_t c) {
    int k = utf8proc_category((utf8proc_int32_t)c);
    return k >= UTF8PROC_CATEGORY_MN && k <= UTF8PROC_CATEGORY_ME;
}

int tk_uc_is_cjk(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
           (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* ---- hashing ----------------------------------------------------------------------------
 * FNV-1a over 8-byte words then a murmur finalizer: cheap for the short keys we hash (tokens
 * are mostly under 16 bytes) and good enough spread for linear probing. */
uint64_t tk_tok_hash(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 0xcbf29ce484222325ull ^ n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * 0x100000001b3ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

static size_t pow2_for(size_t expect) {
    size_t cap = 16;
    while (cap < expect * 2 + 2) cap *= 2;
    return cap;
}

int tk_sm_init(strmap_t *m, size_t expect) {
    memset(m, 0, sizeof *m);
    m->cap = pow2_for(expect);
    m->keys = calloc(m->cap, sizeof *m->keys);
    m->klen = calloc(m->cap, sizeof *m->klen);
    m->vals = calloc(m->cap, sizeof *m->vals);
    m->hash32 = calloc(m->cap, sizeof *m->hash32);
    if (!m->keys || !m->klen || !m->vals || !m->hash32) { tk_sm_free(m); return -1; }
    return 0;
}

void tk_sm_free(strmap_t *m) {
    free(m->keys);
    free(m->klen);
    free(m->vals);
    free(m->hash32);
    memset(m, 0, sizeof *m);
}

static int tk_sm_grow(strmap_t *m) {
    strmap_t n;
    if (tk_sm_init(&n, m->cap)) return -1; /* doubles the capacity */
    for (size_t i = 0; i < m->cap; i++)
        if (m->keys[i]) tk_sm_put(&n, m->keys[i], m->klen[i], m->vals[i]);
    tk_sm_free(m);
    *m = n;
    return 0;
}

int tk_sm_put(strmap_t *m, const char *k, size_t n, int32_t v) {
    if ((m->n + 1) * 2 > m->cap && tk_sm_grow(m)) return -1;
    uint64_t h = tk_tok_hash(k, n);
    uint32_t h32 = (uint32_t)(h >> 32);
    size_t mask = m->cap - 1, i = h & mask;
    while (m->keys[i]) {
        if (m->hash32[i] == h32 && m->klen[i] == n && !memcmp(m->keys[i], k, n)) {
            m->vals[i] = v;
            return 0;
        }
        i = (i + 1) & mask;
    }
    m->keys[i] = k;
    m->klen[i] = (uint32_t)n;
    m->vals[i] = v;
    m->hash32[i] = h32;
    m->n++;
    return 0;
}

int32_t tk_sm_get(const strmap_t *m, const char *k, size_t n) {
    if (!m->cap) return -1;
    uint64_t h = tk_tok_hash(k, n);
    uint32_t h32 = (uint32_t)(h >> 32);
    size_t mask = m->cap - 1, i = h & mask;
    while (m->keys[i]) {
        if (m->hash32[i] == h32 && m->klen[i] == n && !memcmp(m->keys[i], k, n)) return m->vals[i];
        i = (i + 1) & mask;
    }
    return -1;
}

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

int tk_um_init(u64map_t *m, size_t expect) {
    m->cap = pow2_for(expect);
    m->n = 0;
    m->keys = malloc(sizeof *m->keys * m->cap);
    m->vals = malloc(sizeof *m->vals * m->cap);
    if (!m->keys || !m->vals) { tk_um_free(m); return -1; }
    memset(m->keys, 0xff, sizeof *m->keys * m->cap);
    return 0;
}

void tk_um_free(u64map_t *m) {
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

int tk_um_put(u64map_t *m, uint64_t k, uint64_t v) {
    if ((m->n + 1) * 2 > m->cap) {
        u64map_t n;
        if (tk_um_init(&n, m->cap)) return -1;
        for (size_t i = 0; i < m->cap; i++)
            if (m->keys[i] != UINT64_MAX) tk_um_put(&n, m->keys[i], m->vals[i]);
        tk_um_free(m);
        *m = n;
    }
    size_t mask = m->cap - 1, i = mix64(k) & mask;
    while (m->keys[i] != UINT64_MAX) {
        if (m->keys[i] == k) { m->vals[i] = v; return 0; }
        i = (i + 1) & mask;
    }
    m->keys[i] = k;
    m->vals[i] = v;
    m->n++;
    return 0;
}

int tk_um_get(const u64map_t *m, uint64_t k, uint64_t *v) {
    if (!m->cap) return 0;
    size_t mask = m->cap - 1, i = mix64(k) & mask;
    while (m->keys[i] != UINT64_MAX) {
        if (m->keys[i] == k) { *v = m->vals[i]; return 1; }
        i = (i + 1) & mask;
    }
    return 0;
}

/* ---- arena ---------------------------------------------------------------------------- */
struct arena_blk {
    struct arena_blk *next;
    size_t used, cap;
    char data[];
};

char *tk_arena_strndup(arena_t *a, const char *s, size_t n) {
    struct arena_blk *b = a->head;
    if (!b || b->used + n + 1 > b->cap) {
        size_t cap = n + 1 > (1u << 20) ? n + 1 : (1u << 20);
        b = malloc(sizeof *b + cap);
        if (!b) return NULL;
        b->used = 0;
        b->cap = cap;
        b->next = a->head;
        a->head = b;
    }
    char *p = b->data + b->used;
    if (n) memcpy(p, s, n);
    p[n] = 0;
    b->used += n + 1;
    return p;
}

void tk_arena_free(arena_t *a) {
    struct arena_blk *b = a->head;
    while (b) {
        struct arena_blk *n = b->next;
        free(b);
        b = n;
    }
    a->head = NULL;
}

/* ---- JSON helpers --------------------------------------------------------------------- */
int tk_js_pattern(json_t *o, const char *path, int *is_regex, const char **s, size_t *n, err_t *e) {
    json_t *p = json_object_get(o, "pattern");
    json_t *v;
    if (!json_is_object(p)) return err_set(e, "%s.pattern: expected {\"String\": ...} or {\"Regex\": ...}", path);
    if ((v = json_object_get(p, "String")) && json_is_string(v)) *is_regex = 0;
    else if ((v = json_object_get(p, "Regex")) && json_is_string(v)) *is_regex = 1;
    else return err_set(e, "%s.pattern: expected {\"String\": ...} or {\"Regex\": ...}", path);
    *s = json_string_value(v);
    *n = json_string_length(v);
    return 0;
}

int tk_js_char(json_t *o, const char *k, const char *path, uint32_t dflt, uint32_t *cp, err_t *e) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) { *cp = dflt; return 0; }
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    if (!s || n == 0 || n > 4 || tk_utf8_invalid_at(s, n) != (size_t)-1 || tk_utf8_len_lead((unsigned char)s[0]) != (int)n)
        return err_set(e, "%s.%s: expected a single character", path, k);
    tk_utf8_next(s, n, cp);
    return 0;
}
