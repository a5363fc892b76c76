/* test_tokenizer_variants.c — small hand-written tokenizer.json files for the parts of HF's
 * pipeline the three real tokenizers do not exercise: every Split behavior and invert,
 * Digits, Punctuation, Whitespace(Split), Metaspace schemes, ByteLevel's regex, the
 * normalizers, added-token flags, the smaller models, post-processors, decoders, and the
 * errors a malformed file must produce.
 *
 * Expected outputs come from HF's documented semantics (the docstrings and unit tests of the
 * `tokenizers` crate: e.g. SplitDelimiterBehavior's "the-final--countdown" examples, the
 * Punctuation/Whitespace/Metaspace/ByteLevel pre-tokenizer tests), worked by hand where a
 * case is new.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "tokenizer/tokenizer.h"

#define WL_UNK "{\"type\":\"WordLevel\",\"vocab\":{\"[UNK]\":0},\"unk_token\":\"[UNK]\"}"

static char JSON[1 << 16];

/* Builds a tokenizer.json from its blocks ("null" for none). */
static tokenizer_t *mk(const char *model, const char *norm, const char *pre, const char *post, const char *dec,
                       const char *added) {
    snprintf(JSON, sizeof JSON,
             "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":%s,\"normalizer\":%s,"
             "\"pre_tokenizer\":%s,\"post_processor\":%s,\"decoder\":%s,\"model\":%s}",
             added ? added : "[]", norm ? norm : "null", pre ? pre : "null", post ? post : "null", dec ? dec : "null",
             model ? model : WL_UNK);
    err_t e = {0};
    tokenizer_t *t = tokenizer_load_json(JSON, strlen(JSON), "test.json", &e);
    if (!t) fail_msg("load failed: %s\n%s", e.msg, JSON);
    return t;
}

static void expect_pieces_n(tokenizer_t *t, const char *text, size_t len, const char **want) {
    char **p;
    int n;
    err_t e = {0};
    assert_int_equal(tokenizer_pretokenize(t, text, len, &p, &n, &e), 0);
    int nw = 0;
    while (want[nw]) nw++;
    int ok = n == nw;
    for (int i = 0; ok && i < n; i++) ok = !strcmp(p[i], want[i]);
    if (!ok) {
        fprintf(stderr, "pieces of '%s':\n got :", text);
        for (int i = 0; i < n; i++) fprintf(stderr, " [%s]", p[i]);
        fprintf(stderr, "\n want:");
        for (int i = 0; i < nw; i++) fprintf(stderr, " [%s]", want[i]);
        fprintf(stderr, "\n");
    }
    tokenizer_free_pieces(p, n);
    assert_true(ok);
}
#define PIECES(t, text, ...) do { const char *w_[] = {__VA_ARGS__, NULL}; expect_pieces_n(t, text, strlen(text), w_); } while (0)
#define NO_PIECES(t, text) do { const char *w_[] = {NULL}; expect_pieces_n(t, text, strlen(text), w_); } while (0)

static void expect_norm(tokenizer_t *t, const char *text, const char *want) {
    err_t e = {0};
    char *got = tokenizer_normalize(t, text, strlen(text), &e);
    assert_non_null(got);
    assert_string_equal(got, want);
    free(got);
}

static void expect_ids(tokenizer_t *t, const char *text, int add_special, const int32_t *want, int nw) {
    err_t e = {0};
    int32_t *ids;
    int n;
    if (tokenizer_encode(t, text, strlen(text), add_special, &ids, &n, &e)) fail_msg("encode '%s': %s", text, e.msg);
    int ok = n == nw;
    for (int i = 0; ok && i < n; i++) ok = ids[i] == want[i];
    if (!ok) {
        fprintf(stderr, "ids of '%s':\n got :", text);
        for (int i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n want:");
        for (int i = 0; i < nw; i++) fprintf(stderr, " %d", want[i]);
        fprintf(stderr, "\n");
    }
    free(ids);
    assert_true(ok);
}
#define IDS(t, text, sp, ...) do { const int32_t w_[] = {__VA_ARGS__}; expect_ids(t, text, sp, w_, (int)(sizeof w_ / sizeof w_[0])); } while (0)

static void expect_decode(tokenizer_t *t, const int32_t *ids, int n, const char *want) {
    err_t e = {0};
    char *got = tokenizer_decode(t, ids, n, 0, &e);
    if (!got) fail_msg("decode: %s", e.msg);
    assert_string_equal(got, want);
    free(got);
    /* and the streaming detokenizer agrees */
    detok_t *d = detok_new(t, 0);
    char acc[1024] = "";
    for (int i = 0; i < n; i++) {
        char *p;
        assert_int_equal(detok_push(d, ids[i], &p, &e), 0);
        strcat(acc, p);
        free(p);
    }
    char *rest = detok_flush(d);
    strcat(acc, rest);
    free(rest);
    detok_free(d);
    assert_string_equal(acc, want);
}
#define DECODES(t, want, ...) do { const int32_t w_[] = {__VA_ARGS__}; expect_decode(t, w_, (int)(sizeof w_ / sizeof w_[0]), want); } while (0)

/* ---- pre-tokenizers ---------------------------------------------------------------- */
static void test_split_behaviors(void **s) {
    (void)s;
    const char *fmt = "{\"type\":\"Split\",\"pattern\":{\"String\":\"-\"},\"behavior\":\"%s\",\"invert\":false}";
    char pre[256];
    tokenizer_t *t;
#define WITH(b) (snprintf(pre, sizeof pre, fmt, b), t = mk(NULL, NULL, pre, NULL, NULL, NULL))
    WITH("Removed");
    PIECES(t, "the-final--countdown", "the", "final", "countdown");
    tokenizer_free(t);
    WITH("Isolated");
    PIECES(t, "the-final--countdown", "the", "-", "final", "-", "-", "countdown");
    tokenizer_free(t);
    WITH("MergedWithPrevious");
    PIECES(t, "the-final--countdown", "the-", "final-", "-", "countdown");
    tokenizer_free(t);
    WITH("MergedWithNext");
    PIECES(t, "the-final--countdown", "the", "-final", "-", "-countdown");
    tokenizer_free(t);
    WITH("Contiguous");
    PIECES(t, "the-final--countdown", "the", "-", "final", "--", "countdown");
    PIECES(t, "--a-", "--", "a", "-");
    tokenizer_free(t);
#undef WITH
    /* invert: the pattern marks what to keep */
    t = mk(NULL, NULL, "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\w+\"},\"behavior\":\"Removed\",\"invert\":true}", NULL, NULL, NULL);
    PIECES(t, "Hello, how are you?", "Hello", "how", "are", "you");
    tokenizer_free(t);
    t = mk(NULL, NULL, "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\w+\"},\"behavior\":\"MergedWithPrevious\",\"invert\":true}", NULL, NULL, NULL);
    PIECES(t, "Hello, how are you?", "Hello, ", "how ", "are ", "you?");
    tokenizer_free(t);
    /* a regex that can match empty: Rust/onig iteration, empties dropped */
    t = mk(NULL, NULL, "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"x*\"},\"behavior\":\"Isolated\",\"invert\":false}", NULL, NULL, NULL);
    PIECES(t, "abxxc", "a", "b", "xx", "c");
    tokenizer_free(t);
    /* Oniguruma's \s is White_Space: U+180E (Mongolian vowel separator) is not, U+3000 is */
    t = mk(NULL, NULL, "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\s+\"},\"behavior\":\"Removed\",\"invert\":false}", NULL, NULL, NULL);
    PIECES(t, "a\xe1\xa0\x8e" "b\xe3\x80\x80" "c", "a\xe1\xa0\x8e" "b", "c");
    tokenizer_free(t);
}

static void test_digits_punct_whitespace(void **s) {
    (void)s;
    tokenizer_t *t = mk(NULL, NULL, "{\"type\":\"Digits\",\"individual_digits\":true}", NULL, NULL, NULL);
    PIECES(t, "Call 123 please", "Call ", "1", "2", "3", " please");
    tokenizer_free(t);
    t = mk(NULL, NULL, "{\"type\":\"Digits\",\"individual_digits\":false}", NULL, NULL, NULL);
    PIECES(t, "Call 123 please", "Call ", "123", " please");
    PIECES(t, "\xd9\xa3\xd9\xa4x", "\xd9\xa3\xd9\xa4", "x"); /* Arabic-Indic digits are numeric */
    tokenizer_free(t);
    t = mk(NULL, NULL, "{\"type\":\"Punctuation\",\"behavior\":\"Isolated\"}", NULL, NULL, NULL);
    PIECES(t, "Hey friend!     How are you?!?", "Hey friend", "!", "     How are you", "?", "!", "?");
    PIECES(t, "a\xc2\xbf" "b$", "a", "\xc2\xbf", "b", "$"); /* ¿ is Po; $ is ASCII punctuation */
    tokenizer_free(t);
    t = mk(NULL, NULL, "{\"type\":\"Whitespace\"}", NULL, NULL, NULL);
    PIECES(t, "Hey man!", "Hey", "man", "!");
    PIECES(t, "How are you doing?", "How", "are", "you", "doing", "?");
    NO_PIECES(t, "\n");
    tokenizer_free(t);
    t = mk(NULL, NULL, "{\"type\":\"WhitespaceSplit\"}", NULL, NULL, NULL);
    PIECES(t, "Hey man!", "Hey", "man!");
    PIECES(t, "Hey, man, Good?", "Hey,", "man,", "Good?");
    tokenizer_free(t);
    t = mk(NULL, NULL, "{\"type\":\"BertPreTokenizer\"}", NULL, NULL, NULL);
    PIECES(t, "Hey friend!     How are you?!?", "Hey", "friend", "!", "How", "are", "you", "?", "!", "?");
    tokenizer_free(t);
    t = mk(NULL, NULL, "{\"type\":\"CharDelimiterSplit\",\"delimiter\":\"x\"}", NULL, NULL, NULL);
    PIECES(t, "axbxxc", "a", "b", "c");
    tokenizer_free(t);
    t = mk(NULL, NULL,
           "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"WhitespaceSplit\"},{\"type\":\"Digits\",\"individual_digits\":true}]}",
           NULL, NULL, NULL);
    PIECES(t, "ab12 c3", "ab", "1", "2", "c", "3");
    tokenizer_free(t);
}

static void test_metaspace_bytelevel(void **s) {
    (void)s;
    tokenizer_t *t = mk(NULL, NULL, "{\"type\":\"Metaspace\",\"replacement\":\"\xe2\x96\x81\",\"prepend_scheme\":\"always\",\"split\":true}", NULL, NULL, NULL);
    PIECES(t, "Hey friend!", "\xe2\x96\x81Hey", "\xe2\x96\x81" "friend!");
    PIECES(t, "Hey   friend!", "\xe2\x96\x81Hey", "\xe2\x96\x81", "\xe2\x96\x81", "\xe2\x96\x81" "friend!");
    tokenizer_free(t);
    /* prepend_scheme first: only the piece at offset 0 of the text gets the ▁ (HF's test) */
    const char *added = "[{\"id\":1,\"content\":\"<s>\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true}]";
    t = mk("{\"type\":\"WordLevel\",\"vocab\":{\"[UNK]\":0,\"<s>\":1},\"unk_token\":\"[UNK]\"}", NULL,
           "{\"type\":\"Metaspace\",\"replacement\":\"\xe2\x96\x81\",\"prepend_scheme\":\"first\",\"split\":false}", NULL, NULL, added);
    PIECES(t, " Hey <s>how", "\xe2\x96\x81Hey\xe2\x96\x81", "<s>", "how");
    PIECES(t, "Hey <s>how <s>are <s> you", "\xe2\x96\x81Hey\xe2\x96\x81", "<s>", "how\xe2\x96\x81", "<s>", "are\xe2\x96\x81", "<s>",
           "\xe2\x96\x81you");
    tokenizer_free(t);
    /* legacy add_prefix_space=false means never */
    t = mk(NULL, NULL, "{\"type\":\"Metaspace\",\"replacement\":\"_\",\"add_prefix_space\":false}", NULL, NULL, NULL);
    PIECES(t, "a b", "a", "_b");
    tokenizer_free(t);
    /* ByteLevel with its GPT-2 regex and a prefix space (HF's test) */
    t = mk(NULL, NULL, "{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":true,\"use_regex\":true}", NULL, NULL, NULL);
    PIECES(t, "Hello my friend, how is your day going?", "\xc4\xa0Hello", "\xc4\xa0my", "\xc4\xa0" "friend", ",", "\xc4\xa0how",
           "\xc4\xa0is", "\xc4\xa0your", "\xc4\xa0" "day", "\xc4\xa0going", "?");
    PIECES(t, "it's  x\n", "\xc4\xa0it", "'s", "\xc4\xa0", "\xc4\xa0x", "\xc4\x8a");
    tokenizer_free(t);
    t = mk(NULL, NULL, "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}", NULL, NULL, NULL);
    PIECES(t, "a b\xc3\xa9", "a\xc4\xa0" "b\xc3\x83\xc2\xa9");
    tokenizer_free(t);
}

/* ---- normalizers ------------------------------------------------------------------- */
static void test_normalizers(void **s) {
    (void)s;
    tokenizer_t *t = mk(NULL, "{\"type\":\"NFKC\"}", NULL, NULL, NULL, NULL);
    expect_norm(t, "\xe2\x85\xab \xef\xac\x81 \xef\xbc\xa1\xef\xbc\xa2\xef\xbc\xa3", "XII fi ABC");
    tokenizer_free(t);
    t = mk(NULL, "{\"type\":\"NFD\"}", NULL, NULL, NULL, NULL);
    expect_norm(t, "\xc3\xa9", "e\xcc\x81");
    tokenizer_free(t);
    t = mk(NULL, "{\"type\":\"NFKD\"}", NULL, NULL, NULL, NULL);
    expect_norm(t, "\xef\xac\x81\xc3\xa9", "fie\xcc\x81");
    tokenizer_free(t);
    t = mk(NULL, "{\"type\":\"NFC\"}", NULL, NULL, NULL, NULL);
    expect_norm(t, "e\xcc\x81", "\xc3\xa9");
    tokenizer_free(t);
    t = mk(NULL, "{\"type\":\"Lowercase\"}", NULL, NULL, NULL, NULL);
    expect_norm(t, "HeLLo \xc3\x89\xce\xa3 \xc4\xb0", "hello \xc3\xa9\xcf\x83 i\xcc\x87"); /* É Σ İ */
    tokenizer_free(t);
    t = mk(NULL, "{\"type\":\"Strip\",\"strip_left\":true,\"strip_right\":true}", NULL, NULL, NULL, NULL);
    expect_norm(t, " \t hi there \xe3\x80\x80\n", "hi there");
    tokenizer_free(t);
    t = mk(NULL, "{\"type\":\"Strip\",\"strip_left\":false,\"strip_right\":true}", NULL, NULL, NULL, NULL);
    expect_norm(t, "  hi  ", "  hi");
    tokenizer_free(t);
    t = mk(NULL, "{\"type\":\"Replace\",\"pattern\":{\"Regex\":\" +\"},\"content\":\" \"}", NULL, NULL, NULL, NULL);
    expect_norm(t, "a   b  c", "a b c");
    tokenizer_free(t);
    t = mk(NULL, "{\"type\":\"Replace\",\"pattern\":{\"String\":\"ab\"},\"content\":\"X\"}", NULL, NULL, NULL, NULL);
    expect_norm(t, "aabab.ab", "aXX.X");
    tokenizer_free(t);
    t = mk(NULL, "{\"type\":\"Prepend\",\"prepend\":\"\xe2\x96\x81\"}", NULL, NULL, NULL, NULL);
    expect_norm(t, "hey", "\xe2\x96\x81hey");
    expect_norm(t, "", "");
    tokenizer_free(t);
    t = mk(NULL, "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFD\"},{\"type\":\"StripAccents\"},{\"type\":\"Lowercase\"}]}",
           NULL, NULL, NULL, NULL);
    expect_norm(t, "\xc3\x89lan Na\xc3\xafve", "elan naive");
    tokenizer_free(t);
    t = mk(NULL, "{\"type\":\"BertNormalizer\",\"clean_text\":true,\"handle_chinese_chars\":true,\"strip_accents\":null,\"lowercase\":true}",
           NULL, NULL, NULL, NULL);
    expect_norm(t, "H\xc3\xa9llo\tWorld\x01 \xe4\xb8\xad\xe6\x96\x87", "hello world  \xe4\xb8\xad  \xe6\x96\x87 ");
    tokenizer_free(t);
}

/* ---- added tokens ------------------------------------------------------------------ */
static void test_added_tokens(void **s) {
    (void)s;
    const char *model = "{\"type\":\"WordLevel\",\"vocab\":{\"[UNK]\":0,\"<mask>\":1},\"unk_token\":\"[UNK]\"}";
    const char *fmt = "[{\"id\":1,\"content\":\"<mask>\",\"single_word\":false,\"lstrip\":%s,\"rstrip\":%s,\"normalized\":false,\"special\":true}]";
    char added[512];
    snprintf(added, sizeof added, fmt, "false", "false");
    tokenizer_t *t = mk(model, NULL, NULL, NULL, NULL, added);
    PIECES(t, "a <mask> b", "a ", "<mask>", " b");
    tokenizer_free(t);
    snprintf(added, sizeof added, fmt, "true", "false");
    t = mk(model, NULL, NULL, NULL, NULL, added);
    PIECES(t, "a  <mask> b", "a", "<mask>", " b");
    tokenizer_free(t);
    snprintf(added, sizeof added, fmt, "false", "true");
    t = mk(model, NULL, NULL, NULL, NULL, added);
    PIECES(t, "a <mask> \n b", "a ", "<mask>", "b");
    tokenizer_free(t);
    /* single_word: not matched inside a word */
    t = mk("{\"type\":\"WordLevel\",\"vocab\":{\"[UNK]\":0,\"ab\":1},\"unk_token\":\"[UNK]\"}", NULL, NULL, NULL, NULL,
           "[{\"id\":1,\"content\":\"ab\",\"single_word\":true,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":false}]");
    PIECES(t, "ab cab ab_ ab", "ab", " cab ab_ ", "ab");
    tokenizer_free(t);
    /* leftmost-longest */
    t = mk(NULL, NULL, NULL, NULL, NULL,
           "[{\"id\":5,\"content\":\"<a>\",\"special\":true,\"normalized\":false},{\"id\":6,\"content\":\"<a><b>\",\"special\":true,\"normalized\":false},"
           "{\"id\":7,\"content\":\"a><\",\"special\":true,\"normalized\":false}]");
    PIECES(t, "x<a><b>y<a>", "x", "<a><b>", "y", "<a>");
    IDS(t, "x<a><b>y<a>", 0, 0, 6, 0, 5);
    assert_int_equal(tokenizer_vocab_size(t), 8);
    tokenizer_free(t);
    /* normalized=true tokens match the normalized text; normalized=false the raw text */
    t = mk("{\"type\":\"WordLevel\",\"vocab\":{\"[UNK]\":0,\"hello\":1,\"WORLD\":2},\"unk_token\":\"[UNK]\"}", "{\"type\":\"Lowercase\"}",
           NULL, NULL, NULL,
           "[{\"id\":1,\"content\":\"HeLLo\",\"special\":false,\"normalized\":true},{\"id\":2,\"content\":\"WORLD\",\"special\":false,\"normalized\":false}]");
    IDS(t, "HELLO WORLD world", 0, 1, 0, 2, 0);
    tokenizer_free(t);
}

/* ---- models ------------------------------------------------------------------------ */
static void test_models(void **s) {
    (void)s;
    /* BPE: merges as strings or pairs; ranks decide */
    const char *v = "\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"ab\":3,\"bc\":4,\"abc\":5}";
    char m[512];
    snprintf(m, sizeof m, "{\"type\":\"BPE\",%s,\"merges\":[\"b c\",\"a b\",\"a bc\"]}", v);
    tokenizer_t *t = mk(m, NULL, "{\"type\":\"WhitespaceSplit\"}", NULL, NULL, NULL);
    IDS(t, "abc ab cab", 0, 5, 3, 2, 3);
    tokenizer_free(t);
    snprintf(m, sizeof m, "{\"type\":\"BPE\",%s,\"merges\":[[\"a\",\"b\"],[\"b\",\"c\"]]}", v);
    t = mk(m, NULL, NULL, NULL, NULL, NULL);
    IDS(t, "abc", 0, 3, 2); /* a+b wins (rank 0), then no "ab c" merge */
    tokenizer_free(t);
    /* ignore_merges: a whole word in the vocab is taken as is */
    snprintf(m, sizeof m, "{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"ab\":3,\"abc\":4},\"merges\":[\"a b\"],\"ignore_merges\":true}");
    t = mk(m, NULL, NULL, NULL, NULL, NULL);
    IDS(t, "abc", 0, 4);
    tokenizer_free(t);
    /* unk handling: fused, not fused, dropped */
    t = mk("{\"type\":\"BPE\",\"vocab\":{\"<unk>\":0,\"a\":1},\"merges\":[],\"unk_token\":\"<unk>\",\"fuse_unk\":true}", NULL, NULL, NULL, NULL, NULL);
    IDS(t, "xxa", 0, 0, 1);
    tokenizer_free(t);
    t = mk("{\"type\":\"BPE\",\"vocab\":{\"<unk>\":0,\"a\":1},\"merges\":[],\"unk_token\":\"<unk>\",\"fuse_unk\":false}", NULL, NULL, NULL, NULL, NULL);
    IDS(t, "xxa", 0, 0, 0, 1);
    tokenizer_free(t);
    t = mk("{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}", NULL, NULL, NULL, NULL, NULL);
    IDS(t, "xxa", 0, 0);
    tokenizer_free(t);
    /* byte fallback: an unknown char becomes its UTF-8 bytes */
    t = mk("{\"type\":\"BPE\",\"vocab\":{\"<unk>\":0,\"a\":1,\"<0xC3>\":2,\"<0xA9>\":3},\"merges\":[],\"unk_token\":\"<unk>\",\"byte_fallback\":true}",
           NULL, NULL, NULL, "{\"type\":\"ByteFallback\"}", NULL);
    IDS(t, "a\xc3\xa9z", 0, 1, 2, 3, 0);
    DECODES(t, "a\xc3\xa9<unk>", 1, 2, 3, 0);
    tokenizer_free(t);
    /* continuing_subword_prefix / end_of_word_suffix */
    t = mk("{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"##b\":1,\"##c</w>\":2,\"ab\":3,\"abc</w>\":4},\"merges\":[\"a ##b\",\"ab ##c</w>\"],"
           "\"continuing_subword_prefix\":\"##\",\"end_of_word_suffix\":\"</w>\"}",
           NULL, NULL, NULL, NULL, NULL);
    IDS(t, "abc", 0, 4);
    tokenizer_free(t);
    /* WordPiece */
    t = mk("{\"type\":\"WordPiece\",\"unk_token\":\"[UNK]\",\"continuing_subword_prefix\":\"##\",\"max_input_chars_per_word\":10,"
           "\"vocab\":{\"[UNK]\":0,\"hello\":1,\"##world\":2,\"he\":3,\"##llo\":4,\",\":5}}",
           NULL, "{\"type\":\"BertPreTokenizer\"}", NULL, "{\"type\":\"WordPiece\",\"prefix\":\"##\",\"cleanup\":true}", NULL);
    IDS(t, "helloworld, hexyz hellohellohello", 0, 1, 2, 5, 0, 0);
    DECODES(t, "helloworld, hello", 1, 2, 5, 3, 4);
    tokenizer_free(t);
    /* Unigram: Viterbi, unk = min score - 10, consecutive unks fused */
    t = mk("{\"type\":\"Unigram\",\"unk_id\":0,\"vocab\":[[\"<unk>\",0.0],[\"a\",-1.0],[\"b\",-2.0],[\"ab\",-1.5],[\"c\",-3.0],[\"bc\",-6.0]]}",
           NULL, NULL, NULL, NULL, NULL);
    IDS(t, "ab", 0, 3);
    IDS(t, "abc", 0, 3, 4);
    IDS(t, "xxab", 0, 0, 3);
    IDS(t, "abxc", 0, 3, 0, 4);
    tokenizer_free(t);
}

/* ---- post-processors and decoders -------------------------------------------------- */
static void test_post_and_decoders(void **s) {
    (void)s;
    const char *model = "{\"type\":\"WordLevel\",\"vocab\":{\"[UNK]\":0,\"[CLS]\":1,\"[SEP]\":2,\"hi\":3},\"unk_token\":\"[UNK]\"}";
    tokenizer_t *t = mk(model, NULL, "{\"type\":\"WhitespaceSplit\"}", "{\"type\":\"BertProcessing\",\"sep\":[\"[SEP]\",2],\"cls\":[\"[CLS]\",1]}", NULL, NULL);
    IDS(t, "hi hi", 1, 1, 3, 3, 2);
    IDS(t, "hi hi", 0, 3, 3);
    DECODES(t, "[CLS] hi [SEP]", 1, 3, 2); /* no decoder: tokens joined by spaces */
    tokenizer_free(t);
    t = mk(model, NULL, "{\"type\":\"WhitespaceSplit\"}",
           "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"[CLS]\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},"
           "{\"SpecialToken\":{\"id\":\"[SEP]\",\"type_id\":0}}],\"pair\":[],\"special_tokens\":{\"[CLS]\":{\"id\":\"[CLS]\",\"ids\":[1],\"tokens\":[\"[CLS]\"]},"
           "\"[SEP]\":{\"id\":\"[SEP]\",\"ids\":[2],\"tokens\":[\"[SEP]\"]}}}",
           NULL, NULL);
    IDS(t, "hi", 1, 1, 3, 2);
    IDS(t, "", 1, 1, 2);
    tokenizer_free(t);

    const char *v = "{\"type\":\"WordLevel\",\"unk_token\":\"u\",\"vocab\":{\"u\":0,\"\xe2\x96\x81Hey\":1,\"\xe2\x96\x81" "friend!\":2,"
                    "\"<0x61>\":3,\"<0xE4>\":4,\"<0xB8>\":5,\"<0xAD>\":6,\"x\":7,\" a\":8,\" b \":9,\"\xc4\x8a\":10,\"\xc3\xa2\xc4\xa2\":11}}";
    t = mk(v, NULL, NULL, NULL, "{\"type\":\"Metaspace\",\"replacement\":\"\xe2\x96\x81\",\"prepend_scheme\":\"always\",\"split\":true}", NULL);
    DECODES(t, "Hey friend!", 1, 2);
    DECODES(t, "friend! friend!", 2, 2); /* only the first token loses its ▁ */
    DECODES(t, "x friend!", 7, 2);
    tokenizer_free(t);
    t = mk(v, NULL, NULL, NULL, "{\"type\":\"Metaspace\",\"replacement\":\"\xe2\x96\x81\",\"prepend_scheme\":\"never\",\"split\":true}", NULL);
    DECODES(t, " Hey friend!", 1, 2);
    tokenizer_free(t);
    t = mk(v, NULL, NULL, NULL, "{\"type\":\"ByteFallback\"}", NULL);
    DECODES(t, "a\xe4\xb8\xadx\xef\xbf\xbdx", 3, 4, 5, 6, 7, 4, 7);
    DECODES(t, "\xef\xbf\xbd\xef\xbf\xbd", 4, 5); /* an invalid group: one U+FFFD per byte */
    tokenizer_free(t);
    t = mk(v, NULL, NULL, NULL, "{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":1}", NULL);
    DECODES(t, "ab", 8, 9);
    tokenizer_free(t);
    t = mk(v, NULL, NULL, NULL,
           "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"\xe2\x96\x81\"},\"content\":\" \"},"
           "{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]}", NULL);
    DECODES(t, "Hey friend!", 1, 2);
    tokenizer_free(t);
    t = mk(v, NULL, NULL, NULL, "{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":true,\"use_regex\":true}", NULL);
    DECODES(t, "\nx", 10, 7);
    DECODES(t, "x\xef\xbf\xbd", 7, 11); /* E2 80 is an incomplete sequence: one U+FFFD */
    tokenizer_free(t);
}

/* ---- malformed files --------------------------------------------------------------- */
static void expect_load_error(const char *json, const char *needle) {
    err_t e = {0};
    tokenizer_t *t = tokenizer_load_json(json, strlen(json), "bad.json", &e);
    if (t || !strstr(e.msg, needle)) fail_msg("want an error containing '%s', got '%s'", needle, t ? "(loaded)" : e.msg);
}

static void test_malformed(void **s) {
    (void)s;
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merg", "invalid JSON at line 1");
    expect_load_error("", "invalid JSON");
    expect_load_error("[1,2]", "not a JSON object");
    expect_load_error("{\"normalizer\": null}", "missing \"model\"");
    expect_load_error("{\"model\": {\"type\": \"Foo\", \"vocab\": {}}}", "unsupported model type \"Foo\"");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a x\"]}}", "model.merges[0]: token \"x\" is not in the vocab");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a a\"]}}", "merged token \"aa\" is not in the vocab");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"aa\": 1}, \"merges\": [\"a a a\"]}}", "exactly one space");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [[\"a\"]]}}", "model.merges[0]");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": \"zero\"}, \"merges\": []}}", "model.vocab[\"a\"]");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 99999999999}, \"merges\": []}}", "model.vocab[\"a\"]");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": [], \"merges\": []}}", "model.vocab: expected an object");
    expect_load_error("{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\"]]}}", "model.vocab[0]");
    expect_load_error("{\"model\": " WL_UNK ", \"normalizer\": {\"type\": \"Precompiled\"}}", "unsupported normalizer type \"Precompiled\"");
    expect_load_error("{\"model\": " WL_UNK ", \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFC\"}, {\"type\": \"X\"}]}}",
                      "normalizer.normalizers[1]");
    expect_load_error("{\"model\": " WL_UNK ", \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"String\": \"-\"}, \"behavior\": \"Sideways\"}}",
                      "pre_tokenizer.behavior");
    expect_load_error("{\"model\": " WL_UNK ", \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}}",
                      "pre_tokenizer.pattern: regex /(/");
    expect_load_error("{\"model\": " WL_UNK ", \"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"ab\"}}", "pre_tokenizer.replacement");
    expect_load_error("{\"model\": " WL_UNK ", \"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"_\", \"add_prefix_space\": false, \"prepend_scheme\": \"always\"}}",
                      "does not match");
    expect_load_error("{\"model\": " WL_UNK ", \"added_tokens\": [{\"id\": 1}]}", "added_tokens[0]");
    expect_load_error("{\"model\": " WL_UNK ", \"decoder\": {\"type\": \"Nope\"}}", "unsupported decoder type \"Nope\"");
    expect_load_error("{\"model\": " WL_UNK ", \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\"}}], \"special_tokens\": {}}}",
                      "no entry for \"<s>\"");
    expect_load_error("{\"model\": " WL_UNK ", \"pre_tokenizer\": 7}", "pre_tokenizer: expected an object");
    err_t e = {0};
    assert_null(tokenizer_load("/nonexistent/dir/tokenizer.json", &e));
    assert_non_null(strstr(e.msg, "/nonexistent/dir/tokenizer.json"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_behaviors), cmocka_unit_test(test_digits_punct_whitespace),
        cmocka_unit_test(test_metaspace_bytelevel), cmocka_unit_test(test_normalizers),
        cmocka_unit_test(test_added_tokens), cmocka_unit_test(test_models),
        cmocka_unit_test(test_post_and_decoders), cmocka_unit_test(test_malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
