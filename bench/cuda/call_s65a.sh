#!/bin/bash
# call_s65a.sh — session 65: q's head norm and rope folded into the prefill attention's Q load (KILN_CUDA_QFOLD,
# attention_wgmma.cu fw_q_fold; rope.cu's norm_rope_kv_attention then passes over the k heads and the cache only),
# and rms_mlp's residual add deferred into the next layer's norm (KILN_CUDA_QD_DEFER, matmul_dequant.cu).
# Package: bash bench/cuda/build_here.sh /work/cb/s26 kiln test_cuda_kernels &&
#          PACK_BINS="kiln test_cuda_kernels" bash bench/cuda/pack.sh /work/cb/s26/b build-s65a
# Run: bash bench/cuda/call_s65a.sh build-s65a   (carry ["build-s65a"])
# The new tests (test_qfold; test_qd_defer in the QGEMM subset), the prefill attention and x16 subsets
# (test_norm_rope_attention), logits md5 over a 1024-token prefill with each switch off (f16 and bf16 caches), then
# 2048-token prefill A/B in alternating rounds: both on (default), both off, each off alone.
set -u
. bench/cuda/call_lib.sh
call_unpack "$1"
call_synth q4 q06q4 l8q4
call_synth bf16 q06bf16
T1_TIMEOUT=150 call_t1 qfold KILN_CUDA_TEST_ATTN_ONLY=qfold
T1_TIMEOUT=150 call_t1 mma KILN_CUDA_TEST_ATTN_ONLY=mma
T1_TIMEOUT=150 call_t1 x16 KILN_CUDA_TEST_X16_ONLY=1
T1_TIMEOUT=150 call_t1 qgemm KILN_CUDA_TEST_QGEMM_ONLY=1
call_wait q06q4 l8q4 q06bf16
IDS=$(seq -s, 10 1033)
for m in q06q4 l8q4; do
  for kv in f16 bf16; do
    for v in X=1 KILN_CUDA_QFOLD=0 KILN_CUDA_QD_DEFER=0; do
      [ $kv = bf16 ] && [ $v = KILN_CUDA_QD_DEFER=0 ] && continue
      env $v timeout 90 /tmp/k/kiln logits /tmp/s/$m --backend cuda --kv-dtype $kv --ids "$IDS" --chunk 1024 --out /tmp/lg.npy > /tmp/lg.log 2>&1
      echo "logits $m kv $kv chunk 1024 $v rc=$? $(md5sum < /tmp/lg.npy | cut -c1-12)" >> "$S"
    done
  done
done
echo "logits done at $(el) s" >> "$S"
for r in 1 2; do
  call_prefill_ab "q06q4 q06bf16 l8q4" 2048 X=1 KILN_CUDA_QFOLD=0,KILN_CUDA_QD_DEFER=0 KILN_CUDA_QFOLD=0 KILN_CUDA_QD_DEFER=0
done
echo "prefill done at $(el) s" >> "$S"
cp $OUT/bench.txt $OUT/bench_keep.txt 2>/dev/null
cat "$S" $OUT/bench.txt
