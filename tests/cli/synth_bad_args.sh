#!/usr/bin/env bash
# `kiln synth` with bad arguments. Each case must exit non-zero (2 for usage, 1 for what
# only shows up while writing), print one line naming the flag that was wrong, and leave
# no partial output: no target folder, no hidden temp folder beside it. Then a few good
# runs: --help, --list, a tiny checkpoint, --force over a non-empty folder.
set -u
KILN=${1:?usage: synth_bad_args.sh path/to/kiln}
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
pass=0; fail=0
ok() { pass=$((pass+1)); }
bad() { fail=$((fail+1)); echo "FAIL: $*"; }

# expect CODE PATTERN -- command...: exit code CODE, one line of stderr matching PATTERN,
# and $tmp/work unchanged (its listing, hidden entries included, compared before/after)
expect() {
  local code=$1 pat=$2; shift 3
  local before after err rc
  before=$(ls -A "$tmp/work")
  err=$("$@" 2>&1 >/dev/null); rc=$?
  after=$(ls -A "$tmp/work")
  if [ "$rc" -ne "$code" ]; then bad "$* -> rc=$rc, want $code ($err)"; return; fi
  if ! grep -qE -- "$pat" <<<"$err"; then bad "$* -> stderr '$err' does not match /$pat/"; return; fi
  if [ "$(wc -l <<<"$err")" -ne 1 ]; then bad "$* -> more than one line: $err"; return; fi
  if [ "$before" != "$after" ]; then bad "$* -> left output behind: $after"; return; fi
  ok
}

mkdir "$tmp/work"
out="$tmp/work/m"
T=(--arch llama --preset tiny)

expect 2 "--arch must be llama, qwen3, qwen3_5 or gemma3.*'gpt2'" -- "$KILN" synth --arch gpt2 --preset tiny --dtype bf16 --out "$out"
expect 2 "--preset is not a known preset.*'llama-99b'" -- "$KILN" synth --preset llama-99b --dtype bf16 --out "$out"
expect 2 "--preset tiny needs --arch"                 -- "$KILN" synth --preset tiny --dtype bf16 --out "$out"
expect 2 "--arch qwen3 does not match --preset llama-3.2-1b" -- "$KILN" synth --arch qwen3 --preset llama-3.2-1b --dtype bf16 --out "$out"
expect 2 "--arch gemma3 does not match --preset qwen3.5-0.8b \(a qwen3_5 model\)" -- "$KILN" synth --arch gemma3 --preset qwen3.5-0.8b --dtype bf16 --out "$out"
expect 2 "--preset tiny needs --arch llama\|qwen3\|qwen3_5\|gemma3" -- "$KILN" synth --preset tiny --dtype q4 --out "$out"
expect 2 "--group-size 128 does not divide"           -- "$KILN" synth --arch qwen3_5 --preset tiny --dtype q4 --group-size 128 --out "$out"
expect 2 "--preset is required"                       -- "$KILN" synth --dtype bf16 --out "$out"
expect 2 "--dtype must be.*'int8'"                    -- "$KILN" synth "${T[@]}" --dtype int8 --out "$out"
expect 2 "--dtype must be.*'q7'"                      -- "$KILN" synth "${T[@]}" --dtype q7 --out "$out"
expect 2 "--dtype is required"                        -- "$KILN" synth "${T[@]}" --out "$out"
expect 2 "--bits must be 2, 3, 4, 5, 6 or 8.*'7'"     -- "$KILN" synth "${T[@]}" --dtype q8 --bits 7 --out "$out"
expect 2 "--bits must be 2, 3, 4, 5, 6 or 8.*'9'"     -- "$KILN" synth "${T[@]}" --dtype q8 --bits 9 --out "$out"
expect 2 "--bits expects an integer"                  -- "$KILN" synth "${T[@]}" --dtype q4 --bits four --out "$out"
expect 2 "--bits 3 contradicts --dtype q4"            -- "$KILN" synth "${T[@]}" --dtype q4 --bits 3 --out "$out"
expect 2 "--bits needs a quantized --dtype"           -- "$KILN" synth "${T[@]}" --dtype bf16 --bits 4 --out "$out"
expect 2 "--group-size must be 32, 64 or 128.*'48'"   -- "$KILN" synth "${T[@]}" --dtype q4 --group-size 48 --out "$out"
expect 2 "--group-size expects an integer"            -- "$KILN" synth "${T[@]}" --dtype q4 --group-size -64 --out "$out"
expect 2 "--group-size 128 does not divide"           -- "$KILN" synth "${T[@]}" --dtype q4 --group-size 128 --out "$out"
expect 2 "--group-size only applies to quantized"     -- "$KILN" synth "${T[@]}" --dtype f16 --group-size 64 --out "$out"
expect 2 "--layers expects an integer"                -- "$KILN" synth "${T[@]}" --dtype bf16 --layers 0 --out "$out"
expect 2 "--seed expects an unsigned 64-bit integer"  -- "$KILN" synth "${T[@]}" --dtype bf16 --seed -1 --out "$out"
expect 2 "--seed expects an unsigned 64-bit integer"  -- "$KILN" synth "${T[@]}" --dtype bf16 --seed 12x --out "$out"
expect 2 "--shard-gb expects a number"                -- "$KILN" synth "${T[@]}" --dtype bf16 --shard-gb 0 --out "$out"
expect 2 "--out DIR is required"                      -- "$KILN" synth "${T[@]}" --dtype bf16
expect 2 "--out needs a value"                        -- "$KILN" synth "${T[@]}" --dtype bf16 --out
expect 2 "unknown flag '--bogus'"                     -- "$KILN" synth "${T[@]}" --dtype bf16 --bogus 1 --out "$out"

# the target is in the way
mkdir "$tmp/work/full" && echo keep > "$tmp/work/full/keep"
expect 2 "--out .*full exists and is not empty \(pass --force" -- "$KILN" synth "${T[@]}" --dtype bf16 --out "$tmp/work/full"
[ "$(cat "$tmp/work/full/keep")" = keep ] && ok || bad "non-empty --out was modified"
echo x > "$tmp/work/file"
expect 2 "--out .*file exists and is not a directory" -- "$KILN" synth "${T[@]}" --dtype bf16 --out "$tmp/work/file"
expect 1 "--out .*parent directory .* does not exist"  -- "$KILN" synth "${T[@]}" --dtype bf16 --out "$tmp/work/no/such/m"
expect 1 "--out .*file/m: parent directory"           -- "$KILN" synth "${T[@]}" --dtype bf16 --out "$tmp/work/file/m"

# a folder we may not write into (as root permissions do not stop us: /proc never lets
# anyone create a directory)
if [ "$(id -u)" -ne 0 ]; then
  mkdir "$tmp/work/ro" && chmod 555 "$tmp/work/ro"
  expect 1 "--out .*ro/m: cannot create .*Permission denied" -- "$KILN" synth "${T[@]}" --dtype bf16 --out "$tmp/work/ro/m"
  [ -z "$(ls -A "$tmp/work/ro")" ] && ok || bad "unwritable dir got entries"
  chmod 755 "$tmp/work/ro"
fi
err=$("$KILN" synth "${T[@]}" --dtype bf16 --out /proc/kiln-synth-test 2>&1 >/dev/null); rc=$?
if [ $rc -eq 1 ] && grep -qE -- "--out /proc/kiln-synth-test: cannot create" <<<"$err" && [ "$(wc -l <<<"$err")" -eq 1 ]; then ok
else bad "unwritable /proc: rc=$rc $err"; fi

# good runs
"$KILN" synth --help | grep -q -- "--preset NAME" && ok || bad "--help"
"$KILN" synth --list | grep -q "qwen3-0.6b .*Qwen/Qwen3-0.6B" && ok || bad "--list"
if "$KILN" synth "${T[@]}" --dtype q4 --out "$out" >/dev/null 2>"$tmp/err" && [ ! -s "$tmp/err" ] &&
   [ -f "$out/config.json" ] && [ -f "$out/generation_config.json" ] && [ -f "$out/model.safetensors" ]; then ok
else bad "tiny q4: $(cat "$tmp/err")"; fi
[ -z "$(ls -A "$tmp/work" | grep '^\.')" ] && ok || bad "hidden temp folder left: $(ls -A "$tmp/work")"
expect 2 "exists and is not empty" -- "$KILN" synth "${T[@]}" --dtype bf16 --out "$out"
if "$KILN" synth "${T[@]}" --dtype bf16 --force --out "$out" >/dev/null 2>&1 &&
   grep -q '"torch_dtype": "bfloat16"' "$out/config.json" && ! grep -q quantization "$out/config.json"; then ok
else bad "--force did not replace the q4 checkpoint"; fi
if "$KILN" synth "${T[@]}" --dtype bf16 --out "$tmp/work/sh" --shard-gb 0.0001 >/dev/null 2>&1 &&
   [ -f "$tmp/work/sh/model.safetensors.index.json" ] && [ -f "$tmp/work/sh/model-00001-of-00003.safetensors" ]; then ok
else bad "sharding with --shard-gb: $(ls "$tmp/work/sh" 2>&1)"; fi
"$KILN" info "$out" >/dev/null 2>&1 && ok || bad "kiln info cannot read the synth checkpoint"
# the hybrid families: written, read by kiln info and kiln logits (finite numbers)
for a in qwen3_5 gemma3; do
  for d in bf16 q4; do
    h="$tmp/work/$a-$d"
    g=(); [ $d = q4 ] && g=(--group-size 32)
    if "$KILN" synth --arch $a --preset tiny --dtype $d "${g[@]}" --out "$h" >/dev/null 2>"$tmp/err"; then
      if "$KILN" info "$h" 2>/dev/null | grep -q "architecture: $a" &&
         "$KILN" logits "$h" --ids 1,2,3 --out "$tmp/$a-$d.npy" >/dev/null 2>&1 && [ -s "$tmp/$a-$d.npy" ]; then ok
      else bad "$a $d: kiln info/logits failed"; fi
    else bad "$a $d tiny: $(cat "$tmp/err")"; fi
  done
done

echo "synth_bad_args: $pass passed, $fail failed"
[ $fail -eq 0 ]
