/* tok_bpe.c — the BPE model: vocab + ranked merges, byte-level or SentencePiece-style.
 *
 * Loading builds two hash maps: token → id, and (left id, right id) → (rank, merged id). A
 * merge "a b" is valid only if a, b and a+b (b without continuing_subword_prefix) are all in
 * the vocab, as in HF; a later duplicate of a pair overwrites the earlier rank, as HF's
 * HashMap collect does.
 *
 * Encoding one word (HF's Word::merge_all): the word starts as one symbol per character
 * (continuing_subword_prefix on all but the first, end_of_word_suffix on the last; unknown
 * characters become <0xAB> byte tokens with byte_fallback, else the unk token, fused if
 * fuse_unk, else dropped). Then a binary min-heap of candidate merges ordered by (rank,
 * position) is popped until empty; an entry whose pair no longer exists at its position is
 * stale and skipped. Each merge pushes at most two new candidates, so a word of n symbols
 * costs O(n log n) — this matters for Gemma, whose pre-tokenizer leaves whole paragraphs as a
 * single word.
 */
#include "tokenizer/tok_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sym {
    int32_t id;
    int32_t prev, next;
    int32_t alive;
} sym_t;

typedef struct cand {
    uint32_t rank, pos;
    int32_t new_id;
} cand_t;

static inline int cand_less(cand_t a, cand_t b) {
    return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos;
}

typedef struct heap {
    cand_t *v;
    int n, cap;
    cand_t *stack; /* the caller's initial buffer: grown into the heap, never realloc'd */
} heap_t;

static int heap_push(heap_t *h, cand_t c) {
    if (h->n == h->cap) {
        int cap = h->cap * 2;
        cand_t *v;
        if (h->v == h->stack) {
            v = malloc(sizeof *v * cap);
            if (v) memcpy(v, h->v, sizeof *v * h->n);
        } else {
            v = realloc(h->v, sizeof *v * cap);
        }
        if (!v) return -1;
        h->v = v;
        h->cap = cap;
    }
    int i = h->n++;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!cand_less(c, h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = c;
    return 0;
}

static cand_t heap_pop(heap_t *h) {
    cand_t top = h->v[0], last = h->v[--h->n];
    int i = 0;
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        cand_t best = last;
        if (l < h->n && cand_less(h->v[l], best)) { m = l; best = h->v[l]; }
        if (r < h->n && cand_less(h->v[r], best)) m = r;
        if (m == i) break;
        h->v[i] = h->v[m];
        i = m;
    }
    if (h->n) h->v[i] = last;
    return top;
}

static inline int merge_of(const model_t *m, int32_t a, int32_t b, uint32_t *rank, int32_t *nid) {
    uint64_t v;
    if (!tk_um_get(&m->merges, (uint64_t)(uint32_t)a << 32 | (uint32_t)b, &v)) return 0;
    *rank = (uint32_t)(v >> 32);
    *nid = (int32_t)(uint32_t)v;
    return 1;
}

/* ---- loading ------------------------------------------------------------------------- */
static int add_merge(model_t *m, const char *a, size_t an, const char *b, size_t bn, uint32_t rank,
                     sbuf_t *tmp, const char *path, int idx, err_t *e) {
    int32_t ia = tk_sm_get(&m->vocab, a, an), ib = tk_sm_get(&m->vocab, b, bn);
    if (ia < 0) return err_set(e, "%s.merges[%d]: token \"%.*s\" is not in the vocab", path, idx, (int)an, a);
    if (ib < 0) return err_set(e, "%s.merges[%d]: token \"%.*s\" is not in the vocab", path, idx, (int)bn, b);
    size_t pl = m->prefix ? strlen(m->prefix) : 0;
    if (bn < pl) return err_set(e, "%s.merges[%d]: \"%.*s\" is shorter than continuing_subword_prefix", path, idx, (int)bn, b);
    tmp->len = 0;
    if (tk_sb_put(tmp, a, an) || tk_sb_put(tmp, b + pl, bn - pl)) return err_set(e, "out of memory");
    int32_t in = tk_sm_get(&m->vocab, tmp->p, tmp->len);
    if (in < 0)
        return err_set(e, "%s.merges[%d]: merged token \"%.*s\" is not in the vocab", path, idx, (int)tmp->len, tmp->p);
    if (tk_um_put(&m->merges, (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib, (uint64_t)rank << 32 | (uint32_t)in))
        return err_set(e, "out of memory");
    return 0;
}

int tk_bpe_load(model_t *m, json_t *j, arena_t *a, const char *path, err_t *e) {
    json_t *merges = json_object_get(j, "merges");
    if (merges && !json_is_array(merges)) return err_set(e, "%s.merges: expected an array", path);
    const char *s;
    if ((s = tk_js_str(j, "continuing_subword_prefix")) && *s && !(m->prefix = tk_arena_strndup(a, s, strlen(s)))) goto oom;
    if ((s = tk_js_str(j, "end_of_word_suffix")) && *s && !(m->suffix = tk_arena_strndup(a, s, strlen(s)))) goto oom;
    m->fuse_unk = tk_js_bool(j, "fuse_unk", 0);
    m->byte_fallback = tk_js_bool(j, "byte_fallback", 0);
    m->ignore_merges = tk_js_bool(j, "ignore_merges", 0);
    json_t *dr = json_object_get(j, "dropout");
    if (json_is_number(dr) && json_number_value(dr) > 0)
        return err_set(e, "%s.dropout: BPE dropout is not supported (it makes encoding random)", path);

    size_t nm = merges ? json_array_size(merges) : 0;
    if (tk_um_init(&m->merges, nm)) goto oom;
    sbuf_t tmp = {0};
    for (size_t i = 0; i < nm; i++) {
        json_t *x = json_array_get(merges, i);
        int rc;
        if (json_is_string(x)) {
            const char *str = json_string_value(x);
            size_t len = json_string_length(x);
            const char *sp = memchr(str, ' ', len);
            if (!sp || memchr(sp + 1, ' ', len - (size_t)(sp + 1 - str))) {
                free(tmp.p);
                return err_set(e, "%s.merges[%zu]: expected \"left right\" (exactly one space), got \"%s\"", path, i, str);
            }
            rc = add_merge(m, str, (size_t)(sp - str), sp + 1, len - (size_t)(sp + 1 - str), (uint32_t)i, &tmp, path, (int)i, e);
        } else if (json_is_array(x) && json_array_size(x) == 2 && json_is_string(json_array_get(x, 0)) &&
                   json_is_string(json_array_get(x, 1))) {
            json_t *l = json_array_get(x, 0), *r = json_array_get(x, 1);
            rc = add_merge(m, json_string_value(l), json_string_length(l), json_string_value(r),
                           json_string_length(r), (uint32_t)i, &tmp, path, (int)i, e);
        } else {
            free(tmp.p);
            return err_set(e, "%s.merges[%zu]: expected a \"left right\" string or a [left, right] pair", path, i);
        }
        if (rc) { free(tmp.p); return -1; }
    }
    free(tmp.p);

    char name[8];
    for (int b = 0; b < 256; b++) {
        snprintf(name, sizeof name, "<0x%02X>", b);
        m->byte_id[b] = tk_sm_get(&m->vocab, name, 6);
    }
    /* direct table for single-code-point tokens (all of a byte-level alphabet) */
    if (!m->prefix && !m->suffix) {
        m->cp_id = malloc(sizeof *m->cp_id * 0x10000);
        if (!m->cp_id) goto oom;
        for (int i = 0; i < 0x10000; i++) m->cp_id[i] = -1;
        for (int32_t id = 0; id < m->n_id; id++) {
            const char *t = m->id_tok[id];
            if (!t || !*t) continue;
            size_t n = strlen(t);
            uint32_t cp;
            if (tk_utf8_len_lead((unsigned char)t[0]) == (int)n && tk_utf8_next(t, n, &cp) == (int)n && cp < 0x10000 &&
                tk_sm_get(&m->vocab, t, n) == id)
                m->cp_id[cp] = id;
        }
    }
    return 0;
oom:
    return err_set(e, "out of memory");
}

/* ---- encoding ------------------------------------------------------------------------ */
#define STACK_SYMS 64

int tk_bpe_tokenize(const model_t *m, const char *s, size_t n, ivec_t *out, err_t *e) {
    if (n == 0) return 0;
    if (m->ignore_merges) {
        int32_t id = tk_sm_get(&m->vocab, s, n);
        if (id >= 0) return tk_iv_push(out, id) ? err_set(e, "out of memory") : 0;
    }
    size_t pl = m->prefix ? strlen(m->prefix) : 0, sl = m->suffix ? strlen(m->suffix) : 0;
    size_t max_syms = n * (1 + pl + sl) + 1;
    sym_t stack_syms[STACK_SYMS];
    cand_t stack_heap[STACK_SYMS * 2];
    sym_t *sy = max_syms <= STACK_SYMS ? stack_syms : malloc(sizeof *sy * max_syms);
    heap_t h = {stack_heap, 0, STACK_SYMS * 2, stack_heap};
    sbuf_t tmp = {0};
    int ns = 0, rc = -1;
    if (!sy) return err_set(e, "out of memory");

    /* 1. one symbol per character */
    int32_t unk = -1; /* pending unk id */
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int k = tk_utf8_next(s + i, n - i, &cp);
        int first = i == 0, last = i + k == n;
        int32_t id;
        const char *cs = s + i;
        size_t cl = k;
        if (m->cp_id && cp < 0x10000) {
            id = m->cp_id[cp];
        } else {
            if (!first && m->prefix) {
                tmp.len = 0;
                if (tk_sb_put(&tmp, m->prefix, pl) || tk_sb_put(&tmp, s + i, k)) goto oom;
                cs = tmp.p; cl = tmp.len;
            }
            if (last && m->suffix) {
                if (cs != tmp.p) { tmp.len = 0; if (tk_sb_put(&tmp, s + i, k)) goto oom; }
                if (tk_sb_put(&tmp, m->suffix, sl)) goto oom;
                cs = tmp.p; cl = tmp.len;
            }
            id = tk_sm_get(&m->vocab, cs, cl);
        }
        i += k;
        if (id >= 0) {
            if (unk >= 0) { sy[ns++] = (sym_t){unk, 0, 0, 1}; unk = -1; }
            sy[ns++] = (sym_t){id, 0, 0, 1};
            continue;
        }
        if (m->byte_fallback) {
            int ok = 1;
            for (size_t b = 0; b < cl; b++)
                if (m->byte_id[(unsigned char)cs[b]] < 0) ok = 0;
            if (ok) {
                /* HF leaves a pending unk in place here, so it lands after these bytes */
                for (size_t b = 0; b < cl; b++) sy[ns++] = (sym_t){m->byte_id[(unsigned char)cs[b]], 0, 0, 1};
                continue;
            }
        }
        if (m->unk) {
            if (m->unk_id < 0) { err_set(e, "BPE: unk_token \"%s\" is not in the vocab", m->unk); goto out; }
            if (unk >= 0 && !m->fuse_unk) sy[ns++] = (sym_t){unk, 0, 0, 1};
            unk = m->unk_id;
        }
    }
    if (unk >= 0) sy[ns++] = (sym_t){unk, 0, 0, 1};
    for (int i = 0; i < ns; i++) {
        sy[i].prev = i - 1;
        sy[i].next = i + 1 < ns ? i + 1 : -1;
    }

    /* 2. merge, lowest rank first (leftmost among equals) */
    for (int i = 0; i + 1 < ns; i++) {
        uint32_t r;
        int32_t nid;
        if (merge_of(m, sy[i].id, sy[i + 1].id, &r, &nid) && heap_push(&h, (cand_t){r, (uint32_t)i, nid})) goto oom_h;
    }
    while (h.n) {
        cand_t c = heap_pop(&h);
        sym_t *cur = &sy[c.pos];
        if (!cur->alive || cur->next < 0) continue;
        int nx = cur->next;
        uint32_t r;
        int32_t nid;
        if (!merge_of(m, cur->id, sy[nx].id, &r, &nid) || nid != c.new_id) continue; /* stale */
        cur->id = c.new_id;
        cur->next = sy[nx].next;
        sy[nx].alive = 0;
        if (cur->next >= 0) sy[cur->next].prev = (int32_t)c.pos;
        if (cur->prev >= 0 && merge_of(m, sy[cur->prev].id, cur->id, &r, &nid) &&
            heap_push(&h, (cand_t){r, (uint32_t)cur->prev, nid}))
            goto oom_h;
        if (cur->next >= 0 && merge_of(m, cur->id, sy[cur->next].id, &r, &nid) &&
            heap_push(&h, (cand_t){r, c.pos, nid}))
            goto oom_h;
    }
    for (int i = 0; i < ns; i++)
        if (sy[i].alive && tk_iv_push(out, sy[i].id)) goto oom;
    rc = 0;
    goto out;
oom_h:
oom:
    err_set(e, "out of memory");
out:
    if (sy != stack_syms) free(sy);
    if (h.v != stack_heap) free(h.v);
    free(tmp.p);
    return rc;
}
