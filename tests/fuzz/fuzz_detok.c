/* fuzz_detok.c — libFuzzer target for the streaming detokenizer on arbitrary token sequences.
 *
 * fuzz_tokenizer_encode streams the ids of real text; a model can emit any ids in any order
 * (byte tokens that never form a character, special tokens, a partial UTF-8 sequence cut by
 * another token). Input byte 0 picks the tokenizer (Qwen3, Gemma 3, Llama 3) and skip_special;
 * then 3 bytes per id: 24 bits modulo the vocabulary, or (top bit set) Gemma's byte token
 * <0xXX> for the first byte. Checked, each an abort() when violated:
 *   - every piece detok_push returns, and the flush, is valid UTF-8 (the server puts pieces in
 *     JSON strings as they come);
 *   - the pieces concatenate to tokenizer_decode of all ids (minus NUL bytes, which a C-string
 *     piece cannot carry).
 * Tokenizers come from $KILN_TOKENIZER_DIR (default tests/.cache/tokenizers).
 *   build-fuzz/fuzz_detok -max_total_time=300 tests/fuzz/corpus/detok
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "real_tokenizers.h"

/* Well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF). */
static int utf8_ok(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        if (!len || i + len > n || (len == 2 && c < 0xC2)) return 0;
        uint32_t cp = len == 1 ? c : c & (0x7F >> len);
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF))) return 0;
        i += len;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!tok[0]) load_all();
    if (size < 1) return 0;
    int which = data[0] % 3, sp = (data[0] >> 2) & 1;
    tokenizer_t *t = tok[which];
    int vocab = tokenizer_vocab_size(t);
    int n = (int)((size - 1) / 3);
    int32_t *ids = malloc(sizeof(int32_t) * (n ? n : 1));
    for (int k = 0; k < n; k++) {
        const uint8_t *p = data + 1 + 3 * k;
        int32_t id = -1;
        if (p[2] & 0x80) {
            char bt[8];
            snprintf(bt, sizeof bt, "<0x%02X>", p[0]);
            id = tokenizer_token_to_id(t, bt);
        }
        ids[k] = id >= 0 ? id : (int32_t)((p[0] | p[1] << 8 | (uint32_t)(p[2] & 0x7F) << 16) % (uint32_t)vocab);
    }
    err_t e = {0};
    size_t dlen = 0;
    char *d = tokenizer_decode_len(t, ids, n, sp, &dlen, &e);
    if (!d) { fprintf(stderr, "decode: %s\n", e.msg); abort(); }
    detok_t *dt = detok_new(t, sp);
    size_t cap = dlen + 16, got = 0;
    char *acc = malloc(cap);
    for (int k = 0; k <= n; k++) {
        char *p = NULL;
        if (k < n) {
            if (detok_push(dt, ids[k], &p, &e)) { fprintf(stderr, "detok_push: %s\n", e.msg); abort(); }
        } else {
            p = detok_flush(dt);
        }
        size_t l = strlen(p);
        if (!utf8_ok((const unsigned char *)p, l)) { fprintf(stderr, "piece %d is not valid UTF-8\n", k); abort(); }
        acc = acc_add(acc, &got, &cap, p, l);
        free(p);
    }
    expect_stream_is_decode(acc, got, d, dlen);
    free(acc);
    free(d);
    free(ids);
    detok_free(dt);
    return 0;
}
