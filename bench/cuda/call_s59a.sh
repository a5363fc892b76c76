#!/bin/bash
# call_s59a.sh — session 59's ring GEMV (a slot = a quad of 4 chunks of one tile in three tensor-map boxes, two consumer
# sets of 4 warps with their own halves of the ring; session 58's ncu: one chunk a slot left the producer's lane
# issue-bound at 0.6–0.96 TB/s): the GEMV tests under the ring (45 s cap), the PDL chains alone, logits md5 ring off /
# on (bitwise through qwen3-0.6b q4 and llama-3-8b q4), batch-1 decode off / on twice, ncu kernel times of the
# one-token GEMVs (2-layer llama-3-8b q4, no graph) off / on and the ring's sections. Package (carry ["build-lead"]):
#   bash bench/cuda/build_here.sh /work/cb/s26 kiln test_cuda_kernels &&
#   PACK_BINS="kiln test_cuda_kernels" bash bench/cuda/pack.sh /work/cb/s26/b build-lead
P=${1:-build-lead}
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
call_synth q4 q06q4 l8q4
call_synth_2l q4 l2q4
call_ring_tests
KILN_CUDA_TEST_CHAIN_ONLY=1 KILN_CUDA_GEMV_RING=1 timeout 30 /tmp/k/test_cuda_kernels > /tmp/t.log 2>&1
echo "chain ring rc=$? $(tail -1 /tmp/t.log)" >> $S; grep FAIL /tmp/t.log | head -4 >> $S
R=KILN_CUDA_GEMV_RING=1
[ $RC = 124 ] && R=X=2 # a hang: the ring's runs would each wait out their limit — baselines only
call_wait l2q4
for v in 0 1; do
  KILN_CUDA_GEMV_RING=$v KILN_CUDA_GRAPH=0 timeout 90 ncu --kernel-name regex:gemv_tc --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv \
    /tmp/k/kiln bench /tmp/s/l2q4 --backend cuda --prompt-tokens 16 --gen-tokens 4 --runs 1 > /tmp/ncu_$v.csv 2>/tmp/ncu.err
  echo "ncu ring=$v rc=$? at $(el) s" >> $S
  python3 bench/cuda/ncu_sum.py /tmp/ncu_$v.csv > $OUT/ncu_ring$v.txt 2>&1
done
[ $RC = 0 ] && KILN_CUDA_GEMV_RING=1 KILN_CUDA_GRAPH=0 timeout 90 ncu --kernel-name regex:gemv_tcr -c 6 --section WarpStateStats --section MemoryWorkloadAnalysis \
  --section SpeedOfLight /tmp/k/kiln bench /tmp/s/l2q4 --backend cuda --prompt-tokens 16 --gen-tokens 4 --runs 1 > $OUT/ncu_ring_sections.txt 2>&1
call_wait q06q4 l8q4
for v in X=1 $R; do call_b1 q06q4 kiln $v; call_b1 l8q4 kiln $v; done
IDS=$(seq -s, 1 40)
LG_TIMEOUT=25 call_logits /tmp/s/q06q4 "kiln X=1" "kiln KILN_CUDA_GEMV_RING=1"
LG_TIMEOUT=25 call_logits /tmp/s/l8q4 "kiln X=1" "kiln KILN_CUDA_GEMV_RING=1"
for v in X=1 $R; do call_b1 q06q4 kiln $v; call_b1 l8q4 kiln $v; done
echo "done at $(el) s" >> $S
cat $S; cat $OUT/bench.txt; grep -i "tcr\|gemv_tc" $OUT/ncu_ring*.txt | head -20
