/* q4ril.h — 4-bit MLX weights in the rows-in-lanes layout WL_Q_RIL16 on AVX512-VNNI CPUs
 * (matmul_q4ril_avx512.c; see the story there). Used by the AVX-512 family (matmul_avx512.c):
 * its dispatch and its matmul_rows, which send the N % 16 tail rows (row-major) to the q4i
 * row kernel. Include only from AVX-512 files. */
#ifndef KILN_Q4RIL_H
#define KILN_Q4RIL_H

#include "backend/cpu/cpu_kernels.h"

/* x rows [0, T) prepared for w (digits per code word, p and sums per group) in the calling
 * thread's scratch (cpu_scratch.h): not freed by the caller, valid until the thread's next
 * prepare. NULL: out of memory. */
void *q4ril_prepare(const float *x, int T, const weight_t *w);
/* One token (q from q4ril_prepare with T = 1): y[j] for rows [j0, j1) inside full tiles
 * (j1 <= 16·⌊N/16⌋; a tile cut by the range is computed whole and stored masked). */
void q4ril_rows(float *y, const void *q, const weight_t *w, int j0, int j1);
/* T tokens: y[t·N + j] for rows [j0, j1) inside full tiles; per (token, row) the same
 * arithmetic as q4ril_rows, so a row alone is bitwise that row in any batch. */
void q4ril_gemm(float *y, const void *q, int T, const weight_t *w, int j0, int j1);

#endif
