#!/usr/bin/python3
"""tensorfs in a container with a memory limit and no cache_size: the default
cache follows the cgroup's limit, so reading a whole checkpoint larger than the
limit (every file's sha256, then every tensor in random order through mmap)
keeps the process under it (no OOM kill), with every byte right. With
cache_size=2G given instead, the random-order pass gets tensorfs OOM-killed.

The limit is set as a pod's would be: `systemd-run --scope -p MemoryMax=` where
systemd manages the machine; otherwise a cgroup made directly, v2 (memory.max,
under the root) or, where the memory controller is still on cgroup v1,
memory.limit_in_bytes (with memory.memsw.limit_in_bytes, so swap cannot hide
an overrun). The peak is the cgroup's own record (memory.peak or
memory.max_usage_in_bytes), and the OOM kills its count.

  TENSORFS_BINARY=... TENSORFS_TESTDATA=... tests/fs/cgroup_memory_test.py

Every wait has a 60 s limit that only catches hangs.
"""
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SUPPORT = os.path.join(HERE, "..", "support")
TENSORFS = os.environ.get("TENSORFS_BINARY", "")
TESTDATA = os.environ.get("TENSORFS_TESTDATA", "")
HANG_GUARD_S = 60
MIB = 1 << 20
LIMIT = 256 * MIB
CHECKPOINT_MIB = 320  # more than the limit: a cache that ignored it would be killed


def mountinfo():
    with open("/proc/self/mountinfo") as f:
        for line in f:
            head, _, tail = line.partition(" - ")
            yield head.split(), tail.split()


class Cgroup:
    """A fresh memory cgroup limited to LIMIT (or, with adopt_pid, the one
    systemd-run made for that process), with its peak and OOM kills."""

    def __init__(self, adopt_pid=None):
        self.kind = None
        self.path = None
        self.owned = adopt_pid is None
        if adopt_pid is not None:  # the cgroup systemd-run made for this process
            v2_root = next(h[4] for h, t in mountinfo() if t[0] == "cgroup2")
            with open("/proc/%d/cgroup" % adopt_pid) as f:
                own = next(l.split(":", 2)[2].strip() for l in f if l.startswith("0::"))
            self.path, self.kind = v2_root + own, "v2"
            return
        v1_root = next((h[4] for h, t in mountinfo() if t[0] == "cgroup" and "memory" in t[2].split(",")), None)
        v2_root = next((h[4] for h, t in mountinfo() if t[0] == "cgroup2"), None)
        name = "tensorfs_test.%d" % os.getpid()
        if v1_root is not None:
            with open("/proc/self/cgroup") as f:
                own = next(l.split(":", 2)[2].strip() for l in f if ":memory:" in l)
            self.path = os.path.join(v1_root + own, name)
            os.mkdir(self.path)
            self.kind = "v1"
            self.write("memory.limit_in_bytes", LIMIT)
            if os.path.exists(os.path.join(self.path, "memory.memsw.limit_in_bytes")):
                self.write("memory.memsw.limit_in_bytes", LIMIT)
        elif v2_root is not None:
            with open(os.path.join(v2_root, "cgroup.controllers")) as f:
                if "memory" not in f.read().split():
                    raise unittest.SkipTest("cgroup v2 without the memory controller")
            with open(os.path.join(v2_root, "cgroup.subtree_control"), "w") as f:
                f.write("+memory")
            self.path = os.path.join(v2_root, name)
            os.mkdir(self.path)
            self.kind = "v2"
            self.write("memory.max", LIMIT)
            self.write("memory.swap.max", 0)
        else:
            raise unittest.SkipTest("no memory cgroup on this machine")

    def write(self, name, value):
        with open(os.path.join(self.path, name), "w") as f:
            f.write(str(value))

    def read(self, name):
        with open(os.path.join(self.path, name)) as f:
            return f.read()

    def peak(self):
        return int(self.read("memory.max_usage_in_bytes" if self.kind == "v1" else "memory.peak"))

    def oom_kills(self):
        text = self.read("memory.oom_control" if self.kind == "v1" else "memory.events")
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def remove(self):
        if self.path is None or not self.owned:
            return
        deadline = time.monotonic() + HANG_GUARD_S
        while time.monotonic() < deadline:
            try:
                os.rmdir(self.path)
                return
            except OSError:
                time.sleep(0.1)  # its last process is still exiting


def systemd_run_works():
    r = subprocess.run(["systemd-run", "--scope", "--quiet", "true"], capture_output=True, timeout=HANG_GUARD_S)
    return r.returncode == 0


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            block = f.read(1 << 20)
            if not block:
                return h.hexdigest()
            h.update(block)


class CgroupMemoryTest(unittest.TestCase):
    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="tensorfs_cgroup.")
        self.model = os.path.join(self.work, "data", "bucket", "big")
        subprocess.run([TESTDATA, "--arch", "llama", "--size-mib", str(CHECKPOINT_MIB), "--shards", "4", "--out",
                        self.model], check=True, capture_output=True, timeout=HANG_GUARD_S * 5)
        port_file = os.path.join(self.work, "port")
        self.server = subprocess.Popen([sys.executable, os.path.join(SUPPORT, "gcs_test_server.py"), "--data",
                                        os.path.join(self.work, "data"), "--port", "0", "--port-file", port_file,
                                        "--quiet"])
        deadline = time.monotonic() + HANG_GUARD_S
        while not os.path.exists(port_file):
            self.assertLess(time.monotonic(), deadline, "the GCS test server did not start")
            time.sleep(0.05)
        with open(port_file) as f:
            self.endpoint = "http://127.0.0.1:" + f.read().strip()
        self.mountpoint = os.path.join(self.work, "mnt")
        os.mkdir(self.mountpoint)
        self.cgroup = None
        self.process = None
        self.log_file = open(os.path.join(self.work, "tensorfs.log"), "w")

    def log(self):
        with open(self.log_file.name) as f:
            return f.read()

    def tearDown(self):
        subprocess.run(["fusermount3", "-u", "-z", self.mountpoint], capture_output=True)
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
        if self.process is not None:
            self.process.wait(HANG_GUARD_S)
        self.server.terminate()
        self.server.wait(HANG_GUARD_S)
        self.log_file.close()
        if self.cgroup is not None:
            self.cgroup.remove()
        shutil.rmtree(self.work, ignore_errors=True)

    def wait_mounted(self):
        deadline = time.monotonic() + HANG_GUARD_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.fail("tensorfs exited: " + self.log())
            with open("/proc/self/mountinfo") as f:
                if any(line.split()[4] == self.mountpoint for line in f):
                    return
            time.sleep(0.05)
        self.fail("not mounted within %d s" % HANG_GUARD_S)

    def test_reading_a_checkpoint_larger_than_the_limit_stays_under_it(self):
        argv = [TENSORFS, "gs://bucket/big", self.mountpoint, "-f", "-o", "endpoint=%s,anonymous" % self.endpoint]
        if systemd_run_works():
            how = "systemd-run --scope -p MemoryMax"
            self.process = subprocess.Popen(["systemd-run", "--scope", "--quiet", "-p", "MemoryMax=%d" % LIMIT, "-p",
                                             "MemorySwapMax=0"] + argv,
                                            stdout=self.log_file, stderr=subprocess.STDOUT)
            self.wait_mounted()
            self.cgroup = Cgroup(adopt_pid=self.process.pid)
        else:
            self.cgroup = Cgroup()
            how = "cgroup %s at %s" % (self.cgroup.kind, self.cgroup.path)
            procs = os.path.join(self.cgroup.path, "cgroup.procs")
            self.process = subprocess.Popen(["sh", "-c", 'echo $$ > "$0" && exec "$@"', procs] + argv,
                                            stdout=self.log_file, stderr=subprocess.STDOUT)
        self.wait_mounted()
        for dirpath, _, names in os.walk(self.model):
            for name in names:
                rel = os.path.relpath(os.path.join(dirpath, name), self.model)
                self.assertEqual(sha256_of(os.path.join(self.mountpoint, rel)),
                                 sha256_of(os.path.join(self.model, rel)), rel)
        # Then every tensor in random order, as a loader that jumps around does:
        # with a cache sized past the limit, this is what gets tensorfs killed.
        r = subprocess.run(["/usr/bin/python3", os.path.join(SUPPORT, "mmap_loader.py"), self.mountpoint, "--order",
                            "random", "--compare", self.model], capture_output=True, text=True,
                           timeout=HANG_GUARD_S * 10)
        loader = r.stdout[-2000:] + r.stderr[-2000:]
        peak = self.cgroup.peak()
        kills = self.cgroup.oom_kills()
        alive = self.process.poll() is None
        subprocess.run(["fusermount3", "-u", self.mountpoint], capture_output=True, timeout=HANG_GUARD_S)
        self.process.wait(HANG_GUARD_S)
        log = self.log()
        print("%s: limit %d MiB, checkpoint %d MiB, peak %d MiB" % (how, LIMIT // MIB, CHECKPOINT_MIB, peak // MIB),
              file=sys.stderr)
        self.assertTrue(alive, log)
        self.assertEqual(kills, 0, log)
        self.assertEqual(r.returncode, 0, loader)
        self.assertLessEqual(peak, LIMIT)
        self.assertIn("of the cgroup memory limit %d MiB" % (LIMIT // MIB), log)


if __name__ == "__main__":
    if os.geteuid() != 0 or not TENSORFS or not TESTDATA:
        print("needs root, TENSORFS_BINARY and TENSORFS_TESTDATA", file=sys.stderr)
        sys.exit(1)
    unittest.main()
