#!/usr/bin/env python3
"""Two tensorfs binaries on the same data path, in one run, pass by pass.

  bench/compare.sh OLD_BIN NEW_BIN [--size 1024M] [--passes 5] [--sources gs,dir]
                   [--loaders numpy,pages,cat,readers] [--out FILE]

For a change to the data path, measured against main before it lands: the same
checkpoint, the same test server, the same readers, both binaries taking turns
within every pass (the order alternating from pass to pass), so that what the
machine is doing meanwhile falls on both alike. Printed per loader and source:
each binary's GB/s and CPU-seconds per GB (user + sys of the tensorfs process
over the reader's run), the median of the passes, and the ratio new/old with
its spread (the median, lowest and highest of the per-pass ratios).

Sources: `gs` (the project's GCS test server on 127.0.0.1, no link emulation:
the server sends from memory, as the datacenter profile runs it) and `dir` (a
page-cached local directory). Readers: the numpy mmap copy of every tensor
(bench/loader.py load, W1), one byte of every 4 KiB page (loader.py pages),
`cat` of the shards, and 8 concurrent `dd` readers (each a half or a quarter
of a shard).

Each binary gets one mount per source and loader, kept up for that loader's
passes: its first pass is a process new to a fresh mount, the later ones new
processes on a mount that has served the earlier ones, as a mount that stays
up serves a loader run again (what the readers before taught it is in force).
The page cache is dropped before every pass (then the shard files read back
in, so the test server sends from memory); tensorfs' own cache holds no bytes
the kernel took, so every pass fetches again.

Run as root on Debian 12 (FUSE mounts, dropping the page cache), with
/usr/bin/python3 and Debian's numpy. Writes the figures as JSON to --out.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import datacenter  # noqa: E402  (the checkpoint, mounts, readers and CPU sampling it already has)

GB = 1e9
LOADERS = ("numpy", "pages", "cat", "readers")
SOURCES = ("gs", "dir")


def run_pass(kind, paths, python, readers):
    """One reader over `paths` (paths on the mount): (bytes, seconds)."""
    args = argparse.Namespace(python=python, readers=readers, load_file_device=None)
    outcome = datacenter.run_reader(kind, paths, args)
    if isinstance(outcome, str):
        raise RuntimeError(f"{kind}: {outcome}")
    return outcome


def spread(values):
    return statistics.median(values), min(values), max(values)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("old", help="the tensorfs binary to compare against (main's)")
    p.add_argument("new", help="the tensorfs binary with the change")
    p.add_argument("--size", default="1024M", help="checkpoint bytes (default 1024M)")
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--passes", type=int, default=5, help="passes of every reader (default 5)")
    p.add_argument("--sources", default="gs,dir")
    p.add_argument("--loaders", default=",".join(LOADERS))
    p.add_argument("--readers", type=int, default=8, help="concurrent dd readers (default 8)")
    p.add_argument("--tensorfs-opts", default="", help="more -o options for both binaries")
    p.add_argument("--work", default="/var/tmp/tensorfs-compare")
    p.add_argument("--python", default="/usr/bin/python3", help="interpreter of the loaders and the test server")
    p.add_argument("--out", default="bench/out/compare.json")
    args = p.parse_args()
    loaders = [x for x in args.loaders.split(",") if x]
    sources = [x for x in args.sources.split(",") if x]
    if unknown := [x for x in loaders if x not in LOADERS] + [x for x in sources if x not in SOURCES]:
        p.error(f"unknown loaders or sources: {', '.join(unknown)}")
    binaries = {"old": os.path.abspath(args.old), "new": os.path.abspath(args.new)}
    for name, binary in binaries.items():
        if not os.access(binary, os.X_OK):
            p.error(f"{name}: {binary} is not an executable")

    os.makedirs(args.work, exist_ok=True)
    data = os.path.join(args.work, "data")
    paths = datacenter.write_checkpoint(data, datacenter.parse_size(args.size), args.shards)
    total = sum(os.path.getsize(x) for x in paths)
    port_file = os.path.join(args.work, "port")
    if os.path.exists(port_file):
        os.unlink(port_file)
    server = subprocess.Popen([args.python, os.path.join(HERE, "..", "tests", "support", "gcs_test_server.py"),
                               "--data", data, "--port", "0", "--port-file", port_file, "--quiet"])
    # passes[loader][source][binary] = [(GB/s, CPU-s per GB), ...]
    passes = {l: {s: {b: [] for b in binaries} for s in sources} for l in loaders}
    try:
        endpoint = f"http://127.0.0.1:{datacenter.wait_for_port(server, port_file)}"
        origin = {"gs": (f"gs://{datacenter.BUCKET}/{datacenter.PREFIX}", f"anonymous,endpoint={endpoint}"),
                  "dir": (os.path.dirname(paths[0]), "")}
        datacenter.ensure_fusectl()
        for loader in loaders:
            mounts = {}
            try:
                for b, binary in binaries.items():
                    for s in sources:
                        source, opts = origin[s]
                        opts = ",".join(x for x in (opts, "log_level=warn", args.tensorfs_opts) if x)
                        mnt = os.path.join(args.work, f"mnt-{b}-{s}")
                        mounts[b, s] = datacenter.Mount([binary, source, mnt, "-f", "-o", opts], mnt, None,
                                                        os.path.join(args.work, f"{b}-{s}.log"))
                for i in range(args.passes):
                    order = list(binaries) if i % 2 == 0 else list(reversed(binaries))
                    for b in order:
                        for s in sources:
                            m = mounts[b, s]
                            datacenter.drop_caches()
                            datacenter.warm(paths)
                            cpu0 = datacenter.cpu_seconds(m.proc.pid)
                            n, seconds = run_pass(loader, [os.path.join(m.path, os.path.basename(x)) for x in paths],
                                                  args.python, args.readers)
                            cpu = datacenter.cpu_seconds(m.proc.pid) - cpu0
                            passes[loader][s][b].append((n / seconds / GB, cpu / (n / GB)))
                            datacenter.log(f"{loader} {s} {b} pass {i + 1}: {n / seconds / GB:.2f} GB/s, "
                                           f"{cpu / (n / GB):.3f} CPU-s/GB")
            finally:
                for m in mounts.values():
                    m.stop()
    finally:
        server.terminate()
        server.wait()

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"old": binaries["old"], "new": binaries["new"], "bytes": total, "passes": passes,
                   "nproc": os.cpu_count()}, f, indent=1)

    print(f"\n{total / GB:.2f} GB in {args.shards} shards, {os.cpu_count()} CPUs, {args.passes} passes each, "
          f"interleaved\nold: {binaries['old']}\nnew: {binaries['new']}\n")
    print("| loader | source | old GB/s | new GB/s | new/old GB/s (min-max) "
          "| old CPU-s/GB | new CPU-s/GB | new/old CPU (min-max) |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for loader in loaders:
        for s in sources:
            old, new = passes[loader][s]["old"], passes[loader][s]["new"]
            rate = spread([n[0] / o[0] for o, n in zip(old, new)])
            cpu = spread([n[1] / o[1] for o, n in zip(old, new)])
            print(f"| {loader} | {s} | {statistics.median(x[0] for x in old):.2f} | "
                  f"{statistics.median(x[0] for x in new):.2f} | {rate[0]:.2f} ({rate[1]:.2f}-{rate[2]:.2f}) | "
                  f"{statistics.median(x[1] for x in old):.3f} | {statistics.median(x[1] for x in new):.3f} | "
                  f"{cpu[0]:.2f} ({cpu[1]:.2f}-{cpu[2]:.2f}) |")
    print("\nA ratio is of pass i of new to pass i of old; GB/s above 1 and CPU below 1 is new doing better. "
          f"Figures: {args.out}")


if __name__ == "__main__":
    main()
