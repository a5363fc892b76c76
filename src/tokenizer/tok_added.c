/* tok_added.c — added tokens: loading, and splitting text around them before the model.
 *
 * As in HF's AddedVocabulary, there are two matchers: tokens with normalized=false are found
 * in the raw text, the others in the normalized text (their pattern is their content run
 * through the normalizer). Matching is leftmost-longest and non-overlapping, like HF's
 * Aho-Corasick with MatchKind::LeftmostLongest: at each byte we walk a byte trie and keep
 * the longest token ending anywhere on the path. That is O(n · depth) in the worst case
 * instead of Aho-Corasick's O(n), but a first-byte filter makes almost every position a
 * single table lookup, and the trie is a few lines instead of a few hundred.
 *
 * After a match, the token's flags apply (HF find_matches): single_word drops a match glued
 * to word characters; lstrip/rstrip widen it over neighbouring whitespace.
 */
#include "tokenizer/tok_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tk_added_load(tk_added_vocab_t *av, json_t *j, arena_t *a, const char *path, err_t *e) {
    memset(av, 0, sizeof *av);
    if (!j || json_is_null(j)) j = NULL;
    else if (!json_is_array(j)) return err_set(e, "%s: expected an array", path);
    av->n = j ? (int)json_array_size(j) : 0;
    av->tok = calloc(av->n ? av->n : 1, sizeof *av->tok);
    if (!av->tok || tk_sm_init(&av->by_content, av->n)) return err_set(e, "out of memory");
    for (int i = 0; i < av->n; i++) {
        json_t *x = json_array_get(j, i);
        json_t *id = json_object_get(x, "id");
        json_t *c = json_object_get(x, "content");
        if (!json_is_object(x) || !json_is_integer(id) || !json_is_string(c))
            return err_set(e, "%s[%d]: expected {\"id\": int, \"content\": string, ...}", path, i);
        if (json_integer_value(id) < 0 || json_integer_value(id) >= (1 << 24))
            return err_set(e, "%s[%d].id: %lld is out of range", path, i, (long long)json_integer_value(id));
        tk_added_tok_t *t = &av->tok[i];
        t->id = (int32_t)json_integer_value(id);
        t->len = json_string_length(c);
        if (!(t->content = tk_arena_strndup(a, json_string_value(c), t->len))) return err_set(e, "out of memory");
        if (tk_utf8_invalid_at(t->content, t->len) != (size_t)-1)
            return err_set(e, "%s[%d].content: not valid UTF-8", path, i);
        t->special = tk_js_bool(x, "special", 0);
        t->normalized = tk_js_bool(x, "normalized", !t->special);
        t->lstrip = tk_js_bool(x, "lstrip", 0);
        t->rstrip = tk_js_bool(x, "rstrip", 0);
        t->single_word = tk_js_bool(x, "single_word", 0);
        if (tk_sm_put(&av->by_content, t->content, t->len, i)) return err_set(e, "out of memory");
    }
    return 0;
}

static int set_init(tk_added_set_t *s) {
    memset(s, 0, sizeof *s);
    s->cap_nodes = 64;
    s->term = malloc(sizeof *s->term * s->cap_nodes);
    if (!s->term || tk_um_init(&s->edges, 64)) return -1;
    s->term[0] = -1;
    s->n_nodes = 1;
    s->empty = 1;
    return 0;
}

static int set_add(tk_added_set_t *s, const char *p, size_t n, int idx) {
    if (n == 0) return 0; /* HF ignores empty patterns */
    int32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t key = (uint64_t)node << 8 | (unsigned char)p[i], child;
        if (tk_um_get(&s->edges, key, &child)) { node = (int32_t)child; continue; }
        if (s->n_nodes == s->cap_nodes) {
            int32_t *t = realloc(s->term, sizeof *t * s->cap_nodes * 2);
            if (!t) return -1;
            s->term = t;
            s->cap_nodes *= 2;
        }
        s->term[s->n_nodes] = -1;
        if (tk_um_put(&s->edges, key, (uint64_t)s->n_nodes)) return -1;
        node = s->n_nodes++;
    }
    if (s->term[node] < 0) s->term[node] = idx; /* identical patterns: the first one wins */
    s->first[(unsigned char)p[0]] = 1;
    s->empty = 0;
    return 0;
}

static void set_free(tk_added_set_t *s) {
    tk_um_free(&s->edges);
    free(s->term);
    memset(s, 0, sizeof *s);
}

int tk_added_build_sets(tk_added_vocab_t *av, const normalizer_t *norm, enc_ctx_t *cx, arena_t *a, err_t *e) {
    if (set_init(&av->raw) || set_init(&av->norm)) return err_set(e, "out of memory");
    sbuf_t tmp = {0};
    for (int i = 0; i < av->n; i++) {
        tk_added_tok_t *t = &av->tok[i];
        if (!t->normalized || !norm) {
            if (set_add(t->normalized ? &av->norm : &av->raw, t->content, t->len, i)) goto oom;
            continue;
        }
        if (tk_norm_apply(norm, t->content, t->len, &tmp, cx, e)) {
            free(tmp.p);
            return err_prefix(e, "normalizing added token \"%s\"", t->content);
        }
        if (set_add(&av->norm, tmp.p ? tmp.p : "", tmp.len, i)) goto oom;
    }
    free(tmp.p);
    (void)a;
    return 0;
oom:
    free(tmp.p);
    return err_set(e, "out of memory");
}

void tk_added_free(tk_added_vocab_t *av) {
    free(av->tok);
    tk_sm_free(&av->by_content);
    set_free(&av->raw);
    set_free(&av->norm);
    memset(av, 0, sizeof *av);
}

static int segs_push(segs_t *a, size_t s, size_t e, int idx) {
    if (a->n == a->cap) {
        int cap = a->cap ? a->cap * 2 : 16;
        seg_t *v = realloc(a->v, sizeof *v * cap);
        if (!v) return -1;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = (seg_t){s, e, idx};
    return 0;
}

/* The code point that ends at s[end) (end > 0). */
static uint32_t cp_before(const char *s, size_t end, size_t *start) {
    size_t b = end - 1;
    while (b > 0 && ((unsigned char)s[b] & 0xC0) == 0x80) b--;
    uint32_t cp;
    tk_utf8_next(s + b, end - b, &cp);
    if (start) *start = b;
    return cp;
}

int tk_added_split(const tk_added_vocab_t *av, const tk_added_set_t *set, const char *s, size_t n, segs_t *out) {
    out->n = 0;
    if (n == 0) return segs_push(out, 0, 0, -1);
    size_t start_offset = 0, pos = 0;
    while (!set->empty && pos < n) {
        if (!set->first[(unsigned char)s[pos]]) { pos++; continue; }
        int32_t node = 0, best = -1;
        size_t best_end = 0;
        for (size_t i = pos; i < n; i++) {
            uint64_t child;
            if (!tk_um_get(&set->edges, (uint64_t)node << 8 | (unsigned char)s[i], &child)) break;
            node = (int32_t)child;
            if (set->term[node] >= 0) { best = set->term[node]; best_end = i + 1; }
        }
        if (best < 0) { pos++; continue; }
        const tk_added_tok_t *t = &av->tok[best];
        size_t start = pos, stop = best_end;
        pos = best_end;
        if (t->single_word) {
            int start_space = start == 0 || !tk_uc_is_word(cp_before(s, start, NULL));
            uint32_t next = 0;
            if (stop < n) tk_utf8_next(s + stop, n - stop, &next);
            int stop_space = stop == n || !tk_uc_is_word(next);
            if (!start_space || !stop_space) continue;
        }
        if (t->lstrip) {
            size_t ns = start, b;
            while (ns > 0 && tk_uc_is_whitespace(cp_before(s, ns, &b))) ns = b;
            start = ns > start_offset ? ns : start_offset;
        }
        if (t->rstrip) {
            while (stop < n) {
                uint32_t cp;
                int k = tk_utf8_next(s + stop, n - stop, &cp);
                if (!tk_uc_is_whitespace(cp)) break;
                stop += k;
            }
        }
        if (start > start_offset && segs_push(out, start_offset, start, -1)) return -1;
        if (segs_push(out, start, stop, best)) return -1;
        start_offset = stop;
    }
    if (start_offset != n && segs_push(out, start_offset, n, -1)) return -1;
    return 0;
}
