#!/bin/bash
# call_s59i.sh — how llama-3-8b q4's logits differ under the PDL-launched ring on gate/up (call_s59h.sh: still 4 of 4
# with no copy before the wait, 0 of 2 launched plain): per decode step the largest |difference| against the ring-off
# run and the first step that differs (rounding-sized: another summation order somewhere; large: a stale read).
P=${1:-build-lead}
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
call_synth q4 l8q4
call_wait l8q4
IDS=$(seq -s, 1 40)
/tmp/k/kiln logits /tmp/s/l8q4 --backend cuda --ids "$IDS" --chunk 1 --out /tmp/base.npy > /dev/null 2>&1
for i in 1 2 3; do
  KILN_CUDA_GEMV_RING=1 KILN_CUDA_GEMV_RING_NSEG=2 /tmp/k/kiln logits /tmp/s/l8q4 --backend cuda --ids "$IDS" --chunk 1 --out /tmp/r$i.npy > /dev/null 2>&1
done
KILN_CUDA_GEMV_RING=1 KILN_CUDA_GEMV_RING_K=4096 /tmp/k/kiln logits /tmp/s/l8q4 --backend cuda --ids "$IDS" --chunk 1 --out /tmp/r4.npy > /dev/null 2>&1
python3 - >> $S 2>&1 <<'PY'
import numpy as np
b = np.load("/tmp/base.npy")
for i in (1, 2, 3, 4):
    r = np.load(f"/tmp/r{i}.npy")
    d = np.abs(r.astype(np.float64) - b)
    per = d.max(axis=1)
    bad = np.nonzero(per)[0]
    if len(bad) == 0:
        print(f"run {i}: bitwise"); continue
    f = bad[0]
    print(f"run {i}: {len(bad)} of {len(per)} steps differ, first step {f}: max|d| {per[f]:.3g} of max|logit| {np.abs(b[f]).max():.3g}, "
          f"{int((d[f] > 0).sum())} of {d.shape[1]} logits; later max|d| {per.max():.3g}; argmax equal {int((r.argmax(1) == b.argmax(1)).sum())}/{len(per)}")
PY
echo "done at $(el) s" >> $S
cat $S
