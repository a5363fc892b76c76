#!/bin/bash
# call_s32d.sh — session 32, call 4: the final one-launch conversion (each convert block reduces x's partials; a
# weight's bound reduced once by qd_max_kernel; no ticket, no U variants) against kiln-base (main at session 31's
# end): qdeq tests, logits md5, prefill A/B; x's scan with 1024 / 512 / 264 blocks (KILN_CUDA_QDEQ_NPX); then the
# peer: transformers with torch.compile(mode="reduce-overhead") + static cache on qwen3-0.6b bf16 (2048 + 128).
#   PACK_BINS="kiln kiln-base test_cuda_kernels"; run: bash bench/cuda/call_s32d.sh PKG
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
call_synth q8 q06q8
call_synth bf16 q06bf16
( /tmp/k/kiln synth --preset qwen3-0.6b --dtype q4 --layers 2 --out /tmp/s/q2q4 > /dev/null 2>&1; touch /tmp/s/q2q4.done ) &
call_t1 qgemm KILN_CUDA_TEST_QGEMM_ONLY=1
call_wait l8q4 q06q4 q06q8 q06bf16 q2q4
for m in l8q4 q06q4 q06q8; do
  for ch in 2048 300; do
    for b in kiln-base kiln; do
      timeout 60 /tmp/k/$b logits /tmp/s/$m --backend cuda --ids "$(seq -s, 10 609)" --chunk $ch --out /tmp/lg.npy > /tmp/lg.log 2>&1
      echo "logits $m chunk $ch $b rc=$? $(md5sum < /tmp/lg.npy | cut -c1-12)" >> "$S"
    done
  done
done
echo "md5 done at $(el) s" >> "$S"
for v in X=1 KILN_CUDA_QDEQ_NPX=512 KILN_CUDA_QDEQ_NPX=264; do
  env $v timeout 120 ncu --print-units base --clock-control none --metrics gpu__time_duration.sum --csv /tmp/k/kiln bench /tmp/s/q2q4 \
    --backend cuda --prompt-tokens 2048 --gen-tokens 1 --runs 2 > /tmp/ncu_q2q4.csv 2>/dev/null
  python3 bench/cuda/ncu_seg.py /tmp/ncu_q2q4.csv "prefill q2q4 $v" sum | sed -n '/segment 2/,/segment 3/p' | head -7 >> $OUT/ncu.txt
done
echo "ncu done at $(el) s" >> "$S"
for r in 1 2; do
  for m in q06q4 q06q8 l8q4; do for b in kiln-base kiln; do call_prefill $m $b 3; done; done
  call_prefill_ab "q06q4 l8q4" 2048 KILN_CUDA_QDEQ_NPX=512 KILN_CUDA_QDEQ_NPX=264
done
echo "prefill done at $(el) s" >> "$S"
call_b1 q06bf16 kiln X=1
timeout 330 python3 bench/cuda/peer_torch.py /tmp/s/q06bf16 --modes compile > $OUT/peer.txt 2> /tmp/peer.err
echo "peer rc=$? at $(el) s" >> "$S"; tail -3 /tmp/peer.err >> "$S"
cat "$S" $OUT/ncu.txt $OUT/bench.txt $OUT/peer.txt
