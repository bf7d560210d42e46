#!/usr/bin/python3
"""The benchmark's plain GCS clients (JSON API over http.client), run as
separate processes by bench.py. They are the peers that do without a file
system.

  gcs_client.py naive --endpoint URL --bucket B --prefix P [--deadline S]
      One range GET per tensor: lists the objects, then for every
      *.safetensors object in name order reads the 8-byte length and the header
      (two range GETs), then each tensor in storage order with its own range
      GET, one after the other, on one keep-alive connection.

  gcs_client.py stage --endpoint URL --bucket B --prefix P --dest DIR
                      [--streams 16] [--range-mib 32] [--deadline S]
      Downloads every object under the prefix to DIR with --streams threads,
      each with its own keep-alive connection, fetching --range-mib ranges from
      a shared queue (objects in name order, ranges in offset order) and
      writing them in place with pwrite.

Both print one JSON line: {"bytes", "requests", "complete", "start", "end", ...}
with time.monotonic() times. --deadline S stops issuing requests S seconds
after the start ("complete": false).
"""
import argparse
import http.client
import json
import os
import queue
import struct
import sys
import threading
import time
import urllib.parse


class Client:
    """One keep-alive connection to the JSON API. Not thread-safe: one per thread."""

    def __init__(self, endpoint):
        url = urllib.parse.urlsplit(endpoint)
        if url.scheme != "http":
            raise SystemExit(f"gcs_client: only http:// endpoints, got {endpoint}")
        self.host, self.port = url.hostname, url.port or 80
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=300)
        self.requests = 0

    def _get(self, target, headers=None):
        self.requests += 1
        self.conn.request("GET", target, headers=headers or {})
        response = self.conn.getresponse()
        return response

    def list(self, bucket, prefix):
        """[(name, size)] of the objects under prefix, in name order."""
        out = []
        token = None
        while True:
            query = {"prefix": prefix}
            if token:
                query["pageToken"] = token
            response = self._get(f"/storage/v1/b/{bucket}/o?" + urllib.parse.urlencode(query))
            body = response.read()
            if response.status != 200:
                raise SystemExit(f"gcs_client: listing gs://{bucket}/{prefix}: HTTP {response.status}")
            page = json.loads(body)
            out += [(item["name"], int(item["size"])) for item in page.get("items", [])]
            token = page.get("nextPageToken")
            if not token:
                return sorted(out)

    def read_range(self, bucket, name, offset, length, into=None):
        """Bytes [offset, offset + length) of the object; into a memoryview when given."""
        target = f"/storage/v1/b/{bucket}/o/{urllib.parse.quote(name, safe='')}?alt=media"
        response = self._get(target, {"Range": f"bytes={offset}-{offset + length - 1}"})
        if response.status != 206:
            response.read()
            raise SystemExit(f"gcs_client: {name} bytes {offset}+{length}: HTTP {response.status}")
        if into is None:
            data = response.read()
        else:
            data = into[:length]
            got = 0
            while got < length:
                n = response.readinto(data[got:])
                if not n:
                    break
                got += n
            response.read()  # nothing left; keeps the connection reusable
        if len(data) != length:
            raise SystemExit(f"gcs_client: {name} bytes {offset}+{length}: body of {len(data)} bytes")
        return data


def naive(args):
    client = Client(args.endpoint)
    started = time.monotonic()
    objects = [(n, s) for n, s in client.list(args.bucket, args.prefix) if n.endswith(".safetensors")]
    loaded = 0
    tensors = 0
    complete = True
    buffer = None
    for name, _ in objects:
        if not complete:
            break
        (n,) = struct.unpack("<Q", client.read_range(args.bucket, name, 0, 8))
        header = json.loads(client.read_range(args.bucket, name, 8, n))
        header.pop("__metadata__", None)
        loaded += 8 + n
        spans = sorted(tuple(info["data_offsets"]) for info in header.values())
        largest = max((e - b for b, e in spans), default=0)
        if buffer is None or len(buffer) < largest:
            buffer = memoryview(bytearray(largest))
        for begin, end in spans:
            if args.deadline is not None and time.monotonic() - started > args.deadline:
                complete = False
                break
            if end > begin:
                client.read_range(args.bucket, name, 8 + n + begin, end - begin, into=buffer)
            loaded += end - begin
            tensors += 1
    print(json.dumps({"bytes": loaded, "tensors": tensors, "requests": client.requests,
                      "complete": complete, "start": started, "end": time.monotonic()}))


def stage(args):
    started = time.monotonic()
    lister = Client(args.endpoint)
    objects = lister.list(args.bucket, args.prefix)
    range_size = int(args.range_mib * (1 << 20))
    work = queue.Queue()
    files = {}
    for name, size in objects:
        rel = name[len(args.prefix):].lstrip("/") if args.prefix else name
        path = os.path.join(args.dest, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.ftruncate(fd, size)
        files[name] = fd
        for offset in range(0, size, range_size):
            work.put((name, offset, min(range_size, size - offset)))
    lock = threading.Lock()
    totals = {"bytes": 0, "requests": lister.requests, "complete": True}
    errors = []

    def worker():
        client = Client(args.endpoint)
        buffer = memoryview(bytearray(range_size))
        try:
            while True:
                try:
                    name, offset, length = work.get_nowait()
                except queue.Empty:
                    break
                if args.deadline is not None and time.monotonic() - started > args.deadline:
                    with lock:
                        totals["complete"] = False
                    break
                data = client.read_range(args.bucket, name, offset, length, into=buffer)
                os.pwrite(files[name], data, offset)
                with lock:
                    totals["bytes"] += length
        except BaseException as e:  # reported below, after the other threads finish
            errors.append(e)
        finally:
            with lock:
                totals["requests"] += client.requests

    threads = [threading.Thread(target=worker) for _ in range(args.streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for fd in files.values():
        os.close(fd)
    if errors:
        raise errors[0]
    print(json.dumps({**totals, "files": len(files), "start": started, "end": time.monotonic()}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    for mode in ("naive", "stage"):
        p = sub.add_parser(mode)
        p.add_argument("--endpoint", required=True, help="http://127.0.0.1:PORT")
        p.add_argument("--bucket", required=True)
        p.add_argument("--prefix", default="", help="object name prefix, ending in '/'")
        p.add_argument("--deadline", type=float)
        if mode == "stage":
            p.add_argument("--dest", required=True)
            p.add_argument("--streams", type=int, default=16)
            p.add_argument("--range-mib", type=float, default=32)
    args = parser.parse_args()
    naive(args) if args.mode == "naive" else stage(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
