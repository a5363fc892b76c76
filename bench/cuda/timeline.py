#!/usr/bin/env python3
"""Summarize a KILN_CUDA_TIMELINE file (a KILN_CUDA_TIMELINE=ON build; src/backend/cuda/timeline.cuh).

  python3 bench/cuda/timeline.py FILE [LAUNCHES]

Records: thread 0 of every block of every PDL kernel, %globaltimer before its griddepcontrol.wait (arrive) and after
it (release: the kernel before had completed), with gridDim and blockDim (as products) naming the kernel.
In release order a launch's blocks are contiguous (the next launch cannot release before this one completes), so a
launch is a run of records with the same (grid, block). Per launch:
  rel    its first release (us, from the first launch printed)
  span   the next launch's first release - this one's: the kernel's time in the chain, release to completion
  early  its first release - its first block's arrival (how long its earliest block waited: >0 = it was resident
         before the kernel ahead completed)
  late   its last release - its first (blocks that arrived after the kernel ahead completed, e.g. a second wave)
Prints the last LAUNCHES launches (default 40) one by one, then per (grid, block) class over the last decode-like
stretch (the last 2000 launches): count, mean span, mean early, mean late.

Phase stamps (TL_STAMP(id) in a kernel: records with grid 0 and block = id) are attributed to the launch whose
[first release, next launch's first release) holds them, and printed per class and id: how many a launch, and the
mean offset of the first and the last from the launch's first release (us). Ids: attention.cu's decode attention
1 q ready, 2 tiles done, 3 cluster started, 4 partials exchanged, 5 stored; matmul_gemv_tc.cu 11 x prepared,
12 last item; rmsnorm.cu 21 reduced, 22 stored.
"""
import bisect, struct, sys, collections


def load(path):
    with open(path, 'rb') as f:
        head = f.read(8)
        if head != b'KILNTL1\n':
            sys.exit(f'{path}: not a KILN_CUDA_TIMELINE file')
        n, = struct.unpack('<Q', f.read(8))
        raw = f.read(32 * n)
    return [struct.unpack_from('<QQIIII', raw, 32 * i) for i in range(len(raw) // 32)]


def launches(recs):
    recs.sort(key=lambda r: r[1])
    out = []
    for a, rel, grid, block, bid, sm in recs:
        if grid == 0:
            continue  # a phase stamp (or a reserved record never written)
        if out and out[-1]['key'] == (grid, block) and out[-1]['n'] < grid:
            L = out[-1]
            L['n'] += 1
            L['arr0'] = min(L['arr0'], a)
            L['rel1'] = rel
        else:
            out.append(dict(key=(grid, block), n=1, arr0=a, rel0=rel, rel1=rel))
    return out


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ('-h', '--help'):
        print(__doc__)
        sys.exit(0 if len(sys.argv) > 1 else 2)
    show = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    recs = load(sys.argv[1])
    ls = launches(recs)
    for i, L in enumerate(ls):
        L['span'] = (ls[i + 1]['rel0'] - L['rel0']) / 1e3 if i + 1 < len(ls) else float('nan')
        L['early'] = (L['rel0'] - L['arr0']) / 1e3
        L['late'] = (L['rel1'] - L['rel0']) / 1e3
    print(f'{len(ls)} launches')
    tail = ls[-show - 1:-1]
    t0 = tail[0]['rel0'] if tail else 0
    print('grid block blocks | rel span early late (us)')
    for L in tail:
        print('%5d %5d %5d | %9.2f %7.2f %7.2f %6.2f' % (L['key'][0], L['key'][1], L['n'], (L['rel0'] - t0) / 1e3, L['span'], L['early'], L['late']))
    cls = collections.OrderedDict()
    for L in ls[-2001:-1]:
        cls.setdefault(L['key'], []).append(L)
    print('class (grid, block): count | mean span early late (us) | span sum (us)')
    for k, v in sorted(cls.items(), key=lambda kv: -sum(x['span'] for x in kv[1])):
        m = lambda f: sum(x[f] for x in v) / len(v)
        print('%s: %d | %.2f %.2f %.2f | %.1f' % (k, len(v), m('span'), m('early'), m('late'), sum(x['span'] for x in v)))

    stamps = sorted((r[1], r[3]) for r in recs if r[2] == 0 and r[3] > 0)  # block 0: reserved, not written
    if stamps:
        starts = [L['rel0'] for L in ls]
        per = collections.defaultdict(lambda: collections.defaultdict(list))  # launch index -> id -> offsets
        for t, sid in stamps:
            i = bisect.bisect_right(starts, t) - 1
            if 0 <= i < len(ls) - 1:
                per[i][sid].append((t - ls[i]['rel0']) / 1e3)
        agg = collections.defaultdict(lambda: collections.defaultdict(list))  # (class, id) -> [(n, first, last)]
        for i, d in per.items():
            if i < len(ls) - 2001:
                continue
            for sid, v in d.items():
                agg[ls[i]['key']][sid].append((len(v), min(v), max(v)))
        print('stamps (grid, block) id: launches, stamps a launch | mean first, mean last offset from release (us)')
        for k in sorted(agg):
            for sid in sorted(agg[k]):
                v = agg[k][sid]
                print('%s %d: %d, %.1f | %.2f %.2f' % (k, sid, len(v), sum(x[0] for x in v) / len(v), sum(x[1] for x in v) / len(v),
                                                   sum(x[2] for x in v) / len(v)))

if __name__ == '__main__':
    main()
