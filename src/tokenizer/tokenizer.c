/* tokenizer.c — loading tokenizer.json and the encode/decode pipelines (see tokenizer.h).
 *
 * Encode, as HF's TokenizerImpl::encode_single_sequence does it:
 *   1. split the raw text around added tokens whose normalized=false (leftmost-longest);
 *   2. normalize each remaining segment on its own, then split it around the normalized=true
 *      added tokens;
 *   3. pre-tokenize each remaining piece, run the model on each pre-token (cached);
 *   4. with add_special, apply the post-processor.
 * Decode: ids → token strings (skipping special added tokens if asked), the decoder chain,
 * concatenation.
 *
 * All per-call scratch lives in an enc_ctx_t on the caller's stack frame, so a loaded
 * tokenizer is immutable (apart from the internally locked word cache) and thread-safe.
 */
#include "tokenizer/tokenizer.h"
#include "tokenizer/tok_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"

#define MAX_TOKENIZER_BYTES ((size_t)1 << 30)

static int ctx_init(enc_ctx_t *cx) {
    memset(cx, 0, sizeof *cx);
    cx->md = pcre2_match_data_create(32, NULL);
    return cx->md ? 0 : -1;
}

static void ctx_free(enc_ctx_t *cx) {
    if (cx->md) pcre2_match_data_free(cx->md);
    free(cx->spans.v);
    free(cx->tmp.p);
    free(cx->tmp2.p);
}

void tokenizer_free(tokenizer_t *t) {
    if (!t) return;
    tk_model_free(&t->model);
    tk_added_free(&t->added);
    tk_norm_free(t->norm);
    tk_pretok_free(t->pre);
    tk_post_free(t->post);
    tk_dec_free(t->dec);
    free(t->tk_added_of_id);
    free(t->name);
    tk_arena_free(&t->arena);
    free(t);
}

tokenizer_t *tokenizer_load_json(const char *json, size_t len, const char *name, err_t *e) {
    json_error_t je;
    enc_ctx_t cx;
    int have_cx = 0;
    json_t *root = json_loadb(json, len, JSON_ALLOW_NUL, &je);
    if (!name) name = "tokenizer.json";
    if (!root) {
        err_set(e, "%s: invalid JSON at line %d, column %d: %s", name, je.line, je.column, je.text);
        return NULL;
    }
    tokenizer_t *t = calloc(1, sizeof *t);
    if (!t || !(t->name = strdup(name))) { err_set(e, "out of memory"); goto fail; }
    if (!json_is_object(root)) { err_set(e, "%s: the top level is not a JSON object", name); goto fail; }
    json_t *model = json_object_get(root, "model");
    if (!model || json_is_null(model)) { err_set(e, "%s: missing \"model\"", name); goto fail; }
    if (tk_model_load(&t->model, model, &t->arena, "model", e)) goto fail_prefix;
    if (tk_added_load(&t->added, json_object_get(root, "added_tokens"), &t->arena, "added_tokens", e)) goto fail_prefix;
    if (tk_norm_load(&t->norm, json_object_get(root, "normalizer"), "normalizer", e)) goto fail_prefix;
    if (tk_pretok_load(&t->pre, json_object_get(root, "pre_tokenizer"), "pre_tokenizer", e)) goto fail_prefix;
    if (tk_post_load(&t->post, json_object_get(root, "post_processor"), &t->model.vocab, &t->added, "post_processor", e))
        goto fail_prefix;
    if (tk_dec_load(&t->dec, json_object_get(root, "decoder"), "decoder", e)) goto fail_prefix;
    if (ctx_init(&cx)) { err_set(e, "out of memory"); goto fail; }
    have_cx = 1;
    if (tk_added_build_sets(&t->added, t->norm, &cx, &t->arena, e)) goto fail_prefix;

    int vs = t->model.n_id;
    for (int i = 0; i < t->added.n; i++)
        if (t->added.tok[i].id + 1 > vs) vs = t->added.tok[i].id + 1;
    t->vocab_size = vs;
    t->tk_added_of_id = malloc(sizeof *t->tk_added_of_id * (vs ? vs : 1));
    if (!t->tk_added_of_id) { err_set(e, "out of memory"); goto fail; }
    for (int i = 0; i < vs; i++) t->tk_added_of_id[i] = -1;
    for (int i = 0; i < t->added.n; i++) t->tk_added_of_id[t->added.tok[i].id] = i;
    ctx_free(&cx);
    json_decref(root);
    return t;
fail_prefix:
    err_prefix(e, "%s", name);
fail:
    if (have_cx) ctx_free(&cx);
    tokenizer_free(t);
    json_decref(root);
    return NULL;
}

tokenizer_t *tokenizer_load(const char *path, err_t *e) {
    if (!path) { err_set(e, "tokenizer_load: no path"); return NULL; }
    char *file = dir_exists(path) ? str_printf("%s/tokenizer.json", path) : strdup(path);
    if (!file) { err_set(e, "out of memory"); return NULL; }
    size_t len = 0;
    char *buf = file_read(file, MAX_TOKENIZER_BYTES, &len, e);
    tokenizer_t *t = buf ? tokenizer_load_json(buf, len, file, e) : NULL;
    free(buf);
    free(file);
    return t;
}

int tokenizer_vocab_size(const tokenizer_t *t) { return t ? t->vocab_size : 0; }

const char *tokenizer_id_to_token(const tokenizer_t *t, int32_t id) {
    if (!t || id < 0 || id >= t->vocab_size) return NULL;
    if (t->tk_added_of_id[id] >= 0) return t->added.tok[t->tk_added_of_id[id]].content;
    return id < t->model.n_id ? t->model.id_tok[id] : NULL;
}

int32_t tokenizer_token_to_id(const tokenizer_t *t, const char *token) {
    if (!t || !token) return -1;
    size_t n = strlen(token);
    int32_t i = tk_sm_get(&t->added.by_content, token, n);
    if (i >= 0) return t->added.tok[i].id;
    return tk_sm_get(&t->model.vocab, token, n);
}

int tokenizer_is_special(const tokenizer_t *t, int32_t id) {
    if (!t || id < 0 || id >= t->vocab_size || t->tk_added_of_id[id] < 0) return 0;
    return t->added.tok[t->tk_added_of_id[id]].special;
}

/* Steps 3 for one plain-text piece: pre-tokenize and run the model. */
static int encode_piece(const tokenizer_t *t, const char *s, size_t n, int first, plist_t *pl, plist_t *scratch,
                        enc_ctx_t *cx, ivec_t *out, err_t *e) {
    tk_pl_clear(pl);
    if (tk_pl_add(pl, s, n, first)) return err_set(e, "out of memory");
    if (t->pre && tk_pretok_apply(t->pre, pl, scratch, cx, e)) return -1;
    for (int i = 0; i < pl->n; i++)
        if (tk_model_tokenize(&t->model, pl->text.p + pl->p[i].off, pl->p[i].len, out, e)) return -1;
    return 0;
}

int tokenizer_encode(const tokenizer_t *t, const char *text, size_t len, int add_special, int32_t **ids,
                     int *n_ids, err_t *e) {
    if (ids) *ids = NULL;
    if (n_ids) *n_ids = 0;
    if (!t || !ids || !n_ids || (!text && len)) return err_set(e, "tokenizer_encode: bad arguments");
    if (len > (size_t)1 << 31) return err_set(e, "tokenizer_encode: text of %zu bytes is too long", len);
    size_t bad = tk_utf8_invalid_at(text, len);
    if (bad != (size_t)-1) return err_set(e, "invalid UTF-8 in text at byte offset %zu", bad);

    enc_ctx_t cx;
    segs_t raw = {0}, nrm = {0};
    plist_t pl = {0}, scratch = {0};
    sbuf_t nb = {0};
    ivec_t out = {0};
    int rc = -1;
    if (ctx_init(&cx)) return err_set(e, "out of memory");
    if (tk_added_split(&t->added, &t->added.raw, text ? text : "", len, &raw)) goto oom;
    for (int i = 0; i < raw.n; i++) {
        seg_t sg = raw.v[i];
        if (sg.idx >= 0) {
            if (tk_iv_push(&out, t->added.tok[sg.idx].id)) goto oom;
            continue;
        }
        if (sg.e == sg.s) continue;
        const char *s = text + sg.s;
        size_t n = sg.e - sg.s;
        if (t->norm) {
            if (tk_norm_apply(t->norm, s, n, &nb, &cx, e)) goto out;
            s = nb.p ? nb.p : "";
            n = nb.len;
        }
        if (tk_added_split(&t->added, &t->added.norm, s, n, &nrm)) goto oom;
        for (int k = 0; k < nrm.n; k++) {
            seg_t g = nrm.v[k];
            if (g.idx >= 0) {
                if (tk_iv_push(&out, t->added.tok[g.idx].id)) goto oom;
                continue;
            }
            if (g.e == g.s) continue;
            if (encode_piece(t, s + g.s, g.e - g.s, sg.s == 0 && g.s == 0, &pl, &scratch, &cx, &out, e)) goto out;
        }
    }
    if (add_special && t->post && tk_post_apply(t->post, &out, e)) goto out;
    *ids = out.v;
    *n_ids = out.n;
    out.v = NULL;
    rc = 0;
    goto out;
oom:
    err_set(e, "out of memory");
out:
    ctx_free(&cx);
    free(raw.v);
    free(nrm.v);
    tk_pl_free(&pl);
    tk_pl_free(&scratch);
    free(nb.p);
    free(out.v);
    return rc;
}

char *tokenizer_decode(const tokenizer_t *t, const int32_t *ids, int n, int skip_special, err_t *e) {
    return tokenizer_decode_len(t, ids, n, skip_special, NULL, e);
}

char *tokenizer_decode_len(const tokenizer_t *t, const int32_t *ids, int n, int skip_special, size_t *len, err_t *e) {
    if (len) *len = 0;
    if (!t || (n > 0 && !ids) || n < 0) { err_set(e, "tokenizer_decode: bad arguments"); return NULL; }
    strlist_t l = {0};
    sbuf_t b = {0};
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->vocab_size) {
            err_set(e, "token id %d at position %d is out of range [0, %d)", ids[i], i, t->vocab_size);
            goto fail;
        }
        const char *tok = tokenizer_id_to_token(t, ids[i]);
        if (!tok) continue; /* a hole in the id space: HF skips it too */
        if (skip_special && tokenizer_is_special(t, ids[i])) continue;
        if (tk_sl_push(&l, tok, strlen(tok))) goto oom;
    }
    if (t->dec) {
        if (tk_dec_chain(t->dec, &l, e)) goto fail;
        for (int i = 0; i < l.n; i++)
            if (tk_sb_put(&b, l.s[i], l.len[i])) goto oom;
    } else {
        for (int i = 0; i < l.n; i++)
            if ((i && tk_sb_putc(&b, ' ')) || tk_sb_put(&b, l.s[i], l.len[i])) goto oom;
    }
    tk_sl_free(&l);
    if (len) *len = b.len;
    return tk_sb_finish(&b);
oom:
    err_set(e, "out of memory");
fail:
    tk_sl_free(&l);
    free(b.p);
    return NULL;
}

char *tokenizer_normalize(const tokenizer_t *t, const char *text, size_t len, err_t *e) {
    if (!t || (!text && len)) { err_set(e, "tokenizer_normalize: bad arguments"); return NULL; }
    size_t bad = tk_utf8_invalid_at(text, len);
    if (bad != (size_t)-1) { err_set(e, "invalid UTF-8 in text at byte offset %zu", bad); return NULL; }
    enc_ctx_t cx;
    sbuf_t out = {0};
    if (ctx_init(&cx)) { err_set(e, "out of memory"); return NULL; }
    int rc = t->norm ? tk_norm_apply(t->norm, text ? text : "", len, &out, &cx, e) : tk_sb_put(&out, text ? text : "", len);
    ctx_free(&cx);
    if (rc) { free(out.p); return NULL; }
    return tk_sb_finish(&out);
}

void tokenizer_free_pieces(char **pieces, int n) {
    for (int i = 0; i < n; i++) free(pieces[i]);
    free(pieces);
}

int tokenizer_pretokenize(const tokenizer_t *t, const char *text, size_t len, char ***pieces, int *n, err_t *e) {
    *pieces = NULL;
    *n = 0;
    if (!t || (!text && len)) return err_set(e, "tokenizer_pretokenize: bad arguments");
    size_t bad = tk_utf8_invalid_at(text, len);
    if (bad != (size_t)-1) return err_set(e, "invalid UTF-8 in text at byte offset %zu", bad);
    enc_ctx_t cx;
    segs_t raw = {0}, nrm = {0};
    plist_t pl = {0}, scratch = {0};
    sbuf_t nb = {0};
    strlist_t out = {0};
    int rc = -1;
    if (ctx_init(&cx)) return err_set(e, "out of memory");
    if (tk_added_split(&t->added, &t->added.raw, text ? text : "", len, &raw)) goto oom;
    for (int i = 0; i < raw.n; i++) {
        seg_t sg = raw.v[i];
        if (sg.idx >= 0) {
            if (tk_sl_push(&out, t->added.tok[sg.idx].content, t->added.tok[sg.idx].len)) goto oom;
            continue;
        }
        if (sg.e == sg.s) continue;
        const char *s = text + sg.s;
        size_t ln = sg.e - sg.s;
        if (t->norm) {
            if (tk_norm_apply(t->norm, s, ln, &nb, &cx, e)) goto out;
            s = nb.p ? nb.p : "";
            ln = nb.len;
        }
        if (tk_added_split(&t->added, &t->added.norm, s, ln, &nrm)) goto oom;
        for (int k = 0; k < nrm.n; k++) {
            seg_t g = nrm.v[k];
            if (g.idx >= 0) {
                if (tk_sl_push(&out, t->added.tok[g.idx].content, t->added.tok[g.idx].len)) goto oom;
                continue;
            }
            if (g.e == g.s) continue;
            tk_pl_clear(&pl);
            if (tk_pl_add(&pl, s + g.s, g.e - g.s, sg.s == 0 && g.s == 0)) goto oom;
            if (t->pre && tk_pretok_apply(t->pre, &pl, &scratch, &cx, e)) goto out;
            for (int q = 0; q < pl.n; q++)
                if (tk_sl_push(&out, pl.text.p + pl.p[q].off, pl.p[q].len)) goto oom;
        }
    }
    *pieces = out.s;
    *n = out.n;
    free(out.len);
    out = (strlist_t){0};
    rc = 0;
    goto out;
oom:
    err_set(e, "out of memory");
out:
    ctx_free(&cx);
    free(raw.v);
    free(nrm.v);
    tk_pl_free(&pl);
    tk_pl_free(&scratch);
    free(nb.p);
    tk_sl_free(&out);
    return rc;
}
