#!/bin/bash
# call_s29e.sh — session 29, call 5: the bf16 batch-1 GEMVs (matmul_gemv.cu gemvh_body) asking L2 for GEMV_PRE more
# rounds of their weight rows (prefetch.global.L2) before the PDL wait — ncu had qkv (fused norm) at 2.5 TB/s and o
# at 2.8 against lm_head's 4.4. Three builds of this tree: kiln-pre0 (the default: PTX identical to HEAD's),
# kiln-pre1, kiln-pre2. Copy probe, logits md5 (decode, 24 steps) pre0 vs pre2, batch-1 tok/s at 2048 positions
# alternating, llama-3-8b bf16 and qwen3-0.6b bf16.
#   run: bash bench/cuda/call_s29e.sh PKG   (PACK_BINS="kiln-pre0 kiln-pre1 kiln-pre2 kiln-cuda-probe")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
ln -sf /tmp/k/kiln-pre0 /tmp/k/kiln # call_synth runs /tmp/k/kiln
call_synth bf16 l8bf16 q06bf16
/tmp/k/kiln-cuda-probe 2>&1 | grep '"probe": "copy"\|"probe": "read"' >> "$S"
while [ ! -f /tmp/s/l8bf16.done ] || [ ! -f /tmp/s/q06bf16.done ]; do sleep 1; done
echo "synth done at $(el) s" >> "$S"
IDS="$(seq -s, 10 73)"
call_logits /tmp/s/l8bf16 "kiln-pre0 X=1" "kiln-pre2 X=1"
call_logits /tmp/s/q06bf16 "kiln-pre0 X=1" "kiln-pre2 X=1"
for i in 1 2; do
  for b in kiln-pre0 kiln-pre1 kiln-pre2; do call_b1 l8bf16 $b X=1; done
done
for b in kiln-pre0 kiln-pre2 kiln-pre0 kiln-pre2; do call_b1 q06bf16 $b X=1; done
echo "all done at $(el) s" >> "$S"
cat "$S" $OUT/bench.txt
