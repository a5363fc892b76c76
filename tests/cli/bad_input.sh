#!/usr/bin/env bash
# Bad input to the CLI: broken checkpoints and bad flag values. Each must exit non-zero
# (2 for usage, 1 otherwise) with a one-line message naming what was wrong, never crash
# (no signal exit), and leave no partial output file.
set -u
KILN=${1:?usage: bad_input.sh path/to/kiln}
M=tests/fixtures/models/llama-tiny
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 tests/cli/make_bad_checkpoints.py "$tmp"
pass=0; fail=0

# expect CODE PATTERN -- command...: exit code CODE and stderr matching PATTERN
expect() {
  local code=$1 pat=$2; shift 3
  local err; err=$("$@" 2>&1 >/dev/null); local rc=$?
  if [ "$rc" -eq "$code" ] && grep -qE -- "$pat" <<<"$err" && [ "$(wc -l <<<"$err")" -le 2 ]; then
    pass=$((pass+1))
  else
    fail=$((fail+1)); echo "FAIL: $* -> rc=$rc (want $code), stderr: $err (want /$pat/)"
  fi
}

ids=1,2,3
out="$tmp/out.npy"
for c in no_weights:"no model.safetensors" truncated:"truncated" tiny_file:"truncated" absurd_header:"absurd" \
         header_past_end:"past the end" header_not_json:"not valid JSON" offsets_past_end:"up_proj.weight.*past the data region" \
         span_mismatch:"up_proj.weight.*span" unknown_dtype:"unknown dtype 'Q9'" missing_tensor:"missing tensor 'layers.0.mlp.up_proj.weight'" \
         shape_mismatch:"up_proj.weight' has shape \[64, 128\], expected \[128, 64\]" unknown_arch:"gpt99.*not supported" \
         missing_field:"hidden_size" bad_heads:"not a multiple" config_not_json:"config.json: not valid JSON" \
         bad_index:"plain file name" index_missing_shard:"model-00001-of-00002.safetensors" \
         quant_override_group0:"override 'model.layers.0.mlp.down_proj': group_size 0 unsupported" \
         quant_override_bits:"override 'model.layers.0.mlp.down_proj': bits 7 unsupported" \
         quant_override_type:"override 'model.layers.0.mlp.down_proj' needs integer" \
         bad_eps:"rms_norm_eps -1 must be in \[0, 1\)" llama3_factors:"high_freq_factor \(4\) > low_freq_factor \(4\)" \
         rope_theta0:"rope_theta 0 must be positive" gemma_qpas0:"query_pre_attn_scalar 0 must be positive" \
         gemma_softcap_neg:"final_logit_softcapping -30 must be positive" \
         gen_temperature:"generation_config.json: temperature -1 must be in \[0, 100\]" \
         gen_top_p:"generation_config.json: top_p 2 must be in \(0, 1\]" \
         gen_not_number:"generation_config.json: field \"temperature\" must be a number"; do
  name=${c%%:*}; pat=${c#*:}
  expect 1 "$pat" -- "$KILN" logits "$tmp/$name" --ids $ids --out "$out"
  [ -e "$out" ] && { fail=$((fail+1)); echo "FAIL: $name left $out behind"; rm -f "$out"; }
  expect 1 "$pat" -- "$KILN" generate "$tmp/$name" --prompt-ids $ids --max-tokens 2
done
expect 1 "nope/config.json: not found" -- "$KILN" info "$tmp/nope"
expect 1 "truncated" -- "$KILN" info "$tmp/truncated"

# bad flag values
expect 2 "--ids: bad token id" -- "$KILN" logits $M --ids 1,,2 --out "$out"
expect 2 "--ids: bad token id" -- "$KILN" logits $M --ids abc --out "$out"
expect 2 "--ids: bad token id" -- "$KILN" logits $M --ids -4 --out "$out"
expect 2 "outside the vocabulary" -- "$KILN" logits $M --ids 1,512 --out "$out"
expect 2 "--ids and --out are required" -- "$KILN" logits $M --ids 1
expect 2 "--out needs a value" -- "$KILN" logits $M --ids 1 --out
expect 2 "unknown flag '--bogus'" -- "$KILN" logits $M --bogus
expect 2 "--threads expects an integer" -- "$KILN" logits $M --ids 1 --out "$out" --threads 0
expect 2 "--kv-dtype must be f32, f16, bf16 or q8" -- "$KILN" logits $M --ids 1 --out "$out" --kv-dtype f8
expect 2 "--kv-dtype must be f32, f16, bf16 or q8" -- "$KILN" logits $M --ids 1 --out "$out" --kv-dtype q4
expect 2 "--backend must be" -- "$KILN" generate $M --prompt-ids 1 --backend tpu
for v in lots -3 nan inf 1e9 ""; do
  expect 2 "--weight-cache-gb must be a size in GB .*, got '$v'" -- "$KILN" logits $M --ids 1 --out "$out" --weight-cache-gb "$v"
done
expect 2 "--weight-cache-gb needs a value" -- "$KILN" bench $M --weight-cache-gb
# its good values load (the CPU backend has no weight cache: accepted and unused)
for v in auto off 0 2.5; do
  if "$KILN" logits $M --ids 1 --out "$out" --weight-cache-gb $v 2>/dev/null; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: --weight-cache-gb $v"; fi
  rm -f "$out"
done
expect 2 "--max-tokens expects an integer" -- "$KILN" generate $M --prompt-ids 1 --max-tokens -1
expect 2 "--temperature expects a number" -- "$KILN" generate $M --prompt-ids 1 --temperature warm
expect 2 "--temperature expects a number" -- "$KILN" generate $M --prompt-ids 1 --temperature nan
expect 2 "--top-p expects a number" -- "$KILN" generate $M --prompt-ids 1 --top-p 1.5
expect 2 "outside the vocabulary" -- "$KILN" generate $M --prompt-ids 99999
expect 2 "unknown command 'frobnicate'" -- "$KILN" frobnicate
expect 2 "--gen-tokens expects" -- "$KILN" bench $M --gen-tokens x
expect 2 "--temperature expects a number in \[0, 100\]" -- "$KILN" bench $M --concurrency 1 --temperature 200
expect 2 "--top-p expects a number" -- "$KILN" bench $M --concurrency 1 --top-p 0
expect 2 "--warmup-tokens expects an integer in \[0, 1048576\], got '-1'" -- "$KILN" bench $M --concurrency 1 --warmup-tokens -1
expect 2 "--kv-cache-gb expects a number.*got 'abc'" -- "$KILN" bench $M --concurrency 1 --kv-cache-gb abc
expect 2 "--kv-cache-gb expects a number.*got '0'" -- "$KILN" serve $M --kv-cache-gb 0
[ -e "$out" ] && { fail=$((fail+1)); echo "FAIL: a failed command left $out behind"; }

# and the good path writes a file
"$KILN" logits $M --ids 1,2,3 --out "$out" && [ -s "$out" ] && pass=$((pass+1)) || { fail=$((fail+1)); echo "FAIL: good logits run"; }
echo "bad_input: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
