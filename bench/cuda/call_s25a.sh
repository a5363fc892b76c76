#!/bin/bash
# call_s25a.sh — session 25, call 1: session 24's two unrun patches — conv1d writing the row state itself
# in decode steps (bench/cuda/conv_decode_state.patch) and gemma.c through the fused ops
# (bench/cuda/gemma_fused_ops.patch): the MoE/hybrid subset (conv cases incl. a 5-row decode step),
# test_matmul_glu's subset, test_cuda_hybrid, test_cuda_parity; qwen3.5-2b and gemma3-1b bf16 batch-1
# kiln vs kiln-old (HEAD before the patches), alternating; then ncu of qwen3.5-2b decode steps and, where the
# machine has nsys, the same run inside the CUDA graph (--cuda-graph-trace=node).
#   run: bash bench/cuda/call_s25a.sh PKG   (PACK_BINS="kiln kiln-old test_cuda_kernels test_cuda_hybrid test_cuda_parity")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
echo "tools: $(which nsys ncu | tr '\n' ' ')" >> "$S"
call_hybrid_tests "bf16:q352bf16 bf16:g31bf16"
for m in q352bf16 g31bf16; do
  for bin in kiln kiln-old kiln kiln-old; do
    echo "== $m $bin" >> $OUT/bench.txt
    timeout 60 /tmp/k/$bin bench /tmp/s/$m --backend cuda --prompt-tokens 2048 --gen-tokens 128 --runs 2 --json 2>/dev/null | tail -1 >> $OUT/bench.txt
  done
done
echo "bench done at $(el) s" >> "$S"
KILN_CUDA_GRAPH=0 timeout 120 ncu --metrics gpu__time_duration.sum --csv /tmp/k/kiln bench /tmp/s/q352bf16 --backend cuda --prompt-tokens 16 --gen-tokens 4 --runs 1 > /tmp/ncu_q.csv 2>/tmp/ncu.err
python3 bench/cuda/ncu_sum.py /tmp/ncu_q.csv > $OUT/ncu_decode.txt 2>&1
cp /tmp/ncu_q.csv $OUT/
echo "ncu done at $(el) s" >> "$S"
if which nsys > /dev/null; then
  timeout 120 nsys profile --cuda-graph-trace=node -o /tmp/nsq -f true /tmp/k/kiln bench /tmp/s/q352bf16 --backend cuda --prompt-tokens 16 --gen-tokens 32 --runs 1 > /tmp/nsys.log 2>&1
  timeout 60 nsys stats --report cuda_gpu_kern_sum --format csv -o /tmp/nsq_stats /tmp/nsq.nsys-rep >> /tmp/nsys.log 2>&1
  timeout 60 nsys stats --report cuda_gpu_trace --format csv -o /tmp/nsq_trace /tmp/nsq.nsys-rep >> /tmp/nsys.log 2>&1
  cp /tmp/nsq_stats* /tmp/nsys.log $OUT/ 2>/dev/null; gzip -c /tmp/nsq_trace*.csv > $OUT/nsq_trace.csv.gz 2>/dev/null
  echo "nsys done at $(el) s" >> "$S"
fi
cat $S
