#!/bin/bash
# call_s47a.sh — session 47: deep pieces in the wgmma prefill attention (attention_wgmma.cu, KILN_CUDA_FA_WG_DEEP):
# the longest causal tiles as 64-query pieces whose key tiles the block's warpgroups share round-robin. In the order
# of what it must bring back (pre.txt as it comes): the attention tests (every wgmma setting incl. DEEP=2 and =1),
# qwen3-0.6b prefill A/B (DEEP 0 / 1, and HEAD's binary kiln-base), ncu of the attention kernel on a 2-layer synth,
# llama-3-8b prefill A/B, parity and shapes at the default.
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth bf16 q06bf16
call_synth q4 q06q4
( /tmp/k/kiln synth --preset qwen3-0.6b --dtype bf16 --layers 2 --out /tmp/s/q2 > /dev/null 2>&1; touch /tmp/s/q2.done ) &
nvidia-smi --query-gpu=name --format=csv,noheader >> "$S"
call_t1 attn KILN_CUDA_TEST_ATTN_ONLY=single
grep "^# attention" /tmp/t_attn.log >> "$S"
call_t1 attnwg2 KILN_CUDA_TEST_ATTN_ONLY=wg KILN_CUDA_FA_WG_DEEP=2
grep "^# attention" /tmp/t_attnwg2.log >> "$S"
echo "tests at $(el) s" >> $S
call_wait q06bf16 q06q4 q2
call_synth bf16 l8bf16
call_synth q4 l8q4
call_prefill_ab "q06bf16 q06q4" "2048" X=1 KILN_CUDA_FA_WG_DEEP=1 X=1 KILN_CUDA_FA_WG_DEEP=1
cat $OUT/bench.txt >> $S
for v in X=1 KILN_CUDA_FA_WG_DEEP=1 KILN_CUDA_FA_WG_DEEP=2; do
  env $v KILN_CUDA_GRAPH=0 timeout 100 ncu --metrics gpu__time_duration.sum --csv -k regex:attn_wg /tmp/k/kiln bench /tmp/s/q2 --backend cuda \
    --prompt-tokens 2048 --gen-tokens 2 --runs 1 > /tmp/ncu.csv 2>/tmp/ncu.err
  echo "ncu attn_wg q2 $v rc=$?: $(grep -o '"gpu__time_duration.sum","[a-z]*","[0-9.,]*"' /tmp/ncu.csv | tr '\n' ' ')" >> $S
done
echo "ncu at $(el) s" >> $S
call_prefill q06bf16 kiln-base 3; call_prefill q06bf16 kiln 3
call_prefill_ab "q06bf16" "4096" X=1 KILN_CUDA_FA_WG_DEEP=1
call_wait l8bf16 l8q4
call_prefill_ab "l8bf16 l8q4" "2048" X=1 KILN_CUDA_FA_WG_DEEP=1 X=1 KILN_CUDA_FA_WG_DEEP=1
cat $OUT/bench.txt >> $S
echo "benches at $(el) s" >> $S
call_tbin test_cuda_parity test_cuda_shapes
KILN_CUDA_FA_WG_DEEP=1 call_tbin test_cuda_shapes
echo "done at $(el) s" >> $S
cat $S
