/* bf16_emul.c — what rounding the matmul inputs does to a fixture's logits, on the CPU.
 *
 * The CUDA backend's tensor-core path ("cuda" with cuBLASLt) multiplies bf16 weights by x
 * rounded to bf16: the products are exact in f32 and summed in f32, so the only error
 * against the f32 path is the rounding of x. This tool runs a fixture on the CPU reference
 * backend with its matmul op wrapped to round x the same way, and prints the logits' error
 * against the fixture's reference — the error any bf16-activation GEMM must have, without
 * a GPU. Used to find which matmuls the hybrid/gemma4 fixtures are sensitive to
 * (docs/cuda.md, "Numerics").
 *
 *   bf16_emul MODEL_DIR REF_NPY [MODE]
 *   MODE: bf16 (default: every matmul's x rounded to bf16), hilo (x = hi + lo, both bf16:
 *   two GEMMs), none (f32), tf32 (x rounded to 10 mantissa bits), fp8lo (x = hi + lo with
 *   lo in e4m3 scaled per token and the lo product against W in e4m3 scaled per row: the
 *   CUDA backend's KILN_CUDA_SPLIT=fp8), fp8lo-t (the same with one scale per tensor),
 *   bf16w (x rounded once, and MLX/f16 weights dequantized and rounded to bf16 as well: a
 *   bf16 GEMM on dequantized weights)
 *   BF16_KEEP="RxC,RxC": weights of these shapes keep f32 x (to find sensitive matmuls);
 *   BF16_ONLY="RxC,...": only these shapes are rounded.
 *   BF16_KEEP_SMALL=N: weights with at most N rows keep f32 x (routers, a/b projections).
 *
 * Build (CPU build dir, not part of CMake):
 *   cc -O2 -std=c11 -Isrc -Itests/cuda tests/cuda/bf16_emul.c build-X/libkilncore.a -ljansson -lm -lpthread */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <jansson.h>
#include "cuda_test.h"
#include "base/npy.h"
#include "model/model.h"

static backend_ops_t wrapped;
static void (*inner_matmul)(backend_t *, float *, const float *, int, const weight_t *);
static int mode; /* 0 bf16, 1 hilo, 2 none, 3 tf32, 4 fp8lo (per row/token scales), 5 fp8lo-t (per tensor), 6 bf16w */
static const char *keep, *only;
static int keep_small;
static float *xr;
static size_t xr_n;

static float round_bits(float f, int drop) { /* round to nearest even, dropping `drop` low mantissa bits */
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t half = 1u << (drop - 1), lsb = (u >> drop) & 1;
    u = (u + half - 1 + lsb) & ~((1u << drop) - 1);
    memcpy(&f, &u, 4);
    return f;
}

/* f → e4m3 (4 significant bits, max 448, subnormals from 2^-6 in steps of 2^-9), back to f32 */
static float e4m3(float f) {
    float a = f < 0 ? -f : f;
    if (a >= 448.f) return f < 0 ? -448.f : 448.f;
    if (a < 0.015625f) return rintf(f * 512.f) / 512.f; /* subnormal: multiples of 2^-9, ties to even */
    return round_bits(f, 20);
}
/* v[0..n) in e4m3 with scale amax/448 (per row when called on a row) */
static void fp8_round(float *v, size_t n) {
    float amax = 0;
    for (size_t i = 0; i < n; i++) amax = fabsf(v[i]) > amax ? fabsf(v[i]) : amax;
    if (amax == 0) return;
    const float s = amax / 448.f;
    for (size_t i = 0; i < n; i++) v[i] = e4m3(v[i] / s) * s;
}

static int shape_in(const char *list, int r, int c) {
    if (!list) return 0;
    char s[32];
    snprintf(s, sizeof s, "%dx%d", r, c);
    const char *p = list;
    size_t n = strlen(s);
    while ((p = strstr(p, s))) {
        if ((p == list || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return 1;
        p += n;
    }
    return 0;
}

static void emul_matmul(backend_t *be, float *y, const float *x, int T, const weight_t *w) {
    size_t n = (size_t)T * w->cols;
    int skip = mode == 2 || shape_in(keep, w->rows, w->cols) || (only && !shape_in(only, w->rows, w->cols)) ||
               w->rows <= keep_small;
    static int seen[64][2], n_seen;
    int s;
    for (s = 0; s < n_seen; s++) if (seen[s][0] == w->rows && seen[s][1] == w->cols) break;
    if (s == n_seen && n_seen < 64) { seen[n_seen][0] = w->rows; seen[n_seen][1] = w->cols; n_seen++; fprintf(stderr, "# shape %dx%d\n", w->rows, w->cols); }
    if (skip) { inner_matmul(be, y, x, T, w); return; }
    if (n > xr_n) { free(xr); xr = malloc(sizeof(float) * 2 * n); xr_n = n; }
    float *lo = xr + n;
    for (size_t i = 0; i < n; i++) {
        xr[i] = round_bits(x[i], mode == 3 ? 13 : 16);
        lo[i] = round_bits(x[i] - xr[i], 16);
    }
    if (mode != 6 || w->dtype == DT_BF16 || w->dtype == DT_F32) inner_matmul(be, y, xr, T, w);
    else { /* W dequantized and rounded to bf16 */
        float *wf = malloc(sizeof(float) * (size_t)w->rows * w->cols);
        for (int r = 0; r < w->rows; r++) weight_row_f32(w, r, wf + (size_t)r * w->cols);
        for (size_t i = 0; i < (size_t)w->rows * w->cols; i++) wf[i] = round_bits(wf[i], 16);
        weight_t wb = {w->rows, w->cols, DT_F32, wf, 0, 0, NULL, NULL, DT_F32, NULL};
        inner_matmul(be, y, xr, T, &wb);
        free(wf);
    }
    if (mode == 4 || mode == 5) { /* lo and W in e4m3 for the lo product */
        if (mode == 4) for (int t = 0; t < T; t++) fp8_round(lo + (size_t)t * w->cols, w->cols);
        else fp8_round(lo, n);
        float *wf = malloc(sizeof(float) * (size_t)w->rows * w->cols);
        for (int r = 0; r < w->rows; r++) weight_row_f32(w, r, wf + (size_t)r * w->cols);
        if (mode == 4) for (int r = 0; r < w->rows; r++) fp8_round(wf + (size_t)r * w->cols, w->cols);
        else fp8_round(wf, (size_t)w->rows * w->cols);
        weight_t w8 = {w->rows, w->cols, DT_F32, wf, 0, 0, NULL, NULL, DT_F32, NULL};
        float *y2 = malloc(sizeof(float) * (size_t)T * w->rows);
        inner_matmul(be, y2, lo, T, &w8);
        for (size_t i = 0; i < (size_t)T * w->rows; i++) y[i] += y2[i];
        free(y2);
        free(wf);
    }
    if (mode == 1) { /* y += W · lo */
        float *y2 = malloc(sizeof(float) * (size_t)T * w->rows);
        inner_matmul(be, y2, lo, T, w);
        for (size_t i = 0; i < (size_t)T * w->rows; i++) y[i] += y2[i];
        free(y2);
    }
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: bf16_emul MODEL_DIR REF_NPY [bf16|hilo|none|tf32]\n"); return 2; }
    const char *m_arg = argc > 3 ? argv[3] : "bf16";
    mode = !strcmp(m_arg, "hilo") ? 1 : !strcmp(m_arg, "none") ? 2 : !strcmp(m_arg, "tf32") ? 3 : !strcmp(m_arg, "fp8lo") ? 4
         : !strcmp(m_arg, "fp8lo-t") ? 5 : !strcmp(m_arg, "bf16w") ? 6 : 0;
    keep = getenv("BF16_KEEP");
    only = getenv("BF16_ONLY");
    keep_small = getenv("BF16_KEEP_SMALL") ? atoi(getenv("BF16_KEEP_SMALL")) : 0;
    char path[512];
    snprintf(path, sizeof path, "%s/reference/reference.json", argv[1]);
    json_error_t je;
    json_t *ref = json_load_file(path, 0, &je);
    if (!ref) { fprintf(stderr, "%s: %s\n", path, je.text); return 1; }
    json_t *ids_j = json_object_get(ref, "input_ids");
    int n = (int)json_array_size(ids_j);
    int32_t *ids = malloc(sizeof(int32_t) * n), *pos = malloc(sizeof(int32_t) * n), *li = malloc(sizeof(int32_t) * n);
    for (int i = 0; i < n; i++) { ids[i] = (int32_t)json_integer_value(json_array_get(ids_j, i)); pos[i] = li[i] = i; }
    float *want = NULL;
    size_t rows, cols;
    err_t e = {0};
    if (npy_read_f32(argv[2], &want, &rows, &cols, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
    const char *bufenv = getenv("BF16_BUFFERS");
    model_opts_t o = {"cpu-ref", 1, bufenv && !strcmp(bufenv, "f32") ? DT_F32 : DT_BF16};
    model_t *m = model_load(argv[1], &o, &e);
    if (!m) { fprintf(stderr, "%s\n", e.msg); return 1; }
    if (model_init_kv(m, 16, 16, DT_F32, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
    wrapped = *m->be->ops;
    inner_matmul = wrapped.matmul;
    wrapped.matmul = emul_matmul;
    m->be->ops = &wrapped;
    float *got = malloc(sizeof(float) * rows * cols);
    kv_seq_t s;
    kv_seq_init(&s);
    kv_seq_t *sp = &s;
    kv_seq_reserve(&s, &m->kv, n, &e);
    int32_t rs[2] = {0, n};
    batch_t b = {1, n, ids, pos, rs, &sp, li, n};
    if (model_forward(m, &b, got, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
    double err = ct_rel_err(got, want, rows * cols);
    /* per token: where along the sequence the error grows */
    double worst = 0; int wt = 0;
    for (size_t t = 0; t < rows; t++) {
        double et = ct_rel_err(got + t * cols, want + t * cols, cols);
        if (et > worst) { worst = et; wt = (int)t; }
    }
    printf("%s %s: logits rel err %.4g (worst token %d: %.4g of its own max)\n", argv[1], m_arg, err, wt, worst);
    model_seq_release(m, &s);
    kv_seq_free(&s, &m->kv);
    model_free(m);
    return 0;
}
