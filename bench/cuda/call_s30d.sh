#!/bin/bash
# call_s30d.sh — session 30: the 128-token wgmma tile (KILN_CUDA_QWG_128=1, opt-in: wgm128_kernel, each weight
# converted once for up to 128 tokens). The QWG tests (test_qwg_128: bitwise the 64-token slices), prefill tok/s at
# 65..512 tokens — default, the tile at the default slice caps, the tile with slices up to 512, no slices at all —
# and the engine at c=1/64/128 with and without the tile.
#   run: bash bench/cuda/call_s30d.sh PKG/kiln-cuda.tar.xz   (PACK_BINS="kiln test_cuda_kernels")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
call_synth q8 l8q8
call_t1 qwg KILN_CUDA_TEST_QWG_ONLY=1
grep "qwg 128\|qwg slice" /tmp/t_qwg.log >> "$S"
call_t1 qwgmulti KILN_CUDA_TEST_QWG_MULTI_ONLY=1
call_wait l8q4 l8q8 q06q4
call_prefill_ab "l8q4 q06q4" "65 100 128 192 256 384 512" X=1 KILN_CUDA_QWG_128=1 "KILN_CUDA_QWG_128=1 KILN_CUDA_QWG_SLICE=512" KILN_CUDA_QWG_SLICE=0
call_prefill_ab "l8q8" "65 128 256 384 512" X=1 "KILN_CUDA_QWG_128=1 KILN_CUDA_QWG_SLICE=512"
echo "prefill done at $(el) s" >> "$S"
for v in X=1 KILN_CUDA_QWG_128=1; do call_conc_env l8q4 $v 1,64,128; done
echo "all done at $(el) s" >> "$S"
cat "$S" $OUT/bench.txt
