#!/bin/bash
# call_s24g.sh — session 24, call 7: qwen35.c through the fused ops (the input projections in one
# rms_matmul_multi, o/out_proj and down as matmul_add, the MLP block as rms_mlp / rms_matmul_glu, the
# shared expert's three matmuls as one matmul_multi): test_cuda_hybrid, test_cuda_parity, and batch-1
# decode at a 2048-token context, kiln against kiln-old (the same tree before the change), alternating.
#   run: bash bench/cuda/call_s24g.sh PKG   (PACK_BINS="kiln kiln-old test_cuda_hybrid test_cuda_parity")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
( /tmp/k/kiln synth --preset qwen3.5-2b --dtype bf16 --out /tmp/s/q352bf16 > /tmp/s/synth-2b.log 2>&1
  /tmp/k/kiln synth --preset qwen3.5-moe-35b --dtype q4 --layers 4 --out /tmp/s/moe4q4 > /tmp/s/synth-q4.log 2>&1; touch /tmp/s/all.done ) &
call_tbin test_cuda_hybrid test_cuda_parity
grep "qwen3_5\|qwen3_next" /tmp/test_cuda_parity.log | head -12 >> "$S"
while [ ! -f /tmp/s/all.done ]; do sleep 1; done
echo "tests + synth done at $(el) s" >> "$S"
B=$OUT/bench.txt
for m in q352bf16 moe4q4; do
  for bin in kiln kiln-old kiln kiln-old; do
    echo "== $m $bin" >> $B
    timeout 100 /tmp/k/$bin bench /tmp/s/$m --backend cuda --prompt-tokens 2048 --gen-tokens 128 --runs 2 --json 2>/dev/null | tail -1 >> $B
  done
done
echo "bench done at $(el) s" >> "$S"
cat $S
