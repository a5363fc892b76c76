#!/bin/bash
# call_s49a.sh — session 49 (ran: call 4; not kept — bench/cuda/attn_sched_s49.patch holds the change): the prefill attention's warpgroups taking turns at the tensor cores (FA3's ping-pong,
# KILN_CUDA_FA_WG_SCHED=1: the S wgmmas in turn; =3: S and P·V; opt-in). Package: kiln + test_cuda_kernels of main
# with the change (PACK_BINS="kiln test_cuda_kernels").
#   1. the single-rounding attention subset (its settings loop now has 3:0:4:1, 3:0:4:3, 2:0:2:3), and once more
#      with SCHED=3 for every step of the subset;
#   2. ncu of the attention kernel in one 2048-token prefill of 2-layer qwen3-0.6b / llama-3-8b bf16, per setting;
#   3. prefill tok/s, alternating, qwen3-0.6b bf16 at 2048 and 8192 tokens, llama-3-8b q4 at 2048.
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth bf16 q06bf16
call_synth q4 l8q4
call_synth_2l bf16 q2 l2
call_t1 single KILN_CUDA_TEST_ATTN_ONLY=single
grep "^# attention" /tmp/t_single.log >> "$S"
call_t1 single_s3 KILN_CUDA_TEST_ATTN_ONLY=single KILN_CUDA_FA_WG_SCHED=3
call_wait q2 l2
for m in q2 l2; do
  for v in X=1 KILN_CUDA_FA_WG_SCHED=1 KILN_CUDA_FA_WG_SCHED=3; do
    env $v timeout 120 /usr/local/cuda/bin/ncu --kernel-name regex:attn_wg --metrics gpu__time_duration.sum \
      /tmp/k/kiln bench /tmp/s/$m --backend cuda --prompt-tokens 2048 --gen-tokens 2 --runs 1 > /tmp/ncu.txt 2>&1
    echo "ncu $m $v: $(grep -o 'gpu__time_duration.sum *[a-z]* *[0-9.,]*' /tmp/ncu.txt | awk '{print $2" "$3}' | tr '\n' ' ')" >> "$S"
  done
done
call_wait q06bf16 l8q4
for r in 1 2; do
  call_prefill_ab q06bf16 "2048 8192" X=1 KILN_CUDA_FA_WG_SCHED=1 KILN_CUDA_FA_WG_SCHED=3
  call_prefill_ab l8q4 2048 X=1 KILN_CUDA_FA_WG_SCHED=1 KILN_CUDA_FA_WG_SCHED=3
done
cat $OUT/bench.txt >> "$S"
echo "done at $(el) s" >> "$S"
