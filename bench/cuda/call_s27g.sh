#!/bin/bash
# call_s27g.sh — session 27, call 6: the final tree (568b39f: KV auto, PDL on the 64-token chain with plain loads) —
# the whole test_cuda_kernels, test_cuda_hybrid and test_cuda_parity at default settings.
#   run: bash bench/cuda/call_s27g.sh PKG   (PACK_BINS="kiln test_cuda_kernels test_cuda_parity test_cuda_hybrid")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_tbin test_cuda_kernels test_cuda_hybrid test_cuda_parity
echo "all done at $(el) s" >> "$S"
cat "$S"
