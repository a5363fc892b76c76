#!/bin/bash
# call_s60g.sh — (session 60) the fix. The chain reproduces the two-blocks-an-SM fault reliably where the unit test
# does not (call_s60e.sh: llama-3-8b q4 logits with KILN_CUDA_GEMV_RING_GRID=264 and the in-chain check, 12–15 of 160
# ring launches wrong in each of 3 runs; call_s60f.sh: the stress test 0/128 even without a fix). The tree now has the
# producer run fence.proxy.async.shared::cta after each empty wait (the consumers' generic reads of a slot ordered
# before the copy engine's refill — the LDS/TMA write-after-read race DeepEP fixed the same way, deepseek-ai/DeepEP#642);
# KILN_CUDA_GEMV_RING_FENCE=0 leaves it out (the control). Then every ring launch PDL-launched at the default budget:
# logits twice and batch-1 against the ring off. Package: kiln + test_cuda_kernels of the tree.
P=${1:-build-lead}
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
call_synth q4 l8q4
for f in 0 1; do
  KILN_CUDA_GEMV_RING_FENCE=$f KILN_CUDA_TEST_RING_ONLY=1 KILN_CUDA_TEST_RING_STRESS=256 KILN_CUDA_GEMV_RING_GRID=264 timeout 60 /tmp/k/test_cuda_kernels > /tmp/t_$f.log 2>&1
  echo "unit FENCE=$f rc=$? $(tail -1 /tmp/t_$f.log)" >> $S; grep "FAIL" /tmp/t_$f.log | head -3 >> $S
done
call_wait l8q4
IDS=$(seq -s, 1 40)
P0=KILN_CUDA_GEMV_RING=1,KILN_CUDA_GEMV_RING_NSEG=2,KILN_CUDA_GRAPH=0,KILN_CUDA_GEMV_RING_CHECK=1,KILN_CUDA_GEMV_RING_GRID=264
for f in 0 1 1 0 1 1; do
  LG_TIMEOUT=30 call_logits /tmp/s/l8q4 "kiln $P0,KILN_CUDA_GEMV_RING_FENCE=$f"
  grep "ring check" /tmp/lg.log >> $S
done
LG_TIMEOUT=30 call_logits /tmp/s/l8q4 "kiln X=1" "kiln KILN_CUDA_GEMV_RING=1,KILN_CUDA_GEMV_RING_PDL=1" "kiln KILN_CUDA_GEMV_RING=1,KILN_CUDA_GEMV_RING_PDL=1"
call_b1 l8q4 kiln X=1
call_b1 l8q4 kiln "KILN_CUDA_GEMV_RING=1 KILN_CUDA_GEMV_RING_PDL=1"
echo "done at $(el) s" >> $S
cat $S; cat $OUT/bench.txt
