/* deltanet_chunk.c — the gated delta rule over a step: which tokens run chunk-parallel and
 * which token by token, and the scalar instantiation of the chunk kernel
 * (deltanet_chunk_body.h has the math; _avx2.c and _avx512.c compile the same C with their
 * -m flags).
 *
 * The split is a function of absolute positions and of where each row starts and ends: a
 * row's tokens that fill a whole aligned chunk [k·C, (k+1)·C) run in the chunk form, the
 * ones before the first such chunk and after the last token by token (deltanet_ref.c).
 * Nothing depends on the other rows or the thread count, so a row gives the same bits alone
 * or in any batch; the engine keeps the split independent of how it cuts a prompt into steps
 * by never ending a step inside an aligned chunk (docs/architecture.md). */
#include <math.h>
#include <string.h>
#include <stdlib.h>
#include "backend/cpu/cpu_hybrid.h"

#define DC_NAME delta_chunk_scalar
#define DC_MB 4
#define DC_VW 4
#define DC_NB 16
#include "backend/cpu/deltanet_chunk_body.h"

size_t delta_chunk_floats(const delta_args_t *d) {
    size_t C = (size_t)d->chunk;
    return 3 * C * d->dk + C * d->dv + 2 * C * C + 4 * C;
}

void gated_delta_rows(float *out, const float *qkv, const float *a, const float *b, const delta_args_t *d, int h0, int h1,
                      delta_chunk_fn fn) {
    int C = d->chunk;
    float *ws = NULL;
    size_t hs = (size_t)d->dk * d->dv;
    for (int r = 0; r < d->n_rows; r++) {
        int t0 = d->row_start[r], t1 = d->row_start[r + 1];
        float *S = d->state[r];
        if (t0 >= t1) continue;
        if (!d->pos || C <= 0 || !fn) {
            ref_gated_delta_tokens(out, qkv, a, b, d, S, t0, t1, h0, h1);
            continue;
        }
        /* the row's positions are pos[t0] … pos[t0] + (t1 - t0) - 1 */
        int p0 = d->pos[t0];
        int first = (p0 + C - 1) / C * C; /* the first aligned chunk start at or after p0 */
        int t = t0 + (first - p0) < t1 ? t0 + (first - p0) : t1;
        ref_gated_delta_tokens(out, qkv, a, b, d, S, t0, t, h0, h1);
        for (; t + C <= t1; t += C) {
            if (!ws && !(ws = malloc(sizeof(float) * delta_chunk_floats(d)))) abort();
            for (int h = h0; h < h1; h++) fn(out, qkv, a, b, d, S + (size_t)h * hs, t, h, ws);
        }
        ref_gated_delta_tokens(out, qkv, a, b, d, S, t, t1, h0, h1);
    }
    free(ws);
}
