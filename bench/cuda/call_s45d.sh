#!/bin/bash
# call_s45d.sh — session 45, call_s45c.sh cut to the device time left after six refused starts: main with
# KILN_CUDA_QWG's default at 2 and the opt-in KILN_CUDA_QWG_S16=1. While the checkpoints are written: the test
# subsets the change touches at the default (MoE — the per-expert check's bound —, test_qwg with the multi launch at
# T = 2 / 7, slices, 128-token tile, wgx), test_cuda_parity and test_cuda_hybrid; then the same under S16 (with the
# norms' prepared x at T = 2 / 5 / 8). Then combined.sh's issue table without its tests (llama-3-8b q4 at c = 1, 8,
# 32, 64, 128), `kiln logits` md5 at prefill chunks 2 / 8 with and without S16, the engine at c = 2, 8 alternating.
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 q06q4 l8q4
call_synth bf16 q06bf16 l8bf16
nvidia-smi --query-gpu=name --format=csv,noheader >> "$S"
call_t1 moe KILN_CUDA_TEST_MOE_ONLY=1
call_t1 qwg KILN_CUDA_TEST_QWG_ONLY=1
call_t1 qwg-s16 KILN_CUDA_TEST_QWG_ONLY=1 KILN_CUDA_QWG_S16=1
for v in X=1 KILN_CUDA_QWG_S16=1; do for t in test_cuda_parity test_cuda_hybrid; do
  env $v timeout 120 /tmp/k/$t > /tmp/$t.log 2>&1; echo "$t $v rc=$? $(tail -1 /tmp/$t.log)" >> $S
  grep -i fail /tmp/$t.log | grep -v kiln-tiny | head -5 >> $S
done; done
echo "tests done at $(el) s" >> $S
TESTS=" " MODELS="l8q4 l8bf16 q06q4 q06bf16" CONC="l8q4:1,8,32,64,128" bash bench/cuda/combined.sh "$P" > /dev/null
echo "combined done at $(el) s" >> $S
IDS=$(seq -s, 10 41)
for m in l8q4 q06q4; do for ch in 2 8; do for v in X=1 KILN_CUDA_QWG_S16=1; do
  env $v timeout 60 /tmp/k/kiln logits /tmp/s/$m --backend cuda --ids "$IDS" --chunk $ch --out /tmp/lg.npy > /tmp/lg.log 2>&1
  echo "logits $m chunk $ch $v rc=$? $(md5sum < /tmp/lg.npy | cut -c1-12)" >> "$S"
done; done; done
for r in 1 2; do for m in l8q4 q06q4; do for v in X=1 KILN_CUDA_QWG_S16=1; do
  env $v /tmp/k/kiln bench /tmp/s/$m --backend cuda --concurrency 2,8 --prompt-tokens 128 --gen-tokens 128 \
    --max-batch 128 --kv-cache-gb 16 --json > /tmp/c.json 2>/dev/null
  python3 - "$m $v r$r" >> $S <<'PY'
import json,sys
d=json.load(open('/tmp/c.json'))
print(sys.argv[1], ' '.join('c=%d %.1f (%.1f)' % (x['concurrency'], x['decode_tok_s'], x['steady_decode_tok_s']) for x in d))
PY
done; done; done
echo "done at $(el) s" >> $S
cat $S; cat $OUT/summary.txt
