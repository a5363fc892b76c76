#!/bin/bash
# call_s33e.sh — session 33, call 7: qd_fused_kernel (x's scan inside the convert's cooperative launch) against
# KILN_CUDA_QDEQ_FUSE=0 (the scan as its own launch, sessions 29-32) in the same binary: the qdeq tests (every
# variant bitwise), logits md5 both ways, prefill tok/s alternating, ncu of a 2-layer qwen3-0.6b q4 prefill.
#   PACK_BINS="kiln test_cuda_kernels"; run: bash bench/cuda/call_s33e.sh PKG
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
call_synth q8 q06q8
( /tmp/k/kiln synth --preset qwen3-0.6b --dtype q4 --layers 2 --out /tmp/s/q2q4 > /dev/null 2>&1; touch /tmp/s/q2q4.done ) &
call_t1 qgemm KILN_CUDA_TEST_QGEMM_ONLY=1
call_wait l8q4 q06q4 q06q8 q2q4
for m in l8q4 q06q4 q06q8; do
  for ch in 2048 300; do
    for v in X=1 KILN_CUDA_QDEQ_FUSE=0; do
      env $v timeout 60 /tmp/k/kiln logits /tmp/s/$m --backend cuda --ids "$(seq -s, 10 609)" --chunk $ch --out /tmp/lg.npy > /tmp/lg.log 2>&1
      echo "logits $m chunk $ch $v rc=$? $(md5sum < /tmp/lg.npy | cut -c1-12) $(grep -m1 'cuda:' /tmp/lg.log)" >> "$S"
    done
  done
done
echo "md5 done at $(el) s" >> "$S"
for v in X=1 KILN_CUDA_QDEQ_FUSE=0; do
  env $v timeout 120 ncu --print-units base --clock-control none --metrics gpu__time_duration.sum --csv /tmp/k/kiln bench /tmp/s/q2q4 \
    --backend cuda --prompt-tokens 2048 --gen-tokens 1 --runs 2 > /tmp/ncu_q2q4.csv 2>/dev/null
  python3 bench/cuda/ncu_seg.py /tmp/ncu_q2q4.csv "prefill q2q4 $v" sum | sed -n '/segment 2/,/segment 3/p' | head -9 >> $OUT/ncu.txt
done
echo "ncu done at $(el) s" >> "$S"
for r in 1 2; do call_prefill_ab "q06q4 q06q8 l8q4" 2048 X=1 KILN_CUDA_QDEQ_FUSE=0; done
echo "prefill done at $(el) s" >> "$S"
cat "$S" $OUT/ncu.txt $OUT/bench.txt
