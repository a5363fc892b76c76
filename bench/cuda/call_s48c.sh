#!/bin/bash
# call_s48c.sh — session 48, call 3: 128-key tiles in attention_wgmma.cu (KILN_CUDA_FA_WG_BN=128, two warpgroups;
# with the overlapped loop the producer warpgroup hands its registers to the consumers by setmaxnreg) against the
# default (3 warpgroups, 64-key tiles, one tile at a time).
#   1. the attention tests (KILN_CUDA_TEST_ATTN_ONLY=single: every setting incl. 2:0:4:128 and 2:1:2:128), and
#      test_cuda_shapes under each 128-key setting.
#   2. ncu of attn_wg_kernel (2-layer qwen3-0.6b / llama-3-8b bf16 synths, 2048 tokens), free clocks.
#   3. prefill tok/s (best of 3, alternating) at 2048 and 4096 tokens.
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth_2l bf16 q2 l2
call_synth bf16 q06bf16
call_synth q4 q06q4
call_t1 attn KILN_CUDA_TEST_ATTN_ONLY=single
grep "^# attention" /tmp/t_attn.log >> "$S"
echo "tests at $(el) s" >> "$S"
call_wait q2 l2
V1=KILN_CUDA_FA_WG=2,KILN_CUDA_FA_WG_BN=128
V2=KILN_CUDA_FA_WG=2,KILN_CUDA_FA_WG_BN=128,KILN_CUDA_FA_WG_PIPE=1
for m in q2 l2; do
  for v in X=1 $V1 $V2 X=1; do
    env ${v//,/ } KILN_CUDA_GRAPH=0 timeout 60 ncu --clock-control none --metrics gpu__time_duration.sum --csv -k regex:attn_wg /tmp/k/kiln bench /tmp/s/$m \
      --backend cuda --prompt-tokens 2048 --gen-tokens 2 --runs 1 > /tmp/ncu.csv 2>/tmp/ncu.err
    echo "ncu attn_wg $m $v rc=$?: $(grep -o '"gpu__time_duration.sum","[a-z]*","[0-9.,]*"' /tmp/ncu.csv | cut -d, -f3- | tr '\n' ' ')" >> "$S"
  done
  env ${V2//,/ } KILN_CUDA_GRAPH=0 timeout 60 ncu --clock-control none --metrics gpu__time_duration.sum --csv -k regex:attn_wg /tmp/k/kiln bench /tmp/s/$m \
      --backend cuda --prompt-tokens 8192 --gen-tokens 2 --runs 1 > /tmp/ncu.csv 2>/tmp/ncu.err
  echo "ncu attn_wg $m 8192 V2 rc=$?: $(grep -o '"gpu__time_duration.sum","[a-z]*","[0-9.,]*"' /tmp/ncu.csv | cut -d, -f3- | tr '\n' ' ')" >> "$S"
  KILN_CUDA_GRAPH=0 timeout 60 ncu --clock-control none --metrics gpu__time_duration.sum --csv -k regex:attn_wg /tmp/k/kiln bench /tmp/s/$m \
      --backend cuda --prompt-tokens 8192 --gen-tokens 2 --runs 1 > /tmp/ncu.csv 2>/tmp/ncu.err
  echo "ncu attn_wg $m 8192 default rc=$?: $(grep -o '"gpu__time_duration.sum","[a-z]*","[0-9.,]*"' /tmp/ncu.csv | cut -d, -f3- | tr '\n' ' ')" >> "$S"
done
echo "ncu at $(el) s" >> "$S"
call_synth bf16 l8bf16
call_synth q4 l8q4
call_wait q06bf16 q06q4
call_prefill_ab "q06bf16 q06q4" "2048" X=1 $V1 $V2 X=1 $V1 $V2
call_prefill_ab "q06bf16" "8192" X=1 $V2
sed -i "s/$V2/V2/; s/$V1/V1/" $OUT/bench.txt
cat $OUT/bench.txt >> "$S"; : > $OUT/bench.txt
echo "prefill q06 at $(el) s" >> "$S"
KILN_CUDA_FA_WG=2 KILN_CUDA_FA_WG_BN=128 call_tbin test_cuda_shapes
KILN_CUDA_FA_WG=2 KILN_CUDA_FA_WG_BN=128 KILN_CUDA_FA_WG_PIPE=1 call_tbin test_cuda_shapes
echo "shapes at $(el) s" >> "$S"
call_wait l8bf16 l8q4
call_prefill_ab "l8bf16 l8q4" "2048" X=1 $V1 $V2 X=1 $V1 $V2
sed -i "s/$V2/V2/; s/$V1/V1/" $OUT/bench.txt
cat $OUT/bench.txt >> "$S"; : > $OUT/bench.txt
echo "done at $(el) s" >> "$S"
