#!/bin/bash
# call_s22b.sh — session 22, call 2: the 64-token q4 matmuls (matmul_wgmma.cu v8) with an L2 prefetch size on
# the code copies (KILN_CUDA_QWG_L2PF=128|256, a switch of that call's binary, removed after it: no gain) — tests with the
# hint on, the per-matmul timings (QWG bench), the engine A/B at c=64; then ncu sections of every wgm launch of
# the QWG bench (speed of light, memory, compute, warp states, scheduler) to see what bounds the kernel.
#   run: bash bench/cuda/call_s22b.sh PKG
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4  # written while the tests run (combined.sh skips them then)
call_t1 qwg_l2pf256 KILN_CUDA_TEST_QWG_ONLY=1 KILN_CUDA_QWG_L2PF=256
KILN_CUDA_TEST_QWG_BENCH=1 timeout 200 /tmp/k/test_cuda_kernels > /tmp/qb.log 2>&1; grep "qwg bench" /tmp/qb.log >> $S
cat $S
TESTS=" " MODELS="" VARIANTS="" CONC_ENV="KILN_CUDA_STEP_STATS=64" \
  CONC="l8q4:1,64 l8q4:64:KILN_CUDA_QWG_L2PF=256 l8q4:64 l8q4:64:KILN_CUDA_QWG_L2PF=256 l8q4:64:KILN_CUDA_QWG_L2PF=128 q06q4:1,64 q06q4:64:KILN_CUDA_QWG_L2PF=256 q06q4:64" \
  bash bench/cuda/combined.sh "$P" > /dev/null 2>&1
cat $S >> $OUT/summary.txt
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
QWG_BENCH_REPS=1 KILN_CUDA_TEST_QWG_BENCH=1 timeout 300 $NCU --clock-control none --cache-control none -k regex:"wgm_kernel" \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section WarpStateStats \
  --section SchedulerStats --section Occupancy --page raw --csv /tmp/k/test_cuda_kernels > /tmp/ncu.csv 2> /tmp/ncu.err
echo "ncu rc=$? $(wc -l < /tmp/ncu.csv) lines" >> $OUT/summary.txt
tail -5 /tmp/ncu.err >> $OUT/summary.txt
xz -9 < /tmp/ncu.csv > $OUT/ncu.csv.xz
tail -3 $OUT/summary.txt
