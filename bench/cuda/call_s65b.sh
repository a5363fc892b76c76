#!/bin/bash
# call_s65b.sh — session 65's last-budget form of call_s65a.sh (same package): test_qfold, then (past LIM seconds
# nothing more) logits md5 of a 1024-token qwen3-0.6b q4 prefill with each switch on, and one prefill A/B.
set -u
. bench/cuda/call_lib.sh
call_unpack "$1"
LIM=${LIM:-100}
call_synth q4 q06q4
T1_TIMEOUT=70 call_t1 qfold KILN_CUDA_TEST_ATTN_ONLY=qfold
call_wait q06q4
IDS=$(seq -s, 10 1033)
for v in X=1 KILN_CUDA_QFOLD=1 KILN_CUDA_QD_DEFER=1; do
  [ "$(el)" -lt "$LIM" ] || break
  env $v timeout 40 /tmp/k/kiln logits /tmp/s/q06q4 --backend cuda --kv-dtype f16 --ids "$IDS" --chunk 1024 --out /tmp/lg.npy > /tmp/lg.log 2>&1
  echo "logits q06q4 kv f16 chunk 1024 $v rc=$? $(md5sum < /tmp/lg.npy | cut -c1-12)" >> "$S"
done
[ "$(el)" -lt "$LIM" ] && call_prefill_ab q06q4 2048 X=1 KILN_CUDA_QFOLD=1,KILN_CUDA_QD_DEFER=1 X=1 KILN_CUDA_QFOLD=1,KILN_CUDA_QD_DEFER=1
echo "end at $(el) s" >> "$S"
cat "$S" $OUT/bench.txt 2>/dev/null
