#!/bin/bash
# call_s47e.sh — session 47: c=2 through the engine, the 2-token tensor-core GEMV (default) against the 16-token bucket
# (KILN_CUDA_GEMV_TC_T=1), with TTFT, ITL, wall and steps: call_s47d's counted and steady rates disagreed for llama-3-8b q4.
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
nvidia-smi --query-gpu=name --format=csv,noheader >> "$S"
call_wait l8q4 q06q4
for r in 1 2 3; do call_conc_ab $r l8q4 1,2 X=1 KILN_CUDA_GEMV_TC_T=1; call_conc_ab $r q06q4 2 X=1 KILN_CUDA_GEMV_TC_T=1; done
echo "done at $(el) s" >> $S
cat $S
