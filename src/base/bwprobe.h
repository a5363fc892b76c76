/* bwprobe.h — the memory read-bandwidth ceiling that decode rooflines are quoted against.
 *
 * T threads each sum a disjoint slice of a buffer much larger than the last-level cache
 * (AVX2 loads, four accumulators); a reading is the best of P passes. This is the loop of
 * bench/probe.c (kiln-probe links this file), here as a library so `kiln bench --probe`
 * can measure the ceiling right before and right after each decode run, in the same
 * process, with the same number of threads as the model. */
#ifndef KILN_BWPROBE_H
#define KILN_BWPROBE_H

#include <stddef.h>

typedef struct bwprobe bwprobe_t;

/* Allocates and touches a buffer of `mib` MiB (>= 64); NULL when out of memory. */
bwprobe_t *bwprobe_create(size_t mib);
/* Read bandwidth in GB/s (1e9 bytes/s) with `threads` threads, best of `passes`. */
double bwprobe_read_gbs(bwprobe_t *p, int threads, int passes);
void bwprobe_free(bwprobe_t *p);

#endif
