#!/bin/bash
# call_s48b.sh — session 48, call 2: attention_wgmma.cu's overlapped loop (KILN_CUDA_FA_WG_PIPE=1) peeled so that
# ptxas no longer serializes its wgmmas (C7520 gone), against the default (3 warpgroups, one tile at a time); and
# the batch-1 decode opt-ins of earlier sessions (KILN_CUDA_TC_FUSE=1, KILN_CUDA_XPREP=2/3) again on today's main.
#   1. the attention tests: every wgmma setting (KILN_CUDA_TEST_ATTN_ONLY=single: 2:1:4, 1:1:4, 2:1:2 are the
#      overlapped loop), and test_cuda_shapes under FA_WG=2 PIPE=1.
#   2. ncu of attn_wg_kernel (2-layer qwen3-0.6b / llama-3-8b bf16 synths, 2048 tokens), locked and free clocks.
#   3. prefill tok/s (best of 3, alternating) of qwen3-0.6b bf16/q4 and llama-3-8b bf16/q4 at 2048, and 4096.
#   4. batch-1 decode A/B of the opt-ins on llama-3-8b q4 and qwen3-0.6b q4.
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
for m in q2 l2; do
  for cc in base none; do
    for v in X=1 KILN_CUDA_FA_WG=2,KILN_CUDA_FA_WG_PIPE=1 KILN_CUDA_FA_WG=2; do
      env ${v//,/ } KILN_CUDA_GRAPH=0 timeout 60 ncu --clock-control $cc --metrics gpu__time_duration.sum --csv -k regex:attn_wg /tmp/k/kiln bench /tmp/s/$m \
        --backend cuda --prompt-tokens 2048 --gen-tokens 2 --runs 1 > /tmp/ncu.csv 2>/tmp/ncu.err
      echo "ncu attn_wg $m clocks $cc $v rc=$?: $(grep -o '"gpu__time_duration.sum","[a-z]*","[0-9.,]*"' /tmp/ncu.csv | cut -d, -f3- | tr '\n' ' ')" >> "$S"
    done
  done
done
echo "ncu at $(el) s" >> "$S"
call_synth bf16 l8bf16
call_synth q4 l8q4
call_wait q06bf16 q06q4
call_prefill_ab "q06bf16 q06q4" "2048" X=1 KILN_CUDA_FA_WG=2,KILN_CUDA_FA_WG_PIPE=1 X=1 KILN_CUDA_FA_WG=2,KILN_CUDA_FA_WG_PIPE=1
call_prefill_ab "q06bf16" "4096" X=1 KILN_CUDA_FA_WG=2,KILN_CUDA_FA_WG_PIPE=1
sed -i 's/KILN_CUDA_FA_WG=2,KILN_CUDA_FA_WG_PIPE=1/PIPE2/' $OUT/bench.txt
cat $OUT/bench.txt >> "$S"; : > $OUT/bench.txt
echo "prefill q06 at $(el) s" >> "$S"
KILN_CUDA_FA_WG=2 KILN_CUDA_FA_WG_PIPE=1 call_tbin test_cuda_shapes
echo "shapes at $(el) s" >> "$S"
call_wait l8bf16 l8q4
call_prefill_ab "l8bf16 l8q4" "2048" X=1 KILN_CUDA_FA_WG=2,KILN_CUDA_FA_WG_PIPE=1 X=1 KILN_CUDA_FA_WG=2,KILN_CUDA_FA_WG_PIPE=1
sed -i 's/KILN_CUDA_FA_WG=2,KILN_CUDA_FA_WG_PIPE=1/PIPE2/' $OUT/bench.txt
cat $OUT/bench.txt >> "$S"; : > $OUT/bench.txt
echo "prefill l8 at $(el) s" >> "$S"
for r in 1 2; do
  for v in X=1 KILN_CUDA_TC_FUSE=1 KILN_CUDA_XPREP=2 KILN_CUDA_XPREP=3; do
    for m in l8q4 q06q4; do
      echo "== b1 $m $v $(env $v timeout 60 /tmp/k/kiln bench /tmp/s/$m --backend cuda --prompt-tokens 2048 --gen-tokens 128 --runs 2 --json 2>/dev/null | tail -1 | grep -o '"decode_tok_s": [0-9.]*')" >> "$S"
    done
  done
done
echo "done at $(el) s" >> "$S"
