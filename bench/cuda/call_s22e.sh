#!/bin/bash
# call_s22e.sh — session 22, call 5: matmul_wgmma.cu's v8 (with its f16 slab) at 8-bit, opt-in KILN_CUDA_QWG_V=8
# (the 8-bit default is v2): the wgmma tests (test_qwg: v8 at 8-bit bitwise v2 on every case; the multi launch with
# v8), parity under it, and the engine A/B at c=64 on qwen3-0.6b q8 and llama-3-8b q8.
#   run: bash bench/cuda/call_s22e.sh PKG
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q8 q06q8 l8q8  # written while the tests run (combined.sh skips them then)
call_t1 qwg KILN_CUDA_TEST_QWG_ONLY=1
call_t1 qwg_multi KILN_CUDA_TEST_QWG_MULTI_ONLY=1
KILN_CUDA_QWG_V=8 timeout 100 /tmp/k/test_cuda_parity > /tmp/par.log 2>&1; echo "parity (QWG_V=8) rc=$? $(tail -1 /tmp/par.log)" >> $S
grep FAIL /tmp/par.log | grep -v kiln-tiny | head -5 >> $S
cat $S
TESTS=" " MODELS="" VARIANTS="" CONC_ENV="KILN_CUDA_STEP_STATS=64" \
  CONC="q06q8:1,64 q06q8:64:KILN_CUDA_QWG_V=8 q06q8:64 q06q8:64:KILN_CUDA_QWG_V=8 l8q8:1,64 l8q8:64:KILN_CUDA_QWG_V=8 l8q8:64:KILN_CUDA_QWG_V=8" \
  bash bench/cuda/combined.sh "$P" > /dev/null 2>&1
cat $S >> $OUT/summary.txt
