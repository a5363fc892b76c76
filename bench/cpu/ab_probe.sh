#!/usr/bin/env bash
# Interleaved A/B of two builds on kiln synth checkpoints with a probe before each pair
# (this VM is shared and its ceilings move with the load: each pair is read against its own
# probe). Each run: kiln bench --prompt-tokens 512 --gen-tokens 64; the order within a pair
# alternates (A B, then B A). Extra environment for one side: ENV_A / ENV_B (e.g. KILN_AMX=off).
# Usage: bench/cpu/ab_probe.sh BUILD_A BUILD_B SYNTH_DIR ROUNDS names...
# KILN_BENCH_PRIO=N: each run in a session of its own with autogroup nice N (see bench/run_cpu.sh).
set -euo pipefail
prio() { if [ -n "${KILN_BENCH_PRIO:-}" ]; then setsid -w bash -c 'echo "$0" > /proc/self/autogroup && exec "$@"' "$KILN_BENCH_PRIO" "$@"; else "$@"; fi; }
A=$1; B=$2; S=$3; R=$4; shift 4
one() { # build label env model
  local j
  j=$(prio env $3 "$1/kiln" bench "$S/$4" --prompt-tokens 512 --gen-tokens 64 --json)
  python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print("  %-18s %-28s decode %6.2f tok/s  prefill %6.1f tok/s" % (sys.argv[2], sys.argv[3], d["decode_tok_s"], d["prefill_tok_s"]))' "$j" "$4" "$2"
}
for n in "$@"; do
  for r in $(seq "$R"); do
    echo "probe: $(prio "$B/kiln-probe" --json)  load: $(cut -d' ' -f1 /proc/loadavg)"
    if [ $((r % 2)) -eq 1 ]; then one "$A" "A $A ${ENV_A:-}" "${ENV_A:-}" "$n"; one "$B" "B $B ${ENV_B:-}" "${ENV_B:-}" "$n"
    else one "$B" "B $B ${ENV_B:-}" "${ENV_B:-}" "$n"; one "$A" "A $A ${ENV_A:-}" "${ENV_A:-}" "$n"; fi
  done
done
