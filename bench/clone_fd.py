#!/usr/bin/python3
"""One shared /dev/fuse descriptor against one per worker (clone_fd), with 8
concurrent readers: what serving a handed-over descriptor costs.

tensorfs serving /dev/fd/N (a Kubernetes node plugin's descriptor, no /dev/fuse
node in the pod) cannot clone it: cloning opens /dev/fuse. Its workers then
share one descriptor. This measures the ceiling either way on memfs_ceiling,
which serves from memory as tensorfs is set up (same loop, max_read, keep_cache),
so the difference is the descriptor's and nothing else's.

  bench/clone_fd.py --memfs build/release/bench/memfs_ceiling [--readers 8]
                    [--file-mib 128] [--runs 3] [--threads 16]

Each run mounts afresh (an empty page cache), then READERS threads each read
their own file start to end in 1 MiB read()s; the figure is all bytes over the
time from the first read to the last reply. Prints one line per run and the
median per mode; asserts nothing.
"""
import argparse
import os
import statistics
import subprocess
import tempfile
import threading
import time

MIB = 1 << 20


def mounted(path):
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


def read_all(path, counts, index):
    fd = os.open(path, os.O_RDONLY)
    total = 0
    try:
        while True:
            n = len(os.read(fd, MIB))
            if n == 0:
                break
            total += n
    finally:
        os.close(fd)
    counts[index] = total


def run_once(memfs, clone_fd, threads, files, mountpoint):
    p = subprocess.Popen([memfs, "-f", "--threads", str(threads), "--clone-fd", str(clone_fd), mountpoint] + files,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not mounted(mountpoint):
            if time.monotonic() > deadline or p.poll() is not None:
                raise RuntimeError("memfs_ceiling did not mount: " + p.stderr.read().decode())
            time.sleep(0.02)
        counts = [0] * len(files)
        readers = [threading.Thread(target=read_all, args=(os.path.join(mountpoint, os.path.basename(f)), counts, i))
                   for i, f in enumerate(files)]
        start = time.monotonic()
        for t in readers:
            t.start()
        for t in readers:
            t.join()
        elapsed = time.monotonic() - start
        return sum(counts) / elapsed / 1e9
    finally:
        subprocess.run(["fusermount3", "-u", mountpoint], capture_output=True)
        p.wait(60)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--memfs", required=True, help="the memfs_ceiling binary")
    ap.add_argument("--readers", type=int, default=8)
    ap.add_argument("--file-mib", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=16, help="FUSE worker threads (tensorfs's default)")
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="clone_fd_bench.")
    mountpoint = os.path.join(work, "mnt")
    os.mkdir(mountpoint)
    block = os.urandom(8 * MIB)
    files = []
    for i in range(args.readers):
        path = os.path.join(work, "file%d.bin" % i)
        with open(path, "wb") as f:
            for _ in range(args.file_mib // 8):
                f.write(block)
        files.append(path)
    print("%d readers, %d MiB each, %d FUSE threads, %d cores" % (args.readers, args.file_mib, args.threads,
                                                                  os.cpu_count()))
    results = {0: [], 1: []}
    try:
        for run in range(args.runs):
            for clone_fd in (0, 1):  # interleaved, so a noisy moment hits both
                gbps = run_once(args.memfs, clone_fd, args.threads, files, mountpoint)
                results[clone_fd].append(gbps)
                print("run %d  %-26s %6.2f GB/s" % (run + 1, "clone_fd (one per worker)" if clone_fd else
                                                    "one shared descriptor", gbps), flush=True)
    finally:
        for f in files:
            os.unlink(f)
        os.rmdir(mountpoint)
        os.rmdir(work)
    shared, cloned = statistics.median(results[0]), statistics.median(results[1])
    print("median: one shared descriptor %.2f GB/s, clone_fd %.2f GB/s (shared / cloned = %.2f)" %
          (shared, cloned, shared / cloned if cloned else float("nan")))


if __name__ == "__main__":
    main()
