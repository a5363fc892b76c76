#!/bin/bash
# call_s34a.sh — session 34, call 1: the prefill cache (matmul_dequant.cu qd_keep: a quantized weight's f16 form
# kept after its first prefill) under KILN_CUDA_QDEQ_CACHE_GB: the prefill-matmul tests (the cache's checks
# bitwise), logits md5 with and without over 600 ids in 300-token chunks (the second chunk reads the cache),
# 2048-token prefill tok/s alternating, and the engine's concurrency protocol on llama-3-8b q4 / qwen3-0.6b q8.
#   PACK_BINS="kiln test_cuda_kernels"; run: bash bench/cuda/call_s34a.sh PKG
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
call_synth q8 q06q8
call_synth bf16 q06bf16
call_t1 qgemm KILN_CUDA_TEST_QGEMM_ONLY=1
call_t1 qgemm_multi KILN_CUDA_TEST_QWG_MULTI_ONLY=1
call_wait l8q4 q06q4 q06q8 q06bf16
C=KILN_CUDA_QDEQ_CACHE_GB=20
for m in l8q4 q06q4 q06q8; do
  for v in X=1 $C; do
    env $v timeout 90 /tmp/k/kiln logits /tmp/s/$m --backend cuda --ids "$(seq -s, 10 609)" --chunk 300 --out /tmp/lg.npy > /tmp/lg.log 2>&1
    echo "logits $m chunk 300 $v rc=$? $(md5sum < /tmp/lg.npy | cut -c1-12) $(grep -m1 'cuda:' /tmp/lg.log)" >> "$S"
  done
done
echo "md5 done at $(el) s" >> "$S"
for r in 1 2; do call_prefill_ab "q06q4 q06q8 q06bf16 l8q4" 2048 X=1 $C; done
call_prefill_ab "q06q4 l8q4" "300 512" X=1 $C
echo "prefill done at $(el) s" >> "$S"
for r in 1 2; do
  call_conc_env l8q4 X=1 1,64
  call_conc_env l8q4 $C 1,64
done
call_conc_env q06q8 X=1 1,64
call_conc_env q06q8 $C 1,64
echo "conc done at $(el) s" >> "$S"
cat "$S" $OUT/bench.txt
