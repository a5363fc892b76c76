/* rope.c — see rope.h. transformers computes the tables in float32; so do we (the base
 * frequencies via double pow, rounded once), which keeps angles within an ulp of theirs. */
#include "model/rope.h"
#include <math.h>

static double yarn_get_mscale(double scale, double m) {
    return scale <= 1.0 ? 1.0 : 0.1 * m * log(scale) + 1.0;
}

/* the dimension index whose wavelength makes num_rot rotations over max_pos */
static double yarn_correction_dim(double num_rot, int dim, double base, int max_pos) {
    return (dim * log(max_pos / (num_rot * 2 * M_PI))) / (2 * log(base));
}

void rope_inv_freq(const rope_config_t *r, int dim, int max_pos, int seq_len, float *inv, float *mscale) {
    int half = dim / 2;
    double base = r->theta;
    *mscale = 1.0f;
    if (r->type == ROPE_DYNAMIC) {
        int orig = r->original_max_pos > 0 ? r->original_max_pos : max_pos;
        if (seq_len > orig)
            base = base * pow(r->factor * seq_len / orig - (r->factor - 1), (double)dim / (dim - 2));
    }
    for (int i = 0; i < half; i++) {
        float exponent = (float)(2 * i) / (float)dim;
        inv[i] = (float)(1.0 / pow(base, exponent));
    }
    switch (r->type) {
    case ROPE_DEFAULT:
    case ROPE_DYNAMIC:
        break;
    case ROPE_LINEAR:
        for (int i = 0; i < half; i++) inv[i] = inv[i] / (float)r->factor;
        break;
    case ROPE_PROPORTIONAL: {
        /* gemma4 global layers: call with dim = head_dim. The first floor(partial·dim/2)
         * frequencies keep the full-head exponent 2i/dim, the rest are 0 (no rotation). */
        int angles = (int)(r->partial_rotary_factor * dim / 2);
        for (int i = 0; i < half; i++) inv[i] = i < angles ? inv[i] / (float)r->factor : 0.0f;
        break;
    }
    case ROPE_LLAMA3: {
        double orig = r->original_max_pos > 0 ? r->original_max_pos : 8192;
        double low_wl = orig / r->low_freq_factor, high_wl = orig / r->high_freq_factor;
        for (int i = 0; i < half; i++) {
            double f = inv[i], wl = 2 * M_PI / f;
            float out;
            if (wl < high_wl) out = (float)f;
            else if (wl > low_wl) out = (float)(f / r->factor);
            else {
                double smooth = (orig / wl - r->low_freq_factor) / (r->high_freq_factor - r->low_freq_factor);
                out = (float)((1 - smooth) * f / r->factor + smooth * f);
            }
            inv[i] = out;
        }
        break;
    }
    case ROPE_YARN: {
        int orig = r->original_max_pos > 0 ? r->original_max_pos : max_pos;
        double factor = r->factor;
        double att = r->attention_factor;
        if (!(att > 0)) {
            if (r->mscale > 0 && r->mscale_all_dim > 0)
                att = yarn_get_mscale(factor, r->mscale) / yarn_get_mscale(factor, r->mscale_all_dim);
            else att = yarn_get_mscale(factor, 1.0);
        }
        double lo = yarn_correction_dim(r->beta_fast, dim, base, orig);
        double hi = yarn_correction_dim(r->beta_slow, dim, base, orig);
        if (r->truncate) { lo = floor(lo); hi = ceil(hi); }
        if (lo < 0) lo = 0;
        if (hi > dim - 1) hi = dim - 1;
        if (lo == hi) hi += 0.001;
        for (int i = 0; i < half; i++) {
            double extrap = inv[i], interp = inv[i] / factor;
            double ramp = (i - lo) / (hi - lo);
            if (ramp < 0) ramp = 0;
            if (ramp > 1) ramp = 1;
            double ext_factor = 1 - ramp;
            inv[i] = (float)(interp * (1 - ext_factor) + extrap * ext_factor);
        }
        *mscale = (float)att;
        break;
    }
    }
}
