#!/usr/bin/env bash
# `kiln logits --kv-dtype D`: the cache dtype is honored (f32 by default; f16/bf16/q8 round K/V,
# so their logits differ from f32's), and per dtype the decode-sized tiles that read K/V
# straight from the cache rows (chunks of 1 token: attention_tile_body.h's direct path,
# which widens f16, bf16, f32 and int8 codes in the load) give byte-identical logits to the
# prefill tiles that convert each block first (all tokens at once). Two architectures, 60 ids.
# q8 (int8 codes, a scale per row) stays near f32: max |logit − f32's| ≤ 5 % of max |logit|
# (measured 2.1 % qwen3-tiny, 1.1 % llama-tiny; bf16 0.7 / 0.5 %: an int8 row's step is
# max|x| / 127, so ~3-4x bf16's rounding is its expected cost, and a wrong scale or row is far
# outside the bar).
set -u
KILN=${1:?usage: kv_dtype.sh path/to/kiln}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
ids=$(for i in $(seq 0 59); do echo $(( (i * 37 + 11) % 500 + 5 )); done | paste -sd,)
fail=0
for m in qwen3-tiny llama-tiny; do
  M=tests/fixtures/models/$m
  "$KILN" logits $M --ids $ids --out "$tmp/$m-default.npy" || { echo "FAIL: $m default"; fail=1; continue; }
  for d in f32 f16 bf16 q8; do
    "$KILN" logits $M --ids $ids --kv-dtype $d --out "$tmp/$m-$d.npy" || { echo "FAIL: $m $d"; fail=1; continue; }
    "$KILN" logits $M --ids $ids --kv-dtype $d --chunk 1 --out "$tmp/$m-$d-c1.npy" || { echo "FAIL: $m $d chunk 1"; fail=1; continue; }
    cmp -s "$tmp/$m-$d.npy" "$tmp/$m-$d-c1.npy" || { echo "FAIL: $m $d: chunk-1 (direct decode path) logits differ from the prefill's"; fail=1; }
  done
  cmp -s "$tmp/$m-default.npy" "$tmp/$m-f32.npy" || { echo "FAIL: $m: the default cache is not f32"; fail=1; }
  for d in f16 bf16 q8; do
    cmp -s "$tmp/$m-f32.npy" "$tmp/$m-$d.npy" && { echo "FAIL: $m: --kv-dtype $d gave f32's logits (flag ignored?)"; fail=1; }
  done
  python3 - "$tmp/$m-f32.npy" "$tmp/$m-q8.npy" <<'PY' || { echo "FAIL: $m: --kv-dtype q8 logits too far from f32's"; fail=1; }
import ast, struct, sys
def load(p):
    b = open(p, 'rb').read()
    n = struct.unpack('<H', b[8:10])[0]
    shape = ast.literal_eval(b[10:10 + n].decode())['shape']
    k = 1
    for x in shape: k *= x
    return struct.unpack('<%df' % k, b[10 + n:10 + n + 4 * k])
a, b = load(sys.argv[1]), load(sys.argv[2])
rel = max(abs(x - y) for x, y in zip(a, b)) / max(abs(x) for x in a)
print('# q8 vs f32: max |diff| / max |logit| = %.4f' % rel)
sys.exit(0 if rel <= 0.05 else 1)
PY
done
[ "$fail" -eq 0 ] && echo "kv_dtype: ok"
exit $fail
