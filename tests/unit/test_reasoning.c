/* test_reasoning.c — the streaming reasoning splitter (src/server/reasoning.c), for <think>
 * and for Gemma 4's thought channel: replies with and without a block, prompts that open
 * the block, markers split across tokens, a reply cut off while thinking. Each fed whole,
 * byte by byte and in random splits. */
#include "../common/test_util.h"
#include "server/reasoning.h"

typedef struct { sbuf_t r, c; } out_t;
static void on_r(void *u, const char *s, size_t n) { sbuf_add(&((out_t *)u)->r, s, n); }
static void on_c(void *u, const char *s, size_t n) { sbuf_add(&((out_t *)u)->c, s, n); }

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }

static void check_m(const rs_markers_t *m, const char *reply, int inside, const char *want_r, const char *want_c) {
    for (int mode = 0; mode < 202; mode++) {
        out_t o = {{0}, {0}};
        rs_sink_t k = {&o, on_r, on_c};
        reasoning_split_t rs;
        rs_init(&rs, m, inside);
        size_t n = strlen(reply), i = 0;
        while (i < n) {
            size_t step = mode == 0 ? n : mode == 1 ? 1 : 1 + next() % 5;
            if (step > n - i) step = n - i;
            rs_push(&rs, reply + i, step, &k);
            i += step;
        }
        rs_finish(&rs, &k);
        const char *gr = o.r.p ? o.r.p : "", *gc = o.c.p ? o.c.p : "";
        if (strcmp(gr, want_r) || strcmp(gc, want_c))
            fail_msg("mode %d reply '%s': reasoning '%s' content '%s', expected '%s' / '%s'", mode, reply, gr, gc, want_r, want_c);
        rs_free(&rs);
        sbuf_free(&o.r);
        sbuf_free(&o.c);
    }
}

static void check(const char *reply, int inside, const char *want_r, const char *want_c) { check_m(&RS_THINK, reply, inside, want_r, want_c); }

static void test_split(void **st) {
    check("<think>\nLet me think.\n</think>\n\nThe answer is 4.", 0, "\nLet me think.\n", "The answer is 4.");
    check("\n<think>a</think>b", 0, "a", "b");
    check("No thinking here.", 0, "", "No thinking here.");
    check("  <thin", 0, "", "  <thin");               /* a partial marker at the end is content */
    check("x <think>y</think>", 0, "", "x <think>y</think>"); /* a marker inside the answer is content */
    check("I am already thinking</think>Answer", 1, "I am already thinking", "Answer");
    check("cut off while thinking <", 1, "cut off while thinking <", "");
    check("<think></think>\n\n", 0, "", "");
    check("é</thi", 1, "é</thi", "");
}

/* Gemma 4: "<|channel>" and "<channel|>" are special tokens the server feeds back as text;
 * "thought" and the newline after it are ordinary tokens and part of the opening. */
static void test_gemma4(void **st) {
    const rs_markers_t *g = &RS_GEMMA4;
    check_m(g, "<|channel>thought\nThe user wants 2+2.\n<channel|>The answer is 4.", 0, "The user wants 2+2.\n", "The answer is 4.");
    check_m(g, "<|channel>thought\n<channel|>Hello.", 0, "", "Hello.");          /* an empty thought */
    check_m(g, "Just an answer.", 0, "", "Just an answer.");
    check_m(g, "<|channel>thou", 0, "", "<|channel>thou");                     /* cut inside the opening */
    check_m(g, "<|channel>final\nHi", 0, "", "<|channel>final\nHi");          /* not the thought channel */
    check_m(g, "Hi <|channel>thought\nx<channel|>", 0, "", "Hi <|channel>thought\nx<channel|>");
    check_m(g, "still thinking<channel|>\n\nDone.", 1, "still thinking", "Done."); /* prompt opened it */
    check_m(g, "\n\nreasoning only", 1, "reasoning only", "");              /* cut off while thinking */
    check_m(g, "<|channel>thought\nno end <chan", 0, "no end <chan", "");
    /* <think> means nothing to Gemma, and the channel means nothing to <think> models */
    check_m(g, "<think>a</think>b", 0, "", "<think>a</think>b");
    check("<|channel>thought\na<channel|>b", 0, "", "<|channel>thought\na<channel|>b");
}

static void test_prompt_opens(void **st) {
    assert_true(rs_prompt_opens("<|im_start|>assistant\n<think>\n", &RS_THINK));
    assert_false(rs_prompt_opens("<|im_start|>assistant\n<think>\n\n</think>\n\n", &RS_THINK));
    assert_false(rs_prompt_opens("<|im_start|>assistant\n", &RS_THINK));
    assert_false(rs_prompt_opens("", &RS_THINK));
    /* Gemma 4 with thinking on can be primed with an open thought channel; with it off, the
     * template writes an empty one */
    assert_true(rs_prompt_opens("<|turn>model\n<|channel>thought\n", &RS_GEMMA4));
    assert_true(rs_prompt_opens("<|turn>model\n<|channel>thought", &RS_GEMMA4));
    assert_false(rs_prompt_opens("<|turn>model\n<|channel>thought\n<channel|>", &RS_GEMMA4));
    assert_false(rs_prompt_opens("<|turn>model\n", &RS_GEMMA4));
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_split), cmocka_unit_test(test_gemma4), cmocka_unit_test(test_prompt_opens)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
