#!/bin/bash
# call_s28b.sh — session 28, call 2: where the 64-token 4-bit matmul (wgm_kernel<4, 64, 1, 0>, llama-3-8b's gate
# shape 14336 x 4096 from the QWG bench, one launch) spends its time: ncu --set full, the details page (stall
# reasons, pipes, memory) and the per-SASS-instruction source counters (warp stall samples by instruction).
#   run: bash bench/cuda/call_s28b.sh PKG
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
for sh in 8 16; do # the gate shape's first v8 launch (4 v8 launches a shape), then down's (shape 3: 12) / lm_head (16)
  QWG_BENCH_REPS=1 KILN_CUDA_TEST_QWG_BENCH=1 timeout 200 ncu --set full --import-source no --kernel-name-base demangled \
    -k "regex:wgm_kernel<\\(int\\)4, \\(int\\)64, \\(int\\)1, \\(int\\)0" --launch-skip $sh --launch-count 1 -o /tmp/r$sh /tmp/k/test_cuda_kernels > /tmp/ncu$sh.log 2>&1
  echo "ncu $sh rc=$? at $(el) s" >> "$S"; tail -3 /tmp/ncu$sh.log >> "$S"
done
ncu -i /tmp/r8.ncu-rep --page details --print-details all > $OUT/details_gate.txt 2>&1
ncu -i /tmp/r16.ncu-rep --page details --print-details all > $OUT/details_lmhead.txt 2>&1
ncu -i /tmp/r8.ncu-rep --page source --csv --print-source sass > /tmp/src8.csv 2>&1
xz -9 -c /tmp/src8.csv > $OUT/src_gate.csv.xz
ls -la $OUT >> "$S"
cat "$S"
