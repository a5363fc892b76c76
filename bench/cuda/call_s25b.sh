#!/bin/bash
# call_s25b.sh — session 25, call 2: the fused DeltaNet decode op (delta_decode: conv1d → gated_delta → gated
# norm → glu in one launch) and qwen35.c's residual adds carrying the next norm (add_rms_norm): the MoE/hybrid
# subset (delta_decode_case: bitwise the separate ops), test_cuda_hybrid, test_cuda_parity; logits of 24 decode
# steps (kiln logits --chunk 1) md5 across kiln, KILN_CUDA_DELTA_DECODE=0, KILN_CUDA_FUSE=0 and kiln-old (call 1's
# binary) — all four must match; batch-1 decode at 2048 positions kiln / DELTA_DECODE=0 / kiln-old, alternating,
# qwen3.5-2b bf16 and the qwen3.5-moe-35b q4 synth (4 layers); ncu of the new decode layer.
#   run: bash bench/cuda/call_s25b.sh PKG   (PACK_BINS="kiln kiln-old test_cuda_kernels test_cuda_hybrid test_cuda_parity")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_hybrid_tests "bf16:q352bf16 q4:moe4q4"
IDS=$(seq -s, 100 123)
for m in q352bf16 moe4q4; do call_logits /tmp/s/$m "kiln X=1" "kiln KILN_CUDA_DELTA_DECODE=0" "kiln KILN_CUDA_FUSE=0" "kiln-old X=1"; done
for m in q352bf16 moe4q4; do
  for v in "kiln X=1" "kiln KILN_CUDA_DELTA_DECODE=0" "kiln-old X=1" "kiln X=1" "kiln KILN_CUDA_DELTA_DECODE=0" "kiln-old X=1"; do
    set -- $v
    echo "== $m $v" >> $OUT/bench.txt
    env $2 timeout 60 /tmp/k/$1 bench /tmp/s/$m --backend cuda --prompt-tokens 2048 --gen-tokens 128 --runs 2 --json 2>/dev/null | tail -1 | grep -o '"prefill_tok_s": [0-9.]*, "decode_tok_s": [0-9.]*' >> $OUT/bench.txt
  done
done
echo "bench done at $(el) s" >> "$S"
call_ncu_decode q352bf16
cat $S
