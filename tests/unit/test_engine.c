/* test_engine.c — the engine's promises, checked on the llama-tiny fixture.
 *
 * - batch invariance: random mixes of 1–32 requests (different prompt lengths, seeds,
 *   sampling settings) give each request the tokens it gets alone;
 * - prefix cache: a request sharing a prefix computes only the new tokens (counters) and
 *   its output is unchanged; eviction under pressure keeps outputs right;
 * - cancellation and preemption under a pool of a handful of blocks: outputs identical,
 *   pool entirely free at the end;
 * - a randomized stress run of a few hundred requests with joins, cancels and stops;
 * - admission control: too long for the context, queue full. */
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>
#include "../common/test_util.h"
#include "kiln.h"
#include "tokenizer/tokenizer.h"

#define MODEL "tests/fixtures/models/llama-tiny"

typedef struct spec {
    int32_t prompt[96];
    int n_prompt, max_tokens;
    sampling_params_t sp;
    int32_t bias_id;
    float bias_val;
} spec_t;

static const char *g_model = MODEL;

static kiln_engine_t *start(int kv_tokens, int step_tokens, int max_batch, dtype_t kv) {
    kiln_engine_opts_t o;
    kiln_engine_opts_default(&o);
    o.model_dir = g_model;
    o.snapshot_interval = 16;
    o.threads = 2;
    o.sample_threads = 3; /* rows sampled side by side, more threads than cores: same tokens */
    o.kv_dtype = kv;
    o.kv_tokens = kv_tokens;
    o.block_size = 4;
    o.step_tokens = step_tokens;
    o.max_batch = max_batch;
    err_t e = {0};
    kiln_engine_t *eng = kiln_engine_start(&o, &e);
    if (!eng) fail_msg("%s", e.msg);
    return eng;
}

static void make_spec(spec_t *s, uint64_t *rng, int shared_prefix) {
    memset(s, 0, sizeof *s);
    s->n_prompt = 1 + (int)((tu_rand(rng) + 1) * 0.5f * 60);
    for (int i = 0; i < s->n_prompt; i++)
        s->prompt[i] = i < shared_prefix ? (int32_t)(7 + i * 13 % 500) : (int32_t)((tu_rand(rng) + 1) * 0.5f * 511);
    s->max_tokens = 1 + (int)((tu_rand(rng) + 1) * 0.5f * 24);
    sampling_defaults(&s->sp);
    int kind = (int)((tu_rand(rng) + 1) * 2.5f);
    s->sp.temperature = kind == 0 ? 0.f : 0.5f + (tu_rand(rng) + 1) * 0.5f;
    if (kind == 2) s->sp.top_k = 20;
    if (kind == 3) { s->sp.top_p = 0.9f; s->sp.repetition_penalty = 1.3f; }
    if (kind >= 4) { s->sp.min_p = 0.05f; s->sp.presence_penalty = 0.5f; s->sp.frequency_penalty = 0.3f; }
    s->sp.seed = (uint64_t)((tu_rand(rng) + 1) * 1e6);
    if (kind == 1) {
        s->bias_id = 42;
        s->bias_val = 3.0f;
        s->sp.bias_ids = &s->bias_id;
        s->sp.bias_vals = &s->bias_val;
        s->sp.n_bias = 1;
    }
}

static kiln_request_t *submit(kiln_engine_t *eng, const spec_t *s) {
    kiln_request_params_t p = {0};
    p.prompt = s->prompt;
    p.n_prompt = s->n_prompt;
    p.max_tokens = s->max_tokens;
    p.sampling = s->sp;
    p.ignore_eos = 1;
    err_t e = {0};
    int code;
    kiln_request_t *r = kiln_submit(eng, &p, &code, &e);
    if (!r) fail_msg("submit: %s", e.msg);
    return r;
}

/* Collects a request's tokens until its final event; returns the finish reason. */
static kiln_finish_t collect(kiln_request_t *r, int32_t *out, int *n) {
    *n = 0;
    for (;;) {
        kiln_event_t ev;
        if (!kiln_request_next(r, &ev, 20000)) fail_msg("no event within 20 s");
        if (ev.token >= 0) out[(*n)++] = ev.token;
        kiln_finish_t f = ev.finish;
        kiln_event_clear(&ev);
        if (f) return f;
    }
}

static void run_alone(kiln_engine_t *eng, const spec_t *s, int32_t *out, int *n) {
    kiln_request_t *r = submit(eng, s);
    assert_int_equal(collect(r, out, n), KILN_FINISH_LENGTH);
    kiln_request_free(r);
}

static void wait_idle(kiln_engine_t *eng) {
    kiln_stats_t st;
    for (int i = 0; i < 2000; i++) {
        kiln_stats(eng, &st);
        if (st.running == 0 && st.waiting == 0) return;
        usleep(1000);
    }
}

static void check_pool_free(kiln_engine_t *eng) {
    wait_idle(eng);
    kiln_stats_t st;
    kiln_stats(eng, &st);
    assert_int_equal(st.kv_blocks_used, 0);
}

static void batch_vs_alone(int kv_tokens, int step_tokens, dtype_t kv, uint64_t seed, int rounds, int shared) {
    kiln_engine_t *eng = start(kv_tokens, step_tokens, 32, kv);
    uint64_t rng = seed;
    for (int round = 0; round < rounds; round++) {
        int n = 1 + (int)((tu_rand(&rng) + 1) * 0.5f * 31);
        spec_t *specs = calloc((size_t)n, sizeof(spec_t));
        int32_t want[32][32], got[32];
        int nw[32], ng;
        for (int i = 0; i < n; i++) {
            make_spec(&specs[i], &rng, shared);
            run_alone(eng, &specs[i], want[i], &nw[i]);
        }
        kiln_request_t *rs[32];
        for (int i = 0; i < n; i++) rs[i] = submit(eng, &specs[i]);
        for (int i = 0; i < n; i++) {
            assert_int_equal(collect(rs[i], got, &ng), KILN_FINISH_LENGTH);
            assert_int_equal(ng, nw[i]);
            if (memcmp(got, want[i], sizeof(int32_t) * ng) != 0)
                fail_msg("round %d: request %d of %d differs from running alone", round, i, n);
            kiln_request_free(rs[i]);
        }
        free(specs);
    }
    kiln_stats_t st;
    check_pool_free(eng);
    kiln_stats(eng, &st);
    printf("# kv %s, pool %d tokens: %llu steps, %llu preemptions, %llu cached prompt tokens\n", kv_dtype_name(kv), kv_tokens,
           (unsigned long long)st.steps, (unsigned long long)st.preemptions, (unsigned long long)st.cached_tokens);
    kiln_engine_stop(eng);
}

static void test_batch_invariance(void **st) {
    batch_vs_alone(8192, 64, DT_F32, 1, 4, 0);
    batch_vs_alone(8192, 256, DT_F16, 2, 3, 20);
    batch_vs_alone(8192, 64, DT_I8, 3, 2, 20); /* the int8 cache: batched, chunked, prefix hits */
    batch_vs_alone(160, 48, DT_I8, 4, 2, 0);   /* ... and preempted in a small pool */
}

/* A pool of 24 blocks of 4 tokens: requests of up to ~84 tokens each force preemption. */
static void test_preemption_tiny_pool(void **st) {
    kiln_engine_t *eng = start(96, 64, 32, DT_F32);
    uint64_t rng = 77;
    spec_t specs[12];
    int32_t want[12][32], got[32];
    int nw[12], ng;
    for (int i = 0; i < 12; i++) {
        make_spec(&specs[i], &rng, 0);
        run_alone(eng, &specs[i], want[i], &nw[i]);
    }
    kiln_request_t *rs[12];
    for (int i = 0; i < 12; i++) rs[i] = submit(eng, &specs[i]);
    for (int i = 0; i < 12; i++) {
        assert_int_equal(collect(rs[i], got, &ng), KILN_FINISH_LENGTH);
        assert_int_equal(ng, nw[i]);
        assert_memory_equal(got, want[i], sizeof(int32_t) * ng);
        kiln_request_free(rs[i]);
    }
    kiln_stats_t s;
    kiln_stats(eng, &s);
    printf("# tiny pool: %llu preemptions\n", (unsigned long long)s.preemptions);
    assert_true(s.preemptions > 0);
    check_pool_free(eng);
    kiln_engine_stop(eng);
}

static void test_prefix_cache(void **st) {
    kiln_engine_t *eng = start(4096, 512, 8, DT_F32);
    spec_t a, b;
    uint64_t rng = 5;
    make_spec(&a, &rng, 0);
    a.n_prompt = 50;
    for (int i = 0; i < 50; i++) a.prompt[i] = (int32_t)(3 + i * 7 % 509);
    a.max_tokens = 8;
    b = a;
    b.n_prompt = 70;
    for (int i = 50; i < 70; i++) b.prompt[i] = (int32_t)(100 + i);
    int32_t out_b_cold[32], out_b_warm[32], tmp[32];
    int nb1, nb2, n;
    /* cold b in a separate engine (no cache) */
    kiln_engine_t *cold = start(4096, 512, 8, DT_F32);
    run_alone(cold, &b, out_b_cold, &nb1);
    kiln_engine_stop(cold);
    run_alone(eng, &a, tmp, &n);
    kiln_stats_t s0, s1;
    kiln_stats(eng, &s0);
    kiln_request_t *r = submit(eng, &b);
    collect(r, out_b_warm, &nb2);
    kiln_request_info_t info;
    kiln_request_info(r, &info);
    kiln_request_free(r);
    kiln_stats(eng, &s1);
    assert_int_equal(nb1, nb2);
    assert_memory_equal(out_b_cold, out_b_warm, sizeof(int32_t) * nb1);
    /* 50 shared tokens = 12 whole blocks of 4 = 48 cached; 22 computed */
    printf("# prefix: %d of %d prompt tokens cached, %llu computed\n", info.n_cached, info.n_prompt,
           (unsigned long long)(s1.computed_prompt_tokens - s0.computed_prompt_tokens));
    assert_int_equal(info.n_cached, 48);
    assert_int_equal(s1.computed_prompt_tokens - s0.computed_prompt_tokens, 22);
    /* the same prompt again: everything but the last token comes from the cache */
    r = submit(eng, &b);
    collect(r, tmp, &n);
    kiln_request_info(r, &info);
    kiln_request_free(r);
    assert_int_equal(info.n_cached, 68);
    assert_memory_equal(tmp, out_b_cold, sizeof(int32_t) * n);
    /* per-phase host time (kiln bench's host_ms_per_step): counted for steps that ran */
    kiln_stats_t s2;
    wait_idle(eng);
    kiln_stats(eng, &s2);
    assert_true(s2.steps > s1.steps && s2.step_rows >= s2.steps);
    assert_true(s2.time_forward_s > 0 && s2.time_schedule_s >= s1.time_schedule_s && s2.time_post_s >= s1.time_post_s);
    check_pool_free(eng);
    kiln_engine_stop(eng);
}

/* Eviction: a pool that holds only a few prompts' blocks; many distinct prompts cycle
 * through, then the first again: results must still equal the cold run. */
static void test_eviction(void **st) {
    kiln_engine_t *eng = start(160, 128, 8, DT_F32);
    uint64_t rng = 9;
    spec_t specs[10];
    int32_t first[10][32], again[32];
    int nf[10], na;
    for (int i = 0; i < 10; i++) { make_spec(&specs[i], &rng, 0); run_alone(eng, &specs[i], first[i], &nf[i]); }
    for (int i = 0; i < 10; i++) {
        run_alone(eng, &specs[i], again, &na);
        assert_int_equal(na, nf[i]);
        assert_memory_equal(again, first[i], sizeof(int32_t) * na);
    }
    check_pool_free(eng);
    kiln_engine_stop(eng);
}

/* rs[0]'s notify in test_cancel, registered before rs[1..5] exist: cancel rs[0] (running)
 * on its first event, on the engine thread, and rs[5] (queued behind four rows) in the same
 * instant — or, when rs[5] is not submitted yet, the test thread cancels it right after its
 * submit. fired and r5 are seq_cst, so at least one side sees the other's store. */
typedef struct { kiln_request_t *r0; _Atomic(kiln_request_t *) r5; atomic_int fired; } cancel_ctx_t;
static void cancel_two_on_event(void *arg) {
    cancel_ctx_t *c = arg;
    kiln_cancel(c->r0);
    atomic_store(&c->fired, 1);
    kiln_request_t *r5 = atomic_load(&c->r5);
    if (r5) kiln_cancel(r5);
}

static void test_cancel(void **st) {
    /* four rows of 240 tokens fit the pool (and llama-tiny's 256 positions): the engine needs
     * 240 steps before rs[0] could finish or a row could free up for rs[5], so the cancels
     * land in time however long this thread waits for a core (with 30 tokens and a pool of
     * one request, a starved test thread let rs[0] finish first: 6 of 30 runs once decode
     * got faster) */
    kiln_engine_t *eng = start(1024, 16, 4, DT_F32);
    spec_t s;
    uint64_t rng = 3;
    make_spec(&s, &rng, 0);
    s.max_tokens = 240;
    kiln_request_t *rs[6];
    /* cancel a running one after its first token and a queued one at once, from rs[0]'s
     * notify callback on the engine thread as rs[0]'s first event is queued. The callback is
     * set right after rs[0]'s submit, before the other five exist. */
    static cancel_ctx_t cc;
    cc.r0 = rs[0] = submit(eng, &s);
    atomic_store(&cc.r5, NULL);
    atomic_store(&cc.fired, 0);
    kiln_request_set_notify(rs[0], cancel_two_on_event, &cc);
    for (int i = 1; i < 6; i++) rs[i] = submit(eng, &s);
    atomic_store(&cc.r5, rs[5]);
    if (atomic_load(&cc.fired)) kiln_cancel(rs[5]);
    kiln_event_t ev;
    assert_true(kiln_request_next(rs[0], &ev, 20000));
    assert_int_equal(ev.finish, KILN_NOT_FINISHED);
    kiln_event_clear(&ev);
    int32_t got[256];
    int n;
    assert_int_equal(collect(rs[0], got, &n), KILN_FINISH_CANCELLED);
    assert_int_equal(collect(rs[5], got, &n), KILN_FINISH_CANCELLED);
    for (int i = 1; i < 5; i++) assert_int_equal(collect(rs[i], got, &n), KILN_FINISH_LENGTH);
    for (int i = 0; i < 6; i++) kiln_request_free(rs[i]);
    /* freeing a handle mid-flight cancels it; the engine owns the rest */
    kiln_request_t *r = submit(eng, &s);
    kiln_request_free(r);
    check_pool_free(eng);
    kiln_stats_t st2;
    kiln_stats(eng, &st2);
    assert_true(st2.requests_cancelled >= 2);
    kiln_engine_stop(eng);
}

static void test_admission(void **st) {
    kiln_engine_t *eng = start(64, 16, 4, DT_F32);
    spec_t s;
    uint64_t rng = 4;
    make_spec(&s, &rng, 0);
    kiln_request_params_t p = {0};
    p.prompt = s.prompt;
    p.n_prompt = s.n_prompt;
    p.sampling = s.sp;
    err_t e = {0};
    int code;
    p.max_tokens = 300; /* over the context of 256 */
    assert_null(kiln_submit(eng, &p, &code, &e));
    assert_int_equal(code, KILN_ERR_TOO_LONG);
    assert_non_null(strstr(e.msg, "context length of 256"));
    p.max_tokens = 60; /* fits the context, not the 64-token pool */
    p.n_prompt = 10;
    assert_null(kiln_submit(eng, &p, &code, &e));
    assert_int_equal(code, KILN_ERR_TOO_LONG);
    assert_non_null(strstr(e.msg, "raise --kv-cache-gb"));
    p.max_tokens = 0;
    assert_null(kiln_submit(eng, &p, &code, &e));
    assert_int_equal(code, KILN_ERR_INVALID);
    p.max_tokens = 4;
    int32_t bad = 9999;
    p.prompt = &bad;
    p.n_prompt = 1;
    assert_null(kiln_submit(eng, &p, &code, &e));
    assert_non_null(strstr(e.msg, "outside the vocabulary"));
    p.prompt = s.prompt;
    p.n_stop = 1;
    p.stop[0] = "x";
    assert_null(kiln_submit(eng, &p, &code, &e)); /* fixture has no tokenizer */
    assert_non_null(strstr(e.msg, "need a tokenizer"));
    kiln_engine_stop(eng);

    kiln_engine_opts_t o;
    kiln_engine_opts_default(&o);
    o.model_dir = MODEL;
    o.max_queue = 3;
    o.kv_tokens = 256;
    o.step_tokens = 1; /* slow prefill keeps requests queued */
    o.max_batch = 1;
    eng = kiln_engine_start(&o, &e);
    assert_non_null(eng);
    p.n_stop = 0;
    p.max_tokens = 2;
    kiln_request_t *rs[16];
    int n_ok = 0, n_full = 0;
    for (int i = 0; i < 16; i++) {
        rs[n_ok] = kiln_submit(eng, &p, &code, &e);
        if (rs[n_ok]) n_ok++;
        else { assert_int_equal(code, KILN_ERR_QUEUE_FULL); n_full++; }
    }
    printf("# queue of 3: %d accepted, %d refused\n", n_ok, n_full);
    assert_true(n_full > 0);
    for (int i = 0; i < n_ok; i++) kiln_request_free(rs[i]);
    kiln_engine_stop(eng);
}

/* Stress: a few hundred requests from two submitting threads, random cancels and stop
 * token ids, a small pool so preemption happens; everything finishes, nothing leaks. */
typedef struct { kiln_engine_t *eng; uint64_t seed; int n; int finished; } stress_arg_t;

static void *stress_thread(void *arg) {
    stress_arg_t *a = arg;
    uint64_t rng = a->seed;
    kiln_request_t *live[8] = {0};
    for (int i = 0; i < a->n; i++) {
        int slot = i % 8;
        if (live[slot]) {
            int32_t out[64];
            int n;
            collect(live[slot], out, &n);
            kiln_request_free(live[slot]);
            a->finished++;
        }
        spec_t s;
        make_spec(&s, &rng, 10);
        kiln_request_params_t p = {0};
        p.prompt = s.prompt;
        p.n_prompt = s.n_prompt;
        p.max_tokens = s.max_tokens;
        p.sampling = s.sp;
        int32_t stop_ids[2] = {(int32_t)(i % 512), 17};
        p.stop_ids = stop_ids;
        p.n_stop_ids = i % 3 == 0 ? 2 : 0;
        err_t e;
        int code;
        live[slot] = kiln_submit(a->eng, &p, &code, &e);
        if (live[slot] && tu_rand(&rng) > 0.6f) kiln_cancel(live[slot]);
        if (live[slot] && tu_rand(&rng) > 0.9f) { kiln_request_free(live[slot]); live[slot] = NULL; a->finished++; }
    }
    for (int i = 0; i < 8; i++)
        if (live[i]) {
            int32_t out[64];
            int n;
            collect(live[i], out, &n);
            kiln_request_free(live[i]);
            a->finished++;
        }
    return NULL;
}

static void test_stress(void **st) {
    kiln_engine_t *eng = start(160, 48, 8, DT_F16);
    pthread_t th[2];
    stress_arg_t args[2] = {{eng, 11, 150, 0}, {eng, 12, 150, 0}};
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, stress_thread, &args[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    assert_int_equal(args[0].finished + args[1].finished, 300);
    check_pool_free(eng);
    kiln_stats_t s;
    kiln_stats(eng, &s);
    printf("# stress: %llu finished, %llu cancelled, %llu preemptions, %llu steps\n", (unsigned long long)s.requests_finished,
           (unsigned long long)s.requests_cancelled, (unsigned long long)s.preemptions, (unsigned long long)s.steps);
    assert_int_equal(s.requests_finished + s.requests_cancelled, 300);
    kiln_engine_stop(eng);
}

/* Hybrid (Qwen3.5: gated DeltaNet + attention): prefix reuse needs the recurrent state at
 * the reused boundary. A second turn that extends the first (prompt + reply + more) must
 * find the state saved while the first turn decoded, and give the same tokens as a cold
 * engine; batching and preemption must not change any request's tokens either. */
static void test_hybrid(void **st) {
    g_model = "tests/fixtures/models/qwen3_5-tiny";
    spec_t a, b;
    uint64_t rng = 21;
    make_spec(&a, &rng, 0);
    a.n_prompt = 60;
    for (int i = 0; i < 60; i++) a.prompt[i] = (int32_t)(5 + i * 11 % 500);
    a.max_tokens = 10;
    int32_t out_a[32], out_b_cold[32], out_b[32];
    int na, nb1, nb2;
    kiln_engine_t *eng = start(4096, 512, 8, DT_F32);
    run_alone(eng, &a, out_a, &na);
    assert_int_equal(na, 10);
    b = a;
    memcpy(b.prompt + 60, out_a, sizeof(int32_t) * 10);
    for (int i = 0; i < 20; i++) b.prompt[70 + i] = (int32_t)(300 + i);
    b.n_prompt = 90;
    kiln_request_t *r = submit(eng, &b);
    collect(r, out_b, &nb2);
    kiln_request_info_t info;
    kiln_request_info(r, &info);
    kiln_request_free(r);
    kiln_stats_t s;
    kiln_stats(eng, &s);
    printf("# hybrid second turn: %d of %d prompt tokens from the cache, %llu snapshots saved, %llu restored\n", info.n_cached,
           info.n_prompt, (unsigned long long)s.snapshots_saved, (unsigned long long)s.snapshots_restored);
    /* turn one computed 69 tokens; the last block boundary it passed is 68 */
    assert_int_equal(info.n_cached, 68);
    assert_true(s.snapshots_restored >= 1);
    /* the same prompt again: the prompt's last boundary (88) was saved during prefill */
    r = submit(eng, &b);
    int32_t again[32];
    int n3;
    collect(r, again, &n3);
    kiln_request_info(r, &info);
    kiln_request_free(r);
    assert_int_equal(info.n_cached, 88);
    assert_memory_equal(again, out_b, sizeof(int32_t) * n3);
    check_pool_free(eng);
    kiln_engine_stop(eng);
    kiln_engine_t *cold = start(4096, 512, 8, DT_F32);
    run_alone(cold, &b, out_b_cold, &nb1);
    kiln_engine_stop(cold);
    assert_int_equal(nb1, nb2);
    assert_memory_equal(out_b, out_b_cold, sizeof(int32_t) * nb1);
    /* batching, chunking at snapshot boundaries, and preemption in a small pool */
    batch_vs_alone(8192, 64, DT_F32, 31, 2, 24);
    batch_vs_alone(160, 48, DT_F16, 32, 2, 24);
    g_model = MODEL;
}

/* Text: stop strings on the detokenized output (held back, cut, finish reason), text that
 * concatenates to the full decode, and logprobs, on the bundled model (it has a tokenizer). */
static void test_text_stop_logprobs(void **st) {
    g_model = "models/kiln-tiny";
    kiln_engine_t *eng = start(4096, 512, 8, DT_F32);
    const struct tokenizer *tok = kiln_engine_tokenizer(eng);
    assert_non_null(tok);
    int32_t *ids;
    int n;
    err_t e = {0};
    const char *prompt = "The history of the United States";
    assert_int_equal(tokenizer_encode(tok, prompt, strlen(prompt), 0, &ids, &n, &e), 0);
    kiln_request_params_t p = {0};
    p.prompt = ids;
    p.n_prompt = n;
    p.max_tokens = 40;
    sampling_defaults(&p.sampling);
    p.sampling.temperature = 0;
    p.ignore_eos = 1;
    p.logprobs = 1;
    p.top_logprobs = 5;
    int code;
    /* 1: no stop string: collect the full text and check the logprobs */
    kiln_request_t *r = kiln_submit(eng, &p, &code, &e);
    assert_non_null(r);
    char full[4096] = "";
    int32_t toks[64];
    int nt = 0;
    for (;;) {
        kiln_event_t ev;
        assert_true(kiln_request_next(r, &ev, 20000));
        if (ev.token >= 0) {
            toks[nt++] = ev.token;
            assert_int_equal(ev.n_top, 5);
            /* greedy: the chosen token is the most likely one, alternatives sorted */
            assert_int_equal(ev.top_ids[0], ev.token);
            assert_true(fabsf(ev.top_logprobs[0] - ev.logprob) < 1e-6f);
            for (int k = 1; k < 5; k++) assert_true(ev.top_logprobs[k] <= ev.top_logprobs[k - 1]);
            assert_true(ev.logprob <= 0 && ev.logprob > -50);
        }
        strncat(full, ev.text ? ev.text : "", sizeof full - strlen(full) - 1);
        int fin = ev.finish;
        kiln_event_clear(&ev);
        if (fin) { assert_int_equal(fin, KILN_FINISH_LENGTH); break; }
    }
    kiln_request_free(r);
    char *dec = tokenizer_decode(tok, toks, nt, 1, &e);
    assert_string_equal(full, dec); /* streamed pieces concatenate to the full decode */
    /* 2: a stop string that occurs in that text: output is the text before it */
    const char *stop = " of the";
    char *hit = strstr(full + 1, stop);
    assert_non_null(hit);
    p.n_stop = 1;
    p.stop[0] = stop;
    r = kiln_submit(eng, &p, &code, &e);
    char cut[4096] = "";
    kiln_finish_t fin = KILN_NOT_FINISHED;
    const char *matched = NULL;
    for (;;) {
        kiln_event_t ev;
        assert_true(kiln_request_next(r, &ev, 20000));
        strncat(cut, ev.text ? ev.text : "", sizeof cut - strlen(cut) - 1);
        assert_null(strstr(cut, stop)); /* never sent, not even in pieces */
        fin = ev.finish;
        matched = ev.stop_str;
        kiln_event_clear(&ev);
        if (fin) break;
    }
    assert_int_equal(fin, KILN_FINISH_STOP);
    assert_non_null(matched);
    assert_string_equal(matched, stop); /* before the free: it points into the request */
    kiln_request_free(r);
    char *first = strstr(full, stop);
    assert_int_equal(strlen(cut), (size_t)(first - full));
    assert_memory_equal(cut, full, strlen(cut));
    printf("# stop string '%s': %zu of %zu bytes sent\n", stop, strlen(cut), strlen(full));
    free(dec);
    free(ids);
    kiln_engine_stop(eng);
    g_model = MODEL;
}

/* Notify: called as events arrive; never again once kiln_request_free has returned.
 * keep_special: special tokens appear in the text only when asked. */
static atomic_int g_notified;
static void on_notify(void *arg) { atomic_fetch_add(&g_notified, 1); }

static void test_notify_and_special(void **st) {
    g_model = "models/kiln-tiny";
    kiln_engine_t *eng = start(4096, 512, 8, DT_F32);
    int32_t prompt[] = {493, 1625, 269};
    kiln_request_params_t p = {0};
    p.prompt = prompt;
    p.n_prompt = 3;
    p.max_tokens = 200;
    sampling_defaults(&p.sampling);
    p.ignore_eos = 1;
    int code;
    err_t e;
    kiln_request_t *r = kiln_submit(eng, &p, &code, &e);
    kiln_request_set_notify(r, on_notify, NULL);
    kiln_event_t ev;
    for (int i = 0; i < 3; i++) { assert_true(kiln_request_next(r, &ev, 20000)); kiln_event_clear(&ev); }
    kiln_request_free(r); /* mid-stream */
    int seen = atomic_load(&g_notified);
    assert_true(seen >= 1);
    usleep(100000);
    assert_int_equal(atomic_load(&g_notified), seen);
    /* force <|im_end|> (8191) with a logit bias: text has it only with keep_special */
    int32_t bid = 8191;
    float bval = 100;
    p.max_tokens = 1;
    p.sampling.temperature = 0;
    p.sampling.bias_ids = &bid;
    p.sampling.bias_vals = &bval;
    p.sampling.n_bias = 1;
    for (int keep = 0; keep < 2; keep++) {
        p.keep_special = keep;
        r = kiln_submit(eng, &p, &code, &e);
        char text[256] = "";
        for (;;) {
            assert_true(kiln_request_next(r, &ev, 20000));
            if (ev.token >= 0) assert_int_equal(ev.token, 8191);
            assert_true(ev.t > 0);
            strncat(text, ev.text ? ev.text : "", sizeof text - strlen(text) - 1);
            int fin = ev.finish;
            kiln_event_clear(&ev);
            if (fin) break;
        }
        kiln_request_free(r);
        assert_string_equal(text, keep ? "<|im_end|>" : "");
    }
    assert_int_equal(kiln_engine_ctx_len(eng), 512);
    kiln_engine_stop(eng);
    g_model = MODEL;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_admission),    cmocka_unit_test(test_prefix_cache), cmocka_unit_test(test_eviction),
        cmocka_unit_test(test_cancel),       cmocka_unit_test(test_preemption_tiny_pool),
        cmocka_unit_test(test_batch_invariance), cmocka_unit_test(test_stress), cmocka_unit_test(test_hybrid),
        cmocka_unit_test(test_text_stop_logprobs), cmocka_unit_test(test_notify_and_special),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
