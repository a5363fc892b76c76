#!/bin/bash
# call_s43a.sh — session 43's first call. Package (built here with bench/cuda/build_here.sh, packed with
# PACK_BINS="kiln-base kiln-pro kiln-pf test_cuda_kernels-pro test_cuda_kernels" bench/cuda/pack.sh):
#   kiln-base  main at session 42's end (0b390c8)
#   kiln-pro   + bench/cuda/qd_prologue.patch (test_cuda_kernels-pro the same tree)
#   kiln-pf    + the batch-1 q4/q8 GEMV's L2 prefetch D items ahead (KILN_CUDA_GEMV_TC_PF=D, default off;
#              test_cuda_kernels the same tree)
# (SKIP_TESTS=1: the tests left out — the call's second run.) Runs: the tests of both trees, logits md5 (both changes are bitwise by construction), batch-1 decode of
# kiln-pf at D = 0/2/4/8 against kiln-base, ncu per GEMV shape (time, DRAM bytes) and ncu's stall sections of one
# decode token's GEMVs, then session 42's pending qd_prologue A/B (ncu of the convert launches, prefill).
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
ln -sf kiln-base /tmp/k/kiln # call_synth's binary
call_synth q4 q06q4 l8q4
( /tmp/k/kiln-base synth --preset llama-3-8b --dtype q4 --layers 2 --out /tmp/s/l8q4_2 > /dev/null 2>&1; touch /tmp/s/l8q4_2.done ) &
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader >> "$S"
[ -n "${SKIP_TESTS:-}" ] || for v in "gemv-pf4 test_cuda_kernels KILN_CUDA_TEST_GEMV_ONLY=1 KILN_CUDA_GEMV_TC_PF=4" "gemv-pf1 test_cuda_kernels KILN_CUDA_TEST_GEMV_ONLY=1 KILN_CUDA_GEMV_TC_PF=1" \
         "qgemm-pro test_cuda_kernels-pro KILN_CUDA_TEST_QGEMM_ONLY=1"; do
  set -- $v
  env $3 $4 timeout 200 /tmp/k/$2 > /tmp/t_$1.log 2>&1
  echo "$1 rc=$? $(tail -1 /tmp/t_$1.log)" >> "$S"; grep -i "fail" /tmp/t_$1.log | head -5 >> "$S"
done
echo "tests done at $(el) s" >> "$S"
call_wait q06q4 l8q4 l8q4_2
IDS=$(seq -s, 10 33)
for m in l8q4 q06q4; do call_logits /tmp/s/$m "kiln-base X=1" "kiln-pf X=1" "kiln-pf KILN_CUDA_GEMV_TC_PF=1" "kiln-pf KILN_CUDA_GEMV_TC_PF=4"; done
IDS=$(seq -s, 10 609)
for m in q06q4 l8q4; do for b in kiln-base kiln-pro; do
  timeout 90 /tmp/k/$b logits /tmp/s/$m --backend cuda --ids "$IDS" --chunk 300 --out /tmp/lg.npy > /dev/null 2>&1
  echo "logits prefill $m $b rc=$? $(md5sum < /tmp/lg.npy | cut -c1-12)" >> "$S"
done; done
echo "md5 done at $(el) s" >> "$S"
for m in l8q4 q06q4; do
  call_b1 $m kiln-base X=1
  for d in 0 1 2 4; do call_b1 $m kiln-pf KILN_CUDA_GEMV_TC_PF=$d; done
done
echo "b1 round 1 done at $(el) s" >> "$S"
for d in 0 1 2; do
  KILN_CUDA_GRAPH=0 KILN_CUDA_GEMV_TC_PF=$d timeout 120 ncu --metrics gpu__time_duration.sum,dram__bytes_read.sum -k regex:gemv_tc --csv \
    /tmp/k/kiln-pf bench /tmp/s/l8q4_2 --backend cuda --prompt-tokens 2048 --gen-tokens 8 --runs 1 > /tmp/nc.csv 2>/dev/null
  python3 bench/cuda/ncu_grid.py "pf$d" >> "$S"
done
echo "ncu gemv done at $(el) s" >> "$S"
for i in 1 2; do for m in q06q4 l8q4; do for b in kiln-base kiln-pro; do call_prefill $m $b 3; done; done; done
echo "prefill done at $(el) s" >> "$S"
for b in kiln-base kiln-pro "kiln-pro KILN_CUDA_QDEQ_GRID=528" "kiln-pro KILN_CUDA_QDEQ_GRID=264"; do
  set -- $b
  env ${2:-X=1} timeout 100 ncu --metrics gpu__time_duration.sum,smsp__inst_executed.sum -k regex:qd_convert_multi --csv /tmp/k/$1 bench /tmp/s/q06q4 \
    --backend cuda --prompt-tokens 2048 --gen-tokens 2 --runs 1 > /tmp/nc.csv 2>/dev/null
  python3 bench/cuda/ncu_launches.py "$b" >> "$S"
done
echo "ncu convert done at $(el) s" >> "$S"
[ -n "${SKIP_TESTS:-}" ] || for d in 0 4; do
  KILN_CUDA_GRAPH=0 KILN_CUDA_GEMV_TC_PF=$d timeout 100 ncu --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis \
    --section Occupancy --section SchedulerStats -k regex:gemv_tc --launch-skip 19 --launch-count 9 \
    /tmp/k/kiln-pf bench /tmp/s/l8q4_2 --backend cuda --prompt-tokens 2048 --gen-tokens 8 --runs 1 > $OUT/ncu_full_pf$d.txt 2>&1
done
echo "ncu full done at $(el) s" >> "$S"
for d in 0 1 2; do call_b1 l8q4 kiln-pf KILN_CUDA_GEMV_TC_PF=$d; done
call_b1 l8q4 kiln-base X=1
cat "$S" $OUT/bench.txt
