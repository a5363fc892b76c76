#!/bin/bash
# call_s33d.sh — session 33, call 6: test_cuda_shapes with four more checkpoints (llama-3-8b q4, qwen3.5-0.8b bf16
# and q4 at 4 layers, gemma3-1b q4 at 6 layers decoding past its 512-token window), each alone so one failure
# does not hide the rest.   PACK_BINS="test_cuda_shapes"; run: bash bench/cuda/call_s33d.sh PKG
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
for i in 3 4 5 6; do
  KILN_TEST_SHAPES_ONLY=$i timeout 300 /tmp/k/test_cuda_shapes > $OUT/shapes_$i.log 2>&1; echo "shapes $i: rc=$? at $(el) s" >> "$S"
  grep "^#\|checks\|cuda:" $OUT/shapes_$i.log | head -8 >> "$S"; grep FAIL $OUT/shapes_$i.log | head -5 >> "$S"
done
cat "$S"
