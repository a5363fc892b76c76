#!/bin/bash
# call_s33c.sh — session 33, call 4: test_cuda_shapes (new) — 2-layer qwen3-0.6b bf16 / q4 and llama-3.2-1b q8
# synths on "cuda" against "cpu" at real shapes: prompts of 1..300 tokens, a decode through 400 positions, mixed
# steps. Within 1e-2 of the cpu's logits.
#   PACK_BINS="test_cuda_shapes"; run: bash bench/cuda/call_s33c.sh PKG
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
timeout 500 /tmp/k/test_cuda_shapes > $OUT/shapes.log 2>&1; echo "shapes: rc=$? at $(el) s" >> "$S"
grep "^#\|FAIL\|checks\|cuda:" $OUT/shapes.log | head -60 >> "$S"
cat "$S"
