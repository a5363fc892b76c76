#!/bin/bash
# call_s59e.sh — the ring GEMV's stress test (test_gemv_ring_stress: back-to-back ring launches each bitwise one
# gemv_tc_kernel launch): 2048 repetitions as is, 1024 without PDL, 1024 at a 200 KB budget (one ring block an SM:
# consecutive launches cannot share an SM). Package as call_s59a.sh.
P=${1:-build-lead}
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
for v in "KILN_CUDA_TEST_RING_STRESS=2048" "KILN_CUDA_TEST_RING_STRESS=1024 KILN_CUDA_PDL=0" "KILN_CUDA_TEST_RING_STRESS=1024 KILN_CUDA_GEMV_RING_SMEM=204800"; do
  env $v KILN_CUDA_TEST_RING_ONLY=1 timeout 120 /tmp/k/test_cuda_kernels > /tmp/t.log 2>&1
  echo "== $v rc=$? at $(el) s: $(tail -1 /tmp/t.log)" >> $S
  grep "ring stress\|FAIL\|# gemv" /tmp/t.log | head -20 >> $S
done
cat $S
