#!/bin/bash
# call_s28c.sh — session 28, call 3: the 64-token 4-bit/8-bit matmuls' fixed costs that ncu showed (call 2):
# wg_store's 1/2^e loads hoisted out of the per-token branch (one L2 round trip, not sixteen), the slab's group
# stride padded (no 4-way bank conflicts in the row setup's stores), the f16-slab test from extremes kept by the
# row setup (no second pass over the slab), the rewrite four groups at a time. All bitwise by construction.
# kiln-base / test_cuda_kernels-base = c291234; kiln / test_cuda_kernels = this tree.
#   run: bash bench/cuda/call_s28c.sh PKG   (PACK_BINS="kiln kiln-base test_cuda_kernels test_cuda_kernels-base")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
call_synth q8 l8q8
call_t1 qwg KILN_CUDA_TEST_QWG_ONLY=1
call_t1 qwgm KILN_CUDA_TEST_QWG_MULTI_ONLY=1
call_t1 qwghs0 KILN_CUDA_TEST_QWG_ONLY=1 KILN_CUDA_QWG_HSLAB=0
call_qwgbench test_cuda_kernels-base test_cuda_kernels test_cuda_kernels-base test_cuda_kernels
while [ ! -f /tmp/s/l8q4.done ] || [ ! -f /tmp/s/q06q4.done ] || [ ! -f /tmp/s/l8q8.done ]; do sleep 1; done
echo "synth done at $(el) s" >> "$S"
call_logits_chunks "/tmp/s/l8q4 /tmp/s/q06q4 /tmp/s/l8q8" "16 64" kiln-base kiln
for i in 1 2; do
  call_conc128 l8q4 kiln-base X=1 "--max-batch 128 --kv-cache-gb 16"
  call_conc128 l8q4 kiln X=1 "--max-batch 128 --kv-cache-gb 16"
done
call_conc128 q06q4 kiln-base X=1 "--max-batch 128 --kv-cache-gb 16"
call_conc128 q06q4 kiln X=1 "--max-batch 128 --kv-cache-gb 16"
call_conc128 l8q8 kiln-base X=1 "--max-batch 128 --kv-cache-gb 16"
call_conc128 l8q8 kiln X=1 "--max-batch 128 --kv-cache-gb 16"
echo "conc done at $(el) s" >> "$S"
QWG_BENCH_REPS=1 KILN_CUDA_TEST_QWG_BENCH=1 timeout 200 ncu --set full --import-source no --kernel-name-base demangled \
  -k "regex:wgm_kernel<\\(int\\)4, \\(int\\)64, \\(int\\)1, \\(int\\)0" --launch-skip 8 --launch-count 1 -o /tmp/r8 /tmp/k/test_cuda_kernels > /tmp/ncu8.log 2>&1
ncu -i /tmp/r8.ncu-rep --page details --print-details all | grep -E "Duration|SM Frequency|Issue Slots Busy|No Eligible|Pipe Tensor Cycles" >> "$S"
ncu -i /tmp/r8.ncu-rep --page source --csv --print-source sass > /tmp/src8.csv 2>&1
xz -9 -c /tmp/src8.csv > $OUT/src_gate.csv.xz
echo "all done at $(el) s" >> "$S"
cat "$S" $OUT/bench.txt $OUT/qwgbench.txt
