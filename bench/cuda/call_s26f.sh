#!/bin/bash
# call_s26f.sh — session 26, call 6: the final tree (e55da8c) — the whole test_cuda_kernels and test_cuda_hybrid at
# default settings, then the issue table's concurrency protocol (combined.sh's flags: 128-token prompts, 128 generated,
# --max-batch 128 --kv-cache-gb 16) for llama-3-8b q4 (9e80979 = kiln-old and kiln, alternating), q8 and qwen3-0.6b q4.
#   run: bash bench/cuda/call_s26f.sh PKG   (PACK_BINS="kiln kiln-old test_cuda_kernels test_cuda_hybrid")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
call_synth q8 l8q8
call_tbin test_cuda_kernels test_cuda_hybrid
echo "tests done at $(el) s" >> "$S"
while [ ! -f /tmp/s/l8q4.done ] || [ ! -f /tmp/s/q06q4.done ] || [ ! -f /tmp/s/l8q8.done ]; do sleep 1; done
for b in kiln-old kiln kiln-old kiln; do call_conc128 l8q4 $b X=1 "--max-batch 128 --kv-cache-gb 16"; done
call_conc128 l8q8 kiln-old X=1 "--max-batch 128 --kv-cache-gb 16"; call_conc128 l8q8 kiln X=1 "--max-batch 128 --kv-cache-gb 16"
call_conc128 q06q4 kiln X=1 "--max-batch 128 --kv-cache-gb 16"
echo "all done at $(el) s" >> "$S"
cat $S
