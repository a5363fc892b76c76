#!/bin/bash
# call_s29f.sh — session 29, call 6: the opt-in KILN_CUDA_QWG_MULTI=2 (split sums in thread-block clusters, no reduce
# launch; slower in session 27) again on the current tree (session 28's stores and wgx since): logits md5 against the
# default at prefill chunks 13 and 64, then the c=64 protocol alternating.
#   run: bash bench/cuda/call_s29f.sh PKG   (the call_s29e package: kiln-pre0 is this tree's default build)
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
ln -sf /tmp/k/kiln-pre0 /tmp/k/kiln
call_synth q4 l8q4
while [ ! -f /tmp/s/l8q4.done ]; do sleep 1; done
for ch in 13 64; do
  for v in X=1 KILN_CUDA_QWG_MULTI=2; do
    env $v timeout 60 /tmp/k/kiln logits /tmp/s/l8q4 --backend cuda --ids "$(seq -s, 10 73)" --chunk $ch --out /tmp/a.npy > /dev/null 2>&1
    echo "logits l8q4 chunk $ch $v $(md5sum < /tmp/a.npy | cut -c1-12)" >> "$S"
  done
done
for i in 1 2; do
  call_conc128 l8q4 kiln X=1 "--max-batch 128 --kv-cache-gb 16"
  call_conc128 l8q4 kiln KILN_CUDA_QWG_MULTI=2 "--max-batch 128 --kv-cache-gb 16"
done
echo "all done at $(el) s" >> "$S"
cat "$S" $OUT/bench.txt
