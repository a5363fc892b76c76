#!/bin/bash
# call_s32a.sh — session 32, call 1: (a) bench/cuda/attn_merge_factors.patch (session 31's, the decode attention's
# merge factors once per query head; bitwise by construction): decode-attention tests, logits md5 against session
# 31's (llama-3-8b q4 011c76944bdd, qwen3-0.6b bf16 5c313d7c1b93), ncu of the kernel, batch-1 A/B against kiln-base;
# (b) matmul_dequant.cu's convert kernel with the row/column by increments and codes by OR + subtract instead of
# 64-bit divisions and I2F (KILN_CUDA_DEQUANT=div: the old indexing): the qdeq tests, logits md5 both ways, ncu of
# 2-layer prefills (where a q4 prefill goes), prefill tok/s both ways.
#   PACK_BINS="kiln kiln-base test_cuda_kernels"; run: bash bench/cuda/call_s32a.sh PKG/kiln-cuda.tar.xz
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
call_synth bf16 q06bf16
call_synth q8 q06q8
for m in "q4 llama-3-8b l2q4" "q4 qwen3-0.6b q2q4" "bf16 qwen3-0.6b q2bf16"; do
  set -- $m
  ( /tmp/k/kiln synth --preset $2 --dtype $1 --layers 2 --out /tmp/s/$3 > /dev/null 2>&1; touch /tmp/s/$3.done ) &
done
call_t1 attn KILN_CUDA_TEST_ATTN_ONLY=dec
call_t1 qgemm KILN_CUDA_TEST_QGEMM_ONLY=1
call_wait l8q4 q06bf16 q06q4 q06q8 l2q4 q2q4 q2bf16
call_logits_md5 "l8q4 q06bf16" 1 X=1
call_logits_md5 "l8q4 q06q4 q06q8" 2048 X=1 KILN_CUDA_DEQUANT=div
echo "md5 done at $(el) s" >> "$S"
for v in X=1 KILN_CUDA_DEQUANT=div; do
  for m in q2q4 l2q4; do
    env $v timeout 120 ncu --print-units base --clock-control none --metrics gpu__time_duration.sum --csv /tmp/k/kiln bench /tmp/s/$m \
      --backend cuda --prompt-tokens 2048 --gen-tokens 1 --runs 2 > /tmp/ncu_$m.csv 2>/dev/null
    python3 bench/cuda/ncu_seg.py /tmp/ncu_$m.csv "prefill $m $v" sum >> $OUT/ncu.txt
  done
done
timeout 120 ncu --print-units base --clock-control none --metrics gpu__time_duration.sum --csv /tmp/k/kiln bench /tmp/s/q2bf16 \
  --backend cuda --prompt-tokens 2048 --gen-tokens 1 --runs 2 > /tmp/ncu_q2bf16.csv 2>/dev/null
python3 bench/cuda/ncu_seg.py /tmp/ncu_q2bf16.csv "prefill q2bf16" sum >> $OUT/ncu.txt
echo "ncu prefill done at $(el) s" >> "$S"
for b in kiln-base kiln kiln-base kiln; do
  KILN_CUDA_GRAPH=0 timeout 60 ncu --clock-control none --metrics gpu__time_duration.sum --csv -k regex:attn_dec /tmp/k/$b bench /tmp/s/l2q4 \
    --backend cuda --prompt-tokens 2048 --gen-tokens 8 --runs 1 > /tmp/ncu.csv 2>/dev/null
  echo "ncu attn_dec $b: $(grep gpu__time_duration /tmp/ncu.csv | tail -8 | awk -F'","' '{print $NF}' | tr -d '"' | tr '\n' ' ')" >> "$S"
done
echo "ncu done at $(el) s" >> "$S"
for r in 1 2; do call_prefill_ab "l8q4 q06q4 q06q8" 2048 X=1 KILN_CUDA_DEQUANT=div; done
echo "prefill done at $(el) s" >> "$S"
for m in q06bf16 l8q4; do for b in kiln-base kiln kiln-base kiln; do call_b1 $m $b X=1; done; done
echo "all done at $(el) s" >> "$S"
cat "$S" $OUT/ncu.txt $OUT/bench.txt
