#!/bin/bash
# helper-92, call 2: probes (copies + barriers only) of v2/v5/v6/v7, per-matmul timing, ncu, tests, engine A/B.
OUT=${OUT:?}; T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S="$OUT/summary.txt"
mkdir -p /tmp/k /tmp/s && tar xJf build-h92/kiln-cuda.tar.xz -C /tmp/k && export LD_LIBRARY_PATH=/tmp/k/lib
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv > "$S" 2>&1
K=/tmp/k
( $K/kiln synth --preset llama-3-8b --dtype q4 --out /tmp/s/l8q4 > /tmp/s/synth.log 2>&1; echo "synth rc=$? at $(el) s" >> "$S"; touch /tmp/s/done ) &
$K/kiln-cuda-probe > "$OUT/probe.jsonl" 2>&1; echo "probe at $(el) s" >> "$S"
KILN_CUDA_QWG_DEBUG=1 KILN_CUDA_TEST_QWG_BENCH=1 timeout 45 $K/test_cuda_kernels > "$OUT/qwg_bench.txt" 2>&1; rc=$?; echo "qwg bench rc=$rc at $(el) s" >> "$S"
HANG=0; [ $rc = 124 ] && HANG=1
NCU=$(which ncu 2>/dev/null || echo /usr/local/cuda/bin/ncu)
if [ $HANG = 0 ]; then
QWG_BENCH_REPS=1 KILN_CUDA_TEST_QWG_BENCH=1 timeout 120 $NCU --clock-control none --cache-control none --csv -k regex:"wg[23]" \
  --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_read.sum.per_second,lts__t_bytes.sum,smsp__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,launch__registers_per_thread,sm__inst_executed_pipe_tensor_op_gmma.sum \
  $K/test_cuda_kernels > /tmp/ncu.csv 2> /tmp/ncu.err; echo "ncu rc=$? at $(el) s" >> "$S"
grep -v "^# qwg bench\|^==PROF==" /tmp/ncu.csv | xz -9 > "$OUT/ncu_bench.csv.xz"; tail -c 1500 /tmp/ncu.err > "$OUT/ncu.err"
fi
( KILN_CUDA_TEST_QWG_ONLY=1 timeout 100 $K/test_cuda_kernels > /tmp/qwg_def.log 2>&1; echo "qwg default rc=$? at $(el) s: $(tail -1 /tmp/qwg_def.log)" >> "$S" ) &
p1=$!
( KILN_CUDA_QWG_V=7 KILN_CUDA_TEST_QWG_ONLY=1 timeout 100 $K/test_cuda_kernels > /tmp/qwg_v7.log 2>&1; echo "qwg V=7 rc=$? at $(el) s: $(tail -1 /tmp/qwg_v7.log)" >> "$S" ) &
p2=$!
( KILN_CUDA_QWG_V=7 timeout 100 $K/test_cuda_parity > /tmp/par_v7.log 2>&1; echo "parity V=7 rc=$? at $(el) s: $(tail -1 /tmp/par_v7.log)" >> "$S" ) &
p3=$!
wait $p1 $p2 $p3
{ grep -E "^# qwg|FAIL|fail|differ|over the bound|^test_cuda" /tmp/qwg_def.log | head -60; echo ===v7; grep -E "^# qwg|FAIL|fail|differ|over the bound|^test_cuda" /tmp/qwg_v7.log | head -60; echo ===parity; grep -iE "fail|error" /tmp/par_v7.log | head -20; tail -3 /tmp/par_v7.log; } > "$OUT/tests.log"
grep -q "rc=124" "$S" && HANG=1
while [ ! -f /tmp/s/done ]; do sleep 1; done
B() { echo "{\"run\": \"$1 $2\"}" >> "$OUT/conc.jsonl"
  env KILN_CUDA_QWG_V=$1 KILN_CUDA_STEP_STATS=64 timeout 60 $K/kiln bench /tmp/s/l8q4 --backend cuda --concurrency 1,64,1 --prompt-tokens 128 --gen-tokens 128 \
    --max-batch 128 --kv-cache-gb 16 --json >> "$OUT/conc.jsonl" 2> /tmp/b.err; echo "bench V=$1 ($2) rc=$? at $(el) s" >> "$S"
  { echo "=== V=$1 $2"; grep -iE "step|error" /tmp/b.err | tail -3; } >> "$OUT/bench.err"; }
if [ $HANG = 0 ]; then B 2 a1; B 5 b1; B 7 c1; B 2 a2; B 5 b2; B 7 c2; else B 2 a1; fi
cat "$S"
