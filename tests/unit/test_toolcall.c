/* test_toolcall.c — the streaming tool-call parsers (src/server/toolcall*.c).
 *
 * Each case is a model reply in one family's native markup and what the API must report:
 * the content text and the calls (name, arguments as JSON). Every case is fed whole, one
 * byte at a time, and in 300 random splits; all must give the same result, and the
 * arguments fragments must concatenate to valid JSON equal to the expected object. */
#include "../common/test_util.h"
#include "base/sbuf.h"
#include "server/toolcall.h"

typedef struct {
    sbuf_t content;
    int n;
    char names[8][64];
    sbuf_t args[8];
    int begun[8], ended[8];
    int order_bad;
} coll_t;

static void c_text(void *u, const char *s, size_t n) { sbuf_add(&((coll_t *)u)->content, s, n); }
static void c_begin(void *u, int i, const char *name) {
    coll_t *c = u;
    if (i != c->n || i >= 8) { c->order_bad = 1; return; }
    snprintf(c->names[i], 64, "%s", name);
    c->begun[i] = 1;
    c->n++;
}
static void c_args(void *u, int i, const char *s, size_t n) {
    coll_t *c = u;
    if (i < 0 || i >= c->n || c->ended[i]) { c->order_bad = 1; return; }
    sbuf_add(&c->args[i], s, n);
}
static void c_end(void *u, int i) {
    coll_t *c = u;
    if (i < 0 || i >= c->n || c->ended[i]) { c->order_bad = 1; return; }
    c->ended[i] = 1;
}

static void coll_free(coll_t *c) {
    sbuf_free(&c->content);
    for (int i = 0; i < 8; i++) sbuf_free(&c->args[i]);
}

typedef struct {
    tc_format_t fmt;
    const char *reply;
    const char *content;
    int n_calls;
    const char *names[3];
    const char *args[3];
} tcase_t;

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }

/* mode 0: whole, 1: byte by byte, 2: random chunks */
static void run_case(const tcase_t *tc, json_t *tools, int mode) {
    coll_t c = {0};
    tc_sink_t k = {&c, c_text, c_begin, c_args, c_end};
    tc_parser_t *p = tc_parser_new(tc->fmt, tools);
    assert_non_null(p);
    size_t n = strlen(tc->reply), i = 0;
    while (i < n) {
        size_t step = mode == 0 ? n : mode == 1 ? 1 : 1 + next() % 7;
        if (step > n - i) step = n - i;
        tc_push(p, tc->reply + i, step, &k);
        i += step;
    }
    tc_finish(p, &k);
    assert_false(c.order_bad);
    if (strcmp(c.content.p ? c.content.p : "", tc->content))
        fail_msg("%s mode %d: content '%s', expected '%s' (reply: %s)", tc_format_name(tc->fmt), mode,
                 c.content.p ? c.content.p : "", tc->content, tc->reply);
    if (c.n != tc->n_calls) fail_msg("%s mode %d: %d calls, expected %d (reply: %s)", tc_format_name(tc->fmt), mode, c.n, tc->n_calls, tc->reply);
    for (int j = 0; j < c.n; j++) {
        assert_string_equal(c.names[j], tc->names[j]);
        assert_true(c.ended[j]);
        json_error_t je;
        json_t *got = json_loads(c.args[j].p ? c.args[j].p : "", 0, &je);
        json_t *want = json_loads(tc->args[j], 0, &je);
        assert_non_null(want);
        if (!got || !json_equal(got, want))
            fail_msg("%s mode %d call %d: arguments '%s', expected %s", tc_format_name(tc->fmt), mode, j,
                     c.args[j].p ? c.args[j].p : "", tc->args[j]);
        json_decref(got);
        json_decref(want);
    }
    tc_parser_free(p);
    coll_free(&c);
}

static void run_all(const tcase_t *cases, size_t n, json_t *tools) {
    for (size_t i = 0; i < n; i++) {
        run_case(&cases[i], tools, 0);
        run_case(&cases[i], tools, 1);
        for (int r = 0; r < 300; r++) run_case(&cases[i], tools, 2);
    }
}

static void test_hermes(void **st) {
    static const tcase_t cases[] = {
        {TC_HERMES, "Hello there.", "Hello there.", 0, {0}, {0}},
        {TC_HERMES, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>",
         "", 1, {"get_weather"}, {"{\"city\": \"Paris\", \"days\": 3}"}},
        {TC_HERMES, "Let me check.\n\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": \"}{<tool_call>\\\"\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>",
         "Let me check.", 2, {"a", "b"}, {"{\"x\": \"}{<tool_call>\\\"\"}", "{}"}},
        /* arguments before name: buffered and parsed whole */
        {TC_HERMES, "<tool_call>{\"arguments\": {\"q\": [1, 2]}, \"name\": \"search\"}</tool_call>", "", 1, {"search"}, {"{\"q\": [1, 2]}"}},
        /* not a call: given back as text */
        {TC_HERMES, "x <tool_call>not json</tool_call> y", "x <tool_call>not json</tool_call> y", 0, {0}, {0}},
        /* a lone '<' and a partial marker at the end are text */
        {TC_HERMES, "a < b <tool_", "a < b <tool_", 0, {0}, {0}},
        /* cut off inside the arguments: the call is closed with what arrived */
        {TC_HERMES, "<tool_call>{\"name\": \"f\", \"arguments\": {\"k\": 1}", "", 1, {"f"}, {"{\"k\": 1}"}},
        {TC_HERMES, "<tool_call>{\"name\": \"f\", \"parameters\": {\"k\": \"v\"}}</tool_call>", "", 1, {"f"}, {"{\"k\": \"v\"}"}},
        {TC_HERMES, "é ünïcode ✓ <tool_call>{\"name\":\"f\",\"arguments\":{\"s\":\"日本\"}}</tool_call>", "é ünïcode ✓", 1, {"f"}, {"{\"s\":\"日本\"}"}},
        /* fuzz_toolcall: the closing marker inside the name string does not end a head that has
         * not fully arrived (it did when the reply came in pieces, not when whole) */
        {TC_HERMES, "<tool_call>\n{\"name\": \"f</tool_call>\", \"arguments\": {\"a\": 1}}\n</tool_call>", "", 1, {"f</tool_call>"}, {"{\"a\": 1}"}},
    };
    run_all(cases, sizeof cases / sizeof cases[0], NULL);
}

#define X10 "xxxxxxxxxx"
#define LONG300 X10 X10 X10 X10 X10 X10 X10 X10 X10 X10 X10 X10 X10 X10 X10 X10 X10 X10 X10 X10 X10 X10 X10 X10 X10 X10 X10 X10 X10 X10
static void test_qwen_xml(void **st) {
    json_error_t je;
    json_t *tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
                               "\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},\"opts\":{\"type\":\"object\"}}}}}]",
                               0, &je);
    static const tcase_t cases[] = {
        {TC_QWEN_XML, "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
         "", 1, {"get_weather"}, {"{\"city\": \"Paris\", \"days\": 3}"}},
        {TC_QWEN_XML, "Sure.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew \"York\"\n\nline2\n</parameter>\n<parameter=opts>\n{\"a\": [1]}\n</parameter>\n</function>\n</tool_call>",
         "Sure.", 1, {"get_weather"}, {"{\"city\": \"New \\\"York\\\"\\n\\nline2\", \"opts\": {\"a\": [1]}}"}},
        /* unknown tool: every parameter is a string; two calls */
        {TC_QWEN_XML, "<tool_call>\n<function=f>\n<parameter=n>\n42\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=g>\n</function>\n</tool_call>",
         "", 2, {"f", "g"}, {"{\"n\": \"42\"}", "{}"}},
        /* integer parameter that is not JSON: kept as a string */
        {TC_QWEN_XML, "<tool_call><function=get_weather><parameter=days>three</parameter></function></tool_call>", "", 1, {"get_weather"}, {"{\"days\": \"three\"}"}},
        {TC_QWEN_XML, "<tool_call>oops</tool_call>", "<tool_call>oops</tool_call>", 0, {0}, {0}},
        {TC_QWEN_XML, "plain < text", "plain < text", 0, {0}, {0}},
        /* found by fuzz_toolcall (the three once differed between whole and split replies): a
         * <tool_call> that is not a call gives back only itself, so a real call after it is seen */
        {TC_QWEN_XML, "<tool_call> oops <tool_call>\n<function=f>\n</function>\n</tool_call>", "<tool_call> oops", 1, {"f"}, {"{}"}},
        /* text between </function> and a later </tool_call> is text, not swallowed */
        {TC_QWEN_XML, "<tool_call><function=f></function> note </tool_call>", " note </tool_call>", 1, {"f"}, {"{}"}},
        /* a name is at most 256 bytes, however the reply is split */
        {TC_QWEN_XML, "<tool_call><function=" LONG300 "></function></tool_call>", "<tool_call><function=" LONG300 "></function></tool_call>", 0, {0}, {0}},
    };
    run_all(cases, sizeof cases / sizeof cases[0], tools);
    json_decref(tools);
}

static void test_llama(void **st) {
    static const tcase_t cases[] = {
        {TC_LLAMA_JSON, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "", 1, {"get_weather"}, {"{\"city\": \"Paris\"}"}},
        {TC_LLAMA_JSON, "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"x\": \"{}\"}}; {\"name\": \"b\", \"arguments\": {}}", "", 2, {"a", "b"}, {"{\"x\": \"{}\"}", "{}"}},
        {TC_LLAMA_JSON, "The answer is {not a call}.", "The answer is {not a call}.", 0, {0}, {0}},
        {TC_LLAMA_JSON, "{\"answer\": 42}", "{\"answer\": 42}", 0, {0}, {0}},
        {TC_LLAMA_JSON, "  {\"name\": \"f\", \"parameters\": {\"k\"", "  {\"name\": \"f\", \"parameters\": {\"k\"", 0, {0}, {0}},
    };
    run_all(cases, sizeof cases / sizeof cases[0], NULL);
}

static void test_gemma4(void **st) {
    static const tcase_t cases[] = {
        {TC_GEMMA4, "<|tool_call>call:get_weather{city:<|\"|>Paris, France<|\"|>,days:3}<tool_call|>", "", 1, {"get_weather"}, {"{\"city\": \"Paris, France\", \"days\": 3}"}},
        {TC_GEMMA4, "Checking.<|tool_call>call:f{a:{b:[1,<|\"|>x{y}<|\"|>,true]},c:null}<tool_call|><|tool_call>call:g{}<tool_call|>", "Checking.", 2, {"f", "g"},
         {"{\"a\": {\"b\": [1, \"x{y}\", true]}, \"c\": null}", "{}"}},
        {TC_GEMMA4, "<|tool_call>garbage<tool_call|>", "<|tool_call>garbage<tool_call|>", 0, {0}, {0}},
        {TC_GEMMA4, "no calls here", "no calls here", 0, {0}, {0}},
    };
    run_all(cases, sizeof cases / sizeof cases[0], NULL);
}

static int has_tok(void *u, const char *t) { return !strcmp((const char *)u, t); }

static void test_detect(void **st) {
    assert_int_equal(tc_detect("{{ '<tool_call>' }}", NULL, NULL), TC_HERMES);
    assert_int_equal(tc_detect("<tool_call>\n<function={{ n }}>\n<parameter={{ k }}>", NULL, NULL), TC_QWEN_XML);
    assert_int_equal(tc_detect("plain", has_tok, "<|tool_call>"), TC_GEMMA4);
    assert_int_equal(tc_detect("{{ 'ipython' }}", NULL, NULL), TC_LLAMA_JSON);
    assert_int_equal(tc_format_parse("qwen-xml"), TC_QWEN_XML);
    assert_int_equal(tc_format_parse("nope"), -1);
    assert_null(tc_parser_new(TC_NONE, NULL));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hermes), cmocka_unit_test(test_qwen_xml), cmocka_unit_test(test_llama),
        cmocka_unit_test(test_gemma4), cmocka_unit_test(test_detect),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
