#!/usr/bin/env python3
"""A tiny Qwen3-Next checkpoint and its transformers reference, in the shared fixtures' format.

The shared fixtures have no Qwen3-Next model, so this script makes one the same way
(../shared/fixtures/README.md): a random-weight Qwen3NextForCausalLM with the real on-disk
layout (fused in_proj_qkvz / in_proj_ba, sparse MoE with a shared expert on most layers,
one dense `mlp_only_layers` layer), bf16 weights, and
  reference/reference.json  input_ids (40), greedy_prompt (12), greedy_tokens (20),
                            greedy_margins, plus how it was made
  reference/logits.npy      float32 [40, vocab], one forward over input_ids
The model is loaded back with from_pretrained(dtype=bfloat16).float() (RoPE inv_freq stays
f32), i.e. what a user gets; kiln's default buffers follow that. dk != dv and
n_v_heads = 2 * n_k_heads so the per-key-head interleaving of the fused projections matters.

Run on the GPU machine (transformers + torch): python3 make_qwen3_next_fixture.py OUT_DIR"""
import json, os, sys
import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, Qwen3NextConfig, Qwen3NextForCausalLM

out = sys.argv[1]
os.makedirs(os.path.join(out, "reference"), exist_ok=True)
torch.manual_seed(1234)
cfg = Qwen3NextConfig(
    vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
    num_attention_heads=4, num_key_value_heads=2, head_dim=32, hidden_act="silu",
    max_position_embeddings=256, initializer_range=0.1, rms_norm_eps=1e-6,
    tie_word_embeddings=False, attention_bias=False,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
    partial_rotary_factor=0.25,
    linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=24,
    linear_num_key_heads=2, linear_num_value_heads=4,
    layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
    num_experts=8, num_experts_per_tok=2, decoder_sparse_step=1, mlp_only_layers=[1],
    moe_intermediate_size=32, shared_expert_intermediate_size=40, norm_topk_prob=True,
)
model = Qwen3NextForCausalLM(cfg).eval()
with torch.no_grad():
    # zero-initialized (1 + w) norms and all-ones gated norms would hide a wrong offset
    for name, p in model.named_parameters():
        if "norm" in name:
            p.add_(torch.randn_like(p) * 0.2)
        if name.endswith("dt_bias"):
            p.copy_(torch.randn_like(p) * 0.5)
model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)

ref = AutoModelForCausalLM.from_pretrained(out, dtype=torch.bfloat16, attn_implementation="eager").float().eval()
g = torch.Generator().manual_seed(99)
ids = torch.randint(0, cfg.vocab_size, (40,), generator=g).tolist()
with torch.no_grad():
    logits = ref(torch.tensor([ids])).logits[0].float().numpy()
    prompt = ids[:12]
    gen = ref.generate(torch.tensor([prompt]), max_new_tokens=20, min_new_tokens=20, do_sample=False,
                       eos_token_id=None, pad_token_id=0, return_dict_in_generate=True, output_logits=True)
toks = gen.sequences[0, len(prompt):].tolist()
margins = []
for step in gen.logits:
    top = torch.topk(step[0].float(), 2).values
    margins.append(float(top[0] - top[1]))
np.save(os.path.join(out, "reference", "logits.npy"), logits.astype(np.float32))
json.dump({"input_ids": ids, "greedy_prompt": prompt, "greedy_tokens": toks, "greedy_margins": margins,
           "made_by": "tools/check/make_qwen3_next_fixture.py: from_pretrained(dtype=bfloat16).float(), eager attention",
           "transformers": transformers.__version__, "torch": torch.__version__},
          open(os.path.join(out, "reference", "reference.json"), "w"), indent=1)
print("tensors:", sorted(k for k in __import__("safetensors").safe_open(os.path.join(out, "model.safetensors"), "pt").keys())[:40])
print("greedy:", toks)
print("min margin:", min(margins))
