/* fuzz_sampler.c — libFuzzer target for token sampling (engine/sampler.c) with any parameters
 * sampling_validate accepts and any logits (NaN, ±inf, huge, all equal) and history.
 *
 * Input: 32 bytes of parameters (temperature, top_k, top_p, min_p, the three penalties, a seed,
 * a logit bias), then the vocabulary's logits as floats (2..512 of them, raw bits: every NaN,
 * infinity and denormal), then history ids. Checked, each an abort() when violated:
 *   - the sampled id is in [0, vocab);
 *   - the same inputs give the same id (the counter-based RNG: a row's token never depends on
 *     anything but (seed, step) and its logits).
 *   build-fuzz/fuzz_sampler -max_total_time=300 tests/fuzz/corpus/sampler
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sampler.h"

static float f01(uint8_t b) { return b / 255.0f; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 32 + 8) return 0;
    const uint8_t *q = data;
    sampling_params_t p;
    sampling_defaults(&p);
    p.temperature = q[0] < 64 ? 0.0f : f01(q[1]) * 4.0f;
    p.top_k = q[2] % 4 ? 0 : q[3];
    p.top_p = q[4] % 3 ? 1.0f : f01(q[5]);
    p.min_p = q[6] % 3 ? 0.0f : f01(q[7]);
    p.repetition_penalty = q[8] % 3 ? 1.0f : 0.5f + f01(q[9]) * 2.0f;
    p.presence_penalty = q[10] % 3 ? 0.0f : (f01(q[11]) - 0.5f) * 4.0f;
    p.frequency_penalty = q[12] % 3 ? 0.0f : (f01(q[13]) - 0.5f) * 4.0f;
    memcpy(&p.seed, q + 14, 8);
    int32_t bias_id = q[22];
    float bias_val = (f01(q[23]) - 0.5f) * 200.0f;
    if (q[24] % 2) {
        p.bias_ids = &bias_id;
        p.bias_vals = &bias_val;
        p.n_bias = 1;
    }
    uint64_t step = q[25];
    int vocab = 2 + q[26] % 511;
    size_t rest = size - 32;
    if (rest / 4 < (size_t)vocab) vocab = (int)(rest / 4);
    if (vocab < 2) return 0;
    if (bias_id >= vocab) bias_id = vocab - 1;
    err_t e = {0};
    if (sampling_validate(&p, vocab, &e)) {
        if (!e.msg[0]) abort();
        return 0;
    }
    float *logits = malloc(sizeof(float) * vocab), *copy = malloc(sizeof(float) * vocab);
    memcpy(logits, data + 32, sizeof(float) * vocab);
    int n_hist = (int)((rest - 4 * (size_t)vocab) / 2);
    int32_t *hist = malloc(sizeof(int32_t) * (n_hist ? n_hist : 1));
    for (int i = 0; i < n_hist; i++) hist[i] = (data[32 + 4 * vocab + 2 * i] | data[33 + 4 * vocab + 2 * i] << 8) % vocab;
    int n_prompt = n_hist ? q[27] % (n_hist + 1) : 0;
    sampler_scratch_t s;
    if (sampler_scratch_init(&s, vocab)) abort();
    memcpy(copy, logits, sizeof(float) * vocab);
    int32_t a = sample_token(&p, logits, vocab, hist, n_hist, n_prompt, step, &s);
    int32_t b = sample_token(&p, copy, vocab, hist, n_hist, n_prompt, step, &s);
    if (a < 0 || a >= vocab) abort(); /* out of the vocabulary */
    if (a != b) abort();              /* not a function of its inputs */
    sampler_scratch_free(&s);
    free(logits);
    free(copy);
    free(hist);
    return 0;
}
