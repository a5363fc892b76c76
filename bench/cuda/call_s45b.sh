#!/bin/bash
# call_s45b.sh — session 45: call 1 found c=8 (llama-3-8b q4) 980 → 1724 tok/s steady with KILN_CUDA_QWG=2 (the wgmma
# kernel from 2 tokens instead of qmma_kernel). Here: every CUDA test under KILN_CUDA_QWG=2, then the engine at
# c = 2, 3, 4, 6, 8 (128 + 128) on four checkpoints, the default (qmma at 2..8) and QWG=2 alternating, two rounds —
# the data for where the wgmma kernel should start. Package: the default seven binaries of main.
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 q06q4 l8q4
call_synth q8 q06q8 l8q8
nvidia-smi --query-gpu=name --format=csv,noheader >> "$S"
( KILN_CUDA_QWG=2 timeout 300 /tmp/k/test_cuda_kernels > /tmp/tk.log 2>&1; echo "test_cuda_kernels QWG=2 rc=$? $(tail -1 /tmp/tk.log) at $(el) s" >> $S; grep -i fail /tmp/tk.log | head -20 >> $S ) &
for t in test_cuda_parity test_cuda_hybrid test_cuda_sample test_cuda_shapes; do
  KILN_CUDA_QWG=2 timeout 300 /tmp/k/$t > /tmp/$t.log 2>&1; echo "$t QWG=2 rc=$? $(tail -1 /tmp/$t.log)" >> $S
  grep -i fail /tmp/$t.log | grep -v kiln-tiny | head -8 >> $S
done
wait
for m in l8q4 q06q4 l8q8 q06q8; do while [ ! -f /tmp/s/$m.done ]; do sleep 1; done; done
echo "checkpoints at $(el) s" >> $S
for r in 1 2; do for m in l8q4 l8q8 q06q4 q06q8; do for v in X=1 KILN_CUDA_QWG=2; do
  env $v /tmp/k/kiln bench /tmp/s/$m --backend cuda --concurrency 2,3,4,6,8 --prompt-tokens 128 --gen-tokens 128 \
    --max-batch 128 --kv-cache-gb 16 --json > /tmp/c.json 2>/dev/null
  python3 - "$m $v r$r" >> $S <<'PY'
import json,sys
d=json.load(open('/tmp/c.json'))
print(sys.argv[1], ' '.join('c=%d %.1f (%.1f)' % (x['concurrency'], x['decode_tok_s'], x['steady_decode_tok_s']) for x in d))
PY
done; done; done
echo "done at $(el) s" >> $S
cat $S
