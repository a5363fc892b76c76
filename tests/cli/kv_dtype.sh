#!/usr/bin/env bash
# `kiln logits --kv-dtype D`: the cache dtype is honored (f32 by default; f16/bf16 round K/V,
# so their logits differ from f32's), and per dtype the decode-sized tiles that read K/V
# straight from the cache rows (chunks of 1 token: attention_tile_body.h's direct path,
# which widens f16, bf16 and f32 in the load) give byte-identical logits to the prefill
# tiles that convert each block first (all tokens at once). Two architectures, 60 ids.
set -u
KILN=${1:?usage: kv_dtype.sh path/to/kiln}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
ids=$(for i in $(seq 0 59); do echo $(( (i * 37 + 11) % 500 + 5 )); done | paste -sd,)
fail=0
for m in qwen3-tiny llama-tiny; do
  M=tests/fixtures/models/$m
  "$KILN" logits $M --ids $ids --out "$tmp/$m-default.npy" || { echo "FAIL: $m default"; fail=1; continue; }
  for d in f32 f16 bf16; do
    "$KILN" logits $M --ids $ids --kv-dtype $d --out "$tmp/$m-$d.npy" || { echo "FAIL: $m $d"; fail=1; continue; }
    "$KILN" logits $M --ids $ids --kv-dtype $d --chunk 1 --out "$tmp/$m-$d-c1.npy" || { echo "FAIL: $m $d chunk 1"; fail=1; continue; }
    cmp -s "$tmp/$m-$d.npy" "$tmp/$m-$d-c1.npy" || { echo "FAIL: $m $d: chunk-1 (direct decode path) logits differ from the prefill's"; fail=1; }
  done
  cmp -s "$tmp/$m-default.npy" "$tmp/$m-f32.npy" || { echo "FAIL: $m: the default cache is not f32"; fail=1; }
  for d in f16 bf16; do
    cmp -s "$tmp/$m-f32.npy" "$tmp/$m-$d.npy" && { echo "FAIL: $m: --kv-dtype $d gave f32's logits (flag ignored?)"; fail=1; }
  done
done
[ "$fail" -eq 0 ] && echo "kv_dtype: ok"
exit $fail
