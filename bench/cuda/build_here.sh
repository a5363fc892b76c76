#!/bin/bash
# build_here.sh — the CUDA binaries for a device call, built on this (GPU-less) machine in a tree of their own
# outside the repository, so that a call's carry holds the package only (bench/cuda/pack.sh), not a build dir.
#
#   bench/cuda/build_here.sh [TREE] [TARGET...]     TREE default /work/cb/s26; targets default: kiln, the five
#                                                   CUDA test binaries and kiln-cuda-probe
#   then: PACK_BINS="kiln test_cuda_kernels" bash bench/cuda/pack.sh TREE/b build-lead   (carry ["build-lead"])
#   CMAKE_EXTRA="-DKILN_CUDA_TIMELINE=ON" bench/cuda/build_here.sh /work/cb/s55t kiln   extra cmake options, read when TREE's
#                                                   build dir is configured (a tree of its own: the timeline build)
#   PATCH=bench/cuda/x.patch bench/cuda/build_here.sh ...   an A/B pair: kiln built from the tree as it is, copied to
#                                                   TREE/b/kiln-base, then the patch applied in TREE/src and the
#                                                   targets built again (kiln = with the patch; pack kiln-base too)
#
# TREE/src holds a copy of the tracked sources (src, tests, cmake, bench, CMakeLists.txt), refreshed on every run
# by content: a file is rewritten only where it differs, so make rebuilds what changed and nothing else (tar would
# keep the repository's old mtimes: a source older than its object in the tree is not rebuilt). A patch under
# test is applied in TREE/src after this (and reverted by the next run, which restores the tracked text).
# With ccache installed (apt-get install ccache) the first build from a bare machine takes ~7 min on 2 cores;
# nvcc 13 at sm_90a (+ PTX) as `make cuda` builds it.
set -eu
TREE=${1:-/work/cb/s26}
shift || true
TARGETS=${*:-kiln test_cuda_kernels test_cuda_parity test_cuda_hybrid test_cuda_sample test_cuda_shapes kiln-cuda-probe}
ROOT=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
mkdir -p "$TREE/src" "$TREE/b"
n=0
while IFS= read -r -d '' f; do
  if ! cmp -s "$ROOT/$f" "$TREE/src/$f"; then mkdir -p "$TREE/src/$(dirname "$f")"; cp "$ROOT/$f" "$TREE/src/$f"; n=$((n + 1)); fi
done < <(git -C "$ROOT" ls-files -z src tests cmake bench CMakeLists.txt)
echo "build_here: $n file(s) refreshed in $TREE/src"
export PATH=$PATH:/usr/local/cuda/bin:/usr/local/cuda-13.0/bin
L=""
command -v ccache > /dev/null && L="-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache"
[ -f "$TREE/b/CMakeCache.txt" ] || cmake -S "$TREE/src" -B "$TREE/b" -DCMAKE_BUILD_TYPE=Release -DKILN_CUDA=ON $L ${CMAKE_EXTRA:-} > "$TREE/cmake.log"
build() { cmake --build "$TREE/b" -j"$(nproc)" --target "$@" 2>&1 | grep -E "error|warning:|Built target (kiln|test_cuda)" || true; }
if [ -n "${PATCH:-}" ]; then
  build kiln
  [ -x "$TREE/b/kiln" ] || { echo "build_here: kiln missing" >&2; exit 1; }
  cp "$TREE/b/kiln" "$TREE/b/kiln-base"
  (cd "$TREE/src" && patch -p1 --no-backup-if-mismatch < "$ROOT/$PATCH") > /dev/null || { echo "build_here: $PATCH does not apply" >&2; exit 1; }
  echo "build_here: kiln-base without, kiln with $PATCH"
fi
build $TARGETS
for t in $TARGETS; do [ -x "$TREE/b/$t" ] || { echo "build_here: $t missing" >&2; exit 1; }; done
