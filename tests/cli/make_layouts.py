#!/usr/bin/env python3
"""Rewrites a checkpoint into the other layouts real checkpoints use, for layouts.sh:
  vl/   config nested under "text_config" (VL wrapper), tensors under model.language_model.
  mlx/  tensors under language_model.model. and language_model.lm_head (mlx-community)
  shard/ the same tensors split over two shards with a model.safetensors.index.json
Pure standard library: a safetensors file is an 8-byte length, a JSON header, the data."""
import json, os, struct, sys

src, out = sys.argv[1], sys.argv[2]
raw = open(os.path.join(src, "model.safetensors"), "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n]); data = raw[8 + n:]
cfg = json.load(open(os.path.join(src, "config.json")))

def write(path, tensors):  # tensors: list of (name, meta, bytes)
    h, blob, off = {}, b"", 0
    for name, meta, b in tensors:
        h[name] = {"dtype": meta["dtype"], "shape": meta["shape"], "data_offsets": [off, off + len(b)]}
        blob += b; off += len(b)
    hb = json.dumps(h).encode(); hb += b" " * ((8 - len(hb) % 8) % 8)
    open(path, "wb").write(struct.pack("<Q", len(hb)) + hb + blob)

tensors = [(k, v, data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in header.items() if k != "__metadata__"]

def renamed(fn):
    return [(fn(k), v, b) for k, v, b in tensors]

os.makedirs(out + "/vl"); os.makedirs(out + "/mlx"); os.makedirs(out + "/shard")
json.dump({"model_type": "llava", "architectures": ["LlavaForConditionalGeneration"], "text_config": cfg,
           "vision_config": {"model_type": "siglip"}}, open(out + "/vl/config.json", "w"))
write(out + "/vl/model.safetensors", renamed(lambda k: k.replace("model.", "model.language_model.", 1)))
mcfg = json.loads(json.dumps(cfg))
for qk in ("quantization", "quantization_config"):  # mlx-community keys overrides by stored path
    if qk in mcfg:
        mcfg[qk] = {("language_model." + k if k.startswith("model.") else k): v for k, v in mcfg[qk].items()}
json.dump(mcfg, open(out + "/mlx/config.json", "w"))
write(out + "/mlx/model.safetensors", renamed(lambda k: "language_model." + k))
json.dump(cfg, open(out + "/shard/config.json", "w"))
half = len(tensors) // 2
names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
write(out + "/shard/" + names[0], tensors[:half]); write(out + "/shard/" + names[1], tensors[half:])
json.dump({"metadata": {"total_size": len(data)}, "weight_map": {k: names[0] if i < half else names[1] for i, (k, _, _) in enumerate(tensors)}},
          open(out + "/shard/model.safetensors.index.json", "w"))
