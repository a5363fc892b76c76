#!/bin/bash
# call_s60b.sh — (session 60) the PDL-launched ring's run-to-run logits difference, two more cuts. call_s60a.sh found
# that neither attn_rk_cg_s59.patch (the attention's own k row through L2) nor PREWAIT=0 + TRIG=end at once (the ring
# then reads and writes nothing before its wait and lets no successor in before its end) ends it: 3/4 and 3/4 differ.
# Here: kiln-cg = the tree built with -Xptxas -dlcm=cg (every plain global load cached in L2 only, none in L1): does an
# L1 line some co-resident kernel left behind explain it? And kiln-base (the tree) with the ring at a 200 KB budget (one
# ring block an SM, nothing beside it); and qwen3-0.6b q4 four more times. Package:
#   CMAKE_EXTRA="-DCMAKE_CUDA_FLAGS=-Xptxas=-dlcm=cg" bash bench/cuda/build_here.sh /work/cb/s60cg kiln &&
#   cp /work/cb/s60cg/b/kiln /work/cb/s26/b/kiln-cg &&
#   PACK_BINS="kiln-base kiln-cg" bash bench/cuda/pack.sh /work/cb/s26/b build-lead   (carry ["build-lead"])
P=${1:-build-lead}
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
cp /tmp/k/kiln-base /tmp/k/kiln # synth and call_b1 use /tmp/k/kiln: the tree
call_synth q4 l8q4 q06q4
call_wait l8q4
IDS=$(seq -s, 1 40)
R=KILN_CUDA_GEMV_RING=1,KILN_CUDA_GEMV_RING_PDL=1,KILN_CUDA_GEMV_RING_NSEG=2
LG_TIMEOUT=30 call_logits /tmp/s/l8q4 "kiln-cg X=1" "kiln-cg $R" "kiln-cg $R" "kiln-cg $R" "kiln-cg $R" "kiln-cg $R" \
  "kiln-base $R,KILN_CUDA_GEMV_RING_SMEM=200000" "kiln-base $R,KILN_CUDA_GEMV_RING_SMEM=200000" "kiln-base $R,KILN_CUDA_GEMV_RING_SMEM=200000"
call_wait q06q4
LG_TIMEOUT=30 call_logits /tmp/s/q06q4 "kiln-base X=1" "kiln-base $R" "kiln-base $R" "kiln-base $R" "kiln-base $R"
for b in kiln-base kiln-cg; do call_b1 l8q4 $b X=1; done
echo "done at $(el) s" >> $S
cat $S; cat $OUT/bench.txt
