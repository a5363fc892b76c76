#!/usr/bin/env python3
"""peer_torch.py — the peer for kiln's CUDA decode numbers: Hugging Face transformers on the
same GPU, the same checkpoint (a `kiln synth` directory: config.json + bf16 safetensors, read
by from_pretrained as any HF checkpoint) and the same shape as `kiln bench` (a random prompt of
P tokens, then G greedy tokens).

Decode rate = (G - 1) / (time of generate(P, G) - time of generate(P, 1)), each timed after a
warm-up of the same call, so the prefill and the first token cancel out. Modes (each that is
asked for runs; one that fails prints its error): `compile` (static KV cache + torch.compile(mode="reduce-overhead"), the
recipe transformers documents for fast decode: CUDA graphs, fused kernels), `static` (static
cache, no compile), `eager` (the default dynamic cache). Prints one JSON line per mode that ran.

    python3 bench/cuda/peer_torch.py DIR [--prompt-tokens 2048] [--gen-tokens 128] [--modes eager,compile]

On the H200 (session 13) the compile mode did not finish within 240 s for llama-3-8b (16 GB load plus
two compiled shapes), and eager never got its turn: this script has not yet produced a number. The
default runs eager only; give `--modes compile` a call of its own.

Runs on the GPU machine only (it has torch and transformers; this repository needs neither).
"""
import argparse, json, sys, time

import torch
import transformers
from transformers import AutoModelForCausalLM


def timed_generate(model, ids, n_new):
    torch.cuda.synchronize()
    t = time.perf_counter()
    out = model.generate(ids, max_new_tokens=n_new, min_new_tokens=n_new, do_sample=False)
    torch.cuda.synchronize()
    assert out.shape[1] == ids.shape[1] + n_new, out.shape
    return time.perf_counter() - t


def run_mode(path, mode, P, G):
    model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.bfloat16, device_map="cuda")
    model.eval()
    gc = model.generation_config
    gc.eos_token_id = None
    gc.pad_token_id = 0
    gc.temperature, gc.top_p, gc.top_k = None, None, None
    if mode in ("compile", "static"):
        gc.cache_implementation = "static"
    if mode == "compile":
        model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(10, model.config.vocab_size - 10, (1, P), generator=g).cuda()
    with torch.inference_mode():
        t0 = time.perf_counter()
        timed_generate(model, ids, 1)          # warm-up (compiles the prefill shape)
        timed_generate(model, ids, G)          # warm-up (compiles / captures the decode shape)
        warm = time.perf_counter() - t0
        t1 = min(timed_generate(model, ids, 1) for _ in range(2))
        tg = min(timed_generate(model, ids, G) for _ in range(2))
    del model
    torch.cuda.empty_cache()
    return {"mode": mode, "decode_tok_s": round((G - 1) / (tg - t1), 2),
            "prefill_tok_s": round(P / t1, 1), "t_prefill_s": round(t1, 4), "t_total_s": round(tg, 4),
            "warmup_s": round(warm, 1)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--prompt-tokens", type=int, default=2048)
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--modes", default="eager")
    a = ap.parse_args()
    base = {"model": a.dir, "torch": torch.__version__, "transformers": transformers.__version__,
            "gpu": torch.cuda.get_device_name(0), "prompt_tokens": a.prompt_tokens, "gen_tokens": a.gen_tokens}
    for mode in a.modes.split(","):
        try:
            r = run_mode(a.dir, mode, a.prompt_tokens, a.gen_tokens)
        except Exception as e:  # a mode this transformers cannot run: say so, try the next
            r = {"mode": mode, "error": f"{type(e).__name__}: {str(e)[:300]}"}
        print(json.dumps({**base, **r}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
