#!/usr/bin/env python3
"""hf_bf16.py — how far transformers itself lands from the fixtures' f32 references when it
runs in bf16, on the GPU machine (torch + transformers there).

The fixture references (tests/fixtures/models/*/reference/logits.npy) are transformers
computing in f32 from the bf16 weights. kiln's "cuda" path once rounded every matmul input
to bf16 and missed the 1e-2 bar on the hybrid/gemma4 fixtures (docs/cuda.md, Numerics);
this script measures the same error metric (max |a - b| / max |b| over all logits) for
transformers run the usual bf16 way: from_pretrained(dtype=bfloat16) with no .float(), on
CUDA, eager attention, and for its f32 run as a control.

    python3 tests/cuda/hf_bf16.py [FIXTURE...]     (from the repository root)
Prints one JSON line per fixture and mode."""
import json, os, sys
import numpy as np
import torch
from transformers import AutoModelForCausalLM

FIX = sys.argv[1:] or ["llama-tiny", "qwen3-tiny", "gemma3-tiny", "qwen3_5-tiny", "qwen3_5_moe-tiny", "qwen3_next-tiny",
                       "gemma4-tiny-ple", "gemma4-tiny-moe"]
dev = "cuda" if torch.cuda.is_available() else "cpu"
for name in FIX:
    d = os.path.join("tests/fixtures/models", name)
    ref = json.load(open(os.path.join(d, "reference", "reference.json")))
    want = np.load(os.path.join(d, "reference", "logits.npy")).astype(np.float64)
    ids = torch.tensor([ref["input_ids"]], device=dev)
    for mode in ("f32", "bf16"):
        try:
            m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16, attn_implementation="eager")
            if mode == "f32":
                m = m.float()
            m = m.to(dev).eval()
            with torch.no_grad():
                got = m(ids).logits[0].float().cpu().numpy().astype(np.float64)
            err = float(np.abs(got - want).max() / np.abs(want).max())
            print(json.dumps({"fixture": name, "transformers": mode, "logits_rel_err": err, "device": dev}), flush=True)
        except Exception as ex:  # report and go on: one fixture must not hide the others
            print(json.dumps({"fixture": name, "transformers": mode, "error": repr(ex)[:300]}), flush=True)
