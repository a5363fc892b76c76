#!/bin/bash
# call_s28h.sh — session 28, call 8: the final tree again — the copy probe with batch-1 llama-3-8b bf16 / q4 (issue 8's
# batch-1 line), and the decode attention's split target KILN_CUDA_ATTN_WANT=4 (call 7: one c=64 run 7880 vs
# 7624-7751 tok/s at the default 2) against the default, alternating, with the decode-attention tests under it.
#   run: bash bench/cuda/call_s28h.sh PKG   (PACK_BINS="kiln test_cuda_kernels kiln-cuda-probe")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4
call_synth bf16 l8bf16
call_t1 attn4 KILN_CUDA_TEST_ATTN_ONLY=dec KILN_CUDA_ATTN_WANT=4
while [ ! -f /tmp/s/l8q4.done ] || [ ! -f /tmp/s/l8bf16.done ]; do sleep 1; done
echo "synth done at $(el) s" >> "$S"
/tmp/k/kiln-cuda-probe 2>&1 | grep '"probe": "copy"\|"probe": "read"' >> "$S"
for i in 1 2; do call_b1 l8bf16 kiln X=1; call_b1 l8q4 kiln X=1; done
/tmp/k/kiln-cuda-probe 2>&1 | grep '"probe": "copy"' >> "$S"
for i in 1 2 3; do
  call_conc128 l8q4 kiln X=1 "--max-batch 128 --kv-cache-gb 16"
  call_conc128 l8q4 kiln KILN_CUDA_ATTN_WANT=4 "--max-batch 128 --kv-cache-gb 16"
done
echo "all done at $(el) s" >> "$S"
cat "$S" $OUT/bench.txt
