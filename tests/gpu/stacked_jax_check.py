#!/usr/bin/env python3
"""@stacked/ loaded into JAX: the layers of a transformers-written checkpoint,
stacked by tensorfs, against jnp.stack of the per-layer tensors.

  stacked_jax_check.py --tensorfs BIN [--libdir DIR] [--work DIR] [--keep]
  stacked_jax_check.py --source CKPT_DIR --stacked MOUNTED_CKPT_DIR/@stacked

The first form makes the models with transformers' save_pretrained from small
random-initialized configs (Llama in bfloat16 and float32, Mixtral in bfloat16,
each in 3 or more shards), mounts the directory holding them with tensorfs
(needs root: /dev/fuse and umount), and checks each; the second checks one
checkpoint already mounted. Per model:

  names        @stacked holds exactly the expected tensors: model.layers.<rest>
               for every per-layer family ([L, ...]; Mixtral's experts
               [L, E, ...]), the other tensors under their own names
  stacked      jax.device_put of the numpy.memmap of every stacked tensor
               equals jnp.stack of the source's per-layer tensors (memmapped
               from local disk), bit for bit, on the default JAX device
  slice        jax.device_put of one layer's slice of each stacked tensor
               equals that layer's source tensor
  passthrough  the other tensors equal their source
  index        model.safetensors.index.json names every tensor with its file
  config       config.json is the source's, byte for byte

Prints one line per check and closes with "N passed, N failed"; exits 1 when
any check failed.
"""
import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np

import jax
import jax.numpy as jnp

DTYPES = {"BF16": jnp.bfloat16, "F16": np.float16, "F32": np.float32, "F64": np.float64,
          "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
LAYER = re.compile(r"^(?P<stack>model\.layers\.)(?P<i>\d+)\.(?P<rest>.+)$")
EXPERT = re.compile(r"^(?P<head>.*experts\.)(?P<j>\d+)\.(?P<tail>.+)$")


def memmapped(directory):
    """name -> numpy.memmap of every tensor of every *.safetensors file in directory."""
    out = {}
    for fname in sorted(f for f in os.listdir(directory) if f.endswith(".safetensors")):
        path = os.path.join(directory, fname)
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
        header.pop("__metadata__", None)
        for name, t in header.items():
            begin, end = t["data_offsets"]
            shape = tuple(t["shape"])
            if end == begin:
                out[name] = np.zeros(shape, dtype=DTYPES[t["dtype"]])
            else:
                out[name] = np.memmap(path, dtype=DTYPES[t["dtype"]], mode="r", offset=8 + n + begin, shape=shape)
    return out


def expected_families(source_names):
    """stacked name -> [[source names of a layer (one per expert, or one)], ...],
    plus the names that pass through. Families present in every layer are
    model.layers.<rest>; others are cut into runs of consecutive layers,
    model.layers.<a>-<b>.<rest> (shapes are taken to agree within a family,
    as in the models made here and DeepSeek-style dense-then-MoE layers)."""
    layers, passthrough = {}, []
    for name in source_names:
        m = LAYER.match(name)
        if not m:
            passthrough.append(name)
            continue
        rest, i, j = m["rest"], int(m["i"]), None
        e = EXPERT.match(rest)
        if e:
            rest, j = e["head"] + e["tail"], int(e["j"])
        layers.setdefault(m["stack"] + rest, {}).setdefault(i, {})[j] = name
    count = 1 + max([i for per_layer in layers.values() for i in per_layer] or [-1])
    families = {}
    for stacked, per_layer in layers.items():
        runs = []
        for i in sorted(per_layer):
            experts = per_layer[i]
            group = [experts[j] for j in sorted(experts, key=lambda x: -1 if x is None else x)]
            if runs and runs[-1][-1][0] == i - 1:
                runs[-1].append((i, group))
            else:
                runs.append([(i, group)])
        rest = stacked[len("model.layers."):]
        for run in runs:
            whole = len(runs) == 1 and run[0][0] == 0 and run[-1][0] == count - 1
            name = stacked if whole else "model.layers.%d-%d.%s" % (run[0][0], run[-1][0], rest)
            families[name] = [group for _, group in run]
    return families, passthrough


class Report(object):
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, name, fn):
        try:
            detail = fn()
        except Exception as e:  # a failed check, with what went wrong
            self.failed += 1
            print("FAIL  %s: %s" % (name, e))
            traceback.print_exc(limit=2, file=sys.stdout)
            return
        self.passed += 1
        print("ok    %s%s" % (name, ": " + detail if detail else ""))


def equal(got, want, what):
    if got.shape != want.shape or got.dtype != want.dtype:
        raise AssertionError("%s: %s %s, expected %s %s" % (what, got.dtype, got.shape, want.dtype, want.shape))
    if not bool(jnp.array_equal(got, want)):
        raise AssertionError("%s: values differ" % what)


def check_model(report, label, source_dir, stacked_dir):
    device = jax.devices()[0]
    source = memmapped(source_dir)
    stacked = memmapped(stacked_dir)
    families, passthrough = expected_families(source)

    def names():
        want = set(families) | set(passthrough)
        missing, extra = sorted(want - set(stacked)), sorted(set(stacked) - want)
        if missing or extra:
            raise AssertionError("missing %s, unexpected %s" % (missing[:5], extra[:5]))
        return "%d stacked, %d passed through" % (len(families), len(passthrough))

    report.check("%s names" % label, names)
    for name, groups in sorted(families.items()):
        if name not in stacked:
            continue

        def whole(name=name, groups=groups):
            got = jax.device_put(stacked[name], device)
            per_layer = [jax.device_put(np.asarray(source[n]), device) for g in groups for n in g]
            if len(groups[0]) > 1:  # experts within each layer, then layers
                e = len(groups[0])
                want = jnp.stack([jnp.stack(per_layer[k:k + e]) for k in range(0, len(per_layer), e)])
            else:
                want = jnp.stack(per_layer)
            equal(got, want, name)
            return "%s %s on %s" % (got.dtype, tuple(got.shape), device.platform)

        def one_layer(name=name, groups=groups):
            i = len(groups) // 2
            got = jax.device_put(stacked[name][i], device)
            parts = [jax.device_put(np.asarray(source[n]), device) for n in groups[i]]
            equal(got, jnp.stack(parts) if len(parts) > 1 else parts[0], "%s[%d]" % (name, i))
            return "layer %d" % i

        report.check("%s stacked %s" % (label, name), whole)
        report.check("%s slice %s" % (label, name), one_layer)

    def passthrough_equal():
        for name in passthrough:
            equal(jax.device_put(stacked[name], device), jax.device_put(np.asarray(source[name]), device), name)
        return "%d tensors" % len(passthrough)

    report.check("%s passthrough" % label, passthrough_equal)

    def index():
        path = os.path.join(stacked_dir, "model.safetensors.index.json")
        files = sorted(f for f in os.listdir(stacked_dir) if f.endswith(".safetensors"))
        if not os.path.exists(path):
            if len(files) > 1:
                raise AssertionError("no index for %d files" % len(files))
            return "one file, no index"
        wm = json.load(open(path))["weight_map"]
        for fname in files:
            for name in memmapped_names(os.path.join(stacked_dir, fname)):
                if wm.get(name) != fname:
                    raise AssertionError("%s is in %s, the index says %s" % (name, fname, wm.get(name)))
        if set(wm) != set(stacked):
            raise AssertionError("the index names %d tensors, the files hold %d" % (len(wm), len(stacked)))
        return "%d files" % len(files)

    report.check("%s index" % label, index)

    def config():
        a = open(os.path.join(stacked_dir, "config.json"), "rb").read()
        b = open(os.path.join(source_dir, "config.json"), "rb").read()
        if a != b:
            raise AssertionError("config.json differs from the source's")
        return ""

    report.check("%s config" % label, config)


def memmapped_names(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return list(header)


MODELS = [("llama-bf16", "llama", "bfloat16"), ("llama-f32", "llama", "float32"),
          ("mixtral-bf16", "mixtral", "bfloat16")]


def save_model(family, dtype, directory, seed):
    import torch
    import transformers
    t = transformers
    if family == "llama":
        config = t.LlamaConfig(vocab_size=4096, hidden_size=512, intermediate_size=1376, num_hidden_layers=6,
                               num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=512,
                               tie_word_embeddings=False)
    else:
        config = t.MixtralConfig(vocab_size=4096, hidden_size=256, intermediate_size=512, num_hidden_layers=3,
                                 num_attention_heads=8, num_key_value_heads=4, num_local_experts=4,
                                 num_experts_per_tok=2, max_position_embeddings=512, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = t.AutoModelForCausalLM.from_config(config).to(getattr(torch, dtype))
    total = sum(p.numel() * p.element_size() for p in model.state_dict().values())
    model.save_pretrained(directory, max_shard_size=int(total / 3 * 1.05))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tensorfs", help="the tensorfs binary: make the models, mount them, check every one")
    ap.add_argument("--libdir", default="", help="its shared libraries (LD_LIBRARY_PATH for it alone)")
    ap.add_argument("--work", help="where the models and the mount point go (default: a temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--source", help="a checkpoint on local disk (with --stacked)")
    ap.add_argument("--stacked", help="its @stacked directory on a tensorfs mount (with --source)")
    a = ap.parse_args()
    report = Report()
    print("JAX %s, default device %s" % (jax.__version__, jax.devices()[0]))
    if a.source or a.stacked:
        if not (a.source and a.stacked):
            ap.error("--source and --stacked go together")
        check_model(report, os.path.basename(os.path.normpath(a.source)), a.source, a.stacked)
    elif a.tensorfs:
        work = a.work or tempfile.mkdtemp(prefix="stacked-jax.")
        src, mnt = os.path.join(work, "src"), os.path.join(work, "mnt")
        os.makedirs(mnt, exist_ok=True)
        for seed, (name, family, dtype) in enumerate(MODELS):
            if not os.path.isdir(os.path.join(src, name)):
                save_model(family, dtype, os.path.join(src, name), seed)
        env = dict(os.environ)
        if a.libdir:
            env["LD_LIBRARY_PATH"] = a.libdir
        log = open(os.path.join(work, "tensorfs.log"), "w")
        proc = subprocess.Popen([a.tensorfs, src, mnt, "-f", "-o", "views=stacked"], env=env, stdout=log,
                                stderr=subprocess.STDOUT)
        try:
            deadline = time.time() + 60
            while not os.path.ismount(mnt):
                if proc.poll() is not None or time.time() > deadline:
                    raise SystemExit("tensorfs did not mount %s; see %s/tensorfs.log" % (mnt, work))
                time.sleep(0.1)
            for name, _, _ in MODELS:
                check_model(report, name, os.path.join(src, name), os.path.join(mnt, name, "@stacked"))
        finally:
            if os.path.ismount(mnt):
                subprocess.run(["umount", mnt], check=False)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
            log.close()
            if not a.keep and not a.work:
                shutil.rmtree(work, ignore_errors=True)
    else:
        ap.error("give --tensorfs, or --source and --stacked")
    print("%d passed, %d failed" % (report.passed, report.failed))
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
