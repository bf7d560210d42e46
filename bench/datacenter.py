#!/usr/bin/env python3
"""The datacenter profile: tensorfs' own data path, with no link emulation.

  datacenter.py --tensorfs BIN --memfs BIN [--lib-dir DIR] [--size 3400M] ...

One run, as root (FUSE mounts, dropping the page cache), prints a table and the
targets and writes results.json:

  - the test server's own ceiling: parallel 8 MiB range GETs straight to it
    (16 client processes, keep-alive), over HTTP and over HTTPS;
  - memfs_ceiling (an in-memory FUSE server, the page cache dropped once it
    holds the files) as the FUSE ceiling, set up as tensorfs is: the readahead,
    max_background and congestion_threshold a tensorfs mount has in force are
    read from /sys after it is up and passed to memfs_ceiling; and the shard
    files in the local page cache as the loader's ceiling;
  - tensorfs over the local directory holding the shards (page-cached; no
    HTTP): the loopback profile, against memfs_ceiling, with the CPU cost of
    copying the bytes out of the page cache (`cat` of the shards) as the
    allowance for the copy from the source;
  - each reader on each: safetensors.torch.load_file(device="cuda") per shard
    (cpu without CUDA; left out without safetensors+torch), the numpy mmap copy
    loader of bench/loader.py (W1), one byte of every 4 KiB page through mmap
    (loader.py pages), `cat` of the shards, and N concurrent readers (dd, each
    a different shard or slice of one);
  - for every mount the readahead, max_background and congestion_threshold in
    force, and per reader the sizes of the FUSE READ requests the kernel sent
    (tensorfs' stats "fuse_read_sizes", memfs_ceiling's --read-sizes);
  - tensorfs cold (fresh mount, page cache dropped, the served files read back
    in so the server sends from memory) over HTTP and over HTTPS (the test
    server's TLS with a throwaway CA made with the openssl CLI, -o ca_file);
  - CPU-seconds per GB moved (user + sys of the FUSE server process, from
    /proc/PID/stat, over the reader's run) for tensorfs and memfs_ceiling, the
    same past the first quarter of the bytes (what each further GB costs, once
    tensorfs' chunk buffers are mapped), and what each GB cost the whole
    machine (/proc/stat), with the bound that puts on the concurrent readers;
  - with --trace, each concurrent reader's range requests from tensorfs' debug
    log.

The checkpoint is synthetic: SIZE bytes of fp32 tensors (16 MiB matrices and
small vectors, as a Llama's) in --shards safetensors files, kept in --work.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import http.client
import json
import os
import re
import shutil
import signal
import ssl
import struct
import subprocess
import sys
import threading
import time
import urllib.parse

BUCKET = "dc-bench"
PREFIX = "model"
GB = 1e9
RANGE = 8 << 20
CLK_TCK = os.sysconf("SC_CLK_TCK")

LOAD_FILE = r"""
import json, sys, time
import torch
from safetensors.torch import load_file
device = sys.argv[1]
if device == "cuda":  # the CUDA context is made before the clock starts
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
start = time.monotonic()
total = 0
for f in sys.argv[2:]:
    tensors = load_file(f, device=device)
    total += sum(t.numel() * t.element_size() for t in tensors.values())
    del tensors
if device == "cuda":
    torch.cuda.synchronize()
print(json.dumps({"bytes": total, "seconds": time.monotonic() - start}))
"""


def log(msg):
    print(f"[datacenter] {msg}", file=sys.stderr, flush=True)


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


# ----------------------------------------------------------------- checkpoint

def write_checkpoint(root: str, size: int, shards: int) -> list[str]:
    """fp32 shards, each about size/shards bytes: 16 MiB matrices and 8 KiB norms."""
    import random
    model_dir = os.path.join(root, BUCKET, PREFIX)
    stamp = os.path.join(root, f".done-{size}-{shards}")
    names = [f"model-{i + 1:05d}-of-{shards:05d}.safetensors" for i in range(shards)]
    paths = [os.path.join(model_dir, n) for n in names]
    stamps = [n for n in os.listdir(root) if n.startswith(".done-")] if os.path.isdir(root) else []
    if stamps == [os.path.basename(stamp)] and all(os.path.exists(p) for p in paths):
        return paths
    shutil.rmtree(os.path.join(root, BUCKET), ignore_errors=True)
    for name in stamps:  # the files they stood for are gone
        os.unlink(os.path.join(root, name))
    os.makedirs(model_dir, exist_ok=True)
    rng = random.Random(1)
    per_shard = size // shards
    matrix = (2048, 2048)
    layer = 0
    for path in paths:
        tensors = []
        used = 0
        while used + 4 * matrix[0] * matrix[1] <= per_shard or not tensors:
            tensors.append((f"model.layers.{layer}.mlp.weight", matrix))
            tensors.append((f"model.layers.{layer}.norm.weight", (matrix[0],)))
            used += 4 * (matrix[0] * matrix[1] + matrix[0])
            layer += 1
        header, offset = {}, 0
        for name, shape in tensors:
            n = 4
            for d in shape:
                n *= d
            header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + n]}
            offset += n
        blob = json.dumps(header, separators=(",", ":")).encode()
        blob += b" " * (-len(blob) % 8)
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(blob)))
            f.write(blob)
            for _, shape in tensors:
                n = 4
                for d in shape:
                    n *= d
                f.write(rng.randbytes(n))
    with open(stamp, "w") as f:
        f.write("ok\n")
    return paths


def make_certs(work: str) -> str | None:
    """A throwaway CA and a server certificate for 127.0.0.1; None without openssl."""
    if shutil.which("openssl") is None:
        return None
    d = os.path.join(work, "tls")
    os.makedirs(d, exist_ok=True)
    ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
    script = (f"cd {d} && openssl req -x509 {ec} -keyout ca.key -out ca.pem -days 2 -subj /CN=dc-bench-ca && "
              f"openssl req {ec} -keyout server.key -out server.csr -subj /CN=127.0.0.1 && "
              "printf 'subjectAltName=IP:127.0.0.1\\nbasicConstraints=CA:FALSE\\n' > server.ext && "
              "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem "
              "-days 2 -extfile server.ext")
    r = subprocess.run(script, shell=True, capture_output=True, text=True)
    if r.returncode != 0:
        log(f"openssl failed, HTTPS left out: {r.stderr.strip()[-300:]}")
        return None
    return d


def given_certs(d: str) -> str:
    """The folder of --certs, once it is known to hold what the server and tensorfs need."""
    missing = [f for f in ("ca.pem", "server.pem", "server.key") if not os.path.isfile(os.path.join(d, f))]
    if missing:
        raise SystemExit(f"--certs {d} lacks {', '.join(missing)}: make them with `bash bench/datacenter.sh package`")
    return os.path.abspath(d)


# ------------------------------------------------------------------ processes

def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


def written_bytes(pid: int) -> int:
    """What the process has written: a FUSE server's replies, all of its threads together."""
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            if line.startswith("wchar:"):
                return int(line.split()[1])
    return 0


class Sampler:
    """Samples a FUSE server's (bytes replied, CPU-seconds) every 20 ms while a reader runs, for
    its CPU per GB once the first quarter of the bytes has gone out: by then tensorfs' chunk
    buffers are mapped (the kernel zeroes each fresh page, a cost paid once per mount, not per
    GB) and what is left is what every further GB costs."""

    def __init__(self, pid: int):
        self.pid, self.samples, self.stop = pid, [], threading.Event()
        self._sample()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _sample(self):
        self.samples.append((written_bytes(self.pid), cpu_seconds(self.pid)))

    def _run(self):
        try:
            while not self.stop.wait(0.02):
                self._sample()
        except OSError:  # the server is gone: the reader failed, finish() is not asked for
            pass

    def finish(self, total: int) -> tuple[float, float | None]:
        """Stops sampling. The CPU-seconds over the whole run, and the CPU-s per GB from the first
        sample past total / 4 to the end (None if too few bytes came after it)."""
        self.stop.set()
        self.thread.join()
        self._sample()
        (w0, c0), c1 = self.samples[0], self.samples[-1][1]
        later = [(w - w0, c) for w, c in self.samples if w - w0 >= total // 4]
        if len(later) < 2 or later[-1][0] - later[0][0] < total // 4:
            return c1 - c0, None
        return c1 - c0, (later[-1][1] - later[0][1]) / ((later[-1][0] - later[0][0]) / GB)


def machine_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


FUSECTL = "/sys/fs/fuse/connections"


def wait_for_port(server: subprocess.Popen, port_file: str) -> int:
    """The port the test server wrote once it listens (30 s at most)."""
    deadline = time.monotonic() + 30
    while not os.path.exists(port_file):
        if server.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.05)
    return int(open(port_file).read())


def mount_device(path: str) -> str | None:
    """MAJOR:MINOR of the mount at `path`, from /proc/self/mountinfo (field 3)."""
    real = os.path.realpath(path)
    device = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == real:
                device = fields[2]  # the last one mounted there
    return device


def read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def ensure_fusectl():
    """The FUSE control file system (max_background, congestion_threshold per connection), mounted
    at /sys/fs/fuse/connections if it is not."""
    with open("/proc/self/mountinfo") as f:
        if any(line.split()[4] == FUSECTL for line in f):
            return
    r = subprocess.run(["mount", "-t", "fusectl", "fusectl", FUSECTL], capture_output=True, text=True)
    if r.returncode != 0:
        log(f"cannot mount fusectl on {FUSECTL} ({r.stderr.strip()}): max_background and congestion_threshold "
            "are not read")


def mount_settings(path: str) -> dict:
    """What the kernel has in force for the FUSE mount at `path`: the readahead of its bdi
    (/sys/class/bdi/MAJOR:MINOR/read_ahead_kb) and its connection's max_background and
    congestion_threshold (/sys/fs/fuse/connections/MINOR/)."""
    device = mount_device(path)
    if device is None:
        return {"device": None, "read_ahead_kb": None, "max_background": None, "congestion_threshold": None}
    minor = device.split(":")[1]
    return {"device": device, "read_ahead_kb": read_int(f"/sys/class/bdi/{device}/read_ahead_kb"),
            "max_background": read_int(f"{FUSECTL}/{minor}/max_background"),
            "congestion_threshold": read_int(f"{FUSECTL}/{minor}/congestion_threshold")}


def is_mounted(path: str) -> bool:
    real = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == real for line in f)


def drop_caches(settle_memory=False):
    subprocess.run(["sync"])
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError as err:
        log(f"cannot drop the page cache ({err}); runs are not cold")
    if settle_memory:
        settle_reported_memory()


def settle_reported_memory(limit_s=15.0):
    """On a VM that hands free memory back to its host (free page reporting), waits until the
    memory just freed has been handed back (its count unchanged for 3 s), so that every pass starts
    in the same state: a page the host took back costs a fault on the host when next touched
    (bench/README.md, "A smaller prefetch window over a local directory"). Elsewhere returns at
    once."""
    reported = "/sys/module/page_reporting/parameters/reported_kib"
    last = read_int(reported)
    deadline = time.monotonic() + limit_s
    quiet = 0
    while last is not None and time.monotonic() < deadline and quiet < 6:
        time.sleep(0.5)
        now = read_int(reported)
        quiet = quiet + 1 if now == last else 0
        last = now


def warm(paths):
    for p in paths:
        with open(p, "rb") as f:
            while f.read(16 << 20):
                pass


class Mount:
    """A FUSE server process mounted at `path`; unmounted by stop()."""

    def __init__(self, argv, path, env, log_path):
        self.path = path
        os.makedirs(path, exist_ok=True)
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(argv, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while not is_mounted(path):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                with open(log_path) as f:
                    raise RuntimeError(f"mount of {path} failed: {f.read()[-2000:]}")
            time.sleep(0.05)

    def peak_rss(self) -> int:
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) << 10
        return 0

    def stop(self):
        if is_mounted(self.path):
            if subprocess.run(["umount", self.path], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", self.path], capture_output=True)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


# -------------------------------------------------------------------- readers

def slices(paths, readers):
    """`readers` or more (file, offset, length): each shard cut into equal slices."""
    per_file = max(1, -(-readers // len(paths)))
    out = []
    for p in paths:
        size = os.path.getsize(p)
        step = -(-size // per_file)
        for i in range(per_file):
            if i * step < size:
                out.append((p, i * step, min(step, size - i * step)))
    return out


def run_reader(kind, paths, args):
    """Runs one reader over `paths`; returns (bytes, seconds) or a string saying why not."""
    start = time.monotonic()
    if kind == "cat":
        with open(os.devnull, "wb") as null:
            subprocess.run(["cat", *paths], stdout=null, check=True)
        return sum(os.path.getsize(p) for p in paths), time.monotonic() - start
    if kind == "readers":
        procs = [subprocess.Popen(["dd", f"if={p}", "of=/dev/null", "bs=1M", "iflag=skip_bytes,count_bytes",
                                   f"skip={off}", f"count={n}", "status=none"])
                 for p, off, n in slices(paths, args.readers)]
        if any(p.wait() != 0 for p in procs):
            raise RuntimeError("a dd reader failed")
        return sum(os.path.getsize(p) for p in paths), time.monotonic() - start
    if kind in ("numpy", "pages"):
        loader = os.path.join(os.path.dirname(os.path.abspath(__file__)), "loader.py")
        r = subprocess.run([args.python, loader, "load" if kind == "numpy" else "pages", *paths],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"the {kind} loader failed (is numpy installed for {args.python}? --python picks "
                               f"the interpreter): {r.stderr[-2000:]}")
        final = json.loads(r.stdout.strip().splitlines()[-1])
        return final["bytes"], final["end"] - final["start"]
    if kind == "load_file":
        if args.load_file_device is None:
            return "safetensors/torch not installed"
        r = subprocess.run([args.python, "-c", LOAD_FILE, args.load_file_device, *paths], capture_output=True,
                           text=True)
        if r.returncode != 0:
            raise RuntimeError(f"load_file failed: {r.stderr[-2000:]}")
        out = json.loads(r.stdout.strip().splitlines()[-1])
        return out["bytes"], out["seconds"]
    raise ValueError(kind)


GET_LINE = re.compile(r"^(\S+) debug GET \S+/([^/\s]+) bytes (\d+)-(\d+): HTTP 20[06], (\d+) bytes in (\d+) ms")


def request_timeline(log_path, reader_slices):
    """Per reader (a slice of a shard), from tensorfs' debug log: its range requests, when the
    bytes fetched for it reached 8 and 64 MiB and all of it, counted from the first request of
    the mount (the log's wall-clock milliseconds). A request belongs to the slice it starts in."""
    gets = []
    with open(log_path, errors="replace") as f:
        for text in f:
            m = GET_LINE.match(text)
            if m:
                done = datetime.datetime.fromisoformat(m.group(1)).timestamp()
                gets.append((done, m.group(2), int(m.group(3)), int(m.group(5)), int(m.group(6))))
    if not gets:
        return []
    t0 = min(done - ms / 1000 for done, _, _, _, ms in gets)
    rows = []
    for path, off, n in reader_slices:
        mine = sorted((g for g in gets if g[1] == os.path.basename(path) and off <= g[2] < off + n),
                      key=lambda g: g[0])
        got, marks = 0, {}
        for done, _, _, size, _ in mine:
            got += size
            for mib in (8, 64):
                if got >= mib << 20 and mib not in marks:
                    marks[mib] = done - t0
        rows.append({"reader": f"{os.path.basename(path)} @{off >> 20} MiB", "requests": len(mine),
                     "under_8mib": sum(1 for g in mine if g[3] < 8 << 20),
                     "slowest_ms": max((g[4] for g in mine), default=0),
                     "at_8mib": marks.get(8), "at_64mib": marks.get(64),
                     "last": mine[-1][0] - t0 if mine else None})
    return rows


def print_timeline(target, rows):
    s = lambda v: "-" if v is None else f"{v:.3f}"
    print(f"\n{target}, concurrent readers: range requests per reader (seconds from the mount's first request)")
    print("| reader | requests | under 8 MiB | slowest, ms | 8 MiB fetched | 64 MiB fetched | last arrived |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['reader']} | {r['requests']} | {r['under_8mib']} | {r['slowest_ms']} | {s(r['at_8mib'])} | "
              f"{s(r['at_64mib'])} | {s(r['last'])} |", flush=True)


def copy_cost(paths, rounds=3) -> float:
    """CPU-seconds per GB of copying the shards out of the page cache: `cat` of the files (in the
    page cache) to /dev/null, its user + sys time; the median of `rounds` runs."""
    warm(paths)
    total = sum(os.path.getsize(p) for p in paths)
    costs = []
    for _ in range(rounds):
        before = os.times()
        with open(os.devnull, "wb") as null:
            subprocess.run(["cat", *paths], stdout=null, check=True)
        after = os.times()
        cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
        costs.append(cpu / (total / GB))
    return sorted(costs)[len(costs) // 2]


def tensorfs_stats(binary, mnt, env) -> dict | None:
    """`tensorfs stats --json MNT`; None when it cannot say."""
    r = subprocess.run([binary, "stats", "--json", mnt], capture_output=True, text=True, env=env, timeout=30)
    if r.returncode != 0:
        return None
    try:
        return json.loads(r.stdout)
    except ValueError:
        return None


def read_sizes_line(hist) -> str:
    """A FUSE READ size histogram ({"4096": n, ...}: sizes rounded up to a power of two) as one
    line: per bucket, its share of the requests / of the bytes (each request counted at its
    bucket's size, an upper bound on the bytes it asked for)."""
    if hist is None:
        return "n/a"
    buckets = sorted((int(k), int(v)) for k, v in hist.items() if int(v) > 0)
    count = sum(n for _, n in buckets)
    if count == 0:
        return "no reads"
    volume = sum(size * n for size, n in buckets)
    label = lambda b: f"{b >> 20}M" if b >= 1 << 20 else f"{b >> 10}K" if b >= 1 << 10 else f"{b}B"
    return f"{count} reads: " + ", ".join(f"{label(size)} {n / count:.0%}/{size * n / volume:.0%}"
                                          for size, n in buckets)


def load_file_device(python: str, wanted: str) -> str | None:
    probe = "import torch, safetensors; print('cuda' if torch.cuda.is_available() else 'cpu')"
    r = subprocess.run([python, "-c", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return None
    found = r.stdout.strip()
    return found if wanted == "auto" else wanted


# ------------------------------------------------------------ server ceiling

def _fetch_ranges(endpoint, ca_file, jobs):
    u = urllib.parse.urlsplit(endpoint)
    if u.scheme == "https":
        conn = http.client.HTTPSConnection(u.hostname, u.port, context=ssl.create_default_context(cafile=ca_file))
    else:
        conn = http.client.HTTPConnection(u.hostname, u.port)
    buf = bytearray(RANGE)
    view = memoryview(buf)
    total = 0
    for name, offset, length in jobs:
        path = f"/storage/v1/b/{BUCKET}/o/{urllib.parse.quote(name, safe='')}?alt=media"
        conn.request("GET", path, headers={"Range": f"bytes={offset}-{offset + length - 1}"})
        resp = conn.getresponse()
        if resp.status != 206:
            raise RuntimeError(f"range GET: HTTP {resp.status}")
        got = 0
        while got < length:
            n = resp.readinto(view[got:length])
            if n == 0:
                raise RuntimeError("short range response")
            got += n
        total += got
    conn.close()
    return total


def server_ceiling(endpoint, ca_file, paths, clients):
    jobs = []
    for p in paths:
        size = os.path.getsize(p)
        name = f"{PREFIX}/{os.path.basename(p)}"
        jobs += [(name, off, min(RANGE, size - off)) for off in range(0, size, RANGE)]
    per_client = [jobs[i::clients] for i in range(clients)]
    with concurrent.futures.ProcessPoolExecutor(clients) as pool:
        list(pool.map(int, range(clients)))  # workers started before the clock
        start = time.monotonic()
        total = sum(pool.map(_fetch_ranges, [endpoint] * clients, [ca_file] * clients, per_client))
        return total, time.monotonic() - start


# ------------------------------------------------------------------- the run

def sweep_report(paths):
    """One table of the runs of `datacenter.sh sweep`: per value of the option and per reader, each
    tensorfs source and memfs_ceiling at the settings that tensorfs mount had in force."""
    runs = []
    for path in paths:
        try:
            with open(path) as f:
                runs.append(json.load(f))
        except (OSError, ValueError) as e:
            print(f"{path}: no result ({e})")
    if not runs:
        return 1
    names = {"load_file": "load_file", "numpy": "numpy (W1)", "pages": "pages", "cat": "cat", "readers": "dd readers"}
    loaders = [l for l in names if any(l in r["rates"].get("memfs", {}) for r in runs)]
    sources = [t + suffix for t in ("tensorfs-dir", "tensorfs-http", "tensorfs-https") for suffix in ("-before", "")
               if any(t + suffix in r["rates"] for r in runs)]
    fmt = lambda v: "-" if v is None else f"{v:.2f}"
    r0 = runs[0]
    print(f"\n{r0['size'] / GB:.2f} GB in {r0['shards']} shards, {r0['nproc']} CPUs. GB/s (CPU-s per GB of the FUSE "
          f"server); memfs_ceiling at the read_ahead_kb / max_background / congestion_threshold that tensorfs "
          f"had in force")
    for loader in loaders:
        print(f"\n| {names[loader]}: -o | in force | " + " | ".join(sources) + " | memfs_ceiling | " +
              " | ".join(f"{t} / memfs" for t in sources) + " |")
        print("| --- | --- |" + " --- |" * (2 * len(sources) + 1))
        for r in runs:
            cell = lambda t: fmt(r["rates"].get(t, {}).get(loader)) + f" ({fmt(r['cpu'].get(t, {}).get(loader))})"
            m = r.get("mounts", {}).get("memfs", {}).get(loader) or {}
            force = "/".join(str(m.get(k, "?")) for k in ("read_ahead_kb", "max_background", "congestion_threshold"))
            mem = r["rates"].get("memfs", {}).get(loader)
            q = [r["rates"].get(t, {}).get(loader) for t in sources]
            print(f"| {r.get('tensorfs_opts')} | {force} | " + " | ".join(cell(t) for t in sources) +
                  f" | {cell('memfs')} | " +
                  " | ".join("-" if v is None or not mem else f"{v / mem:.2f}" for v in q) + " |")
    return 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--sweep-report":
        sys.exit(sweep_report(sys.argv[2:]))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tensorfs", required=True)
    p.add_argument("--memfs", required=True)
    p.add_argument("--lib-dir", help="LD_LIBRARY_PATH for tensorfs and memfs_ceiling only")
    p.add_argument("--server", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                                    "support", "gcs_test_server.py"))
    p.add_argument("--size", default="3400M", help="checkpoint bytes (e.g. 512M, 3400M)")
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--readers", type=int, default=8)
    p.add_argument("--clients", type=int, default=min(16, os.cpu_count() or 1),
                   help="client processes for the server ceiling (default: CPUs, at most 16)")
    p.add_argument("--work", default="/var/tmp/tensorfs-datacenter")
    p.add_argument("--python", default=sys.executable, help="interpreter for the loaders and the server")
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"], help="load_file's device")
    p.add_argument("--tensorfs-opts", default="",
                   help="more -o options for tensorfs, e.g. read_ahead=16M (default: none, tensorfs' own "
                        "defaults are what is measured; memfs_ceiling is given the readahead, max_background "
                        "and congestion_threshold a tensorfs mount has in force)")
    p.add_argument("--tensorfs-before", metavar="BINARY",
                   help="another tensorfs build (an earlier commit), run on the same sources and readers in "
                        "the same run: its columns are marked 'before'")
    p.add_argument("--tensorfs-before-opts", default="",
                   help="-o options for --tensorfs-before (default: none; it may not know newer options)")
    p.add_argument("--loaders", default="load_file,numpy,pages,cat,readers")
    p.add_argument("--no-dir", action="store_true", help="leave out tensorfs over the local directory")
    p.add_argument("--no-https", action="store_true")
    p.add_argument("--trace", action="store_true",
                   help="run tensorfs with log_level=debug and print, per concurrent reader, when its range "
                        "requests arrived (the debug log costs a little CPU: not for the CPU figures)")
    p.add_argument("--certs", help="a folder with ca.pem, server.pem and server.key made elsewhere "
                                   "(`datacenter.sh package` makes one), for a machine without the openssl CLI")
    p.add_argument("--out", default="bench/out/datacenter.json")
    p.add_argument("--rounds", type=int, default=1,
                   help="measure every reader on every mount this many times, a round after another for one "
                        "reader (the builds and sources interleaved within a round), and report the pass of "
                        "median rate (3 on a noisy machine)")
    p.add_argument("--settle-memory", action="store_true",
                   help="after dropping the page cache, wait until the memory freed has been handed back to "
                        "the host (VMs with free page reporting), so that every pass starts alike")
    args = p.parse_args()
    args.load_file_device = load_file_device(args.python, args.device)
    loaders = [l for l in args.loaders.split(",") if l]
    unknown = [l for l in loaders if l not in ("load_file", "numpy", "pages", "cat", "readers")]
    if unknown:
        p.error(f"unknown loaders: {', '.join(unknown)}")
    if "load_file" in loaders and args.load_file_device is None:
        log(f"load_file left out: safetensors and torch are not installed for {args.python}")
        loaders.remove("load_file")

    os.makedirs(args.work, exist_ok=True)
    data = os.path.join(args.work, "data")
    log(f"checkpoint: {args.size} in {args.shards} shards under {data}")
    paths = write_checkpoint(data, parse_size(args.size), args.shards)
    total_bytes = sum(os.path.getsize(x) for x in paths)
    certs = None if args.no_https else (given_certs(args.certs) if args.certs else make_certs(args.work))
    env = dict(os.environ)
    if args.lib_dir:
        env["LD_LIBRARY_PATH"] = os.path.abspath(args.lib_dir)

    port_file = os.path.join(args.work, "port")
    if os.path.exists(port_file):
        os.unlink(port_file)
    server_argv = [args.python, args.server, "--data", data, "--port", "0", "--port-file", port_file, "--quiet"]
    if certs:
        server_argv += ["--tls-cert", f"{certs}/server.pem", "--tls-key", f"{certs}/server.key"]
    server = subprocess.Popen(server_argv)
    results = {"size": total_bytes, "shards": args.shards, "nproc": os.cpu_count(), "clients": args.clients,
               "load_file_device": args.load_file_device, "server": {}, "rates": {}, "cpu": {}, "rss": {},
               "busy": {}, "machine_cpu": {}, "server_cpu": {}, "steady_cpu": {}, "mounts": {},
               "read_sizes": {}, "opened_at": {}, "memfs_schedule": {}, "passes": {}, "rounds": args.rounds,
               "tensorfs_opts": args.tensorfs_opts,
               "tensorfs_before": args.tensorfs_before}
    mounts = []
    try:
        port = wait_for_port(server, port_file)
        endpoints = {"http": f"http://127.0.0.1:{port}"}
        if certs:
            endpoints["https"] = f"https://127.0.0.1:{port}"

        # The server's own ceiling, its files in the page cache.
        warm(paths)
        for scheme, ep in endpoints.items():
            before = cpu_seconds(server.pid)
            n, s = server_ceiling(ep, f"{certs}/ca.pem" if certs else None, paths, args.clients)
            results["server"][scheme] = {"gbps": n / s / GB, "cpu_s_per_gb": (cpu_seconds(server.pid) - before) / (n / GB)}
            log(f"server ceiling {scheme}: {n / s / GB:.2f} GB/s")

        def measured(loader, paths_read, fuse_pid=None):
            """run_reader, with the share of all CPUs busy and the server's CPU-seconds over it, and
            given a FUSE server, its CPU-seconds over it and CPU-s per GB past the first quarter of
            the bytes."""
            busy0, total0 = machine_jiffies()
            server0 = cpu_seconds(server.pid)
            sampler = Sampler(fuse_pid) if fuse_pid else None
            outcome = run_reader(loader, paths_read, args)
            cpu, steady = sampler.finish(total_bytes) if sampler else (None, None)
            busy1, total1 = machine_jiffies()
            return outcome, (busy1 - busy0) / max(1, total1 - total0), cpu_seconds(server.pid) - server0, cpu, steady

        # Every pass of a reader on a mount, kept until all rounds are done: the one of median
        # rate is reported (its figures taken together, from one pass).
        taken = {}

        def keep(target, loader, measurement, rss=None):
            taken.setdefault((target, loader), []).append((measurement, rss))
            outcome = measurement[0]
            if not isinstance(outcome, str):
                log(f"{target} {loader}: pass {len(taken[(target, loader)])}, {outcome[0] / outcome[1] / GB:.2f} GB/s")

        def record_medians():
            for (target, loader), runs in taken.items():
                good = sorted((x for x in runs if not isinstance(x[0][0], str)), key=lambda x: x[0][0][0] / x[0][0][1])
                measurement, rss = good[len(good) // 2] if good else runs[-1]
                record(target, loader, measurement, rss)
                if len(good) > 1:
                    results["passes"].setdefault(target, {})[loader] = [n / s / GB for (n, s), *_ in
                                                                       (x[0] for x in good)]

        def record(target, loader, measurement, rss=None):
            outcome, busy, server_cpu, cpu, steady = measurement
            if isinstance(outcome, str):
                results["rates"].setdefault(target, {})[loader] = None
                log(f"{target} {loader}: {outcome}")
                return
            n, s = outcome
            results["rates"].setdefault(target, {})[loader] = n / s / GB
            if cpu is not None:
                results["cpu"].setdefault(target, {})[loader] = cpu / (n / GB)
                results["steady_cpu"].setdefault(target, {})[loader] = steady
            if rss is not None:
                results["rss"].setdefault(target, {})[loader] = rss
            results["busy"].setdefault(target, {})[loader] = busy
            # Every CPU-second the machine spent over the reader, per GB: the FUSE server, the
            # test server, the reader's own copies and the kernel's page-cache work together.
            results["machine_cpu"].setdefault(target, {})[loader] = busy * (os.cpu_count() or 1) * s / (n / GB)
            if target.startswith("tensorfs"):
                results["server_cpu"].setdefault(target, {})[loader] = server_cpu / (n / GB)
            log(f"{target} {loader}: {n / s / GB:.2f} GB/s" +
                (f", {cpu / (n / GB):.3f} CPU-s/GB" if cpu is not None else "") +
                (f" ({steady:.3f} past the first quarter)" if steady is not None else "") + f", CPUs {busy:.0%} busy")

        # The loader's ceiling: the shards in the local page cache.
        for loader in loaders:
            for _ in range(args.rounds):
                warm(paths)
                keep("local", loader, measured(loader, paths))

        # The copy from the source: what copying a GB out of the page cache costs a process.
        results["copy_cost"] = {"cpu_s_per_gb": copy_cost(paths),
                                "method": "cat of the shard files from the page cache to /dev/null, its user + "
                                          "sys CPU-s per GB, median of 3"}
        log(f"copy from the page cache: {results['copy_cost']['cpu_s_per_gb']:.3f} CPU-s/GB")

        # tensorfs' sources: the local directory (page-cached, no HTTP) and the test server.
        model_dir = os.path.dirname(paths[0])
        sources = {} if args.no_dir else {"tensorfs-dir": (model_dir, "")}
        for scheme, ep in endpoints.items():
            opts = f"anonymous,endpoint={ep}"
            if scheme == "https":
                opts += f",ca_file={certs}/ca.pem"
            sources[f"tensorfs-{scheme}"] = (f"gs://{BUCKET}/{PREFIX}", opts)

        # The build measured, and optionally an earlier one ("-before" targets) on the same sources.
        builds = {"": (args.tensorfs, args.tensorfs_opts)}
        if args.tensorfs_before:
            builds["-before"] = (args.tensorfs_before, args.tensorfs_before_opts)
        sources = {target + suffix: source for suffix in builds for target, source in sources.items()}

        def tensorfs_mount(target):
            source, opts = sources[target]
            binary, more = builds["-before" if target.endswith("-before") else ""]
            opts = ",".join(x for x in (opts, f"log_level={'debug' if args.trace else 'warn'}", more) if x)
            mnt = os.path.join(args.work, "tensorfs")
            return Mount([binary, source, mnt, "-f", "-o", opts], mnt, env,
                         os.path.join(args.work, f"{target}.log"))

        # tensorfs, cold: a fresh mount per reader, the page cache dropped. What the mount has in
        # force is read when it is up and again when the reader is done: tensorfs sets the
        # readahead of the files opened after it has seen what kind of reader it serves. The
        # mounts of one reader run one after the other, so that two builds compared meet the
        # machine in a like state (bench/README.md, "A smaller prefetch window over a local
        # directory").
        ensure_fusectl()
        for loader, _, target in ((l, r, t) for l in loaders for r in range(args.rounds) for t in sources):
            drop_caches(args.settle_memory)
            warm(paths)  # the source files in the page cache; the server sends from memory, as GCS would
            m = tensorfs_mount(target)
            mnt = m.path
            mounts.append(m)
            try:
                at_mount = mount_settings(mnt)
                measurement = measured(loader, [os.path.join(mnt, os.path.basename(x)) for x in paths],
                                       m.proc.pid)
                keep(target, loader, measurement, m.peak_rss())
                settings = mount_settings(mnt)
                settings["read_ahead_kb_at_mount"] = at_mount["read_ahead_kb"]
                results["mounts"].setdefault(target, {})[loader] = settings
                stats = tensorfs_stats(args.tensorfs, mnt, env) or {}
                results["read_sizes"].setdefault(target, {})[loader] = stats.get("fuse_read_sizes")
                results["opened_at"].setdefault(target, {})[loader] = stats.get("files_opened_by_read_ahead")
                if args.trace and loader == "readers" and target != "tensorfs-dir":
                    m.log.flush()
                    rows = request_timeline(m.log.name, slices(paths, args.readers))
                    results.setdefault("trace", {})[target] = rows
                    print_timeline(target, rows)
            finally:
                m.stop()
                mounts.remove(m)

        # The FUSE ceiling: memfs_ceiling, a fresh mount per reader, given the readahead, the
        # max_background and the congestion_threshold tensorfs had in force for the same reader
        # (set in memfs_ceiling's INIT reply), so both run at the same settings and no constant
        # is copied. A file keeps the readahead it was opened with, and tensorfs raises it for the
        # files opened once it has seen a whole-tensor reader: memfs_ceiling's files get the
        # readahead tensorfs' files got, open by open (--read-ahead-at-opens, from tensorfs'
        # files_opened_by_read_ahead stats: the value at mount first). When that is not tensorfs'
        # final value for every file, memfs_ceiling runs at the final value too ("memfs-final":
        # what opening files before the reader is known costs).
        def run_memfs(loader, target, settings, extra=()):
            memfs_argv = [args.memfs, "-f", *extra]
            for key, flag in (("read_ahead_kb", "--read-ahead-kb"), ("max_background", "--max-background"),
                              ("congestion_threshold", "--congestion-threshold")):
                if settings.get(key) is not None:
                    memfs_argv += [flag, str(settings[key])]
            mnt = os.path.join(args.work, "memfs")
            sizes_path = os.path.join(args.work, "memfs-read-sizes.json")
            if os.path.exists(sizes_path):
                os.unlink(sizes_path)
            m = Mount([*memfs_argv, "--read-sizes", sizes_path, mnt, *paths], mnt, env,
                      os.path.join(args.work, "memfs.log"))
            mounts.append(m)
            try:
                results["mounts"].setdefault(target, {})[loader] = mount_settings(mnt)
                # Its files are in its memory now: the page cache is dropped, as for tensorfs, so
                # that both fill the same recycled pages.
                drop_caches(args.settle_memory)
                measurement = measured(loader, [os.path.join(mnt, os.path.basename(x)) for x in paths], m.proc.pid)
                keep(target, loader, measurement)
            finally:
                m.stop()
                mounts.remove(m)
            try:
                with open(sizes_path) as f:
                    results["read_sizes"].setdefault(target, {})[loader] = json.load(f)
            except (OSError, ValueError):
                results["read_sizes"].setdefault(target, {})[loader] = None

        for loader in loaders:
            probe_target = next((t for t in sources
                                 if not t.endswith("-before") and loader in results["mounts"].get(t, {})), None)
            probe = results["mounts"][probe_target][loader] if probe_target else {}
            opened = (results["opened_at"].get(probe_target) or {}).get(loader) if probe_target else None
            schedule = open_schedule(opened, probe.get("read_ahead_kb_at_mount"))
            settings, extra = dict(probe), []
            if schedule:
                settings.pop("read_ahead_kb", None)
                extra = ["--read-ahead-at-opens", ",".join(f"{kb}:{n}" for kb, n in schedule)]
                results["memfs_schedule"][loader] = schedule
            final = probe.get("read_ahead_kb")
            for _ in range(args.rounds):
                run_memfs(loader, "memfs", settings, extra)
                if schedule and final is not None and any(kb != final for kb, _ in schedule):
                    run_memfs(loader, "memfs-final", probe)
        record_medians()
    finally:
        for m in mounts:
            m.stop()
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()

    report(results, loaders)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    log(f"wrote {args.out}")


def report(r, loaders):
    names = {"load_file": f"load_file({r['load_file_device'] or 'n/a'})", "numpy": "numpy mmap copy (W1)",
             "pages": "one byte per page (mmap)", "cat": "cat", "readers": "concurrent readers (dd)"}
    targets = ["local", "memfs"] + [t + suffix for t in ("tensorfs-dir", "tensorfs-http", "tensorfs-https")
                                    for suffix in ("-before", "")]
    heads = {"local": "local page cache", "memfs": "memfs_ceiling", "tensorfs-dir": "tensorfs dir",
             "tensorfs-http": "tensorfs http", "tensorfs-https": "tensorfs https"}
    heads.update({t + "-before": h + " (before)" for t, h in list(heads.items()) if t.startswith("tensorfs")})
    targets = [t for t in targets if t in r["rates"]]
    fuse = [t for t in targets if t != "local"]
    tfs = [t for t in targets if t.startswith("tensorfs")]
    rate = lambda t, l: r["rates"].get(t, {}).get(l)
    ratio = lambda a, b: None if a is None or b is None or b == 0 else a / b
    fmt = lambda v: "-" if v is None else f"{v:.2f}"

    def vs_memfs(table, t, l):
        """A tensorfs cell with its ratio to memfs_ceiling's: '0.85 (0.93x)'."""
        v = table.get(t, {}).get(l)
        q = ratio(v, table.get("memfs", {}).get(l)) if t.startswith("tensorfs") else None
        return fmt(v) + ("" if q is None else f" ({q:.2f}x)")

    def header(title, cols):
        print(f"\n| {title} | " + " | ".join(heads[t] for t in cols) + " |")
        print("| --- |" + " --- |" * len(cols))

    print(f"\n{r['size'] / GB:.2f} GB in {r['shards']} shards, {r['nproc']} CPUs; tensorfs -o options: "
          f"{r.get('tensorfs_opts') or '(none: its defaults)'}" +
          (f"; 'before': {r['tensorfs_before']}" if r.get("tensorfs_before") else ""))
    print(f"server ceiling ({r['clients']} client processes, 8 MiB ranges): " +
          ", ".join(f"{k} {v['gbps']:.2f} GB/s ({v['cpu_s_per_gb']:.2f} server CPU-s/GB)" for k, v in r["server"].items()))
    cc = r.get("copy_cost")
    if cc:
        print(f"copy from the source: {cc['cpu_s_per_gb']:.3f} CPU-s per GB ({cc['method']})")
    mounts = r.get("mounts", {})
    if mounts:
        def show(m):
            if m is None:
                return "-"
            cells = ["?" if m.get(k) is None else str(m[k]) for k in
                     ("read_ahead_kb", "max_background", "congestion_threshold")]
            first = m.get("read_ahead_kb_at_mount")
            if first is not None and str(first) != cells[0]:
                cells[0] = f"{first}->{cells[0]}"
            return "/".join(cells)
        header("in force per mount (tensorfs: read_ahead_kb at mount->when the reader was done) / "
               "max_background / congestion_threshold", fuse)
        for l in loaders:
            print(f"| {names[l]} | " + " | ".join(show(mounts.get(t, {}).get(l)) for t in fuse) + " |")
        if r.get("opened_at"):
            header("files opened, by the readahead they got (tensorfs stats)", tfs)
            for l in loaders:
                print(f"| {names[l]} | " + " | ".join(opened_text(r, t, l) for t in tfs) + " |")
    header("reader, GB/s (tensorfs: x memfs_ceiling)", targets)
    for l in loaders:
        print(f"| {names[l]} | " + " | ".join(vs_memfs(r["rates"], t, l) for t in targets) + " |")
    passes = r.get("passes", {})
    if passes:
        print(f"\n{r.get('rounds')} passes of every reader on every mount; each figure is from the pass of median "
              "rate. GB/s of the passes:")
        for l in loaders:
            cells = [f"{heads.get(t, t)} {' '.join(f'{v:.2f}' for v in passes[t][l])}"
                     for t in [*targets, "memfs-final"] if l in passes.get(t, {})]
            print(f"  {names[l]}: " + "; ".join(cells))
    header("CPU-s per GB of the FUSE server (tensorfs: x memfs_ceiling)", fuse)
    for l in loaders:
        print(f"| {names[l]} | " + " | ".join(vs_memfs(r["cpu"], t, l) for t in fuse) + " |")

    steady = r.get("steady_cpu", {})
    if steady:
        header("CPU-s per GB of the FUSE server past the first quarter of the bytes (buffers in place; "
               "tensorfs: x memfs_ceiling)", fuse)
        for l in loaders:
            print(f"| {names[l]} | " + " | ".join(vs_memfs(steady, t, l) for t in fuse) + " |")

    if r["rss"]:
        mib = lambda v: "-" if v is None else f"{v / (1 << 20):.0f}"
        header("peak RSS of tensorfs, MiB", tfs)
        for l in loaders:
            print(f"| {names[l]} | " + " | ".join(mib(r["rss"].get(t, {}).get(l)) for t in tfs) + " |")

    if r.get("busy"):
        pct = lambda v: "-" if v is None else f"{v:.0%}"
        header(f"all {r['nproc']} CPUs busy over the reader's process (test server CPU-s per GB)", targets)
        for l in loaders:
            cells = []
            for t in targets:
                cell = pct(r["busy"].get(t, {}).get(l))
                srv = r.get("server_cpu", {}).get(t, {}).get(l)
                cells.append(cell + ("" if srv is None else f" ({srv:.2f})"))
            print(f"| {names[l]} | " + " | ".join(cells) + " |")

    machine = r.get("machine_cpu", {})
    if machine:
        header(f"CPU-s per GB of the whole machine (share busy x {r['nproc']} CPUs x seconds / GB)", targets)
        for l in loaders:
            print(f"| {names[l]} | " + " | ".join(fmt(machine.get(t, {}).get(l)) for t in targets) + " |")

    sizes = r.get("read_sizes", {})
    if sizes:
        print("\nFUSE READ sizes the kernel sent, per reader (size rounded up to a power of two: share of the "
              "requests / of the bytes, each request counted at its bucket's size):")
        for l in loaders:
            for t in fuse:
                if l in sizes.get(t, {}):
                    print(f"  {names[l]}, {heads[t]}: {read_sizes_line(sizes[t][l])}")

    def line(text, value, goal, higher=True):
        if value is None:
            print(f"- {text}: not measured")
            return
        held = value >= goal if higher else value <= goal
        print(f"- {text}: {value:.2f} ({'held' if held else 'NOT held'}, target {'>=' if higher else '<='} {goal:.2f})")

    if "tensorfs-dir" in r["rates"]:
        ra = lambda t, l: (mounts.get(t, {}).get(l) or {}).get("read_ahead_kb")
        print("\nTargets, loopback (tensorfs over the local directory, cold; memfs_ceiling's files opened at the "
              "readahead tensorfs' files got, open by open):")
        for l in loaders:
            schedule = r.get("memfs_schedule", {}).get(l)
            memfs_ra = (", ".join(f"{kb} KiB ({n} file{'s' if n != 1 else ''})" for kb, n in schedule)
                        if schedule else ra("memfs", l))
            line(f"{names[l]} / memfs_ceiling's GB/s (files opened at: tensorfs {opened_text(r, 'tensorfs-dir', l)}; "
                 f"memfs_ceiling {memfs_ra})", ratio(rate("tensorfs-dir", l), rate("memfs", l)), 0.8)
        for l in loaders:
            final = rate("memfs-final", l)
            if final is not None:
                print(f"- {names[l]} / memfs_ceiling's GB/s at {ra('memfs-final', l)} KiB, the readahead tensorfs "
                      f"set once it knew the reader: {fmt(ratio(rate('tensorfs-dir', l), final))} (reported: what "
                      f"opening the files before the reader is known costs; memfs_ceiling {fmt(final)} GB/s there, "
                      f"{fmt(rate('memfs', l))} at {ra('memfs', l)} KiB)")
        copy = (cc or {}).get("cpu_s_per_gb")
        for l in loaders:
            mem = r["cpu"].get("memfs", {}).get(l)
            goal = None if mem is None or copy is None else 1.5 * mem + copy
            value = r["cpu"].get("tensorfs-dir", {}).get(l)
            if goal is None or value is None:
                print(f"- {names[l]}: CPU-s per GB: not measured")
                continue
            print(f"- {names[l]}: CPU-s per GB {value:.2f} ({'held' if value <= goal else 'NOT held'}, target <= "
                  f"1.5 x memfs_ceiling's {mem:.2f} + the copy {copy:.2f} = {goal:.2f})")

    http_server = r["server"].get("http", {}).get("gbps")
    if "tensorfs-http" not in r["rates"]:
        return
    print("\nTargets (tensorfs over HTTP, cold):")
    line("load_file / memfs_ceiling load_file", ratio(rate("tensorfs-http", "load_file"), rate("memfs", "load_file")), 0.9)
    line("load_file / local page cache load_file", ratio(rate("tensorfs-http", "load_file"), rate("local", "load_file")), 0.8)
    line("cat / memfs_ceiling cat", ratio(rate("tensorfs-http", "cat"), rate("memfs", "cat")), 0.9)
    line(f"{'readers'} / memfs_ceiling readers", ratio(rate("tensorfs-http", "readers"), rate("memfs", "readers")), 0.9)
    readers_bound(r)
    cpu = [v for v in r["cpu"].get("tensorfs-http", {}).values() if v is not None]
    line("CPU-s per GB over HTTP (worst reader)", max(cpu) if cpu else None, 0.5, higher=False)
    past = [v for v in r.get("steady_cpu", {}).get("tensorfs-http", {}).values() if v is not None]
    if past:
        print(f"  - past the first quarter of the bytes: {min(past):.2f} to {max(past):.2f}")
    cpu_tls = [v for v in r["cpu"].get("tensorfs-https", {}).values() if v is not None]
    if "tensorfs-https" in r["rates"]:
        print(f"- CPU-s per GB over HTTPS (worst reader): {fmt(max(cpu_tls) if cpu_tls else None)} (reported)")
    if http_server:
        best = max([v for v in r["rates"].get("tensorfs-http", {}).values() if v is not None] or [0])
        if best >= 0.9 * http_server:
            print(f"- note: tensorfs' best rate {best:.2f} GB/s is at the server's ceiling ({http_server:.2f} GB/s)")


def open_schedule(opened, at_mount_kb):
    """[(KiB, files)] in the order a mount's files were opened at each readahead: from tensorfs'
    files_opened_by_read_ahead ({bytes: files}), the value in force at mount first (the files opened
    before anything was known of the reader), then the others, most files first. None without
    stats."""
    if not opened:
        return None
    counts = {int(k) >> 10: n for k, n in opened.items() if n}
    first = [(at_mount_kb, counts.pop(at_mount_kb))] if at_mount_kb in counts else []
    return first + sorted(counts.items(), key=lambda kv: -kv[1])


def opened_text(r, target, loader):
    """The readahead a tensorfs mount's files were opened at, from its stats: '128 KiB (8 files)',
    '128 KiB (1 file), 1024 KiB (3 files)'; else the bdi's value when the reader was done."""
    opened = (r.get("opened_at", {}).get(target) or {}).get(loader)
    if not opened:
        m = (r.get("mounts", {}).get(target) or {}).get(loader) or {}
        return f"{m.get('read_ahead_kb')} when done"
    return ", ".join(f"{int(k) >> 10} KiB ({n} file{'s' if n != 1 else ''})"
                     for k, n in sorted(opened.items(), key=lambda kv: int(kv[0])))


def readers_bound(r):
    """What the machine's CPUs allow the concurrent readers: with the CPUs as busy as under
    memfs_ceiling, tensorfs' rate over memfs_ceiling's is at most the inverse ratio of what
    each GB costs the whole machine; and the tensorfs CPU-s per GB that 0.9 would need."""
    m = r.get("machine_cpu", {}).get("memfs", {}).get("readers")
    t = r.get("machine_cpu", {}).get("tensorfs-http", {}).get("readers")
    own = r["cpu"].get("tensorfs-http", {}).get("readers")
    if m is None or t is None or own is None or t == 0:
        return
    server = r.get("server_cpu", {}).get("tensorfs-http", {}).get("readers") or 0.0
    rest = t - own  # the test server, the readers and the kernel, per GB through tensorfs
    need = lambda other: f"{m / 0.9 - other:.2f}" if m / 0.9 > other else "nothing (out of reach)"
    print(f"  - bound by the machine's CPUs: each GB costs the machine {t:.2f} CPU-s through tensorfs "
          f"({own:.2f} tensorfs, {server:.2f} the test server), {m:.2f} through memfs_ceiling; with the CPUs "
          f"as busy as under memfs_ceiling, tensorfs gets at most {m / t:.2f} of its rate. 0.9 needs tensorfs "
          f"at {need(rest)} CPU-s per GB, or {need(rest - server)} with the storage on other machines")


if __name__ == "__main__":
    main()
