#!/bin/bash
# call_s28i.sh — session 28, call 9: x prepared for the 64-token 4/8-bit matmul by the norm before it (wgx.cuh:
# rms_norm / add_rms_norm write the matmul's f16 tiles and 1/2^e where the matmul left a hint; the matmul skips
# wg_xprep_kernel). kiln-s28 = 85af0e6 (calls 3 and 5's tree), kiln = this tree. test_wgx_norm (in the QWG subset),
# the parity fixtures, logits md5 against kiln-s28 at prefill chunks 13/16/33/64, then the engine A/B.
#   run: bash bench/cuda/call_s28i.sh PKG   (PACK_BINS="kiln kiln-s28 test_cuda_kernels test_cuda_parity")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
call_t1 qwg KILN_CUDA_TEST_QWG_ONLY=1
call_tbin test_cuda_parity
while [ ! -f /tmp/s/l8q4.done ] || [ ! -f /tmp/s/q06q4.done ]; do sleep 1; done
echo "synth done at $(el) s" >> "$S"
call_logits_chunks "/tmp/s/l8q4 /tmp/s/q06q4" "13 16 33 64" kiln-s28 kiln
for i in 1 2; do
  call_conc128 l8q4 kiln-s28 X=1 "--max-batch 128 --kv-cache-gb 16"
  call_conc128 l8q4 kiln X=1 "--max-batch 128 --kv-cache-gb 16"
done
call_conc128 l8q4 kiln KILN_CUDA_WGX=0 "--max-batch 128 --kv-cache-gb 16"
call_conc128 q06q4 kiln-s28 X=1 "--max-batch 128 --kv-cache-gb 16"
call_conc128 q06q4 kiln X=1 "--max-batch 128 --kv-cache-gb 16"
echo "all done at $(el) s" >> "$S"
cat "$S" $OUT/bench.txt
