#!/bin/bash
# call_s28k.sh — for the next session (written in session 28, NOT run: its device budget ran out): the GLU's split sums
# writing the down projection's prepared x — bench/cuda/wgx_glu_s28.patch (on a5fcfce: wg_glu_prep_kernel, clusters of
# 8 blocks a token exchanging their max |v| through DSMEM, opt-in KILN_CUDA_WGX_GLU=1, and test_wgx_glu in the QWG
# subset; compiled with ptxas -v: no spills). Apply, build kiln + test_cuda_kernels, pack with the unpatched kiln as
# kiln-base, then: the tests, logits md5 against kiln-base with the switch on (bitwise expected), and the issue
# protocol's c=64 A/B (call 6 of session 28: the GLU sums 6.5 µs + down's x prep 6.3 µs a llama layer, serialized).
#   run: bash bench/cuda/call_s28k.sh PKG   (PACK_BINS="kiln kiln-base test_cuda_kernels")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
call_t1 qwg KILN_CUDA_TEST_QWG_ONLY=1
while [ ! -f /tmp/s/l8q4.done ] || [ ! -f /tmp/s/q06q4.done ]; do sleep 1; done
for m in l8q4 q06q4; do
  for ch in 13 64; do
    timeout 60 /tmp/k/kiln-base logits /tmp/s/$m --backend cuda --ids "$(seq -s, 10 73)" --chunk $ch --out /tmp/a.npy > /dev/null 2>&1
    KILN_CUDA_WGX_GLU=1 timeout 60 /tmp/k/kiln logits /tmp/s/$m --backend cuda --ids "$(seq -s, 10 73)" --chunk $ch --out /tmp/b.npy > /dev/null 2>&1
    echo "logits $m chunk $ch base $(md5sum < /tmp/a.npy | cut -c1-12) glu $(md5sum < /tmp/b.npy | cut -c1-12)" >> "$S"
  done
done
for i in 1 2; do
  call_conc128 l8q4 kiln X=1 "--max-batch 128 --kv-cache-gb 16"
  call_conc128 l8q4 kiln KILN_CUDA_WGX_GLU=1 "--max-batch 128 --kv-cache-gb 16"
done
cat "$S" $OUT/bench.txt
