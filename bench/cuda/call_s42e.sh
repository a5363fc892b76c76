#!/bin/bash
# call_s42e.sh — session 42, call 5: qd_words_lean (the convert launch's word walk without per-thread divisions, 64-bit
# indices or the scale type's switch; KILN_CUDA_QDEQ_LEAN=0: qd_words) — the prefill-matmul tests (bitwise against the
# per-element kernel, the per-matmul word kernel, divisions and LEAN=0; f32 scales added), test_cuda_shapes, logits md5
# both ways, prefill at 2048 alternating, ncu of the convert launches both ways.   kiln test_cuda_kernels test_cuda_shapes
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 q06q4 l8q4
call_t1 qgemm KILN_CUDA_TEST_QGEMM_ONLY=1
grep "qdeq f16\|qd att16\|qd fused" /tmp/t_qgemm.log >> "$S"
timeout 200 /tmp/k/test_cuda_shapes > /tmp/shp.log 2>&1; echo "shapes rc=$? $(tail -1 /tmp/shp.log) (at $(el) s)" >> "$S"; grep -i fail /tmp/shp.log | head -5 >> "$S"
call_wait q06q4 l8q4
for m in q06q4 l8q4; do
  for v in X=1 KILN_CUDA_QDEQ_LEAN=0; do
    env $v timeout 90 /tmp/k/kiln logits /tmp/s/$m --backend cuda --ids "$(seq -s, 10 609)" --chunk 300 --out /tmp/lg.npy > /dev/null 2>&1
    echo "logits $m $v rc=$? $(md5sum < /tmp/lg.npy | cut -c1-12)" >> "$S"
  done
done
call_prefill_ab "q06q4 l8q4" 2048 X=1 KILN_CUDA_QDEQ_LEAN=0 X=1 KILN_CUDA_QDEQ_LEAN=0
for v in X=1 KILN_CUDA_QDEQ_LEAN=0; do
  env $v timeout 120 ncu --metrics gpu__time_duration.sum,smsp__inst_executed.sum -k regex:qd_convert_multi --csv /tmp/k/kiln bench /tmp/s/q06q4 --backend cuda \
    --prompt-tokens 2048 --gen-tokens 2 --runs 1 > /tmp/nc.csv 2>/dev/null
  python3 bench/cuda/ncu_launches.py "$v" >> "$S"
done
nvidia-smi --query-gpu=name --format=csv,noheader >> "$S"
cat "$S" $OUT/bench.txt
