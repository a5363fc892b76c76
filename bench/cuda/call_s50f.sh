#!/bin/bash
# call_s50f.sh — session 50: KILN_CUDA_WIDEN=1 (widen.cu: 2/3/5/6-bit MLX codes rewritten as 4/8-bit at upload, so the
# 4/8-bit kernels take them). test_matmul under it (KILN_CUDA_TEST_MATMUL_ONLY: every bit width and group against
# ref_matmul, the kernel choices following the device width), the fixtures, `kiln logits` of a qwen3-0.6b q3 / q6 synth
# with and without (max |diff| / max |logit|), and batch-1 decode / prefill of llama-3-8b q3 / q6 with and without.
# Package: PACK_BINS="kiln test_cuda_kernels test_cuda_parity" (FULL=1: the default seven binaries, and the whole suite
# under KILN_CUDA_WIDEN=1 after the matmul subset).
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q3 l8q3 q06q3; call_synth q6 l8q6 q06q6
call_t1 matmul_w1 KILN_CUDA_TEST_MATMUL_ONLY=1 KILN_CUDA_WIDEN=1
KILN_CUDA_WIDEN=1 timeout 60 /tmp/k/test_cuda_parity > /tmp/par.log 2>&1; echo "parity widen rc=$? $(tail -1 /tmp/par.log)" >> "$S"
grep FAIL /tmp/par.log | grep -v kiln-tiny | head -5 >> "$S"
# FULL=1 (package with every test binary): the whole suite under KILN_CUDA_WIDEN=1 — the step before making it the default
if [ -n "${FULL:-}" ]; then
  export KILN_CUDA_WIDEN=1
  ( call_tbin test_cuda_hybrid test_cuda_sample test_cuda_shapes ) &
  call_tbin test_cuda_kernels
  wait
  unset KILN_CUDA_WIDEN
  echo "full suite (widen) done at $(el) s" >> "$S"
fi
call_wait q06q3 q06q6
for m in q06q3 q06q6; do
  for v in 0 1; do
    KILN_CUDA_WIDEN=$v timeout 60 /tmp/k/kiln logits /tmp/s/$m --backend cuda --ids "$(seq -s, 10 41)" --chunk 1 --out /tmp/lg_${m}_${v}.npy > /tmp/lg.log 2>&1
    echo "logits $m widen=$v rc=$?" >> "$S"
  done
  python3 -c "
import numpy as np, sys
a=np.load('/tmp/lg_${m}_0.npy'); b=np.load('/tmp/lg_${m}_1.npy')
print('logits $m widen 0 vs 1: max|d|/max|a| %.3g, argmax equal %d of %d' % (np.abs(a-b).max()/np.abs(a).max(), (a.argmax(-1)==b.argmax(-1)).sum(), a.shape[0]))
" >> "$S" 2>&1
done
call_wait l8q3 l8q6
for m in l8q3 l8q6; do
  for v in 0 1; do
    echo "== b1 $m widen=$v $(KILN_CUDA_WIDEN=$v timeout 90 /tmp/k/kiln bench /tmp/s/$m --backend cuda --prompt-tokens 2048 --gen-tokens 128 --runs 2 --json 2>/dev/null | tail -1 | grep -o '"prefill_tok_s": [0-9.]*\|"decode_tok_s": [0-9.]*\|"weight_bytes": [0-9]*' | tr '\n' ' ')" >> "$S"
  done
done
echo "done at $(el) s" >> "$S"
