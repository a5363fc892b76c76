#!/usr/bin/env bash
# CPU benchmarks for issue 2: batch-1 decode and 512-token prefill on kiln synth
# checkpoints, as ratios against ceilings measured in the same run:
#   decode roofline = read bandwidth / weight bytes per token. The read bandwidth is
#     measured by `kiln bench --probe` inside the same process, right before and right
#     after each decode run (after its prefill), with the model's threads: bench/probe.c's
#     loop (src/base/bwprobe.c), best of 5 passes over 1 GiB. Each run's ratio is its
#     decode GB/s over the higher of its two readings; the models are run round-robin
#     ROUNDS times (default 3) × 2 runs, and the median, best and worst ratio are given.
#   prefill share = achieved matmul+attention FLOP/s / f32 FMA peak (kiln-probe at start).
# Also printed: the K/V bytes decode reads per token at this context (kiln bench's kv_bytes_per_token:
# the cache's dtype), which the weight-only roofline leaves out, the same median ratio with them counted
# ((weights + K/V) / probe: how close decode is to the bandwidth, not issue 2's metric), and the
# 1-minute load average of each run; per run the
# process's CPU seconds per second of decode and its preemptions, the decode tokens' min/p50/p90
# time and the weights' huge-page coverage (kiln bench --json): a slow run says whether its
# threads lost their CPUs or its weights their 2 MB pages.
# Usage: bench/run_cpu.sh BUILD_DIR SYNTH_DIR [names...]   (names default: the six below)
# KILN_BENCH_ARGS: more `kiln bench` flags for every run (e.g. "--kv-dtype q8"; the default cache is f16).
# Checkpoints: build/kiln synth --arch qwen3 --preset qwen3-0.6b --dtype q8 --out SYNTH_DIR/qwen3-0.6b-q8 ...
# KILN_BENCH_PRIO=N (e.g. -15): run each kiln / kiln-probe in a session of its own whose
# autogroup has nice N. With sched_autogroup on (Debian's default), `nice -n 19` on a build in
# another session does not lower it against us: each session's group gets an equal share, so
# two helpers' builds leave a benchmark about one core of two.
set -euo pipefail
prio() { if [ -n "${KILN_BENCH_PRIO:-}" ]; then setsid -w bash -c 'echo "$0" > /proc/self/autogroup && exec "$@"' "$KILN_BENCH_PRIO" "$@"; else "$@"; fi; }
B=${1:?build dir}; S=${2:?synth dir}; shift 2
names=${*:-"qwen3-0.6b-bf16 qwen3-0.6b-q8 qwen3-0.6b-q4 llama-3.2-1b-bf16 llama-3.2-1b-q8 llama-3.2-1b-q4"}
R=${ROUNDS:-3}
probe=$(prio "$B/kiln-probe" --json)
echo "probe (start): $probe"
echo "uptime: $(uptime)  autogroup nice: ${KILN_BENCH_PRIO:-unchanged}"
tmp=$(mktemp)
for r in $(seq "$R"); do
  for n in $names; do
    # shellcheck disable=SC2086
    j=$(prio "$B/kiln" bench "$S/$n" --prompt-tokens 512 --gen-tokens 64 --runs 2 --probe --json ${KILN_BENCH_ARGS:-})
    echo "$n $j" >> "$tmp"
    echo "round $r $n: $(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); dr=d.get("decode_runs") or [{}]*len(d["probe_runs"]); t=d.get("decode_token_ms")
print(" ".join("%.2f tok/s %.1f/%.1f GB/s %.0f%% (load %.2f, CPU %.2f/s, %s preempted)" % (x["decode_tok_s"], x["probe_before_gb_s"], x["probe_after_gb_s"], 100*x["ratio"], x["load1"], r.get("cpu_per_wall", 0), r.get("preempted", "?")) for x, r in zip(d["probe_runs"], dr))
      + ("; token ms min/p50/p90 %.1f/%.1f/%.1f" % (t["min"], t["p50"], t["p90"]) if t else "") + ("; weights in 2 MB pages %.0f of %.0f MB" % (d["weight_huge_bytes"] / 1e6, d["weight_copy_bytes"] / 1e6) if "weight_copy_bytes" in d else ""))' "$j")"
  done
done
echo "uptime: $(uptime)"
python3 - "$S" "$probe" "$tmp" <<'PY'
import json, sys, statistics
S, pr, path = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
runs = {}
for line in open(path):
    n, j = line.split(" ", 1)
    runs.setdefault(n, []).append(json.loads(j))
print("| model | weights MB/token | K/V MB/token | decode tok/s (median, best) | probe GB/s (min–max) | decode / roofline median | best | worst | (weights + K/V) / probe, median | runs | load | prefill tok/s (best) | prefill GFLOP/s | / FMA peak |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for n, bs in runs.items():
    cfg = json.load(open(f"{S}/{n}/config.json"))
    H, L, V = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    nh = cfg["num_attention_heads"]; hd = cfg.get("head_dim") or H // nh; nkv = cfg["num_key_value_heads"]; I = cfg["intermediate_size"]
    b0 = bs[0]; T = b0["prompt_tokens"]; G = b0["gen_tokens"]
    kv = b0.get("kv_bytes_per_token", L * 2 * nkv * hd * 2 * (T + G / 2))  # K and V at the mean context (kiln bench's count)
    layer = H * nh * hd * 2 + H * nkv * hd * 2 + 3 * H * I
    flops = 2 * L * layer * T + 2 * V * H + L * 2 * 2 * (T * (T + 1) / 2) * nh * hd
    pr_runs = [x for b in bs for x in b["probe_runs"]]
    rat = [x["ratio"] for x in pr_runs]; dc = [x["decode_tok_s"] for x in pr_runs]
    probes = [x["probe_before_gb_s"] for x in pr_runs] + [x["probe_after_gb_s"] for x in pr_runs]
    loads = [x["load1"] for x in pr_runs]
    pf = max(b["prefill_tok_s"] for b in bs); gf = flops / (T / pf) / 1e9
    print(f"| {n} | {b0['weight_bytes']/1e6:.0f} | {kv/1e6:.0f} | {statistics.median(dc):.2f}, {max(dc):.2f} | {min(probes):.1f}–{max(probes):.1f} | "
          f"**{statistics.median(rat):.0%}** | {max(rat):.0%} | {min(rat):.0%} | {statistics.median(rat) * (1 + kv / b0['weight_bytes']):.0%} | "
          f"{len(rat)} | {min(loads):.1f}–{max(loads):.1f} | "
          f"{pf:.1f} | {gf:.1f} | {gf/pr['fma_gflops']:.0%} |")
PY
rm -f "$tmp"
