/* cmd_serve.c — `kiln serve [MODEL_DIR]`: load the model, start the engine, serve the
 * OpenAI and Anthropic APIs until SIGINT or SIGTERM, then shut down cleanly (streams in
 * flight get a final event, the engine stops, the process exits 0).
 *
 * Signals are blocked before any thread starts, so every thread inherits the mask and
 * the main thread alone receives them through sigwait: no async-signal-safety puzzles. */
#ifdef KILN_HAVE_SERVER
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/log.h"
#include "cli/cli.h"
#include "cli/model_args.h"
#include "kiln.h"
#include "server/server.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: kiln serve [MODEL_DIR] [options]\n"
            "  Serve the OpenAI (/v1/chat/completions, /v1/completions, /v1/models) and Anthropic\n"
            "  (/v1/messages) APIs, plus /health, /metrics, /tokenize, /detokenize. See docs/api.md.\n"
            "  MODEL_DIR defaults to $KILN_MODEL or models/kiln-tiny.\n\n"
            "  --host ADDR             address to bind (default 127.0.0.1)\n"
            "  --port N                TCP port (default 8080; 0 picks a free one)\n"
            "  --api-key KEY           require 'Authorization: Bearer KEY' or 'x-api-key: KEY'\n"
            "                          (default $KILN_API_KEY; /health stays open)\n"
            "  --model-id NAME         model name in /v1/models (default: MODEL_DIR's basename)\n"
            "  --max-body BYTES        largest request body (default 33554432 = 32 MiB)\n"
            "  --max-queue N           waiting requests before 429 (default 1024)\n"
            "  --ctx N                 context length (default: the model's)\n"
            "  --default-max-tokens N  max_tokens when a request gives none (default: rest of context)\n"
            "  --http-threads N        HTTP worker threads (default 2)\n"
            "  --cors-origin LIST      browser origins allowed to call the API: comma-separated\n"
            "                          origins, '*' (any) or 'none' (default: pages served from\n"
            "                          localhost, 127.0.0.1 or [::1] on any port)\n"
            "  --tool-format F         hermes|qwen-xml|llama-json|gemma4 (default: from the template)\n"
            "  --kv-cache-gb X|auto    KV cache size in GB (default auto: CUDA takes the device memory\n"
            "                          left after the weights less a reserve for activations (6 %%,\n"
            "                          at least 2 GiB, more for big steps); the CPU what one request\n"
            "                          at the full context needs, 1 GB to a quarter of RAM)\n"
            "  --step-tokens N         token budget per engine step (default 512 on the CPU, 2048 on CUDA)\n"
            "  --max-batch N           rows per engine step (default 64)\n"
            "  --no-prefix-cache       do not reuse cached prompt prefixes\n"
            "  --snapshot-interval N   hybrid models (Qwen3.5): save the recurrent state every N\n"
            "                          prompt tokens for prefix reuse (rounded up to whole blocks;\n"
            "                          default 256)\n"
            "  --snapshot-share X      hybrid models: share of --kv-cache-gb kept for those\n"
            "                          snapshots, 0.01-0.95 (default 0.25)\n"
            "%s",
            model_args_help());
}

int cmd_serve(int argc, char **argv) {
    const char *dir = NULL;
    model_args_t ma;
    model_args_defaults(&ma);
    ma.kv_dtype = DT_F16;
    server_opts_t so;
    server_opts_default(&so);
    kiln_engine_opts_t eo;
    kiln_engine_opts_default(&eo);
    const char *env_key = getenv("KILN_API_KEY");
    if (env_key && *env_key) so.api_key = env_key;
    for (int i = 1; i < argc; i++) {
        int r = model_args_parse(&ma, "serve", argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) { usage(stdout); return 0; }
        if (!strcmp(f, "--no-prefix-cache")) { eo.prefix_cache = 0; continue; }
        if (f[0] == '-' && f[1]) {
            if (i + 1 >= argc) { fprintf(stderr, "kiln serve: %s needs a value\n", f); return 2; }
            const char *v = argv[++i];
            long n = 0;
            double x = 0;
            int bad = 0;
            if (!strcmp(f, "--host")) so.host = v;
            else if (!strcmp(f, "--port")) { bad = cli_parse_int("serve", f, v, 0, 65535, &n); so.port = (int)n; }
            else if (!strcmp(f, "--api-key")) so.api_key = v;
            else if (!strcmp(f, "--model-id")) so.model_id = v;
            else if (!strcmp(f, "--tool-format")) so.tool_format = v;
            else if (!strcmp(f, "--cors-origin")) so.cors_origin = v;
            else if (!strcmp(f, "--max-body")) { bad = cli_parse_int("serve", f, v, 1024, 1L << 34, &n); so.max_body = (size_t)n; }
            else if (!strcmp(f, "--max-queue")) { bad = cli_parse_int("serve", f, v, 1, 1 << 20, &n); eo.max_queue = (int)n; }
            else if (!strcmp(f, "--ctx")) { bad = cli_parse_int("serve", f, v, 16, 1 << 24, &n); eo.ctx_len = (int)n; }
            else if (!strcmp(f, "--default-max-tokens")) { bad = cli_parse_int("serve", f, v, 1, 1 << 24, &n); so.default_max_tokens = (int)n; }
            else if (!strcmp(f, "--http-threads")) { bad = cli_parse_int("serve", f, v, 1, 64, &n); so.http_threads = (int)n; }
            else if (!strcmp(f, "--kv-cache-gb")) { bad = cli_parse_kv_gb("serve", f, v, 0.0001, 4096, &x); eo.kv_cache_gb = x; }
            else if (!strcmp(f, "--step-tokens")) { bad = cli_parse_int("serve", f, v, 1, 1 << 20, &n); eo.step_tokens = (int)n; }
            else if (!strcmp(f, "--max-batch")) { bad = cli_parse_int("serve", f, v, 1, 4096, &n); eo.max_batch = (int)n; }
            else if (!strcmp(f, "--snapshot-interval")) { bad = cli_parse_int("serve", f, v, 1, 1 << 20, &n); eo.snapshot_interval = (int)n; }
            else if (!strcmp(f, "--snapshot-share")) { bad = cli_parse_float("serve", f, v, 0.01, 0.95, &x); eo.snapshot_share = x; }
            else { fprintf(stderr, "kiln serve: unknown flag '%s' (kiln serve --help)\n", f); return 2; }
            if (bad) return 2;
        } else if (!dir) dir = f;
        else { fprintf(stderr, "kiln serve: unexpected argument '%s'\n", f); return 2; }
    }
    if (!dir) dir = cli_default_model();
    eo.model_dir = dir;
    eo.backend = ma.backend;
    eo.threads = ma.threads;
    eo.kv_dtype = ma.kv_dtype;
    eo.block_size = ma.block_size;
    eo.weight_cache_gb = ma.weight_cache_gb;

    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    err_t e = {0};
    log_info("kiln serve: kiln %s, model %s, backend %s", cli_version(), dir, eo.backend ? eo.backend : "cpu");
    kiln_engine_t *eng = kiln_engine_start(&eo, &e);
    if (!eng) { fprintf(stderr, "kiln serve: %s\n", e.msg); return 1; }
    server_t *srv = server_start(eng, &so, &e);
    if (!srv) {
        fprintf(stderr, "kiln serve: %s\n", e.msg);
        kiln_engine_stop(eng);
        return 1;
    }
    log_info("kiln serve: listening on http://%s:%d%s", so.host, server_port(srv), so.api_key ? " (API key required)" : "");
    int sig = 0;
    sigwait(&sigs, &sig);
    log_info("kiln serve: %s, shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
    server_stop(srv);
    kiln_engine_stop(eng);
    return 0;
}
#else
#include <stdio.h>
#include "cli/cli.h"
int cmd_serve(int argc, char **argv) {
    fprintf(stderr, "kiln serve: this kiln was built without the HTTP server (libmicrohttpd was not found)\n");
    return 1;
}
#endif
