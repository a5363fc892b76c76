#!/bin/bash
# call_s30h.sh — written in session 30 for the next session (NOT run: the device budget was spent): the opt-in
# KILN_CUDA_QWG128_MULTI=1 (the 128-token tile's matmul_multi / matmul_glu as one launch over all weights and one
# split reduce with the GLU in it). The QWG tests (test_qwg_128 checks multi / GLU both ways, bitwise), logits md5
# with and without (expected identical), prefill at 65..192 tokens and the engine at c=1/64/128 both ways.
#   run: bash bench/cuda/call_s30h.sh PKG/kiln-cuda.tar.xz   (PACK_BINS="kiln test_cuda_kernels")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4 q352q4
call_t1 qwg KILN_CUDA_TEST_QWG_ONLY=1
grep "qwg 128\|qwg slice" /tmp/t_qwg.log >> "$S"
call_t1 qwgmulti KILN_CUDA_TEST_QWG_MULTI_ONLY=1
call_wait l8q4 q06q4 q352q4
call_logits_md5 "l8q4 q06q4 q352q4" 100 X=1 KILN_CUDA_QWG128_MULTI=1
call_prefill_ab "l8q4 q06q4 q352q4" "65 100 128 192" X=1 KILN_CUDA_QWG128_MULTI=1
for v in X=1 KILN_CUDA_QWG128_MULTI=1 X=1 KILN_CUDA_QWG128_MULTI=1; do call_conc_env l8q4 $v 1,64,128; done
echo "all done at $(el) s" >> "$S"
cat "$S" $OUT/bench.txt
