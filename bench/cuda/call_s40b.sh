#!/bin/bash
# call_s40b.sh — session 40: the batch-1 q4/q8 GEMV's stream-K walk (TC_SK: every warp an equal run of the tiles'
# items, tiles split between warps added in chunk order through global memory) against the tile-group walk
# (KILN_CUDA_GEMV_TC_SK=0), and where kiln's GEMVs stand kernel by kernel against PyTorch's.
#  1. the GEMV tests (KILN_CUDA_TEST_GEMV_ONLY: test_gemv_tc_sk's grid caps, shapes, matmul_multi, fused ops);
#  2. the ceilings (kiln-cuda-probe) and the peer (bench/cuda/peer_gemv.py: int4 tinygemm, int8, bf16 cuBLAS);
#  3. ncu per launch (graphs off, cache flushed) of the decode GEMVs of 2-layer llama-3-8b synths: q4 both walks, bf16;
#  4. logits md5 of both walks (bitwise by construction: the same chunk-order sums); batch-1 decode at 2048 + 128, both walks alternating: llama-3-8b q4 / q8, qwen3-0.6b q4;
#  5. the GEMV trace of llama-3-8b q4, both walks (gap / x preparation / end / tail per launch class).
#   PACK_BINS="kiln test_cuda_kernels kiln-cuda-probe"; run: bash bench/cuda/call_s40b.sh PKG
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
K=/tmp/k/kiln
call_synth q4 l8q4 q06q4
call_synth q8 l8q8
for d in q4 bf16; do
  [ -f /tmp/s/l8l2$d/config.json ] || $K synth --arch llama --preset llama-3-8b --dtype $d --layers 2 --out /tmp/s/l8l2$d > /tmp/s/syn-$d.log 2>&1 &
done
call_t1 gemv KILN_CUDA_TEST_GEMV_ONLY=1
echo "tests at $(el) s" >> $S
/tmp/k/kiln-cuda-probe 2>&1 | head -3 > $OUT/probe.txt
timeout 200 python3 bench/cuda/peer_gemv.py > $OUT/peer.txt 2> $OUT/peer.err
echo "peer rc=$? at $(el) s" >> $S
M=gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__block_size,launch__registers_per_thread
while [ ! -f /tmp/s/l8l2bf16/config.json ] || [ ! -f /tmp/s/l8l2q4/config.json ]; do sleep 1; done; sleep 2
for v in "q4 X=1" "q4 KILN_CUDA_GEMV_TC_SK=0" "bf16 X=1"; do
  set -- $v
  env KILN_CUDA_GRAPH=0 $2 timeout 120 ncu --kernel-name regex:gemv --launch-count 40 --cache-control all --clock-control none --metrics $M --csv \
    $K bench /tmp/s/l8l2$1 --backend cuda --prompt-tokens 16 --gen-tokens 5 --runs 1 > "$OUT/ncu_$1_${2%%=*}.csv" 2> /tmp/ncu.err
  echo "ncu $v rc=$? at $(el) s" >> $S; tail -2 /tmp/ncu.err >> $S
done
call_wait l8q4 q06q4 l8q8
IDS=$(seq -s, 100 131)
for m in l8q4 q06q4 l8q8; do call_logits /tmp/s/$m "kiln X=1" "kiln KILN_CUDA_GEMV_TC_SK=0"; done
for r in 1 2; do
  for v in X=1 KILN_CUDA_GEMV_TC_SK=0; do call_b1 l8q4 kiln $v; call_b1 q06q4 kiln $v; done
done
for v in X=1 KILN_CUDA_GEMV_TC_SK=0; do call_b1 l8q8 kiln $v; done
echo "bench at $(el) s" >> $S
for v in X=1 KILN_CUDA_GEMV_TC_SK=0; do
  env $v KILN_CUDA_GRAPH=0 KILN_CUDA_GEMV_TC_TRACE=/tmp/gt.txt KILN_CUDA_GEMV_TC_TRACE_SKIP=256 \
    timeout 90 $K bench /tmp/s/l8q4 --backend cuda --prompt-tokens 2048 --gen-tokens 4 --runs 1 > /dev/null 2>&1
  echo "== trace $v rc=$?" >> $OUT/trace.txt
  python3 bench/cuda/gemv_tc_trace.py /tmp/gt.txt >> $OUT/trace.txt 2>&1
done
echo "trace at $(el) s" >> $S
cat $S $OUT/probe.txt $OUT/peer.txt $OUT/bench.txt
