"""An independent forward pass, in numpy (float64), of a Hugging Face decoder checkpoint read
from its safetensors: the next-token log-probabilities at every position of a token sequence.

It follows transformers' modeling code, not llama.cpp's: weights in Hugging Face layout
([out, in]), rotate-half RoPE on the un-permuted q/k rows, and the rope frequencies as
transformers computes them (default, the "llama3" scaling of Llama 3.1, Phi-3's "longrope"), for

  LlamaForCausalLM / MistralForCausalLM   RMSNorm, attention with GQA, SwiGLU MLP
  Qwen2ForCausalLM                        + q/k/v biases
  Qwen3ForCausalLM                        + RMSNorm of each head's q and k (head_dim)
  Phi3ForCausalLM                         fused qkv_proj and gate_up_proj (gate first)

with the final norm and lm_head, or the embedding when tie_word_embeddings is set.

  model = ReferenceModel(checkpoint_dir, round_weights=None | "f16")
  logprobs = model.logprobs(token_ids)     # [len(ids), vocab] float64

round_weights="f16" rounds every matrix to float16 first (norms, biases and 1-D tensors kept),
as an F16 GGUF file holds them, so a comparison with llama.cpp measures its arithmetic only.
"""
import json
import math
import os
import struct

import numpy as np


def read_safetensors(path):
    """{name: float32 array} of one safetensors file (F32, F16 and BF16)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        raw = data[a:b]
        if info["dtype"] == "F32":
            x = np.frombuffer(raw, dtype="<f4")
        elif info["dtype"] == "F16":
            x = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        elif info["dtype"] == "BF16":
            x = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError("%s: dtype %s is not a float type" % (name, info["dtype"]))
        out[name] = x.reshape(info["shape"])
    return out


def read_checkpoint(d):
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    tensors = {}
    for fname in files:
        tensors.update(read_safetensors(os.path.join(d, fname)))
    return tensors


def rope_parameters(config, head_dim, seq_len):
    """(inverse frequencies, attention factor) as transformers' ROPE_INIT_FUNCTIONS compute them
    for the config's rope type: default, "llama3" (Llama 3.1) or "longrope" (Phi-3 128k: the
    short factors up to original_max_position_embeddings, the long ones past it, and cos/sin
    scaled by the attention factor)."""
    base = config.get("rope_theta", 10000.0)
    exponents = np.arange(0, head_dim, 2, dtype=np.float64) / head_dim
    inv = 1.0 / (base ** exponents)
    scaling = config.get("rope_scaling")
    if not scaling:
        return inv, 1.0
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind == "llama3":
        factor = scaling["factor"]
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old / low, old / high
        wavelen = 2 * math.pi / inv
        scaled = np.where(wavelen > low_wavelen, inv / factor, inv)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        return np.where(medium, smoothed, scaled), 1.0
    if kind in ("longrope", "su"):
        original = config.get("original_max_position_embeddings")
        if original:
            factor = config["max_position_embeddings"] / original
        else:
            original, factor = config["max_position_embeddings"], scaling.get("factor", 1.0)
        attention = scaling.get("attention_factor")
        if attention is None:
            attention = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
        ext = np.asarray(scaling["long_factor"] if seq_len > original else scaling["short_factor"], np.float64)
        return 1.0 / (ext * base ** exponents), attention
    raise ValueError("rope scaling type %r is not in this reference" % kind)


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def silu(x):
    return x / (1.0 + np.exp(-x))


class ReferenceModel:
    def __init__(self, checkpoint_dir, round_weights=None):
        with open(os.path.join(checkpoint_dir, "config.json")) as f:
            self.config = json.load(f)
        c = self.config
        self.arch = c["architectures"][0]
        self.hidden = c["hidden_size"]
        self.heads = c["num_attention_heads"]
        self.kv_heads = c.get("num_key_value_heads", self.heads)
        self.head_dim = c.get("head_dim") or self.hidden // self.heads
        self.layers = c["num_hidden_layers"]
        self.eps = c["rms_norm_eps"]
        raw = read_checkpoint(checkpoint_dir)
        self.w = {}
        for name, x in raw.items():
            if round_weights == "f16" and x.ndim == 2:
                x = x.astype(np.float16)
            self.w[name] = x.astype(np.float64)

    def _attention(self, p, x, pos):
        t = x.shape[0]
        nh, nkv, hd = self.heads, self.kv_heads, self.head_dim
        w = self.w
        if self.arch == "Phi3ForCausalLM":
            qkv = x @ w[p + "self_attn.qkv_proj.weight"].T
            q, k, v = np.split(qkv, [nh * hd, nh * hd + nkv * hd], axis=-1)
        else:
            q = x @ w[p + "self_attn.q_proj.weight"].T
            k = x @ w[p + "self_attn.k_proj.weight"].T
            v = x @ w[p + "self_attn.v_proj.weight"].T
            if p + "self_attn.q_proj.bias" in w:
                q = q + w[p + "self_attn.q_proj.bias"]
                k = k + w[p + "self_attn.k_proj.bias"]
                v = v + w[p + "self_attn.v_proj.bias"]
        q = q.reshape(t, nh, hd)
        k = k.reshape(t, nkv, hd)
        v = v.reshape(t, nkv, hd)
        if p + "self_attn.q_norm.weight" in w:
            q = rms_norm(q, w[p + "self_attn.q_norm.weight"], self.eps)
            k = rms_norm(k, w[p + "self_attn.k_norm.weight"], self.eps)
        inv_freq, attention_factor = rope_parameters(self.config, hd, t)
        freqs = np.outer(pos, inv_freq)
        emb = np.concatenate([freqs, freqs], axis=-1)
        cos = (np.cos(emb) * attention_factor)[:, None, :]
        sin = (np.sin(emb) * attention_factor)[:, None, :]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        group = nh // nkv
        k = np.repeat(k, group, axis=1)
        v = np.repeat(v, group, axis=1)
        scores = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(hd)
        mask = np.triu(np.ones((t, t), dtype=bool), 1)
        scores = np.where(mask[None], -np.inf, scores)
        scores = scores - scores.max(axis=-1, keepdims=True)
        probs = np.exp(scores)
        probs /= probs.sum(axis=-1, keepdims=True)
        out = np.einsum("hqk,khd->qhd", probs, v).reshape(t, nh * hd)
        return out @ w[p + "self_attn.o_proj.weight"].T

    def _mlp(self, p, x):
        w = self.w
        if self.arch == "Phi3ForCausalLM":
            gate, up = np.split(x @ w[p + "mlp.gate_up_proj.weight"].T, 2, axis=-1)
        else:
            gate = x @ w[p + "mlp.gate_proj.weight"].T
            up = x @ w[p + "mlp.up_proj.weight"].T
        return (silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T

    def logprobs(self, ids):
        w = self.w
        ids = np.asarray(ids, dtype=np.int64)
        pos = np.arange(len(ids), dtype=np.float64)
        x = w["model.embed_tokens.weight"][ids]
        for i in range(self.layers):
            p = "model.layers.%d." % i
            x = x + self._attention(p, rms_norm(x, w[p + "input_layernorm.weight"], self.eps), pos)
            x = x + self._mlp(p, rms_norm(x, w[p + "post_attention_layernorm.weight"], self.eps))
        x = rms_norm(x, w["model.norm.weight"], self.eps)
        head = w.get("lm_head.weight")
        if head is None or self.config.get("tie_word_embeddings"):
            head = w["model.embed_tokens.weight"]
        logits = x @ head.T
        m = logits.max(axis=-1, keepdims=True)
        return logits - m - np.log(np.exp(logits - m).sum(axis=-1, keepdims=True))
