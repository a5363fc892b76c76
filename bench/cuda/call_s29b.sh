#!/bin/bash
# call_s29b.sh — session 29, call 2: the MLX prefill path (matmul_dequant.cu) with the weight's bound kept per
# weight, x scanned four float4s a thread at a time and the conversion four code words a thread. Tests (the
# prefill matmul subset, test_cuda_parity), logits md5 against kiln-base (a5fcfce) at prefill chunks 100 and 2048
# (bitwise expected), ncu kernel times of one 2048-token prefill on a 2-layer llama-3-8b q4, then prefill tok/s
# (2048-token prompt) and the issue's c=64 A/B.
#   run: bash bench/cuda/call_s29b.sh PKG   (PACK_BINS="kiln kiln-base test_cuda_kernels")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
call_synth q8 l8q8
( /tmp/k/kiln synth --preset llama-3-8b --dtype q4 --layers 2 --out /tmp/s/l2q4 > /dev/null 2>&1; touch /tmp/s/l2q4.done ) &
call_t1 qgemm KILN_CUDA_TEST_QGEMM_ONLY=1
# (test_cuda_parity: not packed — the carry limit; the md5 checks below are bitwise against kiln-base)
while [ ! -f /tmp/s/l8q4.done ] || [ ! -f /tmp/s/q06q4.done ] || [ ! -f /tmp/s/l8q8.done ] || [ ! -f /tmp/s/l2q4.done ]; do sleep 1; done
echo "synth done at $(el) s" >> "$S"
IDS=$(seq -s, 10 2057)
call_md5_ab "l8q4 l8q8 q06q4" "100 2048"
echo "md5 done at $(el) s" >> "$S"
for b in kiln-base kiln; do
  timeout 120 ncu --metrics gpu__time_duration.sum --csv /tmp/k/$b bench /tmp/s/l2q4 --backend cuda --prompt-tokens 2048 --gen-tokens 1 --runs 1 > /tmp/ncu_$b.csv 2>/dev/null
  python3 - /tmp/ncu_$b.csv $b >> $OUT/ncu.txt <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
h = rows[0]; ki = h.index("Kernel Name"); vi = h.index("Metric Value")
tot = collections.OrderedDict(); n = collections.Counter()
for r in rows[1:]:
    k = r[ki].split("(")[0].split("<")[0][:40]
    try: v = float(r[vi].replace(",", ""))
    except ValueError: continue
    tot[k] = tot.get(k, 0) + v; n[k] += 1
print("==", sys.argv[2], "total us %.1f" % (sum(tot.values()) / 1e3))
for k, v in sorted(tot.items(), key=lambda kv: -kv[1])[:14]: print("%-40s %5d %10.1f us" % (k, n[k], v / 1e3))
PY
done
echo "ncu done at $(el) s" >> "$S"
call_base_new_ab
echo "all done at $(el) s" >> "$S"
cat "$S" $OUT/ncu.txt $OUT/bench.txt
