#!/bin/bash
# call_s27b.sh — session 27, call 2: the 64-token 4-bit matmul's chunk order rotated by row block (KILN_CUDA_QWG_ROT=1:
# the blocks of a split no longer read the same x tile and the same 32-byte column of every row at the same time) —
# test_qwg under it (bound checks; the bitwise-v2 checks are expected to differ), the QWG bench (kernel and copies-only
# probe) and the engine's c=64 protocol alternating 0 / 1; then ncu per kernel of a 2-layer llama-3-8b q4 64-row step.
#   run: bash bench/cuda/call_s27b.sh PKG   (PACK_BINS="kiln test_cuda_kernels")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4
call_t1 qwg0 KILN_CUDA_TEST_QWG_ONLY=1
call_t1 qwg1 KILN_CUDA_TEST_QWG_ONLY=1 KILN_CUDA_QWG_ROT=1
grep -i "fail\|differ\|bitwise" /tmp/t_qwg1.log | head -20 >> "$S"
for r in 0 1 0 1; do
  KILN_CUDA_QWG_ROT=$r KILN_CUDA_TEST_QWG_BENCH=1 timeout 120 /tmp/k/test_cuda_kernels 2>&1 | grep "qwg bench" | grep "v8 mc1 hslab1" | sed "s/^/rot$r /" >> $OUT/qwgbench.txt
done
echo "qwg done at $(el) s" >> "$S"
while [ ! -f /tmp/s/l8q4.done ]; do sleep 1; done
for r in 0 1 0 1; do call_conc128 l8q4 kiln KILN_CUDA_QWG_ROT=$r "--max-batch 128 --kv-cache-gb 16"; done
echo "conc done at $(el) s" >> "$S"
mkdir -p /tmp/sn
OUT=/tmp/sn DTYPES="" PRE=0 L8DTYPES=q4 KDIR=/tmp/k bash bench/cuda/step_ncu.sh - > /dev/null 2>&1
python3 bench/cuda/ncu_sum.py /tmp/ncu_l8dec64_q4.csv > $OUT/ncu_sum.txt 2>&1
echo "all done at $(el) s" >> "$S"
cat "$S" $OUT/bench.txt
