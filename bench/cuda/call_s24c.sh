#!/bin/bash
# call_s24c.sh — session 24, call 3: the chunk kernel on tensor cores, TF32 split by cvt.rna. The same commands as
# call_s24b.sh (tests, prefill A/B against KILN_CUDA_DELTA=seq, ncu per kernel and ncu sections of the delta
# kernels); only the package differed.
#   run: bash bench/cuda/call_s24c.sh PKG
exec bash "$(dirname "$0")/call_s24b.sh" "$@"
