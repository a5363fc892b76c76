#!/bin/bash
# call_s25e.sh — session 25, call 5: delta_decode back to call 3's cluster kernel (call 4's hoisted loads were slower)
# with the one-wave rule (a c=64 step declines to the separate ops): the MoE/hybrid subset with each kernel, test_cuda_hybrid,
# test_cuda_parity, logits md5; batch-1 decode kiln / kiln-old (call 1's binary), alternating; qwen3.5-2b through the
# engine at concurrency 1, 8, 64; ncu's warp-state and memory sections of one delta_decode_cl_kernel launch.
#   run: bash bench/cuda/call_s25e.sh PKG   (PACK_BINS="kiln kiln-old test_cuda_kernels test_cuda_hybrid test_cuda_parity")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
call_synth bf16 q352bf16
call_synth q4 moe4q4
call_t1 moe KILN_CUDA_TEST_MOE_ONLY=1
call_t1 moe_v1 KILN_CUDA_TEST_MOE_ONLY=1 KILN_CUDA_DD_V=1
call_tbin test_cuda_hybrid test_cuda_parity
while [ ! -f /tmp/s/q352bf16.done ] || [ ! -f /tmp/s/moe4q4.done ]; do sleep 1; done
echo "tests + synth done at $(el) s" >> "$S"
IDS=$(seq -s, 100 123)
for m in q352bf16 moe4q4; do
  for v in "kiln X=1" "kiln KILN_CUDA_DD_V=1" "kiln KILN_CUDA_DELTA_DECODE=0" "kiln-old X=1"; do
    set -- $v
    env $2 timeout 60 /tmp/k/$1 logits /tmp/s/$m --backend cuda --ids $IDS --chunk 1 --out /tmp/lg.npy > /tmp/lg.log 2>&1
    echo "logits $m $v rc=$? $(md5sum < /tmp/lg.npy | cut -c1-12)" >> "$S"
  done
done
b1() { echo "== $1 $2 $3" >> $OUT/bench.txt; env $3 timeout 60 /tmp/k/$2 bench /tmp/s/$1 --backend cuda --prompt-tokens 2048 --gen-tokens 128 --runs 2 --json 2>/dev/null | tail -1 | grep -o '"decode_tok_s": [0-9.]*' >> $OUT/bench.txt; }
for rep in 1 2; do
  for v in "kiln X=1" "kiln-old X=1"; do b1 q352bf16 $v; done
  for v in "kiln X=1" "kiln-old X=1"; do b1 moe4q4 $v; done
done
for bin in kiln kiln-old; do
  echo "== conc q352bf16 $bin" >> $OUT/bench.txt
  timeout 150 /tmp/k/$bin bench /tmp/s/q352bf16 --backend cuda --concurrency 1,8,64 --prompt-tokens 128 --gen-tokens 64 --max-batch 64 --json 2>/dev/null | tail -1 | grep -o '"concurrency": [0-9]*\|"decode_tok_s": [0-9.]*\|"steady_decode_tok_s": [0-9.]*' | paste - - - >> $OUT/bench.txt
done
echo "bench done at $(el) s" >> "$S"
KILN_CUDA_GRAPH=0 timeout 150 ncu --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis -k regex:delta_decode_cl --launch-skip 30 --launch-count 1 /tmp/k/kiln bench /tmp/s/q352bf16 --backend cuda --prompt-tokens 16 --gen-tokens 4 --runs 1 > $OUT/ncu_dd.txt 2>&1
echo "ncu done at $(el) s" >> "$S"
cat $S
