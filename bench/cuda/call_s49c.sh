#!/bin/bash
# call_s49c.sh — session 49: is qwen3-0.6b q4's c=64 TTFT up with KILN_CUDA_QWG_DEFER on (call 1: 28 → 40 and 23.5 → 40 ms,
# the on-variant always second)? The engine at c = 1, 64 (issue protocol) with the default (on) and =0, in ABBA order,
# qwen3-0.6b q4 and llama-3-8b q4. Package: PACK_BINS="kiln" of main at 33a613d or later.
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 q06q4 l8q4
call_wait q06q4 l8q4
call_conc_ab 1 q06q4 1,64 X=1 KILN_CUDA_QWG_DEFER=0
call_conc_ab 2 q06q4 1,64 KILN_CUDA_QWG_DEFER=0 X=1
call_conc_ab 3 q06q4 1,64 X=1 KILN_CUDA_QWG_DEFER=0
call_conc_ab 4 q06q4 1,64 KILN_CUDA_QWG_DEFER=0 X=1
call_conc_ab 1 l8q4 1,64 X=1 KILN_CUDA_QWG_DEFER=0
call_conc_ab 2 l8q4 1,64 KILN_CUDA_QWG_DEFER=0 X=1
echo "done at $(el) s" >> "$S"
