#!/bin/bash
# call_s24d.sh — session 24, call 4: the TF32 split as mask + subtract, unrolled k-steps, no division in the copy loop. The same commands as
# call_s24b.sh (tests, prefill A/B against KILN_CUDA_DELTA=seq, ncu per kernel and ncu sections of the delta
# kernels); only the package differed.
#   run: bash bench/cuda/call_s24d.sh PKG
exec bash "$(dirname "$0")/call_s24b.sh" "$@"
