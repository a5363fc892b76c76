#!/bin/bash
# call_s50c.sh — session 50: which kernel are the racecheck hazards of the quick QWG subset in? Calls 1-2 had them with
# every wgm_body (v8) fill and release form, and the reported write is cp_async16 (mma_util.cuh), which v8 does not
# use for its copies (wg_cp16) — v5's wg3_body and v2's wg2_body do. racecheck restricted to each kernel family by
# --kernel-name, and the launches v8 makes (KILN_CUDA_QWG_DEBUG=2). Package: PACK_BINS="test_cuda_kernels".
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
KILN_CUDA_QWG_DEBUG=2 KILN_CUDA_TEST_QWG_ONLY=quick /tmp/k/test_cuda_kernels 2>&1 | grep -a "qwg v8\|checks" | head -8 >> "$S"
for k in wgm_ wg3_ wg2_ wg_reduce; do
  call_san racecheck 120 race_$k KILN_CUDA_TEST_QWG_ONLY=quick -- --kernel-name regex:$k /tmp/k/test_cuda_kernels
done
KILN_CUDA_TEST_QWG_ONLY=quick /usr/local/cuda/bin/compute-sanitizer --tool racecheck --racecheck-report hazard --print-limit 4 /tmp/k/test_cuda_kernels 2>&1 | grep -a -v "^=========     Host\|Saved" | head -40 | cut -c1-300 >> "$S"
echo "done at $(el) s" >> "$S"
