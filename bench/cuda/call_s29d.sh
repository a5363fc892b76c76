#!/bin/bash
# call_s29d.sh — session 29, call 4: the committed prefill change (matmul_dequant.cu: the weight's bound kept per
# weight, x scanned four float4s a thread; the conversion kernel as before). The whole test_cuda_kernels and
# test_cuda_hybrid (dweight_t gained a field: every kernel taking it was rebuilt), logits md5 against kiln-base
# (a5fcfce) at prefill chunks 100 and 2048, prefill tok/s A/B (2048-token prompt), the c=64 A/B.
#   run: bash bench/cuda/call_s29d.sh PKG   (PACK_BINS="kiln kiln-base test_cuda_kernels test_cuda_hybrid")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
call_synth q8 l8q8
timeout 400 /tmp/k/test_cuda_kernels > /tmp/tk.log 2>&1
echo "test_cuda_kernels rc=$? $(tail -1 /tmp/tk.log) (at $(el) s)" >> "$S"
grep -i "fail" /tmp/tk.log | grep -v " 0 failed" | head -10 >> "$S"; grep "qdeq" /tmp/tk.log | head -3 >> "$S"
call_tbin test_cuda_hybrid
while [ ! -f /tmp/s/l8q4.done ] || [ ! -f /tmp/s/l8q8.done ] || [ ! -f /tmp/s/q06q4.done ]; do sleep 1; done
IDS=$(seq -s, 10 2057)
call_md5_ab "l8q4 l8q8 q06q4" "100 2048"
echo "md5 done at $(el) s" >> "$S"
for i in 1 2; do
  for m in l8q4 l8q8 q06q4; do
    for b in kiln-base kiln; do call_prefill $m $b 3; done
  done
done
call_conc128 l8q4 kiln-base X=1 "--max-batch 128 --kv-cache-gb 16"
call_conc128 l8q4 kiln X=1 "--max-batch 128 --kv-cache-gb 16"
echo "all done at $(el) s" >> "$S"
cat "$S" $OUT/bench.txt
