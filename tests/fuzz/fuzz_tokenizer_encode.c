/* fuzz_tokenizer_encode.c — libFuzzer target for the encoder on the real tokenizers.
 *
 * Input byte 0 picks the tokenizer (Qwen3, Gemma 3, Llama 3) and add_special; the rest is
 * the text, valid UTF-8 or not. Checked properties, each an abort() when violated:
 *   - invalid UTF-8 is rejected with a message, valid text encodes;
 *   - Llama 3 and Gemma 3 (no normalizer that changes text) round-trip: decode(encode(x)) == x
 *     (without add_special; for Gemma only if x has no literal U+2581, which decodes to ' ');
 *   - the streaming detokenizer's pieces concatenate to the full decode (minus NUL bytes,
 *     which a C-string piece cannot carry).
 * Tokenizers come from $KILN_TOKENIZER_DIR (default tests/.cache/tokenizers).
 *   build-tok-fuzz/fuzz_tokenizer_encode -max_total_time=60 tests/fuzz/corpus/tokenizer_encode
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "real_tokenizers.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!tok[0]) load_all();
    if (size < 1) return 0;
    int which = data[0] % 3, sp = (data[0] >> 2) & 1;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    tokenizer_t *t = tok[which];
    err_t e = {0};
    int32_t *ids = NULL;
    int n = 0;
    if (tokenizer_encode(t, text, len, sp, &ids, &n, &e)) {
        if (!strstr(e.msg, "invalid UTF-8")) { fprintf(stderr, "%s\n", e.msg); abort(); }
        return 0;
    }
    size_t dlen;
    char *d = tokenizer_decode_len(t, ids, n, sp, &dlen, &e);
    if (!d) abort();
    int gemma_ok = which != 1 || !memmem(text, len, "\xe2\x96\x81", 3);
    if (which != 0 && !sp && gemma_ok && (dlen != len || memcmp(d, text, len))) {
        fprintf(stderr, "round trip mismatch\n");
        abort();
    }
    detok_t *dt = detok_new(t, sp);
    size_t cap = strlen(d) + 16, got = 0;
    char *acc = malloc(cap);
    for (int k = 0; k < n; k++) {
        char *p = NULL;
        if (detok_push(dt, ids[k], &p, &e)) { fprintf(stderr, "%s\n", e.msg); abort(); }
        acc = acc_add(acc, &got, &cap, p, strlen(p));
        free(p);
    }
    char *rest = detok_flush(dt);
    acc = acc_add(acc, &got, &cap, rest, strlen(rest));
    free(rest);
    expect_stream_is_decode(acc, got, d, dlen);
    free(acc);
    detok_free(dt);
    free(d);
    free(ids);
    return 0;
}
