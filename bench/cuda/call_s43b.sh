#!/bin/bash
# call_s43b.sh — session 43 (run when the switch was opt-in; the default since, =0 turns it off): KILN_CUDA_GEMV_TC_WAVE1=1 (the batch-1 q4/q8 GEMV takes as many tile groups a block as
# put one block on every SM where a launch's tiles fit one such wave — llama-3-8b's q+k+v: 128 blocks of 3 groups
# instead of 192 of 2) against the default in one binary. Package: PACK_BINS="kiln test_cuda_kernels" from main +
# the switch. Bitwise by construction (a row's sums do not depend on the groups a block holds): tests and logits md5
# under both, ncu per GEMV shape, batch-1 decode alternating.
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 q06q4 l8q4
( /tmp/k/kiln synth --preset llama-3-8b --dtype q4 --layers 2 --out /tmp/s/l8q4_2 > /dev/null 2>&1; touch /tmp/s/l8q4_2.done ) &
nvidia-smi --query-gpu=name --format=csv,noheader >> "$S"
call_t1 gemv-wave1 KILN_CUDA_TEST_GEMV_ONLY=1 KILN_CUDA_GEMV_TC_WAVE1=1
call_t1 gemv KILN_CUDA_TEST_GEMV_ONLY=1
call_wait q06q4 l8q4 l8q4_2
IDS=$(seq -s, 10 33)
for m in l8q4 q06q4; do call_logits /tmp/s/$m "kiln X=1" "kiln KILN_CUDA_GEMV_TC_WAVE1=1"; done
for v in X=1 KILN_CUDA_GEMV_TC_WAVE1=1; do
  env KILN_CUDA_GRAPH=0 $v timeout 120 ncu --metrics gpu__time_duration.sum,dram__bytes_read.sum -k regex:gemv_tc --csv \
    /tmp/k/kiln bench /tmp/s/l8q4_2 --backend cuda --prompt-tokens 2048 --gen-tokens 8 --runs 1 > /tmp/nc.csv 2>/dev/null
  python3 bench/cuda/ncu_grid.py "$v" >> "$S"
done
for i in 1 2 3; do for v in X=1 KILN_CUDA_GEMV_TC_WAVE1=1; do call_b1 l8q4 kiln $v; done; done
for i in 1 2; do for v in X=1 KILN_CUDA_GEMV_TC_WAVE1=1; do call_b1 q06q4 kiln $v; done; done
cat "$S" $OUT/bench.txt
