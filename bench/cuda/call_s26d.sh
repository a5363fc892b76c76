#!/bin/bash
# call_s26d.sh — session 26, call 4: call_s26c.sh's protocol with the copy of the chunk loop picked per warpgroup
# (call 3 picked it per warp and failed test_qwg at group 32 — wgmma is warpgroup-collective), plus test_cuda_parity
# and llama-3-8b q8 through the engine; the QWG bench of the new binary only (the old one's numbers: calls 2 and 3).
#   run: bash bench/cuda/call_s26d.sh PKG   (PACK_BINS="kiln kiln-old test_cuda_kernels test_cuda_parity")
CALL_Q8=1 CALL_TBINS=test_cuda_parity CALL_QBINS="test_cuda_kernels test_cuda_kernels" CALL_Q06="kiln-old kiln kiln-old kiln" \
  exec bash bench/cuda/call_s26b.sh "$@"
