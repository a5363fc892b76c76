/* deltanet_chunk_avx2.c — the chunk-parallel gated delta rule (deltanet_chunk_body.h) compiled
 * with this file's -mavx2 flags (CMakeLists.txt); its matmul blocks are GCC
 * vectors; O3 is asked for the remaining loops. Blocks of 6 rows × 16 columns: 12 of the 16 ymm registers. */
/* The build rounds C exactly as written (-ffp-contract=off, CMakeLists.txt: a fused a·b + c
 * in one inlined copy and not another broke batch invariance). Here contraction is safe and
 * wanted: this file is one function whose arithmetic depends on (C, dk, dv) only, never on
 * the batch, so its multiply-adds may fuse (the matmul blocks become FMAs). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3", "fp-contract=fast")
#endif
#include <immintrin.h>
#include <math.h>
#include <string.h>
#include "backend/cpu/cpu_hybrid.h"

#define DC_NAME delta_chunk_avx2
#define DC_MB 6
#define DC_VW 8
#define DC_NB 16
#define DC_FTZ 1
#include "backend/cpu/deltanet_chunk_body.h"
