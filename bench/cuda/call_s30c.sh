#!/bin/bash
# call_s30c.sh — session 30: the issue table's concurrency levels (1, 8, 32, 64, 128; 128-token prompts, 128 generated,
# --max-batch 128 --kv-cache-gb 16) with the 64-token slices at their default caps and off (KILN_CUDA_QWG_SLICE=0): a
# 128-row decode step of a 4096-wide model is one T = 128 matmul per weight, which the slices now take (two 64-token
# launches) instead of the dequantizing path. llama-3-8b q4 and q8, qwen3-0.6b q4; each pair twice.
#   run: bash bench/cuda/call_s30c.sh PKG/kiln-cuda.tar.xz   (PACK_BINS="kiln")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
call_synth q8 l8q8
while [ ! -f /tmp/s/l8q4.done ] || [ ! -f /tmp/s/l8q8.done ] || [ ! -f /tmp/s/q06q4.done ]; do sleep 1; done
echo "synth done at $(el) s" >> "$S"
conc5() {
  echo "== conc $1 $2" >> $OUT/bench.txt
  env $2 timeout 200 /tmp/k/kiln bench /tmp/s/$1 --backend cuda --concurrency 1,8,32,64,128 --prompt-tokens 128 --gen-tokens 128 \
    --max-batch 128 --kv-cache-gb 16 --json 2>/tmp/conc.err | tail -1 |
    grep -o '"concurrency": [0-9]*\|"decode_tok_s": [0-9.]*\|"steady_decode_tok_s": [0-9.]*\|"ttft_mean_ms": [0-9.]*\|"itl_mean_ms": [0-9.]*' |
    paste - - - - - >> $OUT/bench.txt
  grep -i "error\|fail" /tmp/conc.err | head -3 >> $OUT/bench.txt
}
for m in l8q4 l8q8 q06q4; do
  for r in 1 2; do conc5 $m X=1; conc5 $m KILN_CUDA_QWG_SLICE=0; done
  echo "$m done at $(el) s" >> "$S"
done
cat "$S" $OUT/bench.txt
