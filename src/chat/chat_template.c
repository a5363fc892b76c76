/* chat_template.c — loading a model's chat template and rendering it like transformers.
 *
 * The jinja layer knows nothing about chats; this file supplies what apply_chat_template
 * adds around jinja2: the template's source (chat_template.jinja beats tokenizer_config.json,
 * as transformers' loader does), the special-token variables (`{**special_tokens_map,
 * **kwargs}`), `tools=None` / `documents=None` defaults, and the continue_final_message
 * post-processing. Errors are prefixed "chat template" so that a server can return them
 * to the client as they are: they say what the template raised and on which line.
 */
#include "chat/chat_template.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/file.h"
#include "chat/jinja.h"
#include "chat/jinja_int.h"

struct chat_template {
    jinja_template_t *t;
    char *source;
    json_t *specials;   /* {"bos_token": "...", ...}: template variables */
    json_t *names;      /* names offered by a list-valued chat_template */
};

#define CONFIG_MAX ((size_t)64 << 20)

static const char *const SPECIAL_KEYS[] = {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                                           "cls_token", "mask_token", NULL};

/* A special token is a string or an AddedToken object {"content": "..."}. */
static const char *token_text(const json_t *v) {
    if (json_is_string(v)) return json_string_value(v);
    if (json_is_object(v)) {
        const json_t *c = json_object_get(v, "content");
        if (json_is_string(c)) return json_string_value(c);
    }
    return NULL;
}

static chat_template_t *build(const char *source, size_t len, json_t *specials, const char *what, err_t *e) {
    chat_template_t *ct = calloc(1, sizeof *ct);
    if (!ct) { err_set(e, "out of memory"); json_decref(specials); return NULL; }
    ct->specials = specials ? specials : json_object();
    ct->names = json_array();
    ct->source = malloc(len + 1);
    if (!ct->specials || !ct->names || !ct->source) { err_set(e, "out of memory"); goto err; }
    memcpy(ct->source, source, len);
    ct->source[len] = 0;
    ct->t = jinja_parse(source, len, e);
    if (!ct->t) { err_prefix(e, "%s", what); goto err; }
    return ct;
err:
    chat_template_free(ct);
    return NULL;
}

chat_template_t *chat_template_from_string(const char *source, const char *bos, const char *eos, err_t *e) {
    if (!source) { err_set(e, "chat template: no source given"); return NULL; }
    json_t *sp = json_object();
    if (!sp) { err_set(e, "out of memory"); return NULL; }
    if (bos) json_object_set_new(sp, "bos_token", json_string(bos));
    if (eos) json_object_set_new(sp, "eos_token", json_string(eos));
    return build(source, strlen(source), sp, "chat template", e);
}

static json_t *read_config(const char *path, err_t *e) {
    size_t len;
    char *text = file_read(path, CONFIG_MAX, &len, e);
    if (!text) return NULL;
    json_error_t je;
    json_t *cfg = json_loadb(text, len, 0, &je);
    if (!cfg) /* e.g. Llama 3's model_max_length of 1e30 does not fit an int64 */
        cfg = json_loadb(text, len, JSON_DECODE_INT_AS_REAL, &je);
    free(text);
    if (!cfg) { err_set(e, "%s: line %d, column %d: %s", path, je.line, je.column, je.text); return NULL; }
    if (!json_is_object(cfg)) { json_decref(cfg); err_set(e, "%s: expected a JSON object", path); return NULL; }
    return cfg;
}

chat_template_t *chat_template_load_named(const char *model_dir, const char *name, err_t *e) {
    char *cfg_path = str_printf("%s/tokenizer_config.json", model_dir);
    char *jinja_path = str_printf("%s/chat_template.jinja", model_dir);
    json_t *cfg = NULL, *specials = json_object(), *names = json_array();
    char *jsrc = NULL;
    chat_template_t *ct = NULL;
    if (!cfg_path || !jinja_path || !specials || !names) { err_set(e, "out of memory"); goto done; }
    if (!dir_exists(model_dir)) { err_set(e, "%s: not a directory", model_dir); goto done; }
    if (file_exists(cfg_path) && !(cfg = read_config(cfg_path, e))) goto done;
    if (cfg) {
        for (int i = 0; SPECIAL_KEYS[i]; i++) {
            const char *t = token_text(json_object_get(cfg, SPECIAL_KEYS[i]));
            if (t) json_object_set_new(specials, SPECIAL_KEYS[i], json_string(t));
        }
        json_t *add = json_object_get(cfg, "additional_special_tokens");
        if (json_is_array(add)) {
            json_t *list = json_array();
            size_t i;
            json_t *v;
            json_array_foreach(add, i, v) {
                const char *t = token_text(v);
                if (t) json_array_append_new(list, json_string(t));
            }
            json_object_set_new(specials, "additional_special_tokens", list);
        }
    }
    const char *src = NULL;
    size_t len = 0;
    const char *what = "chat template";
    char whatbuf[600];
    json_t *tpl = cfg ? json_object_get(cfg, "chat_template") : NULL;
    if (json_is_array(tpl)) {
        size_t i;
        json_t *v;
        json_array_foreach(tpl, i, v) {
            const json_t *n = json_object_get(v, "name"), *t = json_object_get(v, "template");
            if (!json_is_string(n) || !json_is_string(t)) {
                err_set(e, "%s: chat_template[%zu] must be {\"name\": string, \"template\": string}", cfg_path, i);
                goto done;
            }
            json_array_append_new(names, json_string(json_string_value(n)));
            if (!strcmp(json_string_value(n), name ? name : "default")) {
                src = json_string_value(t);
                len = json_string_length(t);
            }
        }
        snprintf(whatbuf, sizeof whatbuf, "%s: chat_template '%s'", cfg_path, name ? name : "default");
        what = whatbuf;
    } else if (json_is_string(tpl) && !name) {
        src = json_string_value(tpl);
        len = json_string_length(tpl);
        snprintf(whatbuf, sizeof whatbuf, "%s: chat_template", cfg_path);
        what = whatbuf;
    } else if (tpl && !json_is_null(tpl) && !json_is_string(tpl)) {
        err_set(e, "%s: chat_template must be a string or a list of {name, template}", cfg_path);
        goto done;
    }
    if (!name && file_exists(jinja_path)) {
        /* transformers' loader lets chat_template.jinja override the config's template */
        jsrc = file_read(jinja_path, JINJA_MAX_SOURCE, &len, e);
        if (!jsrc) goto done;
        src = jsrc;
        snprintf(whatbuf, sizeof whatbuf, "%s", jinja_path);
        what = whatbuf;
    }
    if (!src) {
        if (name) err_set(e, "%s: no chat template named '%s'", model_dir, name);
        else if (json_array_size(names))
            err_set(e, "%s: the model has several chat templates and none is named 'default'", cfg_path);
        else err_set(e, "%s: the model has no chat template (no chat_template.jinja, no chat_template in tokenizer_config.json)", model_dir);
        goto done;
    }
    ct = build(src, len, specials, what, e);
    specials = NULL;
    if (ct) { json_decref(ct->names); ct->names = names; names = NULL; }
done:
    free(cfg_path);
    free(jinja_path);
    free(jsrc);
    json_decref(cfg);
    json_decref(specials);
    json_decref(names);
    return ct;
}

chat_template_t *chat_template_load(const char *model_dir, err_t *e) { return chat_template_load_named(model_dir, NULL, e); }

void chat_template_free(chat_template_t *ct) {
    if (!ct) return;
    jinja_free(ct->t);
    free(ct->source);
    json_decref(ct->specials);
    json_decref(ct->names);
    free(ct);
}

const char *chat_template_source(const chat_template_t *ct) { return ct->source; }
const json_t *chat_template_names(const chat_template_t *ct) { return ct->names; }
const char *chat_template_bos(const chat_template_t *ct) { return json_string_value(json_object_get(ct->specials, "bos_token")); }
const char *chat_template_eos(const chat_template_t *ct) { return json_string_value(json_object_get(ct->specials, "eos_token")); }

/* Python's str.strip() bounds. */
static void py_strip(const char *p, size_t n, size_t *b, size_t *e) {
    size_t i = 0, j = n;
    while (i < j) {
        uint32_t cp;
        size_t k = u8_decode(p + i, j - i, &cp);
        if (!py_isspace(cp)) break;
        i += k;
    }
    while (j > i) {
        size_t st = j - 1;
        while (st > i && ((unsigned char)p[st] & 0xC0) == 0x80) st--;
        uint32_t cp;
        u8_decode(p + st, j - st, &cp);
        if (!py_isspace(cp)) break;
        j = st;
    }
    *b = i;
    *e = j;
}

/* transformers' continue_final_message: keep the output up to the end of the final
 * message's text, dropping the end-of-turn markup the template put after it. */
static int continue_final(const json_t *messages, char *out, size_t *len, err_t *e) {
    const json_t *last = json_array_get(messages, json_array_size(messages) - 1);
    const json_t *content = json_object_get(last, "content");
    const char *msg = NULL;
    size_t mn = 0;
    if (json_is_string(content)) { msg = json_string_value(content); mn = json_string_length(content); }
    else if (json_is_array(content)) {
        for (size_t i = json_array_size(content); i-- > 0;) {
            const json_t *t = json_object_get(json_array_get(content, i), "text");
            if (json_is_string(t)) { msg = json_string_value(t); mn = json_string_length(t); break; }
        }
        if (!msg) return err_set(e, "continue_final_message is set but we could not find any text to continue in the final message!");
    } else return err_set(e, "continue_final_message is set but the final message has no content");
    size_t sb, se;
    py_strip(msg, mn, &sb, &se);
    const char *needle = msg + sb;
    size_t nn = se - sb, at = SIZE_MAX;
    if (nn == 0) at = *len;
    else
        for (size_t k = *len >= nn ? *len - nn + 1 : 0; k-- > 0;)
            if (!memcmp(out + k, needle, nn)) { at = k; break; }
    if (at == SIZE_MAX)
        return err_set(e, "continue_final_message is set but the final message does not appear in the chat after applying the chat template! This can happen if the chat template deletes portions of the final message. Please verify the chat template and final message in your chat to ensure they are compatible.");
    /* rendered[at : at + len(msg.lstrip())] == msg holds only when msg has no leading
     * whitespace and its trailing whitespace survived the template */
    if (sb == 0 && at + mn <= *len && !memcmp(out + at, msg, mn)) *len = at + mn;
    else *len = at + nn;
    out[*len] = 0;
    return 0;
}

int chat_template_render(const chat_template_t *ct, const json_t *input, char **out, size_t *out_len, err_t *e) {
    *out = NULL;
    if (out_len) *out_len = 0;
    if (!json_is_object(input)) return err_set(e, "chat template input must be a JSON object");
    const json_t *messages = json_object_get(input, "messages");
    if (!json_is_array(messages)) return err_set(e, "chat template input: \"messages\" must be an array");
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m)
        if (!json_is_object(m)) return err_set(e, "chat template input: messages[%zu] must be an object", i);
    json_t *vars = json_deep_copy(ct->specials);
    if (!vars) return err_set(e, "out of memory");
    const char *key;
    json_t *val;
    bool cont = false;
    json_object_foreach((json_t *)input, key, val) {
        if (!strcmp(key, "continue_final_message")) { cont = json_is_true(val); continue; }
        json_object_set(vars, key, val);
    }
    if (!json_object_get(vars, "tools")) json_object_set_new(vars, "tools", json_null());
    if (!json_object_get(vars, "documents")) json_object_set_new(vars, "documents", json_null());
    if (!json_object_get(vars, "add_generation_prompt")) json_object_set_new(vars, "add_generation_prompt", json_false());
    if (cont && json_is_true(json_object_get(vars, "add_generation_prompt"))) {
        json_decref(vars);
        return err_set(e, "continue_final_message and add_generation_prompt are not compatible. Use continue_final_message when you want the model to continue the final message, and add_generation_prompt when you want to add a header that will prompt it to start a new assistant message instead.");
    }
    size_t len = 0;
    int rc = jinja_render(ct->t, vars, NULL, NULL, out, &len, e);
    json_decref(vars);
    if (rc) return err_prefix(e, "chat template");
    if (cont && json_array_size(messages) && continue_final(messages, *out, &len, e)) {
        free(*out);
        *out = NULL;
        return -1;
    }
    if (out_len) *out_len = len;
    return 0;
}
