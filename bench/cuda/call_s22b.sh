#!/bin/bash
# call_s22b.sh — session 22, call 2: why the 64-token q4 matmuls (matmul_wgmma.cu) run at ~0.6 TB/s —
# ncu sections (speed of light, memory, compute, warp states, scheduler) of every wgm/wgm9 launch of
# the QWG bench (llama-3-8b's q4 shapes at 64 tokens; v8 at clusters 1/2/4, v9, v8's copies-only probe).
#   run: bash bench/cuda/call_s22b.sh PKG
P=${1:?package}
mkdir -p /tmp/k && tar xJf "$P" -C /tmp/k && export LD_LIBRARY_PATH=/tmp/k/lib
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
QWG_BENCH_REPS=1 KILN_CUDA_TEST_QWG_BENCH=1 timeout 500 $NCU --clock-control none --cache-control none -k regex:"wgm9?_kernel" \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section WarpStateStats \
  --section SchedulerStats --section Occupancy --section LaunchStats --page raw --csv /tmp/k/test_cuda_kernels > /tmp/ncu.csv 2> /tmp/ncu.err
echo "ncu rc=$? $(wc -l < /tmp/ncu.csv) lines" > $OUT/summary.txt
tail -5 /tmp/ncu.err >> $OUT/summary.txt
xz -9 < /tmp/ncu.csv > $OUT/ncu.csv.xz
cat $OUT/summary.txt
