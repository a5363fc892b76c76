#!/bin/bash
# mode_ab.sh — an A/B of kiln binaries on a VM whose memory bandwidth has modes (session 61's Zen 4 VM reads 27–34
# GB/s in most minutes, 51–62 in windows of minutes): each binary's batch-1 decode runs, every run between two
# probes (kiln bench --probe), in rotation; mode_ab.py then groups the runs by the mode their probes read
# (hi: both probes over 45 GB/s, lo: both under 40, mix: one of each) and compares the variants within a mode.
#   ROUNDS=6 RUNS=8 bash bench/cpu/mode_ab.sh MODEL_DIR NAME=BIN NAME=BIN... > ab.out; python3 bench/cpu/mode_ab.py ab.out
# Odd rounds run the variants in the given order, even rounds reversed (drift in time falls on both alike).
# (ab_probe.sh does two build folders against one probe a pair, at 512 + 64 tokens; this takes any number of
# binaries and reads each run against its own probes, which a VM with windows needs.)
set -u
m=$1; shift
vs=("$@")
for ((r = 1; r <= ${ROUNDS:-6}; r++)); do
  order=("${vs[@]}")
  if ((r % 2 == 0)); then order=(); for ((i = ${#vs[@]} - 1; i >= 0; i--)); do order+=("${vs[$i]}"); done; fi
  for v in "${order[@]}"; do
    "${v#*=}" bench "$m" --prompt-tokens "${PROMPT:-16}" --gen-tokens "${GEN:-48}" --runs "${RUNS:-8}" --probe --json 2>/dev/null |
      tail -1 | python3 -c "
import json, sys
for x in json.loads(sys.stdin.read())['probe_runs']:
    print('${v%%=*} %.1f %.1f %.1f %.3f' % (x['decode_tok_s'], x['probe_before_gb_s'], x['probe_after_gb_s'], x['ratio']))"
  done
done
