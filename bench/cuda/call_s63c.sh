#!/bin/bash
# call_s63c.sh — (session 63) main after the W=4 / PREWAIT=3 knobs went back out (bench/cuda/attn_w4_s63.patch): the
# decode timeline again with stamps that no longer take an atomic each (TL_STAMPS reserves a kernel's records once,
# before its PDL wait), batch-1 beside it, the tensor-core decode attention tests, then the whole test_cuda_kernels
# (its last whole run was session 55's). Package (the timeline build; its kernels are main's plus stamps that do
# nothing unless KILN_CUDA_TIMELINE names a file):
#   CMAKE_EXTRA="-DKILN_CUDA_TIMELINE=ON" bash bench/cuda/build_here.sh /work/cb/s62t kiln test_cuda_kernels &&
#   PACK_BINS="kiln test_cuda_kernels" bash bench/cuda/pack.sh /work/cb/s62t/b build-s63c      (carry ["build-s63c"])
P=${1:-build-s63c}
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
call_synth q4 l8q4 q06q4
T1_TIMEOUT=90 call_t1 attn_dec KILN_CUDA_TEST_ATTN_ONLY=dec
call_wait l8q4 q06q4
TL_TAIL=45
for m in l8q4 q06q4; do
  call_b1s $m X=1
  call_tl $m main X=1
done
echo "timelines done at $(el) s" >> "$S"
T1_TIMEOUT=${WHOLE_TO:-300} call_t1 whole X=1   # WHOLE_TO: a shorter limit where the budget is short
echo "done at $(el) s" >> "$S"
cat $S; cat $OUT/bench.txt
