#!/bin/bash
# call_s59c.sh — the ring GEMV with its tensor maps in device memory (call_s59b.sh: llama-3-8b q4 logits differed run
# to run under PDL with the maps in parameter space): GEMV tests and the PDL chains (three times) under the ring;
# llama-3-8b q4 logits off and ring ×3; batch-1 with step stats off / ring / each with KILN_CUDA_CACHE_CONFIG=shared;
# ncu launch by launch (2-layer llama-3-8b q4, no graph) off vs ring (bench/cuda/ncu_pair.py). Package as call_s59a.sh.
P=${1:-build-lead}
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
call_synth q4 q06q4 l8q4
call_synth_2l q4 l2q4
call_ring_tests
for i in 1 2 3; do
  KILN_CUDA_TEST_CHAIN_ONLY=1 KILN_CUDA_GEMV_RING=1 timeout 30 /tmp/k/test_cuda_kernels > /tmp/t.log 2>&1
  echo "chain ring rc=$? $(tail -1 /tmp/t.log)" >> $S; grep FAIL /tmp/t.log | head -4 >> $S
done
call_wait l2q4
for v in 0 1; do
  KILN_CUDA_GEMV_RING=$v KILN_CUDA_GRAPH=0 timeout 90 ncu --metrics gpu__time_duration.sum --csv \
    /tmp/k/kiln bench /tmp/s/l2q4 --backend cuda --prompt-tokens 16 --gen-tokens 4 --runs 1 > /tmp/ncu_$v.csv 2>/tmp/ncu.err
  echo "ncu ring=$v rc=$? at $(el) s" >> $S
done
python3 bench/cuda/ncu_pair.py /tmp/ncu_0.csv /tmp/ncu_1.csv 400 > $OUT/ncu_pair.txt 2>&1
call_wait q06q4 l8q4
IDS=$(seq -s, 1 40)
LG_TIMEOUT=30 call_logits /tmp/s/l8q4 "kiln X=1" "kiln KILN_CUDA_GEMV_RING=1" "kiln KILN_CUDA_GEMV_RING=1" "kiln KILN_CUDA_GEMV_RING=1"
for v in X=1 KILN_CUDA_GEMV_RING=1; do call_b1s l8q4 $v; call_b1s q06q4 $v; done
for v in X=1 KILN_CUDA_GEMV_RING=1; do call_b1s l8q4 $v KILN_CUDA_CACHE_CONFIG=shared; done
for v in X=1 KILN_CUDA_GEMV_RING=1; do call_b1s l8q4 $v; done
echo "done at $(el) s" >> $S
cat $S; cat $OUT/bench.txt; tail -45 $OUT/ncu_pair.txt
