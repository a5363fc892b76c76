#!/bin/bash
# call_s31e.sh — written in session 31, NOT run (the device budget was spent): bench/cuda/attn_merge_factors.patch, the decode attention's merges with their factors once per query head (attention.cu
# wf / rf: 2^(m - M) and the sums computed by one thread a head instead of once per output). Bitwise the old merges:
# the decode-attention tests, logits md5 against e6eb939's (session 31 calls 3–4: llama-3-8b q4 011c76944bdd,
# qwen3-0.6b bf16 5c313d7c1b93), ncu of the kernel with kiln-base (e6eb939) and kiln, batch-1 decode alternating.
#   build kiln-base from main and kiln (+ test_cuda_kernels) with the patch applied (git apply bench/cuda/attn_merge_factors.patch), then
#   run: bash bench/cuda/call_s31e.sh PKG/kiln-cuda.tar.xz   (PACK_BINS="kiln kiln-base test_cuda_kernels")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4
call_synth bf16 q06bf16
( /tmp/k/kiln synth --preset llama-3-8b --dtype bf16 --layers 2 --out /tmp/s/l8b2 > /dev/null 2>&1; touch /tmp/s/l8b2.done ) &
call_t1 attn KILN_CUDA_TEST_ATTN_ONLY=dec
call_wait l8q4 q06bf16 l8b2
call_logits_md5 "l8q4 q06bf16" 1 X=1
for b in kiln-base kiln kiln-base kiln; do
  KILN_CUDA_GRAPH=0 timeout 60 ncu --metrics gpu__time_duration.sum --csv -k regex:attn_dec /tmp/k/$b bench /tmp/s/l8b2 \
    --backend cuda --prompt-tokens 2048 --gen-tokens 8 --runs 1 > /tmp/ncu.csv 2>/dev/null
  echo "ncu attn_dec $b: $(grep gpu__time_duration /tmp/ncu.csv | tail -8 | awk -F'","' '{print $NF}' | tr -d '"' | tr '\n' ' ')" >> "$S"
done
echo "tests done at $(el) s" >> "$S"
for m in q06bf16 l8q4; do for b in kiln-base kiln kiln-base kiln; do call_b1 $m $b X=1; done; done
echo "all done at $(el) s" >> "$S"
cat "$S" $OUT/bench.txt
