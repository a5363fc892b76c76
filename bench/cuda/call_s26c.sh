#!/bin/bash
# call_s26c.sh — session 26, call 3: call_s26b.sh's protocol on the revised kernel (the chunk loop in three copies
# picked once per warp, no spills; test_qwg failed at group 32: see call 4), qwen3-0.6b q4 twice.
#   run: bash bench/cuda/call_s26c.sh PKG   (PACK_BINS="kiln kiln-old test_cuda_kernels test_cuda_kernels-old")
CALL_Q06="kiln-old kiln kiln-old kiln" exec bash bench/cuda/call_s26b.sh "$@"
