#!/usr/bin/python3
"""Loads every tensor of every safetensors file under a directory the way
safetensors' own loader does: mmap the file, parse the header, copy each tensor
out of the mapping. With --compare DIR it checks every tensor's bytes against
the same file under DIR (read with plain read()), and every other file byte for
byte, and that every file under DIR is present in the mount. Prints one line per
file and a summary; exits 1 on any mismatch, on a missing file, and when fewer
than --min-tensors tensors (default 1) or --min-bytes bytes were loaded, so an
empty or half-listed mount never passes.

  mmap_loader.py MOUNTED_DIR [--compare SOURCE_DIR] [--order storage|random]
                 [--threads N] [--min-tensors N] [--min-bytes N]

With --threads N the safetensors files are all mapped first and N threads copy
their tensors out of the mappings, each taking the next tensor of one list of
all of them (in storage order, or shuffled), as a threaded loader does.
"""
import argparse
import hashlib
import json
import mmap
import os
import random
import struct
import sys
import threading
import time

import numpy as np


def tensors_of(mapping):
    (n,) = struct.unpack("<Q", mapping[:8])
    header = json.loads(bytes(mapping[8:8 + n]))
    header.pop("__metadata__", None)
    return 8 + n, header


def load_file(path, order, seed):
    """Returns {tensor name: sha256 of its bytes} and the bytes copied."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        with mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ) as mapping:
            start, header = tensors_of(mapping)
            names = sorted(header, key=lambda k: header[k]["data_offsets"][0])
            if order == "random":
                random.Random(seed).shuffle(names)
            view = np.frombuffer(mapping, dtype=np.uint8)
            digests = {}
            copied = 0
            for name in names:
                begin, end = header[name]["data_offsets"]
                data = view[start + begin:start + end].copy()  # the loader's memcpy
                digests[name] = hashlib.sha256(data.tobytes()).hexdigest()
                copied += data.size
            del view
    return digests, copied


def load_files_threaded(paths, threads, order, seed):
    """load_file's results for each of `paths`, copied by `threads` threads."""
    opened = []
    views = []  # numpy views of the mappings, dropped before they are closed
    work = []
    results = {}
    try:
        for path in paths:
            f = open(path, "rb")
            mapping = mmap.mmap(f.fileno(), os.fstat(f.fileno()).st_size, prot=mmap.PROT_READ)
            opened.append((f, mapping))
            start, header = tensors_of(mapping)
            views.append(np.frombuffer(mapping, dtype=np.uint8))
            results[path] = [{}, 0]
            for name in sorted(header, key=lambda k: header[k]["data_offsets"][0]):
                begin, end = header[name]["data_offsets"]
                work.append((path, name, len(views) - 1, start + begin, start + end))
        if order == "random":
            random.Random(seed).shuffle(work)
        lock = threading.Lock()
        next_item = iter(work)

        def worker():
            while True:
                with lock:
                    item = next(next_item, None)
                if item is None:
                    return
                path, name, index, begin, end = item
                data = views[index][begin:end].copy()  # the loader's memcpy
                digest = hashlib.sha256(data.tobytes()).hexdigest()
                with lock:
                    results[path][0][name] = digest
                    results[path][1] += data.size

        pool = [threading.Thread(target=worker) for _ in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
    finally:
        views.clear()
        for f, mapping in opened:
            mapping.close()
            f.close()
    return {path: (digests, copied) for path, (digests, copied) in results.items()}


def source_digests(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        header.pop("__metadata__", None)
        out = {}
        for name, info in header.items():
            begin, end = info["data_offsets"]
            f.seek(8 + n + begin)
            out[name] = hashlib.sha256(f.read(end - begin)).hexdigest()
    return out


def file_digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir")
    parser.add_argument("--compare", help="source directory to check the bytes against")
    parser.add_argument("--order", choices=["storage", "random"], default="storage")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=0, help="copy the tensors with this many threads")
    parser.add_argument("--min-tensors", type=int, default=1, help="fail when fewer tensors were loaded")
    parser.add_argument("--min-bytes", type=int, default=1, help="fail when fewer tensor bytes were loaded")
    args = parser.parse_args()

    failures = 0
    seen = set()
    total_tensors = 0
    total_bytes = 0
    started = time.monotonic()
    threaded = {}
    if args.threads > 0:
        paths = []
        for root, dirs, files in os.walk(args.dir):
            if args.compare:
                rel_root = os.path.relpath(root, args.dir)
                dirs[:] = [d for d in dirs if os.path.isdir(os.path.join(args.compare, rel_root, d))]
            dirs.sort()
            paths += [os.path.join(root, n) for n in sorted(files) if n.endswith(".safetensors")]
        threaded = load_files_threaded(paths, args.threads, args.order, args.seed)
    for root, dirs, files in os.walk(args.dir):
        if args.compare:  # only what the source has: not the virtual views
            rel_root = os.path.relpath(root, args.dir)
            dirs[:] = [d for d in dirs if os.path.isdir(os.path.join(args.compare, rel_root, d))]
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            rel = os.path.relpath(path, args.dir)
            seen.add(rel)
            if name.endswith(".safetensors"):
                digests, copied = threaded[path] if path in threaded else load_file(path, args.order, args.seed)
                total_tensors += len(digests)
                total_bytes += copied
                verdict = ""
                if args.compare:
                    ok = digests == source_digests(os.path.join(args.compare, rel))
                    failures += not ok
                    verdict = "  bytes match the source" if ok else "  MISMATCH with the source"
                print(f"{rel}: {len(digests)} tensors, {copied} bytes loaded by mmap{verdict}")
            elif args.compare:
                ok = file_digest(path) == file_digest(os.path.join(args.compare, rel))
                failures += not ok
                print(f"{rel}: {'same bytes as the source' if ok else 'MISMATCH with the source'}")
    seconds = time.monotonic() - started
    missing = []
    if args.compare:
        for root, _, files in os.walk(args.compare):
            for name in files:
                rel = os.path.relpath(os.path.join(root, name), args.compare)
                if rel not in seen:
                    missing.append(rel)
    for rel in sorted(missing):
        print(f"{rel}: MISSING from the mount")
    print(f"loaded {total_tensors} tensors, {total_bytes / 1e6:.1f} MB in {seconds:.2f} s; "
          f"{failures} mismatches, {len(missing)} missing")
    too_few = []
    if total_tensors < args.min_tensors:
        too_few.append(f"{total_tensors} tensors loaded, fewer than the {args.min_tensors} expected")
    if total_bytes < args.min_bytes:
        too_few.append(f"{total_bytes} bytes loaded, fewer than the {args.min_bytes} expected")
    for line in too_few:
        print(line)
    return 1 if failures or missing or too_few else 0


if __name__ == "__main__":
    sys.exit(main())
