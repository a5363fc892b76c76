#!/bin/bash
# call_s40c.sh — session 40: the batch-1 q4/q8 GEMV issuing its next item's loads before a tile's end barriers
# (kiln) against main (kiln-base), and the load-pattern probe (bench/cuda/gemv_load_probe.cu).
#  1. the GEMV tests (KILN_CUDA_TEST_GEMV_ONLY), again with the fused ops on (KILN_CUDA_TC_FUSE=1: the same loop);
#  2. gemv_load_probe: the q4 GEMV's loads without its arithmetic (patterns, depth, spin, block shapes);
#  3. logits md5 of both binaries over 32 decode steps (the change is an issue order: bitwise);
#  4. batch-1 decode at 2048 + 128, alternating: llama-3-8b q4 (3 rounds), qwen3-0.6b q4 (2);
#  5. ncu per launch of both binaries' decode GEMVs (2-layer llama-3-8b q4, graphs off, cache flushed).
#   PACK_BINS="kiln kiln-base test_cuda_kernels kiln-cuda-probe", gemv_load_probe beside the package;
#   run: bash bench/cuda/call_s40c.sh PKG_DIR   (LEAN=1: only the GEMV tests, the probe, llama-3-8b q4's md5 and decode)
D=${1:?package dir}
. bench/cuda/call_lib.sh
call_unpack "$D/kiln-cuda.tar.xz"
K=/tmp/k/kiln
call_synth q4 l8q4 q06q4
[ -n "$LEAN" ] || [ -f /tmp/s/l8l2q4/config.json ] || $K synth --arch llama --preset llama-3-8b --dtype q4 --layers 2 --out /tmp/s/l8l2q4 > /tmp/s/syn-l2.log 2>&1 &
$D/gemv_load_probe > $OUT/probe_loads.txt 2>&1
echo "load probe rc=$? at $(el) s" >> $S
call_t1 gemv KILN_CUDA_TEST_GEMV_ONLY=1
[ -n "$LEAN" ] || call_t1 gemv_fuse KILN_CUDA_TEST_GEMV_ONLY=1 KILN_CUDA_TC_FUSE=1
echo "tests at $(el) s" >> $S
call_wait l8q4 q06q4
IDS=$(seq -s, 100 131)
for m in l8q4 ${LEAN:-q06q4}; do [ "$m" = 1 ] || call_logits /tmp/s/$m "kiln-base X=1" "kiln X=1"; done
for r in 1 2 3; do call_b1 l8q4 kiln-base X=1; call_b1 l8q4 kiln X=1; done
[ -n "$LEAN" ] || for r in 1 2; do call_b1 q06q4 kiln-base X=1; call_b1 q06q4 kiln X=1; done
echo "bench at $(el) s" >> $S
M=gpu__time_duration.sum,dram__bytes_read.sum
[ -n "$LEAN" ] || for b in kiln-base kiln; do
  KILN_CUDA_GRAPH=0 timeout 120 ncu --kernel-name regex:gemv --launch-count 20 --cache-control all --clock-control none --metrics $M --csv \
    /tmp/k/$b bench /tmp/s/l8l2q4 --backend cuda --prompt-tokens 16 --gen-tokens 4 --runs 1 > $OUT/ncu_$b.csv 2> /tmp/ncu.err
  echo "ncu $b rc=$? at $(el) s" >> $S
done
cat $S $OUT/probe_loads.txt $OUT/bench.txt
