#!/bin/bash
# call_s30g.sh — session 30: the final caps (192 at 4 bits, 256 at 8 for weights of ≥ 2^24 elements) and the mixed runs
# as the default. The QWG tests, logits default vs KILN_CUDA_QWG_MIX=0 (md5: per token the same bits), prefill default vs
# no runs at the caps.
#   run: bash bench/cuda/call_s30g.sh PKG/kiln-cuda.tar.xz   (PACK_BINS="kiln test_cuda_kernels")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4
call_synth q8 l8q8
call_t1 qwg KILN_CUDA_TEST_QWG_ONLY=1
grep "qwg 128\|qwg slice" /tmp/t_qwg.log >> "$S"
call_t1 qwgmulti KILN_CUDA_TEST_QWG_MULTI_ONLY=1
call_wait l8q4 l8q8
call_logits_md5 "l8q4 l8q8" 200 X=1 KILN_CUDA_QWG_MIX=0
call_prefill_ab "l8q4" "160 192" X=1 KILN_CUDA_QWG_SLICE=0
call_prefill_ab "l8q8" "192 256" X=1 KILN_CUDA_QWG_SLICE=0
echo "all done at $(el) s" >> "$S"
cat "$S" $OUT/bench.txt
