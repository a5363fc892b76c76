#!/usr/bin/env bash
# `kiln --version` (also -V, version): exit 0; the version and the commit on line 1, the backends
# this binary has on line 2. The commit is git's (12 hex digits, -dirty for a changed tree) or
# "unknown" where the build had no git checkout.
set -u
KILN=${1:?usage: version.sh path/to/kiln}
fail=0
for flag in --version -V version; do
  out=$("$KILN" $flag 2>&1); rc=$?
  [ "$rc" -eq 0 ] || { echo "FAIL: kiln $flag exited $rc"; fail=1; }
  grep -qE '^kiln [0-9]+\.[0-9]+\.[0-9]+ \(commit ([0-9a-f]{7,}(-dirty)?|unknown)\)$' <<<"$(head -1 <<<"$out")" \
    || { echo "FAIL: kiln $flag line 1: $(head -1 <<<"$out")"; fail=1; }
  grep -qE '^backends: cpu \((avx512\+amx|avx512|avx2\+vnni|avx2|avx2-fma|scalar) kernels here\), cpu-ref' <<<"$(sed -n 2p <<<"$out")" \
    || { echo "FAIL: kiln $flag line 2: $(sed -n 2p <<<"$out")"; fail=1; }
done
"$KILN" --help | head -1 | grep -q -- "--version" || { echo "FAIL: kiln --help does not mention --version"; fail=1; }
[ "$fail" -eq 0 ] && echo "version: ok"
exit $fail
