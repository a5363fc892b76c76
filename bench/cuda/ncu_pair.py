#!/usr/bin/env python3
# ncu_pair.py A.csv B.csv [N] — two `ncu --csv --metrics gpu__time_duration.sum` runs of the same launches side by side,
# launch by launch (the first N, default 30): kernel names and µs, and the two runs' totals. For A/B of one kernel
# swapped for another in an otherwise identical launch sequence (e.g. KILN_CUDA_GEMV_RING=0 / 1). Reads with ncu_sum.py.
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ncu_sum import launches

a, b = launches(sys.argv[1]), launches(sys.argv[2])
n = int(sys.argv[3]) if len(sys.argv) > 3 else 30
for i in range(min(n, max(len(a), len(b)))):
    ka, va = a[i] if i < len(a) else ("-", 0.0)
    kb, vb = b[i] if i < len(b) else ("-", 0.0)
    print(f"{i:4d} {ka[:28]:28s} {va:9.2f}  {kb[:28]:28s} {vb:9.2f}")
print(f"total {sum(v for _, v in a):.1f} us ({len(a)} launches)  {sum(v for _, v in b):.1f} us ({len(b)} launches)")
