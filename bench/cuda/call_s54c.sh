#!/bin/bash
# call_s54c.sh — session 54 (cut to ~100 s for the budget left: two rounds, the default's trace is call 4's): the q4/q8 GEMV's tiles split over 8 warps from K = 4096 (KILN_CUDA_GEMV_TC_S8K=4096)
# instead of from 8192 — half a tile group's time quantum, for gate/up's ~7 µs tail (trace of call 5: the median
# block done at 20.4 µs, the last at 27.7). Tests under it (the batch-1 GEMV subset: rows bitwise across launches,
# 2-token rows bitwise their one-token launch), batch-1 decode alternating default / S8K=4096 over three rounds,
# then the GEMV trace of each; and KILN_CUDA_GEMV_TC_S8R=8192 (8 warps from K = 4096 only for weights of >= 8192
# rows: gate/up and lm_head, q/k/v/o kept at one wave).
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4
call_t1 gemv8 KILN_CUDA_TEST_GEMV_ONLY=1 KILN_CUDA_GEMV_TC_S8K=4096 &
call_t1 gemv8r KILN_CUDA_TEST_GEMV_ONLY=1 KILN_CUDA_GEMV_TC_S8R=8192
wait
grep -i "fail" /tmp/t_gemv8.log /tmp/t_gemv8r.log | head -8 >> "$S"
call_wait l8q4
for r in 1 2; do for v in X=1 KILN_CUDA_GEMV_TC_S8K=4096 KILN_CUDA_GEMV_TC_S8R=8192; do call_b1 l8q4 kiln $v; done; done
paste - - < $OUT/bench.txt >> "$S"
for v in KILN_CUDA_GEMV_TC_S8K=4096 KILN_CUDA_GEMV_TC_S8R=8192; do
  env $v KILN_CUDA_GRAPH=0 KILN_CUDA_GEMV_TC_TRACE=/tmp/gt.txt timeout 60 /tmp/k/kiln bench /tmp/s/l8q4 --backend cuda --prompt-tokens 2048 \
    --gen-tokens 8 --runs 1 > /dev/null 2>&1
  echo "=== trace $v" >> "$S"; python3 bench/cuda/gemv_tc_trace.py /tmp/gt.txt 2>&1 | tail -8 >> "$S"; rm -f /tmp/gt.txt
done
echo "done at $(el) s" >> "$S"
cat "$S"
