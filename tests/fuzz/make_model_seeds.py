#!/usr/bin/env python3
"""Seeds for fuzz_model_load: one file per tiny fixture model, laid out as the target reads
its input (4-byte little-endian length of config.json, config.json, model.safetensors).
Usage: python3 tests/fuzz/make_model_seeds.py OUT_DIR [MODELS_DIR]"""
import os
import struct
import sys

out = sys.argv[1]
models = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..", "fixtures", "models")
os.makedirs(out, exist_ok=True)
n = 0
for name in sorted(os.listdir(models)):
    d = os.path.join(models, name)
    cfg, st = os.path.join(d, "config.json"), os.path.join(d, "model.safetensors")
    if not (os.path.isfile(cfg) and os.path.isfile(st)):
        continue  # sharded or incomplete: not a single-file seed
    c = open(cfg, "rb").read()
    with open(os.path.join(out, name), "wb") as f:
        f.write(struct.pack("<I", len(c)) + c + open(st, "rb").read())
    n += 1
print(f"{n} seeds in {out}")
