#!/usr/bin/env bash
# CPU benchmarks for issue 2: batch-1 decode and 512-token prefill on kiln synth
# checkpoints, as ratios against ceilings measured in the same run (bench/probe.c):
#   decode roofline = read bandwidth / weight bytes per token
#   prefill share   = achieved matmul+attention FLOP/s / f32 FMA peak
# Usage: bench/run_cpu.sh BUILD_DIR SYNTH_DIR [names...]   (names default: the six below)
# Checkpoints: build/kiln synth --arch qwen3 --preset qwen3-0.6b --dtype q8 --out SYNTH_DIR/qwen3-0.6b-q8 ...
set -euo pipefail
B=${1:?build dir}; S=${2:?synth dir}; shift 2
names=${*:-"qwen3-0.6b-bf16 qwen3-0.6b-q8 qwen3-0.6b-q4 llama-3.2-1b-bf16 llama-3.2-1b-q8 llama-3.2-1b-q4"}
probe=$("$B/kiln-probe" --json)
echo "probe: $probe"
echo "uptime: $(uptime)"
printf '| model | weights MB/token | decode tok/s | roofline tok/s | decode / roofline | prefill tok/s | prefill GFLOP/s | / FMA peak |\n'
printf '|---|---|---|---|---|---|---|---|\n'
for n in $names; do
  j=$("$B/kiln" bench "$S/$n" --prompt-tokens 512 --gen-tokens 64 --runs 2 --json)
  python3 - "$S/$n/config.json" "$j" "$probe" "$n" <<'PY'
import json, sys
cfg = json.load(open(sys.argv[1])); b = json.loads(sys.argv[2]); pr = json.loads(sys.argv[3]); name = sys.argv[4]
H, L, V = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
nh = cfg["num_attention_heads"]; hd = cfg.get("head_dim") or H // nh; nkv = cfg["num_key_value_heads"]; I = cfg["intermediate_size"]
T = b["prompt_tokens"]
layer = H * nh * hd * 2 + H * nkv * hd * 2 + 3 * H * I          # q,o + k,v + gate,up,down
flops = 2 * L * layer * T + 2 * V * H                          # one logits row
flops += L * 2 * 2 * (T * (T + 1) / 2) * nh * hd               # causal QK^T and PV
roof = pr["read_gb_s"] * 1e9 / b["weight_bytes"]
gf = flops / (T / b["prefill_tok_s"]) / 1e9
print(f"| {name} | {b['weight_bytes']/1e6:.0f} | {b['decode_tok_s']:.2f} | {roof:.2f} | {b['decode_tok_s']/roof:.0%} | "
      f"{b['prefill_tok_s']:.1f} | {gf:.1f} | {gf/pr['fma_gflops']:.0%} |")
PY
done
