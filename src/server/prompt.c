/* prompt.c — from an API request to the prompt the model sees.
 *
 * Both APIs are converted to the one input HF chat templates are written for: OpenAI-shaped
 * messages ({role, content, tool_calls[{id, type, function{name, arguments}}], tool_call_id,
 * reasoning_content}), `tools` in OpenAI's function shape, add_generation_prompt, plus any
 * chat_template_kwargs. Choices made on the way, each because real templates need it:
 *   - content parts are joined into one string (templates concatenate content);
 *   - an assistant message's null content becomes "" (templates do `'…' + content`);
 *   - tool-call arguments given as a JSON string are parsed into an object, since most
 *     templates apply `tojson` to them (vLLM does the same);
 *   - Anthropic tool_result blocks become role "tool" messages, tool_use blocks become
 *     tool_calls, thinking blocks become reasoning_content.
 * Images, audio and documents are refused with 400: kiln has no vision yet. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/file.h"
#include "server/srv.h"

/* Joins text parts; fails on anything that is not text. where: "messages[2].content". */
static int join_parts(json_t *content, const char *where, api_t api, char **out, api_err_t *ae) {
    if (json_is_string(content)) { *out = strdup(json_string_value(content)); return 0; }
    if (!json_is_array(content)) return api_fail(ae, 400, "messages", "%s must be a string or an array of content parts", where);
    sbuf_t b = {0};
    size_t i;
    json_t *p;
    json_array_foreach(content, i, p) {
        const char *type = json_string_value(json_object_get(p, "type"));
        if (!type) { sbuf_free(&b); return api_fail(ae, 400, "messages", "%s[%zu] has no 'type'", where, i); }
        if (strcmp(type, "text")) {
            sbuf_free(&b);
            return api_fail(ae, 400, "messages", "%s[%zu]: content of type '%s' is not supported (kiln serves text-only models)", where, i, type);
        }
        const char *t = json_string_value(json_object_get(p, "text"));
        if (!t) { sbuf_free(&b); return api_fail(ae, 400, "messages", "%s[%zu].text must be a string", where, i); }
        sbuf_adds(&b, t);
    }
    *out = sbuf_take(&b);
    return 0;
}

static json_t *args_object(json_t *a) {
    if (json_is_string(a)) {
        json_error_t je;
        json_t *o = json_loads(json_string_value(a), JSON_DECODE_ANY, &je);
        if (json_is_object(o)) return o;
        json_decref(o);
        return json_incref(a);
    }
    return a ? json_incref(a) : json_object();
}

static int openai_messages(json_t *req, json_t *out, api_err_t *ae) {
    json_t *msgs = json_object_get(req, "messages");
    if (!msgs) return api_fail(ae, 400, "messages", "'messages' is required");
    if (!json_is_array(msgs) || !json_array_size(msgs)) return api_fail(ae, 400, "messages", "'messages' must be a non-empty array");
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        char where[64];
        if (!json_is_object(m)) return api_fail(ae, 400, "messages", "messages[%zu] must be an object", i);
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!role) return api_fail(ae, 400, "messages", "messages[%zu].role must be a string", i);
        if (strcmp(role, "system") && strcmp(role, "developer") && strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "tool"))
            return api_fail(ae, 400, "messages", "messages[%zu].role '%s' is not one of system, developer, user, assistant, tool", i, role);
        json_t *o = json_pack("{s:s}", "role", strcmp(role, "developer") ? role : "system");
        json_t *content = json_object_get(m, "content");
        char *text = NULL;
        snprintf(where, sizeof where, "messages[%zu].content", i);
        if ((!content || json_is_null(content)) && !strcmp(role, "assistant")) text = strdup("");
        else if (!content || json_is_null(content)) { json_decref(o); return api_fail(ae, 400, "messages", "%s is required for role '%s'", where, role); }
        else if (join_parts(content, where, API_OPENAI, &text, ae)) { json_decref(o); return -1; }
        json_object_set_new(o, "content", json_string(text));
        free(text);
        const char *name = json_string_value(json_object_get(m, "name"));
        if (name) json_object_set_new(o, "name", json_string(name));
        json_t *rc = json_object_get(m, "reasoning_content");
        if (json_is_string(rc)) json_object_set(o, "reasoning_content", rc);
        if (!strcmp(role, "tool")) {
            json_t *id = json_object_get(m, "tool_call_id");
            if (!json_is_string(id)) { json_decref(o); return api_fail(ae, 400, "messages", "messages[%zu].tool_call_id must be a string", i); }
            json_object_set(o, "tool_call_id", id);
        }
        json_t *tcs = json_object_get(m, "tool_calls");
        if (tcs && !json_is_null(tcs)) {
            if (!json_is_array(tcs) || strcmp(role, "assistant")) {
                json_decref(o);
                return api_fail(ae, 400, "messages", "messages[%zu].tool_calls must be an array on an assistant message", i);
            }
            json_t *calls = json_array();
            size_t j;
            json_t *tc;
            json_array_foreach(tcs, j, tc) {
                json_t *fn = json_object_get(tc, "function");
                const char *fname = json_string_value(json_object_get(fn, "name"));
                if (!fname) {
                    json_decref(calls);
                    json_decref(o);
                    return api_fail(ae, 400, "messages", "messages[%zu].tool_calls[%zu].function.name must be a string", i, j);
                }
                json_t *args = args_object(json_object_get(fn, "arguments"));
                const char *id = json_string_value(json_object_get(tc, "id"));
                json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:s, s:o}}", "id", id ? id : "", "type", "function", "function", "name",
                                                       fname, "arguments", args));
            }
            json_object_set_new(o, "tool_calls", calls);
        }
        json_array_append_new(out, o);
    }
    return 0;
}

/* Text of an Anthropic content value (string, or text blocks). */
static int anthropic_text(json_t *c, const char *where, char **out, api_err_t *ae) {
    if (json_is_string(c)) { *out = strdup(json_string_value(c)); return 0; }
    if (!json_is_array(c)) return api_fail(ae, 400, "messages", "%s must be a string or an array of content blocks", where);
    return join_parts(c, where, API_ANTHROPIC, out, ae);
}

static int anthropic_messages(json_t *req, json_t *out, api_err_t *ae) {
    json_t *sys = json_object_get(req, "system");
    if (sys && !json_is_null(sys)) {
        char *t = NULL;
        if (anthropic_text(sys, "system", &t, ae)) { snprintf(ae->param, sizeof ae->param, "system"); return -1; }
        json_array_append_new(out, json_pack("{s:s, s:s}", "role", "system", "content", t));
        free(t);
    }
    json_t *msgs = json_object_get(req, "messages");
    if (!msgs) return api_fail(ae, 400, "messages", "messages: Field required");
    if (!json_is_array(msgs) || !json_array_size(msgs)) return api_fail(ae, 400, "messages", "messages: must be a non-empty array");
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!json_is_object(m) || !role || (strcmp(role, "user") && strcmp(role, "assistant")))
            return api_fail(ae, 400, "messages", "messages.%zu.role: must be 'user' or 'assistant'", i);
        json_t *c = json_object_get(m, "content");
        if (json_is_string(c)) {
            json_array_append_new(out, json_pack("{s:s, s:O}", "role", role, "content", c));
            continue;
        }
        if (!json_is_array(c)) return api_fail(ae, 400, "messages", "messages.%zu.content: must be a string or an array of blocks", i);
        sbuf_t text = {0}, think = {0};
        json_t *calls = json_array();
        size_t j;
        json_t *b;
        int rc = 0;
        json_array_foreach(c, j, b) {
            const char *type = json_string_value(json_object_get(b, "type"));
            if (!type) { rc = api_fail(ae, 400, "messages", "messages.%zu.content.%zu.type: Field required", i, j); break; }
            if (!strcmp(type, "text")) {
                const char *t = json_string_value(json_object_get(b, "text"));
                if (!t) { rc = api_fail(ae, 400, "messages", "messages.%zu.content.%zu.text: must be a string", i, j); break; }
                sbuf_adds(&text, t);
            } else if (!strcmp(type, "thinking") || !strcmp(type, "redacted_thinking")) {
                const char *t = json_string_value(json_object_get(b, "thinking"));
                if (t) sbuf_adds(&think, t);
            } else if (!strcmp(type, "tool_use")) {
                const char *id = json_string_value(json_object_get(b, "id"));
                const char *name = json_string_value(json_object_get(b, "name"));
                json_t *in = json_object_get(b, "input");
                if (!name || !json_is_object(in)) { rc = api_fail(ae, 400, "messages", "messages.%zu.content.%zu: tool_use needs a name and an input object", i, j); break; }
                json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:s, s:O}}", "id", id ? id : "", "type", "function", "function", "name", name,
                                                       "arguments", in));
            } else if (!strcmp(type, "tool_result")) {
                const char *id = json_string_value(json_object_get(b, "tool_use_id"));
                if (!id) { rc = api_fail(ae, 400, "messages", "messages.%zu.content.%zu.tool_use_id: Field required", i, j); break; }
                json_t *rcont = json_object_get(b, "content");
                char *t = NULL;
                char where[96];
                snprintf(where, sizeof where, "messages.%zu.content.%zu.content", i, j);
                if (!rcont || json_is_null(rcont)) t = strdup("");
                else if (anthropic_text(rcont, where, &t, ae)) { rc = -1; break; }
                if (json_is_true(json_object_get(b, "is_error"))) {
                    char *e = str_printf("Error: %s", t);
                    free(t);
                    t = e;
                }
                json_array_append_new(out, json_pack("{s:s, s:s, s:s}", "role", "tool", "tool_call_id", id, "content", t));
                free(t);
            } else {
                rc = api_fail(ae, 400, "messages", "messages.%zu.content.%zu: blocks of type '%s' are not supported (kiln serves text-only models)", i, j, type);
                break;
            }
        }
        if (!rc && (text.len || json_array_size(calls) || think.len || !strcmp(role, "assistant"))) {
            json_t *o = json_pack("{s:s, s:s}", "role", role, "content", text.p ? text.p : "");
            if (json_array_size(calls)) json_object_set(o, "tool_calls", calls);
            if (think.len) json_object_set_new(o, "reasoning_content", json_string(think.p));
            json_array_append_new(out, o);
        }
        sbuf_free(&text);
        sbuf_free(&think);
        json_decref(calls);
        if (rc) return rc;
    }
    return 0;
}

json_t *tools_openai(json_t *req, api_t api, api_err_t *ae, int *bad) {
    *bad = 0;
    json_t *tools = json_object_get(req, "tools");
    if (!tools || json_is_null(tools)) return NULL;
    if (!json_is_array(tools)) { *bad = 1; api_fail(ae, 400, "tools", "'tools' must be an array"); return NULL; }
    if (!json_array_size(tools)) return NULL;
    json_t *out = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        if (api == API_OPENAI) {
            json_t *fn = json_object_get(t, "function");
            const char *type = json_string_value(json_object_get(t, "type"));
            if (!type || strcmp(type, "function") || !json_is_string(json_object_get(fn, "name"))) {
                *bad = 1;
                api_fail(ae, 400, "tools", "tools[%zu] must be {\"type\": \"function\", \"function\": {\"name\": ..., \"parameters\": {...}}}", i);
                json_decref(out);
                return NULL;
            }
            json_array_append(out, t);
        } else {
            const char *name = json_string_value(json_object_get(t, "name"));
            json_t *schema = json_object_get(t, "input_schema");
            if (!name || !json_is_object(schema)) {
                *bad = 1;
                api_fail(ae, 400, "tools", "tools.%zu: needs a name and an input_schema object", i);
                json_decref(out);
                return NULL;
            }
            json_t *fn = json_pack("{s:s, s:O}", "name", name, "parameters", schema);
            json_t *d = json_object_get(t, "description");
            if (json_is_string(d)) json_object_set(fn, "description", d);
            json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function", "function", fn));
        }
    }
    return out;
}

/* tool_choice -> 0 none, 1 auto, 2 required, 3 named (*name set). */
static int tool_choice(json_t *req, api_t api, json_t *tools, const char **name, api_err_t *ae) {
    json_t *tc = json_object_get(req, "tool_choice");
    *name = NULL;
    if (!tc || json_is_null(tc)) return tools ? 1 : 0;
    int mode = -1;
    if (api == API_OPENAI) {
        const char *s = json_string_value(tc);
        if (s) mode = !strcmp(s, "none") ? 0 : !strcmp(s, "auto") ? 1 : !strcmp(s, "required") ? 2 : -1;
        else if (json_is_object(tc)) {
            *name = json_string_value(json_object_get(json_object_get(tc, "function"), "name"));
            if (*name) mode = 3;
        }
        if (mode < 0) return api_fail(ae, 400, "tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    } else {
        const char *t = json_string_value(json_object_get(tc, "type"));
        if (t) mode = !strcmp(t, "none") ? 0 : !strcmp(t, "auto") ? 1 : !strcmp(t, "any") ? 2 : !strcmp(t, "tool") ? 3 : -1;
        if (mode == 3) *name = json_string_value(json_object_get(tc, "name"));
        if (mode < 0 || (mode == 3 && !*name)) return api_fail(ae, 400, "tool_choice", "tool_choice: must be {\"type\": \"auto\" | \"any\" | \"none\"} or {\"type\": \"tool\", \"name\": ...}");
    }
    if (mode >= 2 && !tools) return api_fail(ae, 400, "tool_choice", "tool_choice asks for a tool call but no tools were given");
    if (mode == 3) {
        size_t i;
        json_t *t;
        int found = 0;
        json_array_foreach(tools, i, t)
            if (!strcmp(json_string_value(json_object_get(json_object_get(t, "function"), "name")), *name)) found = 1;
        if (!found) return api_fail(ae, 400, "tool_choice", "tool_choice names '%s', which is not among the tools", *name);
    }
    return mode;
}

/* The opening markup that forces a call (tool_choice required / named). */
static char *prime_for(tc_format_t f, const char *name) {
    sbuf_t b = {0};
    switch (f) {
    case TC_QWEN_XML:
        sbuf_adds(&b, "<tool_call>\n<function=");
        if (name) sbuf_printf(&b, "%s>\n", name);
        break;
    case TC_GEMMA4:
        sbuf_adds(&b, "<|tool_call>call:");
        if (name) sbuf_printf(&b, "%s{", name);
        break;
    case TC_LLAMA_JSON:
        sbuf_adds(&b, "{\"name\": \"");
        if (name) { sbuf_add_json_str(&b, name, strlen(name)); sbuf_adds(&b, "\", \"parameters\": "); }
        break;
    default:
        sbuf_adds(&b, "<tool_call>\n{\"name\": \"");
        if (name) { sbuf_add_json_str(&b, name, strlen(name)); sbuf_adds(&b, "\", \"arguments\": "); }
        break;
    }
    return sbuf_take(&b);
}

int prompt_chat(server_t *s, json_t *req, api_t api, gen_t *g, char **text, api_err_t *ae) {
    *text = NULL;
    if (!s->tmpl) return api_fail(ae, 400, "messages", "this model has no chat template; use /v1/completions with a raw prompt");
    json_t *msgs = json_array();
    json_t *input = NULL, *tools = NULL;
    int rc = -1, bad;
    if ((api == API_OPENAI ? openai_messages(req, msgs, ae) : anthropic_messages(req, msgs, ae))) goto err;
    tools = tools_openai(req, api, ae, &bad);
    if (bad) goto err;
    const char *forced = NULL;
    int choice = tool_choice(req, api, tools, &forced, ae);
    if (choice < 0) goto err;
    input = json_pack("{s:o, s:b}", "messages", msgs, "add_generation_prompt", 1);
    msgs = NULL;
    if (tools && choice != 0) json_object_set(input, "tools", tools);
    json_t *kw = json_object_get(req, "chat_template_kwargs");
    if (kw && !json_is_null(kw)) {
        if (!json_is_object(kw)) { api_fail(ae, 400, "chat_template_kwargs", "'chat_template_kwargs' must be an object"); goto err; }
        const char *k;
        json_t *v;
        json_object_foreach(kw, k, v) {
            if (!strcmp(k, "messages") || !strcmp(k, "tools")) continue;
            json_object_set(input, k, v);
        }
    }
    json_t *effort = json_object_get(req, "reasoning_effort");
    if (effort && !json_is_null(effort)) {
        const char *e = json_string_value(effort);
        if (!e || (strcmp(e, "none") && strcmp(e, "minimal") && strcmp(e, "low") && strcmp(e, "medium") && strcmp(e, "high"))) {
            api_fail(ae, 400, "reasoning_effort", "'reasoning_effort' must be one of none, minimal, low, medium, high");
            goto err;
        }
        json_object_set(input, "reasoning_effort", effort);
        if (!strcmp(e, "none") && !json_object_get(input, "enable_thinking")) json_object_set_new(input, "enable_thinking", json_false());
    }
    if (api == API_ANTHROPIC) {
        json_t *th = json_object_get(req, "thinking");
        const char *tt = json_string_value(json_object_get(th, "type"));
        if (tt && !json_object_get(input, "enable_thinking")) json_object_set_new(input, "enable_thinking", json_boolean(!strcmp(tt, "enabled")));
    }
    err_t e = {0};
    size_t len;
    if (chat_template_render(s->tmpl, input, text, &len, &e)) {
        api_fail(ae, 400, "messages", "chat template: %s", e.msg);
        goto err;
    }
    if (s->reason) {
        g->use_rs = 1;
        rs_init(&g->rs, s->reason, rs_prompt_opens(*text, s->reason));
    }
    if (tools && choice != 0 && g) {
        g->tc = tc_parser_new(s->tool_format, tools);
        if (choice >= 2) {
            g->tc_prime = prime_for(s->tool_format, choice == 3 ? forced : NULL);
            char *t2 = str_printf("%s%s", *text, g->tc_prime);
            free(*text);
            *text = t2;
            /* the reply starts inside a call, so it is not thinking */
            if (g->use_rs) { rs_free(&g->rs); g->use_rs = 0; }
        }
    }
    rc = 0;
err:
    json_decref(msgs);
    json_decref(input);
    json_decref(tools);
    return rc;
}

int prompt_tokenize(server_t *s, const char *text, int add_special, int32_t **ids, int *n, api_err_t *ae) {
    if (!s->tok) return api_fail(ae, 400, NULL, "this model has no tokenizer.json; send token ids");
    err_t e = {0};
    if (tokenizer_encode(s->tok, text, strlen(text), add_special, ids, n, &e)) return api_fail(ae, 400, NULL, "tokenizer: %s", e.msg);
    return 0;
}
