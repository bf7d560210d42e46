#!/usr/bin/python3
"""Self-test of tests/support/gcs_test_server.py: starts the server as a subprocess
on a temporary directory and checks the contract that tensorfs tests rely on.

Run: /usr/bin/python3 tests/support/test_gcs_server_selftest.py [-v]
Needs the openssl command-line tool (to make an RSA key and sign JWTs).
"""

import base64
import hashlib
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = os.path.join(HERE, "gcs_test_server.py")
sys.path.insert(0, HERE)
import gcs_test_server  # noqa: E402  (for its CRC32C and key parsing)

REFRESH = ("client-id-1", "client-secret-1", "refresh-token-1")
ODD_NAMES = ["with space.bin", "ünïcödé/名前.bin", "hash#tag.bin", "question?.bin", "percent%41.bin",
             "plus+sign.bin", "deep/er/still/x.bin", "semi;colon&amp=.bin"]
BIG_SIZE = 64 << 20


def crc32c_reference(data: bytes) -> int:
    """Bitwise CRC32C, independent of the server's table and libext2fs."""
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def read(path: str, n: int = -1) -> bytes:
    with open(path, "rb") as f:
        return f.read(n)


def enc(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class ServerProcess:
    def __init__(self, data_dir, *extra, port=0):
        self.data_dir = data_dir
        self.extra = list(extra)
        self.port = port
        self.proc = None
        self.start()

    def start(self):
        fd, port_file = tempfile.mkstemp(prefix="gcs_port.")
        os.close(fd)
        os.unlink(port_file)
        self.proc = subprocess.Popen([sys.executable, SERVER, "--data", self.data_dir, "--port", str(self.port),
                                      "--port-file", port_file, "--quiet", *self.extra])
        deadline = time.time() + 60  # only a hung start takes this long
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}")
            if os.path.exists(port_file):
                with open(port_file) as f:
                    self.port = int(f.read())
                os.unlink(port_file)
                status, _, body = self.request("GET", "/_control/health")
                if status == 200 and body == b"ok":
                    return
            time.sleep(0.02)
        raise RuntimeError("server did not start")

    def stop(self):
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(5)
            self.proc = None

    def conn(self, timeout=30):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, conn=None):
        c = conn or self.conn()
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        data = r.read()
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        if conn is None:
            c.close()
        return r.status, hdrs, data

    def json(self, method, path, body=None, headers=None, expect=200):
        status, _, data = self.request(method, path, body, headers)
        if status != expect:
            raise AssertionError(f"{method} {path}: want {expect}, got {status}: {data[:300]!r}")
        return json.loads(data) if data else None

    def control(self, method, path, obj=None):
        return self.json(method, path, json.dumps(obj).encode() if obj is not None else None)

    def raw(self, request_bytes: bytes, timeout=10):
        """Sends a raw request; returns (status_line+headers, body, error, times) where
        times[i] is when byte i+1 of the body arrived (coarsely, per recv)."""
        s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        s.sendall(request_bytes)
        buf = b""
        error = None
        times = []
        head = None
        try:
            while True:
                chunk = s.recv(65536)
                now = time.monotonic()
                if not chunk:
                    break
                buf += chunk
                if head is None and b"\r\n\r\n" in buf:
                    head, _, buf = buf.partition(b"\r\n\r\n")
                    times.extend([now] * len(buf))
                elif head is not None:
                    times.extend([now] * len(chunk))
                if head is not None:
                    m = re.search(rb"Content-Length: (\d+)", head)
                    if m and len(buf) >= int(m.group(1)):
                        break
        except OSError as err:
            error = err
        finally:
            s.close()
        return head, buf, error, times


def get_request(path, extra=""):
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}\r\n".encode()


def openssl(*args, stdin=None):
    return subprocess.run(["openssl", *args], input=stdin, check=True, capture_output=True).stdout


class Env:
    tmp = None
    data = None
    server: ServerProcess = None
    key = None
    other_key = None


def setUpModule():
    Env.tmp = tempfile.mkdtemp(prefix="gcs_selftest.")
    data = Env.data = os.path.join(Env.tmp, "data")
    many = os.path.join(data, "many")
    os.makedirs(many)
    for i in range(1500):
        with open(os.path.join(many, f"obj-{i:05d}"), "wb") as f:
            f.write(b"x")
    tree = os.path.join(data, "tree")
    for name in ["a/1", "a/2", "a/b/3", "c", "d/e/f", "a-sibling"]:
        path = os.path.join(tree, *name.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(name.encode())
    os.makedirs(os.path.join(tree, "empty", "deeper"))
    odd = os.path.join(data, "odd")
    for name in ODD_NAMES:
        path = os.path.join(odd, *name.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(("content of " + name).encode())
    objs = os.path.join(data, "objs")
    os.makedirs(objs)
    with open(os.path.join(objs, "big.bin"), "wb") as f:
        f.write(os.urandom(BIG_SIZE))
    with open(os.path.join(objs, "small.json"), "wb") as f:
        f.write(b'{"hello": "world"}\n' * 100)
    with open(os.path.join(objs, "empty"), "wb"):
        pass
    os.makedirs(os.path.join(data, "up"))
    Env.key = os.path.join(Env.tmp, "key.pem")
    Env.other_key = os.path.join(Env.tmp, "other.pem")
    for path in (Env.key, Env.other_key):
        openssl("genpkey", "-algorithm", "RSA", "-out", path, "-pkeyopt", "rsa_keygen_bits:2048")
    pub = os.path.join(Env.tmp, "pub.pem")
    openssl("pkey", "-in", Env.key, "-pubout", "-out", pub)
    Env.pub = pub
    Env.server = ServerProcess(data, "--token-public-key", pub, "--refresh-client-id", REFRESH[0],
                               "--refresh-client-secret", REFRESH[1], "--refresh-token", REFRESH[2])


def tearDownModule():
    if Env.server:
        Env.server.stop()
    shutil.rmtree(Env.tmp, ignore_errors=True)


class ServerTest(unittest.TestCase):
    def setUp(self):
        self.s = Env.server
        self.s.control("DELETE", "/_control/faults")
        self.s.control("POST", "/_control/shaping", {"latency_ms": 0, "conn_rate": 0, "total_rate": 0})
        # A previous test's response may still be adding its bytes to the
        # counters after its client has them all: reset once none is left.
        deadline = time.monotonic() + 60  # only a hung response takes this long
        while self.s.json("GET", "/_control/stats")["requests_in_progress"] != 0:
            self.assertLess(time.monotonic(), deadline, "a storage request still in progress after 60 s")
            time.sleep(0.01)
        self.s.control("POST", "/_control/stats/reset")

    def list_all(self, bucket, **params):
        names, prefixes, pages = [], [], 0
        token = None
        while True:
            q = dict(params)
            if token:
                q["pageToken"] = token
            page = self.s.json("GET", f"/storage/v1/b/{bucket}/o?" + urllib.parse.urlencode(q))
            self.assertEqual(page["kind"], "storage#objects")
            names += [item["name"] for item in page.get("items", [])]
            prefixes += page.get("prefixes", [])
            pages += 1
            token = page.get("nextPageToken")
            if not token:
                return names, prefixes, pages


class ListingTest(ServerTest):
    def test_pages_over_1000_objects(self):
        first = self.s.json("GET", "/storage/v1/b/many/o")
        self.assertEqual(len(first["items"]), 1000)
        self.assertIn("nextPageToken", first)
        names, _, pages = self.list_all("many")
        self.assertEqual(pages, 2)
        self.assertEqual(names, [f"obj-{i:05d}" for i in range(1500)])

    def test_max_results_and_prefix(self):
        names, _, pages = self.list_all("many", maxResults=700)
        self.assertEqual(pages, 3)
        self.assertEqual(len(names), 1500)
        names, _, _ = self.list_all("many", prefix="obj-0142")
        self.assertEqual(names, [f"obj-0142{i}" for i in range(10)])
        page = self.s.json("GET", "/storage/v1/b/many/o?maxResults=5000")  # capped at 1000
        self.assertEqual(len(page["items"]), 1000)
        self.assertIn("nextPageToken", page)

    def test_delimiter_rolls_up_prefixes(self):
        names, prefixes, _ = self.list_all("tree", delimiter="/")
        self.assertEqual(names, ["a-sibling", "c"])
        self.assertEqual(prefixes, ["a/", "d/"])  # empty/ holds no object
        names, prefixes, _ = self.list_all("tree", delimiter="/", prefix="a/")
        self.assertEqual(names, ["a/1", "a/2"])
        self.assertEqual(prefixes, ["a/b/"])
        names, prefixes, _ = self.list_all("tree")
        self.assertEqual(names, ["a-sibling", "a/1", "a/2", "a/b/3", "c", "d/e/f"])
        self.assertEqual(prefixes, [])

    def test_pages_mix_items_and_prefixes_in_name_order(self):
        seen = []
        token = None
        while True:
            q = {"delimiter": "/", "maxResults": 1}
            if token:
                q["pageToken"] = token
            page = self.s.json("GET", "/storage/v1/b/tree/o?" + urllib.parse.urlencode(q))
            entries = [i["name"] for i in page.get("items", [])] + page.get("prefixes", [])
            self.assertEqual(len(entries), 1)
            seen += entries
            token = page.get("nextPageToken")
            if not token:
                break
        self.assertEqual(seen, ["a-sibling", "a/", "c", "d/"])

    def test_empty_listing_omits_items_like_gcs(self):
        page = self.s.json("GET", "/storage/v1/b/tree/o?prefix=nothing-here")
        self.assertEqual(page, {"kind": "storage#objects"})

    def test_missing_bucket_is_404_json(self):
        status, _, body = self.s.request("GET", "/storage/v1/b/no-such-bucket/o")
        self.assertEqual(status, 404)
        self.assertEqual(json.loads(body)["error"]["code"], 404)
        status, _, body = self.s.request("GET", "/storage/v1/b/tree/o/no-such-object")
        self.assertEqual(status, 404)
        self.assertEqual(json.loads(body)["error"]["code"], 404)
        status, _, _ = self.s.request("GET", "/storage/v1/b/tree/o/no-such-object?alt=media")
        self.assertEqual(status, 404)


class ObjectTest(ServerTest):
    def test_odd_names_round_trip(self):
        names, _, _ = self.list_all("odd")
        self.assertEqual(names, sorted(ODD_NAMES))
        for name in ODD_NAMES:
            obj = self.s.json("GET", f"/storage/v1/b/odd/o/{enc(name)}")
            self.assertEqual(obj["name"], name)
            expected = ("content of " + name).encode()
            status, _, body = self.s.request("GET", f"/storage/v1/b/odd/o/{enc(name)}?alt=media")
            self.assertEqual((status, body), (200, expected), name)
            link = urllib.parse.urlsplit(obj["mediaLink"])
            status, _, body = self.s.request("GET", link.path + "?" + link.query)
            self.assertEqual((status, body), (200, expected), name)

    def test_unencoded_slash_is_accepted(self):
        status, _, body = self.s.request("GET", "/storage/v1/b/tree/o/a/b/3?alt=media")
        self.assertEqual((status, body), (200, b"a/b/3"))

    def test_object_resource_fields(self):
        path = os.path.join(Env.data, "objs", "small.json")
        data = read(path)
        st = os.stat(path)
        obj = self.s.json("GET", "/storage/v1/b/objs/o/small.json")
        self.assertEqual(obj["kind"], "storage#object")
        self.assertEqual(obj["name"], "small.json")
        self.assertEqual(obj["bucket"], "objs")
        self.assertEqual(obj["size"], str(len(data)))
        self.assertEqual(obj["generation"], str(st.st_mtime_ns))
        self.assertEqual(obj["metageneration"], "1")
        self.assertEqual(obj["id"], f"objs/small.json/{st.st_mtime_ns}")
        self.assertEqual(obj["contentType"], "application/json")
        self.assertEqual(obj["md5Hash"], base64.b64encode(hashlib.md5(data).digest()).decode())
        self.assertEqual(obj["crc32c"], base64.b64encode(crc32c_reference(data).to_bytes(4, "big")).decode())
        rfc3339 = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
        self.assertRegex(obj["updated"], rfc3339)
        self.assertRegex(obj["timeCreated"], rfc3339)
        self.assertTrue(obj["etag"])
        base = f"http://127.0.0.1:{self.s.port}"
        self.assertEqual(obj["mediaLink"],
                         f"{base}/download/storage/v1/b/objs/o/small.json?generation={st.st_mtime_ns}&alt=media")
        self.assertEqual(obj["selfLink"], f"{base}/storage/v1/b/objs/o/small.json")
        empty = self.s.json("GET", "/storage/v1/b/objs/o/empty")
        self.assertEqual((empty["size"], empty["crc32c"], empty["md5Hash"]),
                         ("0", "AAAAAA==", "1B2M2Y8AsgTpgAmY7PhCfg=="))

    def test_crc32c_implementations_agree(self):
        self.assertEqual(gcs_test_server.Crc32c(allow_native=False).extend(0, b"123456789"), 0xE3069283)
        self.assertEqual(gcs_test_server.CRC32C.extend(0, b"123456789"), 0xE3069283)
        data = os.urandom(100_003)
        python = gcs_test_server.Crc32c(allow_native=False)
        self.assertEqual(gcs_test_server.CRC32C.extend(python.extend(0, data[:7]), data[7:]),
                         crc32c_reference(data))

    def test_ranges(self):
        data = read(os.path.join(Env.data, "objs", "small.json"))
        size = len(data)
        url = "/storage/v1/b/objs/o/small.json?alt=media"
        status, h, body = self.s.request("GET", url)
        self.assertEqual((status, body), (200, data))
        self.assertEqual(h["content-length"], str(size))
        self.assertEqual(h["x-goog-generation"], str(os.stat(os.path.join(Env.data, "objs", "small.json")).st_mtime_ns))
        cases = [("bytes=10-19", 10, 19), ("bytes=100-", 100, size - 1), ("bytes=-7", size - 7, size - 1),
                 ("bytes=5-999999", 5, size - 1), ("bytes=-999999", 0, size - 1), ("bytes=0-0", 0, 0)]
        for header, a, b in cases:
            status, h, body = self.s.request("GET", url, headers={"Range": header})
            self.assertEqual(status, 206, header)
            self.assertEqual(h["content-range"], f"bytes {a}-{b}/{size}", header)
            self.assertEqual(body, data[a:b + 1], header)
        for header in (f"bytes={size}-", f"bytes={size + 10}-{size + 20}", "bytes=-0"):
            status, h, _ = self.s.request("GET", url, headers={"Range": header})
            self.assertEqual(status, 416, header)
            self.assertEqual(h["content-range"], f"bytes */{size}", header)
        status, _, body = self.s.request("GET", "/download/storage/v1/b/objs/o/small.json?alt=media",
                                         headers={"Range": "bytes=1-2"})
        self.assertEqual((status, body), (206, data[1:3]))

    def test_generation_preconditions(self):
        gen = int(self.s.json("GET", "/storage/v1/b/objs/o/small.json")["generation"])
        for alt in ("", "&alt=media"):
            base = "/storage/v1/b/objs/o/small.json?x=1" + alt
            self.assertEqual(self.s.request("GET", f"{base}&generation={gen}")[0], 200)
            self.assertEqual(self.s.request("GET", f"{base}&generation={gen - 1}")[0], 404)
            self.assertEqual(self.s.request("GET", f"{base}&ifGenerationMatch={gen}")[0], 200)
            self.assertEqual(self.s.request("GET", f"{base}&ifGenerationMatch={gen + 1}")[0], 412)

    def test_keep_alive_survives_errors(self):
        c = self.s.conn()
        for path, want in [("/storage/v1/b/objs/o/small.json", 200), ("/storage/v1/b/objs/o/nope", 404),
                           ("/storage/v1/b/objs/o/small.json?alt=media", 200),
                           ("/storage/v1/b/objs/o/small.json?generation=1", 404)]:
            status, _, _ = self.s.request("GET", path, conn=c)
            self.assertEqual(status, want)
        status, _, _ = self.s.request("GET", "/storage/v1/b/objs/o/small.json?alt=media",
                                      headers={"Range": "bytes=999999-"}, conn=c)
        self.assertEqual(status, 416)
        local_port = c.sock.getsockname()[1]
        self.s.request("GET", "/storage/v1/b/objs/o/small.json", conn=c)
        self.assertEqual(c.sock.getsockname()[1], local_port)  # same connection throughout
        c.close()


class UploadTest(ServerTest):
    def upload(self, name, body, **params):
        q = urllib.parse.urlencode({"uploadType": "media", "name": name, **params})
        return self.s.request("POST", f"/upload/storage/v1/b/up/o?{q}", body=body)

    def test_upload_creates_and_bumps_generation(self):
        status, _, body = self.upload("dir/new.bin", b"one")
        self.assertEqual(status, 200, body)
        first = json.loads(body)
        self.assertEqual((first["name"], first["size"]), ("dir/new.bin", "3"))
        path = os.path.join(Env.data, "up", "dir", "new.bin")
        # A replaced file whose mtime is ahead of the clock still gets a larger generation.
        future = time.time_ns() + 10**12
        os.utime(path, ns=(future, future))
        status, _, body = self.upload("dir/new.bin", b"two!")
        self.assertEqual(status, 200, body)
        second = json.loads(body)
        self.assertGreater(int(second["generation"]), future)
        self.assertEqual(read(path), b"two!")
        self.assertEqual(self.s.request("GET", f"/storage/v1/b/up/o/{enc('dir/new.bin')}?alt=media"
                                               f"&generation={first['generation']}")[0], 404)
        self.assertEqual([n for n in os.listdir(os.path.dirname(path)) if n.startswith(".")], [])

    def test_upload_preconditions(self):
        status, _, body = self.upload("pre.bin", b"a", ifGenerationMatch=0)
        self.assertEqual(status, 200)
        gen = json.loads(body)["generation"]
        self.assertEqual(self.upload("pre.bin", b"b", ifGenerationMatch=0)[0], 412)
        self.assertEqual(self.upload("pre.bin", b"b", ifGenerationMatch=int(gen) + 1)[0], 412)
        self.assertEqual(self.upload("pre.bin", b"b", ifGenerationMatch=gen)[0], 200)

    def test_upload_odd_names_and_delete(self):
        for name in ODD_NAMES:
            status, _, body = self.upload(name, name.encode())
            self.assertEqual(status, 200, body)
            self.assertEqual(json.loads(body)["name"], name)
            status, _, body = self.s.request("GET", f"/storage/v1/b/up/o/{enc(name)}?alt=media")
            self.assertEqual((status, body), (200, name.encode()))
            status, _, body = self.s.request("DELETE", f"/storage/v1/b/up/o/{enc(name)}")
            self.assertEqual((status, body), (204, b""))
            self.assertEqual(self.s.request("GET", f"/storage/v1/b/up/o/{enc(name)}")[0], 404)

    def test_unstorable_names_are_rejected(self):
        for name in ("a//b", "../escape", "trailing/", "./x"):
            self.assertEqual(self.upload(name, b"x")[0], 400, name)


class FaultTest(ServerTest):
    MEDIA = "/storage/v1/b/objs/o/big.bin?alt=media"

    def inject(self, *rules):
        self.assertEqual(self.s.control("POST", "/_control/faults", list(rules)), {"ok": True})

    def test_status_fault_applies_count_times(self):
        self.inject({"match": {"method": "GET", "path_regex": "small\\.json", "media": True},
                     "action": "status", "status": 503, "count": 2})
        url = "/storage/v1/b/objs/o/small.json?alt=media"
        for _ in range(2):
            status, _, body = self.s.request("GET", url)
            self.assertEqual(status, 503)
            self.assertEqual(json.loads(body)["error"]["code"], 503)
        self.assertEqual(self.s.request("GET", url)[0], 200)
        self.assertEqual(self.s.json("GET", "/_control/faults"), {"rules": []})

    def test_match_filters_and_order(self):
        self.inject({"match": {"media": False}, "action": "status", "status": 429, "count": -1},
                    {"match": {"path_regex": "small"}, "action": "status", "status": 500, "count": 1})
        self.assertEqual(self.s.request("GET", "/storage/v1/b/objs/o/small.json")[0], 429)
        self.assertEqual(self.s.request("GET", "/storage/v1/b/objs/o/small.json")[0], 429)
        self.assertEqual(self.s.request("GET", "/storage/v1/b/objs/o/small.json?alt=media")[0], 500)
        self.assertEqual(self.s.request("GET", "/storage/v1/b/objs/o/small.json?alt=media")[0], 200)
        self.assertEqual(self.s.request("GET", "/storage/v1/b/objs/o?prefix=s")[0], 429)
        self.s.control("DELETE", "/_control/faults")
        self.assertEqual(self.s.request("GET", "/storage/v1/b/objs/o/small.json")[0], 200)

    def test_reset_after_sends_n_bytes_then_rst(self):
        self.inject({"match": {"media": True}, "action": "reset_after", "bytes": 100000})
        head, body, error, _ = self.s.raw(get_request(self.MEDIA, "Range: bytes=0-999999\r\n"))
        self.assertIn(b"206", head.split(b"\r\n")[0])
        self.assertIn(b"Content-Length: 1000000", head)
        self.assertIsInstance(error, ConnectionResetError)
        self.assertLessEqual(len(body), 100000)

    def test_truncate_after_closes_cleanly(self):
        self.inject({"match": {"media": True}, "action": "truncate_after", "bytes": 12345})
        head, body, error, _ = self.s.raw(get_request(self.MEDIA, "Range: bytes=0-999999\r\n"))
        self.assertIn(b"Content-Length: 1000000", head)
        self.assertIsNone(error)
        self.assertEqual(len(body), 12345)
        data = read(os.path.join(Env.data, "objs", "big.bin"), 12345)
        self.assertEqual(body, data)

    def test_stall_after_pauses_then_continues(self):
        self.inject({"match": {"media": True}, "action": "stall_after", "bytes": 5000, "seconds": 0.6})
        head, body, error, times = self.s.raw(get_request(self.MEDIA, "Range: bytes=0-199999\r\n"))
        self.assertIsNone(error)
        self.assertEqual(len(body), 200000)
        self.assertGreaterEqual(times[5000] - times[4999], 0.5)

    def test_stall_then_close(self):
        self.inject({"match": {"media": True}, "action": "stall_after", "bytes": 5000, "seconds": 0.2,
                     "then": "close"})
        _, body, error, _ = self.s.raw(get_request(self.MEDIA, "Range: bytes=0-199999\r\n"))
        self.assertIsNone(error)
        self.assertEqual(len(body), 5000)

    def test_delay_first_byte(self):
        self.inject({"match": {"path_regex": "^/storage/v1/b/objs/o/small"}, "action": "delay_first_byte",
                     "seconds": 0.4})
        start = time.monotonic()
        self.assertEqual(self.s.request("GET", "/storage/v1/b/objs/o/small.json")[0], 200)
        self.assertGreaterEqual(time.monotonic() - start, 0.4)
        # The rule's count (1) is spent: the second request is not delayed.
        self.assertEqual(self.s.request("GET", "/storage/v1/b/objs/o/small.json")[0], 200)
        self.assertEqual(self.s.json("GET", "/_control/stats")["faults_applied"], 1)

    def test_invalid_rules_are_rejected(self):
        for rule in ({"action": "explode"}, {"action": "reset_after"}, {"action": "status", "status": 503,
                                                                          "count": 0},
                     {"match": {"path_regex": "("}, "action": "status", "status": 500}):
            status, _, body = self.s.request("POST", "/_control/faults", json.dumps([rule]).encode())
            self.assertEqual(status, 400, rule)
            self.assertIn("error", json.loads(body))


class AuthTest(ServerTest):
    def jwt(self, key=None, alg="RS256", **overrides):
        now = int(time.time())
        claims = {"iss": "sa@test-project.iam.gserviceaccount.com", "aud": f"http://127.0.0.1:{self.s.port}/token",
                  "scope": "https://www.googleapis.com/auth/devstorage.read_only", "iat": now, "exp": now + 3600}
        claims.update(overrides)
        claims = {k: v for k, v in claims.items() if v is not None}
        signing_input = b64url(json.dumps({"alg": alg, "typ": "JWT"}).encode()) + "." + \
            b64url(json.dumps(claims).encode())
        sig = openssl("dgst", "-sha256", "-sign", key or Env.key, stdin=signing_input.encode())
        return signing_input + "." + b64url(sig)

    def token(self, form):
        status, _, body = self.s.request("POST", "/token", urllib.parse.urlencode(form).encode(),
                                         {"Content-Type": "application/x-www-form-urlencoded"})
        return status, json.loads(body)

    def jwt_grant(self, assertion):
        return self.token({"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion": assertion})

    def test_valid_jwt_gets_a_token(self):
        status, body = self.jwt_grant(self.jwt())
        self.assertEqual(status, 200, body)
        self.assertTrue(body["access_token"].startswith("tok-"))
        self.assertEqual((body["expires_in"], body["token_type"]), (3600, "Bearer"))
        status, _ = self.jwt_grant(self.jwt(aud="https://oauth2.googleapis.com/token"))
        self.assertEqual(status, 200)

    def test_bad_jwts_are_invalid_grant(self):
        now = int(time.time())
        good = self.jwt()
        head, claims, sig = good.split(".")
        tampered = head + "." + b64url(json.dumps({"iss": "evil", "aud": "x/token", "iat": now,
                                                   "exp": now + 60}).encode()) + "." + sig
        cases = {"wrong key": self.jwt(key=Env.other_key), "tampered": tampered,
                 "expired": self.jwt(iat=now - 7200, exp=now - 3600), "too long": self.jwt(exp=now + 7200),
                 "wrong aud": self.jwt(aud="https://example.com/other"), "no iss": self.jwt(iss=None),
                 "alg": self.jwt(alg="HS256"), "garbage": "not-a-jwt"}
        for what, assertion in cases.items():
            status, body = self.jwt_grant(assertion)
            self.assertEqual((status, body["error"]), (400, "invalid_grant"), what)
            self.assertTrue(body["error_description"], what)

    def test_key_loader_reads_every_supported_form(self):
        want = gcs_test_server.load_rsa_public_key(Env.pub)
        self.assertEqual(gcs_test_server.load_rsa_public_key(Env.key), want)
        rsa_pub = os.path.join(Env.tmp, "rsa_pub.pem")
        openssl("pkey", "-in", Env.key, "-pubout", "-out", rsa_pub)
        openssl("rsa", "-pubin", "-in", rsa_pub, "-RSAPublicKey_out", "-out", rsa_pub)
        self.assertEqual(gcs_test_server.load_rsa_public_key(rsa_pub), want)
        cert = os.path.join(Env.tmp, "cert.pem")
        openssl("req", "-new", "-x509", "-key", Env.key, "-subj", "/CN=test", "-days", "1", "-out", cert)
        self.assertEqual(gcs_test_server.load_rsa_public_key(cert), want)
        sa = os.path.join(Env.tmp, "sa.json")
        with open(sa, "w") as f:
            json.dump({"type": "service_account", "private_key": read(Env.key).decode()}, f)
        self.assertEqual(gcs_test_server.load_rsa_public_key(sa), want)

    def test_refresh_token_grant(self):
        form = {"grant_type": "refresh_token", "client_id": REFRESH[0], "client_secret": REFRESH[1],
                "refresh_token": REFRESH[2]}
        status, body = self.token(form)
        self.assertEqual(status, 200, body)
        self.assertTrue(body["access_token"].startswith("tok-"))
        status, body = self.token({**form, "client_secret": "wrong"})
        self.assertEqual((status, body["error"]), (400, "invalid_grant"))
        status, body = self.token({**form, "grant_type": "password"})
        self.assertEqual((status, body["error"]), (400, "unsupported_grant_type"))

    def test_metadata_server_needs_flavor_header(self):
        path = "/computeMetadata/v1/instance/service-accounts/default/token"
        status, h, body = self.s.request("GET", path, headers={"Metadata-Flavor": "Google"})
        self.assertEqual(status, 200)
        self.assertEqual(h["metadata-flavor"], "Google")
        self.assertEqual(json.loads(body)["token_type"], "Bearer")
        self.assertEqual(self.s.request("GET", path)[0], 403)
        status, _, body = self.s.request("GET", "/computeMetadata/v1/project/project-id",
                                         headers={"Metadata-Flavor": "Google"})
        self.assertEqual((status, body), (200, b"test-project"))
        stats = self.s.json("GET", "/_control/stats")
        self.assertEqual(stats["token_requests"], 2)
        self.assertEqual(stats["requests"], 0)


class RequireAuthTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = ServerProcess(Env.data, "--require-auth", "--token-lifetime", "1", "--refresh-client-id", "a",
                              "--refresh-client-secret", "b", "--refresh-token", "c")

    @classmethod
    def tearDownClass(cls):
        cls.s.stop()

    def get_token(self):
        status, _, body = self.s.request("POST", "/token", b"grant_type=refresh_token&client_id=a&client_secret=b"
                                                           b"&refresh_token=c")
        self.assertEqual(status, 200)
        return json.loads(body)

    def test_storage_needs_an_issued_unexpired_token(self):
        url = "/storage/v1/b/objs/o/small.json"
        status, h, body = self.s.request("GET", url)
        self.assertEqual(status, 401)
        self.assertEqual(json.loads(body)["error"]["code"], 401)
        self.assertIn("www-authenticate", h)
        self.assertEqual(self.s.request("GET", url, headers={"Authorization": "Bearer tok-made-up"})[0], 401)
        token = self.get_token()
        self.assertEqual(token["expires_in"], 1)
        auth = {"Authorization": "Bearer " + token["access_token"]}
        self.assertEqual(self.s.request("GET", url, headers=auth)[0], 200)
        self.assertEqual(self.s.request("GET", url + "?alt=media", headers=auth)[0], 200)
        time.sleep(1.1)
        self.assertEqual(self.s.request("GET", url, headers=auth)[0], 401)
        stats = self.s.json("GET", "/_control/stats")
        self.assertEqual(stats["auth_headers"], {"Bearer": 4, "none": 1})
        self.assertEqual(self.s.request("GET", "/_control/health")[0], 200)

    def test_restart_on_the_same_port(self):
        c = self.s.conn()
        self.s.request("GET", "/_control/health", conn=c)  # leaves a connection behind
        port = self.s.port
        self.s.stop()
        self.s.start()
        self.assertEqual(self.s.port, port)
        self.assertEqual(self.s.request("GET", "/_control/health")[0], 200)
        c.close()


class ShapingAndStatsTest(ServerTest):
    URL = "/storage/v1/b/objs/o/big.bin?alt=media"

    def fetch(self, offset, length, conn=None):
        status, _, body = self.s.request("GET", self.URL, headers={"Range": f"bytes={offset}-{offset + length - 1}"},
                                         conn=conn)
        self.assertEqual((status, len(body)), (206, length))

    def parallel(self, n, length):
        threads = [threading.Thread(target=self.fetch, args=(i * length, length)) for i in range(n)]
        start = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return time.monotonic() - start

    def test_latency_is_added(self):
        self.s.control("POST", "/_control/shaping", {"latency_ms": 150})
        for path in ("/storage/v1/b/objs/o/small.json", "/storage/v1/b/objs/o?prefix=s"):
            start = time.monotonic()
            self.assertEqual(self.s.request("GET", path)[0], 200)
            self.assertGreaterEqual(time.monotonic() - start, 0.15)
        # Control requests are not shaped: with 10 minutes of latency, one still
        # answers before the connection's 30 s timeout (which only a hang reaches).
        self.s.control("POST", "/_control/shaping", {"latency_ms": 600_000})
        self.assertEqual(self.s.request("GET", "/_control/stats")[0], 200)

    def test_total_rate_caps_all_connections(self):
        rate = 20e6
        self.s.control("POST", "/_control/shaping", {"total_rate": rate})
        elapsed = self.parallel(4, 6_000_000)
        # A cap: never faster (a busy machine may well be slower).
        sys.stderr.write(f"\n  [total_rate {rate / 1e6:.0f} MB/s: 4 connections got {24e6 / elapsed / 1e6:.1f} MB/s] ")
        self.assertLessEqual(24e6 / elapsed, 1.3 * rate)

    def test_conn_rate_caps_each_connection(self):
        rate = 10e6
        self.s.control("POST", "/_control/shaping", {"conn_rate": rate})
        elapsed = self.parallel(3, 5_000_000)  # three connections, each at the cap
        sys.stderr.write(f"\n  [conn_rate {rate / 1e6:.0f} MB/s: each of 3 connections got {5e6 / elapsed / 1e6:.1f} MB/s] ")
        self.assertLessEqual(5e6 / elapsed, 1.3 * rate)

    def test_parallel_large_ranges_without_shaping_arrive_whole(self):
        """Four connections at once, two 16 MiB ranges each, without shaping
        (the sendfile path): each range arrives whole (fetch checks the status
        and the length). The server's speed is bench/'s to measure."""
        length = 16 << 20
        per_thread = 2
        c = [self.s.conn() for _ in range(4)]
        errors = []

        def worker(k, conn):
            try:
                for i in range(per_thread):
                    self.fetch(((k * per_thread + i) * length) % BIG_SIZE, length, conn)
            except Exception as e:  # reported on the test's thread
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(k, conn)) for k, conn in enumerate(c)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for conn in c:
            conn.close()
        self.assertEqual(errors, [])

    def test_counters(self):
        self.s.request("GET", "/storage/v1/b/objs/o?prefix=s")
        self.s.request("GET", "/storage/v1/b/objs/o/small.json", headers={"Authorization": "Bearer tok-x"})
        self.fetch(10, 100)
        self.fetch(1000, 5)
        self.s.request("GET", "/storage/v1/b/objs/o/small.json?alt=media")
        stats = self.s.json("GET", "/_control/stats")
        size = os.path.getsize(os.path.join(Env.data, "objs", "small.json"))
        self.assertEqual((stats["requests"], stats["media_requests"], stats["list_requests"],
                          stats["metadata_requests"]), (5, 3, 1, 1))
        self.assertEqual(stats["bytes_served"], 105 + size)
        self.assertEqual(stats["ranges"], [[10, 100, "big.bin"], [1000, 5, "big.bin"], [0, size, "small.json"]])
        self.assertEqual(stats["auth_headers"], {"Bearer": 1, "none": 4})
        self.s.control("POST", "/_control/stats/reset")
        stats = self.s.json("GET", "/_control/stats")
        self.assertEqual((stats["requests"], stats["bytes_served"], stats["ranges"]), (0, 0, []))

    def test_bytes_served_counts_only_sent_bytes(self):
        self.s.control("POST", "/_control/faults", [{"match": {"media": True}, "action": "truncate_after",
                                                     "bytes": 777}])
        self.s.raw(get_request(self.URL, "Range: bytes=0-99999\r\n"))
        stats = self.s.json("GET", "/_control/stats")
        self.assertEqual(stats["bytes_served"], 777)
        self.assertEqual(stats["faults_applied"], 1)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from daemon_check import run_tests
    run_tests()
