#!/usr/bin/env python3
"""peer_gemv.py — a peer for kiln's batch-1 decode GEMVs, kernel by kernel: PyTorch's own weight-only
kernels on the same GPU at llama-3-8b's shapes, one token of x.

  int4: torch._weight_int4pack_mm (the "tinygemm" kernel gpt-fast and torchao's int4 weight-only path
        use): 4-bit codes, bf16 scale and zero per group of 64 along K, bf16 x — the same bytes a token
        reads as an MLX q4 weight with group 64 (codes + two 16-bit words per group)
  int8: torch._weight_int8pack_mm: int8 codes, one bf16 scale per row (no groups: fewer bytes than MLX q8)
  bf16: torch.nn.functional.linear, bf16 weight and x (cuBLAS)

Each shape runs R calls in one CUDA graph over enough copies of the weight that every call reads from
HBM (the copies together exceed 4x the 50 MB L2), so a call's time is its kernel's standalone time, no
launch overhead and no overlap with a neighbour (kiln's kernels are timed the same way by ncu with the
cache flushed). GB/s = the weight's bytes (codes + scales/zeros) / time. Prints one JSON line a shape.

    python3 bench/cuda/peer_gemv.py [--kinds int4,int8,bf16] [--reps 200]

Runs on the GPU machine only (it has torch; this repository needs none).
"""
import argparse, json, math

import torch

from peer_util import graph_time

SHAPES = [("qkv", 6144, 4096), ("o", 4096, 4096), ("gate_up", 28672, 4096), ("down", 4096, 14336), ("lm_head", 128256, 4096)]
GROUP = 64


def make(kind, n, k):
    if kind == "int4":
        codes = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, device="cuda")
        w = torch._convert_weight_to_int4pack(codes, 8)
        sz = (torch.rand(k // GROUP, n, 2, device="cuda") * 0.02).to(torch.bfloat16)
        nbytes = n * k // 2 + sz.numel() * 2
        return (w, sz), nbytes
    if kind == "int8":
        w = torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda")
        s = (torch.rand(n, device="cuda") * 0.02).to(torch.bfloat16)
        return (w, s), n * k + n * 2
    w = (torch.randn(n, k, device="cuda") * 0.02).to(torch.bfloat16)
    return (w,), n * k * 2


def call(kind, x, wt):
    if kind == "int4":
        return torch._weight_int4pack_mm(x, wt[0], GROUP, wt[1])
    if kind == "int8":
        return torch._weight_int8pack_mm(x, wt[0], wt[1])
    return torch.nn.functional.linear(x, wt[0])


def bench(kind, name, n, k, reps):
    first, nbytes = make(kind, n, k)
    copies = [first] + [make(kind, n, k)[0] for _ in range(max(2, math.ceil(200e6 / nbytes)) - 1)]
    x = torch.randn(1, k, device="cuda").to(torch.bfloat16)
    for wt in copies:  # warm-up (and the kernels' first-call setup) outside the graph
        call(kind, x, wt)
    torch.cuda.synchronize()
    best = graph_time(lambda i: call(kind, x, copies[i % len(copies)]), reps)
    return {"peer": "torch", "kind": kind, "shape": name, "N": n, "K": k, "copies": len(copies), "us": round(best * 1e6, 2),
            "bytes": nbytes, "GB_s": round(nbytes / best / 1e9, 1)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kinds", default="int4,int8,bf16")
    ap.add_argument("--reps", type=int, default=200)
    a = ap.parse_args()
    print(json.dumps({"torch": torch.__version__, "device": torch.cuda.get_device_name()}), flush=True)
    for kind in a.kinds.split(","):
        for name, n, k in SHAPES:
            try:
                print(json.dumps(bench(kind, name, n, k, a.reps)), flush=True)
            except Exception as e:  # a kind this torch build lacks: say so, go on
                print(json.dumps({"peer": "torch", "kind": kind, "shape": name, "error": str(e)[:300]}), flush=True)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
