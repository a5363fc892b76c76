#!/usr/bin/env python3
"""Train kiln's default models from scratch: a byte-level BPE tokenizer, kiln-tiny (a small
Qwen3ForCausalLM) and kiln-tiny-draft (a 2-layer Qwen3 for speculative decoding); then
evaluate them and write reference outputs for kiln's C forward.

Needs: torch, transformers (5.x; 4.5x should work), tokenizers, numpy. One GPU (bf16
autocast); runs on CPU too, slowly (use --smoke there).

Inputs:  data/train.txt, data/valid.txt, data/heldout.txt (tools/train-default/prepare_data.py)
Outputs (under --work):
  models/kiln-tiny/, models/kiln-tiny-draft/   Hugging Face format, bf16 safetensors
  reference/                                   greedy + first-forward logits per model
  eval.json                                    every number the model cards quote
  curves.jsonl                                 validation loss during training
See tools/train-default/README.md and EVAL.md.
"""
import argparse
import json
import math
import os
import random
import re
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# The Qwen2/Qwen3 pre-tokenizer split (GPT-4 style, single digits).
QWEN_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
            r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
PROMPTS = ["The history of the United States",
           "In the morning, the old man",
           "The committee reported that",
           "She looked at the letter and"]
REF_PROMPT = "The history of the United States"

MAIN = dict(name="kiln-tiny", hidden_size=384, intermediate_size=1024, num_hidden_layers=8,
            num_attention_heads=6, num_key_value_heads=2, head_dim=64, lr=1.5e-3)
DRAFT = dict(name="kiln-tiny-draft", hidden_size=192, intermediate_size=768,
             num_hidden_layers=2, num_attention_heads=3, num_key_value_heads=1, head_dim=64,
             lr=3e-3)
SMOKE_MAIN = dict(MAIN, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=2, num_key_value_heads=1, head_dim=32)
SMOKE_DRAFT = dict(DRAFT, hidden_size=32, intermediate_size=64, num_attention_heads=1,
                   head_dim=32)


def log(*a):
    print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)


def read_docs(path):
    text = open(path, encoding="utf-8").read()
    return [d for d in text.rstrip("\n").split("\n\n\n") if d.strip()]


# ------------------------------------------------------------------ tokenizer

def train_tokenizer(docs, vocab_size):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    from tokenizers import processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_PAT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(SPECIALS), min_frequency=2, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    paras = [p for d in docs for p in d.split("\n\n")]
    tok.train_from_iterator(paras, trainer=trainer, length=len(paras))
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    return tok


def save_tokenizer_files(tok, out_dir, max_len):
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    ids = {s: tok.token_to_id(s) for s in SPECIALS}
    cfg = {
        "add_bos_token": False,
        "add_eos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(ids[s]): {"content": s, "lstrip": False, "normalized": False,
                          "rstrip": False, "single_word": False, "special": True}
            for s in SPECIALS},
        "bos_token": "<|endoftext|>",
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "model_max_length": max_len,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    return ids


# ------------------------------------------------------------------ data

def render_chat(doc):
    """A training document rendered as a ChatML conversation: the user's turn is one
    paragraph, the assistant answers with the next (up to) three."""
    paras = doc.split("\n\n")
    out, i, user = [], 0, True
    while i < len(paras):
        n = 1 if user else 3
        content = "\n\n".join(paras[i:i + n])
        out.append(f"<|im_start|>{'user' if user else 'assistant'}\n{content}<|im_end|>\n")
        i += n
        user = not user
    return "".join(out)


def build_stream(tok, docs, eot, chat_frac, seed):
    rng = random.Random(seed)
    texts = [render_chat(d) if rng.random() < chat_frac else d for d in docs]
    encs = tok.encode_batch(texts)
    ids = []
    for e in encs:
        ids.extend(e.ids)
        ids.append(eot)
    n_chat = sum(1 for t in texts if t.startswith("<|im_start|>"))
    return torch.tensor(ids, dtype=torch.long), n_chat


def windows(ids, n):
    """Consecutive non-overlapping windows of n tokens; the last may be shorter."""
    return [ids[i:i + n] for i in range(0, len(ids), n)]


# ------------------------------------------------------------------ model

def make_config(spec, vocab_size, ctx, ids):
    from transformers import Qwen3Config
    kw = dict(vocab_size=vocab_size, hidden_size=spec["hidden_size"],
              intermediate_size=spec["intermediate_size"],
              num_hidden_layers=spec["num_hidden_layers"],
              num_attention_heads=spec["num_attention_heads"],
              num_key_value_heads=spec["num_key_value_heads"], head_dim=spec["head_dim"],
              hidden_act="silu", max_position_embeddings=ctx, initializer_range=0.02,
              rms_norm_eps=1e-6, use_cache=True, tie_word_embeddings=True,
              attention_bias=False, attention_dropout=0.0, use_sliding_window=False,
              bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
              pad_token_id=ids["<|endoftext|>"])
    try:
        cfg = Qwen3Config(rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, **kw)
    except TypeError:
        cfg = Qwen3Config(rope_theta=10000.0, **kw)
    d = cfg.to_dict()
    theta = (d.get("rope_parameters") or {}).get("rope_theta", d.get("rope_theta"))
    assert theta == 10000.0, f"rope_theta not applied: {d}"
    return cfg


def n_params(model):
    # tied: the embedding counts once
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


@torch.no_grad()
def window_nll(model, ids, n, device, batch=32, autocast=False):
    """Sum of NLL (float64) and count over all predicted tokens, per the EVAL.md protocol."""
    ws = windows(ids, n)
    full = [w for w in ws if len(w) == n]
    rest = [w for w in ws if len(w) != n]
    total, count = 0.0, 0
    groups = [full[i:i + batch] for i in range(0, len(full), batch)] + [[w] for w in rest]
    for g in groups:
        x = torch.tensor(g, dtype=torch.long, device=device)
        if x.shape[1] < 2:
            continue
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            logits = model(input_ids=x).logits
        logits = logits.float()
        nll = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                              x[:, 1:].reshape(-1), reduction="sum")
        total += float(nll.double())
        count += x.shape[0] * (x.shape[1] - 1)
    return total, count


def train_one(spec, cfg, stream, valid_ids, args, device, epochs, wd, curves, tag):
    from transformers import Qwen3ForCausalLM
    torch.manual_seed(args.seed)
    model = Qwen3ForCausalLM(cfg).to(device)
    model.train()
    ctx, bs = args.ctx, args.batch
    steps_per_epoch = max(1, (len(stream) - 1) // (ctx * bs))
    total = max(2, int(epochs * steps_per_epoch))
    warm = min(args.warmup, total // 10 + 1)
    eval_every = max(1, steps_per_epoch // 4)
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.dim() >= 2 else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=spec["lr"], betas=(0.9, 0.95), eps=1e-8,
                            fused=(device.type == "cuda"))
    gen = torch.Generator().manual_seed(args.seed + 1)
    stream_dev = stream.to(device)
    ar = torch.arange(ctx + 1, device=device)
    best = (float("inf"), -1, None)
    t0 = time.time()
    bad = 0
    for step in range(total + 1):
        if step % eval_every == 0 or step == total:
            model.eval()
            s, c = window_nll(model, valid_ids, ctx, device, autocast=(device.type == "cuda"))
            model.train()
            vl = s / c
            curves.append({"run": tag, "step": step, "epoch": step / steps_per_epoch,
                           "valid_loss": vl, "time": time.time() - t0})
            if vl < best[0]:
                best = (vl, step, {k: v.detach().clone() for k, v in model.state_dict().items()})
                bad = 0
            else:
                bad += 1
            log(f"{tag} step {step}/{total} ep {step / steps_per_epoch:.2f} "
                f"valid {vl:.4f} (ppl {math.exp(vl):.2f}) best@{best[1]}")
            if bad >= args.patience:
                log(f"{tag}: early stop, no improvement in {bad} evaluations")
                break
        if step == total:
            break
        lr = spec["lr"] * (step + 1) / warm if step < warm else spec["lr"] * (
            0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, total - warm))))
        for g in opt.param_groups:
            g["lr"] = lr
        off = torch.randint(0, len(stream) - ctx - 1, (bs,), generator=gen).to(device)
        x = stream_dev[off[:, None] + ar]
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=(device.type == "cuda")):
            logits = model(input_ids=x[:, :-1]).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                               x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0:
            log(f"{tag} step {step} loss {loss.item():.4f} lr {lr:.2e} "
                f"{(time.time() - t0) / (step + 1) * 1000:.1f} ms/step")
    model.load_state_dict(best[2])
    info = {"epochs_planned": epochs, "steps_planned": total,
            "steps_per_epoch": steps_per_epoch, "best_step": best[1],
            "best_epoch": best[1] / steps_per_epoch, "best_valid_loss": best[0],
            "train_seconds": time.time() - t0, "batch_tokens": bs * ctx, "lr": spec["lr"],
            "wd": wd, "warmup": warm,
            "sec_per_step": (time.time() - t0) / max(1, step)}
    return model, info


def parse_grid(text):
    """"8:0.1,12:0.3" -> [(8.0, 0.1), (12.0, 0.3)]  (epochs of the cosine schedule : AdamW
    weight decay)."""
    out = []
    for item in text.split(","):
        e, w = item.split(":")
        out.append((float(e), float(w)))
    return out


def search_and_train(spec, cfg, stream, valid_ids, args, device, curves, grid, budget):
    """Train each (epochs, weight decay) of the grid in order, each with early stopping on
    valid.txt, while the time budget allows (a run is skipped when the previous run's speed
    says it would not fit). The run with the lowest validation loss is kept. Selection uses
    valid.txt only, never heldout.txt."""
    t_start = time.time()
    tried, best, last = {}, None, None
    for epochs, wd in grid:
        if last is not None:
            est = last["sec_per_step"] * last["steps_per_epoch"] * epochs * 1.1 + 5
            if time.time() - t_start + est > budget:
                log(f"{spec['name']}: no time left for {epochs:g} epochs (needs ~{est:.0f}s)")
                continue
        tag = f"{spec['name']}@{epochs:g}ep,wd{wd:g}"
        model, info = train_one(spec, cfg, stream, valid_ids, args, device, epochs, wd,
                                curves, tag)
        tried[tag] = info["best_valid_loss"]
        last = info
        if best is None or info["best_valid_loss"] < best[1]["best_valid_loss"]:
            best = (model, info)
        else:
            del model
    best[1]["tried"] = tried
    log(f"{spec['name']}: chose {best[1]['epochs_planned']:g} epochs, wd {best[1]['wd']:g}; "
        f"tried {tried}")
    return best


# ------------------------------------------------------------------ save / eval

def save_model(model, spec, out_dir, ids, ctx):
    model = model.to(torch.bfloat16)
    try:
        model.config.dtype = "bfloat16"
    except Exception:
        pass
    try:
        model.save_pretrained(out_dir, safe_serialization=True)
    except TypeError:
        model.save_pretrained(out_dir)
    gen = {"bos_token_id": ids["<|endoftext|>"],
           "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
           "pad_token_id": ids["<|endoftext|>"],
           "do_sample": True, "temperature": 0.7, "top_p": 0.9, "top_k": 0,
           "max_new_tokens": 256}
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=2)
        f.write("\n")


def load_fp32(path, device):
    from transformers import Qwen3ForCausalLM
    try:
        m = Qwen3ForCausalLM.from_pretrained(path, dtype=torch.bfloat16,
                                             attn_implementation="eager")
    except TypeError:
        m = Qwen3ForCausalLM.from_pretrained(path, torch_dtype=torch.bfloat16,
                                             attn_implementation="eager")
    assert next(m.parameters()).dtype == torch.bfloat16
    return m.float().to(device).eval()


def load_words():
    words = set()
    with open(os.path.join(HERE, "words", "american-english"), encoding="utf-8") as f:
        for w in f:
            words.add(w.strip())
    return words


WORD_RE = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)*")


def dict_share(text, words):
    ws = WORD_RE.findall(text)
    ok = 0
    for w in ws:
        base = w[:-2] if w.endswith("'s") else w
        if any(v in words for v in (w, w.lower(), w.capitalize(), base, base.lower(),
                                    base.capitalize())):
            ok += 1
    return ok, len(ws)


@torch.no_grad()
def sample(model, tok, prompt, n, length, temperature, seed, device, stop_ids):
    g = torch.Generator(device=device).manual_seed(seed)
    ids = tok.encode(prompt).ids
    x = torch.tensor([ids] * n, dtype=torch.long, device=device)
    out = model(input_ids=x, use_cache=True)
    past, logits = out.past_key_values, out.logits[:, -1].float()
    gen = []
    for _ in range(length):
        probs = torch.softmax(logits / temperature, dim=-1)
        nxt = torch.multinomial(probs, 1, generator=g)
        gen.append(nxt)
        out = model(input_ids=nxt, past_key_values=past, use_cache=True)
        past, logits = out.past_key_values, out.logits[:, -1].float()
    gen = torch.cat(gen, 1).tolist()
    texts = []
    for row in gen:
        cut = [t for t in row]
        for i, t in enumerate(row):
            if t in stop_ids:
                cut = row[:i]
                break
        texts.append(tok.decode(cut, skip_special_tokens=False))
    return texts


@torch.no_grad()
def reference(model, tok, device, out_dir, name, n_new=32):
    ids = tok.encode(REF_PROMPT).ids
    x = torch.tensor([ids], dtype=torch.long, device=device)
    logits = model(input_ids=x).logits[0].float().cpu().numpy()
    os.makedirs(out_dir, exist_ok=True)
    np.save(os.path.join(out_dir, f"{name}.logits.npy"), logits.astype(np.float32))
    # greedy with the KV cache, EOS disabled
    out = model(input_ids=x, use_cache=True)
    past, last = out.past_key_values, out.logits[0, -1].float()
    toks, margins = [], []
    for _ in range(n_new):
        top2 = torch.topk(last, 2)
        t = int(top2.indices[0])
        toks.append(t)
        margins.append(round(float(top2.values[0] - top2.values[1]), 6))
        out = model(input_ids=torch.tensor([[t]], device=device), past_key_values=past,
                    use_cache=True)
        past, last = out.past_key_values, out.logits[0, -1].float()
    # the same without the cache, as a cross-check
    seq = list(ids)
    for _ in range(n_new):
        lg = model(input_ids=torch.tensor([seq], device=device)).logits[0, -1]
        seq.append(int(lg.argmax()))
    ref = {"model": name, "prompt": REF_PROMPT, "input_ids": ids,
           "logits": f"{name}.logits.npy [T, vocab] float32, one row per input position: "
                     "a single forward over input_ids, float32 from the bf16 weights",
           "greedy_prompt": ids, "greedy_tokens": toks, "greedy_margins": margins,
           "greedy_text": tok.decode(toks),
           "greedy_nocache_agrees": seq[len(ids):] == toks,
           "made_with": {"torch": torch.__version__, "transformers": _tv(),
                         "attention": "eager", "tf32": False}}
    with open(os.path.join(out_dir, f"{name}.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    return ref


def _tv():
    import transformers
    return transformers.__version__


def file_size(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))


# ------------------------------------------------------------------ main

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="data")
    ap.add_argument("--work", default="/tmp/kiln-train")
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--patience", type=int, default=8)
    ap.add_argument("--chat-frac", type=float, default=0.1)
    ap.add_argument("--main-grid", default="8:0.1,8:0.3,12:0.3",
                    help="epochs:weight_decay runs to try for kiln-tiny, in order")
    ap.add_argument("--draft-grid", default="20:0.1")
    ap.add_argument("--main-budget", type=float, default=190, help="seconds for the grid")
    ap.add_argument("--draft-budget", type=float, default=60)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--smoke", action="store_true", help="tiny models, few steps: a test run")
    args = ap.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    log("device", device, "torch", torch.__version__, "transformers", _tv())

    train_docs = read_docs(os.path.join(args.data, "train.txt"))
    valid_docs = read_docs(os.path.join(args.data, "valid.txt"))
    heldout_text = open(os.path.join(args.data, "heldout.txt"), encoding="utf-8").read()
    valid_text = open(os.path.join(args.data, "valid.txt"), encoding="utf-8").read()
    main_spec, draft_spec = MAIN, DRAFT
    if args.smoke:
        train_docs = train_docs[:40]
        heldout_text = heldout_text[:20000]
        valid_text = valid_text[:20000]
        main_spec, draft_spec = SMOKE_MAIN, SMOKE_DRAFT
        args.main_grid = args.draft_grid = "1:0.1"
        args.warmup = 5
    log(f"train {len(train_docs)} docs, valid {len(valid_docs)} docs")

    # tokenizer
    t0 = time.time()
    tok = train_tokenizer(train_docs, args.vocab)
    vocab = tok.get_vocab_size()
    log(f"tokenizer: vocab {vocab} in {time.time() - t0:.1f}s")
    mdir = os.path.join(args.work, "models")
    tmp_tok = os.path.join(args.work, "tokenizer")
    ids = save_tokenizer_files(tok, tmp_tok, args.ctx)
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(tmp_tok, "tokenizer.json"))  # what we ship
    eot = ids["<|endoftext|>"]

    stream, n_chat = build_stream(tok, train_docs, eot, args.chat_frac, args.seed)
    valid_ids = tok.encode(valid_text).ids
    heldout_ids = tok.encode(heldout_text).ids
    log(f"train stream {len(stream)} tokens ({n_chat} docs as chat), valid {len(valid_ids)}, "
        f"heldout {len(heldout_ids)}")

    curves = []
    results = {"args": vars(args), "vocab_size": vocab, "special_ids": ids,
               "train_tokens": len(stream), "train_docs_as_chat": n_chat,
               "valid_tokens": len(valid_ids), "heldout_tokens": len(heldout_ids),
               "torch": torch.__version__, "transformers": _tv(),
               "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu"}
    words = load_words()
    ok, tot = dict_share(heldout_text, words)
    results["heldout_dict_share"] = ok / max(1, tot)

    for spec, grid, budget in ((main_spec, parse_grid(args.main_grid), args.main_budget),
                               (draft_spec, parse_grid(args.draft_grid), args.draft_budget)):
        cfg = make_config(spec, vocab, args.ctx, ids)
        model, info = search_and_train(spec, cfg, stream, valid_ids, args, device, curves,
                                       grid, budget)
        out_dir = os.path.join(mdir, spec["name"])
        save_model(model, spec, out_dir, ids, args.ctx)
        save_tokenizer_files(tok, out_dir, args.ctx)
        del model
        torch.cuda.empty_cache() if device.type == "cuda" else None

        # evaluate the saved checkpoint: bf16 weights, computed in float32
        m = load_fp32(out_dir, device)
        r = dict(info)
        r["params"] = n_params(m)
        r["config"] = {k: spec[k] for k in spec if k not in ("name", "lr")}
        r["dir_bytes"] = file_size(out_dir)
        r["safetensors_bytes"] = os.path.getsize(os.path.join(out_dir, "model.safetensors"))
        s, c = window_nll(m, heldout_ids, args.ctx, device)
        r["heldout"] = {"nll_sum": s, "predicted_tokens": c, "tokens": len(heldout_ids),
                        "windows": len(windows(heldout_ids, args.ctx)), "N": args.ctx,
                        "mean_nll": s / c, "ppl": math.exp(s / c)}
        s, c = window_nll(m, valid_ids, args.ctx, device)
        r["valid"] = {"mean_nll": s / c, "ppl": math.exp(s / c), "tokens": len(valid_ids)}
        log(f"{spec['name']}: {r['params']} params, heldout ppl {r['heldout']['ppl']:.3f} "
            f"({r['heldout']['predicted_tokens']} predicted tokens), valid ppl "
            f"{r['valid']['ppl']:.3f}")
        samples = []
        ok = tot = 0
        stop = {ids["<|endoftext|>"], ids["<|im_end|>"]}
        for i, p in enumerate(PROMPTS):
            for t in sample(m, tok, p, 5, 60, 0.7, args.seed + i, device, stop):
                a, b = dict_share(t, words)
                ok, tot = ok + a, tot + b
                samples.append({"prompt": p, "continuation": t, "dict_words": a, "words": b})
        r["samples"] = samples
        r["dict_share"] = ok / max(1, tot)
        r["dict_words"], r["sample_words"] = ok, tot
        log(f"{spec['name']}: dictionary-word share {r['dict_share']:.3f} ({ok}/{tot})")
        for smp in samples[::5]:
            log("  sample:", repr(smp["prompt"] + smp["continuation"]))
        # chat smoke: what does it say after a ChatML prompt?
        chat = ("<|im_start|>user\nTell me about the history of the railroad.<|im_end|>\n"
                "<|im_start|>assistant\n")
        r["chat_samples"] = sample(m, tok, chat, 3, 80, 0.7, args.seed, device, stop)
        r["reference"] = reference(m, tok, device, os.path.join(args.work, "reference"),
                                   spec["name"])
        results[spec["name"]] = r
        del m
        with open(os.path.join(args.work, "eval.json"), "w") as f:
            json.dump(results, f, indent=1)
        with open(os.path.join(args.work, "curves.jsonl"), "w") as f:
            for c_ in curves:
                f.write(json.dumps(c_) + "\n")

    # transformers-side checks of the saved tokenizer config
    try:
        from transformers import AutoTokenizer
        at = AutoTokenizer.from_pretrained(os.path.join(mdir, main_spec["name"]))
        msgs = [{"role": "user", "content": "Hello"}]
        rendered = at.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        enc = at(rendered, add_special_tokens=False)
        results["chat_template_check"] = {"rendered": rendered, "ids": list(enc["input_ids"]),
                                          "class": type(at).__name__}
        log("chat template:", repr(rendered), type(at).__name__)
    except Exception as e:  # noqa
        results["chat_template_check"] = {"error": repr(e)}
        log("AutoTokenizer check failed:", repr(e))
    total_bytes = sum(file_size(os.path.join(mdir, d)) for d in os.listdir(mdir))
    results["models_total_bytes"] = total_bytes
    log(f"models total {total_bytes} bytes")
    with open(os.path.join(args.work, "eval.json"), "w") as f:
        json.dump(results, f, indent=1)
    log("done")


if __name__ == "__main__":
    main()
