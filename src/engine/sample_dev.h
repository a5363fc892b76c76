/* sample_dev.h — sampling on the device through the backend's op sample (backend.h), for
 * the engine's steps (engine_int.h: sample_dev_run) and for `kiln generate`. The token is
 * the one sample_token (sampler.h) gives on the same logits, except where the device's expf
 * moves a boundary by an ulp (backend/cuda/sample.cu). */
#ifndef KILN_SAMPLE_DEV_H
#define KILN_SAMPLE_DEV_H

#include "backend/backend.h"
#include "engine/sampler.h"

typedef struct sample_dev sample_dev_t;

/* NULL when out of memory. */
sample_dev_t *sample_dev_new(int vocab);
void sample_dev_free(sample_dev_t *d);
/* One row: what sample_token(p, logits, vocab, hist, n_hist, n_prompt, step) returns, from
 * logits[vocab] in backend memory (changed in place, as the host's). 0 or -1 (memory). */
int sample_dev_one(sample_dev_t *d, backend_t *be, float *dev_logits, const sampling_params_t *p, const int32_t *hist,
                   int n_hist, int n_prompt, uint64_t step, int32_t *tok);

#endif
