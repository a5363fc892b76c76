"""HF tokenizers (Rust) on the same text as bench_tokenizer.c, single thread, and a check
that kiln produced exactly HF's ids.

    RAYON_NUM_THREADS=1 python3 bench/tokenizer/hf_bench.py TOKENIZER_DIR TEXT_FILE KILN_IDS [REPEAT]

KILN_IDS is the --ids-out file of bench_tokenizer (little-endian int32, whole-text encode).
"""
import array
import os
import sys
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ["TOKENIZERS_PARALLELISM"] = "false"
import tokenizers  # noqa: E402  (after the environment is set)


def best_of(n, fn):
    best = float("inf")
    out = None
    for _ in range(n):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def main():
    path, text_file, ids_file = sys.argv[1:4]
    repeat = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    t = time.perf_counter()
    tok = tokenizers.Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
    load = time.perf_counter() - t
    text = open(text_file, encoding="utf-8").read()
    mb = len(text.encode("utf-8")) / 1e6
    paras, s = [], 0
    while s < len(text):
        i = text.find("\n\n", s)
        e = len(text) if i < 0 else i + 2
        paras.append(text[s:e])
        s = e
    t = time.perf_counter()
    enc = tok.encode(text, add_special_tokens=False)
    cold = time.perf_counter() - t
    warm, _ = best_of(repeat, lambda: tok.encode(text, add_special_tokens=False))
    batch, _ = best_of(repeat, lambda: tok.encode_batch(paras, add_special_tokens=False))
    loop, _ = best_of(repeat, lambda: [tok.encode(p, add_special_tokens=False) for p in paras])
    kiln = array.array("i")
    with open(ids_file, "rb") as f:
        kiln.frombytes(f.read())
    hf = enc.ids
    same = list(kiln) == hf
    first_diff = next((i for i, (a, b) in enumerate(zip(kiln, hf)) if a != b), min(len(kiln), len(hf)))
    print(f"HF tokenizers {tokenizers.__version__} {path}: load {load:.3f} s, {len(hf)} tokens, "
          f"RAYON_NUM_THREADS={os.environ['RAYON_NUM_THREADS']}")
    print(f"  whole text, cold: {cold:.3f} s = {mb / cold:.1f} MB/s")
    print(f"  whole text, warm (best of {repeat}): {warm:.3f} s = {mb / warm:.1f} MB/s")
    print(f"  paragraphs encode_batch (best of {repeat}): {batch:.3f} s = {mb / batch:.1f} MB/s")
    print(f"  paragraphs encode loop (best of {repeat}): {loop:.3f} s = {mb / loop:.1f} MB/s")
    print(f"  kiln ids identical to HF: {same}" + ("" if same else f" (first difference at token {first_diff}; "
          f"kiln {len(kiln)} vs HF {len(hf)} tokens)"))


if __name__ == "__main__":
    main()
