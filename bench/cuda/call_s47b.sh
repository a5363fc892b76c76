#!/bin/bash
# call_s47b.sh — session 47: bench/cuda/qwg_s16.patch at last (session 45's, never run: KILN_CUDA_QWG_S16=1 runs the
# wgmma kernel's 3..8-token steps in the 16-token bucket, so q/k/v and gate/up take one multi launch, the GLU in its
# reduce, and the norms prepare x) against the default, in one binary; then the batch-1 GEMV trace at this tree.
# Package: kiln (+ S16, off unless set), kiln-base (main), test_cuda_kernels/parity/hybrid with the patch.
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
nvidia-smi --query-gpu=name --format=csv,noheader >> "$S"
call_t1 qwg KILN_CUDA_TEST_QWG_ONLY=1
call_t1 qwg-s16 KILN_CUDA_TEST_QWG_ONLY=1 KILN_CUDA_QWG_S16=1
echo "tests at $(el) s" >> $S
call_wait l8q4 q06q4
call_synth q8 l8q8
call_conc_ab 1 l8q4 3,4,8 X=1 KILN_CUDA_QWG_S16=1
IDS=$(seq -s, 10 41)
for m in l8q4 q06q4; do for v in X=1 KILN_CUDA_QWG_S16=1; do for ch in 5 8; do
  env $v timeout 60 /tmp/k/kiln logits /tmp/s/$m --backend cuda --ids "$IDS" --chunk $ch --out /tmp/lg.npy > /tmp/lg.log 2>&1
  echo "logits $m chunk $ch $v rc=$? $(md5sum < /tmp/lg.npy | cut -c1-12)" >> "$S"
done; done; done
call_conc_ab 1 q06q4 3,4,8 X=1 KILN_CUDA_QWG_S16=1
for v in X=1 KILN_CUDA_QWG_S16=1; do for t in test_cuda_parity test_cuda_hybrid; do
  env $v timeout 120 /tmp/k/$t > /tmp/$t.log 2>&1; echo "$t $v rc=$? $(tail -1 /tmp/$t.log)" >> $S
  grep -i fail /tmp/$t.log | grep -v kiln-tiny | head -5 >> $S
done; done
call_conc_ab 2 l8q4 3,4,8 X=1 KILN_CUDA_QWG_S16=1
call_wait l8q8
call_conc_ab 1 l8q8 4,8 X=1 KILN_CUDA_QWG_S16=1
echo "A/B done at $(el) s" >> $S
KILN_CUDA_GRAPH=0 KILN_CUDA_GEMV_TC_TRACE=/tmp/gt.txt timeout 60 /tmp/k/kiln bench /tmp/s/l8q4 --backend cuda --prompt-tokens 2048 \
  --gen-tokens 3 --runs 1 > /dev/null 2>&1
python3 bench/cuda/gemv_tc_trace.py /tmp/gt.txt > $OUT/trace.txt 2>&1
tail -30 $OUT/trace.txt >> $S
echo "done at $(el) s" >> $S
cat $S
