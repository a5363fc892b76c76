#!/bin/bash
# call_s55b.sh — session 55's first device call (replaces call_s55a.sh, which it contains): the batch-1 q4/q8 GEMV's
# tile-group tail three ways — KILN_CUDA_GEMV_TC_S8K=4096 (a tile's K over 8 warps from K = 4096), S8R=8192 (that
# only for weights of >= 8192 rows) and the new KILN_CUDA_GEMV_TC_EVEN=1 (as few groups as give the same rounds,
# every group the same tile count) — the GEMV test subset under each (bitwise invariants across launches), batch-1
# decode of llama-3-8b q4 alternating the five settings over two rounds, a trace of each; then the issue table
# without the tests (combined.sh: probe, batch-1 decode / 2048-token prefill of llama-3-8b and qwen3-0.6b at q4 and
# bf16, llama-3-8b q4 through the engine at c=1 and 64). Package: bash bench/cuda/build_here.sh /work/cb/s26 kiln
# test_cuda_kernels kiln-cuda-probe && PACK_BINS="kiln test_cuda_kernels kiln-cuda-probe" bash bench/cuda/pack.sh
# /work/cb/s26/b build-lead; carry ["build-lead"].
# Since session 55's review the three knobs live in bench/cuda/gemv_tail_s55.patch (PATCH= build_here.sh to rerun this).
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
call_t1 gemv8 KILN_CUDA_TEST_GEMV_ONLY=1 KILN_CUDA_GEMV_TC_S8K=4096 &
call_t1 gemv8r KILN_CUDA_TEST_GEMV_ONLY=1 KILN_CUDA_GEMV_TC_S8R=8192 &
call_t1 gemvev KILN_CUDA_TEST_GEMV_ONLY=1 KILN_CUDA_GEMV_TC_EVEN=1
wait
call_wait l8q4
V="X=1 KILN_CUDA_GEMV_TC_S8K=4096 KILN_CUDA_GEMV_TC_S8R=8192 KILN_CUDA_GEMV_TC_EVEN=1 KILN_CUDA_GEMV_TC_EVEN=1:KILN_CUDA_GEMV_TC_S8R=8192"
for r in 1 2; do for v in $V; do call_b1 l8q4 kiln "${v//:/ }"; done; done
paste - - < $OUT/bench.txt >> "$S"
call_wait q06q4
for v in X=1 KILN_CUDA_GEMV_TC_EVEN=1 X=1 KILN_CUDA_GEMV_TC_EVEN=1; do call_b1 q06q4 kiln $v; done
tail -8 $OUT/bench.txt | paste - - >> "$S"
for v in X=1 KILN_CUDA_GEMV_TC_S8K=4096 KILN_CUDA_GEMV_TC_EVEN=1; do
  env $v KILN_CUDA_GRAPH=0 KILN_CUDA_GEMV_TC_TRACE=/tmp/gt.txt timeout 60 /tmp/k/kiln bench /tmp/s/l8q4 --backend cuda --prompt-tokens 2048 \
    --gen-tokens 8 --runs 1 > /dev/null 2>&1
  echo "=== trace $v" >> "$S"; python3 bench/cuda/gemv_tc_trace.py /tmp/gt.txt 2>&1 | tail -8 >> "$S"; rm -f /tmp/gt.txt
done
echo "done at $(el) s" >> "$S"
cp "$S" "$OUT/s55b.txt"
TESTS=" " MODELS="l8q4 l8bf16 q06q4 q06bf16" CONC="l8q4:1,64" bash bench/cuda/combined.sh "$P"
