/* fuzz_request.c — libFuzzer target for what the server does with a request body before the
 * engine sees it: body_parse, the sampling parameters (common_sampling), the messages, tools and
 * tool_choice turned into a prompt through a real chat template (prompt_chat), and the prompt's
 * tokenization (prompt_tokenize) — the OpenAI and the Anthropic shapes (byte 0: even, odd).
 *
 * A client's mistake must come back as a 4xx with a message, never a crash or a 5xx (DESIGN §9).
 * The template: $KILN_FUZZ_TEMPLATE_DIR, else tests/.cache/tokenizers/qwen3 (Qwen3's real
 * template with tools and thinking; scripts/test-setup.sh fetches it), else models/kiln-tiny;
 * the tokenizer from the same folder (else kiln-tiny's), the config kiln-tiny's. Run from the
 * repository root:
 *   build-fuzz/fuzz_request -max_total_time=300 tests/fuzz/corpus/request
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "load/config.h"
#include "server/srv.h"
#include "tokenizer/tokenizer.h"

static server_t S;
static model_config_t cfg;

static void init(void) {
    err_t e = {0};
    const char *dir = getenv("KILN_FUZZ_TEMPLATE_DIR");
    if (!dir) dir = access("tests/.cache/tokenizers/qwen3/tokenizer_config.json", R_OK) == 0 ? "tests/.cache/tokenizers/qwen3" : "models/kiln-tiny";
    S.tmpl = chat_template_load(dir, &e);
    char tp[512];
    snprintf(tp, sizeof tp, "%s/tokenizer.json", dir);
    tokenizer_t *tok = tokenizer_load(access(tp, R_OK) == 0 ? tp : "models/kiln-tiny/tokenizer.json", &e);
    if (!S.tmpl || !tok || config_load(&cfg, "models/kiln-tiny", &e)) {
        fprintf(stderr, "fuzz_request: %s (run from the repository root)\n", e.msg);
        abort();
    }
    S.tok = tok;
    S.cfg = &cfg;
    S.ctx_len = 4096;
    S.tool_format = TC_HERMES;
    S.reason = &RS_THINK;
    snprintf(S.model_id, sizeof S.model_id, "kiln-tiny");
    fprintf(stderr, "fuzz_request: template from %s\n", dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!S.tok) init();
    if (size < 1) return 0;
    api_t api = data[0] % 2 ? API_ANTHROPIC : API_OPENAI;
    api_err_t ae = {0};
    json_t *req = body_parse((const char *)data + 1, size - 1, &ae);
    if (!req) {
        if (ae.status < 400 || ae.status > 499 || !ae.e.msg[0]) abort();
        return 0;
    }
    gen_t *g = calloc(1, sizeof *g);
    if (!g) abort();
    g->s = &S;
    char *text = NULL;
    int rc = common_sampling(&S, req, api, g, &ae);
    if (!rc) rc = prompt_chat(&S, req, api, g, &text, &ae);
    if (!rc) rc = prompt_tokenize(&S, text, 0, &g->prompt, &g->n_prompt, &ae);
    if (rc && (ae.status < 400 || ae.status > 499 || !ae.e.msg[0])) abort(); /* a client mistake: 4xx with a message */
    if (!rc && g->n_prompt <= 0) abort();
    free(text);
    gen_free(g);
    json_decref(req);
    return 0;
}
