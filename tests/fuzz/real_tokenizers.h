/* real_tokenizers.h — the real Qwen3, Gemma 3 and Llama 3 tokenizers the tokenizer fuzz targets
 * run on, from $KILN_TOKENIZER_DIR (default tests/.cache/tokenizers, which scripts/test-setup.sh
 * fills). Included by one target's source each: it defines the target's LLVMFuzzerInitialize,
 * which loads them once (seconds under ASan) outside the per-input timeout. */
#ifndef KILN_FUZZ_REAL_TOKENIZERS_H
#define KILN_FUZZ_REAL_TOKENIZERS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tokenizer/tokenizer.h"

static tokenizer_t *tok[3];

static void load_all(void) {
    static const char *names[3] = {"qwen3", "gemma3", "llama3"};
    const char *dir = getenv("KILN_TOKENIZER_DIR");
    if (!dir) dir = "tests/.cache/tokenizers";
    for (int i = 0; i < 3; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        err_t e = {0};
        tok[i] = tokenizer_load(path, &e);
        if (!tok[i]) {
            fprintf(stderr, "fuzz: %s\n", e.msg);
            abort();
        }
    }
}

/* acc[0, *got) gets the l bytes of p appended (grown as needed, always NUL-terminated room). */
static char *acc_add(char *acc, size_t *got, size_t *cap, const char *p, size_t l) {
    if (*got + l + 1 > *cap) {
        *cap = 2 * (*got + l) + 16;
        acc = realloc(acc, *cap);
        if (!acc) abort();
    }
    memcpy(acc + *got, p, l);
    *got += l;
    return acc;
}

/* Aborts unless the streamed acc[0, got) is the decode d[0, dlen) without its NUL bytes
 * (detok pieces are C strings: a decoded NUL cannot be sent, all else must be). d is changed. */
static void expect_stream_is_decode(const char *acc, size_t got, char *d, size_t dlen) {
    size_t m = 0;
    for (size_t i = 0; i < dlen; i++)
        if (d[i]) d[m++] = d[i];
    if (got != m || memcmp(acc, d, got)) {
        fprintf(stderr, "stream != decode (%zu vs %zu bytes)\n", got, m);
        abort();
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    load_all();
    return 0;
}

#endif
