#!/bin/bash
# call_s18.sh — session 18's device call: combined.sh (all CUDA tests at default settings, probe,
# batch-1 benches with the prefill A/Bs, concurrency), then logits_ab.sh on the qwen3-0.6b and
# llama-3-8b bf16 synths (the fused prefill ops and the GEMMs side by side must be bitwise), then
# step_ncu.sh's llama-3-8b q4 64-row step and the 2048-token qwen3 prefill.
#   run: bash bench/cuda/call_s18.sh PKG/kiln-cuda.tar.xz  (carry: the package's folder)
P=${1:?package}
bash bench/cuda/combined.sh "$P"
export LD_LIBRARY_PATH=/tmp/k/lib
{ echo "== logits_ab (md5 of kiln logits, 300-token prefill)"
  for m in q06bf16 l8bf16; do
    [ -d /tmp/s/$m ] || continue
    echo "-- $m"
    bash bench/cuda/logits_ab.sh /tmp/k/kiln /tmp/s/$m - ${LOGITS_VARIANTS:-KILN_CUDA_LT_FUSE=0 KILN_CUDA_MM_CONC=128 KILN_CUDA_NORM16=block}
  done; } >> "$OUT/summary.txt" 2>&1
[ "${NCU:-1}" = 0 ] || DTYPES="" L8DTYPES="${L8DTYPES-q4}" KDIR=/tmp/k bash bench/cuda/step_ncu.sh -
tail -30 "$OUT/summary.txt"
