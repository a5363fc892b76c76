#!/bin/bash
# call_s57a.sh — call_s56c.sh reordered so a hang in the never-run ring kernel costs least: stream_chain on both
# shapes first (independent of kiln), then the GEMV tests with the ring on (90 s at most), batch-1 decode ring off /
# on (qwen3-0.6b q4, llama-3-8b q4 twice), qwen3-0.6b q4 logits md5 ring off / on, then (time allowing) the
# engine's llama-3-8b q4 c=1 and c=64 with the ring on. Package as call_s56c.sh's header.
P=${1:-build-lead}
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
call_synth q4 l8q4 q06q4
for m in llama qwen; do
  timeout 90 $P/stream_chain $m 4 6 13 > $OUT/chain_$m.txt 2>&1
  echo "== stream_chain $m rc=$? at $(el) s" >> "$S"; cat $OUT/chain_$m.txt >> "$S"
done
KILN_CUDA_TEST_GEMV_ONLY=1 KILN_CUDA_GEMV_RING=1 timeout 90 /tmp/k/test_cuda_kernels > /tmp/t_ring.log 2>&1
echo "gemv_ring rc=$? at $(el) s: $(tail -1 /tmp/t_ring.log)" >> "$S"
grep -i "fail\|# gemv" /tmp/t_ring.log | head -12 >> "$S"
call_wait q06q4
call_b1 q06q4 kiln X=1
call_b1 q06q4 kiln KILN_CUDA_GEMV_RING=1
echo "q06 done at $(el) s" >> "$S"
call_wait l8q4
call_b1 l8q4 kiln X=1
call_b1 l8q4 kiln KILN_CUDA_GEMV_RING=1
call_b1 l8q4 kiln X=1
call_b1 l8q4 kiln KILN_CUDA_GEMV_RING=1
IDS=$(seq -s, 1 40)
call_logits /tmp/s/q06q4 "kiln X=1" "kiln KILN_CUDA_GEMV_RING=1"
echo "logits done at $(el) s" >> "$S"
# the issue's c=64 / c=1 with the ring on: a faster batch-1 moves the ratio's denominator
[ $(el) -lt 380 ] && call_conc_env l8q4 KILN_CUDA_GEMV_RING=1 1,64
echo "done at $(el) s" >> "$S"
cat "$S"; cat $OUT/bench.txt
