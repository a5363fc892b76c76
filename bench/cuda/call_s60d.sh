#!/bin/bash
# call_s60d.sh — (session 60) call_s60c.sh: the PDL-launched ring differs at 100 and 112 KB (4 slots; two ring blocks
# cannot share an SM at 112 KB), is bitwise at 160 and 200 KB (8 and 10 slots). Two questions now:
# 1. slots or room? KILN_CUDA_GEMV_RING_NS=4 (new, diagnosis) at a 200 KB budget: 4 slots, nothing else beside it.
# 2. does the ring itself compute wrong rows in the chain, or does its presence make another kernel misread?
#    KILN_CUDA_GEMV_RING_CHECK=1 (new, eager only): gemv_tc_kernel recomputes every ring launch's rows into a scratch
#    buffer and a plain kernel compares them bitwise; the counts print at exit ("ring check: ...").
# Package: kiln = the tree (PACK_BINS=kiln bash bench/cuda/pack.sh /work/cb/s26/b build-lead).
P=${1:-build-lead}
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
call_synth q4 l8q4
call_wait l8q4
IDS=$(seq -s, 1 40)
R=KILN_CUDA_GEMV_RING=1,KILN_CUDA_GEMV_RING_PDL=1,KILN_CUDA_GEMV_RING_NSEG=2,KILN_CUDA_GEMV_TC_XF=0
LG_TIMEOUT=30 call_logits /tmp/s/l8q4 "kiln X=1" "kiln KILN_CUDA_GRAPH=0" \
  "kiln $R,KILN_CUDA_GEMV_RING_SMEM=200000,KILN_CUDA_GEMV_RING_NS=4" "kiln $R,KILN_CUDA_GEMV_RING_SMEM=200000,KILN_CUDA_GEMV_RING_NS=4" \
  "kiln $R,KILN_CUDA_GEMV_RING_SMEM=200000,KILN_CUDA_GEMV_RING_NS=4" "kiln $R,KILN_CUDA_GEMV_RING_SMEM=200000,KILN_CUDA_GEMV_RING_NS=4"
for i in 1 2 3 4; do
  LG_TIMEOUT=30 call_logits /tmp/s/l8q4 "kiln $R,KILN_CUDA_GRAPH=0,KILN_CUDA_GEMV_RING_CHECK=1"
  grep "ring check" /tmp/lg.log >> $S
done
# the same check with the ring launched plain (deterministic): the check itself must count no difference
LG_TIMEOUT=30 call_logits /tmp/s/l8q4 "kiln KILN_CUDA_GEMV_RING=1,KILN_CUDA_GEMV_RING_NSEG=2,KILN_CUDA_GRAPH=0,KILN_CUDA_GEMV_RING_CHECK=1"
grep "ring check" /tmp/lg.log >> $S
echo "done at $(el) s" >> $S
cat $S
