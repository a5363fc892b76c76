#!/bin/bash
# x16_decode_diag.sh — the short device call that test_x16_decode's open question needs (bench/cuda/RESULTS.md,
# session 16 lead, second call): with the decode attention's bf16 copy on (KILN_CUDA_ATTN_X16=1, opt-in) the qwen3
# head-norm decode chain differed from KILN_CUDA_X16=0 while the llama fused-rope chain did not. The test now
# compares op by op and names the first op whose output differs; this runs it under the switches that split the
# suspects (bfmma v1 / cuBLASLt for the matmuls, positions and tables from device memory, no programmatic
# dependent launch). ~30 s of command on a warm machine.
#   run: bash bench/cuda/x16_decode_diag.sh PKG/kiln-cuda.tar.xz     (carry: the package's folder; pack.sh)
P=${1:?usage: x16_decode_diag.sh PKG.tar.xz}
OUT=${OUT:?set by the run tool}
mkdir -p /tmp/k && tar xJf "$P" -C /tmp/k && export LD_LIBRARY_PATH=/tmp/k/lib
# VARS: the switches (default: all six, op by op); session 17 found every op-by-op form bitwise equal, so
# CHAIN=1 runs them with KILN_CUDA_TEST_X16_CHAIN=1 (one comparison at the end: no sync inside the chain)
VARS=${VARS:-"X=1 KILN_CUDA_BFMMA_V=1 KILN_CUDA_BFMMA=0 KILN_CUDA_ATTN_TAB=0 KILN_CUDA_PDL=0 KILN_CUDA_GRAPH=0"}
[ "${CHAIN:-0}" = 1 ] && export KILN_CUDA_TEST_X16_CHAIN=1
for v in $VARS; do
  echo "== $v" >> "$OUT/x16dec.txt"
  env $v KILN_CUDA_ATTN_X16=1 KILN_CUDA_TEST_X16_ONLY=decode timeout 60 /tmp/k/test_cuda_kernels 2>&1 | grep -i -E "fail|x16 decode|checks" | head -8 >> "$OUT/x16dec.txt"
done
cat "$OUT/x16dec.txt"
