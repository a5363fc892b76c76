#!/usr/bin/env python3
"""Writes broken variants of the llama-tiny fixture into DIR/<case>/ for bad_input.sh.

Each case is a model directory with one thing wrong. Pure standard library: the
safetensors header is JSON after an 8-byte little-endian length, so it is easy to forge."""
import json, os, shutil, struct, sys

src = "tests/fixtures/models/llama-tiny"
out = sys.argv[1]

def read_st(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n]), b[8 + n:]

def write_st(path, header, data, raw_header=None):
    h = raw_header if raw_header is not None else json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)

def case(name, config=None):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    cfg = json.load(open(os.path.join(src, "config.json")))
    if config:
        config(cfg)
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    return d

header, data = read_st(os.path.join(src, "model.safetensors"))
whole = open(os.path.join(src, "model.safetensors"), "rb").read()

d = case("no_weights")
d = case("truncated"); open(d + "/model.safetensors", "wb").write(whole[: len(whole) // 2])
d = case("tiny_file"); open(d + "/model.safetensors", "wb").write(b"\x05\x00")
d = case("absurd_header"); open(d + "/model.safetensors", "wb").write(struct.pack("<Q", 1 << 40) + b"{}")
d = case("header_past_end"); open(d + "/model.safetensors", "wb").write(struct.pack("<Q", 4096) + b"{}")
d = case("header_not_json"); write_st(d + "/model.safetensors", None, data, raw_header=b"{not json")
h = json.loads(json.dumps(header)); k = "model.layers.0.mlp.up_proj.weight"
h[k]["data_offsets"][1] += 10 ** 9
d = case("offsets_past_end"); write_st(d + "/model.safetensors", h, data)
h = json.loads(json.dumps(header)); h[k]["shape"] = [128, 65]
d = case("span_mismatch"); write_st(d + "/model.safetensors", h, data)
h = json.loads(json.dumps(header)); h[k]["dtype"] = "Q9"
d = case("unknown_dtype"); write_st(d + "/model.safetensors", h, data)
h = json.loads(json.dumps(header)); del h[k]
d = case("missing_tensor"); write_st(d + "/model.safetensors", h, data)
# a consistent header whose tensor has the wrong shape for the config
h = json.loads(json.dumps(header)); h[k]["shape"] = [64, 128]
d = case("shape_mismatch"); write_st(d + "/model.safetensors", h, data)
d = case("unknown_arch", lambda c: c.update(model_type="gpt99")); shutil.copy(src + "/model.safetensors", d)
d = case("missing_field", lambda c: c.pop("hidden_size")); shutil.copy(src + "/model.safetensors", d)
d = case("bad_heads", lambda c: c.update(num_key_value_heads=3)); shutil.copy(src + "/model.safetensors", d)
d = os.path.join(out, "config_not_json"); os.makedirs(d); open(d + "/config.json", "w").write('{"model_type": "llama",')
shutil.copy(src + "/model.safetensors", d)
d = case("bad_index"); open(d + "/model.safetensors.index.json", "w").write(json.dumps({"weight_map": {k: "../../etc/passwd"}}))
d = case("index_missing_shard"); open(d + "/model.safetensors.index.json", "w").write(json.dumps({"weight_map": {k: "model-00001-of-00002.safetensors"}}))
# per-module quantization overrides out of range (the top-level block is valid): group_size 0 once divided
# a weight's columns (SIGFPE)
def quant_override(o):
    return lambda c: c.update(quantization={"group_size": 32, "bits": 4, "model.layers.0.mlp.down_proj": o})
d = case("quant_override_group0", quant_override({"bits": 4, "group_size": 0})); shutil.copy(src + "/model.safetensors", d)
d = case("quant_override_bits", quant_override({"bits": 7})); shutil.copy(src + "/model.safetensors", d)
d = case("quant_override_type", quant_override({"bits": "4", "group_size": 64})); shutil.copy(src + "/model.safetensors", d)
# values that parsed but made NaN/garbage logits instead of an error
d = case("bad_eps", lambda c: c.update(rms_norm_eps=-1)); shutil.copy(src + "/model.safetensors", d)
d = case("llama3_factors", lambda c: c.update(rope_parameters={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0,
                                                               "high_freq_factor": 4.0, "original_max_position_embeddings": 64,
                                                               "rope_theta": 10000.0}))
shutil.copy(src + "/model.safetensors", d)
d = case("rope_theta0", lambda c: c.update(rope_parameters={"rope_type": "default", "rope_theta": 0}))
shutil.copy(src + "/model.safetensors", d)
# the same for gemma3-tiny's attention fields
def gemma_case(name, config):
    g = "tests/fixtures/models/gemma3-tiny"
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    cfg = json.load(open(os.path.join(g, "config.json")))
    config(cfg)
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    shutil.copy(g + "/model.safetensors", d)
gemma_case("gemma_qpas0", lambda c: c.update(query_pre_attn_scalar=0))
gemma_case("gemma_softcap_neg", lambda c: c.update(final_logit_softcapping=-30.0))
# generation_config.json's sampling defaults: out of range once failed every request that left them out,
# with a message about a value the client never sent
def gen_case(name, gen):
    d = case(name); shutil.copy(src + "/model.safetensors", d)
    json.dump(gen, open(os.path.join(d, "generation_config.json"), "w"))
gen_case("gen_temperature", {"temperature": -1})
gen_case("gen_top_p", {"top_p": 2})
gen_case("gen_not_number", {"temperature": "hot"})
