/* fuzz_tokenizer_load.c — libFuzzer target for the tokenizer.json loader.
 *
 * Any input must either load or fail with a message; a tokenizer that loads must then encode
 * and decode a few fixed strings (and a slice of the input as text) without crashing.
 * Seeds: tests/fuzz/corpus/tokenizer_load/ (small hand-written tokenizer.json files).
 *   build-tok-fuzz/fuzz_tokenizer_load -max_total_time=60 tests/fuzz/corpus/tokenizer_load
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    err_t e = {0};
    tokenizer_t *t = tokenizer_load_json((const char *)data, size, "fuzz.json", &e);
    if (!t) {
        if (!e.msg[0]) abort(); /* every failure must say why */
        return 0;
    }
    static const char *texts[] = {"", "hello world", "  a  b\n\tc", "<s>x</s>", "\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80 12,3!",
                                  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        for (int sp = 0; sp < 2; sp++) {
            int32_t *ids = NULL;
            int n = 0;
            if (tokenizer_encode(t, texts[i], strlen(texts[i]), sp, &ids, &n, &e) == 0) {
                char *d = tokenizer_decode(t, ids, n, 0, &e);
                free(d);
                detok_t *dt = detok_new(t, 1);
                for (int k = 0; k < n; k++) {
                    char *p = NULL;
                    if (detok_push(dt, ids[k], &p, &e) == 0) free(p);
                }
                free(detok_flush(dt));
                detok_free(dt);
            }
            free(ids);
        }
    }
    int vs = tokenizer_vocab_size(t);
    int32_t some[8];
    for (int i = 0; i < 8; i++) some[i] = vs ? (int32_t)((i * 7919) % vs) : 0;
    if (vs) free(tokenizer_decode(t, some, 8, 0, &e));
    for (int i = 0; i < vs && i < 64; i++) {
        const char *s = tokenizer_id_to_token(t, i);
        if (s && tokenizer_token_to_id(t, s) < 0) abort(); /* a token must map back to some id */
    }
    tokenizer_free(t);
    return 0;
}
