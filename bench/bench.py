#!/usr/bin/python3
"""bench.py: tensorfs against its peers on an emulated GCS link (and over S3).

bench/run.sh installs what is needed, builds, and runs this; see bench/README.md.

  bench.py --tensorfs PATH --testdata PATH [--memfs PATH] [options]

Generates a Llama-shaped safetensors checkpoint once (kept in --data-dir, a
directory of buckets), serves it with the project's GCS test server
(tests/support/gcs_test_server.py) shaped to --latency-ms, --conn-mbit per
connection and --link-mbit in total, and measures each workload cold (a fresh
mount, the page cache dropped) with the server's request and byte counters
reset before each run:

  W1  mmap loader, every tensor copied out in storage order, shard after shard
  W2  the same, tensors in a shuffled order (fixed seed)
  W3  4 processes at once, each loading different shards
  W4  W1 again on the same mount (warm caches)
  W5  ls -l plus a header parse of every shard of a 100-shard checkpoint
  W6  AirLLM's forward pass over splitted_model/: each layer file in turn
      (embeddings, blocks 0..N-1, norm, head) loaded as safetensors' load_file
      does, nothing computed in between
  W7  the same over splitted_model.4bit/ (NF4, quantized by tensorfs as it reads)
  W8  sharded: N hosts (--hosts, default 4, 8 and 16), each its own tensorfs
      process and mount of the same gs:// checkpoint (separate caches, as
      separate hosts have), started together on the link; host r copies out
      dim-0 slice r of N of every tensor, (a) by mmap in storage order, (b) in a
      shuffled order; each with the mounts learning the slices from the reads
      and with each mount given its rank (-o shard=R/N); on two checkpoint
      shapes (--w8-shapes): the benchmark's checkpoint and one of many 1-8 MiB
      tensors (22 layers, hidden 1536, 5 shards, about 1 GiB)
  W8M mixed readers on one mount: whole-tensor loaders and slice readers (rank
      r of 8, dim 0) of two checkpoints in one bucket (whole/: llama-shaped,
      slice/: qwen2-shaped), in several combinations and start orders, each run
      on a fresh mount at defaults; needed vs fetched per combination
  W9  the same with dim-1 (column) slices: every row gives a small piece (report
      only)
  W10 @stacked/ (the layers stacked for JAX scan-over-layers): its files loaded in
      order as W1 loads the shards; every stacked tensor gathers its layers'
      source tensors from all over the shards
  W12 readers that share one mount, processes: N processes (N = 2, 4, 8)
      started together on one fresh mount, process r copying dim-0 rows r/N
      of every tensor (tensor parallelism on one host), beside one whole
      loader on its own fresh mount (storage order) as the reference
  W13 readers that share one mount, threads: one process mapping every shard,
      then 8, 32 and 64 threads copying tensors out in a shuffled order, at
      the benchmark's cache and at a cache a third of the checkpoint, each
      beside one whole loader at that cache as the reference
  W11 llama.cpp's load of @gguf/NAME-Q8_0.gguf: the whole file mmapped with
      MAP_POPULATE (read through in order), quantized by tensorfs from the bf16
      shards as it is read; the checkpoint is the benchmark's with a byte-level
      BPE tokenizer of its vocabulary (gs://BUCKET/<checkpoint>-gguf)
  W11K the same for NAME-Q4_K_M.gguf of a checkpoint whose rows are whole
      256-element blocks (hidden 2048, intermediate 5632, 2 GiB; the
      benchmark's rows fall back to Q5_0), so that Q4_K's search is what runs
      (report only; run when named)

With --sources gs,s3, W1, W2 and W6 run a second time with tensorfs reading
s3://BUCKET/... from the same server's S3 dialect on the same link (signed
requests, SigV4, path-style), so gs:// and s3:// figures come from one run side
by side ("tensorfs s3 W1 ..." rows, held to the same targets).

W6, W7 and W11 are rated over the SOURCE bytes of the layers they loaded (the
checkpoint's tensor bytes, which is what the link carries), and report the time
to the first layer and, for W7, the bytes the layer files held. With --micro-bench,
the quantization and cast cases of micro_bench are run first (per core, source
bytes per second) and compared with the link rate.

Peers on the same link in the same run: a naive client that issues one range
GET per tensor; staging (download everything with 16 parallel range GETs, then
load from local disk); rclone mount (a couple of read settings, the best
reported); the link limit (bytes / link rate + one round trip); and, as the
ceiling for W4, memfs_ceiling (bench/memfs_ceiling.cc), an in-memory FUSE file
system on this machine.

A run that is still going after --deadline seconds stops after the tensor in
progress and is reported as partial: its rate is the bytes it loaded over the
time it took. Prints a table and the targets (held / NOT held), and writes
results.json and results.png into --out. MB is 10^6 bytes, MiB 2^20.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SERVER_PY = os.path.join(REPO, "tests", "support", "gcs_test_server.py")
LOADER_PY = os.path.join(HERE, "loader.py")
CLIENT_PY = os.path.join(HERE, "gcs_client.py")
PYTHON = "/usr/bin/python3"
BUCKET = "tensorfs-bench"
# The access key the server's S3 dialect accepts, and tensorfs signs with for s3://.
S3_KEY_ID, S3_SECRET = "AKIDTENSORFSBENCH", "tensorfs-bench-secret"
# Workloads run over s3:// as well with --sources gs,s3.
S3_WORKLOADS = ("W1", "W2", "W6")
MB = 1e6
MiB = 1 << 20
CPUS = os.cpu_count() or 1
RSS_SLACK = 128 * MiB
LAYER_WORKLOADS = {"W6": "splitted_model", "W7": "splitted_model.4bit"}
# The GGUF workloads: the file of @gguf/ each loads.
GGUF_WORKLOADS = {"W11": "Q8_0", "W11K": "Q4_K_M"}
# W11K's checkpoint (tensorfs-testdata options): rows of whole Q4_K blocks, about 2 GiB (--quick: 0.4).
GGUF_K_SHAPE = {"hidden": 2048, "intermediate": 5632, "heads": 16, "kv-heads": 8, "vocab": 32000, "shards": 4}
# W8's checkpoint shapes: "main" is the benchmark's checkpoint (--size-mib, --layers ...);
# "small-tensors" has many tensors of 1 to 8 MiB (tensorfs-testdata options, full and --quick);
# "qwen2" is W8M's slice/ checkpoint (MIXED_SHAPE, qwen2-shaped: one-row biases and layer norms beside
# 2-3 MiB projections), run only when named.
W8_SHAPES = ("main", "small-tensors", "qwen2")
W8_DEFAULT_SHAPES = ("main", "small-tensors")
SMALL_TENSORS = {
    "full": {"layers": 22, "hidden": 1536, "intermediate": 2560, "heads": 12, "kv-heads": 4, "vocab": 32000,
             "shards": 5},
    "quick": {"layers": 6, "hidden": 1024, "intermediate": 2048, "heads": 8, "kv-heads": 4, "vocab": 8192,
              "shards": 5},
}
W8_MODES = ("learned", "shard")
# W8M's two checkpoints (tensorfs-testdata options; one llama-shaped, one qwen2-shaped of the same sizes),
# 64-70 MiB shards.
MIXED_SHAPE = {"layers": 8, "hidden": 1024, "intermediate": 1536, "vocab": 16000, "shards": 3}
MIXED_WORLD = 8
# W8M's runs: (label, readers), each reader (kind, checkpoint, order, rank, delay): kind "whole" runs
# `loader.py load`, "slice" `loader.py slice --rank RANK --world MIXED_WORLD`; `delay` seconds after the
# first reader starts.
WHOLE_S = ("whole", "whole", "storage", None, 0)     # whole/ loaded in storage order
WHOLE_R = ("whole", "whole", "random", None, 0)      # whole/ loaded in a shuffled order
SLICE_2 = ("slice", "slice", "storage", 2, 0)        # rank 2 of 8 of slice/, storage order
SLICE_5 = ("slice", "slice", "random", 5, 0)         # rank 5 of 8 of slice/, shuffled
WHOLE_OF_SLICE = ("whole", "slice", "storage", None, 0)  # slice/ loaded whole


def later(reader, seconds=1):
    return reader[:4] + (seconds,)


MIXED_RUNS = [
    ("2 whole of whole/ (storage, random)", [WHOLE_S, WHOLE_R]),
    ("2 slice of slice/ (2/8 storage, 5/8 shuffled)", [SLICE_2, SLICE_5]),
    ("whole of whole/ + slice 2/8 of slice/, together", [WHOLE_S, SLICE_2]),
    ("the same, the slice reader 1 s first", [later(WHOLE_S), SLICE_2]),
    ("the same, the whole loader 1 s first", [WHOLE_S, later(SLICE_2)]),
    ("whole + slice 2/8 of slice/ (one checkpoint), together", [WHOLE_OF_SLICE, SLICE_2]),
    ("the same, the slice reader 1 s first", [later(WHOLE_OF_SLICE), SLICE_2]),
    ("2 whole of whole/ + 2 slice of slice/", [WHOLE_S, WHOLE_R, SLICE_2, SLICE_5]),
]
# W8M: the most a run may fetch, over the bytes its readers needed.
MIXED_BOUND = 1.20
# W8, learned: a host that fetched this share of the checkpoint or more was taken for a whole reader.
WHOLE_READER_SHARE = 0.9
# micro_bench cases that say whether a view can keep up with the link.
QUANT_CASES = ["BM_QuantizeNf4", "BM_QuantizeBlockwise8", "BM_QuantizeRowInt8", "BM_CastF32ToBf16"]
# ggml's quantizers behind @gguf/ (core/gguf): they count FLOAT32 input bytes, so a bf16 source
# delivers their elements in half the bytes. *_Baseline is the SSE2 path, for machines without AVX2.
GGUF_QUANT_RE = re.compile(r"^BM_Quantize(Q\d|Q\d_\d|Q\d_K)(_Baseline)?$")
BLOCK_RE = re.compile(r"(?:^|\.)(?:layers|layer|h|block|blocks)\.(\d+)\.")

# rclone mount settings tried for W1; the fastest is reported as "rclone".
RCLONE_CONFIGS = {
    "off": ["--vfs-cache-mode", "off", "--buffer-size", "64M", "--vfs-read-chunk-size", "64M"],
    "full": ["--vfs-cache-mode", "full", "--vfs-read-ahead", "512M", "--buffer-size", "64M",
             "--vfs-read-chunk-size", "64M"],
}
RCLONE_COMMON = ["--read-only", "--dir-cache-time", "1h", "--attr-timeout", "1h", "--no-modtime",
                 "--log-level", "NOTICE"]


def log(message):
    sys.stderr.write(f"[{time.monotonic() - STARTED:7.1f}s] {message}\n")
    sys.stderr.flush()


STARTED = time.monotonic()


# --------------------------------------------------------------------------- results

@dataclasses.dataclass
class Result:
    name: str                  # the row label, "tensorfs W1"
    system: str                # tensorfs, memfs, naive, staging, rclone-off, link
    workload: str              # W1..W7
    seconds: float | None = None
    bytes_needed: int = 0      # what the workload read: headers plus tensors
    complete: bool = True
    requests: int | None = None
    bytes_fetched: int | None = None
    peak_rss: int | None = None
    link_seconds: float | None = None  # the link limit for bytes_needed; None off the link
    files: int = 0
    note: str = ""
    error: str | None = None
    extra: dict = dataclasses.field(default_factory=dict)

    @property
    def mbps(self):
        if self.seconds is None or self.seconds <= 0 or self.error or self.workload == "W5":
            return None
        return self.bytes_needed / MB / self.seconds

    @property
    def pct_link(self):
        if self.link_seconds is None or self.mbps is None:
            return None
        return 100.0 * self.link_seconds / self.seconds

    @property
    def fetched_ratio(self):
        if self.bytes_fetched is None or not self.bytes_needed:
            return None
        return self.bytes_fetched / self.bytes_needed

    def to_json(self):
        out = dataclasses.asdict(self)
        out.update(mbps=self.mbps, pct_link=self.pct_link, fetched_ratio=self.fetched_ratio)
        return out


# --------------------------------------------------------------------------- layers

DTYPE_BYTES = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2,
               "U16": 2, "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}
HEAD_PARTS = {"lm_head", "embed_out", "output", "score", "classifier", "cls", "qa_outputs", "head"}


def read_header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return header


def bpe_tokenizer(vocab):
    """tokenizer.json and tokenizer_config.json of a byte-level BPE tokenizer of `vocab` tokens that
    tensorfs' GGUF view converts (Llama 3's pre-tokenizer): the 256 GPT-2 byte symbols, merges of
    two symbols up to vocab - 2, then two special tokens."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + len(cs) - 188)
    symbol = {b: chr(c) for b, c in zip(bs, cs)}
    tokens = {symbol[b]: b for b in range(256)}
    merges = []
    for i in range(256):
        for j in range(256):
            if len(tokens) >= vocab - 2:
                break
            tokens[symbol[i] + symbol[j]] = len(tokens)
            merges.append(symbol[i] + " " + symbol[j])
    added = [{"id": vocab - 2 + k, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for k, c in enumerate(("<|begin_of_text|>", "<|end_of_text|>"))]
    split = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
             r"\s*[\r\n]+|\s+(?!\S)|\s+")
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": split}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": None, "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": tokens, "merges": merges}}
    config = {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>", "add_bos_token": True,
              "tokenizer_class": "PreTrainedTokenizerFast"}
    return tokenizer, config


def tensor_sizes(src, shards):
    """A line on the checkpoint's tensor sizes: how many, how many of 1 to 8 MiB, the median."""
    sizes = sorted(info["data_offsets"][1] - info["data_offsets"][0]
                   for shard in shards for info in read_header(os.path.join(src, shard)).values())
    if not sizes:
        return "no tensors"
    mid = sum(1 for n in sizes if MiB <= n <= 8 * MiB)
    return (f"{len(sizes)} tensors, {mid} of 1-8 MiB holding {sum(n for n in sizes if MiB <= n <= 8 * MiB) / MiB:.0f} "
            f"MiB, median {sizes[len(sizes) // 2] / MiB:.2f} MiB, largest {sizes[-1] / MiB:.1f} MiB")


def layer_plan(src, shards):
    """The per-layer files of splitted_model/ in forward order, from the source
    shards' headers, as AirLLM derives its layer names from the model:
    [(file name, source tensor bytes, tensors)]. Groups as tensorfs' built-in
    rules do (core/safetensors/layers.h): a block is the leftmost
    "<layers|layer|h|block|blocks>.<N>."; any other tensor goes with its module.
    Order: embeddings, blocks by index, other modules (the final norm), heads."""
    groups = {}  # prefix -> [rank, position, bytes, tensors]
    for shard in shards:
        header = read_header(os.path.join(src, shard))
        for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
            m = BLOCK_RE.search(name)
            if m:
                prefix, rank, position = name[:m.end()], 1, int(m.group(1))
            else:
                prefix = name.rsplit(".", 1)[0] + "." if "." in name else name
                parts = prefix.rstrip(".").split(".")
                if any(p in HEAD_PARTS for p in parts):
                    rank = 3
                elif any("embed" in p or p in ("wte", "wpe", "shared") for p in parts):
                    rank = 0
                else:
                    rank = 2
                position = len(groups)
            begin, end = info["data_offsets"]
            g = groups.setdefault(prefix, [rank, position, 0, 0])
            g[2] += end - begin
            g[3] += 1
    order = sorted(groups.items(), key=lambda kv: (kv[1][0], kv[1][1]))
    return [(prefix + "safetensors", g[2], g[3]) for prefix, g in order]


# --------------------------------------------------------------------------- processes

class Processes:
    """Every child process and mount this run started, so that any exit
    (an error, Ctrl-C, SIGTERM) unmounts and stops them."""

    def __init__(self):
        self.mounts = []  # (mountpoint, Popen)

    def add_mount(self, mnt, proc):
        self.mounts.append((mnt, proc))

    def unmount(self, mnt, proc):
        if os.path.ismount(mnt):
            if subprocess.run(["fusermount3", "-u", mnt], stderr=subprocess.DEVNULL).returncode != 0:
                time.sleep(0.5)
                if subprocess.run(["fusermount3", "-u", mnt], stderr=subprocess.DEVNULL).returncode != 0:
                    subprocess.run(["fusermount3", "-uz", mnt], stderr=subprocess.DEVNULL)
        stop(proc)
        self.mounts = [(m, p) for m, p in self.mounts if p is not proc]

    def cleanup(self):
        for mnt, proc in list(self.mounts):
            self.unmount(mnt, proc)


def stop(proc, timeout=20):
    if proc is None or proc.poll() is not None:
        return
    try:
        proc.wait(timeout=timeout)
        return
    except subprocess.TimeoutExpired:
        pass
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def peak_rss(pid):
    """VmHWM of a live process, in bytes; None once it has gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def tail(path, lines=15):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:]).rstrip()
    except OSError:
        return ""


def last_json(text):
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def run_json(cmd, timeout):
    """Runs a loader or client; returns (its last JSON line or None, error or None).
    Killed after `timeout` seconds (its last progress line still counts)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        result = last_json(out)
        if result is not None:
            result["complete"] = False
        return result, (None if result else f"killed after {timeout:.0f} s with no progress")
    except BaseException:  # Ctrl-C, SIGTERM: leave no loader behind
        proc.kill()
        proc.wait()
        raise
    result = last_json(out)
    if proc.returncode != 0 or result is None:
        return result, f"{os.path.basename(cmd[1])} exited with {proc.returncode}: {err.strip()[-600:]}"
    return result, None


# --------------------------------------------------------------------------- the test server

class Server:
    """The GCS test server as a child process, with its control API."""

    def __init__(self, data_dir, work_dir, latency_ms, conn_rate, total_rate):
        self.log_path = os.path.join(work_dir, "gcs_test_server.log")
        port_file = os.path.join(work_dir, "server.port")
        cmd = [PYTHON, SERVER_PY, "--data", data_dir, "--port", "0", "--port-file", port_file,
               "--quiet", "--precompute-hashes", "--latency-ms", str(latency_ms),
               "--conn-rate", str(int(conn_rate)), "--total-rate", str(int(total_rate)),
               "--s3-key", f"{S3_KEY_ID}:{S3_SECRET}"]
        with open(self.log_path, "w") as log_file:
            self.proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 600  # first start hashes every object
        while not os.path.exists(port_file):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"bench: the GCS test server did not start:\n{tail(self.log_path)}")
            time.sleep(0.1)
        with open(port_file) as f:
            self.port = int(f.read())
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def _call(self, method, path):
        request = urllib.request.Request(self.endpoint + path, method=method, data=b"" if method == "POST" else None)
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read() or b"{}")

    def reset(self):
        self._call("POST", "/_control/stats/reset")

    def stats(self):
        return self._call("GET", "/_control/stats")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            stop(self.proc, timeout=10)


# --------------------------------------------------------------------------- the benchmark

class Bench:
    def __init__(self, args):
        self.args = args
        self.procs = Processes()
        self.results: list[Result] = []
        self.notes: list[str] = []
        self.work = tempfile.mkdtemp(prefix="tensorfs-bench.", dir=args.work_dir)
        self.total_rate = args.link_mbit * 1e6 / 8
        self.conn_rate = args.conn_mbit * 1e6 / 8
        self.rtt = args.latency_ms / 1000.0
        self.can_drop = None
        self.server = None
        self.tensorfs_help = ""
        self.chunk_size = None
        self.chunk_source = ""
        self.cache_option = False
        self.chunk_option = False
        self.rclone_best = None
        self.rclone = shutil.which("rclone")
        self.layers = None      # layer_plan() of the checkpoint, for W6 and W7
        self.quant = None       # {case: micro_bench row or None when missing}
        self.quant_error = None
        self.source = "gs"      # the scheme tensorfs mounts: gs, or s3 (--sources)

    # ------------------------------------------------------------------ setup

    @property
    def system(self):
        """The result rows' system for the source in use: tensorfs (gs://) or tensorfs-s3."""
        return "tensorfs" if self.source == "gs" else "tensorfs-s3"

    @property
    def tag(self):
        """The row label's start: "tensorfs " or "tensorfs s3 "."""
        return "tensorfs " if self.source == "gs" else "tensorfs s3 "

    def detect_tensorfs(self):
        a = self.args
        proc = subprocess.run([a.tensorfs, "--help"], capture_output=True, text=True)
        self.tensorfs_help = proc.stdout + proc.stderr
        self.cache_option = re.search(r"cache[-_]size", self.tensorfs_help) is not None
        self.chunk_option = re.search(r"chunk[-_]size", self.tensorfs_help) is not None
        if a.chunk_mib is not None:
            self.chunk_size = int(a.chunk_mib * MiB)
            self.chunk_source = "--chunk-mib"
        else:
            m = re.search(r"chunk[-_]size\b.*?\(default\s+(\d+(?:\.\d+)?)\s*([KMG]?)", self.tensorfs_help, re.S)
            if m:
                scale = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)]
                self.chunk_size = int(float(m.group(1)) * scale)
                self.chunk_source = "tensorfs --help default"
            else:
                self.chunk_size = 8 * MiB
                self.chunk_source = "the harness default (tensorfs --help names no chunk size)"
        if not self.cache_option:
            self.notes.append(f"tensorfs --help lists no cache_size option: none passed; the RSS target "
                              f"uses --cache-mib {a.cache_mib}")

    def tensorfs_opts(self):
        a = self.args
        # s3:// signs with the key the server was given (AWS_ACCESS_KEY_ID ... in the environment).
        opts = (["anonymous"] if self.source == "gs" else []) + [f"endpoint={self.server.endpoint}",
                                                                 "log_level=warn"]
        if self.cache_option:
            opts.append(f"cache_size={a.cache_mib}M")
        if a.chunk_mib is not None and self.chunk_option:
            opts.append(f"chunk_size={int(a.chunk_mib * 1024)}K")
        if a.tensorfs_opts:
            opts.append(a.tensorfs_opts)
        return ",".join(opts)

    def generate(self, name, gen_args, arch="llama"):
        """The checkpoint gs://BUCKET/name, generated into the data dir unless it is there."""
        path = os.path.join(self.args.data_dir, BUCKET, name)
        if not os.path.isdir(path):
            tmp = path + ".partial"
            shutil.rmtree(tmp, ignore_errors=True)
            os.makedirs(os.path.dirname(tmp), exist_ok=True)
            log(f"generating {path}")
            cmd = [self.args.testdata, "--arch", arch, "--dtype", self.args.dtype, *gen_args, "--out", tmp]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise SystemExit(f"bench: {' '.join(cmd)} failed:\n{proc.stdout}{proc.stderr}")
            summary = [l for l in proc.stdout.splitlines() if l.startswith(arch + ":")]
            with open(os.path.join(tmp, ".bench-model"), "w") as f:
                f.write((summary[0] if summary else "") + "\n")
            os.rename(tmp, path)
        shards = sorted(n for n in os.listdir(path) if n.endswith(".safetensors"))
        model = open(os.path.join(path, ".bench-model")).read().strip()
        return path, shards, model

    def gguf_checkpoint(self, src, shards):
        """A generated checkpoint as one @gguf/ converts: gs://BUCKET/<checkpoint>-gguf holds its
        shards (hard links) and config.json, with a byte-level BPE tokenizer of its vocabulary
        (bpe_tokenizer) for tensorfs-testdata's WordLevel one."""
        path = src + "-gguf"
        if not os.path.isdir(path):
            tmp = path + ".partial"
            shutil.rmtree(tmp, ignore_errors=True)
            os.makedirs(tmp)
            for name in shards + ["config.json"] + [n for n in os.listdir(src) if n.endswith(".index.json")]:
                os.link(os.path.join(src, name), os.path.join(tmp, name))
            with open(os.path.join(src, "config.json")) as f:
                vocab = json.load(f)["vocab_size"]
            tokenizer, tokenizer_config = bpe_tokenizer(vocab)
            with open(os.path.join(tmp, "tokenizer.json"), "w") as f:
                json.dump(tokenizer, f)
            with open(os.path.join(tmp, "tokenizer_config.json"), "w") as f:
                json.dump(tokenizer_config, f)
            os.rename(tmp, path)
        return os.path.basename(path)

    def drop_caches(self, warm=()):
        """Empties the page cache, then reads `warm` (the files the server will
        send) back into it, so that the server sends from memory as GCS would,
        while every client-side copy starts cold."""
        if self.can_drop is not False:
            os.sync()
            try:
                with open("/proc/sys/vm/drop_caches", "w") as f:
                    f.write("3")
                self.can_drop = True
            except OSError as e:
                self.can_drop = False
                self.notes.append(f"cannot drop the page cache ({e.strerror}): cold runs rely on fresh mounts "
                                  "(FUSE pages belong to the mount), fresh rclone cache directories and "
                                  "freshly written staging files")
        for path in warm:
            with open(path, "rb", buffering=0) as f:
                while f.read(16 * MiB):
                    pass

    # ------------------------------------------------------------------ mounts

    def mountpoint(self, label):
        mnt = os.path.join(self.work, "mnt-" + label)
        os.makedirs(mnt, exist_ok=True)
        return mnt

    def mount(self, label, cmd, mnt, log_path):
        """Starts a foreground FUSE server; returns (Popen, seconds to mount)."""
        started = time.monotonic()
        with open(log_path, "a") as log_file:
            proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.procs.add_mount(mnt, proc)
        deadline = started + 120
        while not os.path.ismount(mnt):
            if proc.poll() is not None or time.monotonic() > deadline:
                self.procs.unmount(mnt, proc)
                raise RuntimeError(f"{label} did not mount (exit {proc.returncode}): {tail(log_path, 8)}")
            time.sleep(0.02)
        return proc, time.monotonic() - started

    def mount_tensorfs(self, prefix, label, extra_opts=""):
        if self.source != "gs":
            label += "-" + self.source
        mnt = self.mountpoint(label)
        opts = self.tensorfs_opts() + ("," + extra_opts if extra_opts else "")
        cmd = [self.args.tensorfs, f"{self.source}://{BUCKET}/{prefix}", mnt, "-f", "-o", opts]
        return (mnt, *self.mount("tensorfs", cmd, mnt, os.path.join(self.work, f"tensorfs-{label}.log")))

    def mount_rclone(self, prefix, label, config):
        mnt = self.mountpoint(label)
        remote = f":gcs,anonymous=true,endpoint='{self.server.endpoint}/storage/v1/':{BUCKET}/{prefix}"
        cache_dir = os.path.join(self.work, f"rclone-cache-{label}")
        cmd = [self.rclone, "mount", remote, mnt, *RCLONE_COMMON, *RCLONE_CONFIGS[config],
               "--cache-dir", cache_dir]
        env_config = os.path.join(self.work, "rclone.conf")  # absent: rclone uses its defaults
        os.environ["RCLONE_CONFIG"] = env_config
        result = (mnt, *self.mount("rclone", cmd, mnt, os.path.join(self.work, f"rclone-{label}.log")))
        return result + (cache_dir,)

    # ------------------------------------------------------------------ workloads

    def loader_cmd(self, files, order="storage", max_tensors=None, start_at=None, deadline=True):
        cmd = [PYTHON, LOADER_PY, "load", *files, "--order", order, "--seed", str(self.args.seed)]
        if deadline and self.args.deadline:
            cmd += ["--deadline", str(self.args.deadline)]
        if max_tensors is not None:
            cmd += ["--max-tensors", str(max_tensors)]
        if start_at is not None:
            cmd += ["--start-at", f"{start_at:.6f}"]
        return cmd

    def hard_timeout(self):
        return None if not self.args.deadline else self.args.deadline + max(60.0, self.args.deadline)

    def load_one(self, result, files, order="storage", max_tensors=None):
        out, err = run_json(self.loader_cmd(files, order, max_tensors), self.hard_timeout())
        self.fill_load(result, out, err)
        return out

    def load_warm(self, result, files, max_tensors=None):
        """A warm load, --warm-passes times; the fastest pass is the result (warm
        passes take well under a second, where one pass's noise shows)."""
        passes = []
        for _ in range(self.args.warm_passes):
            attempt = Result(name="", system="", workload="")
            self.load_one(attempt, files, max_tensors=max_tensors)
            if attempt.error:
                result.error = attempt.error
                return
            passes.append(attempt)
        best = min(passes, key=lambda r: r.seconds)
        for field in ("seconds", "bytes_needed", "complete", "files", "note"):
            setattr(result, field, getattr(best, field))
        result.extra["tensors"] = best.extra.get("tensors")
        result.extra["pass_seconds"] = [round(r.seconds, 4) for r in passes]

    def fill_load(self, result, out, err):
        if out is not None:
            result.seconds = out["end"] - out["start"]
            result.bytes_needed = out["bytes"]
            result.complete = bool(out.get("complete", False))
            result.files = out.get("files", 0) + (0 if result.complete else 1)
            result.extra["tensors"] = out.get("tensors")
        if err:
            result.error = err if out is None else None
            if out is not None:
                result.note = (result.note + "; " if result.note else "") + err
        if not result.complete and result.error is None:
            result.note = f"partial: stopped after {result.seconds:.0f} s" + (f"; {result.note}" if result.note else "")

    def run_loaders(self, cmds):
        """Starts the loader commands together; returns [(last JSON line or None,
        stderr, exit code)] in order, each loader killed past the hard timeout."""
        procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in cmds]
        done = []
        for proc in procs:
            timeout = self.hard_timeout()
            try:
                out, err = proc.communicate(timeout=None if timeout is None else timeout + 2)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
            except BaseException:
                for p in procs:
                    p.kill()
                    p.wait()
                raise
            done.append((last_json(out), err, proc.returncode))
        return done

    def load_parallel(self, result, groups):
        start_at = time.monotonic() + 1.5  # after every loader has imported numpy
        outs = []
        errors = []
        for parsed, err, returncode in self.run_loaders([self.loader_cmd(g, start_at=start_at) for g in groups]):
            if parsed is None or returncode not in (0, -9):
                errors.append(f"loader exited with {returncode}: {err.strip()[-400:]}")
            if parsed is not None:
                parsed.setdefault("complete", False)
                outs.append(parsed)
        if outs:
            result.seconds = max(o["end"] for o in outs) - min(o["start"] for o in outs)
            result.bytes_needed = sum(o["bytes"] for o in outs)
            result.complete = len(outs) == len(groups) and all(o["complete"] for o in outs)
            result.files = sum(o.get("files", 0) + (0 if o["complete"] else 1) for o in outs)
            result.extra["per_process_seconds"] = [round(o["end"] - o["start"], 3) for o in outs]
        if errors:
            result.error = "; ".join(errors) if not outs else None
            result.note = "; ".join(errors) if outs else result.note
        if not result.complete and not result.error:
            result.note = f"partial: stopped after {result.seconds:.0f} s" + (f"; {result.note}" if result.note else "")

    def take_stats(self, result):
        stats = self.server.stats()
        result.requests = stats["requests"]
        result.bytes_fetched = stats["bytes_served"]
        result.extra["media_requests"] = stats["media_requests"]
        result.extra["list_requests"] = stats["list_requests"]
        result.extra["metadata_requests"] = stats["metadata_requests"]
        ranges = [r[1] for r in stats.get("ranges", [])]
        if ranges:
            ranges.sort()
            result.extra["range_bytes_median"] = ranges[len(ranges) // 2]
            result.extra["range_bytes_max"] = ranges[-1]
        return stats

    def on_link(self, result):
        result.link_seconds = result.bytes_needed / self.total_rate + self.rtt if result.bytes_needed else None

    def record(self, result):
        self.results.append(result)
        if result.error:
            log(f"{result.name}: FAILED: {result.error}")
        else:
            mbps = result.mbps
            log(f"{result.name}: {result.seconds:.2f} s" + (f", {mbps:.1f} MB/s" if mbps is not None else "")
                + (f", {result.requests} requests" if result.requests is not None else "")
                + (f" ({result.note})" if result.note else ""))

    def guarded(self, name, system, workload, body):
        """Runs body(result); an exception becomes the row's error, so one broken
        system does not stop the others."""
        result = Result(name=name, system=system, workload=workload)
        try:
            body(result)
        except (RuntimeError, OSError, subprocess.SubprocessError, ValueError, KeyError) as e:
            result.error = str(e)
        self.record(result)
        return result

    # ------------------------------------------------------------------ tensorfs

    def run_tensorfs_w1_w4(self, want_w1, want_w4):
        files_src = [os.path.join(self.src, s) for s in self.shards]
        state = {}
        mnt = proc = None

        def w1(result):
            nonlocal mnt, proc
            self.drop_caches(files_src)
            self.server.reset()
            mnt, proc, result.extra["mount_seconds"] = self.mount_tensorfs(self.prefix, "w1")
            out = self.load_one(result, [os.path.join(mnt, s) for s in self.shards])
            state["tensors"] = None if out is None or out.get("complete") else out.get("tensors")
            self.take_stats(result)
            self.on_link(result)
            result.peak_rss = peak_rss(proc.pid)
            if not want_w1:
                result.note = "first pass for W4"

        def w4(result):
            if proc is None or proc.poll() is not None:
                raise RuntimeError("no W1 mount to reuse")
            self.server.reset()
            self.load_warm(result, [os.path.join(mnt, s) for s in self.shards], max_tensors=state.get("tensors"))
            self.take_stats(result)
            result.peak_rss = peak_rss(proc.pid)
            result.note = f"best of {self.args.warm_passes} passes" + (
                f"; the {state['tensors']} tensors W1 loaded" if state.get("tensors") is not None else "")

        try:
            self.guarded(f"{self.tag}W1 storage order", self.system, "W1", w1)
            if want_w4:
                self.guarded(f"{self.tag}W4 warm (2nd pass)", self.system, "W4", w4)
        finally:
            if proc is not None:
                self.procs.unmount(mnt, proc)

    def run_tensorfs_cold(self, name, workload, label, body_fn):
        files_src = [os.path.join(self.src, s) for s in self.shards]

        def body(result):
            self.drop_caches(files_src)
            self.server.reset()
            mnt, proc, result.extra["mount_seconds"] = self.mount_tensorfs(self.prefix, label)
            try:
                body_fn(result, mnt)
                self.take_stats(result)
                self.on_link(result)
                result.peak_rss = peak_rss(proc.pid)
            finally:
                self.procs.unmount(mnt, proc)

        self.guarded(name, self.system, workload, body)

    def run_w2(self):
        self.run_tensorfs_cold(f"{self.tag}W2 random order", "W2", "w2",
                               lambda r, mnt: self.load_one(r, [os.path.join(mnt, s) for s in self.shards], "random"))

    def run_w3(self):
        n = min(self.args.processes, len(self.shards))

        def body(result, mnt):
            groups = [[os.path.join(mnt, s) for s in self.shards[i::n]] for i in range(n)]
            self.load_parallel(result, groups)
            result.note = (result.note + "; " if result.note else "") + f"{n} processes"

        self.run_tensorfs_cold(f"tensorfs W3 {n} processes", "W3", "w3", body)

    def run_sharded(self, workload, world, order, shape="main", mode="learned"):
        """W8/W9: `world` hosts, each its own mount, reading their slices at once. `shape` names
        the checkpoint (self.shapes), `mode` "learned" (no shard option) or "shard" (each mount
        given -o shard=RANK/WORLD)."""
        dim = 0 if workload == "W8" else 1
        src, shards, prefix, checkpoint_bytes = self.shapes[shape]
        files_src = [os.path.join(src, s) for s in shards]
        label = f"{workload.lower()}-{shape}-{world}-{order}-{mode}"

        def body(result):
            self.drop_caches(files_src)
            self.server.reset()
            mounts = []
            try:
                for rank in range(world):
                    extra = f"shard={rank}/{world}" if mode == "shard" else ""
                    mounts.append(self.mount_tensorfs(prefix, f"{label}-r{rank}", extra)[:2])
                start_at = time.monotonic() + 1.5  # after every loader has imported numpy
                cmds = []
                for rank, (mnt, _) in enumerate(mounts):
                    cmd = [PYTHON, LOADER_PY, "slice", *[os.path.join(mnt, s) for s in shards],
                           "--rank", str(rank), "--world", str(world), "--dim", str(dim), "--order", order,
                           "--seed", str(self.args.seed), "--start-at", f"{start_at:.6f}"]
                    if self.args.deadline:
                        cmd += ["--deadline", str(self.args.deadline)]
                    cmds.append(cmd)
                hosts = []
                for rank, (parsed, err, returncode) in enumerate(self.run_loaders(cmds)):
                    if parsed is None:
                        raise RuntimeError(f"host {rank}: loader exited with {returncode}: {err.strip()[-300:]}")
                    hosts.append(parsed)
                per_host = []
                for rank, ((mnt, proc), out) in enumerate(zip(mounts, hosts)):
                    stats = self.tensorfs_stats(mnt) or {}
                    needed = out["bytes"]
                    seconds = out["end"] - out["start"]
                    limit = needed / (self.total_rate / world) + 2 * self.rtt
                    per_host.append({"rank": rank, "needed": needed, "fetched": stats.get("bytes_fetched"),
                                     "kernel_read": stats.get("bytes_served"),
                                     "seconds": seconds, "limit_seconds": limit,
                                     "pct_link": 100.0 * (needed / (self.total_rate / world) + self.rtt) / seconds,
                                     "complete": bool(out.get("complete")), "peak_rss": peak_rss(proc.pid)})
            finally:
                for mnt, proc in mounts:
                    self.procs.unmount(mnt, proc)
            self.take_stats(result)
            result.seconds = max(h["seconds"] for h in per_host)
            result.bytes_needed = sum(h["needed"] for h in per_host)
            result.complete = all(h["complete"] for h in per_host)
            result.files = len(shards)
            result.link_seconds = result.bytes_needed / self.total_rate + self.rtt
            result.extra.update(hosts=per_host, world=world, order=order, dim=dim, shape=shape, mode=mode,
                                shards=len(shards), checkpoint_bytes=checkpoint_bytes,
                                sent_over_checkpoint=result.bytes_fetched / checkpoint_bytes)
            result.note = (f"{world} hosts, dim {dim}, {order} order, {shape} checkpoint, "
                           f"{'-o shard=R/N' if mode == 'shard' else 'learned'}; server sent "
                           f"{result.bytes_fetched / checkpoint_bytes:.2f}x the checkpoint")
            if not result.complete:
                result.note = f"partial: stopped after {self.args.deadline:.0f} s; " + result.note

        name = f"tensorfs {workload} {world} hosts dim-{dim} {order}"
        if shape != "main":
            name += f" {shape}"
        if mode == "shard":
            name += " shard=R/N"
        self.guarded(name, "tensorfs", workload, body)

    def run_mixed(self, label, readers):
        """W8M: `readers` (see MIXED_RUNS) on one fresh mount of the bucket prefix holding whole/ and
        slice/, the page cache dropped. Needed: per checkpoint, what its whole loaders read (the file
        bytes, once however many load it), else what its slice readers copied out (ranks apart)."""
        files_src = [os.path.join(self.mixed_src, c, s) for c in ("whole", "slice") for s in self.mixed_shards[c]]
        tag = re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")[:40]

        def body(result):
            self.drop_caches(files_src)
            self.server.reset()
            mnt, proc, result.extra["mount_seconds"] = self.mount_tensorfs(self.mixed_prefix, f"w8m-{tag}")
            try:
                start_at = time.monotonic() + 1.5  # after every loader has imported numpy
                cmds = []
                for kind, checkpoint, order, rank, delay in readers:
                    files = [os.path.join(mnt, checkpoint, s) for s in self.mixed_shards[checkpoint]]
                    if kind == "whole":
                        cmds.append(self.loader_cmd(files, order, start_at=start_at + delay))
                        continue
                    cmds.append([PYTHON, LOADER_PY, "slice", *files, "--rank", str(rank), "--world",
                                 str(MIXED_WORLD), "--order", order, "--seed", str(self.args.seed),
                                 "--start-at", f"{start_at + delay:.6f}"]
                                + (["--deadline", str(self.args.deadline)] if self.args.deadline else []))
                outs = []
                for reader, (parsed, err, returncode) in zip(readers, self.run_loaders(cmds)):
                    if parsed is None:
                        raise RuntimeError(f"{reader[0]} reader of {reader[1]}/ exited with {returncode}: "
                                           f"{err.strip()[-300:]}")
                    outs.append(parsed)
                for _ in range(300):  # the prefetches still in flight count too
                    stats = self.tensorfs_stats(mnt) or {}
                    if not stats.get("fetches_in_flight"):
                        break
                    time.sleep(0.05)
                result.peak_rss = peak_rss(proc.pid)
            finally:
                self.procs.unmount(mnt, proc)
            sent_ranges = self.take_stats(result).get("ranges", [])
            per = {}
            for checkpoint in ("whole", "slice"):
                mine = [(r, o) for r, o in zip(readers, outs) if r[1] == checkpoint]
                if not mine:
                    continue
                whole = [o["bytes"] for r, o in mine if r[0] == "whole"]
                needed = max(whole) if whole else sum(o["bytes"] for _, o in mine)
                name = f"{self.mixed_prefix}/{checkpoint}/"
                sent = sum(r[1] for r in sent_ranges if r[2].startswith(name))
                per[checkpoint] = {"needed": needed, "sent": sent}
            result.seconds = max(o["end"] for o in outs) - min(o["start"] for o in outs)
            result.bytes_needed = sum(c["needed"] for c in per.values())
            result.complete = all(o.get("complete") for o in outs)
            result.files = sum(len(self.mixed_shards[r[1]]) for r in readers)
            result.link_seconds = result.bytes_needed / self.total_rate + self.rtt
            result.extra.update(label=label, checkpoints=per, tensorfs_bytes_fetched=stats.get("bytes_fetched"),
                                readers=[list(r) for r in readers],
                                per_reader_seconds=[round(o["end"] - o["start"], 3) for o in outs])
            result.note = ", ".join(f"{c}/ {v['sent'] / MB:.0f} MB sent for {v['needed'] / MB:.0f} MB"
                                    for c, v in per.items())
            if not result.complete:
                result.note = f"partial: stopped after {self.args.deadline:.0f} s; " + result.note

        self.guarded(f"tensorfs W8M {label}", "tensorfs", "W8M", body)

    def run_shared_cold(self, name, workload, label, extra_opts, body_fn):
        """A fresh mount of the benchmark's checkpoint with `extra_opts`, body_fn(result, mnt) run
        on it; the stats taken once the mount's fetches in flight ended (prefetches count too)."""
        files_src = [os.path.join(self.src, s) for s in self.shards]

        def body(result):
            self.drop_caches(files_src)
            self.server.reset()
            mnt, proc, result.extra["mount_seconds"] = self.mount_tensorfs(self.prefix, label, extra_opts)
            try:
                body_fn(result, mnt)
                for _ in range(300):
                    if not (self.tensorfs_stats(mnt) or {}).get("fetches_in_flight"):
                        break
                    time.sleep(0.05)
                self.take_stats(result)
                self.on_link(result)
                result.peak_rss = peak_rss(proc.pid)
            finally:
                self.procs.unmount(mnt, proc)

        return self.guarded(name, "tensorfs", workload, body)

    def run_readers_together(self, result, cmds):
        """Runs loader commands started together; the run is the first start to the last end."""
        outs = []
        for parsed, err, returncode in self.run_loaders(cmds):
            if parsed is None:
                raise RuntimeError(f"a reader exited with {returncode}: {err.strip()[-300:]}")
            outs.append(parsed)
        result.seconds = max(o["end"] for o in outs) - min(o["start"] for o in outs)
        result.bytes_needed = self.checkpoint_bytes  # together they read every tensor whole
        result.complete = all(o.get("complete", True) for o in outs)
        result.files = len(self.shards)

    def run_w12(self):
        """W12: one whole loader, then N = 2, 4, 8 processes of one mount each taking rows r/N."""
        files = lambda mnt: [os.path.join(mnt, s) for s in self.shards]
        self.run_shared_cold("tensorfs W12 one loader", "W12", "w12-one", "",
                             lambda r, mnt: self.load_one(r, files(mnt)))
        for n in (2, 4, 8):
            def body(result, mnt, n=n):
                start_at = time.monotonic() + 1.5  # after every process has imported numpy
                self.run_readers_together(result, [
                    [PYTHON, LOADER_PY, "slice", *files(mnt), "--rank", str(r), "--world", str(n),
                     "--start-at", f"{start_at:.6f}"] for r in range(n)])
                result.extra["processes"] = n
            self.run_shared_cold(f"tensorfs W12 {n} processes, rows r/{n}", "W12", f"w12-{n}", "", body)

    def run_w13(self):
        """W13: a threaded loader (8, 32, 64 threads, shuffled) at the benchmark's cache and at a cache
        a third of the checkpoint, each cache beside one whole loader at it."""
        files = lambda mnt: [os.path.join(mnt, s) for s in self.shards]
        third = max(1, self.checkpoint_bytes // 3 // MiB)
        for cache, opts in (("cache", ""), ("third", f"cache_size={third}M")):
            what = "the cache" if cache == "cache" else f"a third-size cache ({third} MiB)"
            r = self.run_shared_cold(f"tensorfs W13 one loader, {what}", "W13", f"w13-{cache}-one", opts,
                                     lambda r, mnt: self.load_one(r, files(mnt)))
            r.extra.update(cache=cache, threads=0, cache_mib=third if cache == "third" else self.args.cache_mib)
            for n in (8, 32, 64):
                def body(result, mnt, n=n):
                    self.run_readers_together(result, [[PYTHON, LOADER_PY, "threads", *files(mnt), "--threads",
                                                         str(n), "--order", "random", "--seed",
                                                         str(self.args.seed)]])
                r = self.run_shared_cold(f"tensorfs W13 {n} threads, {what}", "W13", f"w13-{cache}-{n}", opts, body)
                r.extra.update(cache=cache, threads=n,
                               cache_mib=third if cache == "third" else self.args.cache_mib)

    def run_w10(self):
        """W10: @stacked/ of a fresh mount, its files loaded in order as W1 loads the shards."""
        def body(result, mnt):
            view = os.path.join(mnt, "@stacked")
            files = sorted(n for n in os.listdir(view) if n.endswith(".safetensors"))
            self.load_one(result, [os.path.join(view, n) for n in files])
            result.note = (result.note + "; " if result.note else "") + f"{len(files)} stacked files"

        self.run_tensorfs_cold("tensorfs W10 @stacked/ in order", "W10", "w10", body)

    def headers_run(self, result, mnt):
        out, err = run_json([PYTHON, LOADER_PY, "headers", mnt], self.hard_timeout() or 600)
        if out is None:
            raise RuntimeError(err)
        result.seconds = out["end"] - out["start"]
        result.bytes_needed = out["bytes"]
        result.files = out["files"]
        result.extra["ls_seconds"] = out["listed"] - out["start"]
        result.note = (f"{out['files']} shards; ls -l {out['listed'] - out['start']:.2f} s; "
                       f"mounting took {result.extra['mount_seconds']:.2f} s more")

    def run_w5(self, system):
        files_src = [os.path.join(self.w5_src, s) for s in self.w5_shards]

        def body(result):
            self.drop_caches(files_src)
            self.server.reset()
            if system == "tensorfs":
                mnt, proc, result.extra["mount_seconds"] = self.mount_tensorfs(self.w5_prefix, "w5")
            else:
                mnt, proc, result.extra["mount_seconds"], _ = self.mount_rclone(self.w5_prefix, "w5",
                                                                                self.rclone_best)
            try:
                self.headers_run(result, mnt)
                self.take_stats(result)
                result.peak_rss = peak_rss(proc.pid)
            finally:
                self.procs.unmount(mnt, proc)

        label = "tensorfs" if system == "tensorfs" else f"rclone ({self.rclone_best})"
        self.guarded(f"{label} W5 ls + headers", system if system == "tensorfs" else f"rclone-{self.rclone_best}",
                     "W5", body)

    def tensorfs_stats(self, mnt):
        """`tensorfs stats --json MOUNTPOINT`: the mount's own counters (fetches,
        bytes_fetched, cache ...); None when it cannot say."""
        proc = subprocess.run([self.args.tensorfs, "stats", "--json", mnt], capture_output=True, text=True,
                              timeout=30)
        if proc.returncode != 0:
            return None
        try:
            return json.loads(proc.stdout)
        except ValueError:
            return None

    def run_layers(self, workload):
        """W6/W7: AirLLM's forward pass over a splitted_model view of a fresh mount."""
        view = LAYER_WORKLOADS[workload]
        names = [n for n, _, _ in self.layers]
        source = [b for _, b, _ in self.layers]

        def body(result, mnt):
            files = [os.path.join(mnt, view, n) for n in names]
            cmd = [PYTHON, LOADER_PY, "layers", *files, "--source-bytes", ",".join(map(str, source))]
            if self.args.deadline:
                cmd += ["--deadline", str(self.args.deadline)]
            out, err = run_json(cmd, self.hard_timeout())
            if out is None:
                raise RuntimeError(err)
            result.seconds = out["end"] - out["start"]
            result.bytes_needed = out["source_bytes"]
            result.complete = bool(out.get("complete", False))
            result.files = out.get("files", 0)
            output = out["bytes"]
            first = out.get("first_layer_end")
            result.extra.update(output_bytes=output, tensors=out.get("tensors"), layer_files=len(names),
                                first_layer_seconds=None if first is None else first - out["start"],
                                first_layer_source_bytes=source[0] if source else 0,
                                layers=out.get("layers"))
            if err:
                result.note = err
            stats = self.tensorfs_stats(mnt)
            if stats is not None:
                result.extra["tensorfs_stats"] = stats
            parts = [f"{result.files}/{len(names)} layer files" if not result.complete
                     else f"{len(names)} layer files"]
            if first is not None:
                parts.append(f"first layer {first - out['start']:.2f} s")
            parts.append(f"out {output / MB:.0f} MB = {output / max(result.bytes_needed, 1):.2f}x source")
            if not result.complete:
                parts.insert(0, f"partial: stopped after {result.seconds:.0f} s")
            result.note = "; ".join(parts + ([result.note] if result.note else []))

        self.run_tensorfs_cold(f"{self.tag}{workload} {view}/", workload, workload.lower(), body)

    def run_gguf(self, workload):
        """W11/W11K: llama.cpp's load of one @gguf/ file of a fresh mount of the -gguf checkpoint."""
        kind = GGUF_WORKLOADS[workload]
        prefix, shards, source_bytes = self.gguf_checkpoints[workload]
        files_src = [os.path.join(self.args.data_dir, BUCKET, prefix, s) for s in shards]

        def body(result):
            self.drop_caches(files_src)
            self.server.reset()
            mnt, proc, result.extra["mount_seconds"] = self.mount_tensorfs(prefix, workload.lower())
            try:
                path = os.path.join(mnt, "@gguf", f"{prefix}-{kind}.gguf")
                listed = time.monotonic()
                size = os.path.getsize(path)  # lists the checkpoint: headers, config, tokenizer converted
                result.extra["ls_seconds"] = time.monotonic() - listed
                cmd = [PYTHON, LOADER_PY, "gguf", path, "--source-bytes", str(source_bytes)]
                out, err = run_json(cmd, self.hard_timeout())
                if out is None:
                    raise RuntimeError(err)
                result.seconds = out["end"] - out["start"]
                result.bytes_needed = out["source_bytes"]
                result.complete = True
                result.files = 1
                result.extra.update(file_bytes=size, populate_seconds=out["populated"] - out["start"])
                stats = self.tensorfs_stats(mnt)
                if stats is not None:
                    result.extra["tensorfs_stats"] = stats
                result.note = (f"{kind} file {size / MB:.0f} MB = {size / max(result.bytes_needed, 1):.2f}x source; "
                               f"@gguf/ listed in {result.extra['ls_seconds']:.2f} s")
                self.take_stats(result)
                self.on_link(result)
                result.peak_rss = peak_rss(proc.pid)
            finally:
                self.procs.unmount(mnt, proc)

        self.guarded(f"tensorfs {workload} @gguf/ {kind} mmap", "tensorfs", workload, body)

    def run_quant_micro(self):
        """micro_bench's quantization and cast cases: source bytes per second on one core."""
        a = self.args
        cmd = [a.micro_bench, "--benchmark_format=json", "--benchmark_filter=^BM_(Quantize|Cast)",
               f"--benchmark_min_time={0.1 if a.quick else 0.5:g}"]
        log("micro_bench: " + " ".join(cmd[1:]))
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            report = json.loads(proc.stdout)
        except (OSError, ValueError, subprocess.SubprocessError) as e:
            self.quant_error = f"micro_bench did not run: {e}"
            return
        rows = {b["name"]: b for b in report.get("benchmarks", []) if b.get("run_type", "iteration") == "iteration"}
        self.quant = {}
        for name in QUANT_CASES + sorted(n for n in rows if n not in QUANT_CASES):
            b = rows.get(name)
            if b is None or b.get("error_occurred") or not b.get("bytes_per_second"):
                self.quant[name] = None if b is None else {"error": b.get("error_message", "no bytes_per_second")}
                continue
            self.quant[name] = {"bytes_per_second": b["bytes_per_second"], "cpu_time": b.get("cpu_time"),
                                "real_time": b.get("real_time"), "time_unit": b.get("time_unit"),
                                "iterations": b.get("iterations")}
        if proc.returncode != 0:
            self.quant_error = f"micro_bench exited with {proc.returncode}: {proc.stderr.strip()[-300:]}"

    # ------------------------------------------------------------------ peers

    def run_memfs(self, want_w4):
        files_src = [os.path.join(self.src, s) for s in self.shards]
        mnt = self.mountpoint("memfs")
        state = {}

        def w1(result):
            self.drop_caches()
            proc, result.extra["mount_seconds"] = self.mount(
                "memfs_ceiling", [self.args.memfs, "-f", mnt, *files_src], mnt,
                os.path.join(self.work, "memfs.log"))
            state["proc"] = proc
            self.load_one(result, [os.path.join(mnt, s) for s in self.shards])
            result.peak_rss = peak_rss(proc.pid)
            result.note = "served from RAM"

        def w4(result):
            proc = state.get("proc")
            if proc is None or proc.poll() is not None:
                raise RuntimeError("no memfs mount to reuse")
            self.load_warm(result, [os.path.join(mnt, s) for s in self.shards])
            result.peak_rss = peak_rss(proc.pid)
            result.note = f"the W4 ceiling; best of {self.args.warm_passes} passes"

        try:
            self.guarded("memfs W1 (in-memory FUSE)", "memfs", "W1", w1)
            if want_w4:
                self.guarded("memfs W4 warm = ceiling", "memfs", "W4", w4)
        finally:
            if state.get("proc") is not None:
                self.procs.unmount(mnt, state["proc"])

    def run_naive(self):
        def body(result):
            self.drop_caches([os.path.join(self.src, s) for s in self.shards])
            self.server.reset()
            cmd = [PYTHON, CLIENT_PY, "naive", "--endpoint", self.server.endpoint, "--bucket", BUCKET,
                   "--prefix", self.prefix + "/"]
            if self.args.deadline:
                cmd += ["--deadline", str(self.args.deadline)]
            out, err = run_json(cmd, self.hard_timeout())
            if out is None:
                raise RuntimeError(err)
            self.fill_load(result, out, err)
            result.extra["tensors"] = out["tensors"]
            self.take_stats(result)
            self.on_link(result)
            result.note = "one range GET per tensor" + (f"; {result.note}" if result.note else "")

        self.guarded("naive GET per tensor", "naive", "W1", body)

    def run_staging(self):
        dest = os.path.join(self.work, "staged")

        def body(result):
            self.drop_caches([os.path.join(self.src, s) for s in self.shards])
            self.server.reset()
            cmd = [PYTHON, CLIENT_PY, "stage", "--endpoint", self.server.endpoint, "--bucket", BUCKET,
                   "--prefix", self.prefix + "/", "--dest", dest, "--streams", str(self.args.stage_streams),
                   "--range-mib", str(self.args.stage_range_mib)]
            if self.args.deadline:
                cmd += ["--deadline", str(self.args.deadline)]
            out, err = run_json(cmd, self.hard_timeout())
            if out is None:
                raise RuntimeError(err)
            download = out["end"] - out["start"]
            self.take_stats(result)
            result.extra["download_seconds"] = download
            if not out["complete"]:
                result.seconds = download
                result.bytes_needed = out["bytes"]
                result.complete = False
                result.note = f"partial: download stopped after {download:.0f} s"
            else:
                load = Result(name="", system="", workload="")
                self.load_one(load, [os.path.join(dest, s) for s in self.shards])
                if load.error:
                    raise RuntimeError(load.error)
                result.seconds = download + load.seconds
                result.bytes_needed = load.bytes_needed
                result.complete = load.complete
                result.files = load.files
                result.extra["load_seconds"] = load.seconds
                result.note = (f"download {download:.1f} s ({self.args.stage_streams} x "
                               f"{self.args.stage_range_mib:g} MiB ranges) + load {load.seconds:.1f} s")
            self.on_link(result)

        try:
            self.guarded("staging to disk + load", "staging", "W1", body)
        finally:
            shutil.rmtree(dest, ignore_errors=True)

    def run_rclone(self):
        files_src = [os.path.join(self.src, s) for s in self.shards]
        best = None
        for config in self.args.rclone_configs:
            def body(result, config=config):
                self.drop_caches(files_src)
                self.server.reset()
                mnt, proc, result.extra["mount_seconds"], cache_dir = self.mount_rclone(self.prefix, "w1-" + config,
                                                                                      config)
                try:
                    self.load_one(result, [os.path.join(mnt, s) for s in self.shards])
                    self.take_stats(result)
                    self.on_link(result)
                    result.peak_rss = peak_rss(proc.pid)
                    result.extra["flags"] = " ".join(RCLONE_CONFIGS[config])
                finally:
                    self.procs.unmount(mnt, proc)
                    shutil.rmtree(cache_dir, ignore_errors=True)

            r = self.guarded(f"rclone mount ({config}) W1", f"rclone-{config}", "W1", body)
            if r.mbps is not None and (best is None or r.mbps > best.mbps):
                best = r
        self.rclone_best = None
        if best is not None:
            self.rclone_best = best.system.removeprefix("rclone-")
            best.extra["best"] = True
            if len(self.args.rclone_configs) > 1:
                best.note = (best.note + "; " if best.note else "") + "best rclone setting"

    # ------------------------------------------------------------------ driver

    def run(self):
        a = self.args
        self.detect_tensorfs()
        if a.micro_bench:  # first, while no server or mount competes for the CPU
            self.run_quant_micro()
        self.src, self.shards, self.model = self.generate(
            f"llama-{a.dtype}-{a.size_mib}mib-{a.shards}shards-{a.layers}l-v{a.vocab}",
            ["--layers", str(a.layers), "--vocab", str(a.vocab), "--size-mib", str(a.size_mib),
             "--shards", str(a.shards)])
        self.prefix = os.path.basename(self.src)
        if "W5" in a.workloads:
            self.w5_src, self.w5_shards, self.w5_model = self.generate(
                f"llama-{a.dtype}-{a.w5_size_mib}mib-{a.w5_shards}shards-{a.w5_layers}l-v4096",
                ["--layers", str(a.w5_layers), "--vocab", "4096", "--size-mib", str(a.w5_size_mib),
                 "--shards", str(a.w5_shards)])
            self.w5_prefix = os.path.basename(self.w5_src)
        self.checkpoint_bytes = sum(os.path.getsize(os.path.join(self.src, s)) for s in self.shards)
        self.shapes = {"main": (self.src, self.shards, self.prefix, self.checkpoint_bytes)}
        if "W8" in a.workloads and "small-tensors" in a.w8_shapes:
            shape = SMALL_TENSORS["quick" if a.quick else "full"]
            src, shards, model = self.generate(
                f"llama-{a.dtype}-h{shape['hidden']}-i{shape['intermediate']}-{shape['layers']}l-"
                f"{shape['shards']}shards-v{shape['vocab']}",
                [arg for key, value in shape.items() for arg in (f"--{key}", str(value))])
            size = sum(os.path.getsize(os.path.join(src, s)) for s in shards)
            self.shapes["small-tensors"] = (src, shards, os.path.basename(src), size)
            self.small_tensors_model = model
            log(f"W8 small-tensors checkpoint gs://{BUCKET}/{os.path.basename(src)}: {len(shards)} shards, "
                f"{size / MiB:.0f} MiB ({model}; {tensor_sizes(src, shards)})")
        self.mixed_prefix = "mixed-{dtype}-{layers}l-h{hidden}-i{intermediate}-v{vocab}-{shards}shards".format(
            dtype=a.dtype, **MIXED_SHAPE)
        if "W8" in a.workloads and "qwen2" in a.w8_shapes:
            args = [arg for key, value in MIXED_SHAPE.items() for arg in (f"--{key}", str(value))]
            src, shards, model = self.generate(f"{self.mixed_prefix}/slice", args, arch="qwen2")
            size = sum(os.path.getsize(os.path.join(src, s)) for s in shards)
            self.shapes["qwen2"] = (src, shards, f"{self.mixed_prefix}/slice", size)
            log(f"W8 qwen2 checkpoint gs://{BUCKET}/{self.mixed_prefix}/slice: {len(shards)} shards, "
                f"{size / MiB:.0f} MiB ({model}; {tensor_sizes(src, shards)})")
        if "W8M" in a.workloads:
            # One prefix holding both checkpoints: one mount serves them.
            args = [arg for key, value in MIXED_SHAPE.items() for arg in (f"--{key}", str(value))]
            self.mixed_shards = {}
            for checkpoint, arch in (("whole", "llama"), ("slice", "qwen2")):
                src, shards, model = self.generate(f"{self.mixed_prefix}/{checkpoint}", args, arch=arch)
                self.mixed_shards[checkpoint] = shards
                size = sum(os.path.getsize(os.path.join(src, s)) for s in shards)
                log(f"W8M checkpoint gs://{BUCKET}/{self.mixed_prefix}/{checkpoint}: {len(shards)} shards, "
                    f"{size / MiB:.0f} MiB ({model})")
            self.mixed_src = os.path.join(a.data_dir, BUCKET, self.mixed_prefix)
        self.layers = layer_plan(self.src, self.shards)
        self.tensor_bytes = sum(b for _, b, _ in self.layers)
        self.gguf_checkpoints = {}  # workload -> (prefix, shards, source tensor bytes)
        if "W11" in a.workloads:
            self.gguf_checkpoints["W11"] = (self.gguf_checkpoint(self.src, self.shards), self.shards,
                                            self.tensor_bytes)
        if "W11K" in a.workloads:
            shape = dict(GGUF_K_SHAPE, layers=3 if a.quick else 18)
            src, shards, model = self.generate(
                "llama-{dtype}-h{hidden}-i{intermediate}-{layers}l-{shards}shards-v{vocab}".format(dtype=a.dtype, **shape),
                [arg for key, value in shape.items() for arg in (f"--{key}", str(value))])
            tensor_bytes = sum(b for _, b, _ in layer_plan(src, shards))
            self.gguf_checkpoints["W11K"] = (self.gguf_checkpoint(src, shards), shards, tensor_bytes)
            log(f"W11K checkpoint gs://{BUCKET}/{os.path.basename(src)}-gguf: {len(shards)} shards, "
                f"{tensor_bytes / MiB:.0f} MiB of tensors ({model})")
        log(f"checkpoint gs://{BUCKET}/{self.prefix}: {len(self.shards)} shards, "
            f"{self.checkpoint_bytes / MiB:.0f} MiB ({self.model})")
        log("starting the GCS test server (first start hashes every object)")
        self.server = Server(a.data_dir, self.work, a.latency_ms, self.conn_rate, self.total_rate)
        log(f"server {self.server.endpoint}: latency {a.latency_ms:g} ms, {a.conn_mbit:g} Mbit/s per connection, "
            f"{a.link_mbit:g} Mbit/s in total")

        w = set(a.workloads)
        if "W1" in w or "W4" in w:
            self.run_tensorfs_w1_w4("W1" in w, "W4" in w)
        if "W2" in w:
            self.run_w2()
        if "W3" in w:
            self.run_w3()
        if "W5" in w:
            self.run_w5("tensorfs")
        for workload in LAYER_WORKLOADS:
            if workload in w:
                self.run_layers(workload)
        if "W8" in w:
            for shape in a.w8_shapes:
                # --quick: the small-tensors checkpoint in storage order only.
                orders = ("storage",) if a.quick and shape == "small-tensors" else ("storage", "random")
                for world in a.hosts:
                    for order in orders:
                        for mode in a.w8_modes:
                            self.run_sharded("W8", world, order, shape, mode)
        if "W8M" in w:
            for label, readers in MIXED_RUNS:
                self.run_mixed(label, readers)
        if "W12" in w:
            self.run_w12()
        if "W13" in w:
            self.run_w13()
        if "W9" in w:
            for world in a.hosts:
                self.run_sharded("W9", world, "storage")
        if "W10" in w:
            self.run_w10()
        for workload in GGUF_WORKLOADS:
            if workload in w:
                self.run_gguf(workload)
        if "s3" in a.sources:
            log("the same over s3:// (the server's S3 dialect, signed requests): " +
                ", ".join(x for x in S3_WORKLOADS if x in w))
            os.environ.update(AWS_ACCESS_KEY_ID=S3_KEY_ID, AWS_SECRET_ACCESS_KEY=S3_SECRET,
                              AWS_EC2_METADATA_DISABLED="true")
            self.source = "s3"
            try:
                if "W1" in w:
                    self.run_tensorfs_w1_w4(True, False)
                if "W2" in w:
                    self.run_w2()
                if "W6" in w:
                    self.run_layers("W6")
            finally:
                self.source = "gs"
        if "memfs" in a.peers:
            self.run_memfs("W4" in w)
        if "naive" in a.peers:
            self.run_naive()
        if "staging" in a.peers:
            self.run_staging()
        if "rclone" in a.peers:
            if self.rclone is None:
                self.notes.append("rclone is not installed (packaging/install-bench-deps.sh installs it): "
                                  "no rclone rows")
            else:
                self.run_rclone()
                if "W5" in w and self.rclone_best:
                    self.run_w5("rclone")
        link = Result(name="link limit", system="link", workload="W1", bytes_needed=self.checkpoint_bytes,
                      files=len(self.shards), note="bytes / link rate + one round trip")
        link.seconds = self.checkpoint_bytes / self.total_rate + self.rtt
        link.link_seconds = link.seconds
        self.results.append(link)

    def cleanup(self):
        self.procs.cleanup()
        if self.server is not None:
            self.server.stop()
        if not self.args.keep_work:
            shutil.rmtree(self.work, ignore_errors=True)


# --------------------------------------------------------------------------- report

def find(results, system, workload):
    for r in results:
        if r.system == system and r.workload == workload:
            return r
    return None


def fmt(value, spec, missing="-"):
    return missing if value is None else format(value, spec)


def table(results):
    header = ["run", "seconds", "1st layer s", "MB/s", "% link", "requests", "fetched/needed", "peak RSS MiB",
              "note"]
    rows = []
    for r in results:
        if r.error:
            rows.append([r.name, "-", "-", "-", "-", "-", "-", "-", "FAILED: " + r.error[:140]])
            continue
        rows.append([r.name, fmt(r.seconds, ".2f"), fmt(r.extra.get("first_layer_seconds"), ".2f"),
                     fmt(r.mbps, ".1f"),
                     fmt(r.pct_link, ".0f") if r.system != "link" else "100",
                     fmt(r.requests, "d"), fmt(r.fetched_ratio, ".3f"),
                     fmt(None if r.peak_rss is None else r.peak_rss / MiB, ".0f"), r.note])
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    widths[-1] = 0
    lines = ["  ".join(str(x).ljust(w) if i == 0 or i == len(header) - 1 else str(x).rjust(w)
                       for i, (x, w) in enumerate(zip(row, widths))).rstrip()
             for row in [header] + rows]
    lines.insert(1, "-" * max(len(l) for l in lines))
    return "\n".join(lines)


def hosts_section(bench):
    """Per-host lines of the sharded runs (W8, W9)."""
    lines = []
    for r in bench.results:
        if r.workload not in ("W8", "W9") or r.error or not r.extra.get("hosts"):
            continue
        lines.append(f"{r.name}: server sent {r.bytes_fetched / MiB:.1f} MiB = "
                     f"{r.extra['sent_over_checkpoint']:.2f}x the checkpoint"
                     + ("" if r.complete else " (partial)"))
        lines.append("  host  needed MiB  kernel read MiB  fetched MiB  fetched/needed  fetched/read  seconds  "
                     "bound s  % link share  RSS MiB")
        for h in r.extra["hosts"]:
            fetched = h["fetched"]
            read = h.get("kernel_read")
            lines.append(f"  {h['rank']:>4}  {h['needed'] / MiB:>10.1f}  "
                         f"{'-' if read is None else format(read / MiB, '.1f'):>15}  "
                         f"{'-' if fetched is None else format(fetched / MiB, '.1f'):>11}  "
                         f"{'-' if fetched is None else format(fetched / max(h['needed'], 1), '.3f'):>14}  "
                         f"{'-' if fetched is None or not read else format(fetched / read, '.3f'):>12}  "
                         f"{h['seconds']:>7.2f}  {1.3 * h['limit_seconds']:>7.2f}  {h['pct_link']:>12.0f}  "
                         f"{'-' if h['peak_rss'] is None else format(h['peak_rss'] / MiB, '.0f'):>7}")
    return lines


def mixed_section(bench):
    """W8M's runs: needed vs fetched, per run and per checkpoint."""
    runs = [r for r in bench.results if r.workload == "W8M" and not r.error]
    if not runs:
        return []
    lines = [f"W8M: readers of two kinds on one mount (whole/ llama-shaped, slice/ qwen2-shaped; slices of "
             f"{MIXED_WORLD}); fetched = tensorfs stats bytes_fetched, sent = the server's bytes per checkpoint",
             f"  {'run':<56}  {'needed MB':>9}  {'fetched MB':>10}  {'fetched/needed':>14}  "
             f"{'whole/ sent/needed MB':>21}  {'slice/ sent/needed MB':>21}  {'s':>6}"]
    for r in runs:
        fetched = r.extra.get("tensorfs_bytes_fetched")
        cells = []
        for c in ("whole", "slice"):
            v = r.extra["checkpoints"].get(c)
            cells.append("-" if v is None else f"{v['sent'] / MB:.0f}/{v['needed'] / MB:.0f}")
        lines.append(f"  {r.extra['label']:<56}  {r.bytes_needed / MB:>9.0f}  "
                     f"{'-' if fetched is None else format(fetched / MB, '.0f'):>10}  "
                     f"{'-' if fetched is None else format(fetched / max(r.bytes_needed, 1), '.2f'):>14}  "
                     f"{cells[0]:>21}  {cells[1]:>21}  {r.seconds:>6.2f}"
                     + ("" if r.complete else "  (partial)"))
    return lines


def quant_section(bench):
    """Lines on micro_bench's quantization cases next to the link rate."""
    if bench.quant is None:
        return [f"quantization throughput per core: not measured ({bench.quant_error or 'no --micro-bench'})"]
    link = bench.total_rate
    lines = [f"quantization throughput per core (micro_bench, source bytes/s on one core; link "
             f"{bench.args.link_mbit:g} Mbit/s = {link / MB:.1f} MB/s):"]
    for name, row in bench.quant.items():
        if row is None:
            lines.append(f"  {name:<24} missing")
        elif "error" in row:
            lines.append(f"  {name:<24} FAILED: {row['error']}")
        else:
            bps = row["bytes_per_second"]
            if GGUF_QUANT_RE.match(name):  # float32 input: a bf16 source's bytes at half the rate
                lines.append(f"  {name:<24} {bps / MB:9.1f} MB/s of float32 = {bps / 2 / MB:.1f} MB/s of bf16 source  "
                             f"{bps / 2 / link:6.2f}x link on one core, {bps / 2 * CPUS / link:.2f}x on {CPUS}")
            else:
                lines.append(f"  {name:<24} {bps / MB:9.1f} MB/s  {bps / link:6.2f}x link")
    if bench.quant_error:
        lines.append(f"  ({bench.quant_error})")
    return lines


def evaluate(bench):
    """[(target, held: True/False/None, figures)]; None: cannot be judged."""
    a = bench.args
    res = bench.results
    out = []
    w1 = find(res, "tensorfs", "W1")
    w2 = find(res, "tensorfs", "W2")
    w3 = find(res, "tensorfs", "W3")
    w4 = find(res, "tensorfs", "W4")
    staging = find(res, "staging", "W1")
    ceiling = find(res, "memfs", "W4")
    rclone = next((r for r in res if r.system.startswith("rclone") and r.workload == "W1" and r.extra.get("best")),
                  None)

    def ok(r):
        return r is not None and r.error is None and r.mbps is not None

    def partial(r):
        return "" if r.complete else " (partial run)"

    if ok(w1):
        out.append(("W1 >= 90% of the link limit", w1.pct_link >= 90,
                    f"{w1.mbps:.1f} MB/s = {w1.pct_link:.0f}% of {bench.total_rate / MB:.1f} MB/s{partial(w1)}"))
    if ok(w1) and ok(rclone):
        out.append(("W1 >= 5x rclone mount", w1.mbps >= 5 * rclone.mbps,
                    f"{w1.mbps:.1f} vs {rclone.mbps:.1f} MB/s ({rclone.name}): {w1.mbps / rclone.mbps:.2f}x"))
    elif ok(w1):
        out.append(("W1 >= 5x rclone mount", None, "no rclone result"))
    if ok(w1) and ok(staging):
        out.append(("W1 faster than staging", w1.mbps > staging.mbps,
                    f"{w1.mbps:.1f} vs {staging.mbps:.1f} MB/s (staging {staging.seconds:.1f} s in all)"))
    if ok(w1) and ok(w2):
        out.append(("W2 within 1.25x of W1", w1.mbps <= 1.25 * w2.mbps,
                    f"W2 {w2.mbps:.1f} MB/s vs W1 {w1.mbps:.1f} MB/s: {w1.mbps / w2.mbps:.2f}x slower"))
    # s3:// (--sources gs,s3): the same targets for its W1, W2 and W6, beside gs://.
    s3_w1, s3_w2 = find(res, "tensorfs-s3", "W1"), find(res, "tensorfs-s3", "W2")
    if ok(s3_w1):
        out.append(("s3 W1 >= 90% of the link limit", s3_w1.pct_link >= 90,
                    f"{s3_w1.mbps:.1f} MB/s = {s3_w1.pct_link:.0f}% of {bench.total_rate / MB:.1f} MB/s"
                    + (f"; gs:// W1 {w1.mbps:.1f} MB/s" if ok(w1) else "") + partial(s3_w1)))
    if ok(s3_w1) and ok(s3_w2):
        out.append(("s3 W2 within 1.25x of s3 W1", s3_w1.mbps <= 1.25 * s3_w2.mbps,
                    f"W2 {s3_w2.mbps:.1f} MB/s vs W1 {s3_w1.mbps:.1f} MB/s: {s3_w1.mbps / s3_w2.mbps:.2f}x slower"))
    chunk = bench.chunk_size
    def label(r):
        return ("s3 " if r.system == "tensorfs-s3" else "") + r.workload

    for r in (w1, w2, w3, s3_w1, s3_w2):
        if not ok(r) or r.requests is None:
            continue
        bound = math.ceil(r.bytes_needed / chunk) + r.files + 2
        out.append((f"{label(r)} requests <= bytes/chunk + files + 2", r.requests <= bound,
                    f"{r.requests} requests, bound {bound} ({r.bytes_needed / MiB:.0f} MiB / {chunk / MiB:g} MiB "
                    f"+ {r.files} files + 2){partial(r)}"))
    for r in (w1, w2, w3, s3_w1, s3_w2):
        if not ok(r) or r.fetched_ratio is None:
            continue
        out.append((f"{label(r)} bytes fetched <= 1.05 x bytes needed", r.fetched_ratio <= 1.05,
                    f"{r.bytes_fetched / MiB:.1f} MiB fetched for {r.bytes_needed / MiB:.1f} MiB = "
                    f"{r.fetched_ratio:.3f}x{partial(r)}"))
    if ok(w4) and ok(ceiling):
        out.append(("W4 >= 80% of the in-memory FUSE ceiling", w4.mbps >= 0.8 * ceiling.mbps,
                    f"{w4.mbps:.0f} vs {ceiling.mbps:.0f} MB/s = {100 * w4.mbps / ceiling.mbps:.0f}%"))
    for system, workload in [("tensorfs", w) for w in LAYER_WORKLOADS] + [("tensorfs-s3", "W6")]:
        r = find(res, system, workload)
        if not ok(r):
            continue
        if system == "tensorfs-s3":
            workload = "s3 " + workload
        out_note = "" if "W6" in workload else f"; out {r.extra.get('output_bytes', 0) / MB:.0f} MB"
        out.append((f"{workload} >= 90% of the link limit (source bytes)", r.pct_link >= 90,
                    f"{r.mbps:.1f} MB/s over {r.bytes_needed / MB:.0f} MB of source = {r.pct_link:.0f}% of "
                    f"{bench.total_rate / MB:.1f} MB/s{out_note}{partial(r)}"))
        first = r.extra.get("first_layer_seconds")
        if first is not None:
            limit = r.extra.get("first_layer_source_bytes", 0) / bench.total_rate + bench.rtt
            out.append((f"{workload} time to first layer <= 2x its link limit", first <= 2 * limit,
                        f"{first:.2f} s for {r.extra.get('first_layer_source_bytes', 0) / MB:.1f} MB of source "
                        f"(link limit {limit:.2f} s, bound {2 * limit:.2f} s)"))
        if r.fetched_ratio is not None:
            out.append((f"{workload} bytes fetched <= 1.1 x bytes needed", r.fetched_ratio <= 1.1,
                        f"{r.bytes_fetched / MiB:.1f} MiB fetched for {r.bytes_needed / MiB:.1f} MiB of source = "
                        f"{r.fetched_ratio:.3f}x{partial(r)}"))
    for r in res:
        if r.workload != "W8" or r.error or not r.extra.get("hosts"):
            continue
        out.extend(w8_targets(bench, r))
    for r in res:
        if r.workload != "W8M" or r.error:
            continue
        fetched = r.extra.get("tensorfs_bytes_fetched")
        if fetched is None:
            out.append((f"W8M {r.extra['label']}: fetched <= {MIXED_BOUND:g} x needed", None,
                        "no tensorfs stats"))
            continue
        out.append((f"W8M {r.extra['label']}: fetched <= {MIXED_BOUND:g} x needed",
                    fetched <= MIXED_BOUND * r.bytes_needed,
                    f"{fetched / MB:.0f} MB fetched for {r.bytes_needed / MB:.0f} MB = "
                    f"{fetched / max(r.bytes_needed, 1):.2f}x; {r.note}"))
    w10 = find(res, "tensorfs", "W10")
    if ok(w10):
        out.append(("W10 @stacked/ >= 90% of the link limit", w10.pct_link >= 90,
                    f"{w10.mbps:.1f} MB/s = {w10.pct_link:.0f}% of {bench.total_rate / MB:.1f} MB/s{partial(w10)}"))
        if w10.fetched_ratio is not None:
            out.append(("W10 bytes fetched <= 1.05 x bytes needed", w10.fetched_ratio <= 1.05,
                        f"{w10.bytes_fetched / MiB:.1f} MiB fetched for {w10.bytes_needed / MiB:.1f} MiB = "
                        f"{w10.fetched_ratio:.3f}x{partial(w10)}"))
    w11 = find(res, "tensorfs", "W11")
    if ok(w11):
        out.append(("W11 @gguf/ Q8_0 >= 90% of the link limit over source bytes", w11.pct_link >= 90,
                    f"{w11.mbps:.1f} MB/s of source = {w11.pct_link:.0f}% of {bench.total_rate / MB:.1f} MB/s"
                    f"{partial(w11)}"))
        if w11.fetched_ratio is not None:
            out.append(("W11 bytes fetched <= 1.05 x source tensor bytes", w11.fetched_ratio <= 1.05,
                        f"{w11.bytes_fetched / MiB:.1f} MiB fetched for {w11.bytes_needed / MiB:.1f} MiB of source = "
                        f"{w11.fetched_ratio:.3f}x{partial(w11)}"))
    if bench.quant is not None:
        measured = {n: q for n, q in bench.quant.items()
                    if q is not None and "error" not in q and not GGUF_QUANT_RE.match(n)}
        missing = [n for n in QUANT_CASES if bench.quant.get(n) is None or "error" in bench.quant[n]]
        label = "quantization throughput per core >= link rate"
        if measured:
            slowest = min(measured, key=lambda n: measured[n]["bytes_per_second"])
            bps = measured[slowest]["bytes_per_second"]
            out.append((label, bps >= bench.total_rate,
                        f"slowest {slowest} {bps / MB:.1f} MB/s = {bps / bench.total_rate:.2f}x "
                        f"{bench.total_rate / MB:.1f} MB/s" + (f"; missing: {', '.join(missing)}" if missing else "")))
        else:
            out.append((label, None, "no case measured" + (f"; missing: {', '.join(missing)}" if missing else "")))
        # @gguf/: the fastest path each type has, over a bf16 source's bytes, on every core.
        gguf = {n: q["bytes_per_second"] / 2 for n, q in bench.quant.items()
                if q is not None and "error" not in q and GGUF_QUANT_RE.match(n) and not n.endswith("_Baseline")}
        if gguf:
            slowest = min(gguf, key=gguf.get)
            out.append((f"GGUF quantization on {CPUS} cores >= link rate (bf16 source bytes)",
                        gguf[slowest] * CPUS >= bench.total_rate,
                        f"slowest {slowest} {gguf[slowest] / MB:.1f} MB/s per core x {CPUS} = "
                        f"{gguf[slowest] * CPUS / bench.total_rate:.2f}x {bench.total_rate / MB:.1f} MB/s"))
    out.extend(shared_targets(res))
    rss = [r for r in res if r.system == "tensorfs" and r.peak_rss is not None and r.workload != "W13"]
    if rss:
        top = max(rss, key=lambda r: r.peak_rss)
        limit = a.cache_mib * MiB + RSS_SLACK
        out.append(("peak RSS <= cache_size + 128 MiB", top.peak_rss <= limit,
                    f"{top.peak_rss / MiB:.0f} MiB ({top.workload}) vs {limit / MiB:.0f} MiB"))
    return out


def shared_targets(res):
    """W12/W13: readers sharing one mount against one whole loader on the same data and cache."""
    out = []
    ok = lambda r: r is not None and not r.error and r.seconds
    w12 = [r for r in res if r.workload == "W12" and ok(r)]
    one = next((r for r in w12 if "processes" not in r.extra), None)
    for r in (x for x in w12 if "processes" in x.extra and one is not None):
        n = r.extra["processes"]
        out.append((f"W12 {n} processes: requests <= 1.5 x one loader's", r.requests <= 1.5 * one.requests,
                    f"{r.requests} vs {one.requests} = {r.requests / one.requests:.2f}x"))
        out.append((f"W12 {n} processes: bytes fetched <= 1.05 x the checkpoint", r.fetched_ratio <= 1.05,
                    f"{r.fetched_ratio:.3f}x"))
        out.append((f"W12 {n} processes: wall <= 1.2 x one loader's", r.seconds <= 1.2 * one.seconds,
                    f"{r.seconds:.2f} s vs {one.seconds:.2f} s = {r.seconds / one.seconds:.2f}x"))
    w13 = [r for r in res if r.workload == "W13" and ok(r)]
    for cache in ("cache", "third"):
        runs = {r.extra["threads"]: r for r in w13 if r.extra.get("cache") == cache}
        one, eight = runs.get(0), runs.get(8)
        what = "the cache" if cache == "cache" else "a third-size cache"
        for n in (8, 32, 64):
            r = runs.get(n)
            if r is None or one is None:
                continue
            out.append((f"W13 {n} threads, {what}: requests <= 1.5 x one loader's", r.requests <= 1.5 * one.requests,
                        f"{r.requests} vs {one.requests} = {r.requests / one.requests:.2f}x"))
            out.append((f"W13 {n} threads, {what}: bytes fetched <= 1.05 x the checkpoint", r.fetched_ratio <= 1.05,
                        f"{r.fetched_ratio:.3f}x"))
            if eight is not None and n != 8:
                bound = 1.0 if cache == "third" else 1.2
                out.append((f"W13 {n} threads, {what}: wall <= {bound:g} x 8 threads'", r.seconds <= bound * eight.seconds,
                            f"{r.seconds:.2f} s vs {eight.seconds:.2f} s = {r.seconds / eight.seconds:.2f}x"))
            if r.peak_rss is not None:
                limit = r.extra["cache_mib"] * MiB + RSS_SLACK
                out.append((f"W13 {n} threads, {what}: peak RSS <= cache_size + 128 MiB", r.peak_rss <= limit,
                            f"{r.peak_rss / MiB:.0f} MiB vs {limit / MiB:.0f} MiB"))
    return out


def w8_targets(bench, r):
    """W8's targets for one run (a shape, N hosts, an order, learned or -o shard=R/N)."""
    world, order = r.extra["world"], r.extra["order"]
    shape, mode = r.extra.get("shape", "main"), r.extra.get("mode", "learned")
    hosts = r.extra["hosts"]
    checkpoint = r.extra["checkpoint_bytes"]
    tag = f"W8 {shape} {world} hosts {order} {'shard=R/N' if mode == 'shard' else 'learned'}"
    partial = "" if r.complete else " (partial run)"
    out = []
    missing = [h["rank"] for h in hosts if h["fetched"] is None]
    if mode == "shard":
        chunk = bench.chunk_size or 8 * MiB
        allowance = r.extra.get("shards", len(bench.shards)) * chunk
        bound = lambda h: 1.05 * h["needed"] + allowance
        label = f"{tag}: each host fetches <= 1.05 x its needed bytes + one chunk per shard"
    else:
        bound = lambda h: 1.20 * h["needed"]
        label = f"{tag}: each host fetches <= 1.20 x its needed bytes"
    if missing:
        out.append((label, None, f"no tensorfs stats from hosts {missing}"))
    else:
        worst = max(hosts, key=lambda h: h["fetched"] / bound(h))
        whole = [h["rank"] for h in hosts if h["fetched"] >= WHOLE_READER_SHARE * checkpoint]
        figures = (f"worst host {worst['rank']}: {worst['fetched'] / MiB:.1f} MiB fetched for "
                   f"{worst['needed'] / MiB:.1f} MiB needed = {worst['fetched'] / max(worst['needed'], 1):.3f}x "
                   f"(bound {bound(worst) / MiB:.1f} MiB)")
        # What the kernel itself asked for: no FUSE server at the same
        # readaheads serves a host less.
        if all(h.get("kernel_read") for h in hosts):
            kernel = [h["kernel_read"] / max(h["needed"], 1) for h in hosts]
            figures += (f"; its kernel read {worst['kernel_read'] / max(worst['needed'], 1):.3f}x, "
                        f"every host's {min(kernel):.3f}-{max(kernel):.3f}x")
        if mode == "learned" and whole:
            figures += (f"; hosts {', '.join(map(str, whole))} taken for a whole reader (fetched >= "
                        f"{WHOLE_READER_SHARE:g}x the checkpoint)")
        out.append((label, all(h["fetched"] <= bound(h) for h in hosts), figures + partial))
        if mode == "learned":
            out.append((f"{tag}: no host taken for a whole reader", not whole,
                        f"largest fetch {max(h['fetched'] for h in hosts) / MiB:.1f} MiB of a {checkpoint / MiB:.1f} "
                        f"MiB checkpoint" + (f"; taken for whole readers: hosts {', '.join(map(str, whole))}"
                                             if whole else "") + partial))
    if mode == "learned":
        sent = r.extra["sent_over_checkpoint"]
        read = (f"; the kernels read {sum(h['kernel_read'] for h in hosts) / checkpoint:.2f}x"
                if all(h.get("kernel_read") for h in hosts) else "")
        out.append((f"{tag}: bytes the server sent <= 1.20 x the checkpoint", sent <= 1.20,
                    f"{r.bytes_fetched / MiB:.0f} MiB sent = {sent:.2f}x the checkpoint{read}{partial}"))
    slowest = max(hosts, key=lambda h: h["seconds"] / h["limit_seconds"])
    out.append((f"{tag}: each host done within 1.3 x (needed / (link / N) + 2 round trips)",
                all(h["seconds"] <= 1.3 * h["limit_seconds"] for h in hosts),
                f"slowest host {slowest['rank']}: {slowest['seconds']:.2f} s vs bound "
                f"{1.3 * slowest['limit_seconds']:.2f} s{partial}"))
    return out


def chart(bench, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in bench.results if r.mbps is not None and r.workload != "W5"]
    w5 = [r for r in bench.results if r.workload == "W5" and r.seconds is not None and not r.error]
    quant = [(n, q["bytes_per_second"] if q and "error" not in q else None) for n, q in (bench.quant or {}).items()]
    panels = 4 if quant else 3
    fig, axes = plt.subplots(1, panels, figsize=(17 + 4 * (panels - 3), 0.42 * max(len(rows), 6) + 1.8),
                             gridspec_kw={"width_ratios": [3, 2, 1.3, 1.6][:panels]})
    colors = {"tensorfs": "#1f77b4", "memfs": "#2ca02c", "naive": "#7f7f7f", "staging": "#ff7f0e",
              "link": "#d62728"}
    labels = [r.name for r in rows]
    y = list(range(len(rows)))[::-1]

    def color(r):
        return colors.get(r.system, "#9467bd")

    ax = axes[0]
    bars = ax.barh(y, [r.mbps for r in rows], color=[color(r) for r in rows])
    for bar, r in zip(bars, rows):
        if not r.complete:
            bar.set_hatch("//")
        first = r.extra.get("first_layer_seconds")
        text = f" {r.mbps:.0f}" + (f" (1st layer {first:.2f} s)" if first is not None else "")
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, text, va="center", fontsize=8)
    ax.axvline(bench.total_rate / MB, color=colors["link"], linestyle="--", linewidth=1)
    ax.set_yticks(y, labels, fontsize=9)
    ax.set_xscale("log")
    if rows:  # bars start left of the slowest, so that a narrow range still reads
        ax.set_xlim(left=min(r.mbps for r in rows) / 3, right=max(r.mbps for r in rows) * 3)
    ax.set_xlabel("MB/s (log scale; hatched: partial run; W6/W7 over source bytes)")
    ax.set_title(f"load rate, {bench.checkpoint_bytes / MiB:.0f} MiB in {len(bench.shards)} shards")

    ax = axes[1]
    for yi, r in zip(y, rows):
        if r.requests:
            ax.barh(yi, r.requests, color=color(r))
        if r.requests is not None:
            ax.text(max(r.requests, 1), yi, f" {r.requests}", va="center", fontsize=8)
        elif r.system != "link":
            ax.text(1, yi, " no server", va="center", fontsize=8, color="#7f7f7f")
    if any(r.requests for r in rows):
        ax.set_xlim(left=1)
    ax.set_yticks(y, [""] * len(rows))
    ax.set_xscale("log")
    ax.set_xlabel("requests to the server (log scale)")
    ax.set_title("requests per run")

    ax = axes[2]
    if w5:
        ax.bar(range(len(w5)), [r.seconds for r in w5], color=[color(r) for r in w5])
        ax.set_xticks(range(len(w5)), [r.name.replace(" W5 ls + headers", "") for r in w5], fontsize=8)
        for i, r in enumerate(w5):
            ax.text(i, r.seconds, f"{r.seconds:.2f} s\n{r.requests} req", ha="center", va="bottom", fontsize=8)
        ax.set_ylim(top=1.25 * max(r.seconds for r in w5))
        ax.set_ylabel("seconds")
    else:
        ax.text(0.5, 0.5, "not run", ha="center", va="center", transform=ax.transAxes, color="#7f7f7f")
        ax.set_xticks([])
        ax.set_yticks([])
    ax.set_title(f"W5: ls -l + headers, {bench.args.w5_shards} shards")
    if quant:
        ax = axes[3]
        qy = list(range(len(quant)))[::-1]
        link = bench.total_rate / MB
        xs = [bps / MB for _, bps in quant if bps] + [link]
        ax.set_xlim(min(xs) / 3, max(xs) * 3)
        for yi, (name, bps) in zip(qy, quant):
            if bps is None:
                ax.text(min(xs) / 2.5, yi, " missing", va="center", fontsize=8, color="#7f7f7f")
                continue
            ax.barh(yi, bps / MB, color="#1f77b4" if bps >= bench.total_rate else "#d62728")
            ax.text(bps / MB, yi, f" {bps / MB:.0f}", va="center", fontsize=8)
        ax.axvline(link, color=colors["link"], linestyle="--", linewidth=1)
        ax.set_yticks(qy, [n.removeprefix("BM_") for n, _ in quant], fontsize=8)
        ax.set_xscale("log")
        ax.set_xlabel("source MB/s, one core (log; dashed: link)")
        ax.set_title("quantization per core vs link")
    a = bench.args
    fig.suptitle(f"tensorfs vs peers: link {a.link_mbit:g} Mbit/s total, {a.conn_mbit:g} Mbit/s per connection, "
                 f"{a.latency_ms:g} ms latency", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------- main

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--tensorfs", required=True, help="the tensorfs binary")
    p.add_argument("--testdata", required=True, help="the tensorfs-testdata binary")
    p.add_argument("--memfs", help="the memfs_ceiling binary (needed for the memfs peer)")
    p.add_argument("--micro-bench", help="the micro_bench binary: its quantization cases are run and compared "
                                         "with the link rate")
    p.add_argument("--size-mib", type=int, help="checkpoint size (default 2048; 256 with --quick)")
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--layers", type=int, default=16, help="transformer blocks")
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    p.add_argument("--link-mbit", type=float, default=1000, help="total link rate, Mbit/s")
    p.add_argument("--conn-mbit", type=float, help="rate per connection, Mbit/s (default: link / 10)")
    p.add_argument("--latency-ms", type=float, default=30)
    p.add_argument("--workloads", help="comma-separated subset of W1..W13, W8M and W11K (default "
                                       "W1,W2,W3,W4,W5,W6,W7,W10,W11; with --quick W8 too)")
    p.add_argument("--peers", help="comma-separated subset of naive,staging,rclone,memfs, or 'none' (default: all, "
                                   "none when only W6/W7/W8M run: the peers run W1 to W5)")
    p.add_argument("--rclone-configs", default=",".join(RCLONE_CONFIGS),
                   help=f"rclone mount settings to try: {', '.join(RCLONE_CONFIGS)}")
    p.add_argument("--deadline", type=float,
                   help="stop a load after this many seconds and report it as partial, 0 for none "
                        "(default 90; 30 with --quick)")
    p.add_argument("--quick", action="store_true",
                   help="256 MiB checkpoint and 30 s deadline unless given; W8 among the default workloads, with 4 "
                        "and 8 hosts and its small-tensors checkpoint small and in storage order only")
    p.add_argument("--processes", type=int, default=4, help="W3 loader processes")
    p.add_argument("--hosts", help="W8/W9: the numbers of hosts to run, comma-separated (default 4,8,16; "
                                   "4,8 with --quick)")
    p.add_argument("--w8-shapes", default=",".join(W8_DEFAULT_SHAPES),
                   help="W8's checkpoints: main (the benchmark's) and small-tensors (many tensors of 1-8 MiB, "
                        "about 1 GiB; about 140 MiB and in storage order only with --quick), the default; "
                        "qwen2 (W8M's slice/ checkpoint, 208 MB, both orders)")
    p.add_argument("--w8-modes", default=",".join(W8_MODES),
                   help="W8's mounts: learned (no shard option) and shard (each mount given -o shard=R/N)")
    p.add_argument("--warm-passes", type=int, default=3, help="W4 passes (tensorfs and memfs); the fastest counts")
    p.add_argument("--w5-shards", type=int, default=100)
    p.add_argument("--w5-layers", type=int, default=100)
    p.add_argument("--w5-size-mib", type=int, default=100)
    p.add_argument("--chunk-mib", type=float,
                   help="chunk size for the request target, passed as -o chunk_size when tensorfs has it "
                        "(default: tensorfs --help's default, else 8)")
    p.add_argument("--cache-mib", type=int, default=2048,
                   help="passed as -o cache_size when tensorfs --help lists it; the RSS target's cache_size")
    p.add_argument("--tensorfs-opts", default="", help="more -o options for tensorfs, e.g. max_fetches=64")
    p.add_argument("--stage-streams", type=int, default=16)
    p.add_argument("--stage-range-mib", type=float, default=32)
    p.add_argument("--seed", type=int, default=1, help="W2's shuffle")
    p.add_argument("--data-dir", default="/var/tmp/tensorfs-bench-data",
                   help="where checkpoints are generated once and kept (one subdirectory per bucket)")
    p.add_argument("--work-dir", default=None, help="parent of the per-run scratch directory (default $TMPDIR)")
    p.add_argument("--out", default=os.path.join(HERE, "out"), help="where results.json and results.png go")
    p.add_argument("--keep-work", action="store_true", help="keep mount points and logs")
    p.add_argument("--sources", default="gs",
                   help="the schemes tensorfs reads, comma-separated: gs, and s3 to run W1, W2 and W6 over the "
                        "server's S3 dialect too (default gs)")
    a = p.parse_args(argv)
    a.size_mib = a.size_mib or (256 if a.quick else 2048)
    if a.deadline is None:
        a.deadline = 30.0 if a.quick else 90.0
    a.conn_mbit = a.conn_mbit or a.link_mbit / 10
    a.warm_passes = max(1, a.warm_passes)
    if a.workloads is None:
        a.workloads = "W1,W2,W3,W4,W5,W6,W7,W8,W10,W11" if a.quick else "W1,W2,W3,W4,W5,W6,W7,W10,W11"
    a.workloads = [w.strip().upper() for w in a.workloads.split(",") if w.strip()]
    a.hosts = [int(x) for x in str(a.hosts or ("4,8" if a.quick else "4,8,16")).split(",") if x.strip()]
    a.w8_shapes = [x.strip() for x in a.w8_shapes.split(",") if x.strip()]
    a.w8_modes = [x.strip() for x in a.w8_modes.split(",") if x.strip()]
    for x in a.w8_shapes:
        if x not in W8_SHAPES:
            p.error(f"unknown W8 shape {x}")
    for x in a.w8_modes:
        if x not in W8_MODES:
            p.error(f"unknown W8 mode {x}")
    if a.peers is None:
        a.peers = ("none" if set(a.workloads) <= {*LAYER_WORKLOADS, *GGUF_WORKLOADS, "W8M", "W12", "W13"}
                   else "naive,staging,rclone,memfs")
    a.peers = [] if a.peers.strip() == "none" else [x.strip() for x in a.peers.split(",") if x.strip()]
    a.rclone_configs = [x.strip() for x in a.rclone_configs.split(",") if x.strip()]
    for w in a.workloads:
        if w not in ("W1", "W2", "W3", "W4", "W5", "W6", "W7", "W8", "W8M", "W9", "W10", "W11", "W11K", "W12",
                     "W13"):
            p.error(f"unknown workload {w}")
    for x in a.peers:
        if x not in ("naive", "staging", "rclone", "memfs"):
            p.error(f"unknown peer {x}")
    for x in a.rclone_configs:
        if x not in RCLONE_CONFIGS:
            p.error(f"unknown rclone config {x}")
    a.sources = [x.strip() for x in a.sources.split(",") if x.strip()]
    for x in a.sources:
        if x not in ("gs", "s3"):
            p.error(f"unknown source {x} (gs or s3)")
    if "memfs" in a.peers and not a.memfs:
        p.error("the memfs peer needs --memfs PATH")
    for path in (a.tensorfs, a.testdata) + ((a.memfs,) if a.memfs else ()) + (
            (a.micro_bench,) if a.micro_bench else ()):
        if not os.access(path, os.X_OK):
            p.error(f"{path} is not an executable")
    return a


def main(argv):
    args = parse_args(argv)
    os.makedirs(args.data_dir, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    if args.work_dir:
        os.makedirs(args.work_dir, exist_ok=True)
    bench = Bench(args)

    def on_signal(signum, _):
        raise SystemExit(f"bench: stopped by signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    try:
        bench.run()
    finally:
        bench.cleanup()
    elapsed = time.monotonic() - STARTED
    targets = evaluate(bench)

    a = args
    print()
    print(f"tensorfs benchmark: {bench.checkpoint_bytes / MiB:.0f} MiB checkpoint, {len(bench.shards)} shards "
          f"({bench.model})")
    print(f"link: {a.link_mbit:g} Mbit/s total ({bench.total_rate / MB:.1f} MB/s), {a.conn_mbit:g} Mbit/s per "
          f"connection, {a.latency_ms:g} ms latency; deadline {a.deadline:g} s per run; "
          f"chunk {bench.chunk_size / MiB:g} MiB ({bench.chunk_source})")
    print(f"machine: {os.cpu_count()} CPUs, Linux {platform.release()}, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}; page cache dropped before each cold run: "
          f"{'yes' if bench.can_drop else 'no'}")
    print()
    print(table(bench.results))
    print()
    if hosts_section(bench):
        print("\n".join(hosts_section(bench)))
        print()
    if mixed_section(bench):
        print("\n".join(mixed_section(bench)))
        print()
    if a.micro_bench or bench.quant is not None:
        print("\n".join(quant_section(bench)))
        print()
    print("targets:" if targets else "targets: none could be judged (see the failed runs)")
    for label, held, figures in targets:
        verdict = "held" if held else ("not judged" if held is None else "NOT held")
        print(f"  {verdict:<10}  {label}: {figures}")
    for note in bench.notes:
        print(f"note: {note}")

    report = {
        "config": {k: v for k, v in vars(args).items()},
        "checkpoint": {"bucket": BUCKET, "prefix": bench.prefix, "shards": bench.shards,
                       "bytes": bench.checkpoint_bytes, "model": bench.model},
        "link": {"total_bytes_per_s": bench.total_rate, "conn_bytes_per_s": bench.conn_rate,
                 "latency_s": bench.rtt},
        "tensorfs": {"options": bench.tensorfs_opts() if bench.server else None,
                     "cache_size_option": bench.cache_option, "chunk_size": bench.chunk_size,
                     "chunk_size_source": bench.chunk_source},
        "machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "loadavg_end": os.getloadavg(),
                    "page_cache_dropped": bool(bench.can_drop)},
        "layers": [{"file": n, "source_bytes": b, "tensors": t} for n, b, t in (bench.layers or [])],
        "quantization": {"cases": bench.quant, "error": bench.quant_error, "link_bytes_per_s": bench.total_rate},
        "results": [r.to_json() for r in bench.results],
        "targets": [{"target": t, "held": h, "figures": f} for t, h, f in targets],
        "notes": bench.notes,
        "seconds": elapsed,
    }
    json_path = os.path.join(args.out, "results.json")
    with open(json_path, "w") as f:
        json.dump(report, f, indent=2)
    png_path = os.path.join(args.out, "results.png")
    try:
        chart(bench, png_path)
    except ImportError as e:
        print(f"note: no chart ({e}); packaging/install-bench-deps.sh installs python3-matplotlib")
        png_path = None
    print()
    print(f"wrote {json_path}" + (f" and {png_path}" if png_path else "") + f"; {elapsed / 60:.1f} minutes in all")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
