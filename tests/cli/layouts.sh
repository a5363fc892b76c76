#!/usr/bin/env bash
# The same weights in every layout kiln reads must give byte-identical logits: plain HF,
# VL wrapper (text_config + model.language_model.), mlx-community (language_model.model.),
# and sharded with an index. Also for a quantized checkpoint (MLX q4, tied lm_head).
set -u
KILN=${1:?usage: layouts.sh path/to/kiln}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
for m in llama-tiny qwen3-tiny-mlx-mixed; do
  python3 tests/cli/make_layouts.py tests/fixtures/models/$m "$tmp/$m"
  "$KILN" logits tests/fixtures/models/$m --ids 5,17,200,3,99 --out "$tmp/$m.npy" || { fail=$((fail+1)); continue; }
  for layout in vl mlx shard; do
    if "$KILN" logits "$tmp/$m/$layout" --ids 5,17,200,3,99 --out "$tmp/$m-$layout.npy" && cmp -s "$tmp/$m.npy" "$tmp/$m-$layout.npy"; then
      pass=$((pass+1))
    else
      fail=$((fail+1)); echo "FAIL: $m in the $layout layout"
    fi
  done
done
echo "layouts: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
