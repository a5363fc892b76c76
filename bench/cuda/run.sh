#!/bin/bash
# run.sh — the CUDA benchmarks of bench/cuda/RESULTS.md, in one go on the GPU machine.
#
#   bench/cuda/run.sh BUILD_DIR OUT_DIR [MODELS...]
#
# 1. kiln-cuda-probe: device copy/read bandwidth and cuBLASLt bf16 GEMM rates (ceilings)
# 2. for each MODEL (preset:dtype, default qwen3-0.6b and llama-3-8b at bf16, q8, q4):
#    kiln synth writes a random-weight checkpoint to $SYNTH_DIR (default /tmp/kiln-synth),
#    kiln bench --backend cuda measures prefill over 2048 tokens and batch-1 decode over
#    128 tokens (best of 2 runs), then the checkpoint is deleted (disk is 64 GB there).
#    PRESYNTH=1: every checkpoint is written first, in parallel (disk permitting).
#    VARIANTS="name[:VAR=V,VAR=V] ...": run the bench once per variant with those
#    environment variables (default: one variant "default"); results go to
#    OUT_DIR/bench-NAME.jsonl.
#    CONCURRENCY=1,8,32,64,128: also aggregate decode through the engine at those levels
#    (kiln bench --concurrency, CONC_PROMPT/CONC_GEN tokens per request, default 128/128,
#    --max-batch 128) for the models in CONC_MODELS (default: all), once per variant in
#    CONC_VARIANTS (same syntax as VARIANTS); results in OUT_DIR/conc[-NAME].jsonl.
# Output: OUT_DIR/probe.jsonl, OUT_DIR/bench[-NAME].jsonl, OUT_DIR/log.txt
set -u
B=${1:?build dir}; O=${2:?out dir}; shift 2
MODELS=${*:-"qwen3-0.6b:bf16 qwen3-0.6b:q8 qwen3-0.6b:q4 llama-3-8b:q4 llama-3-8b:q8 llama-3-8b:bf16"}
SYN=${SYNTH_DIR:-/tmp/kiln-synth}
PROMPT=${PROMPT_TOKENS:-2048}; GEN=${GEN_TOKENS:-128}
VARIANTS=${VARIANTS:-default}
mkdir -p "$O" "$SYN"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv >> "$O/log.txt" 2>&1
[ -n "${SKIP_PROBE:-}" ] || "$B/kiln-cuda-probe" > "$O/probe.jsonl" 2>> "$O/log.txt"
synth() { # preset dtype dir (KEEP_SYNTH=1: an existing dir is used as is, and kept afterwards)
  [ -n "${KEEP_SYNTH:-}" ] && [ -d "$3" ] && return
  rm -rf "$3"
  "$B/kiln" synth --preset "$1" --dtype "$2" --out "$3" >> "$O/log.txt" 2>&1 || { echo "synth $1:$2 failed" >> "$O/log.txt"; rm -rf "$3"; }
}
if [ -n "${PRESYNTH:-}" ]; then
  for m in $MODELS; do synth "${m%%:*}" "${m##*:}" "$SYN/${m%%:*}-${m##*:}" & done
  wait
fi
for m in $MODELS; do
  preset=${m%%:*}; dt=${m##*:}; dir="$SYN/$preset-$dt"
  t0=$(date +%s)
  [ -n "${PRESYNTH:-}" ] || synth "$preset" "$dt" "$dir"
  [ -d "$dir" ] || continue
  t1=$(date +%s)
  echo "synth $m: $((t1 - t0)) s" >> "$O/log.txt"
  for v in $VARIANTS; do
    name=${v%%:*}; envs=""; [ "$v" != "$name" ] && envs=${v#*:}
    out="$O/bench.jsonl"; [ "$VARIANTS" != default ] && out="$O/bench-$name.jsonl"
    env $(echo "$envs" | tr ',' ' ') "$B/kiln" bench "$dir" --backend cuda --prompt-tokens "$PROMPT" --gen-tokens "$GEN" --runs 2 --json >> "$out" 2>> "$O/log.txt" \
      || echo "bench $m ($name) failed" >> "$O/log.txt"
    echo "bench $m ($name): $(( $(date +%s) - t1 )) s" >> "$O/log.txt"
  done
  if [ -n "${CONCURRENCY:-}" ] && { [ -z "${CONC_MODELS:-}" ] || [[ " $CONC_MODELS " == *" $m "* ]]; }; then
    for v in ${CONC_VARIANTS:-default}; do
      name=${v%%:*}; envs=""; [ "$v" != "$name" ] && envs=${v#*:}
      out="$O/conc.jsonl"; [ "${CONC_VARIANTS:-default}" != default ] && out="$O/conc-$name.jsonl"
      t2=$(date +%s)
      echo "{\"model\": \"$m\", \"variant\": \"$name\"}" >> "$out"
      env $(echo "$envs" | tr ',' ' ') "$B/kiln" bench "$dir" --backend cuda --concurrency "$CONCURRENCY" --prompt-tokens "${CONC_PROMPT:-128}" \
        --gen-tokens "${CONC_GEN:-128}" --max-batch 128 --kv-cache-gb "${CONC_KV_GB:-16}" --json >> "$out" 2>> "$O/log.txt" \
        || echo "concurrency $m ($name) failed" >> "$O/log.txt"
      echo "concurrency $m ($name): $(( $(date +%s) - t2 )) s" >> "$O/log.txt"
    done
  fi
  [ -n "${KEEP_SYNTH:-}" ] || rm -rf "$dir"
done
