#!/bin/bash
# prewait_ab.sh — the decode attention's first K/V tile before griddepcontrol.wait (session 18):
# KILN_CUDA_ATTN_PREWAIT=0 (default: loaded after the wait), =1 (register loads before it: the racy form of
# sessions 12-16), =2 (prefetched into L2 before it, loaded after). (1) test_x16_decode's un-synced chain
# REPS times per setting (the race showed as 3-6 failing runs of 24 with =1); (2) batch-1 decode A/B on
# the synth checkpoints, interleaved, 2048-token prompt + 128 generated.
#   run: bash bench/cuda/prewait_ab.sh PKG/kiln-cuda.tar.xz   (carry: the package's folder)
P=${1:?package}; OUT=${OUT:?set by the run tool}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
mkdir -p /tmp/k /tmp/s && tar xJf "$P" -C /tmp/k && export LD_LIBRARY_PATH=/tmp/k/lib
S=$OUT/summary.txt
preset() { case $1 in l8*) echo llama-3-8b;; q06*) echo qwen3-0.6b;; esac; }
dtype() { echo "${1#l8}" | sed 's/^q06//'; }
MODELS=${MODELS:-"q06bf16 l8bf16 l8q4"}
for m in $MODELS; do ( /tmp/k/kiln synth --preset $(preset $m) --dtype $(dtype $m) --out /tmp/s/$m > /dev/null 2>&1; touch /tmp/s/$m.done ) & done
for v in ${TEST_SETTINGS:-2 1 0}; do
  f=0
  for i in $(seq ${REPS:-24}); do
    KILN_CUDA_ATTN_PREWAIT=$v KILN_CUDA_TEST_X16_ONLY=decode timeout 60 /tmp/k/test_cuda_kernels > /tmp/x16_${v}_${i}.log 2>&1 || { f=$((f+1)); grep -m2 FAIL /tmp/x16_${v}_${i}.log >> /tmp/x16fail_${v}.txt; }
  done
  echo "test_x16_decode (un-synced chain) KILN_CUDA_ATTN_PREWAIT=$v: $f of ${REPS:-24} runs failed (at $(el) s)" >> $S
  head -4 /tmp/x16fail_${v}.txt >> $S 2>/dev/null
done
/tmp/k/kiln-cuda-probe 2>/dev/null | grep -E '"copy"|"read"' >> $S
for m in $MODELS; do while [ ! -f /tmp/s/$m.done ]; do sleep 1; done; done
echo "checkpoints at $(el) s" >> $S
for r in 1 2; do for m in $MODELS; do for v in ${BENCH_SETTINGS:-0 2}; do
  o=$(KILN_CUDA_ATTN_PREWAIT=$v /tmp/k/kiln bench /tmp/s/$m --backend cuda --prompt-tokens 2048 --gen-tokens 128 --runs 2 --json 2>/dev/null)
  echo "$m PREWAIT=$v round $r: $(echo "$o" | grep -o '"decode_tok_s": [0-9.]*') $(echo "$o" | grep -o '"weight_bytes": [0-9]*')" >> $S
done; done; done
echo "done at $(el) s" >> $S
cat $S
