#!/bin/bash
# call_s30b.sh — session 30: the 64-token slices on by default (matmul.cu cuda_qwg_slices: MAXT 128, 192 for weights
# of ≥ 2^24 elements). The whole CUDA test set, then prefill tok/s default vs KILN_CUDA_QWG_SLICE=0 at 65..256 tokens
# (llama-3-8b q4, qwen3.5-2b q4, qwen3-0.6b q4) and the engine at c=1/8/64 both ways.
#   run: bash bench/cuda/call_s30b.sh PKG/kiln-cuda.tar.xz   (PACK_BINS: kiln and the four CUDA tests)
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4 q352q4
call_full_tests
call_wait l8q4 q352q4 q06q4
call_prefill_ab "l8q4 q352q4 q06q4" "65 100 128 160 192 256" X=1 KILN_CUDA_QWG_SLICE=0
echo "prefill done at $(el) s" >> "$S"
call_conc128 l8q4 kiln X=1 "--max-batch 128 --kv-cache-gb 16"
call_conc128 l8q4 kiln KILN_CUDA_QWG_SLICE=0 "--max-batch 128 --kv-cache-gb 16"
echo "all done at $(el) s" >> "$S"
cat "$S" $OUT/bench.txt
