#!/bin/bash
# call_s26c.sh — session 26, call 3 (call 2 again on the revised kernel: the chunk loop in three copies picked once per warp, no spills): the 4-bit wgmma conversion with one PRMT (0x64 under each code byte) + one AND
# instead of PRMT + AND + OR, and at group ≥ 64 the f16 slab's factors loaded once a chunk (matmul_wgmma.cu; the same
# f16 values: bitwise). test_qwg / the multi launch (bitwise v2), logits md5 of prefill chunks of 16 / 64 tokens
# (the wgmma path) old vs new, the QWG bench old vs new, llama-3-8b / qwen3-0.6b q4 through the engine at c = 1, 8, 64
# alternating old and new, and the new kernel's SASS (spill location).
#   run: bash bench/cuda/call_s26c.sh PKG   (PACK_BINS="kiln kiln-old test_cuda_kernels test_cuda_kernels-old")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
call_synth q4 l8q4 q06q4
call_t1 qwg KILN_CUDA_TEST_QWG_ONLY=1
call_t1 qwgm KILN_CUDA_TEST_QWG_MULTI_ONLY=1
for b in test_cuda_kernels-old test_cuda_kernels test_cuda_kernels-old test_cuda_kernels; do
  KILN_CUDA_TEST_QWG_BENCH=1 timeout 120 /tmp/k/$b 2>&1 | grep "qwg bench" | grep "v8 mc1 hslab1 probe=0" | sed "s/^/$b /" >> $OUT/qwgbench.txt
done
echo "tests + qwg bench done at $(el) s" >> "$S"
while [ ! -f /tmp/s/l8q4.done ] || [ ! -f /tmp/s/q06q4.done ]; do sleep 1; done
IDS=$(seq -s, 10 73)
for m in /tmp/s/l8q4 /tmp/s/q06q4 tests/fixtures/models/llama-tiny-mlx-q4 tests/fixtures/models/qwen3-tiny-mlx-mixed; do
  for ch in 16 64; do
    for b in kiln-old kiln; do
      timeout 60 /tmp/k/$b logits $m --backend cuda --ids "$IDS" --chunk $ch --out /tmp/lg.npy > /tmp/lg.log 2>&1
      echo "logits ${m##*/} chunk $ch $b rc=$? $(md5sum < /tmp/lg.npy | cut -c1-12)" >> "$S"
    done
  done
done
echo "logits done at $(el) s" >> "$S"
call_conc l8q4 kiln-old kiln kiln-old kiln
call_conc q06q4 kiln-old kiln kiln-old kiln
echo "conc done at $(el) s" >> "$S"
if command -v cuobjdump > /dev/null; then
  for f in '_Z10wgm_kernelILi4ELi64ELi1ELi0EEvPfPKhPKfi7dweightiiiii' '_Z16wgm_multi_kernelILi4ELi64ELi1EEvPKhPKfi8wg_slots'; do
    cuobjdump -sass -fun "$f" /tmp/k/kiln | awk '/Function :/,0' > $OUT/sass_${f:4:12}.txt 2>&1
  done
fi
echo "all done at $(el) s" >> "$S"
cat $S
