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
 * ByteFallback is not monotonic: consecutive <0xAB> tokens form one group, and an invalid
 * group turns into one U+FFFD per byte, so a later stray byte can retroactively spoil a
 * character that was complete. With such a decoder, text is held while the newest id is a
 * byte token (one token of latency inside byte runs), however long the run: nothing in it is
 * final until it ends — and ids the decode skips (special tokens under skip_special, holes in
 * the id space) do not end it. (Found by fuzz_tokenizer_encode: a forced emission inside a
 * long run was later contradicted; by fuzz_detok: a skipped <bos> between two byte tokens.)
 *
 * Trade-off: a stream that keeps ending in U+FFFD (a model emitting invalid bytes, or the
 * literal character U+FFFD) grows the window and makes each push O(window). After HOLD_MAX
 * held ids everything but the final U+FFFD is sent (a lossy decode gives an incomplete tail
 * exactly one U+FFFD; what precedes it can no longer change); the window keeps growing
 * until a clean emission, which only broken output postpones.
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

/* The caller gets C strings, which cannot carry a NUL byte: decoded NULs (from <0x00> or
 * byte-level Ā tokens) are dropped from pieces rather than cutting them short. */
static char *c_piece(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (!p) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (s[i]) p[k++] = s[i];
    p[k] = 0;
    return p;
}

static int ends_with_fffd(const char *s, size_t n) {
    return n >= 3 && !memcmp(s + n - 3, "\xEF\xBF\xBD", 3);
}

/* Whether the newest id the decode sees is a byte token. The ids it skips — special tokens
 * under skip_special, holes in the id space — do not end a byte run: the bytes on either side
 * of them join (found by fuzz_detok: <0x01> <bos> <0x80> sent "\x01" at <bos>, then the
 * decode turned both bytes into U+FFFD). */
static int newest_is_byte(const detok_t *d) {
    for (int i = d->ids.n - 1; i >= 0; i--) {
        const char *tk = tokenizer_id_to_token(d->t, d->ids.v[i]);
        if (!tk || (d->skip && tokenizer_is_special(d->t, d->ids.v[i]))) continue;
        return is_byte_tok(tk);
    }
    return 0;
}

int detok_push(detok_t *d, int32_t id, char **out, err_t *e) {
    *out = NULL;
    if (!d) return err_set(e, "detok_push: no detokenizer");
    if (id < 0 || id >= d->t->vocab_size)
        return err_set(e, "token id %d is out of range [0, %d)", id, d->t->vocab_size);
    if (tk_iv_push(&d->ids, id)) return err_set(e, "out of memory");
    size_t n;
    char *now = tokenizer_decode_len(d->t, d->ids.v, d->ids.n, d->skip, &n, e);
    if (!now) { d->ids.n--; return -1; }
    int held = d->ids.n - d->prefix_idx;
    if (n < d->prefix_len || (d->prefix_len && memcmp(now, d->prefix, d->prefix_len))) {
        /* the decode of a longer window changed text already sent: cannot happen with HF's
         * decoders given the holding rules above. Say so rather than send something wrong. */
        free(now);
        d->ids.n--;
        return err_set(e, "detokenizer: decoded text no longer starts with the text already streamed");
    }
    size_t upto = n; /* how much of now is final */
    int clean = 1;
    if (d->byte_fallback && newest_is_byte(d)) {
        upto = d->prefix_len; /* inside a byte run nothing is final yet (no cap: see above) */
        clean = 0;
    } else if (ends_with_fffd(now, n)) {
        clean = 0;
        /* an incomplete character at the end: hold; after HOLD_MAX ids send all but that
         * last U+FFFD (everything before it can no longer change) */
        upto = held > HOLD_MAX && n - 3 > d->prefix_len ? n - 3 : d->prefix_len;
    }
    if (upto <= d->prefix_len) {
        free(now);
        *out = strdup("");
        return *out ? 0 : err_set(e, "out of memory");
    }
    char *piece = c_piece(now + d->prefix_len, upto - d->prefix_len);
    if (!piece) { free(now); return err_set(e, "out of memory"); }
    if (!clean) {
        /* partial emission: the window stays, the sent text grows */
        now[upto] = 0;
        free(d->prefix);
        d->prefix = now;
        d->prefix_len = upto;
        *out = piece;
        return 0;
    }
    /* slide: keep the ids of this emission as context for the next decode */
    int keep_from = d->prefix_idx;
    memmove(d->ids.v, d->ids.v + keep_from, sizeof(int32_t) * (d->ids.n - keep_from));
    d->ids.n -= keep_from;
    d->prefix_idx = d->ids.n;
    free(d->prefix);
    free(now);
    d->prefix = tokenizer_decode_len(d->t, d->ids.v, d->ids.n, d->skip, &d->prefix_len, e);
    if (!d->prefix) { free(piece); d->prefix_len = 0; return -1; }
    *out = piece;
    return 0;
}

char *detok_flush(detok_t *d) {
    if (!d) return NULL;
    char *rest = NULL;
    size_t n = 0;
    char *now = d->ids.n ? tokenizer_decode_len(d->t, d->ids.v, d->ids.n, d->skip, &n, NULL) : NULL;
    if (now) {
        if (n > d->prefix_len && !memcmp(now, d->prefix ? d->prefix : "", d->prefix_len))
            rest = c_piece(now + d->prefix_len, n - d->prefix_len);
        free(now);
    }
    d->ids.n = 0;
    d->prefix_idx = 0;
    free(d->prefix);
    d->prefix = NULL;
    d->prefix_len = 0;
    return rest ? rest : strdup("");
}
