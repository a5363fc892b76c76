#!/bin/bash
# call_s42g.sh — for bench/cuda/qd_prologue.patch (session 42, compiled, NOT run): the MLX convert launch's prologue
# loads (x's exponent, each weight's bound) issued together instead of one exposed round trip each. The package:
# main as kiln-base, main + the patch as kiln and test_cuda_kernels (build_here.sh's next run reverts the patch):
#   PATCH=bench/cuda/qd_prologue.patch bash bench/cuda/build_here.sh /work/cb/s26 kiln test_cuda_kernels
#   PACK_BINS="kiln kiln-base test_cuda_kernels" bash bench/cuda/pack.sh /work/cb/s26/b build-lead   (kiln-tiny's weights parked)
# then:
#   run: bash bench/cuda/call_s42g.sh PKG
# The prefill-matmul tests, logits md5 of both binaries (bitwise by construction), ncu time / instructions of the convert
# launches per binary, prefill at 2048 alternating; and the convert grid A/B of call_s42f.sh on the patched binary.
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 q06q4 l8q4
call_t1 qgemm KILN_CUDA_TEST_QGEMM_ONLY=1
call_wait q06q4 l8q4
IDS=$(seq -s, 10 609)
for m in q06q4 l8q4; do
  for b in kiln-base kiln; do
    timeout 90 /tmp/k/$b logits /tmp/s/$m --backend cuda --ids "$IDS" --chunk 300 --out /tmp/lg.npy > /dev/null 2>&1
    echo "logits $m $b rc=$? $(md5sum < /tmp/lg.npy | cut -c1-12)" >> "$S"
  done
done
for b in kiln-base kiln "kiln KILN_CUDA_QDEQ_GRID=528" "kiln KILN_CUDA_QDEQ_GRID=264"; do
  set -- $b
  env ${2:-X=1} timeout 100 ncu --metrics gpu__time_duration.sum,smsp__inst_executed.sum -k regex:qd_convert_multi --csv /tmp/k/$1 bench /tmp/s/q06q4 \
    --backend cuda --prompt-tokens 2048 --gen-tokens 2 --runs 1 > /tmp/nc.csv 2>/dev/null
  python3 bench/cuda/ncu_launches.py "$b" >> "$S"
done
for i in 1 2; do for m in q06q4 l8q4; do for b in kiln-base kiln; do call_prefill $m $b 3; done; done; done
nvidia-smi --query-gpu=name --format=csv,noheader >> "$S"
cat "$S" $OUT/bench.txt
