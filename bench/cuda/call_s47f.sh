#!/bin/bash
# call_s47f.sh — session 47: 2-token steps on the tensor-core GEMV only for 4-bit weights of K >= 4096
# (KILN_CUDA_GEMV_TC_T_MINK); the rest on the 16-token bucket. kiln = that, kiln-base = main at 6d30d82.
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
call_synth q8 l8q8 q06q8
nvidia-smi --query-gpu=name --format=csv,noheader >> "$S"
call_t1 gemv KILN_CUDA_TEST_GEMV_ONLY=1
call_t1 qwg KILN_CUDA_TEST_QWG_ONLY=1
for t in test_cuda_parity test_cuda_hybrid; do
  timeout 120 /tmp/k/$t > /tmp/$t.log 2>&1; echo "$t rc=$? $(tail -1 /tmp/$t.log)" >> $S
  grep -i fail /tmp/$t.log | grep -v kiln-tiny | head -5 >> $S
done
echo "tests at $(el) s" >> $S
call_wait l8q4 q06q4 l8q8 q06q8
IDS=$(seq -s, 10 41)
for m in l8q4 q06q4 q06q8; do for b in kiln-base kiln; do
  timeout 60 /tmp/k/$b logits /tmp/s/$m --backend cuda --ids "$IDS" --chunk 2 --out /tmp/lg.npy > /tmp/lg.log 2>&1
  echo "logits $m chunk 2 $b rc=$? $(md5sum < /tmp/lg.npy | cut -c1-12)" >> "$S"
done; done
for r in 1 2; do call_conc_ab $r l8q4 1,2 bin:kiln-base bin:kiln; call_conc_ab $r q06q4 1,2 bin:kiln-base bin:kiln; call_conc_ab $r l8q8 1,2 bin:kiln-base bin:kiln; call_conc_ab $r q06q8 1,2 bin:kiln-base bin:kiln; done
echo "done at $(el) s" >> $S
cat $S
