#!/bin/bash
# call_s30c.sh — session 30: the issue table's concurrency levels (1, 8, 32, 64, 128; 128-token prompts, 128 generated,
# --max-batch 128 --kv-cache-gb 16) with the 64-token slices at their default caps and off (KILN_CUDA_QWG_SLICE=0): a
# 128-row decode step of a 4096-wide model is one T = 128 matmul per weight, which the slices now take (two 64-token
# launches) instead of the dequantizing path. llama-3-8b q4 and q8, qwen3-0.6b q4; each pair twice.
#   run: bash bench/cuda/call_s30c.sh PKG/kiln-cuda.tar.xz   (PACK_BINS="kiln")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
call_synth q8 l8q8
call_wait l8q4 l8q8 q06q4
for m in l8q4 l8q8 q06q4; do
  for r in 1 2; do call_conc_env $m X=1 1,8,32,64,128; call_conc_env $m KILN_CUDA_QWG_SLICE=0 1,8,32,64,128; done
  echo "$m done at $(el) s" >> "$S"
done
cat "$S" $OUT/bench.txt
