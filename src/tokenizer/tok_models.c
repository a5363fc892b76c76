/* tok_models.c — model loading and dispatch, plus the smaller models: Unigram (SentencePiece
 * Viterbi), WordPiece (greedy longest match), WordLevel (whole-word lookup). BPE is in
 * tok_bpe.c.
 *
 * tk_model_tokenize wraps every model with the shared word cache (tok_cache.c).
 *
 * Unigram follows HF's encode_optimized: best_path_ends_at[pos] keeps the best (score, start,
 * id) of any piece ending at pos; pieces starting at each character are the vocab prefixes
 * found there (shortest first — a hash lookup per candidate length instead of a trie, which
 * is O(n · longest piece) and fine for pre-tokens). A character no piece covers costs
 * min_score − 10 as unk; consecutive unks are fused into one string that is then looked up
 * again (vocab, then <0xAB> byte fallback, then unk_id), exactly as HF does.
 */
#include "tokenizer/tok_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_VOCAB_ID (1 << 24) /* refuses absurd ids before allocating id → token tables */

static int set_id_tok(model_t *m, int32_t id, const char *tok) {
    if (id >= m->n_id) {
        int32_t n = m->n_id ? m->n_id : 1024;
        while (n <= id) n *= 2;
        const char **v = realloc(m->id_tok, sizeof *v * n);
        if (!v) return -1;
        memset(v + m->n_id, 0, sizeof *v * (n - m->n_id));
        m->id_tok = v;
        m->n_id = n;
    }
    m->id_tok[id] = tok;
    return 0;
}

/* {token: id} vocab of BPE, WordPiece, WordLevel. */
static int load_vocab_obj(model_t *m, json_t *vocab, arena_t *a, const char *path, err_t *e) {
    if (!json_is_object(vocab)) return err_set(e, "%s.vocab: expected an object {token: id}", path);
    if (tk_sm_init(&m->vocab, json_object_size(vocab))) return err_set(e, "out of memory");
    const char *k;
    json_t *v;
    int32_t max_id = -1;
    void *it = json_object_iter(vocab);
    for (; it; it = json_object_iter_next(vocab, it)) {
        k = json_object_iter_key(it);
        v = json_object_iter_value(it);
        size_t kl = json_object_iter_key_len(it);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= MAX_VOCAB_ID)
            return err_set(e, "%s.vocab[\"%s\"]: expected an integer id in [0, %d)", path, k, MAX_VOCAB_ID);
        int32_t id = (int32_t)json_integer_value(v);
        char *t = tk_arena_strndup(a, k, kl);
        if (!t || tk_sm_put(&m->vocab, t, kl, id) || set_id_tok(m, id, t)) return err_set(e, "out of memory");
        if (id > max_id) max_id = id;
    }
    m->n_id = max_id + 1;
    return 0;
}

static int load_unigram(model_t *m, json_t *j, arena_t *a, const char *path, err_t *e) {
    json_t *vocab = json_object_get(j, "vocab");
    if (!json_is_array(vocab)) return err_set(e, "%s.vocab: expected an array of [piece, score]", path);
    size_t n = json_array_size(vocab);
    if (n >= MAX_VOCAB_ID) return err_set(e, "%s.vocab: too many pieces (%zu)", path, n);
    if (tk_sm_init(&m->vocab, n)) return err_set(e, "out of memory");
    m->score = malloc(sizeof *m->score * (n ? n : 1));
    if (!m->score) return err_set(e, "out of memory");
    m->min_score = 1e300;
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(vocab, i);
        json_t *p = json_array_get(x, 0), *s = json_array_get(x, 1);
        if (!json_is_array(x) || json_array_size(x) != 2 || !json_is_string(p) || !json_is_number(s))
            return err_set(e, "%s.vocab[%zu]: expected [piece, score]", path, i);
        size_t pl = json_string_length(p);
        char *t = tk_arena_strndup(a, json_string_value(p), pl);
        if (!t || tk_sm_put(&m->vocab, t, pl, (int32_t)i) || set_id_tok(m, (int32_t)i, t)) return err_set(e, "out of memory");
        m->score[i] = json_number_value(s);
        if (m->score[i] < m->min_score) m->min_score = m->score[i];
        if ((int)pl > m->max_piece) m->max_piece = (int)pl;
    }
    m->n_id = (int32_t)n;
    json_t *u = json_object_get(j, "unk_id");
    m->unk_id = -1;
    if (json_is_integer(u)) {
        if (json_integer_value(u) < 0 || json_integer_value(u) >= (json_int_t)n)
            return err_set(e, "%s.unk_id: %lld is out of range", path, (long long)json_integer_value(u));
        m->unk_id = (int32_t)json_integer_value(u);
    }
    m->byte_fallback = tk_js_bool(j, "byte_fallback", 0);
    char name[8];
    for (int b = 0; b < 256; b++) {
        snprintf(name, sizeof name, "<0x%02X>", b);
        m->byte_id[b] = tk_sm_get(&m->vocab, name, 6);
    }
    return 0;
}

int tk_model_load(model_t *m, json_t *j, arena_t *a, const char *path, err_t *e) {
    memset(m, 0, sizeof *m);
    m->unk_id = -1;
    if (!json_is_object(j)) return err_set(e, "%s: missing or not an object", path);
    const char *type = tk_js_str(j, "type");
    json_t *vocab = json_object_get(j, "vocab");
    if (!type) { /* HF infers the model from its fields when "type" is absent */
        if (json_is_array(vocab)) type = "Unigram";
        else if (json_object_get(j, "merges")) type = "BPE";
        else if (json_object_get(j, "max_input_chars_per_word")) type = "WordPiece";
        else type = "WordLevel";
    }
    if (!strcmp(type, "Unigram")) {
        m->type = MODEL_UNIGRAM;
        if (load_unigram(m, j, a, path, e)) return -1;
    } else {
        if (!strcmp(type, "BPE")) m->type = MODEL_BPE;
        else if (!strcmp(type, "WordPiece")) m->type = MODEL_WORDPIECE;
        else if (!strcmp(type, "WordLevel")) m->type = MODEL_WORDLEVEL;
        else return err_set(e, "%s.type: unsupported model type \"%s\"", path, type);
        if (load_vocab_obj(m, vocab, a, path, e)) return -1;
        const char *u = tk_js_str(j, "unk_token");
        if (u) {
            if (!(m->unk = tk_arena_strndup(a, u, strlen(u)))) return err_set(e, "out of memory");
            m->unk_id = tk_sm_get(&m->vocab, u, strlen(u));
        }
        if (m->type == MODEL_BPE && tk_bpe_load(m, j, a, path, e)) return -1;
        if (m->type == MODEL_WORDPIECE) {
            const char *p = tk_js_str(j, "continuing_subword_prefix");
            if (!(m->prefix = tk_arena_strndup(a, p ? p : "##", strlen(p ? p : "##")))) return err_set(e, "out of memory");
            json_t *mx = json_object_get(j, "max_input_chars_per_word");
            m->max_chars = json_is_integer(mx) ? (int)json_integer_value(mx) : 100;
        }
    }
    if (!(m->cache = tk_wc_new())) return err_set(e, "out of memory");
    return 0;
}

void tk_model_free(model_t *m) {
    tk_sm_free(&m->vocab);
    tk_um_free(&m->merges);
    free(m->id_tok);
    free(m->cp_id);
    free(m->score);
    tk_wc_free(m->cache);
    memset(m, 0, sizeof *m);
}

/* ---- Unigram ------------------------------------------------------------------------- */
typedef struct best {
    double score;
    int64_t start; /* -1: nothing ends here yet */
    int32_t id;
} best_t;

static int push_fused(const model_t *m, const char *s, size_t n, ivec_t *out, err_t *e) {
    int32_t id = tk_sm_get(&m->vocab, s, n);
    if (id >= 0) return tk_iv_push(out, id);
    if (m->byte_fallback) {
        int ok = 1;
        for (size_t i = 0; i < n; i++)
            if (m->byte_id[(unsigned char)s[i]] < 0) ok = 0;
        if (ok) {
            for (size_t i = 0; i < n; i++)
                if (tk_iv_push(out, m->byte_id[(unsigned char)s[i]])) return -1;
            return 0;
        }
    }
    if (m->unk_id < 0) return err_set(e, "Unigram: \"%.*s\" is not in the vocab and there is no unk_id", (int)n, s);
    return tk_iv_push(out, m->unk_id);
}

int tk_unigram_tokenize(const model_t *m, const char *s, size_t n, ivec_t *out, err_t *e) {
    if (n == 0) return 0;
    best_t *b = malloc(sizeof *b * (n + 1));
    size_t *cuts = malloc(sizeof *cuts * (n + 1));
    int rc = -1;
    if (!b || !cuts) { err_set(e, "out of memory"); goto out; }
    for (size_t i = 0; i <= n; i++) b[i] = (best_t){0, -1, -1};
    b[0].start = 0;
    double unk_score = m->min_score - 10.0;
    for (size_t at = 0; at < n;) {
        double base = b[at].score;
        int ch = tk_utf8_len_lead((unsigned char)s[at]);
        int single = 0;
        for (size_t end = at + ch; end <= n && end - at <= (size_t)m->max_piece;) {
            int32_t id = tk_sm_get(&m->vocab, s + at, end - at);
            if (id >= 0) {
                double sc = base + m->score[id];
                if (b[end].start < 0 || sc > b[end].score) b[end] = (best_t){sc, (int64_t)at, id};
                if (end - at == (size_t)ch) single = 1;
            }
            if (end == n) break;
            end += tk_utf8_len_lead((unsigned char)s[end]);
        }
        if (!single) {
            if (m->unk_id < 0) {
                err_set(e, "Unigram: no piece covers the character at byte %zu and there is no unk_id", at);
                goto out;
            }
            double sc = base + unk_score;
            if (b[at + ch].start < 0 || sc > b[at + ch].score) b[at + ch] = (best_t){sc, (int64_t)at, m->unk_id};
        }
        at += ch;
    }
    /* walk back, then emit front to back, fusing runs of unk */
    int nc = 0;
    for (size_t end = n; end > 0; end = (size_t)b[end].start) cuts[nc++] = end;
    size_t prev = 0, unk_from = (size_t)-1;
    for (int k = nc - 1; k >= 0; k--) {
        size_t end = cuts[k];
        int32_t id = b[end].id;
        if (id == m->unk_id && m->unk_id >= 0) {
            if (unk_from == (size_t)-1) unk_from = prev;
        } else {
            if (unk_from != (size_t)-1 && push_fused(m, s + unk_from, prev - unk_from, out, e)) goto out;
            unk_from = (size_t)-1;
            if (push_fused(m, s + prev, end - prev, out, e)) goto out;
        }
        prev = end;
    }
    if (unk_from != (size_t)-1 && push_fused(m, s + unk_from, n - unk_from, out, e)) goto out;
    rc = 0;
out:
    free(b);
    free(cuts);
    return rc;
}

/* ---- WordPiece ----------------------------------------------------------------------- */
int tk_wordpiece_tokenize(const model_t *m, const char *s, size_t n, ivec_t *out, err_t *e) {
    size_t chars = 0;
    for (size_t i = 0; i < n; i += tk_utf8_len_lead((unsigned char)s[i])) chars++;
    int start_n = out->n;
    sbuf_t tmp = {0};
    if (chars > (size_t)m->max_chars) goto unk;
    size_t pl = strlen(m->prefix);
    for (size_t st = 0; st < n;) {
        size_t end = n;
        int32_t found = -1;
        while (st < end) {
            tmp.len = 0;
            if ((st > 0 && tk_sb_put(&tmp, m->prefix, pl)) || tk_sb_put(&tmp, s + st, end - st)) goto oom;
            found = tk_sm_get(&m->vocab, tmp.p, tmp.len);
            if (found >= 0) break;
            do end--; while (end > st && ((unsigned char)s[end] & 0xC0) == 0x80);
        }
        if (found < 0) goto unk;
        if (tk_iv_push(out, found)) goto oom;
        st = end;
    }
    free(tmp.p);
    return 0;
unk:
    free(tmp.p);
    out->n = start_n;
    if (m->unk_id < 0) return err_set(e, "WordPiece: unk_token %s%s%s is not in the vocab", m->unk ? "\"" : "", m->unk ? m->unk : "(none)", m->unk ? "\"" : "");
    return tk_iv_push(out, m->unk_id) ? err_set(e, "out of memory") : 0;
oom:
    free(tmp.p);
    return err_set(e, "out of memory");
}

int tk_model_tokenize(const model_t *m, const char *s, size_t n, ivec_t *out, err_t *e) {
    if (n == 0) return 0;
    if (tk_wc_get(m->cache, s, n, out)) return 0;
    int start = out->n, rc;
    switch (m->type) {
    case MODEL_BPE: rc = tk_bpe_tokenize(m, s, n, out, e); break;
    case MODEL_UNIGRAM: rc = tk_unigram_tokenize(m, s, n, out, e); break;
    case MODEL_WORDPIECE: rc = tk_wordpiece_tokenize(m, s, n, out, e); break;
    default: {
        int32_t id = tk_sm_get(&m->vocab, s, n);
        if (id < 0) id = m->unk_id;
        if (id < 0) return err_set(e, "WordLevel: \"%.*s\" is not in the vocab and there is no unk_token", (int)(n > 64 ? 64 : n), s);
        rc = tk_iv_push(out, id) ? err_set(e, "out of memory") : 0;
    }
    }
    if (rc == 0) tk_wc_put(m->cache, s, n, out->v + start, out->n - start);
    return rc;
}
