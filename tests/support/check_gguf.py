#!/usr/bin/env python3
"""Checks the @gguf/ files of a mounted checkpoint against an independent numpy
rendering of what llama.cpp's convert_hf_to_gguf.py writes.

  check_gguf.py --mount MOUNT/ckpt --source SOURCE/ckpt [--name NAME]

For each file of MOUNT/ckpt/@gguf (read whole through mmap, as llama.cpp maps
it, and again with plain reads): the GGUF v3 header is parsed here, every
tensor is found in the source safetensors by the converter's name mapping,
its values are computed with numpy (bf16/f16 widened to float32; llama's
q_proj/k_proj rows permuted with the converter's reshape/swapaxes) and
encoded as the file's type says: F32, F16 (numpy's astype, round to nearest
even), BF16 (round to nearest even, NaN made quiet) and Q8_0 (ggml's
quantize_row_q8_0_ref: d = max|x| / 127 as fp16, q = round half away from
zero of x * (1/d)) byte for byte; the K types' bytes are checked for size
only (their quantizers are tested in tests/core/gguf). Offsets must be dense
and aligned to 32, padding zero, the file size exact.

Prints one line per file and "check_gguf: OK" at the end; exits 1 on the first
difference, naming the tensor.
"""

import argparse
import json
import mmap
import os
import struct
import sys

import numpy as np

ALIGN = 32
TYPES = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34),
         12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 30: ("BF16", 1, 2)}


def fail(msg):
    print("check_gguf: FAIL: " + msg)
    sys.exit(1)


# ---- GGUF, from the format description.

class Reader:
    def __init__(self, data):
        self.data = data
        self.at = 0

    def take(self, fmt):
        v = struct.unpack_from("<" + fmt, self.data, self.at)
        self.at += struct.calcsize("<" + fmt)
        return v[0]

    def string(self):
        n = self.take("Q")
        s = bytes(self.data[self.at:self.at + n])
        self.at += n
        return s.decode("utf-8")


SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def parse_gguf(data):
    r = Reader(data)
    if bytes(data[:4]) != b"GGUF":
        fail("no GGUF magic")
    r.at = 4
    version = r.take("I")
    n_tensors, n_kv = r.take("Q"), r.take("Q")
    kv = {}
    for _ in range(n_kv):
        key = r.string()
        vtype = r.take("I")
        if vtype == 8:
            value = r.string()
        elif vtype == 9:
            etype, count = r.take("I"), r.take("Q")
            value = [r.string() if etype == 8 else r.take(SCALARS[etype]) for _ in range(count)]
            vtype = (9, etype)
        else:
            value = r.take(SCALARS[vtype])
        if key in kv:
            fail("duplicate key " + key)
        kv[key] = (vtype, value)
    tensors = []
    for _ in range(n_tensors):
        name = r.string()
        ne = [r.take("Q") for _ in range(r.take("I"))]
        tensors.append((name, ne, r.take("I"), r.take("Q")))
    data_start = (r.at + ALIGN - 1) // ALIGN * ALIGN
    return version, kv, tensors, data_start


# ---- The source.

def load_source(directory):
    tensors = {}
    for f in sorted(os.listdir(directory)):
        if not f.endswith(".safetensors"):
            continue
        with open(os.path.join(directory, f), "rb") as fh:
            raw = fh.read()
        n = struct.unpack_from("<Q", raw, 0)[0]
        header = json.loads(raw[8:8 + n])
        for name, t in header.items():
            if name == "__metadata__":
                continue
            a, b = t["data_offsets"]
            buf = raw[8 + n + a:8 + n + b]
            if t["dtype"] == "BF16":
                x = (np.frombuffer(buf, np.uint16).astype(np.uint32) << 16).view(np.float32)
            elif t["dtype"] == "F16":
                x = np.frombuffer(buf, np.float16).astype(np.float32)
            elif t["dtype"] == "F32":
                x = np.frombuffer(buf, np.float32)
            else:
                fail("unexpected source dtype " + t["dtype"])
            tensors[name] = (t["dtype"], x.reshape(t["shape"]))
    return tensors


BLOCK = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
         "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
         "self_attn.v_proj.weight": "attn_v.weight", "self_attn.q_proj.bias": "attn_q.bias",
         "self_attn.k_proj.bias": "attn_k.bias", "self_attn.v_proj.bias": "attn_v.bias",
         "self_attn.o_proj.weight": "attn_output.weight", "self_attn.qkv_proj.weight": "attn_qkv.weight",
         "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
         "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
         "mlp.down_proj.weight": "ffn_down.weight", "mlp.gate_up_proj.weight": "ffn_up.weight"}


def gguf_name(hf):
    top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
           "lm_head.weight": "output.weight"}
    if hf in top:
        return top[hf]
    parts = hf.split(".", 3)
    if parts[0] == "model" and parts[1] == "layers" and parts[3] in BLOCK:
        return "blk.%s.%s" % (parts[2], BLOCK[parts[3]])
    return None


def permute(w, n_head, n_head_kv):  # convert_hf_to_gguf.py LlamaModel.permute
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def expected_values(source, config):
    arch = config["architectures"][0]
    n_head = config["num_attention_heads"]
    n_kv = config.get("num_key_value_heads", n_head)
    out = {}
    for hf, (dtype, x) in source.items():
        name = gguf_name(hf)
        if name is None:
            fail("source tensor %s has no GGUF name in this checker" % hf)
        x = x.astype(np.float32)
        if arch in ("LlamaForCausalLM", "MistralForCausalLM"):
            if hf.endswith(("q_proj.weight", "q_proj.bias")):
                x = permute(x, n_head, n_head)
            if hf.endswith(("k_proj.weight", "k_proj.bias")):
                x = permute(x, n_head, n_kv)
        out[name] = (dtype, np.ascontiguousarray(x))
    return out


# ---- Encodings.

def bf16(x):
    u = x.view(np.uint32).astype(np.uint64)
    nan = (u & 0x7fffffff) > 0x7f800000
    r = (u + (0x7fff + ((u >> 16) & 1))) >> 16
    r = np.where(nan, (u >> 16) | 64, r)
    return r.astype(np.uint16).tobytes()


def q8_0(x):
    x = x.reshape(-1, 32)
    amax = np.max(np.abs(x), axis=1).astype(np.float32)
    d = (amax / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    v = (x * inv[:, None]).astype(np.float32).astype(np.float64)
    q = (np.sign(v) * np.floor(np.abs(v) + 0.5)).astype(np.int8)
    blocks = np.zeros((x.shape[0], 34), np.uint8)
    blocks[:, :2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    blocks[:, 2:] = q.view(np.uint8)
    return blocks.tobytes()


def encode(x, type_id):
    name = TYPES[type_id][0]
    if name == "F32":
        return x.astype(np.float32).tobytes()
    if name == "F16":
        return x.astype(np.float16).tobytes()
    if name == "BF16":
        return bf16(x)
    if name == "Q8_0":
        return q8_0(x)
    return None  # a K type or a fallback: size only


def round_through(x, kind):
    """The values the F16 or BF16 file holds, which llama-quantize starts from."""
    if kind == "F16":
        return x.astype(np.float16).astype(np.float32)
    return (np.frombuffer(bf16(x), np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(x.shape)


def check_file(path, expected, config, float_kind):
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        data = bytes(m)  # the whole mapping, read through in order as llama.cpp's loader does
        m.close()
    with open(path, "rb") as f:
        plain = f.read()
    if data != plain:
        fail(path + ": mmap and read give different bytes")
    version, kv, tensors, data_start = parse_gguf(data)
    if version != 3:
        fail("%s: GGUF version %d" % (path, version))
    if kv.get("general.architecture", (None, None))[1] is None:
        fail(path + ": no general.architecture")
    if kv["general.file_type"][0] != 4 or kv["general.quantization_version"] != (4, 2):
        fail(path + ": general.file_type or quantization_version is not a u32")
    names = [t[0] for t in tensors]
    if sorted(names) != sorted(expected):
        fail("%s: tensors %s, source maps to %s" % (path, sorted(set(names) ^ set(expected)), len(expected)))
    offset, exact, sized = 0, 0, 0
    for name, ne, type_id, off in tensors:
        if off != offset:
            fail("%s: %s at offset %d, expected %d" % (path, name, off, offset))
        tname, block_elems, block_bytes = TYPES[type_id]
        n = ne[0] // block_elems * block_bytes * int(np.prod(ne[1:], dtype=np.int64))
        got = data[data_start + off:data_start + off + n]
        dtype, x = expected[name]
        if list(reversed(x.shape)) != ne:
            fail("%s: %s ne %s, source shape %s" % (path, name, ne, list(x.shape)))
        if path.endswith("-Q4_K_M.gguf") and len(x.shape) >= 2 and tname not in ("F16", "BF16", "F32"):
            x = round_through(x, float_kind)  # llama-quantize quantizes what the F16/BF16 file holds
        want = encode(x, type_id)
        if want is None:
            if len(got) != n:
                fail("%s: %s is short" % (path, name))
            sized += 1
        else:
            if got != want:
                diff = next(i for i in range(min(len(got), len(want))) if got[i] != want[i]) if len(got) == len(want) else -1
                fail("%s: %s (%s) differs from the reference at byte %d" % (path, name, tname, diff))
            exact += 1
        padded = (n + ALIGN - 1) // ALIGN * ALIGN
        if any(data[data_start + off + n:data_start + off + padded]):
            fail("%s: padding after %s is not zero" % (path, name))
        offset += padded
    if len(data) != data_start + offset:
        fail("%s: %d bytes, the layout says %d" % (path, len(data), data_start + offset))
    print("%s: %d tensors, %d byte for byte, %d by size" % (os.path.basename(path), len(tensors), exact, sized))
    return exact


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mount", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--name", default=None)
    args = ap.parse_args()
    with open(os.path.join(args.source, "config.json")) as f:
        config = json.load(f)
    expected = expected_values(load_source(args.source), config)
    name = args.name or os.path.basename(os.path.normpath(args.mount))
    files = sorted(os.listdir(os.path.join(args.mount, "@gguf")))
    float_kind = "BF16" if any(d == "BF16" and len(x.shape) >= 2 for d, x in expected.values()) else "F16"
    want = sorted("%s-%s.gguf" % (name, k) for k in (float_kind, "Q8_0", "Q4_K_M"))
    if files != want:
        fail("@gguf holds %s, expected %s" % (files, want))
    for f in files:
        check_file(os.path.join(args.mount, "@gguf", f), expected, config, float_kind)
    print("check_gguf: OK")


if __name__ == "__main__":
    main()
