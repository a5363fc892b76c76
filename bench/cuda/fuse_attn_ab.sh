#!/bin/bash
# fuse_attn_ab.sh — helper-90's final call of session 14 (run as `timeout 64 bash build-h90/run2.sh`, the package in
# build-h90/kiln-cuda.tar.xz from bench/cuda/pack.sh without test_cuda_sample): the tests of the bfmma fusions and the
# decode attention default in parallel, then qwen3-0.6b bf16 c=1,64,1 interleaved (OLD = main before: no fusions,
# KILN_CUDA_ATTN_DEC=split; NA = the attention at every batch; NEW = that + KILN_CUDA_BFMMA_FUSE=1; NL = =2), then
# llama-3-8b bf16 (L8LAYERS layers, default 8) c=64 NEW / OLD. NCURUNS="NA NEW": ncu per kernel of a 64-row step.
# (The script names NEW for "no env": when it ran, KILN_CUDA_BFMMA_FUSE defaulted to 1; it is opt-in now: set it.)
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
mkdir -p /tmp/k /tmp/s && tar xJf ${PKG:-build-h90/kiln-cuda.tar.xz} -C /tmp/k && export LD_LIBRARY_PATH=/tmp/k/lib
K=/tmp/k/kiln
( $K synth --preset llama-3-8b --dtype bf16 --layers ${L8LAYERS:-8} --out /tmp/s/l8bf16 > /tmp/syn3.log 2>&1; touch /tmp/s/l8.done ) &
$K synth --arch qwen3 --preset qwen3-0.6b --dtype bf16 --out /tmp/s/q06bf16 > /tmp/syn1.log 2>&1
$K synth --arch qwen3 --preset qwen3-0.6b --dtype bf16 --layers 2 --out /tmp/s/q06l2 > /tmp/syn2.log 2>&1
echo "synth q06 at $(el)" >> $S
# tests, in parallel (correctness only; the benches run after them)
( timeout 45 env KILN_CUDA_TEST_BFMMA_ONLY=quick /tmp/k/test_cuda_kernels > $OUT/t_bfmma.log 2>&1; echo "bfmma rc=$? $(tail -1 $OUT/t_bfmma.log) at $(el)" >> $S ) &
P1=$!
( timeout 30 env KILN_CUDA_TEST_FUSED_GEMV_ONLY=1 /tmp/k/test_cuda_kernels > /tmp/t_fg.log 2>&1; echo "fused_gemv rc=$? $(tail -1 /tmp/t_fg.log) at $(el)" >> $S; grep -i fail /tmp/t_fg.log | head >> $S;
  timeout 30 env KILN_CUDA_TEST_NORM_ROPE_ONLY=1 /tmp/k/test_cuda_kernels > /tmp/t_nr.log 2>&1; echo "norm_rope rc=$? $(tail -1 /tmp/t_nr.log) at $(el)" >> $S; grep -i fail /tmp/t_nr.log | head >> $S ) &
P2=$!
( timeout 45 env KILN_CUDA_TEST_ATTN_ONLY=dec /tmp/k/test_cuda_kernels > /tmp/t_at.log 2>&1; echo "attn dec rc=$? $(tail -1 /tmp/t_at.log) at $(el)" >> $S; grep -i "fail\|worst" /tmp/t_at.log | head >> $S ) &
P3=$!
( timeout 50 /tmp/k/test_cuda_parity > /tmp/t_par.log 2>&1; echo "parity rc=$? $(tail -1 /tmp/t_par.log) at $(el)" >> $S; grep -i fail /tmp/t_par.log | head >> $S ) &
P4=$!
( timeout 45 env KILN_CUDA_BFMMA_FUSE=2 KILN_CUDA_TEST_BFMMA_ONLY=quick /tmp/k/test_cuda_kernels > /tmp/t_b2.log 2>&1; echo "bfmma FUSE=2 quick rc=$? $(tail -1 /tmp/t_b2.log) at $(el)" >> $S; grep -i "fail\|chain" /tmp/t_b2.log | head >> $S;
  timeout 30 env KILN_CUDA_BFMMA_FUSE=2 KILN_CUDA_TEST_FUSED_GEMV_ONLY=1 /tmp/k/test_cuda_kernels > /tmp/t_f2.log 2>&1; echo "fused_gemv FUSE=2 rc=$? $(tail -1 /tmp/t_f2.log) at $(el)" >> $S; grep -i fail /tmp/t_f2.log | head >> $S ) &
P6=$!
( timeout 45 /tmp/k/test_cuda_hybrid > /tmp/t_hy.log 2>&1; echo "hybrid rc=$? $(tail -1 /tmp/t_hy.log) at $(el)" >> $S; grep -i fail /tmp/t_hy.log | head >> $S ) &
P5=$!
wait $P1 $P2 $P3 $P4 $P5 $P6
grep -i fail $OUT/t_bfmma.log | head -20 >> $S
echo "tests done at $(el)" >> $S
envof() { case $1 in OLD) echo KILN_CUDA_BFMMA_FUSE=0 KILN_CUDA_ATTN_DEC=split;; NEW) echo KILN_CUDA_BFMMA_FUSE=1;; NA) echo KILN_CUDA_BFMMA_FUSE=0;; NL) echo KILN_CUDA_BFMMA_FUSE=2;; NF) echo KILN_CUDA_ATTN_DEC=split;; esac; }
NCU=$(which ncu 2>/dev/null || echo /usr/local/cuda/bin/ncu)
for v in ${NCURUNS-}; do
  timeout 60 env $(envof $v) KILN_CUDA_GRAPH=0 $NCU --clock-control none --cache-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv \
    $K bench /tmp/s/q06l2 --backend cuda --concurrency 64 --prompt-tokens 8 --gen-tokens 3 --max-batch 64 --kv-cache-gb 1 --warmup-tokens 0 > /tmp/ncu_$v.csv 2>/tmp/ncu_$v.err
  echo "ncu $v rc=$? at $(el)" >> $S
  grep -E '^"' /tmp/ncu_$v.csv | awk -v v=$v -F'","' '{print v "\t" $1 "\t" $5 "\t" $(NF-2) "\t" $NF}' >> $OUT/ncu.tsv
done
timeout 20 /tmp/k/kiln-cuda-probe > $OUT/probe.txt 2>&1; echo "probe rc=$? at $(el)" >> $S
C="--backend cuda --concurrency 1,64,1 --prompt-tokens 128 --gen-tokens 128 --max-batch 128 --kv-cache-gb 16 --json"
for v in ${QRUNS:-NEW OLD NA NL NEW OLD NA NL}; do
  echo "{\"run\": \"$v q06bf16\"}" >> $OUT/conc.jsonl
  timeout 60 env $(envof $v) KILN_CUDA_STEP_STATS=64 $K bench /tmp/s/q06bf16 $C >> $OUT/conc.jsonl 2> /tmp/conc.err
  grep "steps of 64" /tmp/conc.err | tail -1 | sed "s/^/$v: /" >> $S
done
echo "qwen done at $(el)" >> $S
while [ ! -f /tmp/s/l8.done ]; do sleep 1; done; echo "l8 synth at $(el)" >> $S
for v in ${L8RUNS:-NEW OLD}; do
  echo "{\"run\": \"$v l8bf16\"}" >> $OUT/conc.jsonl
  timeout 45 env $(envof $v) KILN_CUDA_STEP_STATS=64 $K bench /tmp/s/l8bf16 ${C/1,64,1/64} >> $OUT/conc.jsonl 2> /tmp/conc.err
  grep "steps of 64" /tmp/conc.err | tail -1 | sed "s/^/l8 $v: /" >> $S
  echo "l8 $v at $(el)" >> $S
done
cat $S
