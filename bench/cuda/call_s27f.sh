#!/bin/bash
# call_s27f.sh — session 27, call 5: calls 3-4 saw the 64-token path slower than call 2 with PDL off (QWG bench
# q/o 20.8 → 28.1 µs) — the same binary's .cg loads (x prep, split sums, the 2^-e factors in the matmul's stores)?
# This tree reads those with plain loads (no __restrict__, so no ld.global.nc under PDL). kiln-base = 0d096fc (no
# PDL, nc loads), kiln = this tree: test_qwg / multi, logits md5 against kiln-base (bitwise), and the issue
# table's c=64 protocol alternating base / new / new with KILN_CUDA_QWG_PDL=0.
#   run: bash bench/cuda/call_s27f.sh PKG   (PACK_BINS="kiln kiln-base test_cuda_kernels")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
call_t1 qwg KILN_CUDA_TEST_QWG_ONLY=1
call_t1 qwgm KILN_CUDA_TEST_QWG_MULTI_ONLY=1
KILN_CUDA_TEST_QWG_BENCH=1 timeout 120 /tmp/k/test_cuda_kernels 2>&1 | grep "qwg bench" | grep "v8 mc1 hslab1 probe=0" | cut -c1-100 >> "$S"
KILN_CUDA_QWG_PDL=0 KILN_CUDA_TEST_QWG_BENCH=1 timeout 120 /tmp/k/test_cuda_kernels 2>&1 | grep "qwg bench" | grep "v8 mc1 hslab1 probe=0" | cut -c1-100 | sed "s/^/PDL=0 /" >> "$S"
while [ ! -f /tmp/s/l8q4.done ] || [ ! -f /tmp/s/q06q4.done ]; do sleep 1; done
echo "synth done at $(el) s" >> "$S"
call_logits_chunks "/tmp/s/l8q4 /tmp/s/q06q4" "16 64" kiln-base kiln
for i in 1 2; do
  call_conc128 l8q4 kiln-base X=1 "--max-batch 128 --kv-cache-gb 16"
  call_conc128 l8q4 kiln X=1 "--max-batch 128 --kv-cache-gb 16"
  call_conc128 l8q4 kiln KILN_CUDA_QWG_PDL=0 "--max-batch 128 --kv-cache-gb 16"
done
call_conc128 q06q4 kiln-base X=1 "--max-batch 128 --kv-cache-gb 16"
call_conc128 q06q4 kiln X=1 "--max-batch 128 --kv-cache-gb 16"
echo "all done at $(el) s" >> "$S"
cat "$S" $OUT/bench.txt
