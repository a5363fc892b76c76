/* cmd_chat.c — `kiln chat [MODEL_DIR]`: a conversation in the terminal.
 *
 * Each line you type becomes a user message; the whole conversation is rendered with the
 * model's chat template, tokenized and submitted to the engine, and the reply streams back
 * as it is generated. The engine's prefix cache makes later turns cheap: only the new
 * turn is computed. Ctrl-C stops a reply; Ctrl-D (or /exit) leaves; /reset starts over.
 * Works on a pipe too (one reply per input line), which is how it is tested. */
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "chat/chat_template.h"
#include "cli/cli.h"
#include "kiln.h"
#include "tokenizer/tokenizer.h"

static volatile sig_atomic_t g_interrupt;
static void on_sigint(int sig) { g_interrupt = 1; }

static void usage(FILE *f) {
    fprintf(f, "usage: kiln chat [MODEL_DIR] [--system TEXT] [--max-tokens N] [--temperature T] [--seed S]\n"
               "                 [--threads N] [--kv-cache-gb G] [--backend cpu|cpu-ref|cuda]\n"
               "  Type a message and press Enter; the reply streams back. /reset clears the\n"
               "  conversation, /exit or Ctrl-D leaves, Ctrl-C interrupts a reply.\n");
}

int cmd_chat(int argc, char **argv) {
    const char *dir = NULL, *system_msg = NULL;
    long max_tokens = 256, seed = 0, threads = 0;
    double temp = NAN, kv_gb = 0.5;
    kiln_engine_opts_t o;
    kiln_engine_opts_default(&o);
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) { usage(stdout); return 0; }
        if (f[0] == '-') {
            if (i + 1 >= argc) { fprintf(stderr, "kiln chat: %s needs a value\n", f); return 2; }
            const char *v = argv[++i];
            int bad = 0;
            if (!strcmp(f, "--system")) system_msg = v;
            else if (!strcmp(f, "--max-tokens")) bad = cli_parse_int("chat", f, v, 1, 1 << 20, &max_tokens);
            else if (!strcmp(f, "--temperature")) bad = cli_parse_float("chat", f, v, 0, 100, &temp);
            else if (!strcmp(f, "--seed")) bad = cli_parse_int("chat", f, v, 0, 0x7fffffffffffffffL, &seed);
            else if (!strcmp(f, "--threads")) bad = cli_parse_int("chat", f, v, 1, 1024, &threads);
            else if (!strcmp(f, "--kv-cache-gb")) bad = cli_parse_float("chat", f, v, 0.001, 1e4, &kv_gb);
            else if (!strcmp(f, "--backend")) o.backend = v;
            else { fprintf(stderr, "kiln chat: unknown flag '%s'\n", f); return 2; }
            if (bad) return 2;
        } else if (!dir) dir = f;
        else { fprintf(stderr, "kiln chat: unexpected argument '%s'\n", f); return 2; }
    }
    if (!dir) dir = cli_default_model();
    err_t e = {0};
    chat_template_t *ct = chat_template_load(dir, &e);
    if (!ct) { fprintf(stderr, "kiln chat: %s\n", e.msg); return 1; }
    o.model_dir = dir;
    o.threads = (int)threads;
    o.kv_cache_gb = kv_gb;
    kiln_engine_t *eng = kiln_engine_start(&o, &e);
    if (!eng) { fprintf(stderr, "kiln chat: %s\n", e.msg); chat_template_free(ct); return 1; }
    const struct tokenizer *tok = kiln_engine_tokenizer(eng);
    const model_config_t *c = kiln_engine_config(eng);
    if (!tok) { fprintf(stderr, "kiln chat: %s has no tokenizer.json\n", dir); kiln_engine_stop(eng); chat_template_free(ct); return 1; }
    struct sigaction sa = {0};
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    int tty = isatty(0);
    json_t *messages = json_array();
    if (system_msg) json_array_append_new(messages, json_pack("{s:s, s:s}", "role", "system", "content", system_msg));
    char *line = NULL;
    size_t cap = 0;
    int rc = 0, turn = 0;
    if (tty) fprintf(stderr, "kiln chat with %s (/reset, /exit, Ctrl-D)\n", dir);
    for (;;) {
        if (tty) { fputs("> ", stdout); fflush(stdout); }
        g_interrupt = 0;
        ssize_t nl = getline(&line, &cap, stdin);
        if (nl < 0) break;
        while (nl > 0 && (line[nl - 1] == '\n' || line[nl - 1] == '\r')) line[--nl] = 0;
        if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) break;
        if (!strcmp(line, "/reset")) {
            json_array_clear(messages);
            if (system_msg) json_array_append_new(messages, json_pack("{s:s, s:s}", "role", "system", "content", system_msg));
            continue;
        }
        if (!nl) continue;
        json_array_append_new(messages, json_pack("{s:s, s:s}", "role", "user", "content", line));
        json_t *in = json_pack("{s:O, s:b}", "messages", messages, "add_generation_prompt", 1);
        char *prompt = NULL;
        size_t plen;
        int r = chat_template_render(ct, in, &prompt, &plen, &e);
        json_decref(in);
        if (r) {
            fprintf(stderr, "kiln chat: template: %s\n", e.msg);
            json_array_remove(messages, json_array_size(messages) - 1);
            continue;
        }
        int32_t *ids;
        int n;
        if (tokenizer_encode(tok, prompt, plen, 0, &ids, &n, &e)) {
            fprintf(stderr, "kiln chat: %s\n", e.msg);
            free(prompt);
            json_array_remove(messages, json_array_size(messages) - 1);
            continue;
        }
        free(prompt);
        kiln_request_params_t p = {0};
        p.prompt = ids;
        p.n_prompt = n;
        p.max_tokens = (int)max_tokens;
        if (n + p.max_tokens > c->max_pos) p.max_tokens = c->max_pos - n;
        sampling_defaults(&p.sampling);
        p.sampling.temperature = !isnan(temp) ? (float)temp : (!isnan(c->gen_temperature) ? (float)c->gen_temperature : 0.7f);
        if (!isnan(c->gen_top_p)) p.sampling.top_p = (float)c->gen_top_p;
        if (c->gen_top_k > 0) p.sampling.top_k = c->gen_top_k;
        p.sampling.seed = (uint64_t)seed + (uint64_t)turn++;
        int code;
        kiln_request_t *req = p.max_tokens > 0 ? kiln_submit(eng, &p, &code, &e) : NULL;
        free(ids);
        if (!req) {
            fprintf(stderr, "kiln chat: %s\n", p.max_tokens > 0 ? e.msg : "the conversation fills the context; /reset to start over");
            json_array_remove(messages, json_array_size(messages) - 1);
            continue;
        }
        size_t rlen = 0;
        char *reply = calloc(1, 1);
        for (;;) {
            kiln_event_t ev;
            if (!kiln_request_next(req, &ev, 100)) {
                if (g_interrupt) kiln_cancel(req);
                continue;
            }
            if (ev.text && *ev.text) {
                fputs(ev.text, stdout);
                fflush(stdout);
                size_t tl = strlen(ev.text);
                reply = realloc(reply, rlen + tl + 1);
                memcpy(reply + rlen, ev.text, tl + 1);
                rlen += tl;
            }
            kiln_finish_t fin = ev.finish;
            if (fin == KILN_FINISH_ERROR) fprintf(stderr, "\nkiln chat: %s", ev.error ? ev.error : "error");
            kiln_event_clear(&ev);
            if (fin) break;
        }
        fputs("\n", stdout);
        fflush(stdout);
        kiln_request_free(req);
        json_array_append_new(messages, json_pack("{s:s, s:s}", "role", "assistant", "content", reply));
        free(reply);
    }
    free(line);
    json_decref(messages);
    kiln_engine_stop(eng);
    chat_template_free(ct);
    return rc;
}
