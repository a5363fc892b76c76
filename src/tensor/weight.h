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

/* WL_Q_RIL16 (quantized): rows [0, 16·⌊N/16⌋) in tiles of 16 rows; u32 code word wi of row
 *   16t + r at word (t·nw + wi)·16 + r (nw = cols·bits/32), scale/bias of group g at
 *   (t·ng + g)·16 + r; the N % 16 tail rows row-major at their stored place. Bits 4 and 8: a
 *   row's words are its stored words. Bits 2, 3, 5, 6 (cols % 32 == 0): a row's words are
 *   re-encoded per 32-column chunk c into `bits` words in planes — the code's low 4 bits (5,
 *   6), its 2-bit part (2, 3: bits 0-1; 6: bits 4-5) and its 1-bit part (3: bit 2; 5: bit 4):
 *     P4 (4 words, bits 5 and 6): word w holds columns 32c + 8w + i, byte k = low4(2k) | low4(2k+1) << 4
 *     P2 (2 words, bits 2, 3, 6): word m, byte k = the 2-bit parts of columns 16m + 2k, 16m + 2k + 1,
 *                                 16m + 8 + 2k, 16m + 8 + 2k + 1 (relative to 32c) at bits 0, 2, 4, 6
 *     P1 (1 word, bits 3 and 5):  byte k, bits 2w and 2w + 1 = the 1-bit parts of columns 8w + 2k, 8w + 2k + 1
 *   in the order P4, P2, P1 (weight_qril_code reads one): so the AVX-512 kernel gets each 8
 *   columns' codes as the 4-bit path's even/odd byte planes with a shift and a mask or two.
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
/* Code j of a row in WL_Q_RIL16's planes (bits 2, 3, 5, 6): u is the row's first word, its
 * words stride u32 apart (16 in a packed tile). */
static inline uint32_t weight_qril_code(const uint32_t *u, size_t stride, int bits, int j) {
    const uint32_t *c = u + (size_t)(j >> 5) * bits * stride; /* the chunk's words */
    int w = (j & 31) >> 3, k = (j & 7) >> 1, odd = j & 1;
    int p2 = bits == 6 ? 4 : 0, p1 = bits - 1; /* P2's first word; P1's word (bits 3, 5) */
    uint32_t lo4 = bits >= 5 ? (c[(size_t)w * stride] >> (8 * k + 4 * odd)) & 15 : 0;
    uint32_t two = bits != 5 ? (c[(size_t)(p2 + (w >> 1)) * stride] >> (8 * k + 4 * (w & 1) + 2 * odd)) & 3 : 0;
    uint32_t one = bits == 3 || bits == 5 ? (c[(size_t)p1 * stride] >> (8 * k + 2 * w + odd)) & 1 : 0;
    switch (bits) {
    case 2: return two;
    case 3: return two | one << 2;
    case 5: return lo4 | one << 4;
    default: return lo4 | two << 4;
    }
}
/* 1: WL_Q_RIL16 holds w's rows as planes (bits 2, 3, 5, 6), not as stored words */
static inline int weight_qril_planes(const weight_t *w) { return w->bits != 4 && w->bits != 8; }
/* Dequantizes (or converts) row r into out[cols] as f32: the reference every kernel
 * is tested against. */
void weight_row_f32(const weight_t *w, int r, float *out);

#endif
