/* rope.h — RoPE frequency tables for every rope_type transformers supports here:
 * default, linear, dynamic (NTK), llama3 and yarn. Computed once at load (dynamic: per
 * sequence length), following transformers' modeling_rope_utils. */
#ifndef KILN_ROPE_H
#define KILN_ROPE_H

#include "load/config.h"

/* Fills inv_freq[rot_dim/2] and the cos/sin scale (yarn's attention factor, else 1).
 * seq_len matters only for dynamic scaling (the row's length so far). */
void rope_inv_freq(const rope_config_t *r, int rot_dim, int max_pos, int seq_len, float *inv_freq, float *mscale);

#endif
