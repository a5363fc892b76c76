/* metrics.c — Prometheus counters and histograms for /metrics.
 *
 * One mutex guards everything: it is taken a few times per request and once per token
 * (uncontended, tens of nanoseconds), which is noise next to a forward pass; per-thread shards would buy
 * nothing measurable. Engine-side numbers (queue depth, running rows, KV blocks, prefix
 * hits) are read from kiln_stats at scrape time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "server/srv.h"

/* Seconds; one scale for TTFT, inter-token latency and request duration. */
static const double bounds[HIST_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};

void metrics_init(metrics_t *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
}

void metrics_free(metrics_t *m) { pthread_mutex_destroy(&m->mu); }

void metrics_request(metrics_t *m, route_t r, int status) {
    if (status < 100 || status >= 600) status = 500;
    pthread_mutex_lock(&m->mu);
    m->req_by_status[r][status]++;
    pthread_mutex_unlock(&m->mu);
}

static void observe(hist_t *h, double v) {
    int i = 0;
    while (i < HIST_BUCKETS && v > bounds[i]) i++;
    h->b[i]++;
    h->n++;
    h->sum += v;
}

void metrics_observe(metrics_t *m, hist_t *h, double v) {
    pthread_mutex_lock(&m->mu);
    observe(h, v);
    pthread_mutex_unlock(&m->mu);
}

void metrics_tokens(metrics_t *m, int prompt, int completion, int cached) {
    pthread_mutex_lock(&m->mu);
    m->prompt_tokens += (uint64_t)prompt;
    m->completion_tokens += (uint64_t)completion;
    m->cached_tokens += (uint64_t)cached;
    pthread_mutex_unlock(&m->mu);
}

static void hist_out(sbuf_t *b, const char *name, const char *help, const hist_t *h) {
    sbuf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < HIST_BUCKETS; i++) {
        cum += h->b[i];
        sbuf_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, bounds[i], (unsigned long long)cum);
    }
    cum += h->b[HIST_BUCKETS];
    sbuf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name, (unsigned long long)cum, name, h->sum,
                name, (unsigned long long)h->n);
}

char *metrics_render(metrics_t *m, kiln_engine_t *eng) {
    sbuf_t b = {0};
    kiln_stats_t st;
    kiln_stats(eng, &st);
    pthread_mutex_lock(&m->mu);
    sbuf_adds(&b, "# HELP kiln_requests_total HTTP requests by route and status (499: client went away mid-request).\n"
                  "# TYPE kiln_requests_total counter\n");
    for (int r = 0; r < R_COUNT; r++)
        for (int s = 100; s < 600; s++)
            if (m->req_by_status[r][s])
                sbuf_printf(&b, "kiln_requests_total{route=\"%s\",status=\"%d\"} %llu\n", route_names[r], s,
                            (unsigned long long)m->req_by_status[r][s]);
    sbuf_printf(&b,
                "# HELP kiln_prompt_tokens_total Prompt tokens of finished API requests.\n# TYPE kiln_prompt_tokens_total counter\n"
                "kiln_prompt_tokens_total %llu\n"
                "# HELP kiln_completion_tokens_total Generated tokens of API requests.\n# TYPE kiln_completion_tokens_total counter\n"
                "kiln_completion_tokens_total %llu\n"
                "# HELP kiln_prefix_cache_hit_tokens_total Prompt tokens served from the prefix cache.\n"
                "# TYPE kiln_prefix_cache_hit_tokens_total counter\nkiln_prefix_cache_hit_tokens_total %llu\n"
                "# HELP kiln_requests_cancelled_on_disconnect_total Generations cancelled because the client went away.\n"
                "# TYPE kiln_requests_cancelled_on_disconnect_total counter\nkiln_requests_cancelled_on_disconnect_total %llu\n",
                (unsigned long long)m->prompt_tokens, (unsigned long long)m->completion_tokens,
                (unsigned long long)st.cached_tokens, (unsigned long long)m->cancelled_disconnect);
    hist_out(&b, "kiln_time_to_first_token_seconds", "From submit to the first generated token.", &m->ttft);
    hist_out(&b, "kiln_inter_token_seconds", "Between consecutive tokens of a request, as the engine produced them.", &m->itl);
    hist_out(&b, "kiln_request_duration_seconds", "From submit to the last token.", &m->e2e);
    pthread_mutex_unlock(&m->mu);
    sbuf_printf(&b,
                "# HELP kiln_queue_depth Requests waiting for admission.\n# TYPE kiln_queue_depth gauge\nkiln_queue_depth %d\n"
                "# HELP kiln_running_rows Requests in the running batch.\n# TYPE kiln_running_rows gauge\nkiln_running_rows %d\n"
                "# HELP kiln_kv_blocks_total KV pool blocks.\n# TYPE kiln_kv_blocks_total gauge\nkiln_kv_blocks_total %d\n"
                "# HELP kiln_kv_blocks_used KV pool blocks held by requests.\n# TYPE kiln_kv_blocks_used gauge\nkiln_kv_blocks_used %d\n"
                "# HELP kiln_kv_blocks_cached Free KV blocks that still hold reusable prefixes.\n# TYPE kiln_kv_blocks_cached gauge\nkiln_kv_blocks_cached %d\n"
                "# HELP kiln_engine_requests_finished_total Requests the engine finished.\n# TYPE kiln_engine_requests_finished_total counter\nkiln_engine_requests_finished_total %llu\n"
                "# HELP kiln_engine_requests_cancelled_total Requests the engine cancelled.\n# TYPE kiln_engine_requests_cancelled_total counter\nkiln_engine_requests_cancelled_total %llu\n"
                "# HELP kiln_engine_preemptions_total Requests preempted for KV space.\n# TYPE kiln_engine_preemptions_total counter\nkiln_engine_preemptions_total %llu\n"
                "# HELP kiln_engine_steps_total Forward steps.\n# TYPE kiln_engine_steps_total counter\nkiln_engine_steps_total %llu\n"
                "# HELP kiln_engine_generated_tokens_total Tokens the engine generated.\n# TYPE kiln_engine_generated_tokens_total counter\nkiln_engine_generated_tokens_total %llu\n"
                "# HELP kiln_engine_prompt_tokens_computed_total Prompt tokens computed (not cached).\n# TYPE kiln_engine_prompt_tokens_computed_total counter\nkiln_engine_prompt_tokens_computed_total %llu\n",
                st.waiting, st.running, st.kv_blocks_total, st.kv_blocks_used, st.kv_blocks_cached,
                (unsigned long long)st.requests_finished, (unsigned long long)st.requests_cancelled,
                (unsigned long long)st.preemptions, (unsigned long long)st.steps, (unsigned long long)st.generated_tokens,
                (unsigned long long)st.computed_prompt_tokens);
    return sbuf_take(&b);
}
