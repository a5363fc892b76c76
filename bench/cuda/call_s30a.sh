#!/bin/bash
# call_s30a.sh — session 30: KILN_CUDA_QWG_SLICE on llama-3-8b q4/q8 (call_s29h's first run lost them to stale
# synth done files), logits slice vs default, prefill tok/s at 65..320 tokens with and without, engine c=128.
#   run: bash bench/cuda/call_s30a.sh PKG/kiln-cuda.tar.xz   (PACK_BINS="kiln test_cuda_kernels")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
call_synth q8 l8q8
call_wait l8q4 l8q8 q06q4
for m in l8q4 l8q8; do
  timeout 60 /tmp/k/kiln logits /tmp/s/$m --backend cuda --ids "$(seq -s, 10 209)" --chunk 200 --out /tmp/a.npy > /tmp/la.log 2>&1
  KILN_CUDA_QWG_SLICE=320 timeout 60 /tmp/k/kiln logits /tmp/s/$m --backend cuda --ids "$(seq -s, 10 209)" --chunk 200 --out /tmp/b.npy > /tmp/lb.log 2>&1
  python3 -c "import numpy as n; a=n.load('/tmp/a.npy'); b=n.load('/tmp/b.npy'); print('logits $m chunk 200: max|d|/max|a| %.3g, argmax equal %d of %d' % (abs(a-b).max()/abs(a).max(), (a.argmax(1)==b.argmax(1)).sum(), a.shape[0]))" >> "$S" 2>&1 || tail -3 /tmp/la.log /tmp/lb.log >> "$S"
done
call_prefill_ab "l8q4 l8q8 q06q4" "65 96 128 160 192 256 320" X=1 KILN_CUDA_QWG_SLICE=320
echo "prefill done at $(el) s" >> "$S"
call_conc128 l8q4 kiln X=1 "--max-batch 128 --kv-cache-gb 16"
call_conc128 l8q4 kiln KILN_CUDA_QWG_SLICE=160 "--max-batch 128 --kv-cache-gb 16"
call_conc128 l8q4 kiln X=1 "--max-batch 128 --kv-cache-gb 16"
call_conc128 l8q4 kiln KILN_CUDA_QWG_SLICE=160 "--max-batch 128 --kv-cache-gb 16"
echo "all done at $(el) s" >> "$S"
cat "$S" $OUT/bench.txt
