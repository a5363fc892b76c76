#!/bin/bash
# combined.sh — one device call for a whole tree: the CUDA tests at default settings, the
# ceilings, batch-1 decode/prefill and engine concurrency, all in one run on the GPU machine.
# Tracked (the `run` tool carries the working tree, not git-ignored folders), so a call is
#   run: bash bench/cuda/combined.sh PKG/kiln-cuda.tar.xz     (carry: the package's folder)
# with PKG from bench/cuda/pack.sh. Results go to $OUT (at most 8 files come back):
# summary.txt, tests.log, probe.jsonl, bench.jsonl, conc.jsonl, peer.jsonl, bench.err; summary.txt ends with
# bench/cuda/issue_table.py's table (decode against the copy probe, prefill against the layer mix, c=64 / c=1).
#   MODELS="l8q4 l8bf16"      batch-1 checkpoints (l8 = llama-3-8b, q06 = qwen3-0.6b, q352 = qwen3.5-2b,
#                             g31 = gemma3-1b, moe4 = qwen3.5-moe-35b at 4 layers; + bf16/q8/q4)
#   CONC="l8q4:1,64,1"        concurrency runs (model:levels[:extra,args]; a repeated c=1 shows run-to-run
#                             spread; e.g. "q06bf16:64:--step-tokens,2048,KILN_X=1" adds --step-tokens 2048
#                             and runs that level with KILN_X=1 in its environment)
#   CONC_ENV="KILN_CUDA_STEP_STATS=64"  an environment for the concurrency runs (space-separated VAR=V)
#   VARIANTS="KILN_X=0:l8bf16" extra batch-1 runs with an environment (VAR=V[,VAR=V]:model); the
#                             `KILN_CUDA_STEP_STATS` lines a run prints go to summary.txt;
#                             KILN_BIN=NAME runs the package's binary NAME instead of kiln (an A/B build)
#   TESTS="test_cuda_kernels test_cuda_parity test_cuda_hybrid test_cuda_sample" (those in the package)
#   STRESS=N                  test_cuda_hybrid N more times while test_cuda_kernels runs (a load-dependent
#                             failure was seen once that way; summary.txt counts the failures)
#   PEER="l8bf16"             bench/cuda/peer_torch.py (transformers on the same checkpoint) after the benches
# The tests run at once in two chains while the checkpoints are written (test_cuda_kernels ~150 s
# on the H200 alone; the rest ~10 s), then the probe and the benches run alone on the GPU.
P=${1:?usage: combined.sh PKG.tar.xz}
OUT=${OUT:?set by the run tool}
MODELS=${MODELS-"l8q4 l8bf16"}   # set but empty: none
CONC=${CONC-"l8q4:1,64,1"}
VARIANTS=${VARIANTS:-}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
[ -d "$P" ] && P=$P/kiln-cuda.tar.xz # the package's folder given: its one file
mkdir -p /tmp/k /tmp/s && tar xJf "$P" -C /tmp/k && export LD_LIBRARY_PATH=/tmp/k/lib
TESTS=${TESTS:-$(cd /tmp/k && ls test_cuda_* 2>/dev/null | tr '\n' ' ')}
nvidia-smi --query-gpu=name,memory.total --format=csv > "$OUT/summary.txt" 2>&1
# checkpoint names: l8… llama-3-8b, q06… qwen3-0.6b, q352… qwen3.5-2b, g31… gemma3-1b, moe4… the
# qwen3.5-moe-35b preset cut to 4 layers (session 23's hybrid / MoE / Gemma prefill lines); then the dtype
preset() { case $1 in l8*) echo llama-3-8b;; q06*) echo qwen3-0.6b;; q352*) echo qwen3.5-2b;; g31*) echo gemma3-1b;; moe4*) echo qwen3.5-moe-35b;; esac; }
dtype() { echo "$1" | sed 's/^l8//; s/^q06//; s/^q352//; s/^g31//; s/^moe4//'; }
layers() { case $1 in moe4*) echo "--layers 4";; esac; }
need=""   # every checkpoint some run reads, once
for m in $MODELS $(for v in $VARIANTS; do echo "${v##*:}"; done) $(for c in $CONC; do echo "${c%%:*}"; done) ${PEER:-}; do
  case " $need " in *" $m "*) ;; *) need="$need $m";; esac
done
for m in $need; do
  [ -f /tmp/s/$m.done ] && continue  # written earlier in this call (a caller's script)
  ( /tmp/k/kiln synth --preset "$(preset $m)" --dtype "$(dtype $m)" $(layers $m) --out /tmp/s/$m > /tmp/s/synth-$m.log 2>&1; touch /tmp/s/$m.done ) &
done
runt() { local t=$1 s=$(date +%s); /tmp/k/$t > /tmp/$t.log 2>&1; local rc=$?
  echo "$t rc=$rc $(( $(date +%s) - s )) s (at $(el) s): $(tail -1 /tmp/$t.log)" >> "$OUT/summary.txt"
  { echo "=== $t rc=$rc"; grep -i -E "fail|error" /tmp/$t.log | head -40; tail -3 /tmp/$t.log; } > "/tmp/tests_$t.log"; }
pids=""
for t in $TESTS; do [ "$t" = test_cuda_kernels ] && { runt $t & pids="$pids $!"; }; done
( for t in $TESTS; do [ "$t" != test_cuda_kernels ] && runt $t; done ) & pids="$pids $!"
if [ "${STRESS:-0}" -gt 0 ]; then
  ( f=0; for i in $(seq "$STRESS"); do /tmp/k/test_cuda_hybrid > /tmp/stress_$i.log 2>&1 || { f=$((f+1)); grep -i fail /tmp/stress_$i.log | head -5 >> /tmp/stress_fail.log; }; done
    echo "stress: test_cuda_hybrid $STRESS runs beside test_cuda_kernels, $f failed (at $(el) s)" >> "$OUT/summary.txt"
    cat /tmp/stress_fail.log >> "$OUT/summary.txt" 2>/dev/null ) & pids="$pids $!"
fi
wait $pids
cat /tmp/tests_*.log > "$OUT/tests.log" 2>/dev/null
/tmp/k/kiln-cuda-probe > "$OUT/probe.jsonl" 2>&1; echo "probe at $(el) s" >> "$OUT/summary.txt"
for m in $need; do while [ ! -f /tmp/s/$m.done ]; do sleep 1; done; done
echo "checkpoints ready at $(el) s" >> "$OUT/summary.txt"
bench1() { # env (VAR=V,VAR=V or -) model
  echo "{\"run\": \"$1 $2\"}" >> "$OUT/bench.jsonl"
  local e="" bin=kiln; [ "$1" != - ] && e=$(echo "$1" | tr , ' ')
  case " $e " in *" KILN_BIN="*) bin=$(echo "$e" | tr ' ' '\n' | sed -n 's/^KILN_BIN=//p');; esac  # another binary of the package
  env $e /tmp/k/$bin bench /tmp/s/$2 --backend cuda --prompt-tokens 2048 --gen-tokens 128 --runs 2 --json >> "$OUT/bench.jsonl" 2> /tmp/bench1.err
  echo "bench $1 $2 at $(el) s" >> "$OUT/summary.txt"
  grep "steps of" /tmp/bench1.err >> "$OUT/summary.txt"; grep -v "steps of" /tmp/bench1.err >> "$OUT/bench.err"; }
for m in $MODELS; do bench1 - $m; done
for v in $VARIANTS; do bench1 "${v%:*}" "${v##*:}"; done
for c in $CONC; do
  rest=${c#*:}; lv=${rest%%:*}; xa=""; xe=""; [ "$rest" != "$lv" ] && for w in $(echo "${rest#*:}" | tr , ' '); do
    case $w in -*) xa="$xa $w";; *=*) xe="$xe $w";; *) xa="$xa $w";; esac; done
  echo "{\"model\": \"${c%%:*}\", \"extra\": \"$xe$xa\"}" >> "$OUT/conc.jsonl"
  env ${CONC_ENV:-} $xe /tmp/k/kiln bench /tmp/s/${c%%:*} --backend cuda --concurrency $lv --prompt-tokens 128 --gen-tokens 128 --max-batch 128 --kv-cache-gb 16 $xa --json >> "$OUT/conc.jsonl" 2> /tmp/conc1.err
  echo "conc $c at $(el) s" >> "$OUT/summary.txt"
  grep "steps of" /tmp/conc1.err >> "$OUT/summary.txt"; grep -v "steps of" /tmp/conc1.err >> "$OUT/bench.err"
done
for m in ${PEER:-}; do
  timeout ${PEER_TIMEOUT:-240} python3 bench/cuda/peer_torch.py /tmp/s/$m --modes ${PEER_MODES:-eager} >> "$OUT/peer.jsonl" 2>> /tmp/peer.err
  echo "peer $m rc=$? at $(el) s" >> "$OUT/summary.txt"; tail -c 1500 /tmp/peer.err >> "$OUT/bench.err" 2>/dev/null
done
tail -c 2000 "$OUT/bench.err" > /tmp/be 2>/dev/null && mv /tmp/be "$OUT/bench.err"
python3 bench/cuda/issue_table.py "$OUT" >> "$OUT/summary.txt" 2>&1 || true  # the shares against the probe, computed
cat "$OUT/summary.txt"
