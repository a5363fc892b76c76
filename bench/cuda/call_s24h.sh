#!/bin/bash
# call_s24h.sh — session 24, call 8: conv1d writing the state itself in decode steps (one launch fewer a
# DeltaNet layer): the MoE/hybrid subset (conv cases incl. a 5-row decode step), test_cuda_hybrid,
# test_cuda_parity, qwen3.5-2b bf16 batch-1 decode kiln vs kiln-old (call 7's kiln), alternating.
#   run: bash bench/cuda/call_s24h.sh PKG   (PACK_BINS="kiln kiln-old test_cuda_kernels test_cuda_hybrid test_cuda_parity")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
( /tmp/k/kiln synth --preset qwen3.5-2b --dtype bf16 --out /tmp/s/q352bf16 > /tmp/s/synth-2b.log 2>&1; touch /tmp/s/all.done ) &
call_t1 moe KILN_CUDA_TEST_MOE_ONLY=1
call_tbin test_cuda_hybrid test_cuda_parity
while [ ! -f /tmp/s/all.done ]; do sleep 1; done
echo "tests + synth done at $(el) s" >> "$S"
for bin in kiln kiln-old kiln kiln-old; do
  echo "== q352bf16 $bin" >> $OUT/bench.txt
  timeout 60 /tmp/k/$bin bench /tmp/s/q352bf16 --backend cuda --prompt-tokens 2048 --gen-tokens 128 --runs 2 --json 2>/dev/null | tail -1 >> $OUT/bench.txt
done
echo "bench done at $(el) s" >> "$S"
cat $S
