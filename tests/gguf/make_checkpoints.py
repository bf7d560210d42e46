#!/usr/bin/python3
"""Writes the GGUF end-to-end test's checkpoints: one small Hugging Face checkpoint per
supported architecture and variant, with random weights and real tokenizer files.

  make_checkpoints.py OUT_DIR

OUT_DIR/<name>/ holds config.json, generation_config.json, the safetensors (one file, or shards
with model.safetensors.index.json) and the tokenizer files; OUT_DIR/manifest.json lists the
models with what the test needs to know of each (tokenizer kind, BOS, prompts as token ids).
Deterministic: the same bytes every run.

The models (hidden sizes a multiple of 256 so that Q4_K applies, except mistral-spm-f32's 320
and 360, whose rows force the quantizers' fallbacks):

  llama31-bf16   LlamaForCausalLM, bf16, 2 shards, Llama 3.1 rope scaling (llama3 type, so
                 rope_freqs.weight), GQA 4/2, untied, Llama 3 BPE tokenizer.json
  llama32-f32    LlamaForCausalLM, f32, tied embeddings, llama3 rope, GQA 4/1, Llama 3 BPE
  mistral-spm-f32  MistralForCausalLM, f32, GQA 5/1, hidden 320, intermediate 360,
                 SentencePiece tokenizer.model in the Llama 2 / Mistral v0.1 style
  qwen2-bf16     Qwen2ForCausalLM, bf16, q/k/v biases, tied, vocabulary padded past the
                 tokenizer's tokens, GQA 4/2, Qwen2 BPE tokenizer.json
  qwen3-f32      Qwen3ForCausalLM, f32, q/k norms, head_dim 64 with 8 heads (q_proj wider than
                 hidden), GQA 8/2, untied, 3 shards, Qwen2 BPE tokenizer.json
  phi3-bf16      Phi3ForCausalLM, bf16, fused qkv_proj and gate_up_proj, GQA 8/4, untied,
                 SentencePiece tokenizer.model with Phi-3's added tokens
  phi3-longrope-f32  Phi3ForCausalLM, f32, 2 shards, Phi-3-mini-128k's longrope scaling (so
                 rope_factors_short/long.weight and an attention factor), 8 heads of 32

Weights are scaled so that the models' outputs are far from uniform yet not chaotic: RMSNorm
inputs of unit scale, attention scores of about unit spread, residual branches scaled by
1/sqrt(2 x layers), and logits with a spread of about 4 nats, so the next-token distributions
are peaked and their greedy choices mostly clear.
"""
import json
import os
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "support"))
import tokenizer_gen as tg  # noqa: E402
import views_reference as vref  # noqa: E402

# Prompts whose every position the test compares (token ids from the reference tokenizer).
PROMPTS = (
    "The model reads every tensor from the bucket, one block at a time, and the cache keeps it.",
    "def forward(self, x):\n    return self.norm(x) * self.weight  # 12345\n",
    "模型的权重存储在云端。 Hello 🙂 world, isn't it?",
)

MODELS = [
    dict(name="llama31-bf16", arch="LlamaForCausalLM", model_type="llama", dtype="bf16", shards=2,
         tokenizer="llama3", hidden=256, inter=768, layers=3, heads=4, kv_heads=2, tied=False,
         rope_theta=500000.0, rope_scaling={"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                            "original_max_position_embeddings": 64, "rope_type": "llama3"},
         eps=1e-5, seed=11),
    dict(name="llama32-f32", arch="LlamaForCausalLM", model_type="llama", dtype="f32", shards=1,
         tokenizer="llama3", hidden=256, inter=512, layers=2, heads=4, kv_heads=1, tied=True,
         rope_theta=500000.0, rope_scaling={"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                            "original_max_position_embeddings": 64, "rope_type": "llama3"},
         eps=1e-5, seed=12),
    dict(name="mistral-spm-f32", arch="MistralForCausalLM", model_type="mistral", dtype="f32", shards=1,
         tokenizer="llama2-spm", hidden=320, inter=360, layers=2, heads=5, kv_heads=1, tied=False,
         rope_theta=10000.0, rope_scaling=None, eps=1e-5, seed=13),
    dict(name="qwen2-bf16", arch="Qwen2ForCausalLM", model_type="qwen2", dtype="bf16", shards=1,
         tokenizer="qwen2", hidden=256, inter=512, layers=2, heads=4, kv_heads=2, tied=True,
         rope_theta=1000000.0, rope_scaling=None, eps=1e-6, seed=14, vocab_pad=64),
    dict(name="qwen3-f32", arch="Qwen3ForCausalLM", model_type="qwen3", dtype="f32", shards=3,
         tokenizer="qwen2", hidden=256, inter=512, layers=2, heads=8, kv_heads=2, head_dim=64, tied=False,
         rope_theta=1000000.0, rope_scaling=None, eps=1e-6, seed=15, vocab_pad=64),
    dict(name="phi3-bf16", arch="Phi3ForCausalLM", model_type="phi3", dtype="bf16", shards=1,
         tokenizer="phi3-spm", hidden=256, inter=512, layers=2, heads=8, kv_heads=4, tied=False,
         rope_theta=10000.0, rope_scaling=None, eps=1e-5, seed=16, vocab_pad=64),
    dict(name="phi3-longrope-f32", arch="Phi3ForCausalLM", model_type="phi3", dtype="f32", shards=2,
         tokenizer="phi3-spm", hidden=256, inter=512, layers=2, heads=8, kv_heads=8, tied=False,
         rope_theta=10000.0, eps=1e-5, seed=17, vocab_pad=64,
         # Phi-3-mini-128k: longrope with per-frequency factors, the short ones in force up to 4096.
         rope_scaling={"type": "longrope",
                       "short_factor": [round(1.0 + 0.15 * i, 4) for i in range(16)],
                       "long_factor": [round(1.0 + 1.5 * i, 4) for i in range(16)]},
         config={"max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
                 "sliding_window": 262144}),
]

BPE_MERGES = 1200
SPM_VOCAB = {"llama2-spm": 1000, "phi3-spm": 900}


# ---------------------------------------------------------------------------
# safetensors
# ---------------------------------------------------------------------------

def tensor_bytes(x, dtype):
    if dtype == "bf16":
        return vref.f32_to_bf16_bits(x.astype(np.float32)).astype("<u2").tobytes()
    return np.ascontiguousarray(x, dtype="<f4").tobytes()


def write_safetensors(path, tensors, dtype):
    """tensors: list of (name, float32 array); every one stored as `dtype`."""
    st = {"bf16": "BF16", "f32": "F32"}[dtype]
    header = {"__metadata__": {"format": "pt"}}
    blobs = []
    offset = 0
    for name, x in tensors:
        b = tensor_bytes(x, dtype)
        header[name] = {"dtype": st, "shape": list(x.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def write_checkpoint(d, tensors, dtype, shards):
    if shards == 1:
        write_safetensors(os.path.join(d, "model.safetensors"), tensors, dtype)
        return
    per = -(-len(tensors) // shards)
    weight_map = {}
    total = 0
    for s in range(shards):
        part = tensors[s * per:(s + 1) * per]
        fname = "model-%05d-of-%05d.safetensors" % (s + 1, shards)
        write_safetensors(os.path.join(d, fname), part, dtype)
        for name, x in part:
            weight_map[name] = fname
            total += x.size * (2 if dtype == "bf16" else 4)
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


# ---------------------------------------------------------------------------
# weights
# ---------------------------------------------------------------------------

def make_weights(m, vocab):
    """[(HF name, float32 array)] in Hugging Face layout ([out, in] for linear layers)."""
    rnd = np.random.default_rng(m["seed"])
    h, inter, nh, nkv = m["hidden"], m["inter"], m["heads"], m["kv_heads"]
    hd = m.get("head_dim", h // nh)
    layers = m["layers"]

    def lin(out, inp, gain=1.0):
        return (rnd.standard_normal((out, inp)) * gain / np.sqrt(inp)).astype(np.float32)

    def norm(n):
        return rnd.uniform(0.6, 1.4, n).astype(np.float32)

    # Tied: the embedding is also the output layer, so it is scaled for logits of spread ~4.
    emb_scale = 4.0 / np.sqrt(h) if m["tied"] else 1.0
    out = [("model.embed_tokens.weight", (rnd.standard_normal((vocab, h)) * emb_scale).astype(np.float32))]
    # Tied: the input embedding is small (1/4 per element), and a token's own row would dominate its
    # logits (|e|^2 = 16) unless the layers' outputs outweigh it: their branches are scaled up.
    resid_gain = (8.0 if m["tied"] else 1.0) / np.sqrt(2 * layers)
    for i in range(layers):
        p = "model.layers.%d." % i
        t = [(p + "input_layernorm.weight", norm(h))]
        # Attention scores (q.k / sqrt(hd)) of spread ~1 on unit-scale inputs: sharper ones make the
        # model chaotic, so that rounding anywhere moves its outputs more than it moves real models'.
        q, k, v = lin(nh * hd, h), lin(nkv * hd, h), lin(nkv * hd, h)
        if m["model_type"] == "phi3":
            t.append((p + "self_attn.qkv_proj.weight", np.concatenate([q, k, v], axis=0)))
        else:
            t += [(p + "self_attn.q_proj.weight", q), (p + "self_attn.k_proj.weight", k),
                  (p + "self_attn.v_proj.weight", v)]
        if m["model_type"] == "qwen2":
            t += [(p + "self_attn.q_proj.bias", (rnd.standard_normal(nh * hd) * 0.5).astype(np.float32)),
                  (p + "self_attn.k_proj.bias", (rnd.standard_normal(nkv * hd) * 0.5).astype(np.float32)),
                  (p + "self_attn.v_proj.bias", (rnd.standard_normal(nkv * hd) * 0.5).astype(np.float32))]
        if m["model_type"] == "qwen3":
            t += [(p + "self_attn.q_norm.weight", norm(hd)), (p + "self_attn.k_norm.weight", norm(hd))]
        t.append((p + "self_attn.o_proj.weight", lin(h, nh * hd, resid_gain)))
        t.append((p + "post_attention_layernorm.weight", norm(h)))
        gate, up = lin(inter, h), lin(inter, h)
        if m["model_type"] == "phi3":
            t.append((p + "mlp.gate_up_proj.weight", np.concatenate([gate, up], axis=0)))
        else:
            t += [(p + "mlp.gate_proj.weight", gate), (p + "mlp.up_proj.weight", up)]
        t.append((p + "mlp.down_proj.weight", lin(h, inter, resid_gain)))
        out += t
    out.append(("model.norm.weight", norm(h)))
    if not m["tied"]:
        out.append(("lm_head.weight", lin(vocab, h, 4.0)))
    return out


# ---------------------------------------------------------------------------
# config.json, as each architecture's real checkpoints write it
# ---------------------------------------------------------------------------

def make_config(m, vocab, ids):
    dtype = {"bf16": "bfloat16", "f32": "float32"}[m["dtype"]]
    c = {
        "architectures": [m["arch"]],
        "attention_dropout": 0.0,
        "bos_token_id": ids.get("config_bos", ids["bos"]),
        "eos_token_id": ids["eos_ids"] if len(ids["eos_ids"]) > 1 else ids["eos_ids"][0],
        "hidden_act": "silu",
        "hidden_size": m["hidden"],
        "initializer_range": 0.02,
        "intermediate_size": m["inter"],
        "max_position_embeddings": 2048,
        "model_type": m["model_type"],
        "num_attention_heads": m["heads"],
        "num_hidden_layers": m["layers"],
        "num_key_value_heads": m["kv_heads"],
        "rms_norm_eps": m["eps"],
        "rope_scaling": m["rope_scaling"],
        "rope_theta": m["rope_theta"],
        "tie_word_embeddings": m["tied"],
        "torch_dtype": dtype,
        "transformers_version": "4.46.0",
        "use_cache": True,
        "vocab_size": vocab,
    }
    mt = m["model_type"]
    if mt == "llama":
        c.update({"attention_bias": False, "mlp_bias": False, "pretraining_tp": 1,
                  "head_dim": m["hidden"] // m["heads"]})
        if m["rope_scaling"]:
            # Llama 3.1 keeps the pre-scaling context in rope_scaling; it is repeated at the top level,
            # where llama.cpp's converter reads it, so both readings agree.
            c["original_max_position_embeddings"] = m["rope_scaling"]["original_max_position_embeddings"]
    elif mt == "mistral":
        c.update({"sliding_window": None, "head_dim": m["hidden"] // m["heads"]})
    elif mt == "qwen2":
        c.update({"max_window_layers": m["layers"], "sliding_window": 2048, "use_sliding_window": False})
    elif mt == "qwen3":
        c.update({"attention_bias": False, "head_dim": m["head_dim"], "max_window_layers": m["layers"],
                  "sliding_window": None, "use_sliding_window": False})
    elif mt == "phi3":
        c.update({"attention_bias": False, "embd_pdrop": 0.0, "original_max_position_embeddings": 2048,
                  "pad_token_id": ids["eos"], "resid_pdrop": 0.0, "sliding_window": 2047})
        c["bos_token_id"] = 1
    c.update(m.get("config", {}))
    return c


# ---------------------------------------------------------------------------

def build_tokenizers():
    text = tg.training_text()
    vocab, merges = tg.train_byte_level_bpe(text, BPE_MERGES)
    spm = {k: tg.train_sentencepiece(text, n) for k, n in SPM_VOCAB.items()}
    return vocab, merges, spm


def tokenizer_for(m, bpe_vocab, bpe_merges, spm):
    """({file: bytes or text}, ids) of model m's tokenizer."""
    kind = m["tokenizer"]
    if kind == "llama3":
        return tg.llama3_tokenizer_files(bpe_vocab, bpe_merges)
    if kind == "qwen2":
        return tg.qwen2_tokenizer_files(bpe_vocab, bpe_merges)
    model = spm[kind]
    import sentencepiece
    n = sentencepiece.SentencePieceProcessor(model_proto=model).vocab_size()
    if kind == "llama2-spm":
        files = tg.llama2_tokenizer_config()
        ids = {"bos": 1, "eos": 2, "add_bos": True, "tokens": n, "eos_ids": [2]}
    else:
        files = tg.phi3_tokenizer_config(n)
        eot = n + tg.PHI3_ADDED.index("<|endoftext|>")
        ids = {"bos": 1, "eos": eot, "add_bos": False, "tokens": n + len(tg.PHI3_ADDED),
               "eos_ids": [eot]}
    files["tokenizer.model"] = model
    return files, ids


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    bpe_vocab, bpe_merges, spm = build_tokenizers()
    manifest = {"prompts": list(PROMPTS), "models": []}
    for m in MODELS:
        d = os.path.join(out, m["name"])
        os.makedirs(d, exist_ok=True)
        files, ids = tokenizer_for(m, bpe_vocab, bpe_merges, spm)
        vocab = ids["tokens"]
        pad = m.get("vocab_pad")
        if pad:
            vocab = -(-(vocab + 1) // pad) * pad  # rows past the tokenizer's tokens, as Qwen2 has
        for fname, content in files.items():
            mode = "wb" if isinstance(content, bytes) else "w"
            with open(os.path.join(d, fname), mode, **({} if mode == "wb" else {"encoding": "utf-8"})) as f:
                f.write(content)
        config = make_config(m, vocab, ids)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(config, f, indent=2)
        gen = {"bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"],
               "do_sample": False}
        with open(os.path.join(d, "generation_config.json"), "w") as f:
            json.dump(gen, f, indent=2)
        write_checkpoint(d, make_weights(m, vocab), m["dtype"], m["shards"])
        manifest["models"].append({
            "name": m["name"], "arch": m["arch"], "dtype": m["dtype"], "tokenizer": m["tokenizer"],
            "vocab_size": vocab, "tokens": ids["tokens"], "bos": ids["bos"], "add_bos": ids["add_bos"],
        })
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)


if __name__ == "__main__":
    main()
