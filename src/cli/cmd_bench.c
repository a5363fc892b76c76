/* cmd_bench.c — `kiln bench MODEL_DIR --prompt-tokens 512 --gen-tokens 128`: prefill and
 * batch-1 decode throughput on a deterministic pseudo-random prompt. Decode also reports
 * the weight bytes read per token and the bandwidth that implies, for roofline ratios.
 *
 * --probe: the roofline's ceiling is measured in the same process, right before and right
 * after each run's decode (after its prefill), with the model's thread count, by the read
 * probe of bench/probe.c (base/bwprobe.c, best of 5 passes over 1 GiB). On a shared VM the
 * ceiling itself moves by 2x within minutes, so each run gets its own ratio — decode GB/s
 * over the higher of its two readings — and the median, best and worst of them are
 * printed, with the load average at each run.
 *
 * Besides the weights, a decode token reads the K/V of every position it attends to: the
 * JSON's kv_bytes_per_token is that stream at the mean decode context (prompt + half the
 * generated tokens; sliding layers capped at their window; hybrid models' recurrent state
 * not counted), and decode_read_gb_s counts weights + K/V. The roofline ratios stay
 * weight-only, as issue 2 defines them; the K/V figure says how much of the gap to the
 * roofline is attention's own traffic. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/time.h>
#include "cli/cli.h"
#include "cli/model_args.h"
#include "base/bwprobe.h"
#include "engine/sampler.h"
#include "kiln.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void usage(FILE *f) {
    fprintf(f, "usage: kiln bench [MODEL_DIR] [--prompt-tokens N] [--gen-tokens M] [--runs R] [--probe] [--json] [options]\n"
               "       kiln bench [MODEL_DIR] --concurrency 1,4,16,64 [--prompt-tokens N] [--gen-tokens M]\n"
               "                  [--shared-prefix P] [--step-tokens S] [--max-batch B] [--kv-cache-gb G]\n"
               "                  [--snapshot-interval N] [--temperature T] [--top-k K] [--top-p P]\n"
               "                  [--warmup-tokens W] [--json]\n"
               "  Without --concurrency: prefill tokens/s over an N-token prompt (one step) and\n"
               "  batch-1 greedy decode tokens/s over M tokens, the best of R runs (default 1).\n"
               "  --probe: measure the read bandwidth (bench/probe.c's loop, same threads) right\n"
               "  before and after each decode run; print each run's decode / roofline ratio and\n"
               "  their median, best and worst.\n"
               "  With it: for each level C, C requests at once through the engine (continuous\n"
               "  batching, prefix cache; the first P prompt tokens shared): aggregate tokens/s\n"
               "  (generated / wall time, prefill included), steady decode tokens/s (tokens made\n"
               "  while every request of the level was decoding, over that window), mean and p95\n"
               "  time to first token, mean inter-token latency (--step-tokens: the engine's token\n"
               "  budget per step, default 512 on the CPU, 2048 on CUDA). Requests decode greedily unless\n"
               "  --temperature T > 0 (then seeded sampling, seed = request index; with --top-k,\n"
               "  --top-p), so sampling's cost per step can be measured. Each level first runs once\n"
               "  untimed (its c requests with prompts of their own, W tokens each; default 8, 0: no\n"
               "  warm-up), so one-time costs such as CUDA graph capture are not in the numbers.\n"
               "  --kv-cache-gb G|auto: the engine's cache, as kiln serve's (default auto).\n%s",
            model_args_help());
}

/* K/V bytes attention reads for one decode token at context ctx (see the top comment). */
/* K and V bytes of one position in one layer of pool p (q8: + a scale per head) */
static double kv_pos_bytes(const kv_pool_t *p) {
    return 2.0 * p->n_kv_heads * (p->head_dim * (double)dtype_size(p->dtype) + (p->dtype == DT_I8 ? 4 : 0));
}

static double kv_bytes_per_token(const model_t *m, double ctx) {
    const kv_pool_t *kv = &m->kv, *sw = &m->kv_swa;
    double row = kv_pos_bytes(kv);
    double win = m->cfg.sliding_window > 0 && m->cfg.sliding_window < ctx ? m->cfg.sliding_window : ctx;
    if (sw->n_layers > 0) return kv->n_layers * row * ctx + sw->n_layers * kv_pos_bytes(sw) * win;
    int sliding = 0;
    for (int i = 0; i < m->cfg.n_layers && i < CFG_MAX_LAYERS; i++) sliding += m->cfg.layer_type[i] == LAYER_SLIDING;
    if (sliding > kv->n_layers) sliding = kv->n_layers;
    return (kv->n_layers - sliding) * row * ctx + sliding * row * win;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* 1-minute load average (/proc/loadavg), -1 where there is none */
static double load_avg(void) {
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1) l = -1;
        fclose(f);
    }
    return l;
}

/* --concurrency: one engine, each level run after the previous one drains. */
static long g_snap_interval; /* --snapshot-interval (hybrid models), 0: the engine's default */
static double g_temp, g_top_p = 1; /* --temperature, --top-p (0, 1: greedy) */
static long g_top_k;                /* --top-k */
static long g_warm = 8;             /* --warmup-tokens: tokens per request of each level's untimed pass */

/* The engine's stats once it has published its last step (its times land after the step's
 * events do): up to a second of 1 ms polls until nothing runs or waits. */
static void wait_idle(kiln_engine_t *eng, kiln_stats_t *st) {
    kiln_stats(eng, st);
    for (int w = 0; w < 1000 && (st->running || st->waiting); w++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
        kiln_stats(eng, st);
    }
}

/* Submits request i of a level: its prompt (the first `shared` tokens common to every request of
 * every level, the rest drawn from seed_base + i), max_tokens to generate, the bench's sampling. */
static kiln_request_t *submit_one(kiln_engine_t *eng, int32_t *prompt, long np, long shared, uint64_t seed_base, long i,
                                  long max_tokens, int V, err_t *e) {
    for (long t = 0; t < np; t++)
        prompt[t] = (int32_t)(rng_uniform(t < shared ? 99 : seed_base + (uint64_t)i, (uint64_t)t) * V);
    kiln_request_params_t rp = {0};
    rp.prompt = prompt;
    rp.n_prompt = (int)np;
    rp.max_tokens = (int)max_tokens;
    sampling_defaults(&rp.sampling);
    rp.sampling.temperature = (float)g_temp;
    rp.sampling.top_k = (int)g_top_k;
    rp.sampling.top_p = (float)g_top_p;
    rp.sampling.seed = (uint64_t)i;
    rp.ignore_eos = 1;
    int code;
    return kiln_submit(eng, &rp, &code, e);
}

/* Each level first runs once untimed: the same c requests (prompts of their own, so nothing
 * of the timed pass is cached by it except a --shared-prefix) generating g_warm tokens each.
 * Whatever a level pays the first time it runs — a CUDA graph captured per batch-size bucket,
 * buffers grown to c rows, pages faulted in — lands there instead of in the timed pass. Without
 * it the first level (usually c = 1) was measured cold: on the H200 llama-3-8b q4 ran 287.6
 * tok/s as the first level and 389.9 as a repeated level of the same run. */
static int warm_level(kiln_engine_t *eng, long c, long np, long shared, int32_t *prompt, int V, int level_no) {
    kiln_request_t **rs = calloc((size_t)c, sizeof(void *));
    err_t e = {0};
    int rc = 0;
    if (!rs) return 1;
    for (long i = 0; i < c; i++) {
        rs[i] = submit_one(eng, prompt, np, shared, 1000 + (uint64_t)level_no * 100000 + 50000, i, g_warm, V, &e);
        if (!rs[i]) { fprintf(stderr, "kiln bench: warm-up: %s\n", e.msg); rc = 1; break; }
    }
    for (long i = 0; i < c; i++) {
        if (!rs[i]) continue;
        kiln_event_t ev;
        while (rc == 0 && kiln_request_next(rs[i], &ev, -1)) {
            int fin = ev.finish;
            kiln_event_clear(&ev);
            if (fin) break;
        }
        kiln_request_free(rs[i]);
    }
    free(rs);
    kiln_stats_t st; /* the warm-up's last step published before the level's first snapshot */
    wait_idle(eng, &st);
    return rc;
}

static int bench_concurrency(const char *dir, const model_args_t *ma, const char *levels, long np, long ng, long shared,
                             long step_tokens, long max_batch, double kv_gb, int json) {
    kiln_engine_opts_t o;
    kiln_engine_opts_default(&o);
    o.model_dir = dir;
    o.backend = ma->backend;
    o.threads = ma->threads;
    o.kv_dtype = ma->kv_dtype;
    o.block_size = ma->block_size;
    o.kv_cache_gb = kv_gb;
    o.step_tokens = (int)step_tokens;
    o.max_batch = (int)max_batch;
    o.load_tokenizer = 0;
    o.snapshot_interval = (int)g_snap_interval;
    o.buffer_dtype = ma->buffer_dtype;
    o.weight_cache_gb = ma->weight_cache_gb;
    err_t e = {0};
    kiln_engine_t *eng = kiln_engine_start(&o, &e);
    if (!eng) { fprintf(stderr, "kiln bench: %s\n", e.msg); return 1; }
    int V = kiln_engine_config(eng)->vocab_size;
    int32_t *prompt = malloc(sizeof(int32_t) * np);
    const char *p = levels;
    int level_no = 0, rc = 0;
    if (json) printf("[");
    while (*p) {
        char *end;
        long c = strtol(p, &end, 10);
        if (end == p || c < 1 || c > 4096 || (*end && *end != ',')) { fprintf(stderr, "kiln bench: --concurrency: bad level at '%s'\n", p); rc = 2; break; }
        p = *end ? end + 1 : end;
        if (g_warm > 0 && warm_level(eng, c, np, shared, prompt, V, level_no)) { rc = 1; break; }
        kiln_request_t **rs = calloc((size_t)c, sizeof(void *));
        double *ttft = calloc((size_t)c, sizeof(double));
        long total_gen = 0, total_cached = 0;
        double t0 = now_s(), first_done = 0, itl_sum = 0;
        long itl_n = 0;
        /* token event times, to measure the steady state in which every request decodes */
        double *tok_t = malloc(sizeof(double) * (size_t)c * (ng > 0 ? ng : 1)), win_lo = 0, win_hi = 1e300;
        long n_tok_t = 0;
        kiln_stats_t st0, st1;
        kiln_stats(eng, &st0);
        for (long i = 0; i < c; i++) { /* prompts: the shared prefix, then a part unique to this request */
            rs[i] = submit_one(eng, prompt, np, shared, 1000 + (uint64_t)level_no * 100000, i, ng, V, &e);
            if (!rs[i]) { fprintf(stderr, "kiln bench: %s\n", e.msg); rc = 1; break; }
        }
        for (long i = 0; rc == 0 && i < c; i++) {
            kiln_event_t ev;
            while (kiln_request_next(rs[i], &ev, -1)) {
                int fin = ev.finish;
                if (ev.token >= 0 && n_tok_t < c * (ng > 0 ? ng : 1)) tok_t[n_tok_t++] = ev.t;
                kiln_event_clear(&ev);
                if (fin) break;
            }
            kiln_request_info_t info;
            kiln_request_info(rs[i], &info);
            ttft[i] = info.t_first_token - info.t_submit;
            total_gen += info.n_generated;
            total_cached += info.n_cached;
            if (info.n_generated > 1) { itl_sum += (info.t_done - info.t_first_token) / (info.n_generated - 1); itl_n++; }
            if (first_done == 0 || info.t_done > first_done) first_done = info.t_done;
            if (info.t_first_token > win_lo) win_lo = info.t_first_token;
            if (info.t_done < win_hi) win_hi = info.t_done;
        }
        wait_idle(eng, &st1);
        /* the engine thread's time per step over the level, by phase (kiln_stats_t) */
        double n_steps = (double)(st1.steps - st0.steps), per = n_steps > 0 ? 1e3 / n_steps : 0;
        double h_sched = (st1.time_schedule_s - st0.time_schedule_s) * per, h_fwd = (st1.time_forward_s - st0.time_forward_s) * per,
               h_post = (st1.time_post_s - st0.time_post_s) * per;
        double rows_step = n_steps > 0 ? (double)(st1.step_rows - st0.step_rows) / n_steps : 0;
        /* steady decode: tokens produced while all c requests were past their first token
         * and none had finished, over that window (prefill and ramp-up/down excluded) */
        long in_win = 0;
        for (long k = 0; k < n_tok_t; k++) in_win += tok_t[k] > win_lo && tok_t[k] <= win_hi;
        double steady = win_hi > win_lo && in_win > 0 ? in_win / (win_hi - win_lo) : 0;
        free(tok_t);
        double wall = first_done - t0, mean_ttft = 0;
        for (long i = 0; i < c; i++) mean_ttft += ttft[i] / c;
        qsort(ttft, (size_t)c, sizeof(double), cmp_double);
        double p95 = ttft[(size_t)((c - 1) * 0.95)];
        if (rc == 0) {
            if (json)
                printf("%s{\"concurrency\": %ld, \"prompt_tokens\": %ld, \"gen_tokens\": %ld, \"shared_prefix\": %ld, "
                       "\"decode_tok_s\": %.2f, \"steady_decode_tok_s\": %.2f, \"ttft_mean_ms\": %.1f, \"ttft_p95_ms\": %.1f, "
                       "\"itl_mean_ms\": %.2f, \"wall_s\": %.3f, \"cached_tokens_mean\": %.1f, \"steps\": %.0f, "
                       "\"rows_per_step\": %.2f, \"host_ms_per_step\": {\"schedule\": %.3f, \"forward\": %.3f, \"post\": %.3f}}",
                       level_no ? ", " : "", c, np, ng, shared, total_gen / wall, steady, mean_ttft * 1e3, p95 * 1e3,
                       itl_n ? itl_sum / itl_n * 1e3 : 0, wall, (double)total_cached / c, n_steps, rows_step, h_sched, h_fwd,
                       h_post);
            else
                printf("concurrency %4ld: %8.2f tok/s aggregate (%.2f steady decode), TTFT mean %8.1f ms p95 %8.1f ms, ITL mean %7.2f ms, "
                       "%.0f prompt tokens cached (%.2f s)\n"
                       "                  %.0f steps, %.1f rows/step; per step: schedule %.3f ms, forward %.3f ms, post %.3f ms\n",
                       c, total_gen / wall, steady, mean_ttft * 1e3, p95 * 1e3, itl_n ? itl_sum / itl_n * 1e3 : 0,
                       (double)total_cached / c, wall, n_steps, rows_step, h_sched, h_fwd, h_post);
            fflush(stdout);
        }
        for (long i = 0; i < c; i++) if (rs[i]) kiln_request_free(rs[i]);
        free(rs);
        free(ttft);
        level_no++;
        if (rc) break;
    }
    if (json) printf("]\n");
    free(prompt);
    kiln_engine_stop(eng);
    return rc;
}

static double tv_s(struct timeval t) { return t.tv_sec + t.tv_usec * 1e-6; }

int cmd_bench(int argc, char **argv) {
    const char *dir = NULL;
    long np = 512, ng = 128, runs = 1, shared = 0, step_tokens = 0 /* the engine's default */, max_batch = 64;
    double kv_gb = 0; /* auto, as kiln serve */
    const char *levels = NULL;
    int json = 0, probe = 0;
    model_args_t ma;
    model_args_defaults(&ma);
    ma.kv_dtype = DT_F16;
    for (int i = 1; i < argc; i++) {
        int r = model_args_parse(&ma, "bench", argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) { usage(stdout); return 0; }
        if (!strcmp(f, "--json")) { json = 1; continue; }
        if (!strcmp(f, "--probe")) { probe = 1; continue; }
        if (f[0] == '-') {
            if (i + 1 >= argc) { fprintf(stderr, "kiln bench: %s needs a value\n", f); return 2; }
            const char *v = argv[++i];
            int bad = 0; /* flags without a parsed value (--concurrency) leave it 0 */
            if (!strcmp(f, "--prompt-tokens")) bad = cli_parse_int("bench", f, v, 1, 1 << 20, &np);
            else if (!strcmp(f, "--gen-tokens")) bad = cli_parse_int("bench", f, v, 0, 1 << 20, &ng);
            else if (!strcmp(f, "--runs")) bad = cli_parse_int("bench", f, v, 1, 100, &runs);
            else if (!strcmp(f, "--concurrency")) levels = v;
            else if (!strcmp(f, "--shared-prefix")) bad = cli_parse_int("bench", f, v, 0, 1 << 20, &shared);
            else if (!strcmp(f, "--warmup-tokens")) bad = cli_parse_int("bench", f, v, 0, 1 << 20, &g_warm);
            else if (!strcmp(f, "--step-tokens")) bad = cli_parse_int("bench", f, v, 1, 1 << 20, &step_tokens);
            else if (!strcmp(f, "--max-batch")) bad = cli_parse_int("bench", f, v, 1, 4096, &max_batch);
            else if (!strcmp(f, "--kv-cache-gb")) bad = cli_parse_kv_gb("bench", f, v, 0.001, 1e4, &kv_gb);
            else if (!strcmp(f, "--snapshot-interval")) bad = cli_parse_int("bench", f, v, 1, 1 << 20, &g_snap_interval);
            else if (!strcmp(f, "--temperature")) bad = cli_parse_float("bench", f, v, 0, 100, &g_temp);
            else if (!strcmp(f, "--top-k")) bad = cli_parse_int("bench", f, v, 0, 1 << 30, &g_top_k);
            else if (!strcmp(f, "--top-p")) bad = cli_parse_float("bench", f, v, 1e-6, 1, &g_top_p);
            else { fprintf(stderr, "kiln bench: unknown flag '%s'\n", f); return 2; }
            if (bad) return 2;
        } else if (!dir) dir = f;
        else { fprintf(stderr, "kiln bench: unexpected argument '%s'\n", f); return 2; }
    }
    if (!dir) dir = cli_default_model();
    if (shared > np) { fprintf(stderr, "kiln bench: --shared-prefix %ld is longer than --prompt-tokens %ld\n", shared, np); return 2; }
    if (levels) return bench_concurrency(dir, &ma, levels, np, ng, shared, step_tokens, max_batch, kv_gb, json);
    model_t *m = model_args_load(&ma, "bench", dir, (int)(np + ng + 1), 1);
    if (!m) return 1;
    int V = m->cfg.vocab_size, T = (int)np, rc = 1;
    int32_t *tok = malloc(sizeof(int32_t) * (np + ng + 1)), *pos = malloc(sizeof(int32_t) * np);
    float *logits = malloc(sizeof(float) * V);
    for (int i = 0; i < T; i++) { tok[i] = (int32_t)(rng_uniform(1234, (uint64_t)i) * V); pos[i] = i; }
    double best_pf = 1e30, best_dc = 1e30;
    err_t e = {0};
    /* Device sampling as the engine decides it (engine.c): the logits stay in backend memory */
    const char *ds = getenv("KILN_DEVICE_SAMPLING");
    int dev = m->be->ops->sample && m->dev_logits_ok && !(ds && !strcmp(ds, "0"));
    sample_row_t greedy = {.temperature = 0, .top_p = 1, .min_p = 0, .repetition_penalty = 1};
    sample_args_t sa = {1, V, &greedy, NULL, NULL, NULL, NULL};
    /* --probe: per run, ceiling before/after decode, decode tok/s, 1-minute load */
    bwprobe_t *bw = NULL;
    double *pr_b = calloc((size_t)runs, sizeof(double)), *pr_a = calloc((size_t)runs, sizeof(double)),
           *pr_dc = calloc((size_t)runs, sizeof(double)), *pr_ld = calloc((size_t)runs, sizeof(double)),
           *ratio = calloc((size_t)runs, sizeof(double));
    /* every decode token's own time (all runs): a slow run that is slow throughout (a state of
     * the machine or of the process) reads differently from one with a few stalls */
    double *tok_ms = calloc((size_t)(runs * ng + 1), sizeof(double)), *cpu_wall = calloc((size_t)runs, sizeof(double));
    long *nivcsw = calloc((size_t)runs, sizeof(long));
    if (probe && ng > 0 && !(bw = bwprobe_create(1024))) { fprintf(stderr, "kiln bench: --probe: cannot allocate 1 GiB\n"); goto done; }
    kv_seq_t seq;
    kv_seq_t *seqp = &seq;
    for (int run = 0; run < runs; run++) {
        kv_seq_init(&seq);
        if (kv_seq_reserve(&seq, &m->kv, (int)(np + ng + 1), &e)) goto fail;
        int32_t rs[2] = {0, T}, li = T - 1;
        batch_t b = {1, T, tok, pos, rs, &seqp, &li, 1};
        double t0 = now_s();
        if (model_forward(m, &b, dev ? NULL : logits, &e)) goto fail;
        /* the prompt's pick: on the device it is what waits for the prefill (only the token id
         * comes back), so it belongs to the prefill's time, not to the decode window */
        if (dev) m->be->ops->sample(m->be, &tok[T], m->dev_logits, &sa);
        double t1 = now_s(), pf_s = t1 - t0;
        if (bw) {
            pr_ld[run] = load_avg();
            pr_b[run] = bwprobe_read_gbs(bw, m->be->n_threads, 5);
            t1 = now_s();
        }
        double tprev = t1;
        struct rusage ru0, ru1;
        getrusage(RUSAGE_SELF, &ru0);
        for (int g = 0; g < ng; g++) {
            /* greedy, as the engine and kiln generate pick it: on the device where the engine
             * samples there (only the token id comes back), else argmax_first on the host */
            if (!dev) tok[T + g] = argmax_first(logits, V);
            int32_t p = T + g, rs1[2] = {0, 1}, l0 = 0;
            batch_t d = {1, 1, &tok[T + g], &p, rs1, &seqp, &l0, 1};
            if (model_forward(m, &d, dev ? NULL : logits, &e)) goto fail;
            /* on the device the step's pick waits for it (the host path's download did) */
            if (dev) m->be->ops->sample(m->be, &tok[T + g + 1], m->dev_logits, &sa);
            double tg = now_s();
            tok_ms[run * ng + g] = (tg - tprev) * 1e3;
            tprev = tg;
        }
        double t2 = now_s();
        getrusage(RUSAGE_SELF, &ru1);
        /* the process's CPU time over the decode window per second of it (about the thread
         * count when every thread ran throughout: the workers spin between matmuls) and the
         * times a thread was preempted: a slow run with fewer CPUs than threads was not
         * memory-bound */
        cpu_wall[run] = (tv_s(ru1.ru_utime) + tv_s(ru1.ru_stime) - tv_s(ru0.ru_utime) - tv_s(ru0.ru_stime)) / (t2 - t1);
        nivcsw[run] = ru1.ru_nivcsw - ru0.ru_nivcsw;
        if (bw) {
            pr_a[run] = bwprobe_read_gbs(bw, m->be->n_threads, 5);
            pr_dc[run] = ng / (t2 - t1);
            /* the higher reading: a burst of other work during one probe lowers it, and must not
             * raise the ratio */
            ratio[run] = pr_dc[run] * (double)m->weight_bytes / 1e9 / (pr_b[run] > pr_a[run] ? pr_b[run] : pr_a[run]);
        }
        if (pf_s < best_pf) best_pf = pf_s;
        if (ng && t2 - t1 < best_dc) best_dc = t2 - t1;
        kv_seq_free(&seq, &m->kv);
    }
    {
        double pf = T / best_pf, dc = ng ? ng / best_dc : 0;
        double gbs = dc * (double)m->weight_bytes / 1e9;
        double kvb = ng ? kv_bytes_per_token(m, np + (ng + 1) / 2.0) : 0, rgbs = dc * ((double)m->weight_bytes + kvb) / 1e9;
        double sr[100];
        for (long r = 0; r < runs; r++) sr[r] = ratio[r];
        qsort(sr, (size_t)runs, sizeof(double), cmp_double);
        double med = runs % 2 ? sr[runs / 2] : (sr[runs / 2 - 1] + sr[runs / 2]) / 2;
        size_t nt = (size_t)(runs * ng), huge_end = model_weight_huge_bytes(m, NULL);
        qsort(tok_ms, nt, sizeof(double), cmp_double);
#define TOK_PCT(q) (nt ? tok_ms[(size_t)((nt - 1) * (q) + 0.5)] : 0.0)
        if (json) {
            printf("{\"model\": \"%s\", \"backend\": \"%s\", \"simd\": \"%s\", \"threads\": %d, \"prompt_tokens\": %ld, "
                   "\"gen_tokens\": %ld, \"greedy_pick\": \"%s\", \"prefill_tok_s\": %.2f, \"decode_tok_s\": %.2f, \"weight_bytes\": %zu, "
                   "\"decode_weight_gb_s\": %.6g, \"kv_bytes_per_token\": %.0f, \"decode_read_gb_s\": %.6g, \"params\": %lld, \"kiln\": \"%s\"",
                   dir, ma.backend, backend_simd_name(m->be), m->be->n_threads, np, ng, dev ? "device" : "host", pf, dc, m->weight_bytes, gbs,
                   kvb, rgbs, (long long)m->n_params, cli_version());
            printf(", \"kv_dtype\": \"%s\", \"weight_copy_bytes\": %zu, \"weight_huge_bytes\": %zu, \"weight_huge_bytes_end\": %zu",
                   kv_dtype_name(m->kv.dtype), m->weight_copy_bytes, m->weight_huge_bytes, huge_end);
            if (nt)
                printf(", \"decode_token_ms\": {\"min\": %.3f, \"p10\": %.3f, \"p50\": %.3f, \"p90\": %.3f, \"max\": %.3f}", TOK_PCT(0),
                       TOK_PCT(0.1), TOK_PCT(0.5), TOK_PCT(0.9), TOK_PCT(1));
            if (nt) {
                printf(", \"decode_runs\": [");
                for (long r = 0; r < runs; r++) printf("%s{\"cpu_per_wall\": %.2f, \"preempted\": %ld}", r ? ", " : "", cpu_wall[r], nivcsw[r]);
                printf("]");
            }
            if (bw) {
                printf(", \"roofline_median\": %.4f, \"roofline_best\": %.4f, \"roofline_worst\": %.4f, \"probe_runs\": [", med,
                       sr[runs - 1], sr[0]);
                for (long r = 0; r < runs; r++)
                    printf("%s{\"decode_tok_s\": %.2f, \"probe_before_gb_s\": %.2f, \"probe_after_gb_s\": %.2f, \"ratio\": %.4f, "
                           "\"load1\": %.2f}", r ? ", " : "", pr_dc[r], pr_b[r], pr_a[r], ratio[r], pr_ld[r]);
                printf("]");
            }
            printf("}\n");
        }
        else {
            printf("model %s (%s, %s kernels, %d threads, %s KV cache)\n", dir, ma.backend, backend_simd_name(m->be), m->be->n_threads,
                   kv_dtype_name(m->kv.dtype));
            printf("prefill: %ld tokens in %.3f s = %.1f tok/s\n", np, best_pf, pf);
            if (ng) printf("decode:  %ld tokens in %.3f s = %.2f tok/s (%.1f MB weights/token -> %.2f GB/s; + %.1f MB K/V -> %.2f GB/s)\n",
                           ng, best_dc, dc, m->weight_bytes / 1e6, gbs, kvb / 1e6, rgbs);
            if (nt) printf("decode token ms over %ld runs: min %.2f, p10 %.2f, median %.2f, p90 %.2f, max %.2f\n", runs, TOK_PCT(0), TOK_PCT(0.1),
                           TOK_PCT(0.5), TOK_PCT(0.9), TOK_PCT(1));
            for (long r = 0; nt && r < runs; r++)
                printf("run %ld: decode CPU time %.2f s per second, %ld preemptions\n", r + 1, cpu_wall[r], nivcsw[r]);
            if (m->weight_copy_bytes)
                printf("weights: %.0f of %.0f MB of the copy in 2 MB pages at load, %.0f MB at the end\n", m->weight_huge_bytes / 1e6,
                       m->weight_copy_bytes / 1e6, huge_end / 1e6);
            for (long r = 0; bw && r < runs; r++)
                printf("run %ld: decode %.2f tok/s = %.2f GB/s, probe %.2f GB/s before, %.2f after: %.1f%% of the roofline (load %.2f)\n",
                       r + 1, pr_dc[r], pr_dc[r] * m->weight_bytes / 1e9, pr_b[r], pr_a[r], 100 * ratio[r], pr_ld[r]);
            if (bw) printf("decode / roofline over %ld runs: median %.1f%%, best %.1f%%, worst %.1f%%\n", runs, 100 * med,
                           100 * sr[runs - 1], 100 * sr[0]);
        }
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "kiln bench: %s\n", e.msg);
    kv_seq_free(&seq, &m->kv);
done:
    bwprobe_free(bw);
    free(pr_b); free(pr_a); free(pr_dc); free(pr_ld); free(ratio); free(tok_ms); free(cpu_wall); free(nivcsw);
    free(tok); free(pos); free(logits);
    model_free(m);
    return rc;
}
