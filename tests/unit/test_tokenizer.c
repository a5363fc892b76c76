/* test_tokenizer.c — the real tokenizers (Qwen3, Gemma 3, Llama 3) against HF's output.
 *
 * Fixtures: tests/fixtures/tokenizers/<name>/{encode,chat}.json, made with HF tokenizers;
 * tokenizer files: tests/.cache/tokenizers/<name>/tokenizer.json (scripts/test-setup.d).
 * Every fixture case is checked for ids, tokens, ids_with_special and decoded; every chat
 * rendering must encode to its ids. Then properties HF guarantees and kiln relies on:
 * byte-level round trips on random text, streaming == full decode, errors on bad UTF-8.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include <jansson.h>
#include <utf8proc.h>

#include "tokenizer/tokenizer.h"

static const char *NAMES[3] = {"qwen3", "gemma3", "llama3"};
static tokenizer_t *TOK[3];

static int setup(void **state) {
    (void)state;
    for (int i = 0; i < 3; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/tests/.cache/tokenizers/%s", KILN_SOURCE_DIR, NAMES[i]);
        err_t e = {0};
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        TOK[i] = tokenizer_load(path, &e);
        clock_gettime(CLOCK_MONOTONIC, &b);
        if (!TOK[i]) {
            fprintf(stderr, "cannot load %s: %s (run scripts/test-setup.sh)\n", path, e.msg);
            return -1;
        }
        printf("# loaded %s in %.3f s, vocab %d\n", NAMES[i],
               (double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9, tokenizer_vocab_size(TOK[i]));
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    for (int i = 0; i < 3; i++) tokenizer_free(TOK[i]);
    return 0;
}

static json_t *load_fixture(const char *name, const char *file) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fixtures/tokenizers/%s/%s", KILN_SOURCE_DIR, name, file);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) fail_msg("%s: %s", path, je.text);
    return j;
}

static void check_ids(const char *what, const char *text, const int32_t *got, int n, json_t *want) {
    int ok = (int)json_array_size(want) == n;
    for (int i = 0; ok && i < n; i++) ok = got[i] == json_integer_value(json_array_get(want, i));
    if (!ok) {
        fprintf(stderr, "%s mismatch for %.80s\n got :", what, text);
        for (int i = 0; i < n; i++) fprintf(stderr, " %d", got[i]);
        fprintf(stderr, "\n want:");
        for (size_t i = 0; i < json_array_size(want); i++) fprintf(stderr, " %lld", (long long)json_integer_value(json_array_get(want, i)));
        fprintf(stderr, "\n");
    }
    assert_true(ok);
}

static void run_encode_fixture(int which) {
    tokenizer_t *t = TOK[which];
    json_t *cases = load_fixture(NAMES[which], "encode.json");
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        const char *text = json_string_value(json_object_get(c, "text"));
        size_t len = json_string_length(json_object_get(c, "text"));
        err_t e = {0};
        int32_t *ids;
        int n;
        assert_int_equal(tokenizer_encode(t, text, len, 0, &ids, &n, &e), 0);
        check_ids("ids", text, ids, n, json_object_get(c, "ids"));
        json_t *toks = json_object_get(c, "tokens");
        for (int k = 0; k < n; k++) {
            const char *want = json_string_value(json_array_get(toks, k));
            const char *got = tokenizer_id_to_token(t, ids[k]);
            assert_non_null(got);
            assert_string_equal(got, want);
            assert_int_equal(tokenizer_token_to_id(t, got), ids[k]);
        }
        char *dec = tokenizer_decode(t, ids, n, 0, &e);
        assert_non_null(dec);
        assert_string_equal(dec, json_string_value(json_object_get(c, "decoded")));
        free(dec);
        free(ids);
        assert_int_equal(tokenizer_encode(t, text, len, 1, &ids, &n, &e), 0);
        check_ids("ids_with_special", text, ids, n, json_object_get(c, "ids_with_special"));
        free(ids);
    }
    printf("# %s: %zu encode cases\n", NAMES[which], json_array_size(cases));
    json_decref(cases);
}

static void run_chat_fixture(int which) {
    json_t *cases = load_fixture(NAMES[which], "chat.json");
    size_t i, n_checked = 0;
    json_t *c;
    json_array_foreach(cases, i, c) {
        json_t *r = json_object_get(c, "rendered");
        if (!json_is_string(r)) continue; /* the template raised: nothing to tokenize */
        err_t e = {0};
        int32_t *ids;
        int n;
        assert_int_equal(tokenizer_encode(TOK[which], json_string_value(r), json_string_length(r), 0, &ids, &n, &e), 0);
        check_ids("chat ids", json_string_value(r), ids, n, json_object_get(c, "ids"));
        free(ids);
        n_checked++;
    }
    assert_true(n_checked > 0);
    printf("# %s: %zu chat cases\n", NAMES[which], n_checked);
    json_decref(cases);
}

static void test_encode_qwen3(void **s) { (void)s; run_encode_fixture(0); }
static void test_encode_gemma3(void **s) { (void)s; run_encode_fixture(1); }
static void test_encode_llama3(void **s) { (void)s; run_encode_fixture(2); }
static void test_chat_qwen3(void **s) { (void)s; run_chat_fixture(0); }
static void test_chat_gemma3(void **s) { (void)s; run_chat_fixture(1); }
static void test_chat_llama3(void **s) { (void)s; run_chat_fixture(2); }

/* ---- streaming --------------------------------------------------------------------- */
static void stream_equals_decode(tokenizer_t *t, const int32_t *ids, int n, int skip) {
    err_t e = {0};
    size_t flen;
    char *full = tokenizer_decode_len(t, ids, n, skip, &flen, &e);
    assert_non_null(full);
    /* pieces are C strings: a decoded NUL byte cannot be sent, everything else must be */
    size_t k = 0;
    for (size_t i = 0; i < flen; i++)
        if (full[i]) full[k++] = full[i];
    full[k] = 0;
    detok_t *d = detok_new(t, skip);
    assert_non_null(d);
    size_t cap = strlen(full) + 64, len = 0;
    char *acc = calloc(1, cap);
    for (int i = 0; i < n; i++) {
        char *piece;
        assert_int_equal(detok_push(d, ids[i], &piece, &e), 0);
        /* never a partial UTF-8 sequence at the end of what was sent */
        size_t pl = strlen(piece);
        len += pl;
        if (len + 1 > cap) { cap = 2 * len + 64; acc = realloc(acc, cap); }
        strcat(acc, piece);
        free(piece);
    }
    char *rest = detok_flush(d);
    len += strlen(rest);
    if (len + 1 > cap) { cap = len + 1; acc = realloc(acc, cap); }
    strcat(acc, rest);
    free(rest);
    if (strcmp(acc, full)) fprintf(stderr, "stream: '%s'\nfull:   '%s'\n", acc, full);
    assert_string_equal(acc, full);
    free(acc);
    free(full);
    detok_free(d);
}

static void test_stream_fixtures(void **s) {
    (void)s;
    for (int w = 0; w < 3; w++) {
        json_t *cases = load_fixture(NAMES[w], "encode.json");
        size_t i;
        json_t *c;
        json_array_foreach(cases, i, c) {
            json_t *ids = json_object_get(c, "ids_with_special");
            int n = (int)json_array_size(ids);
            int32_t *v = malloc(sizeof *v * (n + 1));
            for (int k = 0; k < n; k++) v[k] = (int32_t)json_integer_value(json_array_get(ids, k));
            stream_equals_decode(TOK[w], v, n, 0);
            stream_equals_decode(TOK[w], v, n, 1);
            free(v);
        }
        json_decref(cases);
    }
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

/* Random valid UTF-8 drawn from ASCII, Latin, combining marks, CJK, Hangul, emoji, spaces. */
static size_t random_text(char *buf, size_t max) {
    static const uint32_t ranges[][2] = {{0x20, 0x7E}, {0x0A, 0x0A}, {0x09, 0x09}, {0xC0, 0x17F}, {0x300, 0x36F},
                                         {0x4E00, 0x9FFF}, {0xAC00, 0xD7A3}, {0x1F300, 0x1F64F}, {0x1F900, 0x1F9FF},
                                         {0x0600, 0x06FF}, {0x2000, 0x206F}, {0x3000, 0x303F}, {0x10000, 0x1007F}};
    size_t n = 0;
    while (n + 4 < max) {
        int r = (int)(rnd() % 13);
        if (rnd() % 3 == 0) r = 0;
        uint32_t cp = ranges[r][0] + rnd() % (ranges[r][1] - ranges[r][0] + 1);
        if (cp < 0x80) buf[n++] = (char)cp;
        else if (cp < 0x800) { buf[n++] = (char)(0xC0 | cp >> 6); buf[n++] = (char)(0x80 | (cp & 63)); }
        else if (cp < 0x10000) {
            buf[n++] = (char)(0xE0 | cp >> 12); buf[n++] = (char)(0x80 | ((cp >> 6) & 63)); buf[n++] = (char)(0x80 | (cp & 63));
        } else {
            buf[n++] = (char)(0xF0 | cp >> 18); buf[n++] = (char)(0x80 | ((cp >> 12) & 63));
            buf[n++] = (char)(0x80 | ((cp >> 6) & 63)); buf[n++] = (char)(0x80 | (cp & 63));
        }
        if (rnd() % 40 == 0) break;
    }
    buf[n] = 0;
    return n;
}

static void test_roundtrip_random(void **s) {
    (void)s;
    char buf[512];
    int which[2] = {0, 2}; /* byte-level: decode(encode(x)) == x for any text */
    for (int iter = 0; iter < 400; iter++) {
        size_t n = random_text(buf, 1 + rnd() % sizeof buf);
        for (int k = 0; k < 2; k++) {
            tokenizer_t *t = TOK[which[k]];
            err_t e = {0};
            int32_t *ids;
            int nid;
            assert_int_equal(tokenizer_encode(t, buf, n, 0, &ids, &nid, &e), 0);
            char *d = tokenizer_decode(t, ids, nid, 0, &e);
            assert_non_null(d);
            /* Qwen3 normalizes to NFC first, so that is what comes back */
            char *want = which[k] == 0 ? (char *)utf8proc_NFC((const utf8proc_uint8_t *)buf) : strdup(buf);
            if (strcmp(d, want)) {
                fprintf(stderr, "%s round trip failed:", NAMES[which[k]]);
                for (size_t i = 0; i < n; i++) fprintf(stderr, "%02x", (unsigned char)buf[i]);
                fprintf(stderr, "\n");
            }
            assert_string_equal(d, want);
            free(want);
            free(d);
            stream_equals_decode(t, ids, nid, 0);
            free(ids);
        }
        /* gemma3: byte fallback makes every text encodable; its decode is exact too */
        err_t e = {0};
        int32_t *ids;
        int nid;
        assert_int_equal(tokenizer_encode(TOK[1], buf, n, 0, &ids, &nid, &e), 0);
        char *d = tokenizer_decode(TOK[1], ids, nid, 0, &e);
        assert_non_null(d);
        assert_string_equal(d, buf);
        free(d);
        stream_equals_decode(TOK[1], ids, nid, 0);
        free(ids);
    }
}

/* Random ids (not from encoding): the stream must still agree with the full decode. */
static void test_stream_random_ids(void **s) {
    (void)s;
    for (int w = 0; w < 3; w++) {
        tokenizer_t *t = TOK[w];
        int32_t ids[40];
        for (int iter = 0; iter < 60; iter++) {
            int n = 1 + (int)(rnd() % 40);
            for (int i = 0; i < n; i++) {
                /* bias towards low ids (bytes, <0xAB> tokens, pieces of words) */
                int32_t range = rnd() % 2 ? 600 : tokenizer_vocab_size(t);
                ids[i] = (int32_t)(rnd() % range);
            }
            stream_equals_decode(t, ids, n, 0);
            stream_equals_decode(t, ids, n, 1);
        }
    }
}

/* Long runs of byte tokens that stay incomplete or turn invalid late. Regression from
 * fuzz_tokenizer_encode: Gemma's ByteFallback groups a whole run of <0xAB> tokens and turns an
 * invalid group into one U+FFFD per byte, so text inside a run must never be sent early. */
static void test_stream_long_byte_runs(void **s) {
    (void)s;
    int32_t ids[64];
    int n = 0;
    int32_t a = tokenizer_token_to_id(TOK[1], "<0x41>"), e2 = tokenizer_token_to_id(TOK[1], "<0xE2>");
    int32_t x = tokenizer_token_to_id(TOK[1], "x");
    assert_true(a >= 0 && e2 >= 0 && x >= 0);
    for (int i = 0; i < 40; i++) ids[n++] = a;
    ids[n++] = e2;
    ids[n++] = x;
    stream_equals_decode(TOK[1], ids, n, 0);
    stream_equals_decode(TOK[1], ids, n - 1, 0);
    /* byte-level: 40 lone lead bytes 0xE4 ("ä"), then B8 AD ("¸", "Ń") completing the last */
    n = 0;
    int32_t lead = tokenizer_token_to_id(TOK[0], "\xc3\xa4"), b8 = tokenizer_token_to_id(TOK[0], "\xc2\xb8"),
            ad = tokenizer_token_to_id(TOK[0], "\xc5\x83");
    assert_true(lead >= 0 && b8 >= 0 && ad >= 0);
    for (int i = 0; i < 40; i++) ids[n++] = lead;
    ids[n++] = b8;
    ids[n++] = ad;
    stream_equals_decode(TOK[0], ids, n, 0);
    err_t e = {0};
    char *d = tokenizer_decode(TOK[0], ids, n, 0, &e);
    assert_int_equal(strlen(d), 39 * 3 + 3);
    assert_memory_equal(d + 39 * 3, "\xe4\xb8\xad", 3);
    free(d);
}

/* A token the decode skips between two byte tokens does not end the byte run (fuzz_detok:
 * Gemma 3 with skip_special, <0x01> <bos> <0x80> — "\x01" went out at <bos>, then the joined
 * bytes decoded to two U+FFFD and detok_push failed). Also a special token kept in the text. */
static void test_stream_skipped_token_in_byte_run(void **s) {
    (void)s;
    int32_t b01 = tokenizer_token_to_id(TOK[1], "<0x01>"), b80 = tokenizer_token_to_id(TOK[1], "<0x80>");
    int32_t bos = tokenizer_token_to_id(TOK[1], "<bos>"), x = tokenizer_token_to_id(TOK[1], "x");
    assert_true(b01 >= 0 && b80 >= 0 && bos >= 0 && x >= 0);
    int32_t ids[] = {b01, bos, b80, x, bos, b01, bos, bos, x};
    int n = (int)(sizeof ids / sizeof ids[0]);
    for (int skip = 0; skip < 2; skip++)
        for (int k = 1; k <= n; k++) stream_equals_decode(TOK[1], ids, k, skip);
}

/* ---- edge cases -------------------------------------------------------------------- */
static void test_invalid_utf8(void **s) {
    (void)s;
    const char *bad[] = {"abc\xff", "ok \xC3", "\xE2\x82", "x\xED\xA0\x80y", "\xF4\x90\x80\x80", "\xC0\xAF"};
    size_t off[] = {3, 3, 0, 1, 0, 0};
    for (int w = 0; w < 3; w++)
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            err_t e = {0};
            int32_t *ids = (int32_t *)1;
            int n = 7;
            assert_int_equal(tokenizer_encode(TOK[w], bad[i], strlen(bad[i]), 0, &ids, &n, &e), -1);
            assert_null(ids);
            assert_int_equal(n, 0);
            char want[64];
            snprintf(want, sizeof want, "byte offset %zu", off[i]);
            assert_non_null(strstr(e.msg, want));
        }
}

static void test_empty_and_nul(void **s) {
    (void)s;
    for (int w = 0; w < 3; w++) {
        err_t e = {0};
        int32_t *ids;
        int n;
        assert_int_equal(tokenizer_encode(TOK[w], "", 0, 0, &ids, &n, &e), 0);
        assert_int_equal(n, 0);
        free(ids);
        assert_int_equal(tokenizer_encode(TOK[w], NULL, 0, 0, &ids, &n, &e), 0);
        assert_int_equal(n, 0);
        free(ids);
        /* an embedded NUL is valid UTF-8 and must round-trip on the byte-level tokenizers */
        assert_int_equal(tokenizer_encode(TOK[w], "a\0b", 3, 0, &ids, &n, &e), 0);
        assert_true(n >= 2);
        free(ids);
        char *d = tokenizer_decode(TOK[w], NULL, 0, 0, &e);
        assert_string_equal(d, "");
        free(d);
    }
    /* gemma3 adds <bos> even to empty text with add_special */
    err_t e = {0};
    int32_t *ids;
    int n;
    assert_int_equal(tokenizer_encode(TOK[1], "", 0, 1, &ids, &n, &e), 0);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 2);
    free(ids);
}

/* Regression from fuzz_tokenizer_encode: text with a NUL byte. Encoding is exact; decode
 * returns a C string, so it stops at the NUL (documented in docs/tokenizer.md). */
static void test_fuzz_nul_regression(void **s) {
    (void)s;
    static const char text[] = "<|begin_of_tex\x14|>I'?M 71517 2\0caf\xc3\xa9";
    size_t len = sizeof text - 1;
    for (int w = 0; w < 3; w++) {
        err_t e = {0};
        int32_t *ids;
        int n;
        assert_int_equal(tokenizer_encode(TOK[w], text, len, 0, &ids, &n, &e), 0);
        char *d = tokenizer_decode(TOK[w], ids, n, 0, &e);
        assert_non_null(d);
        assert_string_equal(d, "<|begin_of_tex\x14|>I'?M 71517 2");
        free(d);
        stream_equals_decode(TOK[w], ids, n, 0);
        free(ids);
    }
    /* fuzz_tokenizer_encode crash-684287c4: Gemma 3, add_special + skip_special, a byte run of
     * 81 NULs ending in an incomplete UTF-8 sequence; the stream used to be contradicted */
    char buf[256];
    size_t len2 = 0;
    buf[len2++] = 0x1d;
    memset(buf + len2, 0, 81);
    len2 += 81;
    memcpy(buf + len2, "\xe2\x86\x81\x02\x3c\x7c\x02\x3c\x7c\x5f\x2b\x78", 12);
    len2 += 12;
    err_t e = {0};
    int32_t *ids;
    int n;
    assert_int_equal(tokenizer_encode(TOK[1], buf, len2, 1, &ids, &n, &e), 0);
    stream_equals_decode(TOK[1], ids, n, 1);
    free(ids);
}

static void test_bad_ids(void **s) {
    (void)s;
    for (int w = 0; w < 3; w++) {
        err_t e = {0};
        int32_t ids[2] = {5, tokenizer_vocab_size(TOK[w])};
        assert_null(tokenizer_decode(TOK[w], ids, 2, 0, &e));
        assert_non_null(strstr(e.msg, "out of range"));
        int32_t neg = -1;
        assert_null(tokenizer_decode(TOK[w], &neg, 1, 0, &e));
        assert_null(tokenizer_id_to_token(TOK[w], -1));
        assert_null(tokenizer_id_to_token(TOK[w], tokenizer_vocab_size(TOK[w])));
        assert_int_equal(tokenizer_token_to_id(TOK[w], "no such token ~~~ \x01"), -1);
        detok_t *d = detok_new(TOK[w], 0);
        char *out = (char *)1;
        assert_int_equal(detok_push(d, -3, &out, &e), -1);
        assert_null(out);
        detok_free(d);
    }
    assert_int_equal(tokenizer_vocab_size(TOK[0]), 151669);
    assert_int_equal(tokenizer_vocab_size(TOK[1]), 262145);
    assert_int_equal(tokenizer_vocab_size(TOK[2]), 128256);
    assert_true(tokenizer_is_special(TOK[0], 151644));
    assert_false(tokenizer_is_special(TOK[0], 151657)); /* <tool_call> is added, not special */
    assert_false(tokenizer_is_special(TOK[0], 100));
}

static void test_long_input(void **s) {
    (void)s;
    size_t n = 1 << 20;
    char *buf = malloc(n + 1);
    const char *words[] = {"the ", "quick ", "brown ", "fox ", "jumps ", "over ", "lazy ", "dogs. ", "\n", "日本語 ",
                           "naïve ", "12345 ", "  ", "😀 "};
    size_t len = 0;
    while (1) {
        const char *w = words[rnd() % 14];
        size_t l = strlen(w);
        if (len + l > n) break;
        memcpy(buf + len, w, l);
        len += l;
    }
    buf[len] = 0;
    for (int w = 0; w < 3; w++) {
        err_t e = {0};
        int32_t *ids;
        int nid;
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        assert_int_equal(tokenizer_encode(TOK[w], buf, len, 0, &ids, &nid, &e), 0);
        clock_gettime(CLOCK_MONOTONIC, &b);
        printf("# %s: 1 MB in %.3f s, %d tokens\n", NAMES[w], (double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9, nid);
        char *d = tokenizer_decode(TOK[w], ids, nid, 0, &e);
        assert_non_null(d);
        assert_true(strcmp(d, buf) == 0);
        free(d);
        free(ids);
    }
    /* one giant word: gemma3 keeps whole texts as one BPE word; must stay O(n log n) */
    memset(buf, 'a', 200000);
    for (size_t i = 0; i < 200000; i += 7) buf[i] = 'b';
    for (int w = 0; w < 3; w++) {
        err_t e = {0};
        int32_t *ids;
        int nid;
        assert_int_equal(tokenizer_encode(TOK[w], buf, 200000, 0, &ids, &nid, &e), 0);
        char *d = tokenizer_decode(TOK[w], ids, nid, 0, &e);
        assert_int_equal(strlen(d), 200000);
        assert_memory_equal(d, buf, 200000);
        free(d);
        free(ids);
    }
    free(buf);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode_qwen3),   cmocka_unit_test(test_encode_gemma3),
        cmocka_unit_test(test_encode_llama3),  cmocka_unit_test(test_chat_qwen3),
        cmocka_unit_test(test_chat_gemma3),    cmocka_unit_test(test_chat_llama3),
        cmocka_unit_test(test_stream_fixtures), cmocka_unit_test(test_roundtrip_random),
        cmocka_unit_test(test_stream_random_ids), cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_empty_and_nul),  cmocka_unit_test(test_bad_ids),
        cmocka_unit_test(test_fuzz_nul_regression), cmocka_unit_test(test_stream_long_byte_runs),
        cmocka_unit_test(test_stream_skipped_token_in_byte_run),
        cmocka_unit_test(test_long_input),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
