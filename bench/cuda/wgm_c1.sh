#!/bin/bash
# helper-95 (session 15), call 1: v8 (KILN_CUDA_QWG_V=8: scales/biases from a shared slab; KILN_CUDA_QWG_MC=2/4: the x tile
# multicast in clusters) against v5 — probe, per-variant timing, ncu, test_qwg + parity, engine A/B. Run with carry
# ["build-h95"] after bench/cuda/pack.sh (only kiln, test_cuda_kernels, test_cuda_parity, kiln-cuda-probe packed).
OUT=${OUT:?}; T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S="$OUT/summary.txt"
mkdir -p /tmp/k /tmp/s && tar xJf build-h95/kiln-cuda.tar.xz -C /tmp/k && export LD_LIBRARY_PATH=/tmp/k/lib
K=/tmp/k
( $K/kiln synth --arch llama --preset llama-3-8b --dtype q4 --out /tmp/s/l8q4 > /tmp/s/synth.log 2>&1; echo "synth rc=$? at $(el) s" >> "$S"; touch /tmp/s/done ) &
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv >> "$S" 2>&1
timeout 40 $K/kiln-cuda-probe > "$OUT/probe.jsonl" 2>&1; echo "probe at $(el) s" >> "$S"
KILN_CUDA_QWG_DEBUG=1 KILN_CUDA_TEST_QWG_BENCH=1 timeout 45 $K/test_cuda_kernels > "$OUT/qwg_bench.txt" 2>&1; rc=$?; echo "qwg bench rc=$rc at $(el) s" >> "$S"
HANG=0; [ $rc != 0 ] && HANG=1
NCU=$(which ncu 2>/dev/null || echo /usr/local/cuda/bin/ncu)
if [ $HANG = 0 ]; then
QWG_BENCH_REPS=1 KILN_CUDA_TEST_QWG_BENCH=1 timeout 100 $NCU --clock-control none --cache-control none --csv -k regex:"wg[m3]_kernel" \
  --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_bytes.sum,smsp__inst_executed.sum,launch__registers_per_thread,launch__occupancy_limit_shared_mem,sm__warps_active.avg.pct_of_peak_sustained_active \
  $K/test_cuda_kernels > /tmp/ncu.csv 2> /tmp/ncu.err; echo "ncu rc=$? at $(el) s" >> "$S"
grep -v "^# qwg bench\|^==PROF==" /tmp/ncu.csv | xz -9 > "$OUT/ncu_bench.csv.xz"; tail -c 1500 /tmp/ncu.err > "$OUT/ncu.err"
fi
( KILN_CUDA_TEST_QWG_ONLY=1 timeout 100 $K/test_cuda_kernels > /tmp/qwg_def.log 2>&1; echo "qwg (v5 default; v8 mc1/2/4 vs v2 bitwise) rc=$? at $(el) s: $(tail -1 /tmp/qwg_def.log)" >> "$S" ) &
p1=$!
( KILN_CUDA_QWG_V=8 timeout 100 $K/test_cuda_parity > /tmp/par_v8.log 2>&1; echo "parity V=8 (mc2) rc=$? at $(el) s: $(tail -1 /tmp/par_v8.log)" >> "$S" ) &
p2=$!
wait $p1 $p2
{ grep -E "^# qwg|FAIL|fail|differ|over the bound|^test_cuda" /tmp/qwg_def.log | head -60; echo ===parity; grep -iE "fail|error" /tmp/par_v8.log | head -20; tail -3 /tmp/par_v8.log; } > "$OUT/tests.log"
grep -q "rc=124" "$S" && HANG=1
while [ ! -f /tmp/s/done ]; do sleep 1; done
B() { echo "{\"run\": \"V=$1 MC=$2 $3\"}" >> "$OUT/conc.jsonl"
  env KILN_CUDA_QWG_V=$1 KILN_CUDA_QWG_MC=$2 KILN_CUDA_STEP_STATS=64 timeout 50 $K/kiln bench /tmp/s/l8q4 --backend cuda --concurrency 1,64,1 --prompt-tokens 128 --gen-tokens 128 \
    --max-batch 128 --kv-cache-gb 16 --json >> "$OUT/conc.jsonl" 2> /tmp/b.err; echo "bench V=$1 MC=$2 ($3) rc=$? at $(el) s" >> "$S"
  { echo "=== V=$1 MC=$2 $3"; grep -iE "step|error" /tmp/b.err | tail -4; } >> "$OUT/bench.err"; }
if [ $HANG = 0 ]; then
  B 5 1 a1; B 8 2 b1; B 8 4 c1; B 5 1 a2; B 8 2 b2
  [ $(el) -lt 250 ] && B 8 4 c2
else B 5 1 a1; fi
cat "$S"
