#!/bin/bash
# call_s25c.sh — session 25, call 3: delta_decode as a cluster of 8 blocks per (row, key head) (KILN_CUDA_DD_V=2, the
# default now) against one block per key head (=1), where the next kernel may launch (KILN_CUDA_DD_TRIG=0/1/2), and
# qwen35.c without the add_rms_norm residuals of call 2 (kiln-arn = call 2's binary, which had them): the MoE/hybrid
# subset with each version, test_cuda_hybrid, test_cuda_parity; logits md5 of 24 decode steps across the variants
# and kiln-old (call 1's binary); batch-1 decode at 2048 positions, alternating; ncu of the decode layer.
#   run: bash bench/cuda/call_s25c.sh PKG   (PACK_BINS="kiln kiln-old kiln-arn test_cuda_kernels test_cuda_hybrid test_cuda_parity")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_hybrid_tests "bf16:q352bf16 q4:moe4q4" moe_v1 KILN_CUDA_DD_V=1
IDS=$(seq -s, 100 123)
for m in q352bf16 moe4q4; do call_logits /tmp/s/$m "kiln X=1" "kiln KILN_CUDA_DD_V=1" "kiln KILN_CUDA_DELTA_DECODE=0" "kiln-old X=1"; done
for rep in 1 2; do
  for v in "kiln X=1" "kiln KILN_CUDA_DD_V=1" "kiln KILN_CUDA_DD_TRIG=1" "kiln KILN_CUDA_DD_TRIG=2" "kiln KILN_CUDA_DELTA_DECODE=0" "kiln-arn X=1" "kiln-old X=1"; do
    call_b1 q352bf16 $v
  done
  for v in "kiln X=1" "kiln KILN_CUDA_DD_V=1" "kiln-old X=1"; do call_b1 moe4q4 $v; done
done
echo "bench done at $(el) s" >> "$S"
call_ncu_decode q352bf16
cat $S
