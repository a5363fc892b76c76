#!/bin/bash
# call_s31d.sh — session 31: gather_rows of whole float4 rows with the indices as a parameter, under PDL
# (elementwise.cu gather_rows4_kernel; KILN_CUDA_GATHER4=0: the plain kernel). The whole CUDA test set, logits md5
# both ways (a copy: identical), the kernel under ncu both ways, batch-1 decode at 2048 + 128 in alternating pairs.
#   run: bash bench/cuda/call_s31d.sh PKG/kiln-cuda.tar.xz   (PACK_BINS: kiln and the four CUDA tests)
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
call_synth bf16 q06bf16
call_full_tests
call_wait l8q4 q06q4 q06bf16
call_logits_md5 "l8q4 q06bf16" 1 X=1 KILN_CUDA_GATHER4=0
for v in X=1 KILN_CUDA_GATHER4=0; do
  env $v KILN_CUDA_GRAPH=0 timeout 120 ncu --metrics gpu__time_duration.sum --csv -k regex:gather_rows /tmp/k/kiln bench /tmp/s/q06bf16 \
    --backend cuda --prompt-tokens 64 --gen-tokens 4 --runs 1 > /tmp/ncu.csv 2>/dev/null
  echo "ncu gather_rows $v: $(grep gpu__time_duration /tmp/ncu.csv | tail -4 | awk -F'","' '{print $NF}' | tr -d '"' | tr '\n' ' ')" >> "$S"
done
echo "tests done at $(el) s" >> "$S"
for m in l8q4 q06bf16 q06q4; do
  for v in X=1 KILN_CUDA_GATHER4=0 X=1 KILN_CUDA_GATHER4=0; do call_b1 $m kiln $v; done
done
echo "all done at $(el) s" >> "$S"
cat "$S" $OUT/bench.txt
