#!/bin/bash
# call_s47d.sh — session 47: with 3..8-token steps in the 16-token bucket (main since 6d30d82), is the 2-token tensor-core
# GEMV (KILN_CUDA_GEMV_TC_T=2, default) still ahead of that bucket at 2 rows (=1)? Engine 128 + 128 at c=2 (and c=3, 8:
# the spread), q4 and q8, both models, two rounds.
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
call_synth q8 l8q8 q06q8
nvidia-smi --query-gpu=name --format=csv,noheader >> "$S"
call_wait l8q4 q06q4
call_conc_ab 1 l8q4 2,3 X=1 KILN_CUDA_GEMV_TC_T=1
call_conc_ab 1 q06q4 2,3 X=1 KILN_CUDA_GEMV_TC_T=1
call_wait l8q8 q06q8
call_conc_ab 1 l8q8 2,8 X=1 KILN_CUDA_GEMV_TC_T=1
call_conc_ab 1 q06q8 2,8 X=1 KILN_CUDA_GEMV_TC_T=1
call_conc_ab 2 l8q4 2 X=1 KILN_CUDA_GEMV_TC_T=1
call_conc_ab 2 q06q4 2 X=1 KILN_CUDA_GEMV_TC_T=1
echo "done at $(el) s" >> $S
cat $S
