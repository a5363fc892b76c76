#!/bin/bash
# call_s28e.sh — session 28, call 5: the batch-1 q4/q8 GEMV (gemv_tc_kernel, MODE 0) loading four of a thread's
# float4s of x before storing any (call 4's source counters: one L2 round trip per float4 after the PDL wait,
# ~28 % of a launch's samples). kiln-base = c291234, kiln = this tree (also has call 3's wgm change).
#   run: bash bench/cuda/call_s28e.sh PKG   (PACK_BINS="kiln kiln-base test_cuda_kernels")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
call_synth q8 l8q8
call_t1 gemv KILN_CUDA_TEST_GEMV_ONLY=1
call_t1 qwg KILN_CUDA_TEST_QWG_ONLY=1
while [ ! -f /tmp/s/l8q4.done ] || [ ! -f /tmp/s/q06q4.done ] || [ ! -f /tmp/s/l8q8.done ]; do sleep 1; done
echo "synth done at $(el) s" >> "$S"
IDS=$(seq -s, 100 123)
for m in l8q4 q06q4 l8q8; do call_logits /tmp/s/$m "kiln-base X=1" "kiln X=1"; done
for i in 1 2 3; do
  for m in l8q4 l8q8 q06q4; do
    call_b1 $m kiln-base X=1
    call_b1 $m kiln X=1
  done
done
echo "b1 done at $(el) s" >> "$S"
( /tmp/k/kiln synth --preset llama-3-8b --dtype q4 --layers 2 --out /tmp/s/l2q4 > /dev/null 2>&1 )
KILN_CUDA_GRAPH=0 timeout 150 ncu --set full --import-source no -k "regex:gemv_tc_kernel" --launch-skip 11 --launch-count 1 -o /tmp/r_tc \
  /tmp/k/kiln bench /tmp/s/l2q4 --backend cuda --prompt-tokens 2048 --gen-tokens 4 --runs 1 > /tmp/ncu_tc.log 2>&1
ncu -i /tmp/r_tc.ncu-rep --page details --print-details all | grep -E "^  [a-z_]|Duration|Issue Slots Busy|No Eligible|DRAM Throughput" >> "$S"
ncu -i /tmp/r_tc.ncu-rep --page source --csv --print-source sass > /tmp/src_tc.csv 2>&1
xz -9 -c /tmp/src_tc.csv > $OUT/src_tc.csv.xz
echo "all done at $(el) s" >> "$S"
cat "$S" $OUT/bench.txt
