#!/usr/bin/env python3
"""Real-loader checks of tensorfs' views: transformers, safetensors and torch
read a mounted checkpoint and every view of it, on the GPU when there is one.

It makes its models with transformers' save_pretrained from small
random-initialized configs (Llama and GPT-2 in float32, Mixtral and Qwen2 in
bfloat16, each in 3 or more shards), mounts the directory holding them with
tensorfs, and checks for each model:

  from_pretrained(mount)        every parameter and the logits equal the local load
  @tensors, splitted_model      every tensor exactly once, equal; .done markers
  @bnb-nf4, splitted_model.4bit codes equal an independent NF4 quantizer's (ties
                                aside), error within half the widest code gap
  @bnb-int8                     SCB the row absmax, error within half a step per row
  @bnb-* forward                the dequantized weights (dequantized here, in
                                torch) loaded by from_pretrained: logits equal
                                those of the same weights rounded by the
                                independent quantizers (cosine >= 0.9999; codes
                                at ties may differ); cosine to the source model
  @bf16, @f16                   from_pretrained gives parameters of that dtype,
                                equal to torch's rounding of the local ones;
                                config.json's dtype keys say so

bitsandbytes is not needed (and not installed on the machine this is meant
for): every quantized tensor is compared against quantizers written here.

With --source plain (no transformers at hand) it writes Llama-shaped
checkpoints with torch alone and runs the checks that need no model classes;
the others are listed as skipped.

Prints one line per check and closes with "N passed, N failed"; exits 1 when
any check failed.
"""
import argparse
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import time
import traceback

import torch

try:
    import transformers
except ImportError:  # --source plain
    transformers = None
try:
    import safetensors.torch as st_torch
except ImportError:  # a small reader and writer below stand in
    st_torch = None

# ---------------------------------------------------------------------------
# safetensors files
# ---------------------------------------------------------------------------

ST_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}
ST_NAMES = {v: k for k, v in ST_DTYPES.items()}
TORCH_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


def read_header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return header


def load_file(path):
    """{name: tensor} of one safetensors file, on the CPU."""
    if st_torch is not None:
        return st_torch.load_file(path)
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        dtype = ST_DTYPES[info["dtype"]]
        raw = bytearray(blob[8 + n + b:8 + n + e])
        t = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        out[name] = t.reshape([int(d) for d in info["shape"]])
    return out


def save_file(tensors, path):
    if st_torch is not None:
        st_torch.save_file({k: v.contiguous() for k, v in tensors.items()}, path, metadata={"format": "pt"})
        return
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        raw = t.contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": ST_NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for raw in blobs:
            f.write(raw)


def shard_files(directory):
    return sorted(f for f in os.listdir(directory) if f.endswith(".safetensors"))


def load_dir(directory):
    """{name: tensor} over every shard of a checkpoint directory."""
    out = {}
    for f in shard_files(directory):
        for k, v in load_file(os.path.join(directory, f)).items():
            if k in out:
                raise CheckFailed("%s appears in two shards" % k)
            out[k] = v
    return out


def read_json(path):
    with open(path) as f:
        return json.load(f)


def declared_dtype(config):
    """The weights' dtype a config.json declares, as transformers reads it."""
    for key in ("dtype", "torch_dtype"):
        if config.get(key) is not None:
            return config[key]
    return None


def dtype_keys(obj, path="$"):
    """[(json path, value)] of every dtype / torch_dtype key, nested ones too."""
    out = []
    for k, v in obj.items():
        if k in ("dtype", "torch_dtype") and isinstance(v, (str, dict)):
            out.append(("%s.%s" % (path, k), v))
        elif isinstance(v, dict) and k != "quantization_config":
            out.extend(dtype_keys(v, "%s.%s" % (path, k)))
    return out


# ---------------------------------------------------------------------------
# independent quantizers (bitsandbytes' published formats, computed in torch)
# ---------------------------------------------------------------------------

NF4_TABLE = [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
             -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
             0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
             0.7229568362236023, 1.0]
NF4_BLOCKSIZE = 64
# Ties: a value this close to the midpoint of two codes may round either way
# (bitsandbytes multiplies by 1/absmax; this quantizer divides).
TIE_MARGIN = 1e-6


def nf4_quantize(x, blocksize=NF4_BLOCKSIZE):
    """Nearest NF4 code of every element of x (any float dtype), per block of
    `blocksize` scaled by its absmax. Returns codes, absmax, and a mask of the
    elements that lie on a tie between two codes or in an all-zero block."""
    table = torch.tensor(NF4_TABLE, dtype=torch.float32, device=x.device)
    flat = x.reshape(-1).float()
    n = flat.numel()
    blocks = -(-n // blocksize)
    padded = torch.zeros(blocks * blocksize, dtype=torch.float32, device=x.device)
    padded[:n] = flat
    padded = padded.view(blocks, blocksize)
    absmax = padded.abs().amax(dim=1)
    scaled = padded / torch.where(absmax > 0, absmax, torch.ones_like(absmax))[:, None]
    scaled = scaled.reshape(-1)[:n]
    codes = torch.empty(n, dtype=torch.long, device=x.device)
    tie = torch.empty(n, dtype=torch.bool, device=x.device)
    step = 1 << 22
    for i in range(0, n, step):
        d = (scaled[i:i + step, None] - table).abs()
        two = d.topk(2, dim=1, largest=False)
        codes[i:i + step] = two.indices[:, 0]
        tie[i:i + step] = (two.values[:, 1] - two.values[:, 0]) <= TIE_MARGIN
    # Every code of an all-zero block dequantizes to 0 (bitsandbytes scales by
    # 1/0 there and takes whichever code its decision tree gives a NaN).
    tie |= (absmax == 0).repeat_interleave(blocksize)[:n]
    return codes, absmax, tie


def nf4_unpack(packed, n):
    p = packed.reshape(-1).to(torch.int64)
    return torch.stack([p >> 4, p & 15], dim=1).reshape(-1)[:n]


def nf4_dequantize(codes, absmax, blocksize=NF4_BLOCKSIZE):
    table = torch.tensor(NF4_TABLE, dtype=torch.float32, device=codes.device)
    n = codes.numel()
    scale = absmax.float().repeat_interleave(blocksize)[:n]
    return table[codes] * scale


NF4_HALF_GAP = max(b - a for a, b in zip(NF4_TABLE, NF4_TABLE[1:])) / 2


def check_nf4_tensor(name, x, packed, absmax, quant_map, state, want_shape):
    """One NF4-quantized tensor of a view against the independent quantizer.
    x: the source values, laid out as the view quantizes them."""
    if state.get("quant_type") != "nf4" or int(state.get("blocksize", 0)) != NF4_BLOCKSIZE:
        raise CheckFailed("%s: quant state %r" % (name, state))
    if [int(d) for d in state["shape"]] != list(want_shape):
        raise CheckFailed("%s: quant state shape %s, want %s" % (name, state["shape"], list(want_shape)))
    if state.get("dtype") != TORCH_NAMES.get(x.dtype):
        raise CheckFailed("%s: quant state dtype %s, source %s" % (name, state.get("dtype"), x.dtype))
    if not torch.equal(quant_map.float().cpu(), torch.tensor(NF4_TABLE, dtype=torch.float32)):
        raise CheckFailed("%s: quant_map is not the NF4 table" % name)
    codes, want_absmax, tie = nf4_quantize(x)
    if not torch.equal(absmax.float(), want_absmax):
        raise CheckFailed("%s: absmax differs in %d of %d blocks" % (
            name, int((absmax.float() != want_absmax).sum()), want_absmax.numel()))
    got = nf4_unpack(packed, x.numel())
    wrong = (got != codes) & ~tie
    if int(wrong.sum()):
        i = int(wrong.nonzero()[0])
        raise CheckFailed("%s: %d codes differ from the nearest NF4 code (first at %d: %d, want %d)" % (
            name, int(wrong.sum()), i, int(got[i]), int(codes[i])))
    err = (nf4_dequantize(got, absmax) - x.reshape(-1).float()).abs()
    bound = want_absmax.repeat_interleave(NF4_BLOCKSIZE)[:x.numel()] * NF4_HALF_GAP * (1 + 1e-5) + 1e-12
    if bool((err > bound).any()):
        raise CheckFailed("%s: dequantized error %.3g over half the widest code gap" % (name, float(err.max())))
    return int((tie & (want_absmax > 0).repeat_interleave(NF4_BLOCKSIZE)[:x.numel()]).sum())


def int8_quantize(x):
    """LLM.int8's row-wise quantization of x [out, in]: codes and row absmax (SCB)."""
    rows = x.float().abs().amax(dim=1)
    scale = torch.where(rows > 0, rows, torch.ones_like(rows))[:, None]
    return torch.round(x.float() * 127.0 / scale).clamp(-127, 127).to(torch.int8), rows


def int8_dequantize(w, scb):
    return w.float() * (scb.float()[:, None] / 127.0)


def check_int8_tensor(name, x, w, scb):
    """One LLM.int8 row-wise tensor: x the source [out, in] as the view quantizes it."""
    if list(w.shape) != list(x.shape) or w.dtype != torch.int8:
        raise CheckFailed("%s: %s %s, want int8 %s" % (name, w.dtype, list(w.shape), list(x.shape)))
    rows = x.float().abs().amax(dim=1)
    if not torch.equal(scb.float(), rows):
        raise CheckFailed("%s: SCB differs from the row absmax in %d of %d rows" % (
            name, int((scb.float() != rows).sum()), rows.numel()))
    err = (int8_dequantize(w, scb) - x.float()).abs()
    half_step = (rows / 127.0 / 2)[:, None] * (1 + 1e-5) + 1e-12
    if bool((err > half_step).any()):
        raise CheckFailed("%s: error %.3g over half a step of its row" % (name, float(err.max())))


# ---------------------------------------------------------------------------
# the check runner
# ---------------------------------------------------------------------------


class CheckFailed(Exception):
    pass


class Report(object):
    def __init__(self):
        self.passed = 0
        self.failed = 0
        self.skipped = []

    def run(self, name, fn):
        start = time.time()
        try:
            detail = fn()
        except CheckFailed as e:
            self.failed += 1
            print("FAIL %s: %s" % (name, e), flush=True)
            return None
        except Exception as e:  # a crash in a check fails that check, not the run
            self.failed += 1
            print("FAIL %s: %s: %s" % (name, type(e).__name__, e), flush=True)
            traceback.print_exc(limit=4, file=sys.stdout)
            return None
        self.passed += 1
        print("ok   %s%s (%.1fs)" % (name, " - " + detail if detail else "", time.time() - start), flush=True)
        return True

    def skip(self, name, why):
        self.skipped.append(name)
        print("skip %s: %s" % (name, why), flush=True)


# ---------------------------------------------------------------------------
# models
# ---------------------------------------------------------------------------

# (name, model family, dtype of the saved weights)
MODELS = [
    ("llama-f32", "llama", torch.float32),
    ("gpt2-f32", "gpt2", torch.float32),
    ("mixtral-bf16", "mixtral", torch.bfloat16),
    ("qwen2-bf16", "qwen2", torch.bfloat16),
]
CONV1D_MODEL_TYPES = ("gpt2", "openai-gpt", "imagegpt", "decision_transformer")
VOCAB = 4096


def make_config(family):
    t = transformers
    if family == "llama":
        return t.LlamaConfig(vocab_size=VOCAB, hidden_size=512, intermediate_size=1376, num_hidden_layers=6,
                             num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=512,
                             tie_word_embeddings=False)
    if family == "gpt2":
        return t.GPT2Config(vocab_size=VOCAB, n_embd=512, n_layer=4, n_head=8, n_positions=512)
    if family == "mixtral":
        return t.MixtralConfig(vocab_size=VOCAB, hidden_size=256, intermediate_size=512, num_hidden_layers=3,
                               num_attention_heads=8, num_key_value_heads=4, num_local_experts=4,
                               num_experts_per_tok=2, max_position_embeddings=512, tie_word_embeddings=False)
    if family == "qwen2":
        return t.Qwen2Config(vocab_size=VOCAB, hidden_size=384, intermediate_size=1024, num_hidden_layers=4,
                             num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=512,
                             tie_word_embeddings=False)
    raise ValueError(family)


def save_transformers_model(name, family, dtype, directory, seed):
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(make_config(family)).to(dtype)
    total = sum(p.numel() * p.element_size() for p in model.state_dict().values())
    model.save_pretrained(directory, max_shard_size=int(total / 3 * 1.05))
    return len(shard_files(directory))


def plain_gpt2_tensors(g, layers, hidden):
    """GPT-2's names and Conv1D layout ([in, out] projection weights)."""
    tensors = {"transformer.wte.weight": torch.randn(VOCAB, hidden, generator=g) * 0.02,
               "transformer.wpe.weight": torch.randn(512, hidden, generator=g) * 0.01}
    for i in range(layers):
        p = "transformer.h.%d." % i
        for proj, shape in (("attn.c_attn", (hidden, 3 * hidden)), ("attn.c_proj", (hidden, hidden)),
                            ("mlp.c_fc", (hidden, 4 * hidden)), ("mlp.c_proj", (4 * hidden, hidden))):
            tensors[p + proj + ".weight"] = torch.randn(*shape, generator=g) * 0.02
            tensors[p + proj + ".bias"] = torch.zeros(shape[1])
        for ln in ("ln_1", "ln_2"):
            tensors[p + ln + ".weight"] = 1 + torch.randn(hidden, generator=g) * 0.1
            tensors[p + ln + ".bias"] = torch.zeros(hidden)
    tensors["transformer.ln_f.weight"] = torch.ones(hidden)
    tensors["transformer.ln_f.bias"] = torch.zeros(hidden)
    return tensors


def save_plain_model(name, family, dtype, directory, seed, layers=4, hidden=256, inter=688):
    """A checkpoint written with torch alone: 3 shards, index, config.json.
    llama: Llama names, config with "dtype", "torch_dtype" and a nested
    sub-config; gpt2: GPT-2 names and Conv1D weights, config with
    "torch_dtype" only (as transformers before 4.56 wrote it)."""
    g = torch.Generator().manual_seed(seed)
    dname = TORCH_NAMES[dtype]
    if family == "gpt2":
        tensors = plain_gpt2_tensors(g, layers, hidden)
        config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": hidden, "n_layer": layers,
                  "vocab_size": VOCAB, "torch_dtype": dname}
        return write_plain_checkpoint(tensors, config, dtype, directory)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
              "num_hidden_layers": layers, "vocab_size": VOCAB, "dtype": dname, "torch_dtype": dname,
              "text_config": {"model_type": "llama", "dtype": dname}}
    tensors = {"model.embed_tokens.weight": torch.randn(VOCAB, hidden, generator=g) * 0.02}
    for i in range(layers):
        p = "model.layers.%d." % i
        for proj, shape in (("self_attn.q_proj", (hidden, hidden)), ("self_attn.k_proj", (hidden // 2, hidden)),
                            ("self_attn.v_proj", (hidden // 2, hidden)), ("self_attn.o_proj", (hidden, hidden)),
                            ("mlp.gate_proj", (inter, hidden)), ("mlp.up_proj", (inter, hidden)),
                            ("mlp.down_proj", (hidden, inter))):
            tensors[p + proj + ".weight"] = torch.randn(*shape, generator=g) * 0.02
        tensors[p + "input_layernorm.weight"] = 1 + torch.randn(hidden, generator=g) * 0.1
        tensors[p + "post_attention_layernorm.weight"] = 1 + torch.randn(hidden, generator=g) * 0.1
    tensors["model.norm.weight"] = torch.ones(hidden)
    tensors["lm_head.weight"] = torch.randn(VOCAB, hidden, generator=g) * 0.02
    return write_plain_checkpoint(tensors, config, dtype, directory)


def write_plain_checkpoint(tensors, config, dtype, directory):
    tensors = {k: v.to(dtype) for k, v in tensors.items()}
    os.makedirs(directory, exist_ok=True)
    names = list(tensors)
    cuts = [0, len(names) // 3, 2 * len(names) // 3, len(names)]
    weight_map, total = {}, 0
    for s in range(3):
        fname = "model-%05d-of-00003.safetensors" % (s + 1)
        part = {k: tensors[k] for k in names[cuts[s]:cuts[s + 1]]}
        save_file(part, os.path.join(directory, fname))
        for k, v in part.items():
            weight_map[k] = fname
            total += v.numel() * v.element_size()
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    return 3


# ---------------------------------------------------------------------------
# the mount
# ---------------------------------------------------------------------------


class Mount(object):
    """tensorfs SOURCE MOUNTPOINT -f in a child process; LD_LIBRARY_PATH is set
    for it alone (the carried libraries would break the machine's own tools)."""

    def __init__(self, tensorfs, libdir, source, mountpoint, options, log_path):
        self.mountpoint = mountpoint
        os.makedirs(mountpoint, exist_ok=True)
        env = dict(os.environ)
        if libdir:
            env["LD_LIBRARY_PATH"] = libdir
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen([tensorfs, source, mountpoint, "-f", "-o", options], env=env,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while not os.path.ismount(mountpoint):
            if self.proc.poll() is not None or time.time() > deadline:
                self.stop()
                raise RuntimeError("tensorfs did not mount %s (exit %s); its log:\n%s" % (
                    mountpoint, self.proc.returncode, self.log_tail()))
            time.sleep(0.1)

    def log_tail(self, n=4000):
        self.log.flush()
        with open(self.log_path, errors="replace") as f:
            return f.read()[-n:]

    def stop(self):
        if os.path.ismount(self.mountpoint):
            subprocess.run(["umount", self.mountpoint], check=False)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


# ---------------------------------------------------------------------------
# checks
# ---------------------------------------------------------------------------


def expect_equal(name, got, want):
    if got.dtype != want.dtype or list(got.shape) != list(want.shape):
        raise CheckFailed("%s: %s %s, want %s %s" % (name, got.dtype, list(got.shape), want.dtype, list(want.shape)))
    if not torch.equal(got, want):
        diff = (got.float() - want.float()).abs()
        raise CheckFailed("%s: %d elements differ (max %.3g)" % (name, int((diff != 0).sum()), float(diff.max())))


class ModelChecks(object):
    def __init__(self, args, name, local, mounted):
        self.args = args
        self.name = name
        self.local = local
        self.mounted = mounted
        self.device = args.device
        self.config = read_json(os.path.join(local, "config.json"))
        self.conv1d = self.config.get("model_type") in CONV1D_MODEL_TYPES
        self.tensors = load_dir(local)
        self.ref_model = None
        self.ref_logits = None
        g = torch.Generator().manual_seed(1234)
        self.input_ids = torch.randint(0, VOCAB, (2, 48), generator=g)

    def on_device(self, t):
        return t.to(self.device)

    # -- transformers --------------------------------------------------------

    def load_model(self, directory):
        model = transformers.AutoModelForCausalLM.from_pretrained(directory)
        return model.to(self.device).eval()

    def logits(self, model):
        with torch.no_grad():
            return model(input_ids=self.input_ids.to(self.device)).logits.float()

    def reference(self):
        if self.ref_model is None:
            self.ref_model = self.load_model(self.local)
            self.ref_logits = self.logits(self.ref_model)
        return self.ref_model

    def from_pretrained_equal(self):
        ref = self.reference()
        got = self.load_model(self.mounted)
        ref_params = dict(ref.named_parameters())
        got_params = dict(got.named_parameters())
        if set(ref_params) != set(got_params):
            raise CheckFailed("parameters differ: %s" % sorted(set(ref_params) ^ set(got_params))[:5])
        for k, p in ref_params.items():
            expect_equal(k, got_params[k].detach(), p.detach())
        expect_equal("logits", self.logits(got), self.ref_logits)
        return "%d parameters, logits equal" % len(ref_params)

    def from_pretrained_cast(self, view, dtype):
        ref = self.reference()
        got = self.load_model(os.path.join(self.mounted, view))
        n = 0
        got_params = dict(got.named_parameters())
        for k, p in ref.named_parameters():
            q = got_params[k].detach()
            want = p.detach().to(dtype) if p.is_floating_point() else p.detach()
            expect_equal(k, q, want)
            n += 1
        cos = cosine(self.logits(got), self.ref_logits)
        return "%d parameters %s, equal to torch's rounding; logits cosine %.5f" % (n, TORCH_NAMES[dtype], cos)

    def dequantized_dir(self, view, independent=False):
        """The view's weights dequantized (written once), or with independent the
        same weights rounded by the independent quantizers here."""
        out = os.path.join(self.args.work, "independent" if independent else "dequantized", self.name + view)
        if not os.path.isdir(out):
            write_dequantized(os.path.join(self.mounted, view), self.local, out, view, self.conv1d, self.device,
                              source=self.tensors if independent else None)
        return out

    def dequantized_files(self, view, max_relative_error):
        """The dequantized checkpoint the forward pass loads: every tensor in its
        source shape and dtype; quantized ones close to the source."""
        got = load_dir(self.dequantized_dir(view))
        if set(got) != set(self.tensors):
            raise CheckFailed("tensors differ: %s" % sorted(set(got) ^ set(self.tensors))[:5])
        worst, changed = 0.0, 0
        for k, x in self.tensors.items():
            v = got[k]
            if v.dtype != x.dtype or list(v.shape) != list(x.shape):
                raise CheckFailed("%s: %s %s, source %s %s" % (k, v.dtype, list(v.shape), x.dtype, list(x.shape)))
            if torch.equal(v, x):
                continue
            changed += 1
            rel = float((v.double() - x.double()).norm() / x.double().norm())
            worst = max(worst, rel)
            if not rel <= max_relative_error:
                raise CheckFailed("%s: relative error %.4f over %.4f" % (k, rel, max_relative_error))
        if changed == 0:
            raise CheckFailed("no tensor was quantized")
        return "%d tensors dequantized, worst relative error %.4f" % (changed, worst)

    def dequantized_forward(self, view, min_cosine):
        """The view's dequantized weights against the same weights rounded by the
        independent quantizers here: logits equal but for codes at ties. Their
        cosine to the source model's logits is the quantization's own loss (on a
        small random-initialized model NF4 loses more than on a trained one)."""
        self.reference()
        got = self.logits(self.load_model(self.dequantized_dir(view)))
        want = self.logits(self.load_model(self.dequantized_dir(view, independent=True)))
        cos = cosine(got, want)
        if not cos >= min_cosine:
            raise CheckFailed("logits cosine %.6f to the independent quantizer's, want at least %.4f" % (
                cos, min_cosine))
        return "logits cosine %.6f to the independent quantizer's; both %.5f and %.5f to the source model" % (
            cos, cosine(got, self.ref_logits), cosine(want, self.ref_logits))

    # -- files ---------------------------------------------------------------

    def tensors_view(self):
        d = os.path.join(self.mounted, "@tensors")
        seen = {}
        for f in sorted(os.listdir(d)):
            got = load_file(os.path.join(d, f))
            if len(got) != 1:
                raise CheckFailed("%s holds %d tensors" % (f, len(got)))
            for k, v in got.items():
                if k in seen:
                    raise CheckFailed("%s in %s and %s" % (k, seen[k], f))
                seen[k] = f
                if k not in self.tensors:
                    raise CheckFailed("%s: no such tensor in the checkpoint" % k)
                expect_equal(k, v, self.tensors[k])
        missing = set(self.tensors) - set(seen)
        if missing:
            raise CheckFailed("missing: %s" % sorted(missing)[:5])
        return "%d files" % len(seen)

    def split_files(self, view):
        d = os.path.join(self.mounted, view)
        names = sorted(os.listdir(d))
        files = [f for f in names if f.endswith(".safetensors")]
        for f in files:
            marker = os.path.join(d, f + ".done")
            if not os.path.exists(marker) or os.path.getsize(marker) != 0:
                raise CheckFailed("%s has no empty .done marker" % f)
        extra = [f for f in names if not f.endswith(".safetensors") and f[:-len(".done")] not in files]
        if extra:
            raise CheckFailed("unexpected files: %s" % extra[:5])
        return d, files

    def splitted_view(self):
        d, files = self.split_files("splitted_model")
        seen = {}
        for f in files:
            for k, v in load_file(os.path.join(d, f)).items():
                if k in seen:
                    raise CheckFailed("%s in %s and %s" % (k, seen[k], f))
                seen[k] = f
                expect_equal(k, v, self.tensors[k])
        missing = set(self.tensors) - set(seen)
        if missing:
            raise CheckFailed("missing: %s" % sorted(missing)[:5])
        return "%d layer files, %d tensors" % (len(files), len(seen))

    def splitted_4bit_view(self):
        d, files = self.split_files("splitted_model.4bit")
        seen, quantized, ties = set(), 0, 0
        for f in files:
            got = load_file(os.path.join(d, f))
            for k, v in got.items():
                if ".4bit." in k:
                    continue
                if k in seen or k not in self.tensors:
                    raise CheckFailed("%s: twice, or not in the checkpoint" % k)
                seen.add(k)
                x = self.on_device(self.tensors[k])
                state_key = k + ".4bit.quant_state.bitsandbytes__nf4"
                if state_key not in got:
                    expect_equal(k, v, self.tensors[k])
                    continue
                state = json.loads(bytes(got[state_key].numpy().tobytes()).decode())
                ties += check_nf4_tensor(k, x, self.on_device(v), self.on_device(got[k + ".4bit.absmax"]),
                                         got[k + ".4bit.quant_map"], state, list(x.shape))
                quantized += 1
        if seen != set(self.tensors):
            raise CheckFailed("missing: %s" % sorted(set(self.tensors) - seen)[:5])
        return "%d tensors quantized, %d ties" % (quantized, ties)

    def source_for_view(self, k):
        x = self.on_device(self.tensors[k])
        return x.t().contiguous() if self.conv1d else x

    def bnb_config(self, view):
        cfg = read_json(os.path.join(self.mounted, view, "config.json"))
        q = cfg.get("quantization_config") or {}
        nf4 = view == "@bnb-nf4"
        if q.get("quant_method") != "bitsandbytes" or q.get("load_in_4bit") != nf4 or q.get("load_in_8bit") == nf4:
            raise CheckFailed("%s/config.json: quantization_config %r" % (view, q))
        want = declared_dtype(self.config)
        if want is not None and q.get("bnb_4bit_compute_dtype") != want:
            raise CheckFailed("%s/config.json: bnb_4bit_compute_dtype %r, the config declares %r" % (
                view, q.get("bnb_4bit_compute_dtype"), want))
        for path, value in dtype_keys(cfg):
            if value != dict(dtype_keys(self.config)).get(path):
                raise CheckFailed("%s/config.json: %s is %r" % (view, path, value))

    def bnb_nf4_view(self):
        self.bnb_config("@bnb-nf4")
        d = os.path.join(self.mounted, "@bnb-nf4")
        seen, quantized, ties = set(), 0, 0
        for f in shard_files(d):
            got = load_file(os.path.join(d, f))
            for k, v in got.items():
                if any(k.endswith(s) for s in (".absmax", ".quant_map", ".quant_state.bitsandbytes__nf4")):
                    continue
                if k in seen or k not in self.tensors:
                    raise CheckFailed("%s: twice, or not in the checkpoint" % k)
                seen.add(k)
                state_key = k + ".quant_state.bitsandbytes__nf4"
                if state_key not in got:
                    expect_equal(k, v, self.tensors[k])
                    continue
                x = self.source_for_view(k)
                state = json.loads(bytes(got[state_key].numpy().tobytes()).decode())
                ties += check_nf4_tensor(k, x, self.on_device(v), self.on_device(got[k + ".absmax"]),
                                         got[k + ".quant_map"], state, list(x.shape))
                quantized += 1
        if seen != set(self.tensors):
            raise CheckFailed("missing: %s" % sorted(set(self.tensors) - seen)[:5])
        if quantized == 0:
            raise CheckFailed("no tensor quantized")
        return "%d weights quantized%s, %d ties" % (quantized, " (Conv1D transposed)" if self.conv1d else "", ties)

    def bnb_int8_view(self):
        self.bnb_config("@bnb-int8")
        d = os.path.join(self.mounted, "@bnb-int8")
        seen, quantized = set(), 0
        for f in shard_files(d):
            got = load_file(os.path.join(d, f))
            for k, v in got.items():
                if k.endswith(".SCB"):
                    continue
                if k in seen or k not in self.tensors:
                    raise CheckFailed("%s: twice, or not in the checkpoint" % k)
                seen.add(k)
                scb_key = k[:-len("weight")] + "SCB"
                if not k.endswith(".weight") or scb_key not in got:
                    expect_equal(k, v, self.tensors[k])
                    continue
                check_int8_tensor(k, self.source_for_view(k), self.on_device(v), self.on_device(got[scb_key]))
                quantized += 1
        if seen != set(self.tensors):
            raise CheckFailed("missing: %s" % sorted(set(self.tensors) - seen)[:5])
        if quantized == 0:
            raise CheckFailed("no tensor quantized")
        return "%d weights within half a step per row" % quantized

    def cast_files(self, view, dtype):
        d = os.path.join(self.mounted, view)
        cfg = read_json(os.path.join(d, "config.json"))
        keys = dtype_keys(cfg)
        if len(keys) != len(dtype_keys(self.config)):
            raise CheckFailed("config.json dtype keys %r, source has %r" % (keys, dtype_keys(self.config)))
        for path, value in keys:
            values = value.values() if isinstance(value, dict) else [value]
            if any(v != TORCH_NAMES[dtype] for v in values):
                raise CheckFailed("config.json %s is %r, want %r" % (path, value, TORCH_NAMES[dtype]))
        got = load_dir(d)
        if set(got) != set(self.tensors):
            raise CheckFailed("tensors differ: %s" % sorted(set(got) ^ set(self.tensors))[:5])
        for k, v in got.items():
            src = self.tensors[k]
            expect_equal(k, v, src.to(dtype) if src.dtype == torch.float32 and src.numel() else src)
        return "%d tensors; config.json says %s at %s" % (len(got), TORCH_NAMES[dtype], ", ".join(p for p, _ in keys))


def cosine(a, b):
    a, b = a.reshape(-1).double(), b.reshape(-1).double()
    return float((a @ b) / (a.norm() * b.norm()))


def write_dequantized(view_dir, local, out, view, conv1d, device, source=None):
    """The view's shards with every quantized weight dequantized (in torch, no
    bitsandbytes) back to the source layout and dtype, beside the source's
    config and index: a checkpoint from_pretrained loads as it is. With source
    (name -> source tensor), the weights the view quantizes are instead the
    source's rounded by the independent quantizers here."""
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    dtypes = {}
    for f in shard_files(local):
        for k, info in read_header(os.path.join(local, f)).items():
            dtypes[k] = ST_DTYPES[info["dtype"]]
    for f in shard_files(view_dir):
        got = load_file(os.path.join(view_dir, f))
        res = {}
        for k, v in got.items():
            if view == "@bnb-nf4":
                if any(k.endswith(s) for s in (".absmax", ".quant_map", ".quant_state.bitsandbytes__nf4")):
                    continue
                state_key = k + ".quant_state.bitsandbytes__nf4"
                if state_key in got:
                    state = json.loads(bytes(got[state_key].numpy().tobytes()).decode())
                    shape = [int(d) for d in state["shape"]]
                    n = math.prod(shape)
                    if source is None:
                        codes, absmax = nf4_unpack(v.to(device), n), got[k + ".absmax"].to(device)
                    else:
                        x = source[k].to(device)
                        codes, absmax, _ = nf4_quantize(x.t() if conv1d else x)
                    w = nf4_dequantize(codes, absmax).reshape(shape)
                    v = w.t() if conv1d else w
            elif view == "@bnb-int8":
                if k.endswith(".SCB"):
                    continue
                scb_key = k[:-len("weight")] + "SCB"
                if k.endswith(".weight") and scb_key in got:
                    if source is None:
                        w = int8_dequantize(v.to(device), got[scb_key].to(device))
                    else:
                        x = source[k].to(device)
                        w = int8_dequantize(*int8_quantize(x.t() if conv1d else x))
                    v = w.t() if conv1d else w
            res[k] = v.to(dtypes[k]).contiguous().cpu()
        save_file(res, os.path.join(out, f))
    for f in os.listdir(local):
        if not f.endswith(".safetensors"):
            shutil.copy(os.path.join(local, f), out)


# ---------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tensorfs", required=True, help="the tensorfs binary")
    ap.add_argument("--libdir", default="", help="its shared libraries (LD_LIBRARY_PATH for it alone)")
    ap.add_argument("--work", default="/tmp/tensorfs-real-loaders", help="models, mount point, logs")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--source", choices=("transformers", "plain"),
                    default="transformers" if transformers is not None else "plain")
    ap.add_argument("--models", default="", help="comma-separated names to run (default all)")
    ap.add_argument("--mount-options", default="views=all,cache_size=256M",
                    help="-o options (the default also covers a cache_size below what the defaults need)")
    args = ap.parse_args()
    if args.source == "transformers" and transformers is None:
        ap.error("transformers is not installed: use --source plain")

    print("tensorfs real-loader checks: torch %s, transformers %s, safetensors %s, device %s%s" % (
        torch.__version__, getattr(transformers, "__version__", "-"),
        __import__("safetensors").__version__ if st_torch is not None else "- (built-in reader)",
        args.device, " (%s)" % torch.cuda.get_device_name(0) if args.device.startswith("cuda") else ""),
        flush=True)
    report = Report()
    models_dir = os.path.join(args.work, "models")
    mnt = os.path.join(args.work, "mnt")
    if os.path.ismount(mnt):
        subprocess.run(["umount", mnt], check=False)
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(models_dir)

    wanted = [m for m in args.models.split(",") if m]
    if args.source == "transformers":
        models = [m for m in MODELS if not wanted or m[0] in wanted]
    else:
        models = [m for m in (("plain-llama-f32", "llama", torch.float32), ("plain-gpt2-f32", "gpt2", torch.float32),
                              ("plain-llama-bf16", "llama", torch.bfloat16)) if not wanted or m[0] in wanted]
    for seed, (name, family, dtype) in enumerate(models):
        d = os.path.join(models_dir, name)
        if args.source == "transformers":
            shards = save_transformers_model(name, family, dtype, d, seed)
        else:
            shards = save_plain_model(name, family, dtype, d, seed)
        print("made %s: %s, %d shards" % (name, TORCH_NAMES[dtype], shards), flush=True)

    holder = {}

    def mount():
        holder["mount"] = Mount(args.tensorfs, args.libdir, models_dir, mnt, args.mount_options,
                                os.path.join(args.work, "tensorfs.log"))
        notes = [line for line in holder["mount"].log_tail().splitlines() if "cache_size" in line]
        return "-o %s%s" % (args.mount_options, "; " + notes[0].strip() if notes else "")

    if not report.run("mount %s" % models_dir, mount):
        print("%d passed, %d failed" % (report.passed, report.failed))
        return 1
    try:
        for name, family, dtype in models:
            c = ModelChecks(args, name, os.path.join(models_dir, name), os.path.join(mnt, name))
            real = args.source == "transformers"
            checks = [
                ("from_pretrained(mount): parameters and logits equal", real, c.from_pretrained_equal),
                ("@tensors: every tensor once, equal", True, c.tensors_view),
                ("splitted_model: .done markers, every tensor once, equal", True, c.splitted_view),
                ("@bnb-nf4: NF4 codes and error", True, c.bnb_nf4_view),
                ("@bnb-int8: within half a step per row", True, c.bnb_int8_view),
                ("splitted_model.4bit: NF4 codes and error", True, c.splitted_4bit_view),
                ("@bf16 files and config.json", True, lambda: c.cast_files("@bf16", torch.bfloat16)),
                ("@f16 files and config.json", True, lambda: c.cast_files("@f16", torch.float16)),
                ("from_pretrained(@bf16): bfloat16 parameters", real,
                 lambda: c.from_pretrained_cast("@bf16", torch.bfloat16)),
                ("from_pretrained(@f16): float16 parameters", real,
                 lambda: c.from_pretrained_cast("@f16", torch.float16)),
                ("@bnb-nf4 dequantized in torch: shapes, dtypes, error", True,
                 lambda: c.dequantized_files("@bnb-nf4", 0.15)),
                ("@bnb-int8 dequantized in torch: shapes, dtypes, error", True,
                 lambda: c.dequantized_files("@bnb-int8", 0.01)),
                ("@bnb-nf4 dequantized: forward pass", real, lambda: c.dequantized_forward("@bnb-nf4", 0.9999)),
                ("@bnb-int8 dequantized: forward pass", real, lambda: c.dequantized_forward("@bnb-int8", 0.9999)),
            ]
            for title, runnable, fn in checks:
                label = "%s %s" % (name, title)
                if runnable:
                    report.run(label, fn)
                else:
                    report.skip(label, "needs transformers (--source transformers)")
            c.ref_model = None  # frees the reference model before the next one
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()
    finally:
        holder["mount"].stop()
    print("%d passed, %d failed" % (report.passed, report.failed))
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
