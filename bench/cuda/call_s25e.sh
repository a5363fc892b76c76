#!/bin/bash
# call_s25e.sh — session 25, call 5: delta_decode back to call 3's cluster kernel (call 4's hoisted loads were slower)
# with the one-wave rule (a c=64 step declines to the separate ops): the MoE/hybrid subset with each kernel, test_cuda_hybrid,
# test_cuda_parity, logits md5; batch-1 decode kiln / kiln-old (call 1's binary), alternating; qwen3.5-2b through the
# engine at concurrency 1, 8, 64; ncu's warp-state and memory sections of one delta_decode_cl_kernel launch.
#   run: bash bench/cuda/call_s25e.sh PKG   (PACK_BINS="kiln kiln-old test_cuda_kernels test_cuda_hybrid test_cuda_parity")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_hybrid_tests "bf16:q352bf16 q4:moe4q4" moe_v1 KILN_CUDA_DD_V=1
IDS=$(seq -s, 100 123)
for m in q352bf16 moe4q4; do call_logits /tmp/s/$m "kiln X=1" "kiln KILN_CUDA_DD_V=1" "kiln KILN_CUDA_DELTA_DECODE=0" "kiln-old X=1"; done
for rep in 1 2; do
  for v in "kiln X=1" "kiln-old X=1"; do call_b1 q352bf16 $v; done
  for v in "kiln X=1" "kiln-old X=1"; do call_b1 moe4q4 $v; done
done
call_conc q352bf16 kiln kiln-old
echo "bench done at $(el) s" >> "$S"
KILN_CUDA_GRAPH=0 timeout 150 ncu --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis -k regex:delta_decode_cl --launch-skip 30 --launch-count 1 /tmp/k/kiln bench /tmp/s/q352bf16 --backend cuda --prompt-tokens 16 --gen-tokens 4 --runs 1 > $OUT/ncu_dd.txt 2>&1
echo "ncu done at $(el) s" >> "$S"
cat $S
