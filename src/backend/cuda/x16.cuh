/* x16.cuh — the bf16 copy of an f32 activation, written by the kernel that produces the
 * activation, for the prefill matmuls that round x once (KILN_CUDA_X16; host side in xprep.cu).
 *
 * Under the precision policy (matmul.cu: llama/qwen3) a cuBLASLt matmul of bf16 weights first
 * rounded its f32 x to bf16 in a pass of its own (to_16bit_kernel): a 2048-token qwen3-0.6b
 * prefill converted the same normed x three times for q/k/v, twice for gate/up, and read back
 * the attention output and the GLU output only to round them (~90 MB a layer of traffic and
 * five launches). Now:
 *  - matmul_multi converts x once for all its weights (the record below, scoped to the call);
 *  - the producers (rms_norm / add_rms_norm through rms_norm4_kernel, the GLU, the tensor-core
 *    prefill attentions; with KILN_CUDA_ATTN_X16=1, opt-in, the decode attn_dec_mma_kernel) also store bf16(y) — the value to_16bit_kernel would have written, so every
 *    GEMM input and output is bitwise what it was — where a matmul converted as many floats
 *    before (a hint: the element counts the conversion saw), and the matmul takes that copy
 *    where the record names its own x and length.
 * The f32 y is still written: other ops (and the CPU contract of every op) read it.
 *
 * matmul_bfmma.cu (3..64 tokens) reads the copy too (helper-94): where it finds none it notes n
 * (cuda_x16_note), and its GLU epilogue is a producer for the down projection. Two buffers taken
 * in turn (a producer never writes the buffer of the current record, which that GLU reads).
 *
 * Staleness: one record {x, n} per backend. The backend's op table is wrapped
 * (xprep.cu) so that every op other than the matmuls forgets the record before it runs, and the
 * matmuls forget it after they run where their outputs overlap x; a record made by a matmul's
 * own conversion is usable only inside the matmul_multi call that made it. So a model that writes
 * x between the producer and the matmul gets a fresh conversion, never a stale copy. Without the
 * wrappers (KILN_CUDA_X16=0, "cuda-f32") every function here declines. */
#ifndef KILN_CUDA_X16_CUH
#define KILN_CUDA_X16_CUH

#include "backend/cuda/cuda_common.cuh"

/* a producer of y[n]: where to store bf16(y) (NULL: do not) — n was converted by a matmul before */
__nv_bfloat16 *cuda_x16_want(cuda_impl_t *c, size_t n);
/* ... and after launching it: y's copy is in the buffer */
void cuda_x16_set(cuda_impl_t *c, const float *y, size_t n);
/* The f16 form, unscaled (KILN_CUDA_QD_ATT16, default on: matmul_dequant.cu's o projection of MLX weights notes n,
 * the tensor-core prefill attentions over an f16 KV cache write f16(out) — a convex combination of f16 cache
 * values, so in f16's range and rounded no coarser than the cache itself): want (NULL where a bf16 copy of n is
 * wanted, or none), set after the launch, get, note. */
__half *cuda_x16h_want(cuda_impl_t *c, size_t n);
void cuda_x16h_set(cuda_impl_t *c, const float *y, size_t n);
const __half *cuda_x16h_get(cuda_impl_t *c, const float *x, size_t n);
void cuda_x16h_note(cuda_impl_t *c, size_t n);
/* a matmul: bf16(x[0..n)) if the record names it, else NULL */
const __nv_bfloat16 *cuda_x16_get(cuda_impl_t *c, const float *x, size_t n);
/* a matmul's own conversion: the buffer to convert x into (NULL: x16 off, use the old scratch);
 * notes n for the producers and records x for the rest of the matmul_multi call */
__nv_bfloat16 *cuda_x16_conv(cuda_impl_t *c, const float *x, size_t n);
/* matmul_multi: on = 1 before its per-weight matmuls, 0 after (a conversion's record goes) */
void cuda_x16_multi(cuda_impl_t *c, int on);
/* matmul_bfmma.cu (3..64 tokens), which rounds x in registers: notes n for the producers without
 * converting (the next producer of n floats writes the copy, the next launch reads it) */
void cuda_x16_note(cuda_impl_t *c, size_t n);

#endif
