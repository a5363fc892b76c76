#!/bin/bash
# What was run on the GPU machine (one NVIDIA H200; torch 2.11, transformers 5.17,
# tokenizers 0.23), from the repository root, with data/train.txt carried over (it is
# not committed: prepare_data.py regenerates it). Results come back in $OUT, split
# into parts of at most 15 MB; unpack with:
#   cat results.tar.part-* | tar -xf - -C /some/dir
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/kiln-train-out}
W=/tmp/kiln-train
rm -rf "$W" /tmp/kiln-smoke && mkdir -p "$OUT" "$W"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
sha256sum data/train.txt data/valid.txt data/heldout.txt | tee "$OUT/data.sha256"
# 1. a smoke test: tiny models, a few steps, the whole pipeline
python3 tools/train-default/train.py --smoke --work /tmp/kiln-smoke 2>&1 | tee "$OUT/smoke.log" \
  || { echo "smoke test failed"; exit 1; }
# 2. the real run
python3 tools/train-default/train.py --work "$W" "$@" 2>&1 | tee "$OUT/train.log"
rc=$?
cp "$W/eval.json" "$OUT/" 2>/dev/null
tar -C "$W" -cf /tmp/results.tar . && split -b 15M -d /tmp/results.tar "$OUT/results.tar.part-"
ls -la "$OUT"
exit $rc
