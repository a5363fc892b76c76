#!/bin/bash
# call_s63b.sh — (session 63) where the decode attention's ~15 us a layer goes: the decode timeline with phase stamps
# (TL_STAMP: attention 1 q ready .. 5 stored; GEMV 11 x prepared, 12 last item; norm 21 reduced, 22 stored) on main
# for llama-3-8b q4 and qwen3-0.6b q4, beside KILN_CUDA_ATTN_W=4 (4-warp blocks: 4 × 128 registers fit beside the q/k/v
# GEMV's 12 × 128, so the attention can be resident before that GEMV completes) alone and with its K/V prefetched
# before the wait (KILN_CUDA_ATTN_PREWAIT=2: the first tile, 3: all), and the cluster size at 8
# (KILN_CUDA_ATTN_CLUSTER: 16 by default). The decode attention tests run first with W=4 (the test binary loops the
# cluster cases over W = 8 and 4 as well).
# The two knobs are out of main since 890fe68: to rerun, apply bench/cuda/attn_w4_s63.patch in the build tree first
# (PATCH=bench/cuda/attn_w4_s63.patch with build_here.sh). Package (the timeline build):
#   CMAKE_EXTRA="-DKILN_CUDA_TIMELINE=ON" bash bench/cuda/build_here.sh /work/cb/s62t kiln test_cuda_kernels &&
#   PACK_BINS="kiln test_cuda_kernels" bash bench/cuda/pack.sh /work/cb/s62t/b build-s63b      (carry ["build-s63b"])
P=${1:-build-s63b}
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
call_synth q4 l8q4 q06q4
cuobjdump -res-usage /tmp/k/kiln 2>/dev/null | grep -A1 "attn_dec_mma\|gemv_tc_kernel" | grep -o "Function [^:]*\|REG:[0-9]*\|SHARED:[0-9]*" | paste - - - | sort | uniq | head -40 > $OUT/regs.txt
T1_TIMEOUT=120 call_t1 attn_dec_w4 KILN_CUDA_TEST_ATTN_ONLY=dec KILN_CUDA_ATTN_W=4
call_wait l8q4 q06q4
KILN_CUDA_ATTN_SHOW=1 timeout 60 /tmp/k/kiln bench /tmp/s/q06q4 --backend cuda --prompt-tokens 256 --gen-tokens 8 --runs 1 2>&1 | grep -a "clusters" | head -2 >> $S
echo "tests + synth at $(el) s" >> "$S"
TL_TAIL=45
for m in l8q4 q06q4; do
  for r in 1 2; do
    call_b1s $m X=1
    call_b1s $m KILN_CUDA_ATTN_W=4
    call_b1s $m KILN_CUDA_ATTN_W=4 KILN_CUDA_ATTN_PREWAIT=2
    call_b1s $m KILN_CUDA_ATTN_W=4 KILN_CUDA_ATTN_PREWAIT=3
  done
  call_b1s $m KILN_CUDA_ATTN_CLUSTER=8
  echo "$m b1 at $(el) s" >> "$S"
  call_tl $m main X=1
  call_tl $m w4 KILN_CUDA_ATTN_W=4
done
echo "done at $(el) s" >> "$S"
cat $S; cat $OUT/bench.txt
