#!/bin/bash
# call_s47d.sh — session 47: with 3..8-token steps in the 16-token bucket (main since 6d30d82), is the 2-token tensor-core
# GEMV (KILN_CUDA_GEMV_TC_T=2, default) still ahead of that bucket at 2 rows (=1)? Engine 128 + 128 at c=2 (and c=3, 8:
# the spread), q4 and q8, both models, two rounds.
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
call_synth q8 l8q8 q06q8
nvidia-smi --query-gpu=name --format=csv,noheader >> "$S"
conc() { # round model levels
  for v in X=1 KILN_CUDA_GEMV_TC_T=1; do
    env $v /tmp/k/kiln bench /tmp/s/$2 --backend cuda --concurrency $3 --prompt-tokens 128 --gen-tokens 128 \
      --max-batch 128 --kv-cache-gb 16 --json > /tmp/c.json 2>/tmp/c.err
    python3 - "$2 $v r$1" >> $S <<'PY' || tail -3 /tmp/c.err >> $S
import json,sys
d=json.load(open('/tmp/c.json'))
print(sys.argv[1], ' '.join('c=%d %.1f (%.1f)' % (x['concurrency'], x['decode_tok_s'], x['steady_decode_tok_s']) for x in d))
PY
  done; }
call_wait l8q4 q06q4
conc 1 l8q4 2,3
conc 1 q06q4 2,3
call_wait l8q8 q06q8
conc 1 l8q8 2,8
conc 1 q06q8 2,8
conc 2 l8q4 2
conc 2 q06q4 2
echo "done at $(el) s" >> $S
cat $S
