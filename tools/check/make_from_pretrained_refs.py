#!/usr/bin/env python3
"""Reference logits as transformers gives them to a user who loads a fixture normally.

The shared fixtures' reference logits were produced with the RoPE inv_freq table rounded
to bf16 (transformers casts that buffer when a model is cast to bf16 in memory; loading a
bf16 checkpoint with from_pretrained keeps it in f32). This script records the other
view: for each fixture, from_pretrained(dtype=bfloat16).float() with eager attention, one
forward over reference.json's input_ids, float32 logits -> OUT/<name>.npy, plus a small
JSON with versions. Run on the GPU machine: python3 make_from_pretrained_refs.py OUT."""
import json, os, sys
import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
root = "tests/fixtures/models"
meta = {"transformers": transformers.__version__, "torch": torch.__version__, "models": {}}
for name in sorted(os.listdir(root)):
    d = os.path.join(root, name)
    try:
        ids = json.load(open(os.path.join(d, "reference", "reference.json")))["input_ids"]
        want = np.load(os.path.join(d, "reference", "logits.npy"))
        m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16, attn_implementation="eager").float().eval()
        with torch.no_grad():
            got = m(torch.tensor([ids])).logits[0].float().numpy()
        np.save(os.path.join(out, name + ".npy"), got.astype(np.float32))
        err = float(np.abs(got - want).max() / np.abs(want).max())
        meta["models"][name] = {"rel_err_vs_fixture_reference": err}
        print(f"{name}: rel err vs fixture reference {err:.3g}")
    except Exception as ex:  # record and go on: one architecture failing must not hide the rest
        meta["models"][name] = {"error": repr(ex)[:300]}
        print(f"{name}: FAILED {ex!r}"[:300])
json.dump(meta, open(os.path.join(out, "from_pretrained.json"), "w"), indent=1)
