#!/bin/bash
# call_s33b.sh — session 33, call 3: the graph check widened (qwen3-0.6b and llama-3.2-1b shapes,
# batch-1 and four ragged rows that finish one by one), as built and with KILN_CUDA_GRAPH_SIG=0 (the
# old key: expected to fail); the engine on a short prompt past 128 positions (the crash's path
# through kiln bench --concurrency); the whole test_cuda_hybrid.
#   PACK_BINS="kiln test_cuda_hybrid"; run: bash bench/cuda/call_s33b.sh PKG
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
KILN_TEST_HYBRID_ONLY=graph timeout 200 /tmp/k/test_cuda_hybrid > $OUT/graph_fixed.log 2>&1; echo "fixed: rc=$? at $(el) s" >> "$S"
KILN_CUDA_GRAPH_SIG=0 KILN_TEST_HYBRID_ONLY=graph timeout 200 /tmp/k/test_cuda_hybrid > $OUT/graph_sig0.log 2>&1; echo "sig0 (old key): rc=$? at $(el) s" >> "$S"
call_synth bf16 q06bf16
call_wait q06bf16
for c in 1 4; do
  timeout 120 /tmp/k/kiln bench /tmp/s/q06bf16 --backend cuda --concurrency $c --prompt-tokens 16 --gen-tokens 300 --json > $OUT/eng_c$c.json 2>&1
  echo "engine c=$c prompt 16 gen 300: rc=$? $(grep -o '"decode_tok_s": [0-9.]*' $OUT/eng_c$c.json | head -1)" >> "$S"
done
timeout 200 /tmp/k/test_cuda_hybrid > $OUT/hybrid.log 2>&1; echo "hybrid all: rc=$? at $(el) s" >> "$S"
for f in graph_fixed graph_sig0 hybrid; do echo "== $f"; grep "^#.*graph\|FAIL\|checks\|cuda:" $OUT/$f.log | head -12; done >> "$S"
cat "$S"
