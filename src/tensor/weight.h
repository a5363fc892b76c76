/* weight.h — a 2-D weight matrix as the backends see it: W [rows = out, cols = in].
 *
 * Dense weights keep their stored dtype (f32, f16, bf16) and point straight into the
 * mapped checkpoint. MLX affine-quantized weights keep their packed codes: each row is a
 * little-endian bit stream of `bits`-wide codes (first code in the lowest bits), with one
 * scale and one bias per group of `group` columns: w = scale * code + bias. Nothing is
 * ever dequantized as a whole; kernels dequantize a few columns at a time.
 *
 * layout: how the bytes are ordered. Everything but the CPU backend's AVX-512 kernels sees
 * WL_ROWS (as stored). That backend may rewrite a weight in place at prepare_weight into a
 * tiled order its kernels stream faster (backend/cpu/cpu_pack.h): the same bytes, permuted
 * within tiles of whole rows, so a weight still occupies exactly its stored ranges.
 * weight_row_f32 reads every layout. */
#ifndef KILN_WEIGHT_H
#define KILN_WEIGHT_H

#include <stddef.h>
#include <stdint.h>
#include "tensor/dtype.h"

typedef struct weight {
    int rows, cols;       /* out features, in features                               */
    dtype_t dtype;        /* storage of dense data; DT_U32 means MLX-quantized codes  */
    const void *data;     /* dense: [rows, cols]; quantized: [rows, cols*bits/32] u32  */
    int bits, group;      /* quantized only                                            */
    const void *scales;   /* [rows, cols/group] in sb_dtype                            */
    const void *biases;   /* [rows, cols/group] in sb_dtype                            */
    dtype_t sb_dtype;
    void *device;         /* a backend's own copy (CUDA); NULL on the CPU              */
    int layout;           /* WL_*: WL_ROWS unless the CPU backend packed it            */
} weight_t;

/* WL_Q_RIL16 (quantized, bits 4 or 8): rows [0, 16·⌊N/16⌋) in tiles of 16 rows; u32 code word
 *   wi of row 16t + r at word (t·nw + wi)·16 + r (nw = cols·bits/32), scale/bias of group g
 *   at (t·ng + g)·16 + r; the N % 16 tail rows row-major at their stored place.
 * WL_DENSE_T4 (dense): see backend/cpu/cpu_pack.h. */
enum { WL_ROWS = 0, WL_Q_RIL16 = 1, WL_DENSE_T4 = 2 };

static inline int weight_is_quantized(const weight_t *w) { return w->dtype == DT_U32; }

/* Bytes a full pass over the weight reads (codes + scales + biases, or dense data). */
size_t weight_bytes(const weight_t *w);
/* Code j of a quantized row (bit-stream extraction; reference path). */
static inline uint32_t weight_code(const uint32_t *row, int bits, int j) {
    uint64_t bit = (uint64_t)j * bits;
    uint64_t word = bit >> 5, off = bit & 31;
    uint64_t v = row[word] >> off;
    if (off + bits > 32) v |= (uint64_t)row[word + 1] << (32 - off);
    return (uint32_t)(v & ((1u << bits) - 1));
}
/* Dequantizes (or converts) row r into out[cols] as f32: the reference every kernel
 * is tested against. */
void weight_row_f32(const weight_t *w, int r, float *out);

#endif
