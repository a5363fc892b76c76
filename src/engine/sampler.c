/* sampler.c — see sampler.h. Ties are broken by the lower token id so that sorting
 * never depends on qsort's internals. Sorting is only done when top-k/top-p/min-p need
 * an order; plain temperature sampling walks the vocabulary once. */
#include "engine/sampler.h"
#include "engine/sample_rng.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

void sampling_defaults(sampling_params_t *p) {
    memset(p, 0, sizeof *p);
    p->temperature = 1.0f;
    p->top_p = 1.0f;
    p->repetition_penalty = 1.0f;
}

int sampling_validate(const sampling_params_t *p, int vocab, err_t *e) {
    if (!(p->temperature >= 0 && p->temperature <= 100)) return err_set(e, "temperature must be in [0, 100]");
    if (p->top_k < 0) return err_set(e, "top_k must be >= 0 (0 disables it)");
    if (!(p->top_p > 0 && p->top_p <= 1)) return err_set(e, "top_p must be in (0, 1]");
    if (!(p->min_p >= 0 && p->min_p <= 1)) return err_set(e, "min_p must be in [0, 1]");
    if (!(p->repetition_penalty > 0 && p->repetition_penalty <= 10)) return err_set(e, "repetition_penalty must be in (0, 10]");
    if (!(p->presence_penalty >= -2 && p->presence_penalty <= 2)) return err_set(e, "presence_penalty must be in [-2, 2]");
    if (!(p->frequency_penalty >= -2 && p->frequency_penalty <= 2)) return err_set(e, "frequency_penalty must be in [-2, 2]");
    for (int i = 0; i < p->n_bias; i++) {
        if (p->bias_ids[i] < 0 || p->bias_ids[i] >= vocab) return err_set(e, "logit_bias: token id %d is outside the vocabulary (0..%d)", p->bias_ids[i], vocab - 1);
        if (!(p->bias_vals[i] >= -100 && p->bias_vals[i] <= 100)) return err_set(e, "logit_bias: value for token %d must be in [-100, 100]", p->bias_ids[i]);
    }
    return 0;
}

/* the same function the device sampler uses (sample_rng.h) */
double rng_uniform(uint64_t seed, uint64_t step) { return kiln_rng_uniform(seed, step); }

int sampler_scratch_init(sampler_scratch_t *s, int vocab) {
    s->vocab = vocab;
    s->idx = malloc(sizeof(int32_t) * vocab);
    s->prob = malloc(sizeof(float) * vocab);
    s->count = calloc((size_t)vocab, sizeof(int32_t));
    return s->idx && s->prob && s->count ? 0 : -1;
}

void sampler_scratch_free(sampler_scratch_t *s) {
    free(s->idx);
    free(s->prob);
    free(s->count);
    memset(s, 0, sizeof *s);
}

static _Thread_local const float *g_sort_logits; /* qsort has no context argument */
static int cmp_desc(const void *a, const void *b) {
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    float x = g_sort_logits[i], y = g_sort_logits[j];
    if (x > y) return -1;
    if (x < y) return 1;
    return i < j ? -1 : (i > j);
}

/* The largest value, NaNs skipped (-inf when there is none): what a running
 * `if (x[i] > mx) mx = x[i]` gives, in independent lanes that vectorize instead of one
 * compare-and-select chain per element. */
static float max_value(const float *x, int n) {
    enum { L = 16 };
    float m[L], mx = -INFINITY;
    int i = 0;
    for (int j = 0; j < L; j++) m[j] = -INFINITY;
    for (; i + L <= n; i += L)
        for (int j = 0; j < L; j++) m[j] = x[i + j] > m[j] ? x[i + j] : m[j];
    for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    for (int j = 0; j < L; j++) mx = m[j] > mx ? m[j] : mx;
    return mx;
}

/* The first index of the largest value: what `if (x[i] > x[best]) best = i` gives, without
 * its chain of dependent loads (a load, a compare and a cmov per element: ~0.5 ms over a
 * 152k vocabulary, per row and step). One pass over blocks that stay in L1: a block's
 * maximum in independent lanes (they vectorize); only a block that beats the best so far
 * (rare after the first few) is searched again for its first index of that maximum, and a
 * later block must beat it strictly, so ties go to the lower index. NaNs are skipped as
 * the scalar loop skips them, and a NaN at index 0 keeps index 0 as it does there. */
int32_t argmax_first(const float *x, int n) {
    enum { B = 1024 };
    if (n <= 1 || x[0] != x[0]) return 0;
    float best = x[0];
    int32_t bi = 0;
    for (int i0 = 0; i0 < n; i0 += B) {
        int nb = n - i0 < B ? n - i0 : B;
        float m = max_value(x + i0, nb);
        if (!(m > best)) continue;
        int j = 0;
        while (x[i0 + j] != m) j++;
        best = m;
        bi = i0 + j;
    }
    return bi;
}

/* a ranks before b: larger logit, then lower id (the order cmp_desc sorts by) */
static inline int before(const float *l, int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); }

/* Partial selection: moves the k largest (by logit, then id) to idx[0..k) in order. Small
 * k keeps a sorted list of the best k seen; an element that does not beat the k-th is
 * dropped after one compare, so a pass costs about one compare per token rather than k. */
static void select_top(int32_t *idx, int n, int k, const float *logits) {
    g_sort_logits = logits;
    if (k < n && k <= 256) {
        int32_t top[256];
        int m = 0;
        for (int i = 0; i < n; i++) {
            int32_t t = idx[i];
            if (m == k && !before(logits, t, top[k - 1])) continue;
            int j = m < k ? m++ : k - 1;
            for (; j > 0 && before(logits, t, top[j - 1]); j--) top[j] = top[j - 1];
            top[j] = t;
        }
        memcpy(idx, top, sizeof(int32_t) * k);
    } else qsort(idx, (size_t)n, sizeof(int32_t), cmp_desc);
}

int32_t sample_token(const sampling_params_t *p, float *logits, int vocab, const int32_t *history, int n_hist,
                     int n_prompt, uint64_t step, sampler_scratch_t *s) {
    for (int i = 0; i < p->n_bias; i++) logits[p->bias_ids[i]] += p->bias_vals[i];
    if (p->repetition_penalty != 1.0f) {
        /* each distinct token once: mark with the sign bit of count, restore after */
        for (int i = 0; i < n_hist; i++) {
            int32_t t = history[i];
            if (t < 0 || t >= vocab || s->count[t] < 0) continue;
            logits[t] = logits[t] > 0 ? logits[t] / p->repetition_penalty : logits[t] * p->repetition_penalty;
            s->count[t] = -1;
        }
        for (int i = 0; i < n_hist; i++) if (history[i] >= 0 && history[i] < vocab) s->count[history[i]] = 0;
    }
    if (p->presence_penalty != 0 || p->frequency_penalty != 0) {
        for (int i = n_prompt; i < n_hist; i++) if (history[i] >= 0 && history[i] < vocab) s->count[history[i]]++;
        for (int i = n_prompt; i < n_hist; i++) {
            int32_t t = history[i];
            if (t < 0 || t >= vocab || s->count[t] == 0) continue;
            logits[t] -= p->frequency_penalty * (float)s->count[t] + p->presence_penalty;
            s->count[t] = 0;
        }
    }
    if (p->temperature == 0) return argmax_first(logits, vocab);
    float inv_t = 1.0f / p->temperature;
    int n = vocab;
    for (int i = 0; i < vocab; i++) s->idx[i] = i;
    int need_order = p->top_k > 0 || p->top_p < 1.0f || p->min_p > 0;
    if (need_order) {
        int k = p->top_k > 0 && p->top_k < vocab ? p->top_k : vocab;
        select_top(s->idx, vocab, k, logits);
        n = k;
    }
    /* softmax over the candidates (max first; ordered candidates have it at idx[0]) */
    float mx = -INFINITY;
    if (need_order) { for (int i = 0; i < n; i++) if (logits[s->idx[i]] > mx) mx = logits[s->idx[i]]; }
    else mx = max_value(logits, vocab); /* idx is the identity here */
    double sum = 0;
    for (int i = 0; i < n; i++) {
        float pr = expf((logits[s->idx[i]] - mx) * inv_t);
        s->prob[i] = pr;
        sum += pr;
    }
    if (p->top_p < 1.0f) {
        double cum = 0;
        int keep = n;
        for (int i = 0; i < n; i++) {
            cum += s->prob[i] / sum;
            if (cum >= p->top_p) { keep = i + 1; break; }
        }
        n = keep;
        sum = 0;
        for (int i = 0; i < n; i++) sum += s->prob[i];
    }
    if (p->min_p > 0) {
        float thr = p->min_p * s->prob[0]; /* prob[0] is the most likely candidate */
        int keep = 1;
        while (keep < n && s->prob[keep] >= thr) keep++;
        n = keep;
        sum = 0;
        for (int i = 0; i < n; i++) sum += s->prob[i];
    }
    double u = rng_uniform(p->seed, step) * sum, cum = 0;
    for (int i = 0; i < n; i++) {
        cum += s->prob[i];
        if (u < cum) return s->idx[i];
    }
    return s->idx[n - 1];
}

void log_softmax(const float *logits, int vocab, float *out) {
    float mx = -INFINITY;
    for (int i = 0; i < vocab; i++) if (logits[i] > mx) mx = logits[i];
    double sum = 0;
    for (int i = 0; i < vocab; i++) sum += exp((double)logits[i] - mx);
    float lse = mx + (float)log(sum);
    for (int i = 0; i < vocab; i++) out[i] = logits[i] - lse;
}
