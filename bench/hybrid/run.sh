#!/usr/bin/env bash
# Benchmarks of the kiln synth hybrid presets (bench/hybrid/RESULTS.md). Usage:
#   bench/hybrid/run.sh path/to/kiln [synth dir, default /work/synth] > log
# Writes the checkpoints first if they are missing (under /tmp/kiln-synth.lock). Each
# command runs alone under /tmp/kiln-bench.lock (other benchmarks may run between two
# commands, never during one), with `uptime` and the memory-bandwidth probe (kiln-probe,
# next to kiln) before it, since the machine is shared: quote decode against
# weight bytes / probe bandwidth measured in the same run. qwen3-0.6b q4 is the dense
# model of similar weight bytes to compare with.
set -u
K=${1:?usage: run.sh path/to/kiln [synth-dir]}
S=${2:-/work/synth}
PROBE=$(dirname "$K")/kiln-probe
run() {
  echo "### $*"
  flock /tmp/kiln-bench.lock sh -c 'echo "load before: $(uptime)"; "$0" 2>&1; "$@" 2>&1 | grep -v " info: "; echo "load after:  $(uptime)"' "$PROBE" "$@"
  echo
}
for pd in qwen3.5-0.8b:bf16 qwen3.5-0.8b:q4 qwen3.5-2b:bf16 qwen3.5-2b:q4 gemma3-1b:bf16 gemma3-1b:q4 qwen3-0.6b:q4; do
  p=${pd%:*}; d=${pd#*:}
  [ -f "$S/$p-$d/config.json" ] || flock /tmp/kiln-synth.lock "$K" synth --preset "$p" --dtype "$d" --out "$S/$p-$d"
done
if [ "${SKIP_THROUGHPUT:-0}" != 1 ]; then
  for m in ${MODELS:-qwen3.5-0.8b-bf16 qwen3.5-0.8b-q4 qwen3.5-2b-bf16 qwen3.5-2b-q4 gemma3-1b-bf16 gemma3-1b-q4 qwen3-0.6b-q4}; do
    run "$K" bench "$S/$m" --prompt-tokens 512 --gen-tokens 64
  done
fi
# Second turn of a ~4k-token conversation: level 1 is the first turn (cold), level 2 a new
# request whose first P tokens are the same (P = 4000: the prefix cache can serve them;
# P = 0: nothing to reuse). Compare level 2's TTFT.
if [ "${SKIP_TTFT:-0}" != 1 ]; then
  for m in ${TTFT_MODELS:-qwen3.5-0.8b-q4 gemma3-1b-q4 qwen3.5-2b-q4}; do
    for P in 4000 0; do
      run "$K" bench "$S/$m" --concurrency 1,1 --prompt-tokens 4096 --gen-tokens 8 --shared-prefix $P
    done
  done
fi
