#!/bin/bash
# call_s32e.sh — session 32, call 6: qd_words (the convert kernels' shared word walk, a refactor of the final qd_one):
# the qdeq tests and logits md5 against call 4's (llama-3-8b q4 54102a3f8424 / d6d485bae6ab, qwen3-0.6b q4 5426f8951479,
# q8 fa448aff5020 at chunks 2048 / 300, 600 ids); then batch-1 decode at a 16-token prompt beside the protocol's 2048
# (what llama-bench's tg128 measures: the decode attention's share at a short context).
#   PACK_BINS="kiln test_cuda_kernels"; run: bash bench/cuda/call_s32e.sh PKG
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
call_synth q8 q06q8
call_synth bf16 l8bf16 q06bf16
call_t1 qgemm KILN_CUDA_TEST_QGEMM_ONLY=1
call_wait l8q4 q06q4 q06q8 l8bf16 q06bf16
for m in l8q4 q06q4 q06q8; do
  for ch in 2048 300; do
    timeout 60 /tmp/k/kiln logits /tmp/s/$m --backend cuda --ids "$(seq -s, 10 609)" --chunk $ch --out /tmp/lg.npy > /tmp/lg.log 2>&1
    echo "logits $m chunk $ch rc=$? $(md5sum < /tmp/lg.npy | cut -c1-12)" >> "$S"
  done
done
for m in l8bf16 l8q4 q06bf16 q06q4; do
  for p in 16 2048; do
    echo "== $m prompt $p $(timeout 60 /tmp/k/kiln bench /tmp/s/$m --backend cuda --prompt-tokens $p --gen-tokens 128 --runs 2 --json 2>/dev/null | tail -1 | grep -o '"decode_tok_s": [0-9.]*\|"decode_weight_gb_s": [0-9.]*' | tr '\n' ' ')" >> $OUT/bench.txt
  done
done
echo "all done at $(el) s" >> "$S"
cat "$S" $OUT/bench.txt
