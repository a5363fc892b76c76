#!/usr/bin/env python3
# nsys_gaps.py — how busy the GPU is in a window of a timeline: from `nsys stats --report cuda_gpu_trace
# --format csv` (kernels and copies with start and duration in ns), the union of their intervals over the
# span of the kernels in the run's last MS milliseconds (default 200: the steady decode of a concurrency level),
# the idle gaps between them (count, total, largest), and the busiest kernels there.
#   python3 bench/cuda/nsys_gaps.py TRACE.csv [MS]
import csv, sys, collections
rows = list(csv.DictReader(open(sys.argv[1])))
ms = float(sys.argv[2]) if len(sys.argv) > 2 else 200
def col(r, *names):
    for n in names:
        for k in r:
            if k.strip().startswith(n): return r[k]
    return None
ev = []
for r in rows:
    s, d, n = col(r, 'Start'), col(r, 'Duration'), col(r, 'Name')
    if s is None or d is None: continue
    try: ev.append((int(float(s)), int(float(d)), n or ''))
    except ValueError: pass
ev.sort()
if not ev: sys.exit('no events')
t_end = max(s + d for s, d, _ in ev)
t_lo = t_end - ms * 1e6
win = [e for e in ev if e[0] >= t_lo]
busy, cur_s, cur_e, gaps = 0, None, None, []
for s, d, _ in win:
    e = s + d
    if cur_e is None: cur_s, cur_e = s, e
    elif s > cur_e: busy += cur_e - cur_s; gaps.append(s - cur_e); cur_s, cur_e = s, e
    else: cur_e = max(cur_e, e)
busy += cur_e - cur_s
span = win[-1][0] + win[-1][1] - win[0][0]
print(f"window {span / 1e6:.2f} ms, {len(win)} events, busy {busy / 1e6:.2f} ms ({100 * busy / span:.1f} %), "
      f"{len(gaps)} gaps: {sum(gaps) / 1e6:.2f} ms, largest {max(gaps or [0]) / 1e3:.1f} us, "
      f"> 5 us: {sum(g for g in gaps if g > 5000) / 1e6:.2f} ms in {sum(1 for g in gaps if g > 5000)}")
tot = collections.Counter(); cnt = collections.Counter()
for s, d, n in win:
    k = n.replace('void ', '').split('<')[0].split('(')[0]
    tot[k] += d; cnt[k] += 1
for k, v in tot.most_common(15): print(f"{v / 1e6:9.3f} ms {cnt[k]:6d}x {k}")
