#!/bin/bash
# call_s25h.sh — session 25, call 8: post_norm_add with explicit roundings (call 7 found its product fused into the add: not bitwise on real weights; the synth checkpoints, whose norm weights are 0, could not show it), TRIG 1 the default — (Gemma's x += post_norm(h), h = next pre-norm(x) in one launch;
# KILN_CUDA_PNA_TRIG 0/1/2 = the next kernel may launch at entry / after the wait / at exit) and delta_decode's rank-0
# conv-state shift in one round of loads: MoE/hybrid subset (post_norm_add and delta_decode bitwise the separate ops),
# test_cuda_hybrid, test_cuda_parity, logits md5 across kiln / KILN_CUDA_PNA=0 / KILN_CUDA_FUSE=0 / kiln-c6 (call 6's
# binary); batch-1 decode at 2048 positions alternating; gemma3-1b through the engine at concurrency 1, 8, 64.
#   run: bash bench/cuda/call_s25h.sh PKG   (PACK_BINS="kiln kiln-c6 test_cuda_kernels test_cuda_hybrid test_cuda_parity")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_hybrid_tests "bf16:q352bf16 bf16:g31bf16"
IDS=$(seq -s, 10 33)
for m in /tmp/s/g31bf16 tests/fixtures/models/gemma3-tiny tests/fixtures/models/gemma4-tiny-ple; do call_logits $m "kiln X=1" "kiln KILN_CUDA_PNA=0" "kiln KILN_CUDA_FUSE=0" "kiln-c6 X=1"; done
for rep in 1 2; do
  for v in "kiln X=1" "kiln KILN_CUDA_PNA_TRIG=0" "kiln KILN_CUDA_PNA=0" "kiln-c6 X=1"; do call_b1 g31bf16 $v; done
done
echo "bench done at $(el) s" >> "$S"
cat $S
