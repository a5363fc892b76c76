#!/bin/bash
# call_s45d.sh — session 45's last planned call, NOT RUN (seven refused starts spent the device budget); the first
# call of session 46. In the order of what it must bring back (each result lands in pre.txt as it comes): main with
# KILN_CUDA_QWG's default at 2 — the test subsets the change touches (MoE: the per-expert check's bound; test_qwg
# with the multi launch at T = 2 / 7, slices, 128-token tile, wgx) —, then KILN_CUDA_QWG_S16=1 against the default
# (engine at c = 2, 8; `kiln logits` md5 at prefill chunk 8: it should give the same bits; its tests with the norms'
# prepared x at T = 2 / 5 / 8; test_cuda_parity, test_cuda_hybrid), then combined.sh's issue table without its tests.
# Package: the default seven binaries built with bench/cuda/qwg_s16.patch applied (S16 is off unless set, so the
# patched binaries at their defaults are main's).
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
nvidia-smi --query-gpu=name --format=csv,noheader >> "$S"
call_t1 moe KILN_CUDA_TEST_MOE_ONLY=1
call_t1 qwg KILN_CUDA_TEST_QWG_ONLY=1
echo "tests at $(el) s" >> $S
call_synth bf16 l8bf16 q06bf16
conc() { # round model
  for v in X=1 KILN_CUDA_QWG_S16=1; do
    env $v /tmp/k/kiln bench /tmp/s/$2 --backend cuda --concurrency 2,8 --prompt-tokens 128 --gen-tokens 128 \
      --max-batch 128 --kv-cache-gb 16 --json > /tmp/c.json 2>/dev/null
    python3 - "$2 $v r$1" >> $S <<'PY'
import json,sys
d=json.load(open('/tmp/c.json'))
print(sys.argv[1], ' '.join('c=%d %.1f (%.1f)' % (x['concurrency'], x['decode_tok_s'], x['steady_decode_tok_s']) for x in d))
PY
  done; }
for m in l8q4 q06q4; do while [ ! -f /tmp/s/$m.done ]; do sleep 1; done; done
conc 1 l8q4
IDS=$(seq -s, 10 41)
for m in l8q4 q06q4; do for v in X=1 KILN_CUDA_QWG_S16=1; do
  env $v timeout 60 /tmp/k/kiln logits /tmp/s/$m --backend cuda --ids "$IDS" --chunk 8 --out /tmp/lg.npy > /tmp/lg.log 2>&1
  echo "logits $m chunk 8 $v rc=$? $(md5sum < /tmp/lg.npy | cut -c1-12)" >> "$S"
done; done
call_t1 qwg-s16 KILN_CUDA_TEST_QWG_ONLY=1 KILN_CUDA_QWG_S16=1
for v in X=1 KILN_CUDA_QWG_S16=1; do for t in test_cuda_parity test_cuda_hybrid; do
  env $v timeout 120 /tmp/k/$t > /tmp/$t.log 2>&1; echo "$t $v rc=$? $(tail -1 /tmp/$t.log)" >> $S
  grep -i fail /tmp/$t.log | grep -v kiln-tiny | head -5 >> $S
done; done
conc 1 q06q4; conc 2 l8q4; conc 2 q06q4
echo "A/B done at $(el) s" >> $S
TESTS=" " MODELS="l8q4 l8bf16 q06q4 q06bf16" CONC="l8q4:1,8,32,64,128" bash bench/cuda/combined.sh "$P" > /dev/null
echo "done at $(el) s" >> $S
cat $S; cat $OUT/summary.txt
