/* test_jinja.c — errors, limits and API behaviour of the Jinja interpreter.
 *
 * The language itself is covered row by row against jinja2 in test_jinja_oracle.c; this file
 * checks what an oracle cannot: that syntax errors name the line and column, that runtime
 * errors are clean, that hostile templates trip the limits instead of hanging or crashing,
 * that renders are thread-safe, and that inputs found by the fuzzers stay fixed.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "chat/jinja.h"

/* Renders src with vars (JSON text, may be NULL); returns the output or NULL with e set. */
static char *render_lim(const char *src, const char *vars, const jinja_options_t *opt, const jinja_limits_t *lim,
                        err_t *e) {
    jinja_template_t *t = jinja_parse(src, strlen(src), e);
    if (!t) return NULL;
    json_t *v = vars ? json_loads(vars, JSON_ALLOW_NUL, NULL) : json_object();
    assert_non_null(v);
    char *out = NULL;
    size_t n;
    int rc = jinja_render(t, v, opt, lim, &out, &n, e);
    json_decref(v);
    jinja_free(t);
    if (rc) return NULL;
    return out;
}

static char *render(const char *src, const char *vars, err_t *e) { return render_lim(src, vars, NULL, NULL, e); }

static void expect_out(const char *src, const char *vars, const char *want) {
    err_t e = {{0}};
    char *out = render(src, vars, &e);
    if (!out) fail_msg("template %s: %s", src, e.msg);
    if (strcmp(out, want)) fail_msg("template %s: got [%s], want [%s]", src, out, want);
    free(out);
}

/* The error must contain every one of the NULL-terminated fragments. */
static void expect_err(const char *src, const char *vars, ...) {
    err_t e = {{0}};
    char *out = render(src, vars, &e);
    if (out) fail_msg("template %s: expected an error, rendered [%s]", src, out);
    va_list ap;
    va_start(ap, vars);
    const char *frag;
    while ((frag = va_arg(ap, const char *)))
        if (!strstr(e.msg, frag)) fail_msg("template %s: error [%s] lacks [%s]", src, e.msg, frag);
    va_end(ap);
}

static void test_syntax_errors_name_the_place(void **s) {
    (void)s;
    expect_err("line one\n{% if x %}\nunclosed", NULL, "line 3", "TemplateSyntaxError", "Unexpected end of template",
               "endif", NULL);
    expect_err("a\nb {{ 1 + }}", NULL, "line 2, column 10", "unexpected 'end of print statement'", NULL);
    expect_err("{% frobnicate %}", NULL, "line 1, column 4", "Encountered unknown tag 'frobnicate'", NULL);
    expect_err("{% for x in y %}{% endif %}", NULL, "unknown tag 'endif'", "endfor", NULL);
    expect_err("{# never closed", NULL, "line 1, column 1", "Missing end of comment tag", NULL);
    expect_err("{% raw %}abc", NULL, "Missing end of raw directive", NULL);
    expect_err("x\n\n   {{ 'abc }}", NULL, "line 3, column 7", "unexpected char", NULL);
    expect_err("{{ (1, 2 }}", NULL, "unexpected '}', expected ')'", NULL);
    expect_err("{{ x|nosuchfilter }}", NULL, "No filter named 'nosuchfilter'", NULL);
    expect_err("{{ x is nosuchtest }}", NULL, "No test named 'nosuchtest'", NULL);
    expect_err("{% break %}", NULL, "'break' outside of a loop", NULL);
    expect_err("{% set 1 = 2 %}", NULL, "can't assign", NULL);
    expect_err("{% macro m(a=1, b) %}{% endmacro %}", NULL, "non-default argument follows default argument", NULL);
    expect_err("{% include 'x' %}", NULL, "not supported", NULL);
    expect_err("{{ 99999999999999999999999 }}", NULL, "integer literal too large", NULL);
    expect_err("{{ '\\xZZ' }}", NULL, "truncated \\xXX escape", NULL);
    err_t e;
    assert_null(jinja_parse("ab\xff", 3, &e));
    assert_non_null(strstr(e.msg, "UTF-8"));
    assert_null(jinja_parse("ab\xc0\x80", 4, &e));  /* overlong encoding */
}

static void test_runtime_errors_are_clean(void **s) {
    (void)s;
    expect_err("\n{{ 'abc'() }}", NULL, "line 2", "TypeError", "'str' object is not callable", NULL);
    expect_err("{{ [1]|batch('x') }}", NULL, "TypeError", "linecount", NULL);
    expect_err("{{ 'a'|indent(width={}) }}", NULL, "TypeError", NULL);
    expect_err("{{ 'a'|replace('a') }}", NULL, "TypeError", NULL);
    expect_err("{{ 'x'|upper(5) }}", NULL, "TypeError", NULL);
    expect_err("{{ 'x'|tojson(indent=1000) }}", NULL, "too large", NULL);
    expect_err("{{ x.y }}", NULL, "UndefinedError", "'x' is undefined", NULL);
    expect_err("{{ d.a.b }}", "{\"d\": {}}", "UndefinedError", "'dict object' has no attribute 'a'", NULL);
    expect_err("{% set ns = 5 %}{% set ns.a = 1 %}", NULL, "non-namespace", NULL);
    expect_err("{{ [].append(1) }}", NULL, "SecurityError", "unsafe", NULL);
    expect_err("{{ {}.update({}) }}", NULL, "SecurityError", NULL);
    expect_err("{{ 1 // 0 }}", NULL, "ZeroDivisionError", NULL);
    expect_err("{{ 9223372036854775807 + 1 }}", NULL, "OverflowError", NULL);
    expect_err("{{ 'a' * 'b' }}", NULL, "TypeError", NULL);
    expect_err("{{ {'a': 1}|tojson|tojson|x }}", NULL, "No filter named 'x'", NULL);
    expect_err("{{ {[1]: 2} }}", NULL, "unhashable type: 'list'", NULL);
    expect_err("{% for a, b in [1] %}{% endfor %}", NULL, "TypeError", NULL);
    expect_err("{% for a, b in [[1, 2, 3]] %}{% endfor %}", NULL, "too many values to unpack", NULL);
    expect_err("{{ raise_exception() }}", NULL, "TypeError", NULL);
    expect_err("{{ range(1, 2, 0) }}", NULL, "ValueError", NULL);
    expect_err("{{ '%d' % 'x' }}", NULL, "TypeError", NULL);
    /* a NUL byte is no conversion and no flag (strchr finds the terminator: it was taken for
     * %f with a format that ended early — fuzz_jinja_render, session 13) */
    expect_err("{{ f % 1.5 }}", "{\"f\": \"%\\u0000\"}", "ValueError", "unsupported format character (0x0)", NULL);
    expect_err("{{ f % 1.5 }}", "{\"f\": \"%\\u00003.5f\"}", "ValueError", "unsupported format character (0x0)", NULL);
    expect_err("{{ '{0}'.format() }}", NULL, "IndexError", NULL);
    expect_err("{{ loop() }}", NULL, "UndefinedError", NULL);
    expect_err("{% for x in [1] %}{{ loop([1]) }}{% endfor %}", NULL, "recursive", NULL);
}

static void test_limits_trip_cleanly(void **s) {
    (void)s;
    /* unbounded recursion */
    expect_err("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, "LimitError", "recursion", NULL);
    /* a loop that would take minutes */
    expect_err("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}", NULL, "LimitError",
               "steps", NULL);
    expect_err("{% for a in range(100000) %}{% for b in range(100000) %}{{ b }}{% endfor %}{% endfor %}", NULL,
               "LimitError", NULL);
    /* memory: doubling a string */
    expect_err("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", NULL,
               "LimitError", NULL);
    expect_err("{{ 'x' * 100000000000 }}", NULL, "LimitError", NULL);
    expect_err("{{ range(10000000) }}", NULL, "Range too big", NULL);
    /* output size */
    jinja_limits_t lim;
    jinja_limits_default(&lim);
    lim.max_output = 1000;
    err_t e;
    assert_null(render_lim("{% for i in range(2000) %}x{% endfor %}", NULL, NULL, &lim, &e));
    assert_non_null(strstr(e.msg, "output exceeds 1000 bytes"));
    char *ok = render_lim("{% for i in range(1000) %}x{% endfor %}", NULL, NULL, &lim, &e);
    assert_non_null(ok);
    free(ok);
    lim.max_steps = 50;
    assert_null(render_lim("{% for i in range(100) %}{% endfor %}", NULL, NULL, &lim, &e));
    /* deep nesting in the source is refused by the parser, not by the C stack */
    size_t depth = 100000;
    char *deep = malloc(depth * 2 + 16);
    size_t k = 0;
    k += (size_t)sprintf(deep, "{{ ");
    for (size_t i = 0; i < depth; i++) deep[k++] = '(';
    deep[k++] = '1';
    for (size_t i = 0; i < depth; i++) deep[k++] = ')';
    strcpy(deep + k, " }}");
    assert_null(jinja_parse(deep, strlen(deep), &e));
    if (!strstr(e.msg, "nested too deeply")) fail_msg("%s", e.msg);
    k = 0;
    for (size_t i = 0; i < 5000; i++) k += (size_t)sprintf(deep + k, "{%% if 1 %%}");
    assert_null(jinja_parse(deep, k, &e));
    if (!strstr(e.msg, "nested too deeply")) fail_msg("%s", e.msg);
    k = (size_t)sprintf(deep, "{{ ");
    for (size_t i = 0; i < 20000; i++) k += (size_t)sprintf(deep + k, "not ");
    k += (size_t)sprintf(deep + k, "1 }}");
    assert_null(jinja_parse(deep, k, &e));
    k = (size_t)sprintf(deep, "{{ 1");
    for (size_t i = 0; i < 20000; i++) k += (size_t)sprintf(deep + k, "|abs");
    k += (size_t)sprintf(deep + k, " }}");
    jinja_template_t *t = jinja_parse(deep, k, &e);  /* a long flat chain is fine */
    assert_non_null(t);
    char *out;
    size_t n;
    assert_int_equal(jinja_render(t, NULL, NULL, NULL, &out, &n, &e), -1);  /* but evaluation depth is capped */
    assert_non_null(strstr(e.msg, "recursion"));
    jinja_free(t);
    /* deeply nested input JSON */
    k = 0;
    for (size_t i = 0; i < 1000; i++) deep[k++] = '[';
    for (size_t i = 0; i < 1000; i++) deep[k++] = ']';
    deep[k] = 0;
    json_t *arr = json_loads(deep, 0, NULL);
    assert_non_null(arr);
    json_t *vars = json_pack("{s:o}", "x", arr);
    t = jinja_parse("{{ x }}", 7, &e);
    assert_int_equal(jinja_render(t, vars, NULL, NULL, &out, &n, &e), -1);
    assert_non_null(strstr(e.msg, "nested"));
    jinja_free(t);
    json_decref(vars);
    free(deep);
    /* a namespace that contains itself cannot loop forever when printed */
    expect_err("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", NULL, "LimitError", NULL);
    expect_err("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns|tojson }}", NULL, "JSON serializable", NULL);
}

static void test_mutation_option(void **s) {
    (void)s;
    jinja_options_t opt = {.allow_mutation = 1};
    err_t e;
    char *out = render_lim("{% set l = [] %}{% do_not = l.append(1) %}", NULL, &opt, NULL, &e);
    assert_null(out);  /* `do` is not a tag: transformers does not load the do extension */
    assert_non_null(strstr(e.msg, "unknown tag"));
    out = render_lim("{% set l = [1] %}{{ l.append(2) }}{{ l }}{% set d = {} %}{{ d.update(a=1) }}{{ d }}", NULL, &opt,
                     NULL, &e);
    if (!out) fail_msg("%s", e.msg);
    assert_string_equal(out, "None[1, 2]None{'a': 1}");
    free(out);
}

static void test_special_values(void **s) {
    (void)s;
    expect_out("{{ x }}", "{\"x\": 1.0}", "1.0");
    expect_out("{{ x }}|{{ x|tojson }}", "{\"x\": [1, 2.5, null, true, \"\\u00e9\"]}", "[1, 2.5, None, True, 'é']|[1, 2.5, null, true, \"é\"]");
    expect_out("{{ x|tojson }}", "{\"x\": {\"b\": 1, \"a\": {\"c\": []}}}", "{\"b\": 1, \"a\": {\"c\": []}}");
    expect_out("{{ x }}", "{\"x\": \"with\\u0000nul\"}", "with");  /* the NUL is output; strcmp stops there */
    expect_out("{{ x|length }}", "{\"x\": \"with\\u0000nul\"}", "8");
    expect_out("{{ x|tojson }}", "{\"x\": \"a\\u0000b\"}", "\"a\\u0000b\"");
    expect_out("{{ '\\u00e9'|tojson(ensure_ascii=true) }}{{ '\\U0001F600'|tojson(ensure_ascii=true) }}", NULL,
               "\"\\u00e9\"\"\\ud83d\\ude00\"");
    expect_out("{{ '\\U0001F600'|length }}{{ '\\U0001F600'|tojson }}", NULL, "1\"\xf0\x9f\x98\x80\"");
    expect_out("{{ 1e308 * 10 }}|{{ (1e308 * 10)|tojson }}", NULL, "inf|Infinity");
    expect_out("{% generation %}gen{{ 1 }}{% endgeneration %}", NULL, "gen1");
    expect_out("{{ strftime_now('') }}", NULL, "");
}

/* Many threads rendering one parsed template: the tree is shared and must not change. */
static jinja_template_t *shared_t;
static void *render_thread(void *arg) {
    (void)arg;
    json_t *vars = json_pack("{s:[{s:s,s:s},{s:s,s:s}]}", "messages", "role", "user", "content", "hi", "role",
                             "assistant", "content", "yo");
    for (int i = 0; i < 200; i++) {
        err_t e;
        char *out;
        size_t n;
        if (jinja_render(shared_t, vars, NULL, NULL, &out, &n, &e)) { json_decref(vars); return (void *)1; }
        int bad = strcmp(out, "user:hi|assistant:yo|2");
        free(out);
        if (bad) { json_decref(vars); return (void *)1; }
    }
    json_decref(vars);
    return NULL;
}

static void test_threads_share_a_template(void **s) {
    (void)s;
    const char *src = "{% set ns = namespace(n=0) %}{% for m in messages %}{{ m.role }}:{{ m.content }}|"
                      "{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}";
    err_t e;
    shared_t = jinja_parse(src, strlen(src), &e);
    assert_non_null(shared_t);
    pthread_t th[4];
    for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, render_thread, NULL);
    for (int i = 0; i < 4; i++) {
        void *rv;
        pthread_join(th[i], &rv);
        assert_null(rv);
    }
    jinja_free(shared_t);
}

/* Unbounded recursion on a thread with a small stack (512 KiB: a library user's thread,
 * or musl's default 128 KiB rounded up): the render fails with LimitError instead of running
 * off the stack. The frame count alone (max_depth) allows more frames than fit there, and
 * fuzz_jinja_render's -O0 ASan build overflowed even the main thread's 8 MiB with it. */
static void *render_deep(void *arg) {
    err_t *e = arg;
    const char *src = "{% macro m(x) %}[{{ m(x) }}]{% endmacro %}{{ m(1) }}";
    char *out = render(src, NULL, e);
    free(out);
    return out ? (void *)1 : NULL;
}

static void test_recursion_on_a_small_stack(void **s) {
    (void)s;
    pthread_attr_t at;
    pthread_attr_init(&at);
    assert_int_equal(pthread_attr_setstacksize(&at, 512u << 10), 0);
    err_t e = {{0}};
    pthread_t th;
    assert_int_equal(pthread_create(&th, &at, render_deep, &e), 0);
    void *rv;
    pthread_join(th, &rv);
    pthread_attr_destroy(&at);
    assert_null(rv); /* it failed ... */
    if (!strstr(e.msg, "LimitError") || !strstr(e.msg, "recursion")) fail_msg("expected a LimitError, got: %s", e.msg);
}

/* Inputs the fuzzers found; each once crashed or misbehaved. */
static void test_fuzz_regressions(void **s) {
    (void)s;
    err_t e;
    static const char *const inputs[] = {
        "{{",
        "{%",
        "{{ x[",
        "{{ x[:",
        "{% for %}",
        "{% set %}",
        "{% macro %}",
        "{% call %}",
        "{{ a.0.1 }}",
        "{{ '\\",
        "{% filter %}",
        "{{ 1 is }}",
        "{% if 1 %}{% elif %}",
        "{%- raw -%}",
        "{{ {}[:] }}",
        "{% set ns.x = 1 %}",
        "{{ x|map|map|list }}",
        "{{ ''|indent(first=1) }}",
        "{{ [1]|batch(1, 2)|list }}",
        "{{ 'a'|truncate(0) }}",
        "{{ 'ab'|center(-5) }}",
        "{{ ''.split(none, -5) }}",
        "{{ ' a b '.rsplit(none, 1) }}",
        "{{ 'abc'.rsplit('', 1) }}",
        "{{ 'x'.find('', 10) }}",
        "{{ 'abc'.startswith('a', 5) }}",
        "{{ '%' % 1 }}",
        "{{ '%(a' % {} }}",
        "{{ '{' .format() }}",
        "{{ '}'.format() }}",
        "{{ '{:' .format(1) }}",
        "{{ '{0[' .format([1]) }}",
        "{{ x is divisibleby 0 }}",
        "{{ [] is sameas [] }}",
        "{{ {'a': 1}|dictsort(by='x') }}",
        "{{ [none, 1]|sort }}",
        "{{ [[], 1]|unique|list }}",
        "{{ [1, 2]|sum(attribute='x') }}",
        "{{ 1|round(-2) }}{{ 1.5|round(500) }}",
        "{% for x in [1] recursive %}{{ loop(loop(x)) }}{% endfor %}",
        /* fuzz_jinja_render: printf width overflowed an int */
        "{{ '(%s %999999999999999999999999999999999999999999999999999999999999999999999999s' % ('a',) }}",
        "{{ '{:99999999999999999999999999.99999999999999999999f}'.format(1.5) }}",
        /* fuzz_jinja_render: an overflowing field index in str.format read out of bounds */
        "{{ '{{{{{{{{{{{{{{{{{{{{{{{{{{{{{55555555555@555555555555555555555555{{{{{{x}!'.format(x=3) }}",
        "{{ '{99999999999999999999}'.format(1) }}{{ '{0[99999999999999999999999]}'.format([1]) }}",
        "{{ [[1]]|map(attribute='0.99999999999999999999999')|list }}",
    };
    for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; i++) {
        jinja_template_t *t = jinja_parse(inputs[i], strlen(inputs[i]), &e);
        if (!t) continue;
        json_t *vars = json_pack("{s:[{s:s}]}", "messages", "role", "user");
        char *out = NULL;
        size_t n;
        if (jinja_render(t, vars, NULL, NULL, &out, &n, &e) == 0) free(out);
        json_decref(vars);
        jinja_free(t);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_syntax_errors_name_the_place),
        cmocka_unit_test(test_runtime_errors_are_clean),
        cmocka_unit_test(test_limits_trip_cleanly),
        cmocka_unit_test(test_mutation_option),
        cmocka_unit_test(test_special_values),
        cmocka_unit_test(test_threads_share_a_template),
        cmocka_unit_test(test_recursion_on_a_small_stack),
        cmocka_unit_test(test_fuzz_regressions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
