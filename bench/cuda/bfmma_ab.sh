#!/bin/bash
# bfmma_ab.sh — one device call for matmul_bfmma (helper-81, session 13; the patch it was written for is on main since ff9f91e):
#   build HEAD (ccache), bench/cuda/pack.sh, then run: bash bench/cuda/bfmma_ab.sh PKG/kiln-cuda.tar.xz
#   (carry the package's folder; ~130 s of command + the cold start). Results in $OUT: summary.txt, conc.jsonl, ncu.tsv, tk.log
# A = KILN_CUDA_BFMMA=0 (cuBLASLt), B = default (64-row blocks), C = KILN_CUDA_BFMMA_ROWS=128
# QRUNS / NCURUNS / L8RUNS: which of A B C run (defaults "B A C B A C" / "B C A" / "B A C"; NCURUNS="" skips ncu)
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
P=${1:?usage: bfmma_ab.sh PKG/kiln-cuda.tar.xz (or - with KDIR=an unpacked package, e.g. after combined.sh)}
KD=${KDIR:-/tmp/k}
mkdir -p $KD /tmp/s && { [ "$P" = - ] || tar xJf $P -C $KD; } && export LD_LIBRARY_PATH=${KLIB:-$KD/lib}
S=$OUT/summary.txt
K=$KD/kiln
syn() { [ -f /tmp/s/$1/config.json ] || $K synth "${@:2}" --out /tmp/s/$1 > /tmp/s/syn-$1.log 2>&1; } # kept from combined.sh
( syn l8bf16 --preset llama-3-8b --dtype bf16; touch /tmp/s/l8.done ) &
syn q06bf16 --arch qwen3 --preset qwen3-0.6b --dtype bf16
syn q06l2 --arch qwen3 --preset qwen3-0.6b --dtype bf16 --layers 2
echo "synth at $(el)" >> $S
envof() { case $1 in A) echo KILN_CUDA_BFMMA=0;; B) echo KILN_NOOP=1;; C) echo KILN_CUDA_BFMMA_ROWS=128;; esac; }
# 1. the new kernel's tests, both block shapes
timeout ${TKT:-100} env KILN_CUDA_TEST_BFMMA_ONLY=1 $KD/test_cuda_kernels > /tmp/tk.log 2>&1; echo "tk rc=$? $(tail -1 /tmp/tk.log) at $(el)" >> $S
grep -i "fail" /tmp/tk.log | head -20 >> $S
timeout ${TKQ:-60} env KILN_CUDA_TEST_BFMMA_ONLY=quick KILN_CUDA_BFMMA_ROWS=128 $KD/test_cuda_kernels > /tmp/tk2.log 2>&1; echo "tk rows128 rc=$? $(tail -1 /tmp/tk2.log) at $(el)" >> $S
grep -i "fail" /tmp/tk2.log | head -20 >> $S
# 2. concurrency A/B/C, qwen3-0.6b bf16
C="--backend cuda --concurrency 1,64,1 --prompt-tokens 128 --gen-tokens 128 --max-batch 128 --kv-cache-gb 16 --json"
for v in ${QRUNS:-B A C B A C}; do
  echo "{\"run\": \"$v q06bf16\"}" >> $OUT/conc.jsonl
  timeout 60 env $(envof $v) KILN_CUDA_STEP_STATS=64 $K bench /tmp/s/q06bf16 $C >> $OUT/conc.jsonl 2> /tmp/conc.err
  grep "steps of 64" /tmp/conc.err | tail -1 | sed "s/^/$v: /" >> $S
  echo "conc $v at $(el)" >> $S
done
# 3. ncu per kernel: 2-layer qwen3-0.6b, 64 rows, 3 decode steps (graphs off)
for v in ${NCURUNS-B C A}; do
  timeout 60 env $(envof $v) KILN_CUDA_GRAPH=0 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv \
    $K bench /tmp/s/q06l2 --backend cuda --concurrency 64 --prompt-tokens 8 --gen-tokens 3 --max-batch 64 --kv-cache-gb 1 --warmup-tokens 0 > /tmp/ncu_$v.csv 2>/tmp/ncu_$v.err
  echo "ncu $v rc=$? at $(el)" >> $S
  grep -E '^"' /tmp/ncu_$v.csv | awk -v v=$v -F'","' '{print v "\t" $5 "\t" $9 "\t" $(NF-2) "\t" $NF}' >> $OUT/ncu.tsv
done
# 4. the other tests that reach bf16 matmuls at 3..64 tokens
for t in test_cuda_parity test_cuda_hybrid; do
  timeout 60 $KD/$t > /tmp/$t.log 2>&1; echo "$t rc=$? $(tail -1 /tmp/$t.log) at $(el)" >> $S
  grep -i "fail" /tmp/$t.log | head -10 >> $S
done
# 5. llama-3-8b bf16
while [ ! -f /tmp/s/l8.done ]; do sleep 1; done; echo "l8 synth at $(el)" >> $S
for v in ${L8RUNS:-B A C}; do
  echo "{\"run\": \"$v l8bf16\"}" >> $OUT/conc.jsonl
  timeout 100 env $(envof $v) KILN_CUDA_STEP_STATS=64 $K bench /tmp/s/l8bf16 ${C/1,64,1/1,64} >> $OUT/conc.jsonl 2> /tmp/conc.err
  grep "steps of 64" /tmp/conc.err | tail -1 | sed "s/^/l8 $v: /" >> $S
  echo "l8 conc $v at $(el)" >> $S
done
cp /tmp/tk.log $OUT/tk.log 2>/dev/null
cat $S
