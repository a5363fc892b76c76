#!/usr/bin/env bash
# Benchmarks of the kiln synth hybrid presets (bench/hybrid/RESULTS.md). Usage:
#   bench/hybrid/run.sh path/to/kiln [synth dir, default /work/synth] > log
# Writes the checkpoints first if they are missing. Each command is echoed with `uptime`
# before and after it, since the machine is shared.
set -u
K=${1:?usage: run.sh path/to/kiln [synth-dir]}
S=${2:-/work/synth}
run() { echo "### $*"; echo "load before: $(uptime)"; "$@" 2>&1 | grep -v ' info: '; echo "load after:  $(uptime)"; echo; }
for p in qwen3.5-0.8b qwen3.5-2b gemma3-1b; do
  for d in bf16 q4; do
    [ -f "$S/$p-$d/config.json" ] || "$K" synth --preset "$p" --dtype "$d" --out "$S/$p-$d"
  done
done
if [ "${SKIP_THROUGHPUT:-0}" != 1 ]; then
  for p in qwen3.5-0.8b qwen3.5-2b gemma3-1b; do
    for d in bf16 q4; do
      run "$K" bench "$S/$p-$d" --prompt-tokens 512 --gen-tokens 64
    done
  done
fi
# Second turn of a ~4k-token conversation: level 1 is the first turn (cold), level 2 a new
# request whose first P tokens are the same (P = 4000: the prefix cache can serve them;
# P = 0: nothing to reuse). Compare level 2's TTFT.
for m in ${TTFT_MODELS:-qwen3.5-0.8b-q4 gemma3-1b-q4 qwen3.5-2b-q4}; do
  for P in 4000 0; do
    run "$K" bench "$S/$m" --concurrency 1,1 --prompt-tokens 4096 --gen-tokens 8 --shared-prefix $P
  done
done
