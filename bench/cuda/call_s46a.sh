#!/bin/bash
# call_s46a.sh — session 46: 2..4-token steps on the tensor-core GEMV (matmul_gemv_tc.cu gemv_tcm_kernel,
# KILN_CUDA_GEMV_TC_T=4) against matmul_wgmma.cu (KILN_CUDA_GEMV_TC_T=1, session 45's path) in one call; every
# variable set explicitly, so it measures the same whichever default the package was built with. In the
# order of what it must bring back (each result lands in pre.txt as it comes): the GEMV tests (test_gemv_tcm: every
# token bitwise its own one-token launch, 1e-4 of ref_matmul), the engine at c = 1..4 (and 8) on llama-3-8b q4 both
# ways, `kiln logits` md5 per prefill chunk both ways, the qwg / MoE subsets, the whole suite, more A/B, the table.
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
nvidia-smi --query-gpu=name --format=csv,noheader >> "$S"
call_t1 gemv KILN_CUDA_TEST_GEMV_ONLY=1 KILN_CUDA_GEMV_TC_T=4
grep "gemv tcm" /tmp/t_gemv.log >> "$S"
echo "gemv tests at $(el) s" >> $S
conc() { # round model levels
  for v in KILN_CUDA_GEMV_TC_T=4 KILN_CUDA_GEMV_TC_T=1; do
    env $v /tmp/k/kiln bench /tmp/s/$2 --backend cuda --concurrency $3 --prompt-tokens 128 --gen-tokens 128 \
      --max-batch 128 --kv-cache-gb 16 --json > /tmp/c.json 2>/tmp/c.err
    python3 - "$2 $v r$1" >> $S <<'PY' || tail -3 /tmp/c.err >> $S
import json,sys
d=json.load(open('/tmp/c.json'))
print(sys.argv[1], ' '.join('c=%d %.1f (%.1f)' % (x['concurrency'], x['decode_tok_s'], x['steady_decode_tok_s']) for x in d))
PY
  done; }
for m in l8q4 q06q4; do while [ ! -f /tmp/s/$m.done ]; do sleep 1; done; done
call_synth q8 l8q8 q06q8
conc 1 l8q4 1,2,3,4,8
IDS=$(seq -s, 10 41)
for m in l8q4; do for v in KILN_CUDA_GEMV_TC_T=4 KILN_CUDA_GEMV_TC_T=1; do for ch in 1 3; do
  env $v timeout 60 /tmp/k/kiln logits /tmp/s/$m --backend cuda --ids "$IDS" --chunk $ch --out /tmp/lg.npy > /tmp/lg.log 2>&1
  echo "logits $m chunk $ch $v rc=$? $(md5sum < /tmp/lg.npy | cut -c1-12)" >> "$S"
done; done; done
echo "A/B 1 at $(el) s" >> $S
call_t1 qwg KILN_CUDA_TEST_QWG_ONLY=1 KILN_CUDA_GEMV_TC_T=4
call_t1 moe KILN_CUDA_TEST_MOE_ONLY=1 KILN_CUDA_GEMV_TC_T=4
call_t1 gemv-off KILN_CUDA_TEST_GEMV_ONLY=1 KILN_CUDA_GEMV_TC_T=1
for m in l8q8 q06q8; do while [ ! -f /tmp/s/$m.done ]; do sleep 1; done; done
conc 1 q06q4 1,2,3,4,8; conc 1 l8q8 2,4; conc 1 q06q8 2,4
echo "A/B 2 at $(el) s" >> $S
export KILN_CUDA_GEMV_TC_T=4
call_tbin test_cuda_kernels test_cuda_parity test_cuda_hybrid test_cuda_shapes
echo "suite at $(el) s" >> $S
conc 2 l8q4 1,2,3,4
echo "done at $(el) s" >> $S
cat $S
