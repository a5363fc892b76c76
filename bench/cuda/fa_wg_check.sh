#!/bin/bash
# fa_wg_check.sh — helper-h98 (session 16), its call 2 (bench/cuda/RESULTS.md): attention_wgmma.cu with P packed after the pending P·V's wait (default on: 3 warpgroups,
# 4 producer warps): the single-rounding tests in every setting with details, quick tests under DBG/FIX, the attention
# prefill tests, parity, ncu stall reasons + per-kernel times (qwen3-0.6b, llama-3-8b shapes), prefill A/B.
# Run from the repository root on the device with PKG=<package dir from bench/cuda/pack.sh>; writes under $OUT.
OUT=${OUT:?}; T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S="$OUT/summary.txt"
mkdir -p /tmp/k /tmp/s && tar xJf ${PKG:-build-h98}/kiln-cuda.tar.xz -C /tmp/k && export LD_LIBRARY_PATH=/tmp/k/lib
K=/tmp/k
echo "unpacked at $(el) s" >> "$S"
( $K/kiln synth --arch qwen3 --preset qwen3-0.6b --dtype bf16 --layers 2 --out /tmp/s/q2 > /tmp/s/synth.log 2>&1; echo "synth q2 rc=$? at $(el) s" >> "$S"
  $K/kiln synth --arch qwen3 --preset qwen3-0.6b --dtype bf16 --out /tmp/s/q >> /tmp/s/synth.log 2>&1; echo "synth q rc=$? at $(el) s" >> "$S"
  $K/kiln synth --preset llama-3-8b --dtype bf16 --layers 2 --out /tmp/s/l2 >> /tmp/s/synth.log 2>&1; echo "synth l2 rc=$? at $(el) s" >> "$S"; touch /tmp/s/done ) &
W() { IFS=: read n p w <<< "$1"; echo "KILN_CUDA_FA_WG=$n KILN_CUDA_FA_WG_PIPE=$p KILN_CUDA_FA_WG_PW=$w"; }
( KILN_CUDA_TEST_ATTN_ONLY=single timeout 110 $K/test_cuda_kernels > /tmp/t_single.log 2>&1; echo "ATTN_ONLY=single rc=$? at $(el) s: $(tail -1 /tmp/t_single.log)" >> "$S" ) &
pids="$!"
( timeout 80 $K/test_cuda_parity > /tmp/par.log 2>&1; echo "parity rc=$? at $(el) s: $(tail -1 /tmp/par.log)" >> "$S" ) &
pids="$pids $!"
for c in 3:0:4:0:0 2:1:4:0:0 2:1:2:0:0 2:0:4:0:0 2:0:4:3:0 2:1:4:0:7 3:0:4:0:7 1:1:4:0:0 2:0:4:0:7; do
  IFS=: read n p w d f <<< "$c"
  ( env $(W $n:$p:$w) KILN_CUDA_FA_WG_DBG=$d KILN_CUDA_FA_WG_FIX=$f KILN_CUDA_TEST_ATTN_ONLY=wg timeout 60 $K/test_cuda_kernels > /tmp/q_$c.log 2>&1
    echo "quick NWG:PIPE:PW:DBG:FIX=$c rc=$? at $(el) s: $(grep '^# attention quick' /tmp/q_$c.log | cut -c1-120) | $(tail -1 /tmp/q_$c.log)" >> "$S" ) &
  pids="$pids $!"
done
( KILN_CUDA_TEST_ATTN_ONLY=mma timeout 150 $K/test_cuda_kernels > /tmp/t_mma.log 2>&1; echo "ATTN_ONLY=mma rc=$? at $(el) s: $(tail -1 /tmp/t_mma.log)" >> "$S" ) &
pmma=$!
wait $pids
echo "quick/single/parity done at $(el) s" >> "$S"
timeout 30 $K/kiln-cuda-probe > "$OUT/probe.jsonl" 2>&1; echo "probe at $(el) s" >> "$S"
while [ ! -f /tmp/s/done ]; do sleep 1; done
NCU=$(which ncu 2>/dev/null || echo /usr/local/cuda/bin/ncu)
BQ2="$K/kiln bench /tmp/s/q2 --backend cuda --prompt-tokens 2048 --gen-tokens 1 --runs 1"
timeout 40 $NCU --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis -k regex:attn_wg -c 1 $BQ2 > /tmp/ncu_stall.txt 2>&1
grep -v "^==PROF==\|^model\|^prefill\|^decode\|^run " /tmp/ncu_stall.txt | head -300 > "$OUT/ncu_stall.txt"
echo "ncu stall at $(el) s" >> "$S"
for v in 0:1:4 3:0:4 2:1:4 2:0:4 3:0:2; do
  [ $(el) -gt 165 ] && break
  env $(W $v) timeout 30 $NCU --clock-control none --metrics gpu__time_duration.sum --csv -k regex:"attn_" $BQ2 > /tmp/ncu_t.csv 2> /tmp/ncu.err
  echo "ncu q2 $v rc=$? at $(el) s" >> "$S"
  grep -E "attn_(mma|wg)_kernel" /tmp/ncu_t.csv | sed "s/^/qwen $v,/" | cut -c1-400 >> "$OUT/ncu.csv"
done
for v in 0:1:4 3:0:4 2:1:4; do
  [ $(el) -gt 175 ] && break
  env $(W $v) timeout 30 $NCU --clock-control none --metrics gpu__time_duration.sum --csv -k regex:"attn_" $K/kiln bench /tmp/s/l2 --backend cuda --prompt-tokens 2048 --gen-tokens 1 --runs 1 > /tmp/ncu_t.csv 2> /tmp/ncu.err
  echo "ncu l2 $v rc=$? at $(el) s" >> "$S"
  grep -E "attn_(mma|wg)_kernel" /tmp/ncu_t.csv | sed "s/^/llama $v,/" | cut -c1-400 >> "$OUT/ncu.csv"
done
B() { echo "{\"run\": \"$1 P=$2\"}" >> "$OUT/bench.jsonl"
  env $(W $1) timeout 30 $K/kiln bench /tmp/s/q --backend cuda --prompt-tokens $2 --gen-tokens 16 --runs 2 --json >> "$OUT/bench.jsonl" 2> /tmp/b.err
  echo "bench $1 P=$2 rc=$? at $(el) s" >> "$S"; }
for r in 1 2; do [ $(el) -gt 190 ] && break; B 0:1:4 2048; B 3:0:4 2048; B 2:1:4 2048; done
for r in 1 2; do [ $(el) -gt 200 ] && break; B 0:1:4 8192; B 3:0:4 8192; done
wait $pmma
{ echo ===single; grep -E "^# attention|FAIL|worst at" /tmp/t_single.log | head -120; echo ===mma; grep -E "^# attention|FAIL|worst at" /tmp/t_mma.log | head -60; tail -1 /tmp/t_mma.log
  for f in /tmp/q_*.log; do echo "=== $f"; grep -E "^# attention|FAIL|worst at" $f | head -12; done
  echo ===parity; grep -iE "fail|error" /tmp/par.log | head -20; tail -2 /tmp/par.log; } > "$OUT/tests.log"
cat "$S"
