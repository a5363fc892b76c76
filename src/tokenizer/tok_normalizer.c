/* tok_normalizer.c — HF normalizers: NFC/NFD/NFKC/NFKD (utf8proc), Lowercase, Replace,
 * Prepend, Strip, StripAccents, BertNormalizer, ByteLevel, Sequence.
 *
 * HF tracks alignments between original and normalized text; kiln returns no offsets, so a
 * normalizer here is just string → string. Each one reads `in` and writes a fresh `out`;
 * Sequence ping-pongs between two scratch buffers. Precompiled (SentencePiece charsmaps) and
 * Nmt are not implemented and fail at load with a message saying so.
 */
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

static int load_kids(normalizer_t *n, json_t *arr, const char *path, err_t *e) {
    if (!json_is_array(arr)) return err_set(e, "%s.normalizers: expected an array", path);
    n->n_kids = (int)json_array_size(arr);
    n->kids = calloc(n->n_kids ? n->n_kids : 1, sizeof *n->kids);
    if (!n->kids) return err_set(e, "out of memory");
    for (int i = 0; i < n->n_kids; i++) {
        char sub[256];
        snprintf(sub, sizeof sub, "%s.normalizers[%d]", path, i);
        if (tk_norm_load(&n->kids[i], json_array_get(arr, i), sub, e)) return -1;
    }
    return 0;
}

int tk_norm_load(normalizer_t **out, json_t *j, const char *path, err_t *e) {
    *out = NULL;
    if (!j || json_is_null(j)) return 0;
    const char *type = tk_js_str(j, "type");
    if (!json_is_object(j) || !type) return err_set(e, "%s: expected an object with a \"type\"", path);
    normalizer_t *n = calloc(1, sizeof *n);
    if (!n) return err_set(e, "out of memory");
    *out = n;
    if (!strcmp(type, "Sequence")) {
        n->type = NORM_SEQUENCE;
        return load_kids(n, json_object_get(j, "normalizers"), path, e);
    }
    if (!strcmp(type, "NFC")) { n->type = NORM_NFC; return 0; }
    if (!strcmp(type, "NFD")) { n->type = NORM_NFD; return 0; }
    if (!strcmp(type, "NFKC")) { n->type = NORM_NFKC; return 0; }
    if (!strcmp(type, "NFKD")) { n->type = NORM_NFKD; return 0; }
    if (!strcmp(type, "Lowercase")) { n->type = NORM_LOWERCASE; return 0; }
    if (!strcmp(type, "StripAccents")) { n->type = NORM_STRIP_ACCENTS; return 0; }
    if (!strcmp(type, "ByteLevel")) { n->type = NORM_BYTELEVEL; return 0; }
    if (!strcmp(type, "Strip")) {
        n->type = NORM_STRIP;
        n->left = tk_js_bool(j, "strip_left", 1);
        n->right = tk_js_bool(j, "strip_right", 1);
        return 0;
    }
    if (!strcmp(type, "Prepend")) {
        n->type = NORM_PREPEND;
        const char *p = tk_js_str(j, "prepend");
        if (!p) return err_set(e, "%s.prepend: expected a string", path);
        n->content = strdup(p);
        return n->content ? 0 : err_set(e, "out of memory");
    }
    if (!strcmp(type, "Replace")) {
        n->type = NORM_REPLACE;
        int is_re;
        const char *s;
        size_t len;
        if (tk_js_pattern(j, path, &is_re, &s, &len, e)) return -1;
        const char *c = tk_js_str(j, "content");
        if (!c) return err_set(e, "%s.content: expected a string", path);
        n->content = strdup(c);
        if (!n->content) return err_set(e, "out of memory");
        if (is_re) return tk_rx_compile(&n->re, s, e) ? err_prefix(e, "%s.pattern", path) : 0;
        n->lit = malloc(len + 1);
        if (!n->lit) return err_set(e, "out of memory");
        memcpy(n->lit, s, len);
        n->lit[len] = 0;
        n->lit_len = len;
        return 0;
    }
    if (!strcmp(type, "BertNormalizer")) {
        n->type = NORM_BERT;
        n->clean_text = tk_js_bool(j, "clean_text", 1);
        n->chinese = tk_js_bool(j, "handle_chinese_chars", 1);
        n->lowercase = tk_js_bool(j, "lowercase", 1);
        n->strip_accents = tk_js_bool(j, "strip_accents", n->lowercase); /* null follows lowercase */
        return 0;
    }
    return err_set(e, "%s: unsupported normalizer type \"%s\"", path, type);
}

void tk_norm_free(normalizer_t *n) {
    if (!n) return;
    for (int i = 0; i < n->n_kids; i++) tk_norm_free(n->kids[i]);
    free(n->kids);
    tk_rx_free(&n->re);
    free(n->lit);
    free(n->content);
    free(n);
}

static int unicode_norm(const char *in, size_t len, sbuf_t *out, int opts, err_t *e) {
    if (len == 0) return 0;
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)in, (utf8proc_ssize_t)len, &dst,
                                      (utf8proc_option_t)(UTF8PROC_STABLE | opts));
    if (r < 0) {
        free(dst);
        return err_set(e, "unicode normalization: %s", utf8proc_errmsg(r));
    }
    int rc = tk_sb_put(out, dst, (size_t)r);
    free(dst);
    return rc ? err_set(e, "out of memory") : 0;
}

static int lowercase(const char *in, size_t len, sbuf_t *out) {
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        i += tk_utf8_next(in + i, len - i, &cp);
        if (cp == 0x130) { /* the one multi-char lowercase mapping Rust applies per char */
            if (tk_sb_put(out, "i\xCC\x87", 3)) return -1;
            continue;
        }
        if (tk_sb_put_cp(out, (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp))) return -1;
    }
    return 0;
}

static int replace_lit(const char *in, size_t len, const char *lit, size_t ln, const char *rep, sbuf_t *out) {
    if (ln == 0) return tk_sb_put(out, in, len);
    size_t i = 0;
    while (i < len) {
        const char *hit = memmem(in + i, len - i, lit, ln);
        if (!hit) break;
        size_t at = (size_t)(hit - in);
        if (tk_sb_put(out, in + i, at - i) || tk_sb_put(out, rep, strlen(rep))) return -1;
        i = at + ln;
    }
    return tk_sb_put(out, in + i, len - i);
}

static int replace_re(const normalizer_t *n, const char *in, size_t len, sbuf_t *out, enc_ctx_t *cx, err_t *e) {
    if (tk_rx_find_spans(&n->re, in, len, &cx->spans, cx->md, e)) return -1;
    for (int k = 0; k < cx->spans.n; k++) {
        span_t sp = cx->spans.v[k];
        if (sp.m ? tk_sb_put(out, n->content, strlen(n->content)) : tk_sb_put(out, in + sp.s, sp.e - sp.s))
            return err_set(e, "out of memory");
    }
    return 0;
}

static int bert(const normalizer_t *n, const char *in, size_t len, sbuf_t *out, err_t *e) {
    sbuf_t a = {0};
    int rc = -1;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        i += tk_utf8_next(in + i, len - i, &cp);
        if (n->clean_text) {
            int ws = cp == '\t' || cp == '\n' || cp == '\r' || tk_uc_is_whitespace(cp);
            if (cp == 0 || cp == 0xFFFD || (!ws && tk_uc_is_control(cp))) continue;
            if (ws) cp = ' ';
        }
        if (n->chinese && tk_uc_is_cjk(cp)) {
            if (tk_sb_putc(&a, ' ') || tk_sb_put_cp(&a, cp) || tk_sb_putc(&a, ' ')) goto oom;
            continue;
        }
        if (tk_sb_put_cp(&a, cp)) goto oom;
    }
    if (n->strip_accents) {
        sbuf_t d = {0};
        if (unicode_norm(a.p, a.len, &d, UTF8PROC_DECOMPOSE, e)) { free(d.p); goto out; }
        a.len = 0;
        for (size_t i = 0; i < d.len;) {
            uint32_t cp;
            i += tk_utf8_next(d.p + i, d.len - i, &cp);
            if (utf8proc_category((utf8proc_int32_t)cp) == UTF8PROC_CATEGORY_MN) continue;
            if (tk_sb_put_cp(&a, cp)) { free(d.p); goto oom; }
        }
        free(d.p);
    }
    if (n->lowercase ? lowercase(a.p, a.len, out) : tk_sb_put(out, a.p, a.len)) goto oom;
    rc = 0;
    goto out;
oom:
    err_set(e, "out of memory");
out:
    free(a.p);
    return rc;
}

int tk_norm_apply(const normalizer_t *n, const char *in, size_t len, sbuf_t *out, enc_ctx_t *cx, err_t *e) {
    out->len = 0;
    if (tk_sb_reserve(out, len)) return err_set(e, "out of memory");
    out->p[0] = 0;
    switch (n->type) {
    case NORM_SEQUENCE: {
        if (tk_sb_put(out, in, len)) return err_set(e, "out of memory");
        sbuf_t tmp = {0};
        for (int i = 0; i < n->n_kids; i++) {
            if (tk_norm_apply(n->kids[i], out->p, out->len, &tmp, cx, e)) { free(tmp.p); return -1; }
            sbuf_t x = *out;
            *out = tmp;
            tmp = x;
        }
        free(tmp.p);
        return 0;
    }
    case NORM_NFC: return unicode_norm(in, len, out, UTF8PROC_COMPOSE, e);
    case NORM_NFD: return unicode_norm(in, len, out, UTF8PROC_DECOMPOSE, e);
    case NORM_NFKC: return unicode_norm(in, len, out, UTF8PROC_COMPOSE | UTF8PROC_COMPAT, e);
    case NORM_NFKD: return unicode_norm(in, len, out, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, e);
    case NORM_LOWERCASE: return lowercase(in, len, out) ? err_set(e, "out of memory") : 0;
    case NORM_REPLACE:
        if (n->re.code) return replace_re(n, in, len, out, cx, e);
        return replace_lit(in, len, n->lit, n->lit_len, n->content, out) ? err_set(e, "out of memory") : 0;
    case NORM_PREPEND:
        if (len && tk_sb_put(out, n->content, strlen(n->content))) return err_set(e, "out of memory");
        return tk_sb_put(out, in, len) ? err_set(e, "out of memory") : 0;
    case NORM_STRIP: {
        size_t s = 0, t = len;
        while (n->left && s < t) {
            uint32_t cp;
            int k = tk_utf8_next(in + s, t - s, &cp);
            if (!tk_uc_is_whitespace(cp)) break;
            s += k;
        }
        while (n->right && t > s) {
            size_t b = t - 1;
            while (b > s && ((unsigned char)in[b] & 0xC0) == 0x80) b--;
            uint32_t cp;
            tk_utf8_next(in + b, t - b, &cp);
            if (!tk_uc_is_whitespace(cp)) break;
            t = b;
        }
        return tk_sb_put(out, in + s, t - s) ? err_set(e, "out of memory") : 0;
    }
    case NORM_STRIP_ACCENTS:
        for (size_t i = 0; i < len;) {
            uint32_t cp;
            int k = tk_utf8_next(in + i, len - i, &cp);
            if (!tk_uc_is_mark(cp) && tk_sb_put(out, in + i, k)) return err_set(e, "out of memory");
            i += k;
        }
        return 0;
    case NORM_BERT: return bert(n, in, len, out, e);
    case NORM_BYTELEVEL:
        for (size_t i = 0; i < len; i++)
            if (tk_sb_put_cp(out, tk_bytelevel_b2u[(unsigned char)in[i]])) return err_set(e, "out of memory");
        return 0;
    }
    return err_set(e, "normalizer: unknown type %d", n->type);
}
