#!/bin/bash
# call_s26h.sh — session 26, call 8: the code copies' L2 prefetch size (KILN_CUDA_QWG_L2PF=128/256, bits 9-10 of
# wgm_body's C; default 0) now that the 4-bit 64-token matmul runs at 1.25-1.45x its copies (call 7): test_qwg under
# each (a cache hint: bitwise v2 still), the QWG bench under each, and llama-3-8b q4 at c=64 (128 + 128, the issue
# table's flags) alternating 0 / 256.
#   run: bash bench/cuda/call_s26h.sh PKG   (PACK_BINS="kiln test_cuda_kernels")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4
call_t1 qwg256 KILN_CUDA_TEST_QWG_ONLY=1 KILN_CUDA_QWG_L2PF=256
call_t1 qwg128 KILN_CUDA_TEST_QWG_ONLY=1 KILN_CUDA_QWG_L2PF=128
for v in 0 128 256 0 256; do
  KILN_CUDA_QWG_L2PF=$v KILN_CUDA_TEST_QWG_BENCH=1 timeout 60 /tmp/k/test_cuda_kernels 2>&1 | grep "qwg bench" | grep "v8 mc1 hslab1" | sed "s/^/L2PF=$v /" >> $OUT/qwgbench.txt
done
echo "tests + qwg bench done at $(el) s" >> "$S"
while [ ! -f /tmp/s/l8q4.done ]; do sleep 1; done
for v in 0 256 0 256; do
  echo "== c64 l8q4 L2PF=$v" >> $OUT/bench.txt
  KILN_CUDA_QWG_L2PF=$v timeout 60 /tmp/k/kiln bench /tmp/s/l8q4 --backend cuda --concurrency 64 --prompt-tokens 128 --gen-tokens 128 --max-batch 128 --kv-cache-gb 16 --json 2>/dev/null |
    tail -1 | grep -o '"decode_tok_s": [0-9.]*\|"steady_decode_tok_s": [0-9.]*' | paste - - >> $OUT/bench.txt
done
echo "all done at $(el) s" >> "$S"
cat $S
