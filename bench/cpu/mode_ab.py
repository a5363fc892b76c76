#!/usr/bin/env python3
"""mode_ab.py — groups mode_ab.sh's runs (lines: variant tok/s probe_before probe_after ratio) by the bandwidth mode
their two probes read (hi: both > 45 GB/s, lo: both < 40, mix: otherwise) and prints per variant and mode the run
count, the median tok/s and median ratio (decode over the roofline of the higher probe) and the tok/s range."""
import collections
import sys

for f in sys.argv[1:]:
    groups = collections.defaultdict(list)
    for line in open(f):
        p = line.split()
        if len(p) != 5:
            continue
        v, tok, p0, p1, ratio = p[0], float(p[1]), float(p[2]), float(p[3]), float(p[4])
        lo, hi = sorted((p0, p1))
        mode = 'hi' if lo > 45 else 'lo' if hi < 40 else 'mix'
        groups[(mode, v)].append((tok, ratio))
    print(f)
    for (mode, v), runs in sorted(groups.items()):
        t = sorted(r[0] for r in runs)
        q = sorted(r[1] for r in runs)
        print(f'  {mode:3} {v:12} runs {len(t):3}  tok/s median {t[len(t) // 2]:7.1f}  ratio median {q[len(q) // 2]:.3f}'
              f'  range {t[0]:.1f}-{t[-1]:.1f}')
