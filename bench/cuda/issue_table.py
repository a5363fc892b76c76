#!/usr/bin/env python3
# issue_table.py — issue 8's table from one combined.sh call's files, the arithmetic every session did by hand:
#   python3 bench/cuda/issue_table.py DIR      (DIR holds probe.jsonl, bench.jsonl and, if run, conc.jsonl)
# - batch-1 decode: kiln bench's decode_weight_gb_s (weight bytes a token × tok/s) over the probe's copy rate, and
#   decode_read_gb_s (weights + the K/V a token reads: the "bytes read per token") over the same rate;
# - prefill: 2 × the linear parameters a prefill token multiplies (embedding and lm_head left out: lm_head runs for
#   the last token only) × prefill tok/s, over the probe's layer mix for that model — the FLOP-weighted rate of its
#   GEMM shapes at 2048 tokens, q/k/v/o at q's rate (the probe times q/o, k/v, gate/up and down for llama-3-8b, q,
#   gate/up and down for qwen3-0.6b), as in bench/cuda/RESULTS.md since session 14;
#   A second prefill share also counts the causal attention's matmuls (QKᵀ and PV: 4 · heads · head_dim FLOP a
#   key, (P + 1) / 2 keys a query on average over a P-token prompt, every layer) — the usual MFU count; at 2048
#   tokens +27 % work for qwen3-0.6b, +4 % for llama-3-8b. Same rate, same time: only what is counted differs.
# - the engine: c=64's counted decode tok/s over c=1's, per conc.jsonl block.
# Only the presets the probe measures get a prefill share (l8… llama-3-8b, q06… qwen3-0.6b).
import json, os, sys

# linear parameters a prefill token multiplies, the layer's GEMMs as (FLOP weight, probe shape) pairs, and the
# attention's shape for the second share: (layers, query heads, head_dim)
PRESETS = {
    'l8': (6.979e9, [(2.0, 'llama-3-8b q/o'), (0.5, 'llama-3-8b k/v'), (7.0, 'llama-3-8b gate/up'), (3.5, 'llama-3-8b down')],
           (32, 32, 128)),
    'q06': (4.404e8, [(6.0, 'qwen3-0.6b q'), (6.0, 'qwen3-0.6b gate/up'), (3.0, 'qwen3-0.6b down')], (28, 16, 128)),
}


def jsonl(path):
    out = []
    if not os.path.exists(path):
        return out
    for line in open(path):
        line = line.strip()
        if not line.startswith(('{', '[')):
            continue
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def main(d):
    probe = jsonl(os.path.join(d, 'probe.jsonl'))
    copy = next((p['gb_s'] for p in probe if p.get('probe') == 'copy'), None)
    dev = next((p['name'] for p in probe if p.get('probe') == 'device'), '?')
    gemm = {p['what']: p['tflops'] for p in probe if p.get('probe') == 'gemm_bf16'}
    mix = {}
    for k, (_, shapes, _) in PRESETS.items():
        if all(s in gemm for _, s in shapes):
            mix[k] = sum(w for w, _ in shapes) / sum(w / gemm[s] for w, s in shapes)
    print(f'device {dev}; copy {copy} GB/s; layer mix ' + ', '.join(f'{k} {v:.1f}' for k, v in mix.items()) + ' TFLOP/s')
    print('| run | decode tok/s | GB/s (weights) | / copy | / copy, weights + K/V | prefill tok/s | / layer mix | / layer mix, attention counted |')
    print('|---|---|---|---|---|---|---|---|')
    run = None
    for r in jsonl(os.path.join(d, 'bench.jsonl')):
        if 'run' in r:
            run = r['run']
            continue
        name = os.path.basename(r.get('model', '?'))
        share_c = f"{100 * r['decode_weight_gb_s'] / copy:.1f} %" if copy and 'decode_weight_gb_s' in r else ''
        share_r = f"{100 * r['decode_read_gb_s'] / copy:.1f} %" if copy and 'decode_read_gb_s' in r else ''
        pre = next((k for k in sorted(PRESETS, key=len, reverse=True) if name.startswith(k)), None)
        share_p = share_a = ''
        if pre in mix and 'prefill_tok_s' in r:
            share_p = f"{100 * 2 * PRESETS[pre][0] * r['prefill_tok_s'] / 1e12 / mix[pre]:.1f} %"
            if 'prompt_tokens' in r:
                ly, nh, hd = PRESETS[pre][2]
                att = ly * 4 * nh * hd * (r['prompt_tokens'] + 1) / 2
                share_a = f"{100 * (2 * PRESETS[pre][0] + att) * r['prefill_tok_s'] / 1e12 / mix[pre]:.1f} %"
        print(f"| {run or name} | {r.get('decode_tok_s', '')} | {r.get('decode_weight_gb_s', '')} | {share_c} | {share_r} | {r.get('prefill_tok_s', '')} | {share_p} | {share_a} |")
        run = None
    head = None
    for r in jsonl(os.path.join(d, 'conc.jsonl')):
        if isinstance(r, dict):
            head = f"{r.get('model', '?')} {r.get('extra', '')}".strip()
            continue
        by = {x['concurrency']: x for x in r if 'concurrency' in x}
        line = ', '.join(f"c={c} {x['decode_tok_s']} (steady {x.get('steady_decode_tok_s', '?')})" for c, x in sorted(by.items()))
        ratio = f"; c=64 / c=1 {by[64]['decode_tok_s'] / by[1]['decode_tok_s']:.1f}x" if 1 in by and 64 in by else ''
        print(f'engine {head}: {line}{ratio}')


if __name__ == '__main__':
    if len(sys.argv) != 2 or sys.argv[1] in ('-h', '--help'):
        print('usage: issue_table.py DIR  (a combined.sh call\'s files: probe.jsonl, bench.jsonl, conc.jsonl)')
        sys.exit(0 if len(sys.argv) == 2 else 2)
    main(sys.argv[1])
