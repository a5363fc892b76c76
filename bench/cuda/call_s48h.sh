#!/bin/bash
# call_s48h.sh — written in session 48, run in session 49 (call 1; the switch then landed as the default,
# KILN_CUDA_QWG_DEFER=0 the A/B — so today X=1 and =1 are the same binary's default twice): bench/cuda/qwg_defer_s48.patch (a one-weight
# 2..64-token MLX matmul leaves its split partials; the add_rms_norm after it sums them in split order — llama's o
# and down at 64 rows lose a wg_reduce_kernel launch and a PDL hop each; KILN_CUDA_QWG_DEFER=1, opt-in; compiled here,
# never run). Build: PATCH=bench/cuda/qwg_defer_s48.patch bash bench/cuda/build_here.sh /work/cb/s26 kiln test_cuda_kernels
# then PACK_BINS="kiln kiln-base test_cuda_kernels" bash bench/cuda/pack.sh /work/cb/s26/b build-lead.
#   1. the QWG subset (it holds the new test_qwg_defer: bitwise x and h, the flush paths), and again under the switch
#      (every QWG check with deferral on where a one-weight matmul meets an add_rms_norm).
#   2. logits md5 of 64 ids in 9-, 33- and 64-token prefill chunks (2..64-token steps), off / on (must be equal).
#   3. the engine at c = 1, 8, 64, off / on, twice (call_conc_ab), llama-3-8b q4 and qwen3-0.6b q4.
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
call_t1 qwg KILN_CUDA_TEST_QWG_ONLY=1
grep "^# qwg defer\|^# wgx" /tmp/t_qwg.log >> "$S"
call_t1 qwg_defer KILN_CUDA_TEST_QWG_ONLY=1 KILN_CUDA_QWG_DEFER=1
call_wait l8q4 q06q4
IDS=$(seq -s, 100 163)
for m in l8q4 q06q4; do
  for ch in 9 33 64; do
    for v in X=1 KILN_CUDA_QWG_DEFER=1; do
      env $v timeout 60 /tmp/k/kiln logits /tmp/s/$m --backend cuda --ids "$IDS" --chunk $ch --out /tmp/a.npy > /dev/null 2>&1
      echo "logits $m chunk $ch $v $(md5sum < /tmp/a.npy | cut -c1-12)" >> "$S"
    done
  done
done
for r in 1 2; do
  call_conc_ab $r l8q4 1,8,64 X=1 KILN_CUDA_QWG_DEFER=1
  call_conc_ab $r q06q4 1,8,64 X=1 KILN_CUDA_QWG_DEFER=1
done
echo "done at $(el) s" >> "$S"
