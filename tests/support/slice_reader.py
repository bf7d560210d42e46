#!/usr/bin/python3
"""One host of a sharded job, for the mount tests: maps each safetensors FILE
and copies out dim-0 slice RANK of WORLD of every tensor (rows
[RANK*n//WORLD, (RANK+1)*n//WORLD)), in storage order or shuffled, through
numpy.memmap as JAX's make_array_from_callback does; with --compare DIR it
checks each slice against the same bytes of DIR/<file name>. Prints one JSON
line: {"needed": bytes of the slices, "tensors": n}.

  slice_reader.py --rank R --world N [--order storage|random] [--compare DIR] [--start-at T] FILE...

--start-at T waits until time.monotonic() reaches T (CLOCK_MONOTONIC, one
clock for every process) first, so that hosts started one after the other
begin together.
"""
import argparse
import json
import os
import random
import struct
import sys
import time

import numpy as np


def main():
    p = argparse.ArgumentParser()
    p.add_argument("files", nargs="+")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--order", choices=["storage", "random"], default="storage")
    p.add_argument("--compare")
    p.add_argument("--start-at", type=float)
    a = p.parse_args()
    if a.start_at is not None:
        time.sleep(max(0.0, a.start_at - time.monotonic()))
    needed = 0
    count = 0
    for path in a.files:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        header.pop("__metadata__", None)
        items = sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0])
        if a.order == "random":
            random.Random(1).shuffle(items)
        data = np.memmap(path, dtype=np.uint8, mode="r")
        reference = np.memmap(os.path.join(a.compare, os.path.basename(path)), dtype=np.uint8,
                              mode="r") if a.compare else None
        for name, info in items:
            begin, end = info["data_offsets"]
            if end == begin:
                continue
            rows = (info["shape"] or [1])[0]
            row = (end - begin) // rows
            lo = 8 + n + begin + a.rank * rows // a.world * row
            hi = 8 + n + begin + (a.rank + 1) * rows // a.world * row
            got = np.array(data[lo:hi])  # the copy a loader makes
            if reference is not None and not np.array_equal(got, reference[lo:hi]):
                sys.exit(f"{path}: {name}: slice {a.rank}/{a.world} differs from the source")
            needed += hi - lo
            count += 1
        del data
    print(json.dumps({"needed": needed, "tensors": count}))


if __name__ == "__main__":
    main()
