#!/bin/bash
# call_s51.sh — session 51: widen.cu as the default (2/3 → 4-bit, 5/6 → 8-bit codes on the device at load).
# The whole CUDA suite with the default environment (test_matmul and test_qdeq_f16 now run 2/3/5/6 bits widened and
# at the stored width), then llama-3-8b q2 / q3 / q5 / q6 batch-1 decode and prefill at the default against
# KILN_CUDA_WIDEN=0, and q3 at concurrency 1 / 64 (the issue table's protocol) both ways.
# Package: the default seven binaries (bench/cuda/pack.sh).
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q3 l8q3; call_synth q6 l8q6; call_synth q2 l8q2; call_synth q5 l8q5
( call_tbin test_cuda_hybrid test_cuda_sample test_cuda_shapes test_cuda_parity ) &
call_tbin test_cuda_kernels
wait
echo "full suite (default) done at $(el) s" >> "$S"
call_wait l8q3 l8q6 l8q2 l8q5
call_b1_widen l8q2 l8q3 l8q5 l8q6
call_conc_env l8q3 X=1 1,64
call_conc_env l8q3 KILN_CUDA_WIDEN=0 1,64
cat $OUT/bench.txt >> "$S"
echo "done at $(el) s" >> "$S"
