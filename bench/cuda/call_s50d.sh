#!/bin/bash
# call_s50d.sh — session 50: (1) racecheck of the quick QWG subset one kernel family at a time (--kernel-name kns=…):
# call 3's hazard report named v5's wg3_body (its scale/bias cp.async writes against wg2_frag's reads, "invalid
# memcpy_async synchronization"), which test_qwg runs for its bitwise comparison, not the default v8 (wgm_kernel);
# (2) `kiln logits` md5 with KILN_CUDA_QWG_DEFER=0 and the default at 9/33/64-token chunks (session 49's refactor of the
# flush, c6e15f0, on a model); the GEMV subset under racecheck for wgm_kernel alone; (3) the whole suite and the issue table at main (combined.sh). Package: the default seven.
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4
for k in wgm_kernel wg3_kernel wg2_kernel wg_kernel; do
  call_san racecheck 120 race_$k KILN_CUDA_TEST_QWG_ONLY=quick -- --kernel-name kns=$k /tmp/k/test_cuda_kernels
done
# session 49's GEMV-subset report (writes at wg_cp16, which v1's wg_issue and v8's wgm_body both inline) under the filter
call_san racecheck 120 race_gemv_wgm KILN_CUDA_TEST_GEMV_ONLY=1 -- --kernel-name kns=wgm_kernel /tmp/k/test_cuda_kernels
call_wait l8q4
call_logits_md5 l8q4 "9 33 64" X=1 KILN_CUDA_QWG_DEFER=0
echo "pre done at $(el) s" >> "$S"
MODELS="l8q4 l8bf16 q06q4 q06bf16" CONC="l8q4:1,64,1,64" bash bench/cuda/combined.sh "$P"
