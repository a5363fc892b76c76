/* cpu_kernels.h — the CPU backend's kernels: a scalar reference for each op (ref.c) and
 * SIMD fast paths (matmul_avx2.c, matmul_avx512.c) chosen at run time by cpuid.
 *
 * SIMD kernels work on a slice of output columns [j0, j1) so the caller can spread
 * columns over threads; each output element is one dot product whose reduction order
 * depends only on the kernel family, never on T, the slice or the thread. */
#ifndef KILN_CPU_KERNELS_H
#define KILN_CPU_KERNELS_H

#include <stdatomic.h>
#include <stdint.h>
#include "backend/backend.h"

/* --- scalar reference (ref.c) --- */
void ref_matmul(float *y, const float *x, int T, const weight_t *w, int j0, int j1);
void ref_rms_norm(float *y, const float *x, const float *w, float w_offset, int T, int n, float eps);
void ref_rope(float *x, const int32_t *pos, int T, int n_heads, int head_dim, int rot_dim, const float *inv_freq, float mscale);
void ref_glu(float *y, const float *gate, const float *up, size_t n, act_t act);
void ref_embed(float *y, const int32_t *ids, int T, const weight_t *w, float scale);
void ref_kv_write(const kv_view_t *kv, const float *k, const float *v, const int32_t *slots, int T);
/* Attention for tokens [t0, t1) of the step (all heads). scratch: >= max context floats. */
void ref_attention(float *out, const float *q, int t0, int t1, const attn_args_t *a, float *scratch);

/* --- decode matmul rows shared between the threads of one matmul (T == 1) ---
 * Each task owns a contiguous range of W rows [lo, hi) and takes chunks from its front (one
 * weight stream per thread, as with a static split); a task whose range is empty moves the
 * back half of the fullest range into its own (CAS on the packed word) and goes on from
 * there, so a thread that ran slower or was descheduled does not leave the others waiting.
 * Every row is computed whole by one thread with the same code, so who takes it never
 * changes a bit. Range bounds and chunks stay multiples of 16 rows (except at N). */
/* Decode prefetch distance for a tile of up to 4 rows of row_bytes each, read side by side:
 * past the tile's last row (3 rows ahead of the first), plus 8 KB — both SIMD families. With a
 * flat 4 KB, rows of 2-3 KB were prefetched inside the tile being read (Zen 5, one thread,
 * kiln-mm-bench --mib 256: bf16 K=1024 24-25 -> 29-33 GB/s, q8 K=3072 18-19 -> 26-31 GB/s, q4
 * K=3072 13-15 -> 17-21 GB/s; K=1024 q8 and q4 about the same) */
#define PF_AHEAD(row_bytes) (3 * (row_bytes) + 8192)

#define MM_ROWS_MAX 16
typedef struct { _Alignas(64) _Atomic uint64_t v; } mm_range_t; /* lo | (uint64_t)hi << 32 */
typedef struct mm_rows { mm_range_t *rg; int n, self, chunk; } mm_rows_t;
/* The next rows [*j0, *j1) for task r->self; 0: none left anywhere. */
int mm_rows_next(mm_rows_t *r, int *j0, int *j1);

/* --- SIMD families: a dot product and axpy for attention, matmul, GELU-tanh GLU --- */
typedef struct simd_kernels {
    const char *name;
    void (*matmul)(float *y, const float *x, int T, const weight_t *w, int j0, int j1);
    float (*dot)(const float *a, const float *b, int n);             /* fixed lane order */
    void (*axpy)(float *y, float a, const float *x, int n);          /* y += a * x       */
    void (*to_f32)(float *dst, const void *src, dtype_t t, int n);   /* f16/bf16/f32 row */
    /* y = gelu_tanh(gate) * up, as g / (1 + exp(-2u)), u = 0.79788456 (g + 0.044715 g^3):
     * 0.5 (1 + tanh u) without tanh's cancellation; exp to ~1 ulp. Every element through
     * the same vector code (the tail masked), so where a row lands never changes it. */
    void (*gelu_glu)(float *y, const float *gate, const float *up, size_t n);
    /* Optional: one x row (T == 1) against the W rows mm_rows_next hands this task, x
     * prepared once per call; the same per-row results as matmul. Returns 0 without
     * touching r when it does not take w (the caller splits statically then). */
    int (*matmul_rows)(float *y, const float *x, const weight_t *w, mm_rows_t *r);
    /* Optional: dst[0, n) = src converted to f16 (t == DT_F16 only; 0 = not taken), bit for
     * bit store_from_f32's f32_to_f16 (round to nearest even, NaN -> sign | 0x7e00). */
    int (*from_f32)(void *dst, dtype_t t, const float *src, int n);
    /* Optional: ref_rms_norm's math per row (sum of squares in 16 lanes + one horizontal
     * sum, then the same elementwise steps), and y = silu(gate) * up as g / (1 + exp(-g)),
     * exp to ~1 ulp; each row / element through the same vector code (tails masked), so
     * where a row or element lands never changes it. */
    void (*rms_norm)(float *y, const float *x, const float *w, float w_offset, int T, int n, float eps);
    void (*silu_glu)(float *y, const float *gate, const float *up, size_t n);
    /* Optional: the layout (WL_*, cpu_pack.h) this family's kernels want w in, 0 for the
     * stored order. cpu_prepare_weight packs w in place when it can; matmul and
     * matmul_rows must then take w in that layout (and any other call, e.g. with
     * a row range that starts or ends inside a tile, gives the same bits per row). */
    int (*pack_layout)(const weight_t *w);
    /* Optional: one int8 KV row, codes[0, n) and *scale — bit for bit backend.h's kv_q8_row
     * (the same max, the same products, the same round-to-nearest-even) */
    void (*q8_row)(int8_t *codes, float *scale, const float *x, int n);
} simd_kernels_t;

extern const simd_kernels_t simd_avx2, simd_avx512;
/* The AVX2 family's 2/3/4/5/6- and 8-bit MLX weights (groups of 32/64/128 dividing K) as integer dot
 * products (matmul_qi_avx2.c): 1 = done, 0 = not taken (the float tiles then). avx2_qi_set: 0 the
 * float tiles, 1 vpmaddubsw (2-6 bits; 8-bit stays on the tiles), 2 AVX-VNNI (all; where the CPU
 * has it, else 1), -1 KILN_AVX2_INT=off|madd|vnni or the best the CPU has; returns the previous
 * mode (tests, A/B). */
int avx2_qi_matmul(float *y, const float *x, int T, const weight_t *w, int j0, int j1);
int avx2_qi_set(int mode);
int avx2_qi_mode(void); /* the mode in use (resolved on first ask) */
/* The AVX2 family's 4-bit weights in WL_Q_RIL16, 2/3/5/6-bit ones in its planes (matmul_q4ril_avx2.c):
 * avx2_q4ril_ok says whether w's shape fits (the family's pack_layout asks it); avx2_q4ril_matmul
 * computes rows [j0, j1) that lie in full tiles (rows past 16·⌊N/16⌋ are the caller's: row-major,
 * through avx2_qi_matmul) by AVX-VNNI where avx2_qi_mode() is 2, else by vpmaddubsw — the same bits
 * either way. */
int avx2_q4ril_ok(const weight_t *w);
void avx2_q4ril_matmul(float *y, const float *x, int T, const weight_t *w, int j0, int j1);
/* The same for 8-bit weights (matmul_q8ril_avx2.c). */
int avx2_q8ril_ok(const weight_t *w);
void avx2_q8ril_matmul(float *y, const float *x, int T, const weight_t *w, int j0, int j1);
/* fn(args..., B) with w's width as the constant B (4: the 4-bit layout; 2/3/5/6: its bit planes), so that
 * each width gets its own copy of a kernel body (the rows-in-lanes and row-major integer kernels, both families) */
#define QRIL_BITS(w, fn, ...)          \
    switch ((w)->bits) {               \
    case 2: fn(__VA_ARGS__, 2); break; \
    case 3: fn(__VA_ARGS__, 3); break; \
    case 5: fn(__VA_ARGS__, 5); break; \
    case 6: fn(__VA_ARGS__, 6); break; \
    default: fn(__VA_ARGS__, 4);       \
    }

/* Intel AMX for 8-bit MLX-affine and bf16 weights (matmul_amx_avx512.c), used by the AVX-512
 * family's matmul once amx_enable() has succeeded (simd_detect asks unless KILN_AMX=off).
 * amx_set(0/1) switches it for tests after a successful amx_enable(). */
int amx_enable(void);
int amx_enabled(void);
void amx_set(int on);
int amx_q8_ok(const weight_t *w);
int amx_q4_ok(const weight_t *w);
int amx_bf16_ok(const weight_t *w);
/* sh == NULL: columns [j0, j1) on this thread. Else the threads of one matmul share the
 * prepared x and its blocks of rows through *sh (zeroed before; the caller frees sh->buf
 * after all have returned), each calling with the same [j0, j1). */
/* x_of (matmul_multi): another share of the same dispatch whose weight has the same kernel,
 * cols and group and comes first for every thread: its prepared x is reused, not made again. */
typedef struct amx_share { atomic_int next, prep_next, prep_done; void *_Atomic buf; struct amx_share *x_of; } amx_share_t;
void amx_matmul_q8(float *y, const float *x, int T, const weight_t *w, int j0, int j1, amx_share_t *sh);
void amx_matmul_q4(float *y, const float *x, int T, const weight_t *w, int j0, int j1, amx_share_t *sh);
void amx_matmul_bf16(float *y, const float *x, int T, const weight_t *w, int j0, int j1, amx_share_t *sh);
/* The best family this CPU supports (NULL: scalar only). KILN_SIMD=off|avx2|avx512 overrides. */
const simd_kernels_t *simd_detect(void);

/* Tiled attention with a SIMD family (attention_cpu.c, attention_tile.h). A tile is up to
 * a few consecutive tokens of one row; items (tile, KV head) are taken from *next. */
typedef struct attn_tile { int r, t0, t1; } attn_tile_t;
/* scratch floats one thread needs */
size_t simd_attention_scratch(const attn_args_t *a);
/* Cuts tokens [t0, t1) into tiles (at most t1 - t0 of them); returns the count. */
int simd_attention_tiles(const attn_args_t *a, int t0, int t1, attn_tile_t *tiles);
/* A decode step split over the context (attention_cpu.c): items (tile, KV heads [h0, h1),
 * segments [s0, s1); s1 == 0: the whole tile), each split tile's segment states at
 * part + part_off[tile], nseg[tile] of them (0: not split). items == NULL: not split. */
typedef struct attn_item { int tile, h0, h1, s0, s1; } attn_item_t;
/* pre (unsplit steps only, or NULL): called by the item's thread before it attends over
 * tile t (tokens [t0, t0 + 1)) for KV heads [h0, h1) — a decode step's own per-head work
 * (cpu_backend.c: q/k norms, rope and the cache write of those heads, in the same pass). */
typedef struct attn_split { int n_items; attn_item_t *items; float *part; size_t *part_off; int *nseg;
                            void (*pre)(void *ctx, int t0, int h0, int h1); void *pre_ctx; } attn_split_t;
/* Work items of those tiles for n_threads threads (one-token tiles: groups of KV heads, and
 * with n_threads > 1 runs of context segments); sp: the split plan, freed by _finish */
int simd_attention_plan(attn_split_t *sp, const attn_args_t *a, const attn_tile_t *tiles, int n_tiles, int n_threads);
void simd_attention_run(const simd_kernels_t *s, float *out, const float *q, const attn_args_t *a,
                        const attn_tile_t *tiles, int n_tiles, const attn_split_t *sp, atomic_int *next, float *scratch,
                        int n_threads);
/* After every item ran: a split step's merges (bitwise the unsplit result); frees the plan */
void simd_attention_finish(const simd_kernels_t *s, float *out, const attn_args_t *a, const attn_tile_t *tiles, int n_tiles,
                           attn_split_t *sp);
/* The segment length (positions) from now on (tests; -1: KILN_ATTN_SEG again) */
void simd_attention_set_seg(int positions);
/* Tokens [t0, t1) planned for n_threads (big% of each split row's segments in big runs)
 * but run on this thread, items in reverse (tests) */
void simd_attention_split(const simd_kernels_t *s, float *out, const float *q, int t0, int t1, const attn_args_t *a,
                          float *scratch, int n_threads, int big);
/* Tokens [t0, t1) on this thread (tests). scratch: simd_attention_scratch(a) floats. */
void simd_attention(const simd_kernels_t *s, float *out, const float *q, int t0, int t1, const attn_args_t *a, float *scratch);

#endif
