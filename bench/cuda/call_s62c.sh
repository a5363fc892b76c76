#!/bin/bash
# call_s62c.sh — (session 62) rms_norm4_kernel with its loads batched (every x/d load before the first x store; the norm
# weight read before the PDL wait), now on main (this call ran it as bench/cuda/norm_loads_s62.patch against the tree before it): the timeline put two single-block add_rms_norm
# launches at ~12 µs of an 87-µs llama-3-8b q4 layer. Tests touching the norm (subsets), logits md5 base / new (must be
# equal: the same floats), batch-1 ABAB. Package: build-s62b (PATCH=<that change as a patch> bash
# bench/cuda/build_here.sh /work/cb/s26 kiln test_cuda_kernels; PACK_BINS="kiln kiln-base test_cuda_kernels").
P=${1:-build-s62b}
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
call_synth q4 l8q4 q06q4
call_synth bf16 q06bf16
T1_TIMEOUT=90
call_t1 chain KILN_CUDA_TEST_CHAIN_ONLY=1
call_t1 norm_rope KILN_CUDA_TEST_NORM_ROPE_ONLY=1
call_t1 fused_gemv KILN_CUDA_TEST_FUSED_GEMV_ONLY=1
call_t1 gemv KILN_CUDA_TEST_GEMV_ONLY=1
echo "subsets done at $(el) s" >> $S
call_wait l8q4 q06q4 q06bf16
IDS=$(seq -s, 1 40)
for m in l8q4 q06q4 q06bf16; do LG_TIMEOUT=40 call_logits /tmp/s/$m "kiln-base X=1" "kiln X=1"; done
for i in 1 2 3; do
  for m in l8q4 q06q4; do call_b1 $m kiln-base X=1; call_b1 $m kiln X=1; done
done
echo "bench done at $(el) s" >> $S
[ $(el) -lt 230 ] && { T1_TIMEOUT=150 call_t1 whole X=1; }
echo "done at $(el) s" >> $S
cat $S; cat $OUT/bench.txt
