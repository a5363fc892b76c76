#!/usr/bin/env python3
# ncu_sum.py — total gpu__time_duration per kernel name (template arguments dropped) from an
# `ncu --csv --metrics gpu__time_duration.sum` log, largest first: where a step's GPU time goes.
#   python3 bench/cuda/ncu_sum.py FILE.csv
# launches(FILE) — each launch's (kernel name, µs) in order — is also ncu_pair.py's reader.
import csv, sys, collections

def launches(path):
    out = []
    rows = [l for l in open(path) if l.startswith('"')]
    for r in csv.DictReader(rows):
        if r.get('Metric Name') != 'gpu__time_duration.sum': continue
        name = r['Kernel Name'].replace('(anonymous namespace)::', '').replace('<unnamed>::', '').split('<')[0].split('(')[0].replace('void ', '')
        v = float(r['Metric Value'].replace(',', ''))
        unit = r.get('Metric Unit', 'nsecond')
        out.append((name, v / 1000 if unit in ('nsecond', 'ns') else v * 1000 if unit in ('msecond', 'ms') else v))
    return out

if __name__ == '__main__':
    tot, cnt = collections.Counter(), collections.Counter()
    for name, us in launches(sys.argv[1]):
        tot[name] += us; cnt[name] += 1
    all_us = sum(tot.values())
    print(f"total {all_us:.1f} us in {sum(cnt.values())} launches")
    for n, us in tot.most_common():
        print(f"{us:10.1f} us {100 * us / all_us:5.1f} % {cnt[n]:5d}x  {n}")
