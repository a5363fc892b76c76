#!/bin/bash
# call_s30e.sh — session 30: the 128-token tile on by default (KILN_CUDA_QWG_128; 64-token slices past 128 tokens).
# The whole CUDA test set; model-level logits with the tile against KILN_CUDA_QWG_128=0 (md5 of the npy: per token
# the tile is bitwise the 64-token slices, so the files should be identical); prefill tok/s at 65..192 tokens both
# ways; the engine at c=1/8/32/64/128 (llama-3-8b q4 both ways, qwen3-0.6b q4 default).
#   run: bash bench/cuda/call_s30e.sh PKG/kiln-cuda.tar.xz   (PACK_BINS: kiln and the four CUDA tests)
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4 q352q4
call_full_tests
call_wait l8q4 q352q4 q06q4
call_logits_md5 "l8q4 q06q4 q352q4" "100 128" X=1 KILN_CUDA_QWG_128=0
call_prefill_ab "l8q4 q06q4 q352q4" "65 100 128 192" X=1 KILN_CUDA_QWG_128=0
echo "prefill done at $(el) s" >> "$S"
call_conc_env l8q4 X=1 1,8,32,64,128
call_conc_env l8q4 KILN_CUDA_QWG_128=0 1,64,128
call_conc_env q06q4 X=1 1,64,128
echo "all done at $(el) s" >> "$S"
cat "$S" $OUT/bench.txt
