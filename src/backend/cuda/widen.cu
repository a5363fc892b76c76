/* widen.cu — MLX 2/3/5/6-bit codes rewritten on the device as 4- or 8-bit codes at upload.
 *
 * Why: the fast quantized kernels (matmul_gemv_tc.cu at one token, matmul_qmma.cu / matmul_wgmma.cu at
 * 2..128, matmul_dequant.cu's prefill, moe_gemm.cu) take 4- and 8-bit codes only; the other widths
 * fall back to the warp-per-row f32 GEMV and the generic dequantization, which session 50 measured at
 * 5x slower than 4-bit on llama-3-8b (H100, batch-1 decode at 2048 + 128: q4 357 tok/s, q3 69, q6 70 —
 * 7.5 % and 14 % of the copy bandwidth). The same integer codes in a wider field are the same weight:
 * w = scale·code + bias with the stored scales and biases, so every kernel computes what it computes
 * for a 4/8-bit checkpoint with those codes — within the same bounds of the reference — and no
 * dequantized copy is made (DESIGN: weights keep their stored dtype; the codes stay integers).
 *
 * Trade-off: device memory. 3 → 4 bits is 3.5 → 4.5 bits a weight with group-64 scales/biases
 * (+29 %), 6 → 8 is 6.5 → 8.5 (+31 %), 2 → 4 is 2.5 → 4.5 (+80 %), 5 → 8 is 5.5 → 8.5 (+55 %). So
 * with KILN_CUDA_WIDEN=1 the backend widens a weight only while the card keeps an eighth of its memory
 * free after it (cuda_backend.cu widen_bits; =2: whenever it fits at all; =0: never) — a model chosen at
 * 2 or 3 bits to fit a small card keeps its stored width and still runs. The default since session 51
 * (H100: llama-3-8b batch-1 decode q3 69 → 358 tok/s, q6 70 → 248; the whole CUDA suite green with it).
 *
 * Layout (MLX, the CPU's weights.c): each row's codes are one little-endian bit stream over u32
 * words, code j in bits [j·b, j·b + b) — a code may straddle two words at b = 3, 5, 6. The output
 * has the same form at nb = 4 or 8, where no code straddles. One thread per output word (widen_word.h,
 * which tests/unit/test_widen.c runs on the CPU). */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/widen_word.h"

__global__ void widen_codes_kernel(uint32_t *__restrict__ out, const uint32_t *__restrict__ in, size_t words_out, int wpr_in, int wpr_out,
                                   int b, int nb) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= words_out) return;
    const size_t r = i / wpr_out;
    out[i] = widen_word(in + r * wpr_in, (int)(i % wpr_out), b, nb);
}

/* codes of a [rows, cols] weight at b bits (device, in) → nb bits (device, out: rows·cols·nb/8 bytes),
 * on the backend's stream; cols % 32 == 0 (prepare_weight checked it) */
void cuda_widen_codes(cuda_impl_t *c, uint32_t *out, const uint32_t *in, int rows, int cols, int b, int nb) {
    const int wpr_in = cols / 32 * b, wpr_out = cols / 32 * nb;
    const size_t words = (size_t)rows * wpr_out;
    if (!words) return;
    widen_codes_kernel<<<(unsigned)((words + 255) / 256), 256, 0, c->stream>>>(out, in, words, wpr_in, wpr_out, b, nb);
    cudaLaunchCheck();
}
