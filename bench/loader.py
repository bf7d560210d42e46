#!/usr/bin/python3
"""The benchmark's loaders, run as separate processes by bench.py.

  loader.py load FILE... [--order storage|random] [--seed N] [--deadline S]
                         [--max-tensors N] [--start-at T]
      Loads safetensors files one after the other the way safetensors' own
      loader does: mmap the file, parse the header from the mapping, then copy
      each tensor out with numpy's .copy() (glibc memcpy: for copies of 1 MiB and
      more it touches the first page, then the last page, then the rest), in
      storage order or in a shuffled order (fixed seed, one shuffle per file).
      The copies are dropped as soon as they are made, so the loader's own
      memory stays small.

  loader.py layers FILE... [--source-bytes N,...] [--deadline S] [--start-at T]
      AirLLM's forward pass over a splitted_model directory: the FILEs are the
      per-layer files in forward order (embeddings, blocks, norm, head). First
      checks that every layer's `<file>.done` marker exists (as AirLLM does
      before it uses a split model), then for each layer loads the file the way
      safetensors.torch.load_file does (mmap, header, every tensor copied out in
      storage order), "computes" nothing and moves on. --source-bytes gives each
      layer's bytes in the source checkpoint, reported as "source_bytes" (a
      layer cut short counts its share by the bytes it loaded). The final line
      has "layers": [{"file", "bytes", "tensors", "end"}] per layer loaded.

  loader.py slice FILE... --rank R --world N [--dim 0|1] [--order storage|random]
                          [--seed N] [--deadline S] [--start-at T]
      One host of a sharded job: for every tensor of every FILE, copies out
      its slice R of N along dimension --dim (rows [R*n//N, (R+1)*n//N) of
      the first dimension, as FSDP-style sharding and JAX's
      make_array_from_callback over a numpy.memmap read them; or columns of
      the second, each row contributing a small piece), through mmap, in
      storage order or in a shuffled order over all tensors of the file (the
      way safetensors' get_slice over a dict of names goes). 1-D tensors are
      sliced along their only dimension. "bytes" is what the slices hold.

  loader.py threads FILE... --threads N [--order storage|random] [--seed N]
                            [--deadline S] [--start-at T]
      A threaded loader: every FILE mapped once (one mmap per shard, opened
      before the threads start), and N threads copying tensors out of the
      mappings, each taking the next tensor of one list of every tensor of
      every file (storage order, file after file, or shuffled over all of
      them): N page faults of N different tensors in flight at once, as a
      loader's thread pool makes. numpy's copy releases the GIL, so the
      copies and their faults run in parallel. "bytes" is the tensors'.

  loader.py pages FILE... [--start-at T]
      One byte per page: mmap each FILE in turn and read one byte of every
      4 KiB page, in order. The page faults alone, with nothing copied out:
      what the kernel's readahead and the FUSE reads behind it cost a reader.
      "bytes" is the files' sizes.

  loader.py gguf FILE [--source-bytes N] [--start-at T]
      llama.cpp's loader over a GGUF file: open it, posix_fadvise(SEQUENTIAL),
      mmap the whole file MAP_SHARED | MAP_POPULATE (the kernel reads it
      through in order before mmap returns, as llama_mmap does when it
      prefetches), then one byte of every page (already resident). "bytes" is
      the file's size, "source_bytes" --source-bytes (what the link carries).

  loader.py headers DIR [--start-at T]
      `ls -l DIR`, then for every *.safetensors file in DIR: open it, read the
      8-byte length and the header JSON with read(), parse it.

Both print one JSON object per line: progress lines ({"progress": true, ...})
after each file (and, for load, each tensor), then a final line. Times are
time.monotonic() (CLOCK_MONOTONIC, the same clock in every process), so that
bench.py can put the start and end of several loaders on one time line.

--start-at T waits until time.monotonic() reaches T before starting, so that
loaders started one after the other begin together. --deadline S stops a load
after the first tensor that ends more than S seconds after the start; the
result then says "complete": false. --max-tensors N stops after N tensors
(over all files, in the order they are loaded), so a second pass can load
exactly what a first pass cut short by its deadline loaded.
"""
import argparse
import json
import mmap
import os
import random
import struct
import subprocess
import sys
import time

import numpy as np


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def wait_until(start_at):
    if start_at is not None:
        delay = start_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)


def tensor_spans(header):
    """[(begin, end)] of the tensors, relative to the data section, in storage order."""
    header.pop("__metadata__", None)
    spans = [tuple(info["data_offsets"]) for info in header.values()]
    spans.sort()
    return spans


class MappedSafetensors:
    """A safetensors file mapped read-only: the header parsed, the bytes as a
    numpy uint8 view (no copy until a tensor is copied out)."""

    def __init__(self, path):
        self._file = open(path, "rb")
        size = os.fstat(self._file.fileno()).st_size
        self._mapping = mmap.mmap(self._file.fileno(), size, prot=mmap.PROT_READ)
        (n,) = struct.unpack("<Q", self._mapping[:8])
        self.header = json.loads(bytes(self._mapping[8:8 + n]))
        self.data_start = 8 + n
        self.view = np.frombuffer(self._mapping, dtype=np.uint8)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        del self.view
        self._mapping.close()
        self._file.close()


def load(args):
    wait_until(args.start_at)
    started = time.monotonic()
    loaded = 0  # bytes: headers plus tensors
    tensors = 0
    files_done = 0
    complete = True

    def progress():
        emit({"progress": True, "bytes": loaded, "tensors": tensors, "files": files_done,
              "start": started, "end": time.monotonic()})

    def go_on():
        if args.max_tensors is not None and tensors >= args.max_tensors:
            return False
        return args.deadline is None or time.monotonic() - started <= args.deadline

    def copied(nbytes):
        nonlocal loaded, tensors
        loaded += nbytes
        tensors += 1
        progress()

    for path in args.files:
        if not complete:
            break
        before = loaded
        file_bytes, _, complete = load_file_copy(path, go_on, copied, args.order, args.seed)
        loaded = before + file_bytes  # the tensors copied() counted, and the header
        files_done += 1
        progress()
    emit({"bytes": loaded, "tensors": tensors, "files": files_done, "complete": complete,
          "start": started, "end": time.monotonic()})


def load_file_copy(path, go_on, copied, order="storage", seed=1):
    """safetensors.torch.load_file's I/O: mmap, parse the header, copy every
    tensor out (storage order, as load_file's offset_keys() gives, or shuffled
    with `seed` for order "random"). go_on() is asked before each tensor
    (False: stop there); copied(nbytes) is told after each copy. Returns (bytes
    loaded, header included; tensors copied; whether every tensor was copied)."""
    loaded = 0
    tensors = 0
    whole = True
    with MappedSafetensors(path) as st:
        loaded += st.data_start
        spans = tensor_spans(st.header)
        if order == "random":
            random.Random(seed).shuffle(spans)
        for begin, end in spans:
            if not go_on():
                whole = False
                break
            data = st.view[st.data_start + begin:st.data_start + end].copy()  # the loader's memcpy
            del data
            loaded += end - begin
            tensors += 1
            copied(end - begin)
    return loaded, tensors, whole


def slice_bounds(n, rank, world):
    return rank * n // world, (rank + 1) * n // world


def load_slices(args):
    wait_until(args.start_at)
    started = time.monotonic()
    needed = 0
    tensors = 0
    complete = True
    for path in args.files:
        if not complete:
            break
        with MappedSafetensors(path) as st:
            header = dict(st.header)
            header.pop("__metadata__", None)
            items = sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0])
            if args.order == "random":
                random.Random(args.seed).shuffle(items)
            for _, info in items:
                if args.deadline and time.monotonic() - started > args.deadline:
                    complete = False
                    break
                begin, end = info["data_offsets"]
                shape = info["shape"] or [1]
                size = end - begin
                if size == 0:
                    continue
                rows = shape[0]
                row_bytes = size // rows
                base = st.data_start + begin
                if args.dim == 1 and len(shape) >= 2:
                    elem = row_bytes // shape[1]
                    lo, hi = slice_bounds(shape[1], args.rank, args.world)
                    grid = st.view[base:base + size].reshape(rows, row_bytes)
                    data = grid[:, lo * elem:hi * elem].copy()  # one small piece per row
                    del grid  # a view of the mapping: it must go before the mapping closes
                else:
                    lo, hi = slice_bounds(rows, args.rank, args.world)
                    data = st.view[base + lo * row_bytes:base + hi * row_bytes].copy()
                needed += data.nbytes
                tensors += 1
                del data
    emit({"bytes": needed, "tensors": tensors, "files": len(args.files), "complete": complete,
          "start": started, "end": time.monotonic()})


def load_threads(args):
    import threading
    mapped = [MappedSafetensors(path) for path in args.files]
    work = [(st, begin, end) for st in mapped for begin, end in tensor_spans(dict(st.header))]
    if args.order == "random":
        random.Random(args.seed).shuffle(work)
    lock = threading.Lock()
    state = {"next": 0, "bytes": 0, "tensors": 0, "complete": True}
    wait_until(args.start_at)
    started = time.monotonic()

    def worker():
        while True:
            with lock:
                if state["next"] >= len(work):
                    return
                if args.deadline and time.monotonic() - started > args.deadline:
                    state["complete"] = False
                    return
                st, begin, end = work[state["next"]]
                state["next"] += 1
            data = st.view[st.data_start + begin:st.data_start + end].copy()  # the loader's memcpy
            del data
            with lock:
                state["bytes"] += end - begin
                state["tensors"] += 1

    threads = [threading.Thread(target=worker) for _ in range(args.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ended = time.monotonic()
    for st in mapped:
        st.__exit__()
    emit({"bytes": state["bytes"], "tensors": state["tensors"], "files": len(args.files),
          "threads": args.threads, "complete": state["complete"], "start": started, "end": ended})


def layers(args):
    source = [int(x) for x in args.source_bytes.split(",")] if args.source_bytes else [0] * len(args.files)
    if len(source) != len(args.files):
        raise SystemExit("loader.py layers: --source-bytes needs one figure per file")
    wait_until(args.start_at)
    started = time.monotonic()
    state = {"loaded": 0, "tensors": 0, "source": 0, "layer_loaded": 0, "layer_source": 0, "layer_size": 1}
    done_layers = []
    complete = True

    def emit_state(final=False):
        partial = round(state["layer_source"] * state["layer_loaded"] / max(state["layer_size"], 1))
        obj = {"bytes": state["loaded"] + state["layer_loaded"], "tensors": state["tensors"],
               "files": len(done_layers), "source_bytes": state["source"] + partial, "start": started,
               "first_layer_end": done_layers[0]["end"] if done_layers else None, "end": time.monotonic()}
        if final:
            obj.update(complete=complete, layers=done_layers)
        else:
            obj["progress"] = True
        emit(obj)

    def go_on():
        return args.deadline is None or time.monotonic() - started <= args.deadline

    def copied(nbytes):
        state["tensors"] += 1
        state["layer_loaded"] += nbytes
        emit_state()

    missing = [p for p in args.files if not os.path.exists(p + ".done")]
    if missing:
        raise SystemExit(f"loader.py layers: no marker {missing[0]}.done")
    for path, layer_source in zip(args.files, source):
        if not go_on():
            complete = False
            break
        size = os.path.getsize(path)
        state.update(layer_loaded=0, layer_source=layer_source, layer_size=size)
        loaded, tensors, whole = load_file_copy(path, go_on, copied)
        state.update(layer_loaded=0, layer_source=0)
        state["loaded"] += loaded
        state["source"] += layer_source if whole else round(layer_source * loaded / max(size, 1))
        done_layers.append({"file": os.path.basename(path), "bytes": loaded, "tensors": tensors,
                            "whole": whole, "end": time.monotonic()})
        emit_state()
        if not whole:
            complete = False
            break
    emit_state(final=True)


def headers(args):
    wait_until(args.start_at)
    started = time.monotonic()
    subprocess.run(["ls", "-l", args.dir], check=True, stdout=subprocess.DEVNULL)
    listed = time.monotonic()
    files = 0
    tensors = 0
    read_bytes = 0
    for name in sorted(os.listdir(args.dir)):
        if not name.endswith(".safetensors"):
            continue
        with open(os.path.join(args.dir, name), "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        header.pop("__metadata__", None)
        files += 1
        tensors += len(header)
        read_bytes += 8 + n
    emit({"bytes": read_bytes, "files": files, "tensors": tensors, "complete": True,
          "start": started, "listed": listed, "end": time.monotonic()})


PAGE = 4096


def pages(args):
    wait_until(args.start_at)
    started = time.monotonic()
    total = 0
    touched = 0
    for path in args.files:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                continue
            with mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ) as m:
                for offset in range(0, size, PAGE):
                    touched += m[offset]
        total += size
        emit({"progress": True, "bytes": total, "start": started, "end": time.monotonic()})
    emit({"bytes": total, "files": len(args.files), "complete": True, "checksum": touched,
          "start": started, "end": time.monotonic()})


def gguf(args):
    wait_until(args.start_at)
    started = time.monotonic()
    touched = 0
    with open(args.file, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0x8000)
        with mmap.mmap(f.fileno(), size, flags=flags, prot=mmap.PROT_READ) as m:
            populated = time.monotonic()
            for offset in range(0, size, PAGE):
                touched += m[offset]
    emit({"bytes": size, "source_bytes": args.source_bytes or size, "files": 1, "complete": True,
          "checksum": touched, "populated": populated, "start": started, "end": time.monotonic()})


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("load")
    p.add_argument("files", nargs="+")
    p.add_argument("--order", choices=["storage", "random"], default="storage")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--deadline", type=float)
    p.add_argument("--max-tensors", type=int)
    p.add_argument("--start-at", type=float)
    p = sub.add_parser("threads")
    p.add_argument("files", nargs="+")
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--order", choices=["storage", "random"], default="random")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--deadline", type=float)
    p.add_argument("--start-at", type=float)
    p = sub.add_parser("layers")
    p.add_argument("files", nargs="+")
    p.add_argument("--source-bytes", help="comma-separated source bytes of each layer")
    p.add_argument("--deadline", type=float)
    p.add_argument("--start-at", type=float)
    p = sub.add_parser("slice")
    p.add_argument("files", nargs="+")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--dim", type=int, choices=[0, 1], default=0)
    p.add_argument("--deadline", type=float)
    p.add_argument("--order", choices=["storage", "random"], default="storage")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--start-at", type=float)
    p = sub.add_parser("pages")
    p.add_argument("files", nargs="+")
    p.add_argument("--start-at", type=float)
    p = sub.add_parser("gguf")
    p.add_argument("file")
    p.add_argument("--source-bytes", type=int)
    p.add_argument("--start-at", type=float)
    p = sub.add_parser("headers")
    p.add_argument("dir")
    p.add_argument("--start-at", type=float)
    args = parser.parse_args()
    if args.mode == "load":
        load(args)
    elif args.mode == "slice":
        load_slices(args)
    elif args.mode == "threads":
        load_threads(args)
    elif args.mode == "layers":
        layers(args)
    elif args.mode == "pages":
        pages(args)
    elif args.mode == "gguf":
        gguf(args)
    else:
        headers(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
