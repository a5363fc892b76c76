/* routes_anthropic.c — POST /v1/messages and POST /v1/messages/count_tokens, in the
 * shapes of Anthropic's Messages API. Errors come back as {"type":"error","error":{...}}
 * (http.c picks the shape from the route). `metadata` is accepted and ignored: it only
 * carries a user id for abuse tracking. */
#include <stdlib.h>
#include <string.h>
#include "server/srv.h"

static int check_common(json_t *req, api_err_t *ae) {
    json_t *model = json_object_get(req, "model");
    if (model && !json_is_string(model)) return api_fail(ae, 400, "model", "model: must be a string");
    json_t *md = json_object_get(req, "metadata");
    if (md && !json_is_null(md) && !json_is_object(md)) return api_fail(ae, 400, "metadata", "metadata: must be an object");
    return 0;
}

int route_messages(conn_t *c, json_t *req) {
    server_t *s = c->s;
    api_err_t ae = {0};
    char *text = NULL;
    gen_t *g = gen_new(c, G_MESSAGES);
    if (!g) { api_fail(&ae, 500, NULL, "out of memory"); goto err; }
    if (check_common(req, &ae) || common_sampling(s, req, API_ANTHROPIC, g, &ae)) goto err;
    if (prompt_chat(s, req, API_ANTHROPIC, g, &text, &ae)) goto err;
    if (prompt_tokenize(s, text, 0, &g->prompt, &g->n_prompt, &ae)) goto err;
    free(text);
    return run_generation(c, g);
err:
    free(text);
    if (g && c->g != g) gen_free(g);
    return reply_error(c, &ae);
}

int route_count_tokens(conn_t *c, json_t *req) {
    server_t *s = c->s;
    api_err_t ae = {0};
    char *text = NULL;
    int32_t *ids = NULL;
    int n = 0;
    gen_t *g = gen_new(c, G_MESSAGES);
    if (!g || check_common(req, &ae) || prompt_chat(s, req, API_ANTHROPIC, g, &text, &ae) ||
        prompt_tokenize(s, text, 0, &ids, &n, &ae)) {
        if (!g) api_fail(&ae, 500, NULL, "out of memory");
        free(text);
        gen_free(g);
        return reply_error(c, &ae);
    }
    free(text);
    free(ids);
    gen_free(g);
    return reply_json(c, 200, json_pack("{s:i}", "input_tokens", n));
}
