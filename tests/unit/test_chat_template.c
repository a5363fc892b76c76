/* test_chat_template.c — the real chat templates of Qwen3, Gemma 3 and Llama 3, rendered
 * against the transformers fixtures in tests/fixtures/tokenizers/<name>/chat.json: every
 * `rendered` must match byte for byte and every `error` must come back as our error text.
 * The tokenizer_config.json files are fetched by scripts/test-setup.d/tokenizers.sh into
 * tests/.cache/tokenizers/<name>/; a missing cache skips the fixture test instead of failing.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "base/file.h"
#include "chat/chat_template.h"

#ifndef KILN_SOURCE_DIR
#define KILN_SOURCE_DIR "."
#endif

static void run_fixture(const char *name) {
    char dir[512], fixture[512];
    snprintf(dir, sizeof dir, "%s/tests/.cache/tokenizers/%s", KILN_SOURCE_DIR, name);
    snprintf(fixture, sizeof fixture, "%s/tests/fixtures/tokenizers/%s/chat.json", KILN_SOURCE_DIR, name);
    char cfg[600];
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
    if (!file_exists(cfg)) {
        print_message("skipping %s: %s missing (run scripts/test-setup.sh)\n", name, cfg);
        skip();
    }
    err_t e = {{0}};
    chat_template_t *ct = chat_template_load(dir, &e);
    if (!ct) fail_msg("load %s: %s", name, e.msg);
    json_error_t je;
    json_t *cases = json_load_file(fixture, 0, &je);
    assert_non_null(cases);
    assert_true(json_array_size(cases) > 0);
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        const json_t *input = json_object_get(c, "input");
        const json_t *want = json_object_get(c, "rendered");
        const json_t *want_err = json_object_get(c, "error");
        char *out = NULL;
        size_t n = 0;
        int rc = chat_template_render(ct, input, &out, &n, &e);
        if (want) {
            if (rc) fail_msg("%s case %zu: unexpected error: %s", name, i, e.msg);
            size_t wn = json_string_length(want);
            if (n != wn || memcmp(out, json_string_value(want), n))
                fail_msg("%s case %zu: rendered differs\n--- got ---\n%s\n--- want ---\n%s", name, i, out,
                         json_string_value(want));
        } else {
            assert_non_null(want_err);
            if (!rc) fail_msg("%s case %zu: expected error '%s', rendered:\n%s", name, i, json_string_value(want_err), out);
            /* the fixture says "TemplateError: <message>"; ours carries the same words */
            if (!strstr(e.msg, json_string_value(want_err)))
                fail_msg("%s case %zu: error '%s' does not contain '%s'", name, i, e.msg, json_string_value(want_err));
            assert_non_null(strstr(e.msg, "line "));
        }
        free(out);
    }
    json_decref(cases);
    chat_template_free(ct);
}

static void test_qwen3(void **s) { (void)s; run_fixture("qwen3"); }
static void test_gemma3(void **s) { (void)s; run_fixture("gemma3"); }
static void test_llama3(void **s) { (void)s; run_fixture("llama3"); }

/* A scratch model directory under /tmp with the given files. */
static void make_dir(char *dir, size_t cap, const char *config, const char *jinja) {
    snprintf(dir, cap, "/tmp/kiln-chat-test-XXXXXX");
    assert_non_null(mkdtemp(dir));
    char path[600];
    err_t e;
    if (config) {
        snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
        assert_int_equal(file_write_atomic(path, config, strlen(config), &e), 0);
    }
    if (jinja) {
        snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
        assert_int_equal(file_write_atomic(path, jinja, strlen(jinja), &e), 0);
    }
}

static void rm_dir(const char *dir) {
    char path[600];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    unlink(path);
    rmdir(dir);
}

static char *render(chat_template_t *ct, const char *input_json, err_t *e) {
    json_t *in = json_loads(input_json, 0, NULL);
    assert_non_null(in);
    char *out = NULL;
    size_t n;
    int rc = chat_template_render(ct, in, &out, &n, e);
    json_decref(in);
    if (rc) return NULL;
    assert_int_equal(strlen(out), n);
    return out;
}

static void test_named_templates_and_tokens(void **s) {
    (void)s;
    char dir[64];
    make_dir(dir, sizeof dir,
             "{\"bos_token\": {\"content\": \"<s>\", \"lstrip\": false}, \"eos_token\": \"</s>\", "
             "\"model_max_length\": 1000000000000000019884624838656, "
             "\"chat_template\": [{\"name\": \"default\", \"template\": \"D{{ bos_token }}{{ messages|length }}\"}, "
             "{\"name\": \"tool_use\", \"template\": \"T{{ tools|length }}{{ eos_token }}\"}]}",
             NULL);
    err_t e;
    chat_template_t *ct = chat_template_load(dir, &e);
    if (!ct) fail_msg("%s", e.msg);
    assert_string_equal(chat_template_bos(ct), "<s>");
    assert_string_equal(chat_template_eos(ct), "</s>");
    assert_int_equal(json_array_size(chat_template_names(ct)), 2);
    char *out = render(ct, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", &e);
    assert_string_equal(out, "D<s>1");
    free(out);
    /* input kwargs override the special tokens, as in transformers */
    out = render(ct, "{\"messages\": [], \"bos_token\": \"B\"}", &e);
    assert_string_equal(out, "DB0");
    free(out);
    chat_template_free(ct);
    ct = chat_template_load_named(dir, "tool_use", &e);
    if (!ct) fail_msg("%s", e.msg);
    out = render(ct, "{\"messages\": [], \"tools\": [{}, {}]}", &e);
    assert_string_equal(out, "T2</s>");
    free(out);
    /* tools absent: None, whose length is an error in jinja2 too */
    assert_null(render(ct, "{\"messages\": []}", &e));
    assert_non_null(strstr(e.msg, "NoneType"));
    chat_template_free(ct);
    assert_null(chat_template_load_named(dir, "nope", &e));
    assert_non_null(strstr(e.msg, "nope"));
    rm_dir(dir);
}

static void test_jinja_file_wins(void **s) {
    (void)s;
    char dir[64];
    make_dir(dir, sizeof dir, "{\"chat_template\": \"config\", \"eos_token\": \"E\"}", "file{{ eos_token }}\n");
    err_t e;
    chat_template_t *ct = chat_template_load(dir, &e);
    if (!ct) fail_msg("%s", e.msg);
    char *out = render(ct, "{\"messages\": []}", &e);
    assert_string_equal(out, "fileE");  /* trailing newline dropped: keep_trailing_newline=False */
    free(out);
    chat_template_free(ct);
    rm_dir(dir);
}

static void test_load_errors(void **s) {
    (void)s;
    char dir[64];
    err_t e;
    assert_null(chat_template_load("/nonexistent/model", &e));
    assert_non_null(strstr(e.msg, "/nonexistent/model"));
    make_dir(dir, sizeof dir, "{\"eos_token\": \"E\"}", NULL);
    assert_null(chat_template_load(dir, &e));
    assert_non_null(strstr(e.msg, "no chat template"));
    rm_dir(dir);
    make_dir(dir, sizeof dir, "{\"chat_template\": \"{% for x in y %}\"}", NULL);
    assert_null(chat_template_load(dir, &e));
    assert_non_null(strstr(e.msg, "tokenizer_config.json"));
    assert_non_null(strstr(e.msg, "line 1"));
    assert_non_null(strstr(e.msg, "endfor"));
    rm_dir(dir);
    make_dir(dir, sizeof dir, "{\"chat_template\": 5}", NULL);
    assert_null(chat_template_load(dir, &e));
    assert_non_null(strstr(e.msg, "chat_template must be"));
    rm_dir(dir);
    make_dir(dir, sizeof dir, "{not json", NULL);
    assert_null(chat_template_load(dir, &e));
    assert_non_null(strstr(e.msg, "tokenizer_config.json"));
    rm_dir(dir);
}

static void test_render_input_errors(void **s) {
    (void)s;
    err_t e;
    chat_template_t *ct = chat_template_from_string("{{ messages[0].content }}", NULL, NULL, &e);
    assert_non_null(ct);
    assert_null(render(ct, "{}", &e));
    assert_non_null(strstr(e.msg, "messages"));
    assert_null(render(ct, "{\"messages\": [1]}", &e));
    assert_non_null(strstr(e.msg, "messages[0]"));
    assert_null(render(ct, "[]", &e));
    chat_template_free(ct);
}

static void test_raise_names_line(void **s) {
    (void)s;
    err_t e;
    chat_template_t *ct = chat_template_from_string("a\n{% if messages|length == 0 %}\n  {{ raise_exception('empty!') }}\n{% endif %}", NULL, NULL, &e);
    assert_non_null(ct);
    assert_null(render(ct, "{\"messages\": []}", &e));
    assert_non_null(strstr(e.msg, "TemplateError: empty!"));
    assert_non_null(strstr(e.msg, "line 3"));
    chat_template_free(ct);
}

static void test_continue_final_message(void **s) {
    (void)s;
    err_t e;
    chat_template_t *ct = chat_template_from_string(
        "{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}</{{ m.role }}>\n{% endfor %}", NULL, NULL, &e);
    assert_non_null(ct);
    char *out = render(ct, "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", "
                           "\"content\": \"The answer is \"}], \"continue_final_message\": true}", &e);
    assert_non_null(out);
    /* the trailing space was trimmed by the template, so the cut is after the stripped text */
    assert_string_equal(out, "<user>Hi</user>\n<assistant>The answer is");
    free(out);
    out = render(ct, "{\"messages\": [{\"role\": \"assistant\", \"content\": \"Sure\"}], \"continue_final_message\": true}", &e);
    assert_string_equal(out, "<assistant>Sure");
    free(out);
    assert_null(render(ct, "{\"messages\": [{\"role\": \"assistant\", \"content\": \"x\"}], \"continue_final_message\": true, "
                           "\"add_generation_prompt\": true}", &e));
    assert_non_null(strstr(e.msg, "not compatible"));
    chat_template_free(ct);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen3),
        cmocka_unit_test(test_gemma3),
        cmocka_unit_test(test_llama3),
        cmocka_unit_test(test_named_templates_and_tokens),
        cmocka_unit_test(test_jinja_file_wins),
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_render_input_errors),
        cmocka_unit_test(test_raise_names_line),
        cmocka_unit_test(test_continue_final_message),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
