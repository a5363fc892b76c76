#!/usr/bin/env bash
# Interleaved A/B of two builds on kiln synth checkpoints (this VM is shared: runs
# alternate so both builds see the same load; the best of R rounds counts).
# Usage: bench/cpu/ab.sh BUILD_A BUILD_B SYNTH_DIR ROUNDS names...
set -euo pipefail
A=$1; B=$2; S=$3; R=$4; shift 4
echo "probe A: $("$A/kiln-probe" --json)   uptime: $(uptime)"
for n in "$@"; do
  for r in $(seq "$R"); do
    for b in "$A" "$B"; do
      j=$("$b/kiln" bench "$S/$n" --prompt-tokens 512 --gen-tokens 32 --json)
      python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(sys.argv[2], sys.argv[3], "decode %.2f tok/s prefill %.1f tok/s" % (d["decode_tok_s"], d["prefill_tok_s"]))' "$j" "$n" "$b"
    done
  done
done
echo "probe B: $("$B/kiln-probe" --json)   uptime: $(uptime)"
