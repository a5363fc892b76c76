/* attention_tile.h — the tiled CPU attention kernel's shared pieces: key-block size,
 * scratch layout, and the per-family tile functions (attention_tile_body.h compiled in
 * attention_tile_avx2.c and attention_tile_avx512.c; driven by attention_cpu.c). */
#ifndef KILN_ATTENTION_TILE_H
#define KILN_ATTENTION_TILE_H

#include <stddef.h>
#include "backend/backend.h"

/* Keys are visited in blocks of AT_KB positions aligned to absolute positions: the
 * boundaries of a query's online softmax never depend on the tile it is computed in. */
#define AT_KB 32
/* A query's keys are folded in segments of attn_seg() positions (KILN_ATTN_SEG rounded up
 * to a multiple of AT_KB, absolute like the blocks; attention_tile_body.h _fold; 0, the
 * default: one segment, the unsegmented softmax): a decode row's segments can be computed
 * by different work items and merged with the same bits. The same for the whole process. */
int attn_seg(void);
/* A tile is at most this many query vectors (tokens × GQA group) when the group allows. */
#define AT_QMAX 64

typedef struct attn_tile_dims {
    int nqp;      /* query lanes: tokens × group, rounded up to 16 */
    int hdp;      /* head_dim rounded up to 16 (the converted rows' stride) */
    size_t floats;/* scratch floats a tile of that many tokens needs */
} attn_tile_dims_t;

/* Tokens per tile for these args: AT_QMAX / group, at least 1. */
int attn_tile_tokens(const attn_args_t *a);
void attn_tile_dims(const attn_args_t *a, int n_tokens, attn_tile_dims_t *d);

/* Scratch floats for a tile of n_tokens tokens and n_heads KV heads walked together. */
size_t attn_tile_floats(const attn_args_t *a, int n_tokens, int n_heads);

/* Tokens [t0, t1) of row r (at most attn_tile_tokens), KV head kvh; scratch: dims.floats.
 * _group: KV heads [h0, h1) together, scratch attn_tile_floats(a, t1 - t0, h1 - h0). */
typedef void (*attn_tile_fn)(float *out, const float *q, const attn_args_t *a, int r, int t0, int t1, int kvh, float *scratch);
void attn_tile_avx2(float *out, const float *q, const attn_args_t *a, int r, int t0, int t1, int kvh, float *scratch);
void attn_tile_avx512(float *out, const float *q, const attn_args_t *a, int r, int t0, int t1, int kvh, float *scratch);
typedef void (*attn_group_fn)(float *out, const float *q, const attn_args_t *a, int r, int t0, int t1, int h0, int h1, float *scratch);
void attn_tile_avx2_group(float *out, const float *q, const attn_args_t *a, int r, int t0, int t1, int h0, int h1, float *scratch);
void attn_tile_avx512_group(float *out, const float *q, const attn_args_t *a, int r, int t0, int t1, int h0, int h1, float *scratch);

/* Split one-token tiles: _part writes segments [s0, s1) of KV heads [h0, h1) to part
 * (records of 2·nqp + group·hdp floats, index kvh·nseg + segment − first segment); _merge
 * folds a tile's nseg segments into out (scratch as for _group). */
typedef void (*attn_part_fn)(const float *q, const attn_args_t *a, int r, int t0, int h0, int h1, int s0, int s1, float *part, float *scratch);
void attn_tile_avx2_part(const float *q, const attn_args_t *a, int r, int t0, int h0, int h1, int s0, int s1, float *part, float *scratch);
void attn_tile_avx512_part(const float *q, const attn_args_t *a, int r, int t0, int h0, int h1, int s0, int s1, float *part, float *scratch);
typedef void (*attn_merge_fn)(float *out, const attn_args_t *a, int t0, int nseg, const float *part);
void attn_tile_avx2_merge(float *out, const attn_args_t *a, int t0, int nseg, const float *part);
void attn_tile_avx512_merge(float *out, const attn_args_t *a, int t0, int nseg, const float *part);

#endif
