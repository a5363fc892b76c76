#!/bin/bash
# call_s30e.sh — session 30: the 128-token tile on by default (KILN_CUDA_QWG_128; 64-token slices past 128 tokens).
# The whole CUDA test set; model-level logits with the tile against KILN_CUDA_QWG_128=0 (md5 of the npy: per token
# the tile is bitwise the 64-token slices, so the files should be identical); prefill tok/s at 65..192 tokens both
# ways; the engine at c=1/8/32/64/128 (llama-3-8b q4 both ways, qwen3-0.6b q4 default).
#   run: bash bench/cuda/call_s30e.sh PKG/kiln-cuda.tar.xz   (PACK_BINS: kiln and the four CUDA tests)
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4 q352q4
call_full_tests
while [ ! -f /tmp/s/l8q4.done ] || [ ! -f /tmp/s/q352q4.done ] || [ ! -f /tmp/s/q06q4.done ]; do sleep 1; done
for m in l8q4 q06q4 q352q4; do
  for ch in 100 128; do
    for v in X=1 KILN_CUDA_QWG_128=0; do
      env $v timeout 60 /tmp/k/kiln logits /tmp/s/$m --backend cuda --ids "$(seq -s, 10 209)" --chunk $ch --out /tmp/lg.npy > /tmp/lg.log 2>&1
      echo "logits $m chunk $ch $v rc=$? $(md5sum < /tmp/lg.npy | cut -c1-12)" >> "$S"
    done
  done
done
call_prefill_ab "l8q4 q06q4 q352q4" "65 100 128 192" X=1 KILN_CUDA_QWG_128=0
echo "prefill done at $(el) s" >> "$S"
conc() {
  echo "== conc $1 $2" >> $OUT/bench.txt
  env $2 timeout 200 /tmp/k/kiln bench /tmp/s/$1 --backend cuda --concurrency $3 --prompt-tokens 128 --gen-tokens 128 \
    --max-batch 128 --kv-cache-gb 16 --json 2>/tmp/conc.err | tail -1 |
    grep -o '"concurrency": [0-9]*\|"decode_tok_s": [0-9.]*\|"steady_decode_tok_s": [0-9.]*\|"ttft_mean_ms": [0-9.]*\|"itl_mean_ms": [0-9.]*' |
    paste - - - - - >> $OUT/bench.txt
}
conc l8q4 X=1 1,8,32,64,128
conc l8q4 KILN_CUDA_QWG_128=0 1,64,128
conc q06q4 X=1 1,64,128
echo "all done at $(el) s" >> "$S"
cat "$S" $OUT/bench.txt
