#!/bin/bash
# call_s32b.sh — session 32, call 2: matmul_dequant.cu's one-launch conversion (qd_one: the scan's last block
# reduces x's maximum, a weight's bound is reduced once when kept, one convert launch for every weight of a
# matmul_multi with the word kernel's increments; KILN_CUDA_QDEQ_ONE=0: a launch per weight as before).
# Bitwise by construction: the qdeq tests, test_cuda_parity / hybrid, logits md5 of kiln against kiln-base (main at
# session 31's end) at prefill chunks 2048 and 300, ncu of 2-layer prefills, prefill tok/s and the c=64 protocol A/B.
#   PACK_BINS="kiln kiln-base test_cuda_kernels test_cuda_parity test_cuda_hybrid"; run: bash bench/cuda/call_s32b.sh PKG
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
call_synth q8 l8q8 q06q8
for m in "q4 llama-3-8b l2q4" "q4 qwen3-0.6b q2q4" "q8 qwen3-0.6b q2q8"; do
  set -- $m
  ( /tmp/k/kiln synth --preset $2 --dtype $1 --layers 2 --out /tmp/s/$3 > /dev/null 2>&1; touch /tmp/s/$3.done ) &
done
call_t1 qgemm KILN_CUDA_TEST_QGEMM_ONLY=1
call_tbin test_cuda_parity test_cuda_hybrid
call_wait l8q4 l8q8 q06q4 q06q8 l2q4 q2q4 q2q8
for m in l8q4 q06q4 q06q8 l8q8; do
  for ch in 2048 300; do
    for b in kiln-base kiln; do
      timeout 60 /tmp/k/$b logits /tmp/s/$m --backend cuda --ids "$(seq -s, 10 609)" --chunk $ch --out /tmp/lg.npy > /tmp/lg.log 2>&1
      echo "logits $m chunk $ch $b rc=$? $(md5sum < /tmp/lg.npy | cut -c1-12)" >> "$S"
    done
  done
done
echo "md5 done at $(el) s" >> "$S"
for b in kiln-base kiln; do
  for m in q2q4 q2q8 l2q4; do
    timeout 120 ncu --print-units base --clock-control none --metrics gpu__time_duration.sum --csv /tmp/k/$b bench /tmp/s/$m \
      --backend cuda --prompt-tokens 2048 --gen-tokens 1 --runs 2 > /tmp/ncu_$m.csv 2>/dev/null
    python3 bench/cuda/ncu_seg.py /tmp/ncu_$m.csv "prefill $m $b" sum | sed -n '/segment 2/,/segment 3/p' | head -9 >> $OUT/ncu.txt
  done
done
echo "ncu done at $(el) s" >> "$S"
for r in 1 2; do
  for m in q06q4 q06q8 l8q4 l8q8; do for b in kiln-base kiln; do call_prefill $m $b 3; done; done
done
echo "prefill done at $(el) s" >> "$S"
for r in 1 2; do
  for b in kiln-base kiln; do
    echo "== conc l8q4 $b" >> $OUT/bench.txt
    timeout 200 /tmp/k/$b bench /tmp/s/l8q4 --backend cuda --concurrency 1,64 --prompt-tokens 128 --gen-tokens 128 \
      --max-batch 128 --kv-cache-gb 16 --json 2>/tmp/conc.err | tail -1 |
      grep -o '"concurrency": [0-9]*\|"decode_tok_s": [0-9.]*\|"steady_decode_tok_s": [0-9.]*\|"ttft_mean_ms": [0-9.]*' | paste - - - - >> $OUT/bench.txt
  done
done
echo "all done at $(el) s" >> "$S"
cat "$S" $OUT/ncu.txt $OUT/bench.txt
