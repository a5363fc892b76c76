#!/bin/bash
# call_s62f.sh — (session 62) main as it ends the session (both latency fixes and the rms_scale4 refactor, which no
# earlier call ran): the tensor-core decode attention tests (KILN_CUDA_TEST_ATTN_ONLY=dec), norm/rope and chain
# subsets, and `kiln logits` md5 against calls 4–5's (llama-3-8b q4 cf2cb7604351, qwen3-0.6b q4 6a65ab80418b, qwen3-0.6b
# bf16 38adc5877f19). Package: bash bench/cuda/build_here.sh /work/cb/s26 kiln test_cuda_kernels &&
# PACK_BINS="kiln test_cuda_kernels" bash bench/cuda/pack.sh /work/cb/s26/b build-s62f
P=${1:-build-s62f}
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
call_synth q4 l8q4 q06q4
call_synth bf16 q06bf16
T1_TIMEOUT=60
call_t1 attn_dec KILN_CUDA_TEST_ATTN_ONLY=dec
call_t1 norm_rope KILN_CUDA_TEST_NORM_ROPE_ONLY=1
call_t1 chain KILN_CUDA_TEST_CHAIN_ONLY=1
call_wait l8q4 q06q4 q06bf16
IDS=$(seq -s, 1 40)
for m in l8q4 q06q4 q06bf16; do LG_TIMEOUT=30 call_logits /tmp/s/$m "kiln X=1"; done
call_b1 l8q4 kiln X=1
echo "done at $(el) s" >> $S
cat $S; cat $OUT/bench.txt
