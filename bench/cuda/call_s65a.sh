#!/bin/bash
# call_s65a.sh — session 65: q's head norm and rope folded into the prefill attention's Q load (KILN_CUDA_QFOLD,
# attention_wgmma.cu fw_q_fold; rope.cu's norm_rope_kv_attention then passes over the k heads and the cache only),
# and rms_mlp's residual add deferred into the next layer's norm (KILN_CUDA_QD_DEFER, matmul_dequant.cu).
# Package: bash bench/cuda/build_here.sh /work/cb/s26 kiln test_cuda_kernels &&
#          PACK_BINS="kiln test_cuda_kernels" bash bench/cuda/pack.sh /work/cb/s26/b build-s65a
# Run: bash bench/cuda/call_s65a.sh build-s65a   (carry ["build-s65a"]; LIM=S: skip the later steps past S seconds)
# In order of need: test_qfold, logits md5 over a 1024-token prefill with each switch on (f16 / bf16 caches; both are
# opt-in until this call has run — session 65 built them and got no GPU), 2048-token prefill A/B (both off = the
# default, both on, each on alone), test_qd_defer's subset, a second A/B round, then the prefill attention and x16
# subsets (test_norm_rope_attention) while time is left. Never run: build the package again from main first.
set -u
. bench/cuda/call_lib.sh
call_unpack "$1"
LIM=${LIM:-420}
left() { [ "$(el)" -lt "$LIM" ] || { echo "skipped past ${LIM} s: $*" >> "$S"; return 1; }; }
M=${M:-q06q4 l8q4} # the q4 models (M=q06q4: the short form)
call_synth q4 $M
call_synth bf16 q06bf16
T1_TIMEOUT=100 call_t1 qfold KILN_CUDA_TEST_ATTN_ONLY=qfold
call_wait $M q06bf16
IDS=$(seq -s, 10 1033)
for m in $M; do
  for kv in f16 bf16; do
    for v in X=1 KILN_CUDA_QFOLD=1 KILN_CUDA_QD_DEFER=1; do
      [ $kv = bf16 ] && [ $v = KILN_CUDA_QD_DEFER=1 ] && continue
      env $v timeout 90 /tmp/k/kiln logits /tmp/s/$m --backend cuda --kv-dtype $kv --ids "$IDS" --chunk 1024 --out /tmp/lg.npy > /tmp/lg.log 2>&1
      echo "logits $m kv $kv chunk 1024 $v rc=$? $(md5sum < /tmp/lg.npy | cut -c1-12)" >> "$S"
    done
  done
done
echo "logits done at $(el) s" >> "$S"
V="X=1 KILN_CUDA_QFOLD=1,KILN_CUDA_QD_DEFER=1 KILN_CUDA_QFOLD=1 KILN_CUDA_QD_DEFER=1"
call_prefill_ab "$M q06bf16" 2048 $V
echo "prefill round 1 done at $(el) s" >> "$S"
left qgemm && T1_TIMEOUT=150 call_t1 qgemm KILN_CUDA_TEST_QGEMM_ONLY=1
left "prefill round 2" && call_prefill_ab "$M q06bf16" 2048 $V
left mma && T1_TIMEOUT=120 call_t1 mma KILN_CUDA_TEST_ATTN_ONLY=mma
left x16 && T1_TIMEOUT=120 call_t1 x16 KILN_CUDA_TEST_X16_ONLY=1
echo "end at $(el) s" >> "$S"
cat "$S" $OUT/bench.txt
