# ncu_seg.py CSV LABEL MODE — an ncu --csv run (gpu__time_duration.sum[, dram__bytes_read.sum]) cut into segments at
# each embed_cols_kernel launch (a forward pass each): MODE "sum" prints per segment its total and the largest kernels
# summed by name; MODE "last" prints the last segment's launches in order (µs, and GB/s where bytes were measured).
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows: print("==", sys.argv[2], "no ncu rows"); sys.exit()
h = rows[0]; ki, ii, mi, vi = h.index("Kernel Name"), h.index("ID"), h.index("Metric Name"), h.index("Metric Value")
launch = collections.OrderedDict()
for r in rows[1:]:
    d = launch.setdefault(r[ii], {"k": r[ki].split("(")[0].replace("void ", "")[:48]})
    try: d[r[mi]] = float(r[vi].replace(",", ""))
    except ValueError: pass
segs, cur = [], []
for d in launch.values():
    if d["k"].startswith("embed_cols_kernel") and cur: segs.append(cur); cur = []
    cur.append(d)
segs.append(cur)
T, B = "gpu__time_duration.sum", "dram__bytes_read.sum"
if sys.argv[3] == "sum":
    for si, s in enumerate(segs):
        tot = collections.Counter(); n = collections.Counter()
        for d in s: k = d["k"].split("<")[0]; tot[k] += d.get(T, 0); n[k] += 1
        print("== %s segment %d: %d launches, %.1f us" % (sys.argv[2], si, len(s), sum(tot.values()) / 1e3))
        for k, v in tot.most_common(8): print("   %-44s %4d %10.1f us" % (k, n[k], v / 1e3))
else:
    s = segs[-1]
    print("== %s last segment: %d launches, %.1f us" % (sys.argv[2], len(s), sum(d.get(T, 0) for d in s) / 1e3))
    for d in s:
        t = d.get(T, 0) / 1e3; b = d.get(B, 0)
        print("   %-48s %8.2f us %8.1f MB %7.0f GB/s" % (d["k"], t, b / 1e6, b / (t * 1e3) if t else 0))
