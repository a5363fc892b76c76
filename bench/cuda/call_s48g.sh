#!/bin/bash
# call_s48g.sh — written in session 48, run in session 49 (call 3: memcheck / synccheck 0 errors; racecheck past 150 s): compute-sanitizer over what calls 4–6 left
# out or cut short — memcheck on the QMMA subset and the prefill attention (they ran past 30 / 45 s under the
# tool), the hybrid binary, and racecheck / synccheck on the decode attention (clusters, shared
# memory) and the GEMV subset. Same line format as call_s48f.sh.
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_san memcheck 120 qmma KILN_CUDA_TEST_QMMA_ONLY=1 -- /tmp/k/test_cuda_kernels
call_san memcheck 120 attn_single KILN_CUDA_TEST_ATTN_ONLY=single -- /tmp/k/test_cuda_kernels
call_san memcheck 90 hybrid X=1 -- /tmp/k/test_cuda_hybrid
call_san synccheck 60 gemv_sync KILN_CUDA_TEST_GEMV_ONLY=1 -- /tmp/k/test_cuda_kernels
call_san racecheck 150 attn_dec_race KILN_CUDA_TEST_ATTN_ONLY=dec -- /tmp/k/test_cuda_kernels
echo "done at $(el) s" >> "$S"
