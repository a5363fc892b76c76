/* q8ril.h — 8-bit MLX weights in the rows-in-lanes layout WL_Q_RIL16 on AVX512-VNNI CPUs
 * (matmul_q8ril_avx512.c; see the story there). Used by the AVX-512 family (matmul_avx512.c):
 * its dispatch, its matmul_rows and its pack_layout. Include only from AVX-512 files. */
#ifndef KILN_Q8RIL_H
#define KILN_Q8RIL_H

#include "backend/cpu/cpu_kernels.h"

/* 1: w (8-bit MLX affine) can run here once packed: a CPU with AVX512-VNNI, group 32/64/128
 * dividing K, at least 16 rows. The packer's question (pack_layout, which also reads the
 * KILN_PACK_Q8 switch); the AMX check is the caller's. */
int q8ril_ok(const weight_t *w);
/* y[T, N] columns [j0, j1) = x[T, K] · Wᵀ for w in WL_Q_RIL16 (any j0, j1: a tile cut by the
 * slice is computed whole and stored masked). Rows of the N % 16 tail: avx512_q8_rows. */
void q8ril_matmul(float *y, const float *x, int T, const weight_t *w, int j0, int j1);
/* T == 1 over the rows mm_rows_next hands this task (x prepared once). */
void q8ril_rows(float *y, const float *x, const weight_t *w, mm_rows_t *r);

/* matmul_avx512.c: W rows [j0, j1) (stored row-major) of an 8-bit weight, every token through
 * the decode row kernel q8tile — the N % 16 tail rows of a WL_Q_RIL16 weight, the same code
 * at any T. */
void avx512_q8_rows(float *y, const float *x, int T, const weight_t *w, int j0, int j1);

#endif
