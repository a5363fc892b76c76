#!/bin/bash
# logits_ab.sh — are two settings of the CUDA backend bitwise the same on a real-shaped model?
# `kiln logits` of one 300-token prompt (a single prefill step, so every prefill path is taken)
# under each environment, md5 of the float32 logits; equal sums = bitwise equal logits.
#   bash bench/cuda/logits_ab.sh KILN MODEL_DIR "VAR=V,VAR=V" "-" ...   ("-": the defaults)
# Prints one line per variant: md5, variant. (session 18: the fused prefill ops and the GEMMs side by side)
K=${1:?kiln binary}; M=${2:?model dir}; shift 2
ids=$(seq 1 300 | awk '{printf "%s%d", (NR > 1 ? "," : ""), ($1 * 7919) % 128000}')
for v in "$@"; do
  e=""; [ "$v" != - ] && e=$(echo "$v" | tr , ' ')
  env $e "$K" logits "$M" --backend cuda --ids "$ids" --out /tmp/logits_ab.npy > /tmp/logits_ab.log 2>&1 || { echo "FAILED $v: $(tail -2 /tmp/logits_ab.log)"; continue; }
  echo "$(md5sum < /tmp/logits_ab.npy | cut -c1-16) $v"
done
