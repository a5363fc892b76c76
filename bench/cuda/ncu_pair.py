#!/usr/bin/env python3
# ncu_pair.py A.csv B.csv [N] — two `ncu --csv --metrics gpu__time_duration.sum` runs of the same launches side by side,
# launch by launch (the first N, default 30): kernel names and µs, and the two runs' totals. For A/B of one kernel
# swapped for another in an otherwise identical launch sequence (e.g. KILN_CUDA_GEMV_RING=0 / 1).
import csv, sys

def launches(path):
    out = []
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f) if len(r) > 5]
    if not rows:
        return out
    hdr = rows[0]
    ki, mi, vi, ui = hdr.index("Kernel Name"), hdr.index("Metric Name"), hdr.index("Metric Value"), hdr.index("Metric Unit")
    for r in rows[1:]:
        if r[mi] != "gpu__time_duration.sum":
            continue
        v = float(r[vi].replace(",", ""))
        v = v / 1000.0 if r[ui] == "nsecond" else v * 1000.0 if r[ui] == "msecond" else v
        out.append((r[ki].split("(")[0].split("<")[0][:28], v))
    return out

a, b = launches(sys.argv[1]), launches(sys.argv[2])
n = int(sys.argv[3]) if len(sys.argv) > 3 else 30
for i in range(min(n, max(len(a), len(b)))):
    ka, va = a[i] if i < len(a) else ("-", 0.0)
    kb, vb = b[i] if i < len(b) else ("-", 0.0)
    print(f"{i:4d} {ka:28s} {va:9.2f}  {kb:28s} {vb:9.2f}")
print(f"total {sum(v for _, v in a):.1f} us ({len(a)} launches)  {sum(v for _, v in b):.1f} us ({len(b)} launches)")
