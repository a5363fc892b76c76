/* sample_dev.c — a step's rows sampled on the device, when the backend has the op sample.
 *
 * After a forward the [rows, vocab] logits are already in device memory; copying them to
 * the host (39 MB at 64 rows of a 152k vocabulary) and walking them there costs the step
 * milliseconds. Instead each row's sampling parameters go down (a few dozen bytes, plus its
 * logit bias and, when a penalty is on, its distinct history tokens with their counts among
 * the output tokens) and one token id per row comes back. The device computes what
 * sample_token (sampler.c) would: backend/cuda/sample.cu says where the two can differ.
 *
 * The engine uses it for a step when every row that samples wants no logprobs (those need
 * the raw logits on the host) and the model leaves its logits on the device
 * (model_t.dev_logits_ok); KILN_DEVICE_SAMPLING=0 turns it off. */
#include <stdlib.h>
#include <string.h>
#include "backend/backend.h"
#include "engine/engine_int.h"

struct sample_dev {
    int vocab;
    sample_row_t *rows;            /* [cap_rows] */
    int32_t *tok;                  /* [cap_rows] */
    int cap_rows;
    int32_t *bias_ids;             /* [cap_bias], every row's logit_bias in turn */
    float *bias_vals;
    int cap_bias;
    int32_t *pen_ids, *pen_counts; /* [cap_pen], every penalized row's distinct history */
    int cap_pen;
    int32_t *mark;                 /* [vocab] 0, or 1 + the token's index in pen_ids while a row is listed */
};

sample_dev_t *sample_dev_new(int vocab) {
    sample_dev_t *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->vocab = vocab;
    if (!(d->mark = calloc((size_t)vocab, sizeof(int32_t)))) { free(d); return NULL; }
    return d;
}

void sample_dev_free(sample_dev_t *d) {
    if (!d) return;
    free(d->rows); free(d->tok); free(d->bias_ids); free(d->bias_vals); free(d->pen_ids); free(d->pen_counts); free(d->mark);
    free(d);
}

/* Grows *p (elements of size sz) to hold need, *cap to its new size; 0 or -1. Arrays that
 * share a capacity are grown from the same old *cap, so they reach the same size. */
static int grow(void **p, int *cap, int need, size_t sz) {
    if (need <= *cap) return 0;
    int nc = *cap ? *cap : 64;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, sz * (size_t)nc);
    if (!q) return -1;
    *p = q;
    *cap = nc;
    return 0;
}

static int grow_pen(sample_dev_t *d, int need) {
    int c = d->cap_pen;
    if (grow((void **)&d->pen_ids, &c, need, sizeof(int32_t))) return -1;
    c = d->cap_pen;
    if (grow((void **)&d->pen_counts, &c, need, sizeof(int32_t))) return -1;
    d->cap_pen = c;
    return 0;
}

/* Appends one row (the arguments of sample_token) to the batch being built. */
static int add_row(sample_dev_t *d, int n, const sampling_params_t *p, const int32_t *hist, int n_hist, int n_prompt,
                   uint64_t step, int *nb, int *np) {
    const int V = d->vocab;
    int c = d->cap_rows;
    if (grow((void **)&d->rows, &c, n + 1, sizeof(sample_row_t))) return -1;
    c = d->cap_rows;
    if (grow((void **)&d->tok, &c, n + 1, sizeof(int32_t))) return -1;
    d->cap_rows = c;
    sample_row_t *R = &d->rows[n];
    *R = (sample_row_t){.temperature = p->temperature, .top_p = p->top_p, .min_p = p->min_p,
                        .repetition_penalty = p->repetition_penalty, .presence_penalty = p->presence_penalty,
                        .frequency_penalty = p->frequency_penalty, .top_k = p->top_k, .bias_off = *nb,
                        .n_bias = p->n_bias, .pen_off = *np, .seed = p->seed, .step = step};
    c = d->cap_bias;
    if (grow((void **)&d->bias_ids, &c, *nb + p->n_bias, sizeof(int32_t))) return -1;
    c = d->cap_bias;
    if (grow((void **)&d->bias_vals, &c, *nb + p->n_bias, sizeof(float))) return -1;
    d->cap_bias = c;
    if (p->n_bias) {
        memcpy(d->bias_ids + *nb, p->bias_ids, sizeof(int32_t) * p->n_bias);
        memcpy(d->bias_vals + *nb, p->bias_vals, sizeof(float) * p->n_bias);
    }
    *nb += p->n_bias;
    if (p->repetition_penalty == 1.0f && p->presence_penalty == 0 && p->frequency_penalty == 0) return 0;
    /* the row's distinct history tokens, first occurrence first, with output counts */
    int k = *np;
    if (grow_pen(d, k + n_hist)) return -1;
    for (int j = 0; j < n_hist; j++) {
        int32_t t = hist[j];
        if (t < 0 || t >= V) continue;
        if (!d->mark[t]) {
            d->pen_ids[k] = t;
            d->pen_counts[k] = 0;
            d->mark[t] = ++k;
        }
        if (j >= n_prompt) d->pen_counts[d->mark[t] - 1]++;
    }
    for (int j = R->pen_off; j < k; j++) d->mark[d->pen_ids[j]] = 0;
    R->n_pen = k - R->pen_off;
    *np = k;
    return 0;
}

static void launch(sample_dev_t *d, backend_t *be, float *dev_logits, int n) {
    sample_args_t a = {n, d->vocab, d->rows, d->bias_ids, d->bias_vals, d->pen_ids, d->pen_counts};
    be->ops->sample(be, d->tok, dev_logits, &a);
}

int sample_dev_run(sample_dev_t *d, backend_t *be, float *dev_logits, kiln_request_t *const *req, const int *sample_row,
                   int n_rows, int32_t *tok_by_row) {
    int n = 0, nb = 0, np = 0;
    for (int i = 0; i < n_rows; i++) {
        if (!sample_row[i]) continue;
        const kiln_request_t *r = req[i];
        if (add_row(d, n++, &r->p.sampling, r->tokens, r->n_tokens, r->n_prompt, (uint64_t)r->n_gen, &nb, &np)) return -1;
    }
    if (!n) return 0;
    launch(d, be, dev_logits, n);
    for (int i = 0, k = 0; i < n_rows; i++)
        if (sample_row[i]) tok_by_row[i] = d->tok[k++];
    return 0;
}

int sample_dev_one(sample_dev_t *d, backend_t *be, float *dev_logits, const sampling_params_t *p, const int32_t *hist,
                   int n_hist, int n_prompt, uint64_t step, int32_t *tok) {
    int nb = 0, np = 0;
    if (add_row(d, 0, p, hist, n_hist, n_prompt, step, &nb, &np)) return -1;
    launch(d, be, dev_logits, 1);
    *tok = d->tok[0];
    return 0;
}
