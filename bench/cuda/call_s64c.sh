#!/bin/bash
# call_s64c.sh — (session 64) KILN_CUDA_GEMV_TC_ROOM: one-token GEMV launches that leave half of each SM to the next
# PDL-launched kernel (blocks of ≤ 8 warps, ≤ half of what an SM holds; =2: not for launches of > 8 tiles an SM).
# The GEMV tests under it, batch-1 A/B against the default in two alternating rounds (llama-3-8b q4, qwen3-0.6b q4),
# logits md5 of each (rows are bitwise whatever the grid), and the timeline of ROOM=1. Package (the timeline build):
#   CMAKE_EXTRA="-DKILN_CUDA_TIMELINE=ON" bash bench/cuda/build_here.sh /work/cb/s62t kiln test_cuda_kernels &&
#   PACK_BINS="kiln test_cuda_kernels" bash bench/cuda/pack.sh /work/cb/s62t/b build-s64c      (carry ["build-s64c"])
# (Measured in session 64: −30 % / −6 %; the knob left main — a tree with bench/cuda/gemv_room_s64.patch applied runs it.)
P=${1:-build-s64c}
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
call_synth q4 l8q4 q06q4
T1_TIMEOUT=60 call_t1 gemv_room1 KILN_CUDA_TEST_GEMV_ONLY=1 KILN_CUDA_GEMV_TC_ROOM=1
call_wait l8q4 q06q4
call_b1s_ab 2 "l8q4 q06q4" X=1 KILN_CUDA_GEMV_TC_ROOM=1 KILN_CUDA_GEMV_TC_ROOM=2
call_logits_md5 "l8q4 q06q4" 1 X=1 KILN_CUDA_GEMV_TC_ROOM=1 KILN_CUDA_GEMV_TC_ROOM=2
TL_TAIL=45
call_tl l8q4 room1 KILN_CUDA_GEMV_TC_ROOM=1
echo "done at $(el) s" >> "$S"
cat $S; cat $OUT/bench.txt
