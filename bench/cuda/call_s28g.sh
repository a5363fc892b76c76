#!/bin/bash
# call_s28g.sh — session 28, call 7: the final tree (calls 3 and 5's changes): the whole test_cuda_kernels,
# test_cuda_hybrid, test_cuda_parity and test_cuda_sample at default settings; the copy-bandwidth probe and
# batch-1 decode of llama-3-8b bf16 / q4 (issue 8's batch-1 line); the issue table's concurrency protocol for
# llama-3-8b q4, kiln-base (c291234) against kiln, and K-split / attention-split knobs on kiln.
#   run: bash bench/cuda/call_s28g.sh PKG
#   (PACK_BINS="kiln kiln-base test_cuda_kernels test_cuda_parity test_cuda_hybrid test_cuda_sample kiln-cuda-probe")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4
call_synth bf16 l8bf16
call_tbin test_cuda_kernels test_cuda_hybrid test_cuda_parity test_cuda_sample
while [ ! -f /tmp/s/l8q4.done ] || [ ! -f /tmp/s/l8bf16.done ]; do sleep 1; done
echo "tests + synth done at $(el) s" >> "$S"
/tmp/k/kiln-cuda-probe > /tmp/probe.json 2>&1; grep -o '"copy[a-z_]*": [0-9.]*\|"read[a-z_]*": [0-9.]*' /tmp/probe.json | head -4 >> "$S"
for i in 1 2; do call_b1 l8bf16 kiln X=1; call_b1 l8q4 kiln X=1; done
for i in 1 2; do
  call_conc128 l8q4 kiln-base X=1 "--max-batch 128 --kv-cache-gb 16"
  call_conc128 l8q4 kiln X=1 "--max-batch 128 --kv-cache-gb 16"
done
call_conc128 l8q4 kiln KILN_CUDA_QWG_WAVE=3 "--max-batch 128 --kv-cache-gb 16"
call_conc128 l8q4 kiln KILN_CUDA_ATTN_WANT=4 "--max-batch 128 --kv-cache-gb 16"
call_conc128 l8q4 kiln X=1 "--max-batch 128 --kv-cache-gb 16"
echo "all done at $(el) s" >> "$S"
cat "$S" $OUT/bench.txt
