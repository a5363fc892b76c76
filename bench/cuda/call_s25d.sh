#!/bin/bash
# call_s25d.sh — session 25, call 4: delta_decode_cl_kernel with its loads hoisted (taps, norm weight and the row table before the PDL wait;
# state, window, x, z, a, b in one round after it; rank 0 writes the q/k conv state from registers): tests, logits md5,
# batch-1 decode kiln / kiln-c3 (call 3) / kiln-old (call 1), alternating; ncu of the decode layer.
#   run: bash bench/cuda/call_s25d.sh PKG   (PACK_BINS="kiln kiln-old kiln-c3 test_cuda_kernels test_cuda_hybrid test_cuda_parity")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_hybrid_tests "bf16:q352bf16 q4:moe4q4" moe_v1 KILN_CUDA_DD_V=1
IDS=$(seq -s, 100 123)
for m in q352bf16 moe4q4; do call_logits /tmp/s/$m "kiln X=1" "kiln KILN_CUDA_DD_V=1" "kiln KILN_CUDA_DELTA_DECODE=0" "kiln-old X=1"; done
for rep in 1 2 3; do
  for v in "kiln X=1" "kiln-c3 X=1" "kiln-old X=1"; do
    call_b1 q352bf16 $v
  done
  for v in "kiln X=1" "kiln-c3 X=1" "kiln-old X=1"; do call_b1 moe4q4 $v; done
done
for bin in kiln kiln-old; do
  echo "== conc q352bf16 $bin" >> $OUT/bench.txt
  timeout 150 /tmp/k/$bin bench /tmp/s/q352bf16 --backend cuda --concurrency 1,64 --prompt-tokens 128 --gen-tokens 64 --max-batch 64 --json 2>/dev/null | tail -1 >> $OUT/bench.txt
done
echo "bench done at $(el) s" >> "$S"
call_ncu_decode q352bf16
cat $S
