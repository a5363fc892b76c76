#!/usr/bin/env python3
"""ncu_grid.py LABEL [CSV] — a kernel's launches grouped by (grid, block) from an `ncu --csv --metrics
gpu__time_duration.sum,dram__bytes_read.sum -k regex:NAME` run: per group the launch count, the median time
(µs), the median DRAM bytes read (MB) and their ratio (GB/s). For the batch-1 GEMVs a (grid, block) pair is
one weight shape of the model (q/k/v, o, gate/up, down, lm_head), so a group is that shape's launches."""
import collections
import csv
import statistics
import sys

TO_NS = {'usecond': 1e3, 'msecond': 1e6, 'nsecond': 1.0}
TO_B = {'byte': 1.0, 'Kbyte': 1e3, 'Mbyte': 1e6, 'Gbyte': 1e9}


def main():
    label = sys.argv[1]
    path = sys.argv[2] if len(sys.argv) > 2 else '/tmp/nc.csv'
    per = collections.defaultdict(dict)  # launch ID -> metrics, with its (grid, block)
    with open(path) as f:
        for r in csv.DictReader(line for line in f if line.startswith('"')):
            v = float(r['Metric Value'].replace(',', ''))
            unit = r.get('Metric Unit', '')
            m = r['Metric Name']
            d = per[r['ID']]
            d['key'] = (r['Grid Size'], r['Block Size'])
            d[m] = v * (TO_NS.get(unit, 1.0) if 'time' in m else TO_B.get(unit, 1.0))
    groups = collections.defaultdict(list)
    for d in per.values():
        groups[d['key']].append(d)
    for key, ds in sorted(groups.items(), key=lambda kv: -statistics.median(x.get('gpu__time_duration.sum', 0) for x in kv[1])):
        t = statistics.median(x.get('gpu__time_duration.sum', 0) for x in ds)
        b = statistics.median(x.get('dram__bytes_read.sum', 0) for x in ds)
        print('ncu %s grid %s block %s: %d launches, median %.2f us, %.1f MB read, %.0f GB/s'
              % (label, key[0], key[1], len(ds), t / 1e3, b / 1e6, b / t if t else 0))


if __name__ == '__main__':
    main()
