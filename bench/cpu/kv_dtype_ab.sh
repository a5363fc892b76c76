#!/bin/bash
# qwen3-0.6b q4 decode at 512+64: K/V dtype and block size vs the 16-token context, alternated, probe in process.
# Usage: bench/cpu/kv_dtype_ab.sh [CHECKPOINT]   (default /work/synth/qwen3-0.6b-q4; run from anywhere)
M=$(realpath "${1:-/work/synth/qwen3-0.6b-q4}")
cd "$(dirname "$0")/../.."
prio() { setsid -w bash -c 'echo "$0" > /proc/self/autogroup && exec "$@"' -15 "$@"; }
for r in 1 2; do
  for v in "16 f16 16" "512 f16 16" "512 f32 16" "512 bf16 16" "512 f16 32" "512 f16 64"; do
    set -- $v
    j=$(prio build/kiln bench "$M" --prompt-tokens $1 --gen-tokens 64 --runs 2 --probe --kv-dtype $2 --block-size $3 --json 2>/dev/null)
    echo "ctx=$1 kv=$2 bs=$3 $(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(" | ".join("%.2f tok/s probe %.1f/%.1f ratio %.0f%%" % (x["decode_tok_s"], x["probe_before_gb_s"], x["probe_after_gb_s"], 100*x["ratio"]) for x in d["probe_runs"]), "kv_bytes", d.get("kv_bytes_per_token"))' "$j")"
  done
done
uptime
