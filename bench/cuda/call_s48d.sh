#!/bin/bash
# call_s48d.sh — session 48, call 4: compute-sanitizer over the kernels sessions 45–47 changed and the paths a
# decode and a prefill take (the suite had not run under it since sessions 13/27: initcheck on test_cuda_hybrid,
# memcheck on one engine run). Each line: tool, what ran, its ERROR SUMMARY, the first reports.
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth_2l q4 l2q4
call_synth_2l bf16 q2
call_san memcheck 90 gemv KILN_CUDA_TEST_GEMV_ONLY=1 -- /tmp/k/test_cuda_kernels
call_san memcheck 90 qwg KILN_CUDA_TEST_QWG_ONLY=1 -- /tmp/k/test_cuda_kernels
call_san synccheck 60 qwg_sync KILN_CUDA_TEST_QWG_ONLY=1 -- /tmp/k/test_cuda_kernels
call_san racecheck 80 attn_dec KILN_CUDA_TEST_ATTN_ONLY=dec -- /tmp/k/test_cuda_kernels
call_wait l2q4 q2
call_san memcheck 50 l2q4_decode KILN_CUDA_GRAPH=0 -- /tmp/k/kiln bench /tmp/s/l2q4 --backend cuda --prompt-tokens 300 --gen-tokens 6 --runs 1
call_san memcheck 50 q2_prefill KILN_CUDA_GRAPH=0 -- /tmp/k/kiln bench /tmp/s/q2 --backend cuda --prompt-tokens 1000 --gen-tokens 4 --runs 1
call_san memcheck 60 l2q4_conc KILN_CUDA_GRAPH=0 -- /tmp/k/kiln bench /tmp/s/l2q4 --backend cuda --concurrency 1,3,8 --prompt-tokens 40 --gen-tokens 6 --max-batch 16 --kv-cache-gb 1
echo "done at $(el) s" >> "$S"
