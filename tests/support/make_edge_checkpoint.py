#!/usr/bin/python3
"""Writes a small Llama-named checkpoint with deliberately placed edge values
for the quantizing and casting views.

  make_edge_checkpoint.py OUT_DIR --dtype bf16|f16|f32 [--shards N] [--extra-tensors]

Layout: hidden 70 (not a multiple of 64: NF4 blocks and 2048-element 8-bit
blocks end partially), vocab 67, intermediate 130, 2 layers, 7 heads of 10;
model.layers.0.self_attn.rotary_emb.inv_freq is F32 [5] (odd element count,
and an F32 tensor in every variant). With N >= 2 shards (default 2) the
tensors are spread over model-0000i-of-0000N.safetensors with
model.safetensors.index.json, and layer 0 is split across shards 1 and 2;
with --shards 1 a single model.safetensors and no index.
config.json (llama-like, with "torch_dtype"), generation_config.json and
tokenizer.json are written too. Deterministic (fixed seed).

Edge values (positions are flat element indices):
  layers.0.self_attn.q_proj   elements [64,128): an all-zero NF4 block
  layers.0.self_attn.k_proj   block 0: the 16 NF4 code points (absmax 1), then
                              values just above/below/at the tree's split points;
                              block 1: absmax 2^-3 with scaled code points
  layers.0.self_attn.o_proj   row 3 all zero (int8 scale 127/0 = inf)
  layers.0.mlp.up_proj        elements [2048,4096): an all-zero 2048-block
  layers.0.mlp.down_proj      8-bit: values at dynamic-map points and at the
                              float32 midpoints between them (f32 only: exact)
  layers.1.self_attn.v_proj   +inf, -inf, NaN, -NaN, a block of all NaN, and
                              elements [2048,4096) all NaN (all-NaN rows too)
  layers.1.mlp.gate_proj      row 0: absmax 127 and .5 ties for int8 RNE
  layers.0...rotary_emb.inv_freq  odd n: f16 variant all zero, f32 variant
                              only subnormals (the NF4 padding nibble then codes to 0)
  model.norm.weight           cast edges: BF16/F16 RNE ties (f32 only)
  layers.1.self_attn.o_proj   f32 only: subnormals (a block of only subnormals,
                              so 1/absmax overflows), values overflowing F16,
                              F16 subnormal range, 65519.99/65520 around F16 max
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import views_reference as ref  # noqa: E402

HIDDEN = 70
INTER = 130
VOCAB = 67
LAYERS = 2
HEADS = 7
HEAD_DIM = HIDDEN // HEADS


def layer_tensor_specs(i):
    p = "model.layers.%d." % i
    specs = [
        (p + "input_layernorm.weight", [HIDDEN]),
        (p + "self_attn.q_proj.weight", [HIDDEN, HIDDEN]),
        (p + "self_attn.k_proj.weight", [HIDDEN, HIDDEN]),
        (p + "self_attn.v_proj.weight", [HIDDEN, HIDDEN]),
        (p + "self_attn.o_proj.weight", [HIDDEN, HIDDEN]),
    ]
    if i == 0:
        specs.append((p + "self_attn.rotary_emb.inv_freq", [HEAD_DIM // 2]))
    specs += [
        (p + "mlp.gate_proj.weight", [INTER, HIDDEN]),
        (p + "mlp.up_proj.weight", [INTER, HIDDEN]),
        (p + "mlp.down_proj.weight", [HIDDEN, INTER]),
        (p + "post_attention_layernorm.weight", [HIDDEN]),
    ]
    return specs


def all_specs():
    specs = [("model.embed_tokens.weight", [VOCAB, HIDDEN])]
    for i in range(LAYERS):
        specs += layer_tensor_specs(i)
    specs += [("model.norm.weight", [HIDDEN]), ("lm_head.weight", [VOCAB, HIDDEN])]
    return specs


def f32(v):
    return np.float32(v)


def make_values(dtype, rng):
    """name -> float32 array (already representable in dtype, except the
    F32-only edges which are only placed when dtype == 'f32')."""
    vals = {}
    for name, shape in all_specs():
        n = ref.numel(shape)
        if name.endswith("layernorm.weight") or name == "model.norm.weight":
            x = (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)
        elif name.endswith("inv_freq"):
            x = (1.0 / (10000.0 ** (np.arange(0, HEAD_DIM, 2, dtype=np.float64) / HEAD_DIM))).astype(np.float32)
        else:
            x = (0.02 * rng.standard_normal(n)).astype(np.float32)
        vals[name] = x

    T = ref.NF4_TABLE
    t_sorted = np.array(sorted(ref.NF4_T.values()), dtype=np.float32)

    # all-zero NF4 block
    vals["model.layers.0.self_attn.q_proj.weight"][64:128] = 0.0

    # NF4 code points and split points (block 0 absmax exactly 1.0)
    k = vals["model.layers.0.self_attn.k_proj.weight"]
    blk = np.zeros(64, np.float32)
    blk[:16] = T
    j = 16
    for t in t_sorted:
        blk[j] = t                                    # exactly at the split: goes low (y > t false)
        blk[j + 1] = np.nextafter(t, f32(np.inf))     # just above: goes high
        j += 2
    blk[j:] = 0.5 * rng.standard_normal(64 - j).astype(np.float32).clip(-0.99, 0.99)
    k[0:64] = blk
    # block 1: absmax 2^-3, code points scaled (exact), and midpoints scaled
    b1 = np.zeros(64, np.float32)
    b1[:16] = T * f32(0.125)
    b1[16:31] = t_sorted * f32(0.125)
    b1[31:] = (0.05 * rng.standard_normal(33)).astype(np.float32).clip(-0.12, 0.12)
    k[64:128] = b1

    # zero row (int8)
    vals["model.layers.0.self_attn.o_proj.weight"].reshape(HIDDEN, HIDDEN)[3, :] = 0.0

    # all-zero 2048-block
    vals["model.layers.0.mlp.up_proj.weight"][2048:4096] = 0.0

    # 8-bit map points and midpoints (block 0 of down_proj has absmax 1.0)
    d = vals["model.layers.0.mlp.down_proj.weight"]
    code = ref.DYNAMIC_MAP
    d[0] = 1.0
    sel = np.arange(0, 255, 3)
    pts = code[sel]
    mids = ((code[sel] + code[sel + 1]) * f32(0.5)).astype(np.float32)
    d[1:1 + sel.size] = pts
    d[1 + sel.size:1 + 2 * sel.size] = mids
    d[1 + 2 * sel.size:1 + 3 * sel.size] = np.nextafter(mids, f32(np.inf))

    # int8 ties: row 0 of layer 1 gate_proj: absmax 127 -> scale exactly 1.0
    g = vals["model.layers.1.mlp.gate_proj.weight"].reshape(INTER, HIDDEN)
    g[0, :] = 0.0
    g[0, 0] = 127.0
    g[0, 1:13] = [0.5, 1.5, 2.5, 3.5, -0.5, -1.5, -2.5, -3.5, 126.5, -126.5, 64.5, 0.25]
    # row 1: absmax 254 -> scale 0.5 exactly: 5.0 -> 2.5 -> 2, 7.0 -> 3.5 -> 4
    g[1, :] = 0.0
    g[1, 0] = -254.0
    g[1, 1:5] = [5.0, 7.0, -5.0, 1.0]

    # non-finite values in layer 1 v_proj
    v = vals["model.layers.1.self_attn.v_proj.weight"]
    v[5] = np.inf
    v[200] = -np.inf
    v[300] = np.nan
    v[301] = -np.nan
    v[320:384] = np.nan                        # an all-NaN NF4 block (block 5)
    v[2048:4096] = np.nan                      # an all-NaN 2048-block, rows 30..57 all NaN

    # inv_freq has an odd element count: the NF4 padding nibble is 0.0 * s.
    # f16 variant: all zero (absmax 0, s = inf, the padding codes to 0);
    # f32 variant: subnormals only (1/absmax overflows to inf as well).
    inv = "model.layers.0.self_attn.rotary_emb.inv_freq"
    if dtype == "f16":
        vals[inv][:] = 0.0
    elif dtype == "f32":
        vals[inv][:] = np.array([1e-40, -2e-41, 0.0, 3e-42, 1e-45], np.float32)

    # cast edges in model.norm.weight
    if dtype == "f32":
        nw = vals["model.norm.weight"]
        bits = np.array([
            0x3F808000,  # BF16 tie, lsb 0 -> down
            0x3F818000,  # BF16 tie, lsb 1 -> up
            0x3F808001,  # just above tie -> up
            0x3F807FFF,  # just below tie -> down
            0x7F7FFFFF,  # FLT_MAX -> BF16 inf
            0x3F801000,  # F16 tie (bit 12 set, lsb 0) -> down
            0x3F803000,  # F16 tie, lsb 1 -> up
            0x00000001,  # smallest F32 subnormal
            0x80400000,  # -F32 subnormal
            0x7FA00001,  # signalling NaN with payload
            0xFFC12345,  # negative quiet NaN with payload
        ], dtype=np.uint32).view(np.float32)
        nw[:bits.size] = bits
        o = vals["model.layers.1.self_attn.o_proj.weight"]
        o[0:64] = (np.arange(1, 65, dtype=np.float32) * f32(1e-43)).astype(np.float32)  # only subnormals
        o[64] = 70000.0
        o[65] = -1e5
        o[66] = 65520.0            # exactly between 65504 and 65536: RNE -> inf in F16
        o[67] = np.nextafter(f32(65520.0), f32(0))  # -> 65504
        o[68] = 65504.0
        o[69] = 2.0 ** -25         # F16: tie between 0 and the smallest subnormal -> 0
        o[70] = 3 * 2.0 ** -25     # F16: tie -> 2^-23 (even)
        o[71] = 1e-6               # F16 subnormal range
        o[72] = -6.1e-5            # near F16 min normal
        o[73] = 1e-40              # F32 subnormal in a normal block
        o[74] = 3e38
    return vals


def to_raw(x, dtype):
    if dtype == "F32":
        return x.astype("<f4").view(np.uint8)
    if dtype == "F16":
        return ref.f32_to_f16_bits(x).astype("<u2").view(np.uint8)
    return ref.f32_to_bf16_bits(x).astype("<u2").view(np.uint8)


def shard_plan(names, nshards):
    """Sequential chunks; with >= 2 shards, layer 0's attention tensors stay in
    shard 1 and its mlp tensors go to shard 2."""
    if nshards <= 1:
        return [names]
    split = next(i for i, n in enumerate(names) if n.startswith("model.layers.0.mlp."))
    first = names[:split]
    rest = names[split:]
    out = [first]
    k = nshards - 1
    per = -(-len(rest) // k)
    for i in range(k):
        out.append(rest[i * per:(i + 1) * per])
    return out


def tokenizer_json():
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for i in range(3, VOCAB):
        vocab["t%d" % i] = i
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [
            {"id": 0, "content": "<unk>", "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True},
            {"id": 1, "content": "<s>", "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True},
            {"id": 2, "content": "</s>", "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
    }


def write_checkpoint(out_dir, dtype="bf16", nshards=2, extra_tensors=False, seed=1234):
    st_dtype = {"bf16": "BF16", "f16": "F16", "f32": "F32"}[dtype]
    rng = np.random.default_rng(seed)
    vals = make_values(dtype, rng)
    specs = all_specs()
    shapes = dict(specs)
    dtypes = {name: st_dtype for name, _ in specs}
    dtypes["model.layers.0.self_attn.rotary_emb.inv_freq"] = "F32"
    raws = {name: to_raw(vals[name], dtypes[name]) for name, _ in specs}
    names = [n for n, _ in specs]
    if extra_tensors:
        # a non-float tensor and a 0-element float tensor: passed through by every view
        names.insert(names.index("model.layers.1.self_attn.o_proj.weight") + 1, "model.layers.1.self_attn.position_ids")
        shapes["model.layers.1.self_attn.position_ids"] = [1, 7]
        dtypes["model.layers.1.self_attn.position_ids"] = "I64"
        raws["model.layers.1.self_attn.position_ids"] = np.arange(7, dtype="<i8").view(np.uint8)
        names.insert(names.index("model.norm.weight"), "model.layers.1.empty.bias")
        shapes["model.layers.1.empty.bias"] = [0]
        dtypes["model.layers.1.empty.bias"] = st_dtype
        raws["model.layers.1.empty.bias"] = np.zeros(0, np.uint8)

    os.makedirs(out_dir, exist_ok=True)
    plan = shard_plan(names, nshards)
    weight_map = {}
    total = 0
    for i, group in enumerate(plan):
        fname = "model.safetensors" if nshards <= 1 else "model-%05d-of-%05d.safetensors" % (i + 1, len(plan))
        tensors = [(n, dtypes[n], shapes[n], raws[n]) for n in group]
        with open(os.path.join(out_dir, fname), "wb") as f:
            f.write(ref.serialize_file(tensors))
        for n in group:
            weight_map[n] = fname
            total += len(raws[n])
    if nshards > 1:
        index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
        with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
            json.dump(index, f, indent=2)
            f.write("\n")
    config = {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "initializer_range": 0.02,
        "intermediate_size": INTER,
        "max_position_embeddings": 128,
        "model_type": "llama",
        "num_attention_heads": HEADS,
        "num_hidden_layers": LAYERS,
        "num_key_value_heads": HEADS,
        "rms_norm_eps": 1e-06,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "torch_dtype": {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}[dtype],
        "transformers_version": "4.40.0",
        "use_cache": True,
        "vocab_size": VOCAB,
    }
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump({"_from_model_config": True, "bos_token_id": 1, "eos_token_id": 2,
                   "transformers_version": "4.40.0"}, f, indent=2)
        f.write("\n")
    with open(os.path.join(out_dir, "tokenizer.json"), "w") as f:
        json.dump(tokenizer_json(), f)
    return out_dir


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--dtype", choices=("bf16", "f16", "f32"), default="bf16")
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--extra-tensors", action="store_true",
                    help="also an I64 tensor and a 0-element tensor (AirLLM cannot load those compressed)")
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args(argv)
    if a.shards < 1:
        ap.error("--shards must be >= 1")
    write_checkpoint(a.out_dir, a.dtype, a.shards, a.extra_tensors, a.seed)
    print("wrote %s (%s, %d shard%s)" % (a.out_dir, a.dtype, a.shards, "" if a.shards == 1 else "s"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
