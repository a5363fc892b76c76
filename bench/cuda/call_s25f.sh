#!/bin/bash
# call_s25f.sh — session 25, call 6: every CUDA test at default settings on the session's tree (delta_decode, gemma.c's
# q/k norms + rope + cache write + attention through norm_rope_kv_attention with the norm offset folded into its
# weights), gemma logits md5 across kiln / KILN_CUDA_FUSE=0 / kiln-old (call 1's binary); batch-1 decode at 2048
# positions alternating kiln / kiln-old for gemma3-1b, qwen3.5-2b, moe4q4 and the KILN_CUDA_FUSE_NORM_MIN_K=1024
# variant (matmul_add and the norm-in-prologue GEMVs at the hybrids' small hidden sizes); qwen3.5-2b and gemma3-1b
# through the engine at concurrency 1, 8, 64 kiln / kiln-old.
#   run: bash bench/cuda/call_s25f.sh PKG   (PACK_BINS="kiln kiln-old test_cuda_kernels test_cuda_hybrid test_cuda_parity test_cuda_sample")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_full_tests
IDS=$(seq -s, 100 123)
for m in g31bf16 q352bf16; do call_logits /tmp/s/$m "kiln X=1" "kiln KILN_CUDA_FUSE=0" "kiln-old X=1"; done
for rep in 1 2; do
  for v in "kiln X=1" "kiln-old X=1" "kiln KILN_CUDA_FUSE_NORM_MIN_K=1024"; do call_b1 g31bf16 $v; call_b1 q352bf16 $v; call_b1 moe4q4 $v; done
done
for m in q352bf16 g31bf16; do call_conc $m kiln kiln-old; done
echo "bench done at $(el) s" >> "$S"
cat $S
