#!/usr/bin/env python3
"""ncu_launches.py LABEL [CSV] — one line for a kernel's launches in an `ncu --csv --metrics
gpu__time_duration.sum,smsp__inst_executed.sum -k regex:NAME` run: how many, total and mean time (µs),
warp instructions (millions). CSV defaults to /tmp/nc.csv (the session-42 call scripts write it there)."""
import csv
import sys

SCALE = {'usecond': 1e3, 'msecond': 1e6}  # to nanoseconds; instructions carry no unit prefix


def main():
    label = sys.argv[1]
    path = sys.argv[2] if len(sys.argv) > 2 else '/tmp/nc.csv'
    vals = {}
    with open(path) as f:
        for r in csv.DictReader(line for line in f if line.startswith('"')):
            v = float(r['Metric Value'].replace(',', '')) * SCALE.get(r.get('Metric Unit', ''), 1.0)
            vals.setdefault(r['Metric Name'], []).append(v)
    d = vals.get('gpu__time_duration.sum', [])
    i = vals.get('smsp__inst_executed.sum', [])
    print('ncu %s: %d launches, %.1f us total, %.2f us mean, %.2fM warp instructions'
          % (label, len(d), sum(d) / 1e3, sum(d) / 1e3 / max(len(d), 1), sum(i) / 1e6))


if __name__ == '__main__':
    main()
