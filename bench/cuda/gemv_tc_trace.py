#!/usr/bin/env python3
"""Summarize a KILN_CUDA_GEMV_TC_TRACE file (matmul_gemv_tc.cu; KILN_CUDA_GRAPH=0).

Line: launch K ntiles nseg rows0 grid G S mode block t0 t1 t2 t3 t4 t5 smid items
(t: %globaltimer ns at 0 block entry, 1 first loads issued, 2 PDL wait released, 3 x prepared,
4 first item computed, 5 last item done).

Per launch, from rel = the earliest wait release (x ready: the kernel before has completed):
  entry   median block entry - the previous GEMV's end (negative: blocks resident before it ended)
  gap     rel - the previous GEMV launch's last block end (the kernels between the two GEMVs
          and the PDL hops: norm, glu, rope + attention)
  xprep   median t3 - rel;  item1  median t4 - rel;  end  max t5 - rel (x ready -> last row stored)
  tail    max t5 - median t5 (the last blocks)
Then the means per launch class (K, tiles, mode) and per "token" of the trace (sum over launches).
"""
import sys, statistics as st, collections

L = collections.OrderedDict()
for line in open(sys.argv[1]):
    v = line.split()
    if len(v) < 18:
        continue
    l = int(v[0])
    meta = tuple(int(x) for x in v[1:9])
    t = [int(x) for x in v[10:16]]
    L.setdefault(l, (meta, []))[1].append(t)

rows = []
prev_end = None
for l, (meta, bl) in L.items():
    rel = min(b[2] for b in bl)
    end = max(b[5] for b in bl)
    med = lambda k: st.median((b[k] - rel) / 1e3 for b in bl)
    r = dict(l=l, K=meta[0], nt=meta[1], nseg=meta[2], grid=meta[4], G=meta[5], S=meta[6], mode=meta[7],
             entry=(st.median(b[0] for b in bl) - prev_end) / 1e3 if prev_end else float('nan'),
             gap=(rel - prev_end) / 1e3 if prev_end else float('nan'),
             xprep=med(3), item1=med(4), end=(end - rel) / 1e3,
             tail=(end - st.median(b[5] for b in bl)) / 1e3, span=(end - min(b[0] for b in bl)) / 1e3)
    rows.append(r)
    prev_end = end

verbose = len(sys.argv) > 2
hdr = "K ntiles mode grid G S | entry gap xprep item1 end tail | span (us)"
if verbose:
    print("launch", hdr)
    for r in rows:
        print(r['l'], r['K'], r['nt'], r['mode'], r['grid'], r['G'], r['S'], "| %.2f %.2f %.2f %.2f %.2f %.2f | %.2f" %
              (r['entry'], r['gap'], r['xprep'], r['item1'], r['end'], r['tail'], r['span']))
cls = collections.OrderedDict()
for r in rows[1:]:
    cls.setdefault((r['K'], r['nt'], r['mode']), []).append(r)
print("class: n", hdr.replace("grid G S | ", ""), "(means)")
tot_end = tot_gap = 0.0
for k, rs in cls.items():
    m = lambda f: sum(r[f] for r in rs) / len(rs)
    print("%s: %d | %.2f %.2f %.2f %.2f %.2f %.2f | %.2f" % (k, len(rs), m('entry'), m('gap'), m('xprep'), m('item1'), m('end'), m('tail'), m('span')))
    tot_end += sum(r['end'] for r in rs)
    tot_gap += sum(r['gap'] for r in rs)
n = len(rows) - 1
print("over %d launches: sum(end) %.1f us, sum(gap) %.1f us, first release -> last end %.1f us" %
      (n, tot_end, tot_gap, (max(b[5] for b in L[rows[-1]['l']][1]) - min(b[2] for b in L[rows[1]['l']][1])) / 1e3 if n > 0 else 0))
