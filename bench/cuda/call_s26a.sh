#!/bin/bash
# call_s26a.sh — session 26, call 1: the MLX 4/8-bit o-projection's weight prefetched into L2 while the batch-1
# decode attention runs (matmul_gemv_tc.cu TC_PF; KILN_CUDA_GEMV_TC_L2PF MB, 0 = off = the plain kernel):
# test_cuda_parity, logits md5 with the prefetch off / on (a hint only: must be bitwise), batch-1 decode at 2048
# positions alternating budgets, the gemv_tc trace (o GEMV's entry vs the attention's end) with it off / on, and the
# SASS of the 4-bit 64-token wgmma kernel (for the c=64 work).
#   run: bash bench/cuda/call_s26a.sh PKG   (PACK_BINS="kiln test_cuda_parity")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
call_synth q8 l8q8
call_tbin test_cuda_parity
while [ ! -f /tmp/s/l8q4.done ] || [ ! -f /tmp/s/l8q8.done ] || [ ! -f /tmp/s/q06q4.done ]; do sleep 1; done
echo "tests + synth done at $(el) s" >> "$S"
IDS=$(seq -s, 10 33)
for m in /tmp/s/l8q4 /tmp/s/l8q8 tests/fixtures/models/llama-tiny-mlx-q4 tests/fixtures/models/qwen3-tiny-mlx-mixed; do
  call_logits $m "kiln KILN_CUDA_GEMV_TC_L2PF=0" "kiln X=1" "kiln KILN_CUDA_GEMV_TC_L2PF=64"
done
for rep in 1 2; do
  for v in "KILN_CUDA_GEMV_TC_L2PF=0" "X=1" "KILN_CUDA_GEMV_TC_L2PF=8" "KILN_CUDA_GEMV_TC_L2PF=32"; do call_b1 l8q4 kiln $v; done
done
for v in "KILN_CUDA_GEMV_TC_L2PF=0" "X=1" "KILN_CUDA_GEMV_TC_L2PF=32" "KILN_CUDA_GEMV_TC_L2PF=0" "X=1"; do call_b1 l8q8 kiln $v; done
for v in "KILN_CUDA_GEMV_TC_L2PF=0" "X=1" "KILN_CUDA_GEMV_TC_L2PF=0" "X=1"; do call_b1 q06q4 kiln $v; done
echo "bench done at $(el) s" >> "$S"
for v in 0 16; do
  KILN_CUDA_GEMV_TC_L2PF=$v KILN_CUDA_GRAPH=0 KILN_CUDA_GEMV_TC_TRACE=/tmp/gt$v.txt KILN_CUDA_GEMV_TC_TRACE_SKIP=256 \
    timeout 60 /tmp/k/kiln bench /tmp/s/l8q4 --backend cuda --prompt-tokens 2048 --gen-tokens 4 --runs 1 > /dev/null 2>&1
  echo "== trace L2PF=$v" >> $OUT/trace.txt
  python3 bench/cuda/gemv_tc_trace.py /tmp/gt$v.txt >> $OUT/trace.txt 2>&1
done
if command -v cuobjdump > /dev/null; then
  cuobjdump -sass -fun '_Z10wgm_kernelILi4ELi64ELi1ELi0EEvPfPKhPKfi7dweightiiiii' /tmp/k/kiln > $OUT/wgm_sass.txt 2>&1
  cuobjdump -sass -fun '_Z14gemv_tc_kernelILi4ELi4ELi0ELi0EEv7tc_args' /tmp/k/kiln > $OUT/tc_sass.txt 2>&1
fi
echo "all done at $(el) s" >> "$S"
cat $S
