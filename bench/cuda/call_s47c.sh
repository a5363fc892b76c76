#!/bin/bash
# call_s47c.sh — session 47: the 16-token bucket for 3..8-token steps as the default (KILN_CUDA_QWG_S16, main's
# form: matmul_glu declines where the tensor-core GEMV takes gate/up at 2 tokens, the norms prepare x only past its
# tokens). In the order of what it must bring back: the qwg subset (default and =0), logits md5 at prefill chunks
# 2/3/5/8 both ways (they must match: the same bits per token) beside the whole suite, then the engine at c=2..8 both ways.
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
nvidia-smi --query-gpu=name --format=csv,noheader >> "$S"
call_t1 qwg KILN_CUDA_TEST_QWG_ONLY=1
call_t1 qwg-s16off KILN_CUDA_TEST_QWG_ONLY=1 KILN_CUDA_QWG_S16=0
call_t1 gemv KILN_CUDA_TEST_GEMV_ONLY=1
echo "tests at $(el) s" >> $S
( timeout 330 /tmp/k/test_cuda_kernels > /tmp/tk.log 2>&1; echo "test_cuda_kernels rc=$? $(tail -1 /tmp/tk.log)" > /tmp/tk.sum; grep -i fail /tmp/tk.log | grep -v kiln-tiny | head -8 >> /tmp/tk.sum ) &
TK=$!
call_wait l8q4 q06q4
IDS=$(seq -s, 10 41)
for m in l8q4 q06q4; do for ch in 2 3 5 8; do for v in X=1 KILN_CUDA_QWG_S16=0; do
  env $v timeout 60 /tmp/k/kiln logits /tmp/s/$m --backend cuda --ids "$IDS" --chunk $ch --out /tmp/lg.npy > /tmp/lg.log 2>&1
  echo "logits $m chunk $ch $v rc=$? $(md5sum < /tmp/lg.npy | cut -c1-12)" >> "$S"
done; done; done
call_tbin test_cuda_parity test_cuda_hybrid test_cuda_shapes test_cuda_sample
wait $TK; cat /tmp/tk.sum >> $S
echo "suite at $(el) s" >> $S
call_conc_ab 1 l8q4 2,3,4,6,8 X=1 KILN_CUDA_QWG_S16=0
call_conc_ab 1 q06q4 3,4,8 X=1 KILN_CUDA_QWG_S16=0
echo "A/B at $(el) s" >> $S
echo "done at $(el) s" >> $S
cat $S
