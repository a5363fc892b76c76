#!/bin/bash
# call_s48a.sh — session 48, call 1: where the prefill attention's time goes, then the whole suite and the issue
# table at main. In order (pre.txt as it comes):
#   1. PyTorch's SDPA (bench/cuda/peer_attn.py) on the qwen3-0.6b and llama-3-8b prefill shapes: the peer.
#   2. ncu of attn_wg_kernel on 2-layer qwen3-0.6b / llama-3-8b bf16 synths at 2048 tokens: the default against
#      --block-size 64 (4 TMA copies a tile instead of 16), two warpgroups (one tile at a time / FA3's overlapped
#      loop), the cp.async producers; one ncu --set of the default for its stall reasons.
#   3. qwen3-0.6b bf16 prefill tok/s at block size 16 / 64.
#   4. combined.sh: the whole suite, the issue table, the engine at c = 1..128 and c=64 with --step-tokens 8192.
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth_2l bf16 q2 l2
call_synth bf16 q06bf16
timeout 100 python3 bench/cuda/peer_attn.py >> "$S" 2>&1
echo "peer at $(el) s" >> "$S"
call_wait q2 l2
for m in q2 l2; do
  for bs in 16 64; do
    for v in X=1 KILN_CUDA_FA_WG=2 KILN_CUDA_FA_WG=2,KILN_CUDA_FA_WG_PIPE=1 KILN_CUDA_FA_WG_TMA=0; do
      [ $m = l2 ] && [ "$v" != X=1 ] && continue
      env ${v//,/ } KILN_CUDA_GRAPH=0 timeout 60 ncu --metrics gpu__time_duration.sum --csv -k regex:attn_wg /tmp/k/kiln bench /tmp/s/$m \
        --backend cuda --block-size $bs --prompt-tokens 2048 --gen-tokens 2 --runs 1 > /tmp/ncu.csv 2>/tmp/ncu.err
      echo "ncu attn_wg $m bs $bs $v rc=$?: $(grep -o '"gpu__time_duration.sum","[a-z]*","[0-9.,]*"' /tmp/ncu.csv | cut -d, -f3- | tr '\n' ' ')" >> "$S"
    done
  done
done
KILN_CUDA_GRAPH=0 timeout 90 ncu --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
  -k regex:attn_wg -c 1 /tmp/k/kiln bench /tmp/s/q2 --backend cuda --prompt-tokens 2048 --gen-tokens 2 --runs 1 > /tmp/ncu_full.txt 2>&1
grep -v "^==PROF==\|^ *$" /tmp/ncu_full.txt | tail -120 >> "$S"
echo "ncu at $(el) s" >> "$S"
call_wait q06bf16
for bs in 16 64 16 64; do
  echo "== prefill q06bf16 bs $bs $(timeout 60 /tmp/k/kiln bench /tmp/s/q06bf16 --backend cuda --block-size $bs --prompt-tokens 2048 --gen-tokens 4 --runs 3 --json 2>/dev/null | tail -1 | grep -o '"prefill_tok_s": [0-9.]*')" >> "$S"
done
echo "prefill at $(el) s" >> "$S"
MODELS="l8q4 l8bf16 q06q4 q06bf16" CONC="l8q4:1,2,3,4,8,32,64,128 l8q4:64:--step-tokens,8192 l8q4:1,64" bash bench/cuda/combined.sh "$P"
echo "combined at $(el) s" >> "$S"
