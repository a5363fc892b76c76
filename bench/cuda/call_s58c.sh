#!/bin/bash
# call_s58c.sh (run in session 59 with the PDL chains alone per knob and racecheck added; its LATE/BULK/PW knobs left the kernel after that run) — why the ring GEMV's first working run (call_s58a.sh, session 58) mismatched in the PDL chain tests and ran
# slower (~200 s): the GEMV test subset under the ring as it is, with slots freed after their item is computed
# (KILN_CUDA_GEMV_RING_LATE=1), with plain bulk copies instead of tensor maps (KILN_CUDA_GEMV_RING_BULK=1), with
# per-warp slots instead of the tag spin (KILN_CUDA_GEMV_RING_PW=1) and with the next launch let in only at the consumers' end (KILN_CUDA_GEMV_RING_TRIG=end);
# ncu kernel times of the one-token GEMVs (2-layer llama-3-8b q4, no graph: each kernel alone) ring off / on; batch-1
# llama-3-8b q4 under each variant. Package as call_s58a.sh's (carry ["build-lead"]).
P=${1:-build-lead}
# Summaries: python3 bench/cuda/ncu_sum.py ncu_KILN_CUDA_GEMV_RING=0.csv (and =1); ncu_ring_sections.txt as ncu prints it.
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
call_synth q4 l8q4
call_synth_2l q4 l2q4
# the PDL chains alone under each knob first (seconds: which knob makes eager = synchronized; eager twice equal?)
for v in KILN_CUDA_GEMV_RING=0 X=1 KILN_CUDA_GEMV_RING_BULK=1 KILN_CUDA_GEMV_RING_PW=1 KILN_CUDA_GEMV_RING_LATE=1 KILN_CUDA_GEMV_RING_TRIG=end; do
  env KILN_CUDA_TEST_CHAIN_ONLY=1 KILN_CUDA_GEMV_RING=1 $v timeout 30 /tmp/k/test_cuda_kernels > /tmp/t.log 2>&1
  echo "chain $v rc=$? at $(el) s $(tail -1 /tmp/t.log)" >> $S
  grep FAIL /tmp/t.log | head -4 >> $S
done
for v in X=1 KILN_CUDA_GEMV_RING_BULK=1 KILN_CUDA_GEMV_RING_PW=1 KILN_CUDA_GEMV_RING_LATE=1 KILN_CUDA_GEMV_RING_TRIG=end; do
  env KILN_CUDA_TEST_GEMV_ONLY=1 KILN_CUDA_GEMV_RING=1 $v timeout 45 /tmp/k/test_cuda_kernels > /tmp/t.log 2>&1
  echo "ring $v rc=$? at $(el) s $(tail -1 /tmp/t.log)" >> $S
  grep FAIL /tmp/t.log | grep -v xprep | head -4 >> $S
done
call_wait l2q4
for v in KILN_CUDA_GEMV_RING=0 KILN_CUDA_GEMV_RING=1; do
  env $v KILN_CUDA_GRAPH=0 timeout 90 ncu --kernel-name regex:gemv_tc --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv \
    /tmp/k/kiln bench /tmp/s/l2q4 --backend cuda --prompt-tokens 16 --gen-tokens 4 --runs 1 > $OUT/ncu_$v.csv 2>/tmp/ncu.err
  echo "ncu $v rc=$? at $(el) s" >> $S; tail -2 /tmp/ncu.err >> $S
done
# where the ring kernel's warps wait and how its shared loads conflict (the first six ring launches, alone)
KILN_CUDA_GEMV_RING=1 KILN_CUDA_GRAPH=0 timeout 90 ncu --kernel-name regex:gemv_tcr -c 6 --section WarpStateStats --section MemoryWorkloadAnalysis \
  --section SpeedOfLight /tmp/k/kiln bench /tmp/s/l2q4 --backend cuda --prompt-tokens 16 --gen-tokens 4 --runs 1 > $OUT/ncu_ring_sections.txt 2>&1
echo "ncu sections rc=$? at $(el) s" >> $S
call_wait l8q4
for v in X=1 KILN_CUDA_GEMV_RING=1 "KILN_CUDA_GEMV_RING=1 KILN_CUDA_GEMV_RING_BULK=1" "KILN_CUDA_GEMV_RING=1 KILN_CUDA_GEMV_RING_PW=1" "KILN_CUDA_GEMV_RING=1 KILN_CUDA_GEMV_RING_LATE=1" "KILN_CUDA_GEMV_RING=1 KILN_CUDA_GEMV_RING_TRIG=end"; do
  call_b1 l8q4 kiln "$v"
done
# kernels serialized under the sanitizer: a chain that passes here and not above races between launches
call_san racecheck 100 chainring KILN_CUDA_GEMV_RING=1 KILN_CUDA_TEST_CHAIN_ONLY=1 -- /tmp/k/test_cuda_kernels
grep -a "FAIL\|passed" /tmp/san_chainring.log | head -4 >> $S
echo "done at $(el) s" >> $S
cat $S; cat $OUT/bench.txt
