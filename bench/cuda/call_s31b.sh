#!/bin/bash
# call_s31b.sh — session 31: the decode attention's splits merged by the last block through global memory
# (KILN_CUDA_ATTN_GM=1) instead of a thread-block cluster. The decode-attention tests (every case both ways, bitwise;
# the fused rope kernel with it against the separate ops), logits md5 both ways, the kernel's time under ncu (2-layer
# llama-3-8b bf16 at a 2048-position context, both ways) and batch-1 decode at 2048 + 128 in alternating pairs.
#   run: bash bench/cuda/call_s31b.sh PKG/kiln-cuda.tar.xz   (PACK_BINS="kiln test_cuda_kernels")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
call_synth bf16 l8bf16 q06bf16
( /tmp/k/kiln synth --preset llama-3-8b --dtype bf16 --layers 2 --out /tmp/s/l8b2 > /dev/null 2>&1; touch /tmp/s/l8b2.done ) &
call_t1 attn KILN_CUDA_TEST_ATTN_ONLY=dec
grep "attention decode\|checks" /tmp/t_attn.log | tail -3 >> "$S"
call_wait l8b2
for v in X=1 KILN_CUDA_ATTN_GM=1; do
  env $v KILN_CUDA_GRAPH=0 timeout 120 ncu --metrics gpu__time_duration.sum --csv -k regex:attn_dec /tmp/k/kiln bench /tmp/s/l8b2 \
    --backend cuda --prompt-tokens 2048 --gen-tokens 8 --runs 1 > /tmp/ncu.csv 2>/dev/null
  echo "ncu attn_dec $v: $(grep gpu__time_duration /tmp/ncu.csv | tail -8 | awk -F'","' '{print $NF}' | tr -d '"' | tr '\n' ' ')" >> "$S"
done
call_wait l8q4 q06q4 l8bf16 q06bf16
call_logits_md5 "l8q4 q06bf16" 1 X=1 KILN_CUDA_ATTN_GM=1
echo "tests done at $(el) s" >> "$S"
for m in ${CALL_B1:-l8q4 l8bf16 q06bf16 q06q4}; do
  for v in X=1 KILN_CUDA_ATTN_GM=1 X=1 KILN_CUDA_ATTN_GM=1; do call_b1 $m kiln $v; done
done
echo "all done at $(el) s" >> "$S"
cat "$S" $OUT/bench.txt
