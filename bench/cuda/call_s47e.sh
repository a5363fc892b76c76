#!/bin/bash
# call_s47e.sh — session 47: c=2 through the engine, the 2-token tensor-core GEMV (default) against the 16-token bucket
# (KILN_CUDA_GEMV_TC_T=1), with TTFT, ITL, wall and steps: call_s47d's counted and steady rates disagreed for llama-3-8b q4.
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
nvidia-smi --query-gpu=name --format=csv,noheader >> "$S"
conc() { # round model levels
  for v in X=1 KILN_CUDA_GEMV_TC_T=1; do
    env $v /tmp/k/kiln bench /tmp/s/$2 --backend cuda --concurrency $3 --prompt-tokens 128 --gen-tokens 128 \
      --max-batch 128 --kv-cache-gb 16 --json > /tmp/c.json 2>/tmp/c.err
    python3 - "$2 $v r$1" >> $S <<'PY' || tail -3 /tmp/c.err >> $S
import json,sys
d=json.load(open('/tmp/c.json'))
print(sys.argv[1], ' '.join('c=%d %.1f (%.1f) ttft %.1f itl %.2f wall %.3f steps %d' % (x['concurrency'], x['decode_tok_s'], x['steady_decode_tok_s'], x['ttft_mean_ms'], x['itl_mean_ms'], x['wall_s'], x['steps']) for x in d))
PY
  done; }
call_wait l8q4 q06q4
for r in 1 2 3; do conc $r l8q4 1,2; conc $r q06q4 2; done
echo "done at $(el) s" >> $S
cat $S
