#!/bin/bash
# call_s30f.sh — session 30: past 128 tokens, 128-token tiles from the start and the rest as one piece (cuda_qwg_slices'
# mixed runs, default with the tile) against equal 64-token runs (KILN_CUDA_QWG_MIX=0) and no slices
# (KILN_CUDA_QWG_SLICE=0), all with the slice cap raised to 320 to find the crossover. The QWG tests first.
#   run: bash bench/cuda/call_s30f.sh PKG/kiln-cuda.tar.xz   (PACK_BINS="kiln test_cuda_kernels")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4 q352q4
call_synth q8 l8q8
call_t1 qwg KILN_CUDA_TEST_QWG_ONLY=1
grep "qwg 128\|qwg slice" /tmp/t_qwg.log >> "$S"
call_wait l8q4 l8q8 q06q4 q352q4
call_prefill_ab "l8q4 l8q8 q06q4 q352q4" "144 192 256 320" KILN_CUDA_QWG_SLICE=320 "KILN_CUDA_QWG_SLICE=320 KILN_CUDA_QWG_MIX=0" KILN_CUDA_QWG_SLICE=0
echo "all done at $(el) s" >> "$S"
cat "$S" $OUT/bench.txt
