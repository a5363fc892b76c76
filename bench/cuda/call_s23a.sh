#!/bin/bash
# call_s23a.sh — session 23, call 1: the grouped MoE experts (moe_gemm.cu). Test subsets (the QWG
# review check, MoE), test_cuda_hybrid and test_cuda_parity, then the qwen3.5-moe-35b synth (4 layers,
# q4 and bf16 at 2 layers) prefill and concurrency with the grouped path against the per-expert loop.
#   run: bash bench/cuda/call_s23a.sh PKG
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
( /tmp/k/kiln synth --preset qwen3.5-moe-35b --dtype q4 --layers 4 --out /tmp/s/moe4q4 > /tmp/s/synth-q4.log 2>&1; touch /tmp/s/moe4q4.done
  /tmp/k/kiln synth --preset qwen3.5-moe-35b --dtype bf16 --layers 2 --out /tmp/s/moe2bf16 > /tmp/s/synth-bf16.log 2>&1; touch /tmp/s/moe2bf16.done ) &
call_t1 moe KILN_CUDA_TEST_MOE_ONLY=1
grep "^# moe_experts grouped\|FAIL" /tmp/t_moe.log > $OUT/moe_test.txt
call_t1 qwg KILN_CUDA_TEST_QWG_ONLY=1
call_t1 qwgm KILN_CUDA_TEST_QWG_MULTI_ONLY=1
for t in test_cuda_hybrid test_cuda_parity; do
  timeout 300 /tmp/k/$t > /tmp/$t.log 2>&1; echo "$t rc=$? $(tail -1 /tmp/$t.log)" >> "$S"; grep -i "fail" /tmp/$t.log | head -8 >> "$S"
done
echo "tests done at $(el) s" >> "$S"
while [ ! -f /tmp/s/moe2bf16.done ]; do sleep 1; done
echo "synth done at $(el) s" >> "$S"; tail -2 /tmp/s/synth-q4.log /tmp/s/synth-bf16.log >> "$S"
B=$OUT/bench.txt
b() { echo "== $*" >> $B; env "$@" 2>&1 | grep -v "^\s*$" | tail -4 >> $B; }
for m in moe4q4 moe2bf16; do
  for v in KILN_CUDA_MOE_GEMM=1 KILN_CUDA_MOE_GEMM=0; do
    b $v timeout 120 /tmp/k/kiln bench /tmp/s/$m --backend cuda --prompt-tokens 2048 --gen-tokens 32 --runs 2 --json
  done
  for v in "KILN_CUDA_MOE=16" "KILN_CUDA_MOE=64" "KILN_CUDA_MOE=0" "KILN_CUDA_MOE=16 KILN_CUDA_MOE_GEMM=0"; do
    b $v timeout 150 /tmp/k/kiln bench /tmp/s/$m --backend cuda --concurrency 1,8,64 --prompt-tokens 128 --gen-tokens 64 --max-batch 64 --json
  done
done
echo "bench done at $(el) s" >> "$S"
cat $S
