#!/bin/bash
# hybrid_stress.sh — test_cuda_hybrid's qwen3_next-tiny ragged check, many times, alone and under
# CPU and GPU load, to pin down a failure seen now and then (only under load, only the first
# "alone" schedule). Run on the GPU machine from the repo root with the package unpacked:
#   bash bench/cuda/hybrid_stress.sh /tmp/k N        (results to $OUT/stress.txt)
K=${1:?package dir}; N=${2:-10}; O=${OUT:-/tmp}/stress.txt
export LD_LIBRARY_PATH=$K/lib KILN_TEST_HYBRID_ONLY=${FIX:-qwen3_next-tiny} KILN_TEST_HYBRID_REPEAT=${REPEAT:-3}
loop() { # label, then env
  local label=$1; shift; local f=0 s=$(date +%s)
  for i in $(seq "$N"); do
    env "$@" "$K/test_cuda_hybrid" > /tmp/hs.log 2>&1 || { f=$((f+1)); grep FAIL /tmp/hs.log | head -3 | cut -c1-300 >> "$O"; }
  done
  echo "$label: $f of $N runs failed ($(( $(date +%s) - s )) s)" >> "$O"
}
cpuload() { for i in $(seq 16); do ( while :; do :; done ) & done; }
loop "alone" X=1
cpuload; loop "16 busy CPU loops" X=1; kill $(jobs -p) 2>/dev/null; wait 2>/dev/null
( while :; do "$K/test_cuda_hybrid" > /dev/null 2>&1; done ) & G=$!
loop "beside a looping test_cuda_hybrid (GPU+CPU)" X=1
loop "same, CUDA_LAUNCH_BLOCKING=1" CUDA_LAUNCH_BLOCKING=1
loop "same, KILN_CUDA_GRAPH=0" KILN_CUDA_GRAPH=0
kill $G 2>/dev/null; pkill -f test_cuda_hybrid; wait 2>/dev/null
cpuload; loop "16 busy CPU loops, CUDA_LAUNCH_BLOCKING=1" CUDA_LAUNCH_BLOCKING=1; kill $(jobs -p) 2>/dev/null; wait 2>/dev/null
cat "$O"
