#!/bin/bash
# call_s63a.sh — (written in session 62 for the next one, not run) after session 62's two latency fixes (rms_norm4_kernel's
# loads batched and its weight before the PDL wait; qwen3's head-norm weights before the attention's wait): the decode
# timeline again on main (what the norms' spans are now, and what is left between the GEMVs), and the whole
# test_cuda_kernels, which session 62 did not run (its call 6 ran the decode attention, norm/rope and chain subsets). Package, both binaries from the timeline build (its stamps cost one load a block where
# KILN_CUDA_TIMELINE is unset; the two share their fatbin, so they pack small):
#   CMAKE_EXTRA="-DKILN_CUDA_TIMELINE=ON" bash bench/cuda/build_here.sh /work/cb/s62t kiln test_cuda_kernels &&
#   PACK_BINS="kiln test_cuda_kernels" bash bench/cuda/pack.sh /work/cb/s62t/b build-s63      (carry ["build-s63"])
P=${1:-build-s63}
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
call_synth q4 l8q4 q06q4
T1_TIMEOUT=120 call_t1 attn_dec KILN_CUDA_TEST_ATTN_ONLY=dec
call_wait l8q4 q06q4
for m in l8q4 q06q4; do
  call_b1s $m X=1
  call_tl $m main X=1
done
echo "timelines done at $(el) s" >> "$S"
T1_TIMEOUT=300 call_t1 whole X=1
echo "done at $(el) s" >> "$S"
cat $S; cat $OUT/bench.txt
