#!/bin/bash
# call_s56a.sh — for the next session (written in session 55, not run): the decode step's kernel timeline in the
# CUDA graph, which nothing on the device image shows (no nsys; ncu serializes). A KILN_CUDA_TIMELINE=ON build stamps
# every PDL kernel's block waits (src/backend/cuda/timeline.cuh); bench/cuda/timeline.py turns them into launches with
# their span in the chain. Session 55's budget: ~1.0 ms of a 2.8-ms llama-3-8b q4 token lies between the GEMVs — this
# says which hop holds it. Batch-1 llama-3-8b q4 and qwen3-0.6b q4 (2048 + 16 tokens, graphs on), and llama-3-8b q4
# once with KILN_CUDA_GRAPH=0 to compare with eager launches. Package (a tree of its own):
#   CMAKE_EXTRA="-DKILN_CUDA_TIMELINE=ON" bash bench/cuda/build_here.sh /work/cb/s55t kiln &&
#   PACK_BINS="kiln" bash bench/cuda/pack.sh /work/cb/s55t/b build-tl     (carry ["build-tl"])
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
call_wait l8q4 q06q4
for m in l8q4 q06q4; do
  KILN_CUDA_TIMELINE=/tmp/tl_$m.bin timeout 120 /tmp/k/kiln bench /tmp/s/$m --backend cuda --prompt-tokens 2048 --gen-tokens 16 \
    --runs 1 > /tmp/tlb_$m.log 2>&1
  echo "== $m rc=$? $(grep -a 'decode:' /tmp/tlb_$m.log) $(grep -a TIMELINE /tmp/tlb_$m.log | tail -1)" >> "$S"
  python3 bench/cuda/timeline.py /tmp/tl_$m.bin 400 > $OUT/tl_$m.txt 2>&1
  tail -20 $OUT/tl_$m.txt >> "$S"
done
KILN_CUDA_GRAPH=0 KILN_CUDA_TIMELINE=/tmp/tl_eager.bin timeout 120 /tmp/k/kiln bench /tmp/s/l8q4 --backend cuda --prompt-tokens 2048 \
  --gen-tokens 16 --runs 1 > /tmp/tlb_eager.log 2>&1
python3 bench/cuda/timeline.py /tmp/tl_eager.bin 400 > $OUT/tl_l8q4_eager.txt 2>&1
echo "== eager: $(tail -12 $OUT/tl_l8q4_eager.txt)" >> "$S"
echo "done at $(el) s" >> "$S"
cat "$S"
