/* fuzz_jinja_render.c — libFuzzer target: parse, then render with a fixed chat input.
 *
 * The input is a template. When it parses, it is rendered with a conversation that has a
 * system prompt, tools, a tool call with object arguments, a tool result and list-valued
 * content, under tight limits (so slow or huge templates end quickly with LimitError).
 * A render must succeed with exactly out_len bytes, or fail with a message.
 *   build-jinja-fuzz/fuzz_jinja_render -max_total_time=300 tests/fuzz/corpus/jinja_render
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "chat/jinja.h"

static json_t *vars;

static const char *INPUT =
    "{\"messages\": ["
    "{\"role\": \"system\", \"content\": \"Be brief.\"},"
    "{\"role\": \"user\", \"content\": \"Weather in Paris? \\u00e9\\u4e2d\"},"
    "{\"role\": \"assistant\", \"content\": \"<think>\\nhm\\n</think>\\n\\nok\", \"reasoning_content\": \"hm\","
    " \"tool_calls\": [{\"type\": \"function\", \"id\": \"call_1\", \"function\": {\"name\": \"get_weather\","
    " \"arguments\": {\"city\": \"Paris\", \"n\": 1.5, \"flags\": [true, null]}}}]},"
    "{\"role\": \"tool\", \"content\": \"{\\\"temp\\\": 18}\", \"tool_call_id\": \"call_1\", \"name\": \"get_weather\"},"
    "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"and Rome?\"}, {\"type\": \"image\"}]}],"
    "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get it\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}],"
    "\"add_generation_prompt\": true, \"enable_thinking\": false, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!vars) vars = json_loads(INPUT, 0, NULL);
    if (!vars) abort();
    err_t e = {{0}};
    jinja_template_t *t = jinja_parse((const char *)data, size, &e);
    if (!t) {
        if (!e.msg[0]) abort();
        return 0;
    }
    jinja_limits_t lim;
    jinja_limits_default(&lim);
    lim.max_memory = 32u << 20;
    lim.max_output = 1u << 20;
    lim.max_steps = 20000;
    lim.max_depth = 100;
    char *out = NULL;
    size_t n = 0;
    if (jinja_render(t, vars, NULL, &lim, &out, &n, &e) == 0) {
        if (!out || out[n] != 0) abort();
        free(out);
    } else if (!e.msg[0]) {
        abort();
    }
    jinja_free(t);
    return 0;
}
