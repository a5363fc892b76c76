/* deltanet_chunk_avx512.c — the chunk-parallel gated delta rule (deltanet_chunk_body.h) compiled
 * with this file's AVX-512 flags (CMakeLists.txt); its matmul blocks are GCC
 * vectors; O3 is asked for the remaining loops. Blocks of 8 rows × 32 columns: 16 of the 32 zmm registers. */
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

#define DC_NAME delta_chunk_avx512
#define DC_MB 8
#define DC_VW 16
#define DC_NB 32
#define DC_FTZ 1
#include "backend/cpu/deltanet_chunk_body.h"
