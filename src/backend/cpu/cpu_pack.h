/* cpu_pack.h — weights rewritten in place into the tiled orders the AVX-512 kernels read.
 *
 * Decode streams every weight once per token, so how its bytes are ordered decides how
 * many streams the cores follow and how many vector ops turn them into sums. The stored
 * order (row after row) makes a kernel that reads 16 rows at once follow 16 streams and
 * shuffle per row; a tile order hands it one stream with the rows already in the lanes.
 * The packers permute bytes inside tiles of whole rows, so a packed weight occupies exactly
 * the ranges it was stored in (no second copy: the checkpoint's private anonymous copy, or
 * its MAP_PRIVATE map, is rewritten) and a view of whole tiles is itself a packed weight.
 *
 * Who does what:
 *   - the family's simd_kernels_t.pack_layout(w) says which layout it wants (0: none);
 *   - pack_prepare (from cpu_prepare_weight) makes the pages writable, packs, and remembers
 *     the region, so a tensor prepared twice (tied embedding and lm_head; MoE gate_up and its
 *     gate/up row views) is packed once: a view of whole tiles gets the flag, any other view
 *     of a packed region unpacks it first (the weight is then used as stored, and so is a
 *     copy of the packed weight made before: models prepare views before they compute).
 *     KILN_PACK=0 turns packing off (the A/B switch: same binary, stored order);
 *   - kernels dispatch on w->layout; weight_row_f32 (tensor/weight.c) reads every layout,
 *     so the reference kernels and the embedding lookup need nothing.
 *
 * Layouts (weight.h has the enum):
 *   WL_Q_RIL16  quantized: rows in the lanes, see weight.h (bits 2, 3, 5, 6: each row's codes
 *               also re-encoded into planes per 32 columns, the same bytes).
 *   WL_DENSE_T4 dense (f32/f16/bf16, K % 16 == 0, N >= 4): tiles of 4 rows x 16 columns;
 *               element (4t + r, 16c + i) at ((t·nc + c)·4 + r)·16 + i, nc = K/16 — per 16
 *               columns the tile's 4 rows side by side (bf16: 128 B), so decode reads a tile
 *               as one sequential stream instead of 4 row streams (the 16 values of a load
 *               are the stored ones: the kernels' arithmetic, and their bits, are unchanged).
 *               The N % 4 tail rows stay row-major at their stored place. Shape chosen by a
 *               GEMV harness (bench/cpu/RESULTS.md session 9, helper-60): 4/8/16 rows by
 *               16/32 columns all within noise of each other, 15-25 % over row-major. */
#ifndef KILN_CPU_PACK_H
#define KILN_CPU_PACK_H

#include "tensor/weight.h"

/* Rows per tile of a layout (a view must start and end on one, or end where the packed
 * region ends); 0 for WL_ROWS. */
int pack_tile_rows(int layout);
/* Bytes of one stored row of w's codes or dense data. */
size_t pack_row_bytes(const weight_t *w);
/* Whether w can take the layout at all (shape, bits). */
int pack_fits(const weight_t *w, int layout);
/* In place: w's memory from the stored order into layout (w->layout = layout), and back
 * (w->layout = WL_ROWS). The memory must be writable. 0 on success, -1 when out of memory
 * for the one-tile scratch (w unchanged). */
int pack_weight(weight_t *w, int layout);
int unpack_weight(weight_t *w);

/* The weights one backend has prepared: each one's memory, packed (w.layout != 0) or left
 * in the stored order for good (not wanted, not writable, or unpacked for a view). */
typedef struct {
    weight_t w;          /* as first prepared: its shape and ranges */
    const char *lo, *hi; /* its codes / dense data */
} pack_region_t;
typedef struct {
    pack_region_t *r;
    int n, cap;
    const char *max_hi; /* the highest end of any region: checkpoints are mostly prepared in address order, so most weights skip the scan */
} pack_registry_t;

/* Prepares w: the region it lies in decides (a view of whole tiles takes the layout; any
 * other overlap unpacks the region), else want(w) picks a layout and w is packed in place
 * and remembered. Never fails: w stays in the stored order when anything is missing. */
void pack_prepare(pack_registry_t *reg, weight_t *w, int (*want)(const weight_t *w));
/* Forgets the region of exactly w (its memory is going away); a view changes nothing. */
void pack_release(pack_registry_t *reg, const weight_t *w);
void pack_registry_free(pack_registry_t *reg);

#endif
