/* ct_synth.h — a random-weight checkpoint with a real model's shapes (synth_write) in a fresh
 * temporary directory, and its removal: for the GPU tests that run real shapes as a model
 * (test_cuda_hybrid's graph check, test_cuda_shapes). */
#ifndef KILN_CT_SYNTH_H
#define KILN_CT_SYNTH_H

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "load/synth_presets.h"

static int ct_rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st; (void)flag; (void)ftw;
    return remove(path);
}

/* dir: a writable "...XXXXXX" template, made a directory; then preset at dtype dt (bits > 0: MLX
 * affine, groups of 64), the first `layers` layers, weights from seed. 0, or -1 with the reason in
 * err (the directory, if made, is left for ct_rm_tree). */
static inline int ct_synth_tmp(char *dir, const char *preset, dtype_t dt, int bits, int layers, uint64_t seed, char *err, size_t n) {
    if (!mkdtemp(dir)) { snprintf(err, n, "mkdtemp: %s", strerror(errno)); return -1; }
    synth_opts_t so = {0};
    so.preset = synth_preset_find(preset, NULL);
    so.dtype = dt;
    so.bits = bits;
    so.group_size = bits ? 64 : 0;
    so.seed = seed;
    so.layers = layers;
    so.out = dir;
    err_t e = {0};
    if (!so.preset) { snprintf(err, n, "synth %s: no such preset", preset); return -1; }
    if (synth_write(&so, &e)) { snprintf(err, n, "synth %s: %s", preset, e.msg); return -1; }
    return 0;
}

/* Removes dir and everything in it (after ct_synth_tmp, whether or not it succeeded). */
static inline void ct_rm_tree(const char *dir) { nftw(dir, ct_rm_entry, 8, FTW_DEPTH | FTW_PHYS); }

#endif
