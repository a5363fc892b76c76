/* cmd_generate.c — `kiln generate MODEL_DIR --prompt-ids ... --max-tokens N`: prefill the
 * prompt in one step, then decode token by token with the sampler. --json prints one
 * object with the generated ids and timings. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli/cli.h"
#include "cli/model_args.h"
#include "base/file.h"
#include "engine/sampler.h"
#include "engine/sample_dev.h"
#include "tokenizer/tokenizer.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void usage(FILE *f) {
    fprintf(f, "usage: kiln generate [MODEL_DIR] (\"text prompt\" | --prompt-ids 1,2,3) [--max-tokens N] [sampling] [--json]\n"
               "  Generates after the prompt and prints the text (ids with --prompt-ids). A text\n"
               "  prompt is tokenized with the model's tokenizer.json (special tokens added as its\n"
               "  post-processor says). MODEL_DIR defaults to the bundled model.\n"
               "  --max-tokens N          tokens to generate (default 64)\n"
               "  --temperature T         0 = greedy (default: generation_config.json, else greedy)\n"
               "  --top-k K  --top-p P  --min-p M\n"
               "  --repetition-penalty R  --presence-penalty P  --frequency-penalty F\n"
               "  --seed S                RNG seed (default 0)\n"
               "  --ignore-eos            do not stop at end-of-sequence tokens\n"
               "  --json                  print {\"tokens\": [...], timings} as one JSON object\n%s",
            model_args_help());
}

int cmd_generate(int argc, char **argv) {
    const char *dir = NULL, *ids_s = NULL, *text = NULL;
    tokenizer_t *tok = NULL;
    detok_t *dt = NULL;
    long max_tokens = 64, top_k = -1, seed = 0;
    double temp = NAN, top_p = NAN, min_p = NAN, rep = NAN, pres = 0, freq = 0;
    int json = 0, ignore_eos = 0;
    model_args_t ma;
    model_args_defaults(&ma);
    for (int i = 1; i < argc; i++) {
        int r = model_args_parse(&ma, "generate", argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) { usage(stdout); return 0; }
        if (!strcmp(f, "--json")) { json = 1; continue; }
        if (!strcmp(f, "--ignore-eos")) { ignore_eos = 1; continue; }
        if (f[0] == '-' && f[1] == '-') {
            if (i + 1 >= argc) { fprintf(stderr, "kiln generate: %s needs a value\n", f); return 2; }
            const char *v = argv[++i];
            int bad = 0;
            if (!strcmp(f, "--prompt-ids")) ids_s = v;
            else if (!strcmp(f, "--max-tokens")) bad = cli_parse_int("generate", f, v, 0, 1 << 20, &max_tokens);
            else if (!strcmp(f, "--temperature")) bad = cli_parse_float("generate", f, v, 0, 100, &temp);
            else if (!strcmp(f, "--top-k")) bad = cli_parse_int("generate", f, v, 0, 1 << 24, &top_k);
            else if (!strcmp(f, "--top-p")) bad = cli_parse_float("generate", f, v, 1e-9, 1, &top_p);
            else if (!strcmp(f, "--min-p")) bad = cli_parse_float("generate", f, v, 0, 1, &min_p);
            else if (!strcmp(f, "--repetition-penalty")) bad = cli_parse_float("generate", f, v, 1e-6, 10, &rep);
            else if (!strcmp(f, "--presence-penalty")) bad = cli_parse_float("generate", f, v, -2, 2, &pres);
            else if (!strcmp(f, "--frequency-penalty")) bad = cli_parse_float("generate", f, v, -2, 2, &freq);
            else if (!strcmp(f, "--seed")) bad = cli_parse_int("generate", f, v, 0, 0x7fffffffffffffffL, &seed);
            else { fprintf(stderr, "kiln generate: unknown flag '%s'\n", f); return 2; }
            if (bad) return 2;
        } else if (!dir && !text) dir = f;
        else if (!text) text = f;
        else { fprintf(stderr, "kiln generate: unexpected argument '%s'\n", f); return 2; }
    }
    /* one positional argument: a model directory if it is one, else the prompt */
    if (dir && !text && !ids_s && !dir_exists(dir)) { text = dir; dir = NULL; }
    if (!dir) dir = cli_default_model();
    if (!ids_s && !text) { fprintf(stderr, "kiln generate: give a prompt: \"text\" or --prompt-ids 1,2,3\n"); return 2; }
    if (ids_s && text) { fprintf(stderr, "kiln generate: give either a text prompt or --prompt-ids, not both\n"); return 2; }
    int *ids = NULL, n = 0;
    if (ids_s && cli_parse_ids("generate", "--prompt-ids", ids_s, &ids, &n)) return 2;
    if (text) {
        err_t te = {0};
        tok = tokenizer_load(dir, &te);
        if (!tok) { fprintf(stderr, "kiln generate: %s\n", te.msg); return 1; }
        int32_t *tids;
        if (tokenizer_encode(tok, text, strlen(text), 1, &tids, &n, &te)) {
            fprintf(stderr, "kiln generate: prompt: %s\n", te.msg);
            tokenizer_free(tok);
            return 2;
        }
        ids = malloc(sizeof(int) * (n + 1));
        for (int i = 0; i < n; i++) ids[i] = tids[i];
        free(tids);
        dt = detok_new(tok, 1);
    }
    model_t *m = model_args_load(&ma, "generate", dir, n + (int)max_tokens + 1, 1);
    if (!m) { free(ids); return 1; }
    const model_config_t *c = &m->cfg;
    int V = c->vocab_size, rc = 1;
    for (int i = 0; i < n; i++)
        if (ids[i] >= V) {
            fprintf(stderr, "kiln generate: --prompt-ids: token %d (item %d) is outside the vocabulary (0..%d)\n", ids[i], i + 1, V - 1);
            free(ids); model_free(m); if (tok) tokenizer_free(tok); return 2;
        }
    sampling_params_t sp;
    sampling_defaults(&sp);
    sp.temperature = !isnan(temp) ? (float)temp : (!isnan(c->gen_temperature) ? (float)c->gen_temperature : 0.f);
    sp.top_k = top_k >= 0 ? (int)top_k : (c->gen_top_k > 0 ? c->gen_top_k : 0);
    sp.top_p = !isnan(top_p) ? (float)top_p : (!isnan(c->gen_top_p) ? (float)c->gen_top_p : 1.f);
    sp.min_p = !isnan(min_p) ? (float)min_p : (!isnan(c->gen_min_p) ? (float)c->gen_min_p : 0.f);
    sp.repetition_penalty = !isnan(rep) ? (float)rep : (!isnan(c->gen_repetition_penalty) ? (float)c->gen_repetition_penalty : 1.f);
    sp.presence_penalty = (float)pres;
    sp.frequency_penalty = (float)freq;
    sp.seed = (uint64_t)seed;
    err_t e = {0};
    if (sampling_validate(&sp, V, &e)) { fprintf(stderr, "kiln generate: %s\n", e.msg); free(ids); model_free(m); return 2; }

    int32_t *hist = malloc(sizeof(int32_t) * (n + max_tokens + 1));
    int32_t *pos = malloc(sizeof(int32_t) * (n + 1));
    float *logits = malloc(sizeof(float) * V);
    sampler_scratch_t ss;
    sampler_scratch_init(&ss, V);
    /* a backend that samples on the device (CUDA) keeps the logits there and sends back the
     * token (engine/sample_dev.h), as the engine does; KILN_DEVICE_SAMPLING=0: on the host */
    const char *dsv = getenv("KILN_DEVICE_SAMPLING");
    sample_dev_t *sd = m->be->ops->sample && m->dev_logits_ok && !(dsv && !strcmp(dsv, "0")) ? sample_dev_new(V) : NULL;
    float *fl = sd ? NULL : logits;
    for (int i = 0; i < n; i++) { hist[i] = ids[i]; pos[i] = i; }
    kv_seq_t seq;
    kv_seq_init(&seq);
    kv_seq_t *seqp = &seq;
    int n_gen = 0;
    const char *finish = "length";
    double t0 = now_s(), t_first = 0;
    if (n == 0) { fprintf(stderr, "kiln generate: the prompt is empty\n"); goto done; }
    if (kv_seq_reserve(&seq, &m->kv, n, &e)) goto fail;
    {
        int32_t rs[2] = {0, n}, li = n - 1;
        batch_t b = {1, n, hist, pos, rs, &seqp, &li, 1};
        if (max_tokens > 0 && model_forward(m, &b, fl, &e)) goto fail;
    }
    t_first = now_s();
    while (n_gen < max_tokens) {
        int32_t tok;
        if (!sd) tok = sample_token(&sp, logits, V, hist, n + n_gen, n, (uint64_t)n_gen, &ss);
        else if (sample_dev_one(sd, m->be, m->dev_logits, &sp, hist, n + n_gen, n, (uint64_t)n_gen, &tok)) {
            err_set(&e, "out of memory for device sampling");
            goto fail;
        }
        hist[n + n_gen++] = tok;
        int is_eos = 0;
        for (int k = 0; k < c->n_eos; k++) if (c->eos_ids[k] == tok) is_eos = 1;
        if (!json && dt) {
            char *piece = NULL;
            err_t de;
            if (!is_eos && detok_push(dt, tok, &piece, &de) == 0) { fputs(piece, stdout); fflush(stdout); }
            free(piece);
        } else if (!json) { printf("%d%s", tok, n_gen < max_tokens && !(is_eos && !ignore_eos) ? " " : "\n"); fflush(stdout); }
        if (is_eos && !ignore_eos) { finish = "stop"; break; }
        if (n_gen == max_tokens) break;
        int p = n + n_gen - 1;
        if (kv_seq_reserve(&seq, &m->kv, p + 1, &e)) goto fail;
        int32_t rs[2] = {0, 1}, li = 0, pp = p;
        batch_t b = {1, 1, &hist[p], &pp, rs, &seqp, &li, 1};
        if (model_forward(m, &b, fl, &e)) goto fail;
    }
    {
        double t_end = now_s();
        double prefill_s = t_first - t0, decode_s = t_end - t_first;
        if (json) {
            printf("{\"tokens\": [");
            for (int i = 0; i < n_gen; i++) printf("%s%d", i ? ", " : "", hist[n + i]);
            printf("]");
            if (tok) {
                err_t de;
                int gen_eos = n_gen > 0 && strcmp(finish, "stop") == 0;
                char *txt = tokenizer_decode(tok, hist + n, n_gen - gen_eos, 1, &de);
                json_t *js = json_string(txt ? txt : "");
                char *enc = json_dumps(js, JSON_ENCODE_ANY);
                printf(", \"text\": %s", enc ? enc : "\"\"");
                free(enc);
                json_decref(js);
                free(txt);
            }
            printf(", \"prompt_tokens\": %d, \"completion_tokens\": %d, \"finish_reason\": \"%s\", "
                   "\"prefill_ms\": %.3f, \"decode_ms\": %.3f, \"prefill_tok_s\": %.2f, \"decode_tok_s\": %.2f}\n",
                   n, n_gen, finish, prefill_s * 1e3, decode_s * 1e3, prefill_s > 0 ? n / prefill_s : 0,
                   decode_s > 0 && n_gen > 1 ? (n_gen - 1) / decode_s : 0);
        } else if (dt) {
            char *tail = detok_flush(dt);
            printf("%s\n", tail ? tail : "");
            free(tail);
        } else if (n_gen == 0) printf("\n");
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "kiln generate: %s\n", e.msg);
done:
    kv_seq_free(&seq, &m->kv);
    sampler_scratch_free(&ss);
    sample_dev_free(sd);
    free(hist); free(pos); free(logits); free(ids);
    if (dt) detok_free(dt);
    if (tok) tokenizer_free(tok);
    model_free(m);
    return rc;
}
