#!/bin/bash
# pack.sh — the files a device call needs, built here: kiln, the CUDA tests and the probe
# (stripped), plus the shared libraries kiln links that the bare GPU machine lacks (jansson,
# pcre2, utf8proc, microhttpd and gnutls' chain), into one tar.xz under a git-ignored dir.
#
#   bench/cuda/pack.sh BUILD_DIR PKG_DIR       → PKG_DIR/kiln-cuda.tar.xz
# PACK_BINS="kiln ..." packs only those binaries (the carry limit: 64 MiB with the working tree, counted
# in disk blocks — `git ls-files -z | xargs -0 du -k` — not apparent sizes: ~51 MiB with everything, ~42 with
# the big untracked-for-the-call files moved out; a package over ~21.5 MiB then also needs
# models/kiln-tiny/model.safetensors out, which costs test_cuda_parity its 11 kiln-tiny checks).
# On the GPU machine: mkdir -p /tmp/k && tar xJf PKG_DIR/kiln-cuda.tar.xz -C /tmp/k &&
#   export LD_LIBRARY_PATH=/tmp/k/lib:$LD_LIBRARY_PATH; binaries are in /tmp/k.
# The call scripts (call_lib.sh's call_unpack, combined.sh) take that file or PKG_DIR (since session 53, whose first call
# passed the folder to scripts that took only the file: tar failed and every step after it ran nothing).
set -eu
B=${1:?build dir}; P=${2:?package dir}
T=$(mktemp -d)
mkdir -p "$T/lib" "$P"
for f in ${PACK_BINS:-kiln test_cuda_kernels test_cuda_parity test_cuda_hybrid test_cuda_sample test_cuda_shapes kiln-cuda-probe}; do strip -o "$T/$f" "$B/$f"; done
for l in libjansson.so.4 libpcre2-8.so.0 libutf8proc.so.2 libmicrohttpd.so.12 libgnutls.so.30 libhogweed.so.6 \
         libnettle.so.8 libgmp.so.10 libidn2.so.0 libunistring.so.2 libp11-kit.so.0 libtasn1.so.6 libffi.so.8; do
  cp -L "/lib/x86_64-linux-gnu/$l" "$T/lib/"
done
# a 256 MiB dictionary (-9e's is 64 MiB), so the binaries' identical CUDA fatbins compress as one: each
# stripped binary is ~60 MB now, and with 64 MiB the fatbin of the third was out of the window of the
# first (kiln, test_cuda_kernels, test_cuda_shapes and the probe: 47.1 MB at -9e, 25.6 MB this way; the
# device call carries at most 64 MiB with the working tree). Needs ~2.5 GB to compress, 256 MiB to unpack.
XZ_OPT=${XZ_OPT:---lzma2=preset=9e,dict=256MiB -T1} tar cJf "$P/kiln-cuda.tar.xz" -C "$T" .
rm -rf "$T"
ls -la "$P/kiln-cuda.tar.xz"
