/* detok.c — streaming detokenizer: text out one token at a time.
 *
 * Decoders are not per-token functions (Metaspace drops the first token's leading space,
 * ByteFallback and ByteLevel join bytes across tokens into characters, Strip/Fuse act on the
 * joined text), so a token's text is found by difference, as HF's DecodeStream does:
 *   window  = the ids from the start of the previous emission up to now;
 *   prefix  = decode(window minus the ids not yet emitted) — already sent;
 *   now     = decode(window); if it is longer than prefix and does not end in U+FFFD (an
 *             incomplete UTF-8 sequence), emit now[len(prefix):] and slide the window to
 *             start at the ids just emitted.
 * Keeping the previous emission's tokens as context makes "first token" rules apply to the
 * same token in both decodes, so the pieces concatenate to decode(all ids).
 *
 * ByteFallback is not monotonic: its <0xAB> tokens are grouped, and an invalid group turns
 * into one U+FFFD per byte, so a later stray byte can retroactively spoil a character that
 * was complete. With such a decoder, text is also held while the newest id is a byte token
 * (one token of latency inside byte runs) so that what was sent is never contradicted.
 *
 * Trade-off: a stream that keeps ending in U+FFFD (a model emitting invalid bytes, or the
 * literal character U+FFFD) would grow the window and make each push O(window). After
 * HOLD_MAX held ids the text is emitted anyway; no valid character needs more than 4 byte
 * tokens, so this only fires on output that is broken already.
 */
#include "tokenizer/tokenizer.h"
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>

#define HOLD_MAX 32

struct detok {
    const tokenizer_t *t;
    int skip;
    ivec_t ids;      /* the window */
    int prefix_idx;  /* ids[0..prefix_idx) have been emitted */
    char *prefix;    /* decode(ids[0..prefix_idx)) */
    size_t prefix_len;
    int byte_fallback; /* the decoder chain has ByteFallback */
};

static int has_byte_fallback(const decoder_t *d) {
    if (!d) return 0;
    if (d->type == DEC_BYTEFALLBACK) return 1;
    for (int i = 0; i < d->n_kids; i++)
        if (has_byte_fallback(d->kids[i])) return 1;
    return 0;
}

static int is_byte_tok(const char *s) {
    return s && strlen(s) == 6 && !memcmp(s, "<0x", 3) && s[5] == '>';
}

detok_t *detok_new(const tokenizer_t *t, int skip_special) {
    if (!t) return NULL;
    detok_t *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->t = t;
    d->skip = skip_special;
    d->byte_fallback = has_byte_fallback(t->dec);
    return d;
}

void detok_free(detok_t *d) {
    if (!d) return;
    free(d->ids.v);
    free(d->prefix);
    free(d);
}

static int ends_with_fffd(const char *s, size_t n) {
    return n >= 3 && !memcmp(s + n - 3, "\xEF\xBF\xBD", 3);
}

int detok_push(detok_t *d, int32_t id, char **out, err_t *e) {
    *out = NULL;
    if (!d) return err_set(e, "detok_push: no detokenizer");
    if (id < 0 || id >= d->t->vocab_size)
        return err_set(e, "token id %d is out of range [0, %d)", id, d->t->vocab_size);
    if (tk_iv_push(&d->ids, id)) return err_set(e, "out of memory");
    char *now = tokenizer_decode(d->t, d->ids.v, d->ids.n, d->skip, e);
    if (!now) { d->ids.n--; return -1; }
    size_t n = strlen(now);
    int held = d->ids.n - d->prefix_idx;
    int prefix_ok = n >= d->prefix_len && (!d->prefix_len || !memcmp(now, d->prefix, d->prefix_len));
    int hold = ends_with_fffd(now, n) || (d->byte_fallback && is_byte_tok(tokenizer_id_to_token(d->t, id)));
    if (n > d->prefix_len && prefix_ok && (!hold || held > HOLD_MAX)) {
        char *piece = strdup(now + d->prefix_len);
        if (!piece) { free(now); return err_set(e, "out of memory"); }
        /* slide: keep the ids just emitted as context for the next decode */
        int keep_from = d->prefix_idx;
        memmove(d->ids.v, d->ids.v + keep_from, sizeof(int32_t) * (d->ids.n - keep_from));
        d->ids.n -= keep_from;
        d->prefix_idx = d->ids.n;
        free(d->prefix);
        d->prefix = tokenizer_decode(d->t, d->ids.v, d->ids.n, d->skip, e);
        free(now);
        if (!d->prefix) { free(piece); d->prefix_len = 0; return -1; }
        d->prefix_len = strlen(d->prefix);
        *out = piece;
        return 0;
    }
    free(now);
    if (!prefix_ok && n >= d->prefix_len) {
        /* cannot happen with HF's decoders: the decode of a longer window changed text already
         * sent. Say so rather than send something inconsistent. */
        return err_set(e, "detokenizer: decoded text no longer starts with the text already streamed");
    }
    *out = strdup("");
    return *out ? 0 : err_set(e, "out of memory");
}

char *detok_flush(detok_t *d) {
    if (!d) return NULL;
    char *rest = NULL;
    char *now = d->ids.n ? tokenizer_decode(d->t, d->ids.v, d->ids.n, d->skip, NULL) : NULL;
    if (now) {
        size_t n = strlen(now);
        if (n > d->prefix_len && !memcmp(now, d->prefix ? d->prefix : "", d->prefix_len)) rest = strdup(now + d->prefix_len);
        free(now);
    }
    d->ids.n = 0;
    d->prefix_idx = 0;
    free(d->prefix);
    d->prefix = NULL;
    d->prefix_len = 0;
    return rest ? rest : strdup("");
}
