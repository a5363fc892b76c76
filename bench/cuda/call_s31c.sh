#!/bin/bash
# call_s31c.sh — session 31: where a batch-1 decode token of llama-3-8b q4 / bf16 goes at a 2048-position context, per kernel
# (ncu, serialized: no PDL overlap), on 2-layer synths — the difference of a 6- and a 2-token run, so the prefill drops
# out — and the same synths' decode tok/s in the graph (PDL on) for the overlap.
#   run: bash bench/cuda/call_s31c.sh PKG/kiln-cuda.tar.xz   (PACK_BINS="kiln")
P=${1:?package}
. bench/cuda/call_lib.sh; call_unpack "$P"
for m in l8q4 l8bf16; do ( /tmp/k/kiln synth --preset llama-3-8b --dtype ${m#l8} --layers 2 --out /tmp/s/${m}2 >/dev/null 2>&1; touch /tmp/s/${m}2.done ) & done
wait
for m in l8q42 l8bf162; do for g in 2 6; do
  KILN_CUDA_GRAPH=0 timeout 200 ncu --metrics gpu__time_duration.sum --csv /tmp/k/kiln bench /tmp/s/$m --backend cuda --prompt-tokens 2048 --gen-tokens $g --runs 1 > /tmp/n_${m}_$g.csv 2>/dev/null
  python3 bench/cuda/ncu_sum.py /tmp/n_${m}_$g.csv > $OUT/ncu_${m}_$g.txt
done; done
for m in l8q42 l8bf162; do echo "== $m"; python3 - $OUT/ncu_${m}_2.txt $OUT/ncu_${m}_6.txt <<'PY'
import sys,re
def rd(f):
    d={}
    for l in open(f):
        m=re.match(r'\s*([\d.]+) us\s+[\d.]+ %\s+(\d+)x\s+(\S+)',l)
        if m: d[m.group(3)]=(float(m.group(1)),int(m.group(2)))
    return d
a,b=rd(sys.argv[1]),rd(sys.argv[2])
rows=[(b[k][0]-a.get(k,(0,0))[0], b[k][1]-a.get(k,(0,0))[1], k) for k in b]
rows=[r for r in rows if r[1]>0]; rows.sort(reverse=True)
tot=sum(r[0] for r in rows)
print("4 decode tokens, 2 layers: %.1f us = %.1f us a token"%(tot,tot/4))
for us,n,k in rows: print("%8.1f us %4dx %6.2f us/launch  %s"%(us/4,n//4 if n>=4 else n,us/n,k))
PY
done
for m in l8q42 l8bf162; do echo "graph $m $(/tmp/k/kiln bench /tmp/s/$m --backend cuda --prompt-tokens 2048 --gen-tokens 256 --runs 2 --json 2>/dev/null | grep -o "\"decode_tok_s\": [0-9.]*")"; done
