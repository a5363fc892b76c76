/* tok_decoder.c — HF decoders: ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip,
 * WordPiece, BPEDecoder, CTC, Sequence.
 *
 * A decoder is HF's decode_chain: a list of token strings in, a list out; the final text is
 * the concatenation. Keeping the list shape (instead of one string) matters because several
 * decoders look at token boundaries: Metaspace drops the replacement only in the first token,
 * ByteFallback groups consecutive <0xAB> tokens, Strip works per token, WordPiece joins
 * continuation pieces.
 */
#include "tokenizer/tok_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tk_dec_load(decoder_t **out, json_t *j, const char *path, err_t *e) {
    *out = NULL;
    if (!j || json_is_null(j)) return 0;
    const char *type = tk_js_str(j, "type");
    if (!json_is_object(j) || !type) return err_set(e, "%s: expected an object with a \"type\"", path);
    decoder_t *d = calloc(1, sizeof *d);
    if (!d) return err_set(e, "out of memory");
    *out = d;
    if (!strcmp(type, "Sequence")) {
        d->type = DEC_SEQUENCE;
        json_t *arr = json_object_get(j, "decoders");
        if (!json_is_array(arr)) return err_set(e, "%s.decoders: expected an array", path);
        d->n_kids = (int)json_array_size(arr);
        d->kids = calloc(d->n_kids ? d->n_kids : 1, sizeof *d->kids);
        if (!d->kids) return err_set(e, "out of memory");
        for (int i = 0; i < d->n_kids; i++) {
            char sub[256];
            snprintf(sub, sizeof sub, "%s.decoders[%d]", path, i);
            if (tk_dec_load(&d->kids[i], json_array_get(arr, i), sub, e)) return -1;
        }
        return 0;
    }
    if (!strcmp(type, "ByteLevel")) { d->type = DEC_BYTELEVEL; return 0; }
    if (!strcmp(type, "ByteFallback")) { d->type = DEC_BYTEFALLBACK; return 0; }
    if (!strcmp(type, "Fuse")) { d->type = DEC_FUSE; return 0; }
    if (!strcmp(type, "Metaspace")) {
        d->type = DEC_METASPACE;
        if (tk_js_char(j, "replacement", path, 0x2581, &d->repl, e)) return -1;
        const char *ps = tk_js_str(j, "prepend_scheme");
        d->prepend = !ps || strcmp(ps, "never") != 0;
        if (json_is_false(json_object_get(j, "add_prefix_space"))) d->prepend = 0;
        return 0;
    }
    if (!strcmp(type, "Strip")) {
        d->type = DEC_STRIP;
        if (tk_js_char(j, "content", path, ' ', &d->repl, e)) return -1;
        json_t *s = json_object_get(j, "start"), *t = json_object_get(j, "stop");
        if ((s && !json_is_integer(s)) || (t && !json_is_integer(t)) || json_integer_value(s) < 0 || json_integer_value(t) < 0)
            return err_set(e, "%s: start/stop must be non-negative integers", path);
        d->start = (int)json_integer_value(s);
        d->stop = (int)json_integer_value(t);
        return 0;
    }
    if (!strcmp(type, "Replace")) {
        d->type = DEC_REPLACE;
        int is_re;
        const char *s;
        size_t n;
        if (tk_js_pattern(j, path, &is_re, &s, &n, e)) return -1;
        const char *c = tk_js_str(j, "content");
        if (!c || !(d->content = strdup(c))) return err_set(e, "%s.content: expected a string", path);
        if (is_re) {
            if (tk_rx_compile(&d->re, s, e)) return err_prefix(e, "%s.pattern", path);
            d->has_re = 1;
            return 0;
        }
        if (!(d->lit = malloc(n + 1))) return err_set(e, "out of memory");
        memcpy(d->lit, s, n);
        d->lit[n] = 0;
        d->lit_len = n;
        return 0;
    }
    if (!strcmp(type, "WordPiece")) {
        d->type = DEC_WORDPIECE;
        const char *p = tk_js_str(j, "prefix");
        d->prefix = strdup(p ? p : "##");
        d->cleanup = tk_js_bool(j, "cleanup", 1);
        return d->prefix ? 0 : err_set(e, "out of memory");
    }
    if (!strcmp(type, "BPEDecoder")) {
        d->type = DEC_BPE;
        const char *p = tk_js_str(j, "suffix");
        d->prefix = strdup(p ? p : "</w>");
        return d->prefix ? 0 : err_set(e, "out of memory");
    }
    if (!strcmp(type, "CTC")) {
        d->type = DEC_CTC;
        const char *p = tk_js_str(j, "pad_token"), *w = tk_js_str(j, "word_delimiter_token");
        d->pad = strdup(p ? p : "<pad>");
        d->delim = strdup(w ? w : "|");
        d->cleanup = tk_js_bool(j, "cleanup", 1);
        return d->pad && d->delim ? 0 : err_set(e, "out of memory");
    }
    return err_set(e, "%s: unsupported decoder type \"%s\"", path, type);
}

void tk_dec_free(decoder_t *d) {
    if (!d) return;
    for (int i = 0; i < d->n_kids; i++) tk_dec_free(d->kids[i]);
    free(d->kids);
    free(d->lit);
    tk_rx_free(&d->re);
    free(d->content);
    free(d->prefix);
    free(d->pad);
    free(d->delim);
    free(d);
}

/* Replaces every occurrence of lit in s with rep (all non-overlapping, left to right). */
static int replace_all(sbuf_t *o, const char *s, size_t n, const char *lit, size_t ln, const char *rep) {
    if (!ln) return tk_sb_put(o, s, n);
    size_t i = 0;
    for (;;) {
        const char *h = i < n ? memmem(s + i, n - i, lit, ln) : NULL;
        if (!h) break;
        if (tk_sb_put(o, s + i, (size_t)(h - s) - i) || tk_sb_put(o, rep, strlen(rep))) return -1;
        i = (size_t)(h - s) + ln;
    }
    return tk_sb_put(o, s + i, n - i);
}

static int wp_cleanup(sbuf_t *b) {
    static const char *pairs[][2] = {{" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
                                     {" n't", "n't"}, {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"},
                                     {" 've", "'ve"}, {" 're", "'re"}};
    sbuf_t t = {0};
    for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
        t.len = 0;
        if (replace_all(&t, b->p ? b->p : "", b->len, pairs[k][0], strlen(pairs[k][0]), pairs[k][1])) {
            free(t.p);
            return -1;
        }
        sbuf_t x = *b;
        *b = t;
        t = x;
    }
    free(t.p);
    return 0;
}

static int is_byte_token(const char *s, size_t n, unsigned *v) {
    if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>') return 0;
    unsigned x = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return 0;
        x = x * 16 + (unsigned)d;
    }
    *v = x;
    return 1;
}

static int flush_bytes(strlist_t *o, sbuf_t *bytes) {
    if (!bytes->len) return 0;
    int rc = 0;
    if (tk_utf8_invalid_at(bytes->p, bytes->len) == (size_t)-1) rc = tk_sl_push(o, bytes->p, bytes->len);
    else
        for (size_t i = 0; i < bytes->len && !rc; i++) rc = tk_sl_push(o, "\xEF\xBF\xBD", 3);
    bytes->len = 0;
    return rc;
}

int tk_dec_chain(const decoder_t *d, strlist_t *l, err_t *e) {
    if (d->type == DEC_SEQUENCE) {
        for (int i = 0; i < d->n_kids; i++)
            if (tk_dec_chain(d->kids[i], l, e)) return -1;
        return 0;
    }
    strlist_t o = {0};
    sbuf_t b = {0};
    switch (d->type) {
    case DEC_BYTELEVEL: {
        sbuf_t raw = {0};
        for (int i = 0; i < l->n; i++) {
            const char *s = l->s[i];
            size_t n = l->len[i], mark = raw.len;
            int ok = 1;
            for (size_t k = 0; k < n && ok;) {
                uint32_t cp;
                k += tk_utf8_next(s + k, n - k, &cp);
                int byte = tk_bytelevel_u2b(cp);
                if (byte < 0) ok = 0;
                else if (tk_sb_putc(&raw, (char)byte)) goto oom_raw;
            }
            if (!ok) { /* a char outside the table: HF keeps the token's own bytes */
                raw.len = mark;
                if (tk_sb_put(&raw, s, n)) goto oom_raw;
            }
        }
        if (tk_utf8_lossy(&b, raw.p ? raw.p : "", raw.len) || tk_sl_push(&o, b.p ? b.p : "", b.len)) goto oom_raw;
        free(raw.p);
        break;
    oom_raw:
        free(raw.p);
        goto oom;
    }
    case DEC_METASPACE:
        for (int i = 0; i < l->n; i++) {
            b.len = 0;
            const char *s = l->s[i];
            for (size_t k = 0; k < l->len[i];) {
                uint32_t cp;
                int m = tk_utf8_next(s + k, l->len[i] - k, &cp);
                if (cp == d->repl) {
                    if (!(i == 0 && d->prepend) && tk_sb_putc(&b, ' ')) goto oom;
                } else if (tk_sb_put(&b, s + k, m)) goto oom;
                k += m;
            }
            if (tk_sl_push(&o, b.p ? b.p : "", b.len)) goto oom;
        }
        break;
    case DEC_REPLACE:
        for (int i = 0; i < l->n; i++) {
            b.len = 0;
            if (d->has_re) {
                spans_t sp = {0};
                pcre2_match_data *md = pcre2_match_data_create_from_pattern(d->re.code, NULL);
                int rc = md ? tk_rx_find_spans(&d->re, l->s[i], l->len[i], &sp, md, e) : err_set(e, "out of memory");
                for (int k = 0; rc == 0 && k < sp.n; k++)
                    rc = sp.v[k].m ? tk_sb_put(&b, d->content, strlen(d->content))
                                   : tk_sb_put(&b, l->s[i] + sp.v[k].s, sp.v[k].e - sp.v[k].s);
                free(sp.v);
                if (md) pcre2_match_data_free(md);
                if (rc) goto fail;
            } else if (replace_all(&b, l->s[i], l->len[i], d->lit, d->lit_len, d->content)) goto oom;
            if (tk_sl_push(&o, b.p ? b.p : "", b.len)) goto oom;
        }
        break;
    case DEC_BYTEFALLBACK:
        for (int i = 0; i < l->n; i++) {
            unsigned v;
            if (is_byte_token(l->s[i], l->len[i], &v)) {
                if (tk_sb_putc(&b, (char)v)) goto oom;
                continue;
            }
            if (flush_bytes(&o, &b) || tk_sl_push(&o, l->s[i], l->len[i])) goto oom;
        }
        if (flush_bytes(&o, &b)) goto oom;
        break;
    case DEC_FUSE:
        for (int i = 0; i < l->n; i++)
            if (tk_sb_put(&b, l->s[i], l->len[i])) goto oom;
        if (tk_sl_push(&o, b.p ? b.p : "", b.len)) goto oom;
        break;
    case DEC_STRIP:
        for (int i = 0; i < l->n; i++) {
            /* work in code points: collect their byte offsets */
            const char *s = l->s[i];
            size_t n = l->len[i], nch = 0;
            size_t *off = malloc(sizeof *off * (n + 1));
            if (!off) goto oom;
            for (size_t k = 0; k < n; k += tk_utf8_len_lead((unsigned char)s[k])) off[nch++] = k;
            off[nch] = n;
            size_t cut0 = 0, cut1 = nch;
            for (size_t c = 0; c < nch && c < (size_t)d->start; c++) {
                uint32_t cp;
                tk_utf8_next(s + off[c], n - off[c], &cp);
                if (cp != d->repl) break;
                cut0 = c + 1;
            }
            for (size_t c = 0; c < (size_t)d->stop && c < nch; c++) {
                size_t idx = nch - c - 1;
                uint32_t cp;
                tk_utf8_next(s + off[idx], n - off[idx], &cp);
                if (cp != d->repl) break;
                cut1 = idx;
            }
            int rc = cut0 < cut1 ? tk_sl_push(&o, s + off[cut0], off[cut1] - off[cut0]) : tk_sl_push(&o, "", 0);
            free(off);
            if (rc) goto oom;
        }
        break;
    case DEC_WORDPIECE: {
        size_t pl = strlen(d->prefix);
        for (int i = 0; i < l->n; i++) {
            b.len = 0;
            const char *s = l->s[i];
            size_t n = l->len[i];
            if (i != 0) {
                if (n >= pl && !memcmp(s, d->prefix, pl)) { s += pl; n -= pl; }
                else if (tk_sb_putc(&b, ' ')) goto oom;
            }
            if (tk_sb_put(&b, s, n) || (d->cleanup && wp_cleanup(&b)) || tk_sl_push(&o, b.p ? b.p : "", b.len)) goto oom;
        }
        break;
    }
    case DEC_BPE:
        for (int i = 0; i < l->n; i++) {
            b.len = 0;
            if (replace_all(&b, l->s[i], l->len[i], d->prefix, strlen(d->prefix), i == l->n - 1 ? "" : " ") ||
                tk_sl_push(&o, b.p ? b.p : "", b.len))
                goto oom;
        }
        break;
    case DEC_CTC:
        for (int i = 0; i < l->n; i++) {
            if (i > 0 && l->len[i] == l->len[i - 1] && !memcmp(l->s[i], l->s[i - 1], l->len[i])) continue;
            b.len = 0;
            if (replace_all(&b, l->s[i], l->len[i], d->pad, strlen(d->pad), "")) goto oom;
            if (d->cleanup) {
                sbuf_t t = {0};
                if (wp_cleanup(&b) || replace_all(&t, b.p ? b.p : "", b.len, d->delim, strlen(d->delim), " ")) {
                    free(t.p);
                    goto oom;
                }
                free(b.p);
                b = t;
            }
            if (b.len && tk_sl_push(&o, b.p, b.len)) goto oom;
        }
        break;
    default:
        err_set(e, "decoder: unknown type %d", d->type);
        goto fail;
    }
    free(b.p);
    tk_sl_free(l);
    *l = o;
    return 0;
oom:
    err_set(e, "out of memory");
fail:
    free(b.p);
    tk_sl_free(&o);
    return -1;
}
