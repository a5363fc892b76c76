#!/bin/bash
# call_s54b.sh — session 54: the last-block norm (KILN_CUDA_TC_LN, matmul_gemv_tc.cu TC_LNORM: o and down add into x
# and their last block writes the next rms_norm; bit 2: gate/up with the GLU in the store) against today's separate
# add_rms_norm / glu launches. Tests first (the batch-1 GEMV subset, whose test_tc_matmul_add_rms_norm is new; the
# fused subset under KILN_CUDA_TC_FUSE=1 too; test_cuda_hybrid's eager-vs-graph decodes and test_cuda_parity with
# KILN_CUDA_TC_LN=3), `kiln logits` md5 over 24 decode steps with each setting (must be equal: the ops are bitwise the
# separate ones), then batch-1 decode at 2048 positions alternating X=1 / TC_LN=3 / 1 / 2 over two rounds.
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
call_t1 gemv KILN_CUDA_TEST_GEMV_ONLY=1
grep -i "add_rms_norm\|fail" /tmp/t_gemv.log | head -12 >> "$S"
call_t1 fused KILN_CUDA_TEST_FUSED_GEMV_ONLY=1 KILN_CUDA_TC_FUSE=1
grep -i "fail" /tmp/t_fused.log | head -8 >> "$S"
for t in test_cuda_hybrid test_cuda_parity; do
  KILN_CUDA_TC_LN=3 timeout 200 /tmp/k/$t > /tmp/$t.log 2>&1; echo "$t TC_LN=3 rc=$? $(tail -1 /tmp/$t.log)" >> "$S"
  grep -i "fail" /tmp/$t.log | grep -v -i "kiln-tiny\|no model.safetensors" | head -6 >> "$S"
done
echo "tests done at $(el) s" >> "$S"
call_wait l8q4 q06q4
IDS=$(seq -s, 100 123)
for m in l8q4 q06q4; do call_logits /tmp/s/$m "kiln X=1" "kiln KILN_CUDA_TC_LN=3" "kiln KILN_CUDA_TC_LN=1" "kiln KILN_CUDA_TC_LN=2"; done
for r in 1 2; do
  for v in X=1 KILN_CUDA_TC_LN=3 KILN_CUDA_TC_LN=1 KILN_CUDA_TC_LN=2; do call_b1 l8q4 kiln $v; done
  for v in X=1 KILN_CUDA_TC_LN=3; do call_b1 q06q4 kiln $v; done
  echo "round $r at $(el) s" >> "$S"
done
paste - - < $OUT/bench.txt >> "$S"
echo "done at $(el) s" >> "$S"
cat "$S"
