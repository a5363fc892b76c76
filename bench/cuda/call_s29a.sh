#!/bin/bash
# call_s29a.sh — session 29, call 1: session 28's unrun wgx_glu_s28.patch (the GLU's split sums writing down's
# prepared x, opt-in KILN_CUDA_WGX_GLU=1) — the whole test_cuda_kernels of the patched tree (the review commit
# a5fcfce's host changes had not run on the device either), logits md5 against the unpatched kiln-base with the
# switch on, then the issue protocol's c=64 A/B (base, patched off, patched on; twice).
#   run: bash bench/cuda/call_s29a.sh PKG   (PACK_BINS="kiln kiln-base test_cuda_kernels")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
timeout 400 /tmp/k/test_cuda_kernels > /tmp/tk.log 2>&1
echo "test_cuda_kernels rc=$? $(tail -1 /tmp/tk.log) (at $(el) s)" >> "$S"
grep -i "fail" /tmp/tk.log | head -10 >> "$S"; grep -i "wgx" /tmp/tk.log | head -6 >> "$S"
while [ ! -f /tmp/s/l8q4.done ] || [ ! -f /tmp/s/q06q4.done ]; do sleep 1; done
for m in l8q4 q06q4; do
  for ch in 13 64; do
    timeout 60 /tmp/k/kiln-base logits /tmp/s/$m --backend cuda --ids "$(seq -s, 10 73)" --chunk $ch --out /tmp/a.npy > /dev/null 2>&1
    KILN_CUDA_WGX_GLU=1 timeout 60 /tmp/k/kiln logits /tmp/s/$m --backend cuda --ids "$(seq -s, 10 73)" --chunk $ch --out /tmp/b.npy > /dev/null 2>&1
    echo "logits $m chunk $ch base $(md5sum < /tmp/a.npy | cut -c1-12) glu $(md5sum < /tmp/b.npy | cut -c1-12)" >> "$S"
  done
done
echo "md5 done at $(el) s" >> "$S"
for i in 1 2; do
  call_conc128 l8q4 kiln-base X=1 "--max-batch 128 --kv-cache-gb 16"
  call_conc128 l8q4 kiln KILN_CUDA_WGX_GLU=1 "--max-batch 128 --kv-cache-gb 16"
done
call_conc128 q06q4 kiln-base X=1 "--max-batch 128 --kv-cache-gb 16"
call_conc128 q06q4 kiln KILN_CUDA_WGX_GLU=1 "--max-batch 128 --kv-cache-gb 16"
echo "all done at $(el) s" >> "$S"
cat "$S" $OUT/bench.txt
