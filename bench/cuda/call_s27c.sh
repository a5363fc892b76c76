#!/bin/bash
# call_s27c.sh — session 27, call 3: PDL on the 64-token matmul's chain (x prep → v8 matmul → split sums;
# KILN_CUDA_QWG_PDL, default 1): test_qwg / multi and test_cuda_parity on, test_qwg off; kiln logits md5 with it on
# and off (bitwise); the QWG bench on/off; the issue table's c=64 protocol alternating off / on (llama-3-8b q4) and
# once for qwen3-0.6b q4 each way.
#   run: bash bench/cuda/call_s27c.sh PKG   (PACK_BINS="kiln test_cuda_kernels test_cuda_parity")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
call_t1 qwg KILN_CUDA_TEST_QWG_ONLY=1
call_t1 qwgm KILN_CUDA_TEST_QWG_MULTI_ONLY=1
call_t1 qwg_nopdl KILN_CUDA_TEST_QWG_ONLY=1 KILN_CUDA_QWG_PDL=0
call_tbin test_cuda_parity
for r in 1 0; do
  KILN_CUDA_QWG_PDL=$r KILN_CUDA_TEST_QWG_BENCH=1 timeout 120 /tmp/k/test_cuda_kernels 2>&1 | grep "qwg bench" | grep "v8 mc1 hslab1 probe=0" | sed "s/^/pdl$r /" >> $OUT/qwgbench.txt
done
while [ ! -f /tmp/s/l8q4.done ] || [ ! -f /tmp/s/q06q4.done ]; do sleep 1; done
echo "synth done at $(el) s" >> "$S"
call_logits_chunks "/tmp/s/l8q4 /tmp/s/q06q4" "16 64" kiln
for m in /tmp/s/l8q4 /tmp/s/q06q4; do for ch in 16 64; do
  KILN_CUDA_QWG_PDL=0 timeout 60 /tmp/k/kiln logits $m --backend cuda --ids "$(seq -s, 10 73)" --chunk $ch --out /tmp/lg.npy > /tmp/lg.log 2>&1
  echo "logits ${m##*/} chunk $ch PDL=0 rc=$? $(md5sum < /tmp/lg.npy | cut -c1-12)" >> "$S"
done; done
for r in 0 1 0 1; do call_conc128 l8q4 kiln KILN_CUDA_QWG_PDL=$r "--max-batch 128 --kv-cache-gb 16"; done
for r in 0 1; do call_conc128 q06q4 kiln KILN_CUDA_QWG_PDL=$r "--max-batch 128 --kv-cache-gb 16"; done
echo "all done at $(el) s" >> "$S"
cat "$S" $OUT/bench.txt
