/* sampler.h — turning a row's logits into the next token.
 *
 * Order (as transformers / vLLM apply them): logit bias → repetition penalty (prompt and
 * output, HF's divide-positive/multiply-negative rule) → presence and frequency penalties
 * (output tokens, OpenAI's rule) → temperature → top-k → top-p → min-p → draw. The
 * draw uses a counter-based RNG keyed by (seed, step): the same request gives the same
 * tokens whatever batch it runs in, and after a resume at step n. */
#ifndef KILN_SAMPLER_H
#define KILN_SAMPLER_H

#include <stdint.h>
#include "base/err.h"

typedef struct sampling_params {
    float temperature;          /* 0: greedy                          */
    int top_k;                  /* 0: off                             */
    float top_p;                /* 1: off                             */
    float min_p;                /* 0: off                             */
    float repetition_penalty;   /* 1: off                             */
    float presence_penalty;     /* 0: off                             */
    float frequency_penalty;    /* 0: off                             */
    const int32_t *bias_ids;    /* logit_bias: token ids ...          */
    const float *bias_vals;     /* ... and the values added           */
    int n_bias;
    uint64_t seed;
} sampling_params_t;

void sampling_defaults(sampling_params_t *p);
/* Checks ranges; names the parameter. */
int sampling_validate(const sampling_params_t *p, int vocab, err_t *e);

/* Uniform double in [0, 1) from (seed, step). */
double rng_uniform(uint64_t seed, uint64_t step);

typedef struct sampler_scratch {
    int vocab;
    int32_t *idx;   /* [vocab] */
    float *prob;    /* [vocab] */
    int32_t *count; /* [vocab] output-token counts */
} sampler_scratch_t;

int sampler_scratch_init(sampler_scratch_t *s, int vocab);
void sampler_scratch_free(sampler_scratch_t *s);

/* Samples from logits[vocab] (modified in place). history: prompt then output tokens,
 * n_prompt of them from the prompt. step: the output index (0 for the first token). */
int32_t sample_token(const sampling_params_t *p, float *logits, int vocab, const int32_t *history, int n_hist,
                     int n_prompt, uint64_t step, sampler_scratch_t *s);
/* The first index of the largest of x[0..n) (NaNs skipped; NaN at 0: 0): greedy decoding. */
int32_t argmax_first(const float *x, int n);
/* Log-probability of each token under the unpenalized, untempered softmax (for logprobs). */
void log_softmax(const float *logits, int vocab, float *out);

#endif
