#!/bin/bash
# call_s33f.sh — session 33, call 8: the review's refactors (qd_x_store shared by the two convert kernels;
# ct_synth.h shared by the graph check and test_cuda_shapes) on the device: the prefill matmul tests, the graph
# check, two test_cuda_shapes checkpoints.   PACK_BINS="test_cuda_kernels test_cuda_hybrid test_cuda_shapes"
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_t1 qgemm KILN_CUDA_TEST_QGEMM_ONLY=1
KILN_TEST_HYBRID_ONLY=graph timeout 100 /tmp/k/test_cuda_hybrid > /tmp/g.log 2>&1; echo "graph rc=$? $(tail -1 /tmp/g.log)" >> "$S"
for i in 1 4; do KILN_TEST_SHAPES_ONLY=$i timeout 100 /tmp/k/test_cuda_shapes > /tmp/s$i.log 2>&1; echo "shapes $i rc=$? $(tail -1 /tmp/s$i.log)" >> "$S"; done
echo "done at $(el) s" >> "$S"
cat "$S"
