#!/bin/bash
# call_s50e.sh — session 50: call 4 had wgm_kernel (v8) clean under racecheck on the quick subset but 57 errors on the
# GEMV subset, all write-after-read (a consumer's code read in wg_words, then the producer's wg_cp16 refill of that
# stage). The quick subset's two cases never refill a stage (their splits fit the 6-stage ring), so calls 1-3 could not
# see this side; it now has a third case whose splits are longer than the ring. With
# bench/cuda/qwg_allarrive_s50.patch applied: racecheck on wgm_kernel alone with the default release (__syncwarp + one
# empty arrive a warp), KILN_CUDA_QWG_FILLWAIT=1 (the fill side changed only) and =2 (every consumer lane arrives):
# clean only under =2 means racecheck does not carry __syncwarp's ordering into lane 0's release.
# Package: PATCH=bench/cuda/qwg_allarrive_s50.patch build_here.sh TREE test_cuda_kernels; PACK_BINS="test_cuda_kernels".
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
KILN_CUDA_QWG_DEBUG=2 KILN_CUDA_TEST_QWG_ONLY=quick /tmp/k/test_cuda_kernels 2>&1 | grep -a "4096x8192\|checks" | sort | uniq -c | head -8 >> "$S"
for v in X=1 KILN_CUDA_QWG_FILLWAIT=1 KILN_CUDA_QWG_FILLWAIT=2; do
  call_t1 quick_${v#*=} KILN_CUDA_TEST_QWG_ONLY=quick $v
  call_san racecheck 150 race_${v#*=} KILN_CUDA_TEST_QWG_ONLY=quick $v -- --kernel-name kns=wgm_kernel /tmp/k/test_cuda_kernels
done
echo "done at $(el) s" >> "$S"
# and, where the package has kiln: batch-1 decode of llama-3-8b at 3 and 6 bits (MLX, group 64) — never measured on
# CUDA; these bit widths take the warp-per-row f32 GEMV at one token — against q4 (the tensor-core GEMV) in the same call
if [ -x /tmp/k/kiln ]; then
  call_synth q3 l8q3; call_synth q6 l8q6; call_synth q4 l8q4
  call_wait l8q3 l8q6 l8q4
  for m in l8q4 l8q3 l8q6 l8q4; do
    echo "== b1 $m $(timeout 90 /tmp/k/kiln bench /tmp/s/$m --backend cuda --prompt-tokens 2048 --gen-tokens 128 --runs 2 --json 2>/dev/null | tail -1 | cut -c1-600)" >> "$S"
  done
  echo "bench done at $(el) s" >> "$S"
fi
