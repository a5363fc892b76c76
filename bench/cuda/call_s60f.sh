#!/bin/bash
# call_s60f.sh — (session 60) call_s60e.sh reproduced the ring's fault without PDL: two ring blocks an SM
# (KILN_CUDA_GEMV_RING_GRID=264) make 29 of 128 stress repetitions of llama-3-8b's gate/up differ from gemv_tc_kernel,
# and in the chain the first tile of a block's group 0 (its first slots) comes out wrong. Which change ends it?
# KILN_CUDA_GEMV_RING_VAR bits (matmul_gemv_tc.cu, tcr_args.var): 1 producer waits for the consumers' x, 2 async-proxy
# fence after the barrier init, 8 slots from a 1024-aligned base, 16 a fence after each full wait; 4 prints the shared
# addresses. Package: kiln + test_cuda_kernels of the tree. (Its KILN_CUDA_GEMV_RING_VAR knobs are gone since the fix
# — call_s60g.sh; every variant passed here, the control too: the unit test at one call's luck.)
P=${1:-build-lead}
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
for v in 0 1 2 8 16 0; do
  KILN_CUDA_GEMV_RING_VAR=$v KILN_CUDA_TEST_RING_ONLY=1 KILN_CUDA_TEST_RING_STRESS=128 KILN_CUDA_GEMV_RING_GRID=264 timeout 60 /tmp/k/test_cuda_kernels > /tmp/t_$v.log 2>&1
  echo "VAR=$v rc=$? $(tail -1 /tmp/t_$v.log)" >> $S; grep "FAIL" /tmp/t_$v.log | head -3 >> $S
done
KILN_CUDA_GEMV_RING_VAR=4 KILN_CUDA_TEST_RING_ONLY=1 KILN_CUDA_TEST_RING_STRESS=1 KILN_CUDA_GEMV_RING_GRID=264 timeout 60 /tmp/k/test_cuda_kernels > /tmp/t_4.log 2>&1
grep "ring block" /tmp/t_4.log | sort | uniq -c | sort -rn | head -12 >> $S
echo "done at $(el) s" >> $S
cat $S
