/* delta_bench.c — times the CPU gated delta rule at Qwen3.5-0.8B shapes on one thread: one
 * layer's prefill of T tokens (16 value heads, dk = dv = 128, whole chunks of 64 through
 * each kernel family's chunk kernel) and decode (one token through 18 layers' states, so
 * the 19 MB of state comes from memory as in a real step). Not part of the build:
 *
 *   gcc -O2 -march=native -ffp-contract=off -Isrc bench/hybrid/delta_bench.c \
 *       BUILD/libkilncore.a -lm -lpthread -o /tmp/delta_bench
 *   /tmp/delta_bench [T=512] [A_log center=-1] [dt_bias=0.1]
 *
 * A_log 1, dt_bias 1 are kiln synth's Qwen3.5 values: decays of e^-3..e^-4 per token, so a
 * chunk spans e^-200 and most of its Γ are below FLT_MIN (see deltanet_chunk_body.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "backend/cpu/cpu_hybrid.h"
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
int main(int argc, char **argv) {
    int nv = 16, nk = 16, dk = 128, dv = 128, T = argc > 1 ? atoi(argv[1]) : 512, L = 18;
    int stride = 2 * nk * dk + nv * dv;
    float *qkv = malloc(sizeof(float) * (size_t)T * stride), *a = malloc(sizeof(float) * T * nv), *b = malloc(sizeof(float) * T * nv);
    float *out = malloc(sizeof(float) * (size_t)T * nv * dv);
    srand(1);
    for (size_t i = 0; i < (size_t)T * stride; i++) qkv[i] = (float)rand() / RAND_MAX - 0.5f;
    for (int i = 0; i < T * nv; i++) { a[i] = (float)rand() / RAND_MAX - 0.5f; b[i] = (float)rand() / RAND_MAX - 0.5f; }
    float Al[16], dt[16];
    float a0 = argc > 2 ? atof(argv[2]) : -1.f, dts = argc > 3 ? atof(argv[3]) : 0.1f;
    for (int i = 0; i < 16; i++) { Al[i] = a0 + 0.1f * (i - 8); dt[i] = dts; }
    size_t sfl = (size_t)nv * dk * dv;
    float *states = calloc((size_t)L * sfl, sizeof(float));
    int32_t rs[2] = {0, T};
    int32_t *pos = malloc(sizeof(int32_t) * T);
    for (int t = 0; t < T; t++) pos[t] = t;
    float *st[1];
    delta_args_t d = {.n_rows = 1, .row_start = rs, .n_k_heads = nk, .n_v_heads = nv, .dk = dk, .dv = dv, .stride = stride,
                      .q_off = 0, .k_off = nk * dk, .v_off = 2 * nk * dk, .q_scale = 1.f / sqrtf(dk), .A_log = Al, .dt_bias = dt,
                      .state = st, .pos = pos, .chunk = 64};
    delta_chunk_fn fns[4] = {delta_chunk_scalar, delta_chunk_avx2, delta_chunk_avx512, NULL};
    const char *nm[4] = {"scalar", "avx2", "avx512", "none (token by token)"};
    for (int f = 0; f < 4; f++) {
        double best = 1e9;
        for (int r = 0; r < 3; r++) {
            st[0] = states;
            memset(states, 0, sizeof(float) * sfl);
            double t0 = now();
            gated_delta_rows(out, qkv, a, b, &d, 0, nv, fns[f]);
            double el = now() - t0;
            if (el < best) best = el;
        }
        double fl = 2.0 * T * nv * (2.0 * dk * dv + 2 * 64 * dk + 64 * dv + dk * dv);
        printf("prefill T=%d chunk %s: %.1f ms (%.1f GFLOP/s approx)\n", T, nm[f], best * 1e3, fl / best * 1e-9);
    }
    /* decode: one token per layer state over L layers (state out of cache), 64 tokens */
    d.pos = NULL; rs[1] = 1;
    double best = 1e9;
    for (int r = 0; r < 3; r++) {
        double t0 = now();
        for (int tok = 0; tok < 64; tok++)
            for (int l = 0; l < L; l++) { st[0] = states + (size_t)l * sfl; ref_gated_delta(out, qkv, a, b, 1, &d, 0, nv); }
        double el = (now() - t0) / 64;
        if (el < best) best = el;
    }
    printf("decode: %.3f ms per token for %d layers (state %.1f MB, %.1f GB/s r+w)\n", best * 1e3, L, L * sfl * 4e-6, 2 * L * sfl * 4e-9 / best);
    return 0;
}
