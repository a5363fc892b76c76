#!/bin/bash
# call_s26e.sh — session 26, call 5: the wgmma k-step descriptors as one add to the stage's (matmul_wgmma.cu
# wg_mma_chunks; the same descriptors: bitwise) — test_qwg / multi, logits md5 against call 4's binary (kiln-c4) and
# 9e80979 (kiln-old) at prefill chunks of 64, the QWG bench; then the c=64 protocol (128-token prompts, 128
# generated) for llama-3-8b q4 with kiln-old / kiln-c4 / kiln, and on kiln the ring depth (KILN_CUDA_QWG_S 4 / 8, default
# 6) and the engine's step budget (--step-tokens 8192 against the CUDA default 2048).
#   run: bash bench/cuda/call_s26e.sh PKG   (PACK_BINS="kiln kiln-old kiln-c4 test_cuda_kernels")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
call_t1 qwg KILN_CUDA_TEST_QWG_ONLY=1
call_t1 qwgm KILN_CUDA_TEST_QWG_MULTI_ONLY=1
call_qwgbench test_cuda_kernels test_cuda_kernels
echo "tests + qwg bench done at $(el) s" >> "$S"
while [ ! -f /tmp/s/l8q4.done ] || [ ! -f /tmp/s/q06q4.done ]; do sleep 1; done
call_logits_chunks "/tmp/s/l8q4 /tmp/s/q06q4 tests/fixtures/models/llama-tiny-mlx-q4 tests/fixtures/models/qwen3-tiny-mlx-mixed" 64 kiln-old kiln-c4 kiln
echo "logits done at $(el) s" >> "$S"
for r in 1 2; do call_conc128 l8q4 kiln-old; call_conc128 l8q4 kiln-c4; call_conc128 l8q4 kiln; done
call_conc128 l8q4 kiln KILN_CUDA_QWG_S=4; call_conc128 l8q4 kiln KILN_CUDA_QWG_S=8
call_conc128 l8q4 kiln X=1 "--step-tokens 8192"; call_conc128 l8q4 kiln; call_conc128 l8q4 kiln X=1 "--step-tokens 8192"
call_conc128 q06q4 kiln-old; call_conc128 q06q4 kiln
echo "all done at $(el) s" >> "$S"
cat $S
