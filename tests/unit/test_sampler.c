/* test_sampler.c — the sampler's rules, one by one, on small hand-made distributions.
 *
 * Distribution tests draw many samples with different (seed, step) keys and compare the
 * empirical frequencies with the exact probabilities (tolerance ~5 standard errors, so a
 * wrong rule fails and a right one passes reliably); filter tests check support exactly. */
#include "../common/test_util.h"
#include "engine/sampler.h"

#define V 8
static sampler_scratch_t ss;
static int setup(void **st) { return sampler_scratch_init(&ss, V); }
static int teardown(void **st) { sampler_scratch_free(&ss); return 0; }

static const float base[V] = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f, 1.5f, -3.0f, 0.25f};

static int32_t draw(const sampling_params_t *p, const int32_t *hist, int nh, int np, uint64_t step) {
    float l[V];
    memcpy(l, base, sizeof l);
    return sample_token(p, l, V, hist, nh, np, step, &ss);
}

static void softmax(const float *l, float t, double *out) {
    double mx = -1e30, s = 0;
    for (int i = 0; i < V; i++) if (l[i] / t > mx) mx = l[i] / t;
    for (int i = 0; i < V; i++) s += out[i] = exp(l[i] / t - mx);
    for (int i = 0; i < V; i++) out[i] /= s;
}

static void check_freq(const sampling_params_t *p, const double *want, int n) {
    int cnt[V] = {0};
    for (int i = 0; i < n; i++) cnt[draw(p, NULL, 0, 0, (uint64_t)i)]++;
    for (int k = 0; k < V; k++) {
        double f = (double)cnt[k] / n, se = sqrt(want[k] * (1 - want[k]) / n) + 1e-9;
        if (want[k] == 0) { if (cnt[k]) fail_msg("token %d drawn %d times, probability 0", k, cnt[k]); continue; }
        if (fabs(f - want[k]) > 5 * se) fail_msg("token %d: frequency %.4f, probability %.4f", k, f, want[k]);
    }
}

static void test_greedy(void **st) {
    sampling_params_t p;
    sampling_defaults(&p);
    p.temperature = 0;
    assert_int_equal(draw(&p, NULL, 0, 0, 0), 0);
    float tie[V] = {1, 3, 3, 0, 0, 0, 0, 0};
    assert_int_equal(sample_token(&p, tie, V, NULL, 0, 0, 0, &ss), 1); /* ties: the lower id */
}

static void test_temperature(void **st) {
    sampling_params_t p;
    sampling_defaults(&p);
    double want[V];
    p.temperature = 0.7f;
    softmax(base, 0.7f, want);
    check_freq(&p, want, 40000);
    p.temperature = 1.5f;
    softmax(base, 1.5f, want);
    check_freq(&p, want, 40000);
}

static void test_top_k_p_min_p(void **st) {
    sampling_params_t p;
    sampling_defaults(&p);
    double full[V], want[V];
    softmax(base, 1.0f, full);
    /* top-k 3: tokens 0, 5, 1 renormalized */
    p.top_k = 3;
    memset(want, 0, sizeof want);
    double s = full[0] + full[5] + full[1];
    want[0] = full[0] / s; want[5] = full[5] / s; want[1] = full[1] / s;
    check_freq(&p, want, 30000);
    /* top-p: the smallest set whose mass reaches p (token 0: 0.390, with 5: 0.627) */
    p.top_k = 0;
    p.top_p = 0.6f;
    memset(want, 0, sizeof want);
    s = full[0] + full[5];
    want[0] = full[0] / s; want[5] = full[5] / s;
    check_freq(&p, want, 30000);
    p.top_p = 0.7f; /* now token 1 is needed too (0.770) */
    s = full[0] + full[5] + full[1];
    want[0] = full[0] / s; want[5] = full[5] / s; want[1] = full[1] / s;
    check_freq(&p, want, 30000);
    /* min-p 0.3: keep tokens with p >= 0.3 * p_max */
    p.top_p = 1;
    p.min_p = 0.3f;
    memset(want, 0, sizeof want);
    s = 0;
    for (int i = 0; i < V; i++) if (full[i] >= 0.3 * full[0]) s += full[i];
    for (int i = 0; i < V; i++) if (full[i] >= 0.3 * full[0]) want[i] = full[i] / s;
    check_freq(&p, want, 30000);
}

static void test_penalties_and_bias(void **st) {
    sampling_params_t p;
    sampling_defaults(&p);
    float l[V];
    int32_t hist[] = {0, 4, 1, 1, 1}; /* prompt {0, 4}, output {1, 1, 1} */
    /* repetition (HF): positive logits divided, negative multiplied, prompt included, once */
    p.repetition_penalty = 2.0f;
    p.temperature = 0;
    memcpy(l, base, sizeof l);
    sample_token(&p, l, V, hist, 5, 2, 0, &ss);
    assert_true(l[0] == 1.0f && l[4] == -2.0f && l[1] == 0.5f && l[2] == 0.5f);
    /* presence + frequency (OpenAI): output tokens only, count-weighted */
    sampling_defaults(&p);
    p.temperature = 0;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    memcpy(l, base, sizeof l);
    sample_token(&p, l, V, hist, 5, 2, 0, &ss);
    assert_true(l[0] == 2.0f && l[4] == -1.0f);              /* prompt tokens untouched */
    assert_true(fabsf(l[1] - (1.0f - 0.75f - 0.5f)) < 1e-6f); /* 3 times */
    /* logit bias moves the argmax */
    sampling_defaults(&p);
    p.temperature = 0;
    int32_t ids[] = {6};
    float vals[] = {10.0f};
    p.bias_ids = ids; p.bias_vals = vals; p.n_bias = 1;
    assert_int_equal(draw(&p, NULL, 0, 0, 0), 6);
    /* scratch counts are left clean for the next row */
    for (int i = 0; i < V; i++) assert_int_equal(ss.count[i], 0);
}

static void test_determinism(void **st) {
    sampling_params_t p;
    sampling_defaults(&p);
    p.seed = 1234;
    int32_t a[64], b[64];
    for (int i = 0; i < 64; i++) a[i] = draw(&p, NULL, 0, 0, (uint64_t)i);
    for (int i = 63; i >= 0; i--) b[i] = draw(&p, NULL, 0, 0, (uint64_t)i); /* order does not matter */
    assert_memory_equal(a, b, sizeof a);
    p.seed = 1235;
    int diff = 0;
    for (int i = 0; i < 64; i++) diff += draw(&p, NULL, 0, 0, (uint64_t)i) != a[i];
    assert_true(diff > 10);
    for (int i = 0; i < 1000; i++) { double u = rng_uniform(7, (uint64_t)i); assert_true(u >= 0 && u < 1); }
}

static void test_validate(void **st) {
    sampling_params_t p;
    err_t e;
    sampling_defaults(&p);
    assert_int_equal(sampling_validate(&p, V, &e), 0);
    p.temperature = -1;
    assert_int_equal(sampling_validate(&p, V, &e), -1);
    assert_non_null(strstr(e.msg, "temperature"));
    sampling_defaults(&p);
    p.top_p = 0;
    assert_int_equal(sampling_validate(&p, V, &e), -1);
    assert_non_null(strstr(e.msg, "top_p"));
    sampling_defaults(&p);
    int32_t ids[] = {V};
    float vals[] = {1};
    p.bias_ids = ids; p.bias_vals = vals; p.n_bias = 1;
    assert_int_equal(sampling_validate(&p, V, &e), -1);
    assert_non_null(strstr(e.msg, "logit_bias"));
}

/* The sampler as it was before the fast argmax / top-k selection (scalar argmax, O(k·n)
 * selection sort, scalar max): the new one must pick the very same tokens. */
static const float *ref_l;
static int ref_cmp(const void *a, const void *b) {
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    if (ref_l[i] > ref_l[j]) return -1;
    if (ref_l[i] < ref_l[j]) return 1;
    return i < j ? -1 : (i > j);
}
static int32_t ref_sample(const sampling_params_t *p, const float *logits, int vocab, uint64_t step, int32_t *idx, float *prob) {
    if (p->temperature == 0) {
        int32_t best = 0;
        for (int i = 1; i < vocab; i++) if (logits[i] > logits[best]) best = i;
        return best;
    }
    float inv_t = 1.0f / p->temperature;
    int n = vocab;
    for (int i = 0; i < vocab; i++) idx[i] = i;
    if (p->top_k > 0 || p->top_p < 1.0f || p->min_p > 0) {
        int k = p->top_k > 0 && p->top_k < vocab ? p->top_k : vocab;
        ref_l = logits;
        if (k < vocab && k <= 64) {
            for (int i = 0; i < k; i++) {
                int best = i;
                for (int j = i + 1; j < vocab; j++) {
                    float a = logits[idx[j]], b = logits[idx[best]];
                    if (a > b || (a == b && idx[j] < idx[best])) best = j;
                }
                int32_t t = idx[i]; idx[i] = idx[best]; idx[best] = t;
            }
        } else qsort(idx, (size_t)vocab, sizeof(int32_t), ref_cmp);
        n = k;
    }
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) if (logits[idx[i]] > mx) mx = logits[idx[i]];
    double sum = 0;
    for (int i = 0; i < n; i++) { prob[i] = expf((logits[idx[i]] - mx) * inv_t); sum += prob[i]; }
    if (p->top_p < 1.0f) {
        double cum = 0;
        int keep = n;
        for (int i = 0; i < n; i++) { cum += prob[i] / sum; if (cum >= p->top_p) { keep = i + 1; break; } }
        n = keep;
        sum = 0;
        for (int i = 0; i < n; i++) sum += prob[i];
    }
    if (p->min_p > 0) {
        float thr = p->min_p * prob[0];
        int keep = 1;
        while (keep < n && prob[keep] >= thr) keep++;
        n = keep;
        sum = 0;
        for (int i = 0; i < n; i++) sum += prob[i];
    }
    double u = rng_uniform(p->seed, step) * sum, cum = 0;
    for (int i = 0; i < n; i++) { cum += prob[i]; if (u < cum) return idx[i]; }
    return idx[n - 1];
}

static void test_same_as_scalar(void **st) {
    enum { VB = 5003 };
    sampler_scratch_t big;
    assert_int_equal(sampler_scratch_init(&big, VB), 0);
    float *l = malloc(sizeof(float) * VB), *w = malloc(sizeof(float) * VB), *prob = malloc(sizeof(float) * VB);
    int32_t *idx = malloc(sizeof(int32_t) * VB);
    const int ks[] = {0, 1, 2, 7, 50, 64, 65, 200, 256, 257, 1000};
    int checked = 0;
    for (int trial = 0; trial < 40; trial++) {
        int n = trial % 5 == 0 ? 1 + trial : VB - trial; /* short and long vocabularies */
        /* coarse values: many exact ties; some -inf; the maximum anywhere, even at 0 or n-1 */
        for (int i = 0; i < n; i++) l[i] = (float)(int)(rng_uniform(trial, (uint64_t)i) * 40) * 0.25f - 5;
        if (trial % 3 == 1) for (int i = 0; i < n; i += 7) l[i] = -INFINITY;
        if (trial % 4 == 2) l[n - 1] = 100;
        if (trial % 4 == 3) l[0] = 100;
        if (trial % 8 == 5) for (int i = 0; i < n; i++) l[i] = -INFINITY;
        for (int c = 0; c < 16; c++) {
            sampling_params_t p;
            sampling_defaults(&p);
            p.seed = (uint64_t)trial * 100 + c;
            p.temperature = c == 0 ? 0 : 0.3f + 0.2f * (c % 5);
            p.top_k = ks[c % 11];
            if (c % 3 == 1) p.top_p = 0.5f + 0.05f * c;
            if (c % 4 == 3) p.min_p = 0.05f * (c % 7);
            if (p.top_p > 1) p.top_p = 1;
            for (uint64_t step = 0; step < 3; step++) {
                memcpy(w, l, sizeof(float) * n);
                int32_t a = sample_token(&p, w, n, NULL, 0, 0, step, &big);
                int32_t b = ref_sample(&p, l, n, step, idx, prob);
                if (a != b) fail_msg("trial %d case %d step %d (n %d, T %g, top_k %d, top_p %g, min_p %g): %d, scalar rule %d", trial,
                                     c, (int)step, n, p.temperature, p.top_k, p.top_p, p.min_p, a, b);
                checked++;
            }
        }
        /* greedy directly on every prefix length up to 40 (lane and block tails) */
        for (int m = 1; m <= 40 && m <= n; m++) {
            int32_t best = 0;
            for (int i = 1; i < m; i++) if (l[i] > l[best]) best = i;
            assert_int_equal(argmax_first(l, m), best);
        }
    }
    /* a NaN at 0 keeps 0 (as the scalar loop does); NaNs elsewhere are skipped */
    for (int i = 0; i < 3000; i++) l[i] = (float)(i % 100);
    l[1500] = 1000;
    l[10] = NAN;
    assert_int_equal(argmax_first(l, 3000), 1500);
    l[0] = NAN;
    assert_int_equal(argmax_first(l, 3000), 0);
    assert_true(checked > 1000);
    free(l); free(w); free(prob); free(idx);
    sampler_scratch_free(&big);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy), cmocka_unit_test(test_temperature), cmocka_unit_test(test_top_k_p_min_p),
        cmocka_unit_test(test_penalties_and_bias), cmocka_unit_test(test_determinism), cmocka_unit_test(test_validate),
        cmocka_unit_test(test_same_as_scalar),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
