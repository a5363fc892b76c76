#!/usr/bin/env python3
"""peer_attn.py — the peer for kiln's prefill attention (attention_wgmma.cu): PyTorch's
scaled_dot_product_attention on the same GPU and the same shapes as a kiln prefill step of one
prompt (batch 1, causal, head_dim 128, GQA), per backend PyTorch offers (flash = FlashAttention-2,
cudnn, efficient), each timed over R calls captured in one CUDA graph (no launch gaps).

FLOPs are the causal ones kiln's notes use: 4 · T² / 2 · head_dim · query heads (Q·Kᵀ and P·V,
half the square). One JSON line per (shape, backend); a backend that refuses the shape prints its
error instead.

    python3 bench/cuda/peer_attn.py [--tokens 2048,4096] [--reps 50]

Runs on the GPU machine only (it has torch; this repository does not need it).
"""
import argparse, json

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from peer_util import graph_time

SHAPES = {"qwen3-0.6b": (16, 8, 128), "llama-3-8b": (32, 8, 128)}
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION}


def one(name, T, backend, reps):
    hq, hkv, d = SHAPES[name]
    g = torch.Generator(device="cuda").manual_seed(1)
    q = torch.randn(1, hq, T, d, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(1, hkv, T, d, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(1, hkv, T, d, device="cuda", dtype=torch.bfloat16, generator=g)
    # GQA: enable_gqa where this torch has it; else K/V repeated per query head (outside the timing)
    try:
        with sdpa_kernel(BACKENDS[backend]):
            F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        call = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        gqa = "enable_gqa"
    except Exception:
        kr, vr = k.repeat_interleave(hq // hkv, 1), v.repeat_interleave(hq // hkv, 1)
        call = lambda: F.scaled_dot_product_attention(q, kr, vr, is_causal=True)
        gqa = "repeated"
    with sdpa_kernel(BACKENDS[backend]):
        for _ in range(3):
            call()
        torch.cuda.synchronize()
        us = graph_time(lambda i: call(), reps, rounds=3) * 1e6
    flop = 4.0 * T * T / 2 * d * hq
    return {"model": name, "tokens": T, "backend": backend, "gqa": gqa, "us": round(us, 2), "tflops": round(flop / us / 1e6, 1)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="2048,4096")
    ap.add_argument("--reps", type=int, default=50)
    o = ap.parse_args()
    print(json.dumps({"torch": torch.__version__, "gpu": torch.cuda.get_device_name()}))
    for T in [int(x) for x in o.tokens.split(",")]:
        for name in SHAPES:
            for be in BACKENDS:
                try:
                    print(json.dumps(one(name, T, be, o.reps)), flush=True)
                except Exception as ex:
                    print(json.dumps({"model": name, "tokens": T, "backend": be, "error": str(ex)[:200]}), flush=True)


if __name__ == "__main__":
    main()
