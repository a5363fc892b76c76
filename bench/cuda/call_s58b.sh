#!/bin/bash
# call_s58b.sh — after call_s58a.sh showed the ring GEMV bitwise and faster (~420 s): the whole CUDA suite with the ring
# on for every one-token GEMV it takes (test_cuda_kernels beside test_cuda_hybrid / parity / sample), logits md5 ring
# off / on for qwen3.5-2b bf16 (its q/k/v are bf16: the ring must not be taken) and the 4-layer MoE q4, then the issue's
# concurrency protocol on llama-3-8b q4 at 1 and 64 off / on (the c=64 / c=1 ratio moves with a faster c=1).
# Package as call_s58a.sh's (carry ["build-lead"]).
P=${1:-build-lead}
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
call_synth q4 l8q4
export KILN_CUDA_GEMV_RING=1
call_full_tests
IDS=$(seq -s, 1 40)
LG_TIMEOUT=40 call_logits /tmp/s/q352bf16 "kiln KILN_CUDA_GEMV_RING=0" "kiln KILN_CUDA_GEMV_RING=1"
LG_TIMEOUT=40 call_logits /tmp/s/moe4q4 "kiln KILN_CUDA_GEMV_RING=0" "kiln KILN_CUDA_GEMV_RING=1"
call_wait l8q4
for v in KILN_CUDA_GEMV_RING=0 KILN_CUDA_GEMV_RING=1; do call_conc_env l8q4 $v 1,64; done
echo "done at $(el) s" >> $S
cat $S; cat $OUT/bench.txt
