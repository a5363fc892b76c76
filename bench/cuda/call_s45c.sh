#!/bin/bash
# call_s45c.sh — session 45, main with KILN_CUDA_QWG's default at 2 (the wgmma kernel for every 2..64-token step) and
# the opt-in KILN_CUDA_QWG_S16=1 (2..8 tokens in the 16-token bucket: q/k/v and gate/up in its multi launch, the
# GLU in its reduce, x prepared by the norm). S16 first: its tests (the multi launch at T = 2, 7 against per-weight
# matmuls; test_qwg; test_cuda_parity), `kiln logits` md5 at prefill chunks 2 / 5 / 8 with and without it (it should
# give the same bits), the engine at c = 2, 4, 8 alternating; then combined.sh at the new default: the whole suite
# and the issue table with llama-3-8b q4 at c = 1, 8, 32, 64, 128. Package: the default seven binaries.
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 q06q4 l8q4
call_synth bf16 q06bf16 l8bf16
nvidia-smi --query-gpu=name --format=csv,noheader >> "$S"
call_t1 multi-s16 KILN_CUDA_TEST_QWG_MULTI_ONLY=1 KILN_CUDA_QWG_S16=1
call_t1 qwg-s16 KILN_CUDA_TEST_QWG_ONLY=1 KILN_CUDA_QWG_S16=1
KILN_CUDA_QWG_S16=1 timeout 120 /tmp/k/test_cuda_parity > /tmp/par.log 2>&1; echo "parity S16 rc=$? $(tail -1 /tmp/par.log)" >> $S
grep -i fail /tmp/par.log | grep -v kiln-tiny | head -5 >> $S
for m in l8q4 q06q4; do while [ ! -f /tmp/s/$m.done ]; do sleep 1; done; done
echo "checkpoints at $(el) s" >> $S
IDS=$(seq -s, 10 41)
for m in l8q4 q06q4; do for ch in 2 5 8; do for v in X=1 KILN_CUDA_QWG_S16=1; do
  env $v timeout 60 /tmp/k/kiln logits /tmp/s/$m --backend cuda --ids "$IDS" --chunk $ch --out /tmp/lg.npy > /tmp/lg.log 2>&1
  echo "logits $m chunk $ch $v rc=$? $(md5sum < /tmp/lg.npy | cut -c1-12)" >> "$S"
done; done; done
for r in 1 2; do for m in l8q4 q06q4; do for v in X=1 KILN_CUDA_QWG_S16=1; do
  env $v /tmp/k/kiln bench /tmp/s/$m --backend cuda --concurrency 2,4,8 --prompt-tokens 128 --gen-tokens 128 \
    --max-batch 128 --kv-cache-gb 16 --json > /tmp/c.json 2>/dev/null
  python3 - "$m $v r$r" >> $S <<'PY'
import json,sys
d=json.load(open('/tmp/c.json'))
print(sys.argv[1], ' '.join('c=%d %.1f (%.1f)' % (x['concurrency'], x['decode_tok_s'], x['steady_decode_tok_s']) for x in d))
PY
done; done; done
echo "A/B done at $(el) s" >> $S
MODELS="l8q4 l8bf16 q06q4 q06bf16" CONC="l8q4:1,8,32,64,128" bash bench/cuda/combined.sh "$P" > /dev/null
cat $S; cat $OUT/summary.txt
