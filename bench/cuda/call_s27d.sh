#!/bin/bash
# call_s27d.sh — session 27, call 4: the tree with PDL on the 64-token matmul chain, also on the multi launch's
# split-sum clusters (KILN_CUDA_QWG_MULTI=2, opt-in): the whole test_cuda_kernels, test_cuda_hybrid and
# test_cuda_parity at default settings; test_qwg_multi under MULTI=2; the issue table's concurrency protocol
# (128 + 128, --max-batch 128 --kv-cache-gb 16) with MULTI=1 (default) / 2 alternating on llama-3-8b q4, once each
# on qwen3-0.6b q4, and llama-3-8b q8 at the default.
#   run: bash bench/cuda/call_s27d.sh PKG   (PACK_BINS="kiln test_cuda_kernels test_cuda_parity test_cuda_hybrid")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
call_synth q8 l8q8
call_tbin test_cuda_kernels test_cuda_hybrid test_cuda_parity
call_t1 qwgm2 KILN_CUDA_TEST_QWG_MULTI_ONLY=1 KILN_CUDA_QWG_MULTI=2
echo "tests done at $(el) s" >> "$S"
while [ ! -f /tmp/s/l8q4.done ] || [ ! -f /tmp/s/q06q4.done ] || [ ! -f /tmp/s/l8q8.done ]; do sleep 1; done
for r in 1 2 1 2; do call_conc128 l8q4 kiln KILN_CUDA_QWG_MULTI=$r "--max-batch 128 --kv-cache-gb 16"; done
for r in 1 2; do call_conc128 q06q4 kiln KILN_CUDA_QWG_MULTI=$r "--max-batch 128 --kv-cache-gb 16"; done
call_conc128 l8q8 kiln X=1 "--max-batch 128 --kv-cache-gb 16"
echo "all done at $(el) s" >> "$S"
cat "$S" $OUT/bench.txt
