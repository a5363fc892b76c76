#!/bin/bash
# call_s41a.sh — session 41, call 1: the fused prefill ops for MLX weights (matmul_dequant.cu: the norm writing the
# f16 GEMMs' x with a static bound, matmul_add with beta = 1, rms_mlp with the GLU scaled per row) — the prefill
# matmul subset of test_cuda_kernels (test_qd_fused), test_cuda_shapes (every checkpoint against the CPU at prompts
# up to 300 tokens: the fused ops at real shapes, q4 qwen3 / llama / qwen3.5 / gemma3), `kiln logits` default vs
# KILN_CUDA_QD_FUSE=0 (md5 and the largest difference), the probe, prefill tok/s at 2048 on vs off (and with the
# weight cache), and the engine's c=1 / c=64 on vs off (the 64 prompts' prefill steps take these ops).
#   PACK_BINS="kiln test_cuda_kernels test_cuda_shapes kiln-cuda-probe"; run: bash bench/cuda/call_s41a.sh PKG
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
call_synth q8 q06q8
call_synth bf16 q06bf16
call_t1 qgemm KILN_CUDA_TEST_QGEMM_ONLY=1
grep "qd fused\|lt fused\|qdeq f16:" /tmp/t_qgemm.log >> "$S"
timeout 200 /tmp/k/test_cuda_shapes > /tmp/shp.log 2>&1
echo "shapes rc=$? $(tail -1 /tmp/shp.log) (at $(el) s)" >> "$S"; grep -i "fail\|worst" /tmp/shp.log | head -12 >> "$S"
/tmp/k/kiln-cuda-probe > "$OUT/probe.jsonl" 2>&1
call_wait l8q4 q06q4 q06q8 q06bf16
for m in q06q4 l8q4; do
  for v in X=1 KILN_CUDA_QD_FUSE=0; do
    env $v timeout 90 /tmp/k/kiln logits /tmp/s/$m --backend cuda --ids "$(seq -s, 10 609)" --chunk 300 --out /tmp/lg_$v.npy > /tmp/lg.log 2>&1
    echo "logits $m chunk 300 $v rc=$? $(md5sum < /tmp/lg_$v.npy | cut -c1-12)" >> "$S"
  done
  python3 -c "
import numpy as np; a=np.load('/tmp/lg_X=1.npy'); b=np.load('/tmp/lg_KILN_CUDA_QD_FUSE=0.npy')
d=np.abs(a.astype(np.float64)-b); print('logits $m max|diff| %.3g max|logit| %.3g rel %.3g argmax equal %d of %d' % (d.max(), np.abs(b).max(), d.max()/np.abs(b).max(), (a.argmax(-1)==b.argmax(-1)).sum(), a.shape[0]))" >> "$S" 2>&1
done
echo "logits done at $(el) s" >> "$S"
call_prefill_ab "q06q4 l8q4" 2048 X=1 KILN_CUDA_QD_FUSE=0 X=1 KILN_CUDA_QD_FUSE=0
call_prefill_ab q06q8 2048 X=1 KILN_CUDA_QD_FUSE=0
call_prefill_ab q06bf16 2048 X=1
call_prefill_ab "q06q4 l8q4" 2048 KILN_CUDA_QDEQ_CACHE_GB=20 "KILN_CUDA_QDEQ_CACHE_GB=20 KILN_CUDA_QD_FUSE=0"
echo "prefill done at $(el) s" >> "$S"
call_conc_env l8q4 X=1 1,64
call_conc_env l8q4 KILN_CUDA_QD_FUSE=0 1,64
echo "conc done at $(el) s" >> "$S"
cat "$S" $OUT/bench.txt
