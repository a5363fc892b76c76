#!/bin/bash
# call_s29g.sh — session 29, call 7: the MLX prefill matmul in chunks of weight rows (opt-in KILN_CUDA_QDEQ_CHUNK=MB:
# each chunk's f16 rows written into one scratch and read by its GEMM while they may sit in L2). The prefill matmul
# tests with 1-MB chunks, then prefill tok/s (2048-token prompt, best of 3) at 0 (off), 8, 16 and 24 MB, two rounds.
#   run: bash bench/cuda/call_s29g.sh PKG   (PACK_BINS="kiln test_cuda_kernels")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4
call_t1 qgemm_chunk1 KILN_CUDA_TEST_QGEMM_ONLY=1 KILN_CUDA_QDEQ_CHUNK=1
while [ ! -f /tmp/s/l8q4.done ]; do sleep 1; done
for i in 1 2; do
  for ch in 0 8 16 24; do
    echo "== prefill l8q4 chunk $ch $(KILN_CUDA_QDEQ_CHUNK=$ch timeout 60 /tmp/k/kiln bench /tmp/s/l8q4 --backend cuda --prompt-tokens 2048 --gen-tokens 4 --runs 3 --json 2>/dev/null | tail -1 | grep -o '"prefill_tok_s": [0-9.]*')" >> $OUT/bench.txt
  done
done
echo "all done at $(el) s" >> "$S"
cat "$S" $OUT/bench.txt
