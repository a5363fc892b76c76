#!/usr/bin/env python3
"""Does transformers' from_pretrained keep RoPE inv_freq in f32 for a bf16 checkpoint?

Loads each model directory given with from_pretrained(dtype=bfloat16).float(), as a user
would, and compares one forward with the reference logits saved next to it; prints the
inv_freq buffer's dtype and whether its values are bf16-rounded. Run on the GPU machine
(it has torch + transformers): python3 tools/check/rope_buffer_check.py DIR:REF.json:REF.npy ..."""
import json, sys
import numpy as np
import torch
from transformers import AutoModelForCausalLM

for arg in sys.argv[1:]:
    d, ref_json, ref_npy = arg.split(":")
    ids = json.load(open(ref_json))["input_ids"]
    want = np.load(ref_npy)
    m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16, attn_implementation="eager").float().eval()
    rot = [mod for name, mod in m.named_modules() if name.endswith("rotary_emb")][0]
    inv = rot.inv_freq.detach().float()
    rounded = torch.equal(inv, inv.to(torch.bfloat16).float())
    with torch.no_grad():
        got = m(torch.tensor([ids])).logits[0].float().numpy()
    err = np.abs(got - want).max() / np.abs(want).max()
    print(f"{d}: inv_freq dtype {rot.inv_freq.dtype}, bf16-rounded values: {rounded}, rel err vs reference {err:.3g}")
