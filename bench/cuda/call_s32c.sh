#!/bin/bash
# call_s32c.sh — session 32, call 3: the one-launch conversion's variants — U = 2 / 4 words a thread with their loads
# issued first (KILN_CUDA_QDEQ_U), x's maximum reduced by every convert block instead of the scan's ticket
# (KILN_CUDA_QDEQ_TICKET=0); all bitwise (the qdeq tests compare every variant with the default): ncu of 2-layer
# prefills per variant, prefill tok/s per variant (best of 3, two rounds), and the concurrency protocol at
# c = 1, 64 for llama-3-8b q4 and qwen3-0.6b q8 with kiln-base (main at session 31's end) and kiln.
#   PACK_BINS="kiln kiln-base test_cuda_kernels"; run: bash bench/cuda/call_s32c.sh PKG
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
call_synth q8 q06q8
for m in "q4 llama-3-8b l2q4" "q4 qwen3-0.6b q2q4"; do
  set -- $m
  ( /tmp/k/kiln synth --preset $2 --dtype $1 --layers 2 --out /tmp/s/$3 > /dev/null 2>&1; touch /tmp/s/$3.done ) &
done
call_t1 qgemm KILN_CUDA_TEST_QGEMM_ONLY=1
call_wait l8q4 q06q4 q06q8 l2q4 q2q4
for v in X=1 KILN_CUDA_QDEQ_U=2 KILN_CUDA_QDEQ_U=4 KILN_CUDA_QDEQ_TICKET=0; do
  for m in q2q4 l2q4; do
    env $v timeout 120 ncu --print-units base --clock-control none --metrics gpu__time_duration.sum --csv /tmp/k/kiln bench /tmp/s/$m \
      --backend cuda --prompt-tokens 2048 --gen-tokens 1 --runs 2 > /tmp/ncu_$m.csv 2>/dev/null
    python3 bench/cuda/ncu_seg.py /tmp/ncu_$m.csv "prefill $m $v" sum | sed -n '/segment 2/,/segment 3/p' | head -7 >> $OUT/ncu.txt
  done
done
echo "ncu done at $(el) s" >> "$S"
for r in 1 2; do call_prefill_ab "q06q4 l8q4" 2048 X=1 KILN_CUDA_QDEQ_U=2 KILN_CUDA_QDEQ_U=4 KILN_CUDA_QDEQ_TICKET=0; done
echo "prefill done at $(el) s" >> "$S"
for m in l8q4 q06q8; do
  for b in kiln-base kiln kiln-base kiln; do
    echo "== conc $m $b" >> $OUT/bench.txt
    timeout 200 /tmp/k/$b bench /tmp/s/$m --backend cuda --concurrency 1,64 --prompt-tokens 128 --gen-tokens 128 \
      --max-batch 128 --kv-cache-gb 16 --json 2>/tmp/conc.err | tail -1 |
      grep -o '"concurrency": [0-9]*\|"decode_tok_s": [0-9.]*\|"steady_decode_tok_s": [0-9.]*\|"ttft_mean_ms": [0-9.]*' | paste - - - - >> $OUT/bench.txt
  done
done
echo "all done at $(el) s" >> "$S"
cat "$S" $OUT/ncu.txt $OUT/bench.txt
