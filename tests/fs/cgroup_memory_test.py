#!/usr/bin/python3
"""tensorfs in a container with a memory limit:
  - without cache_size, the default cache follows the cgroup's limit, so
    reading a whole checkpoint larger than the limit (every file's sha256,
    then every tensor in random order through mmap) keeps the process alive
    (no OOM kill), with every byte right;
  - the negative control: cache_size=2G given in the same cgroup is refused at
    start (exit status 2, saying what fits), as README says, instead of
    getting the mount OOM-killed on a later read.

The limit is set on a cgroup made for the test: v2 (memory.max, under the
root) or, where the memory controller is still on cgroup v1,
memory.limit_in_bytes (with memory.memsw.limit_in_bytes, so swap cannot hide
an overrun). The peak is the cgroup's own record (memory.peak or
memory.max_usage_in_bytes), printed; the OOM kills are counted.

A kernel without the memory controller (CONFIG_MEMCG) cannot run the test: it
says so in one "NOT RUN:" line (kernel_features.py), which the suite's summary
lists apart. A kernel that has it where no memory cgroup is mounted fails the
test. What the
test changes is undone at its end, and by `--cleanup` (a ctest cleanup
fixture that runs even when the test was killed): the cgroups it made
(tensorfs_test.*) and, on cgroup v2, the memory controller it enabled in the
root's cgroup.subtree_control.

  TENSORFS_BINARY=... TENSORFS_TESTDATA=... tests/fs/cgroup_memory_test.py [--cleanup]

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
sys.path.insert(0, SUPPORT)
from daemon_check import check_end, run_tests  # noqa: E402
from kernel_features import has_cgroup_controller, not_run  # noqa: E402

TENSORFS = os.environ.get("TENSORFS_BINARY", "")
TESTDATA = os.environ.get("TENSORFS_TESTDATA", "")
HANG_GUARD_S = 60
MIB = 1 << 20
LIMIT = 256 * MIB
CHECKPOINT_MIB = 320  # more than the limit: a cache that ignored it would be killed
CGROUP_PREFIX = "tensorfs_test."
# Present while the memory controller is enabled in the v2 root by this test.
ENABLED_MARKER = "/run/tensorfs-test-enabled-memory-controller"


def mountinfo():
    with open("/proc/self/mountinfo") as f:
        for line in f:
            head, _, tail = line.partition(" - ")
            yield head.split(), tail.split()


class Cgroup:
    """A fresh memory cgroup limited to LIMIT, with its peak and OOM kills."""

    def __init__(self):
        self.kind = None
        self.path = None
        v1_root = next((h[4] for h, t in mountinfo() if t[0] == "cgroup" and "memory" in t[2].split(",")), None)
        v2_root = next((h[4] for h, t in mountinfo() if t[0] == "cgroup2"), None)
        name = CGROUP_PREFIX + "%d" % os.getpid()
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
                    raise AssertionError("cgroup v2 without the memory controller: this test needs one")
            with open(os.path.join(v2_root, "cgroup.subtree_control")) as f:
                enabled = "memory" in f.read().split()
            if not enabled:
                open(ENABLED_MARKER, "w").close()  # undone by remove(), or by --cleanup
                with open(os.path.join(v2_root, "cgroup.subtree_control"), "w") as f:
                    f.write("+memory")
            self.path = os.path.join(v2_root, name)
            os.mkdir(self.path)
            self.kind = "v2"
            self.write("memory.max", LIMIT)
            self.write("memory.swap.max", 0)
        else:
            raise AssertionError("no memory cgroup on this machine: this test needs one")

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
        if self.path is None:
            return
        deadline = time.monotonic() + HANG_GUARD_S
        while time.monotonic() < deadline:
            try:
                os.rmdir(self.path)
                break
            except OSError:
                time.sleep(0.1)  # its last process is still exiting
        restore_root_controllers()


def restore_root_controllers():
    """Disables the v2 root's memory controller again if this test enabled it."""
    if not os.path.exists(ENABLED_MARKER):
        return
    v2_root = next((h[4] for h, t in mountinfo() if t[0] == "cgroup2"), None)
    if v2_root is not None:
        try:
            with open(os.path.join(v2_root, "cgroup.subtree_control"), "w") as f:
                f.write("-memory")
        except OSError as e:
            print("cannot disable the memory controller of %s again: %s" % (v2_root, e), file=sys.stderr)
            return
    os.unlink(ENABLED_MARKER)


def cleanup():
    """Removes what a killed run of this test left: its cgroups, the controller it enabled."""
    for h, t in mountinfo():
        if t[0] not in ("cgroup", "cgroup2"):
            continue
        for dirpath, dirnames, _ in os.walk(h[4]):
            for d in dirnames:
                if d.startswith(CGROUP_PREFIX):
                    path = os.path.join(dirpath, d)
                    try:
                        os.rmdir(path)
                        print("removed " + path)
                    except OSError as e:
                        print("cannot remove %s: %s" % (path, e), file=sys.stderr)
            dirnames[:] = [d for d in dirnames if not d.startswith(CGROUP_PREFIX)]
    restore_root_controllers()


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
        os.makedirs(self.model)
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

    def start_limited(self, options):
        """tensorfs in a cgroup limited to LIMIT; returns how the limit was set."""
        argv = [TENSORFS, "gs://bucket/big", self.mountpoint, "-f", "-o",
                "endpoint=%s,anonymous%s" % (self.endpoint, options)]
        self.cgroup = Cgroup()
        procs = os.path.join(self.cgroup.path, "cgroup.procs")
        self.process = subprocess.Popen(["sh", "-c", 'echo $$ > "$0" && exec "$@"', procs] + argv,
                                        stdout=self.log_file, stderr=subprocess.STDOUT)
        return "cgroup %s at %s" % (self.cgroup.kind, self.cgroup.path)

    def test_reading_a_checkpoint_larger_than_the_limit_keeps_the_mount_alive(self):
        subprocess.run([TESTDATA, "--arch", "llama", "--size-mib", str(CHECKPOINT_MIB), "--shards", "4", "--out",
                        self.model], check=True, capture_output=True, timeout=HANG_GUARD_S * 5)
        how = self.start_limited("")
        self.wait_mounted()
        for dirpath, _, names in os.walk(self.model):
            for name in names:
                rel = os.path.relpath(os.path.join(dirpath, name), self.model)
                self.assertEqual(sha256_of(os.path.join(self.mountpoint, rel)),
                                 sha256_of(os.path.join(self.model, rel)), rel)
        # Then every tensor in random order, as a loader that jumps around does:
        # with a cache sized past the limit, this is what would get tensorfs killed.
        r = subprocess.run(["/usr/bin/python3", os.path.join(SUPPORT, "mmap_loader.py"), self.mountpoint, "--order",
                            "random", "--compare", self.model], capture_output=True, text=True,
                           timeout=HANG_GUARD_S * 10)
        loader = r.stdout[-2000:] + r.stderr[-2000:]
        peak = self.cgroup.peak()
        kills = self.cgroup.oom_kills()
        alive = self.process.poll() is None
        subprocess.run(["fusermount3", "-u", self.mountpoint], capture_output=True, timeout=HANG_GUARD_S)
        print("%s: limit %d MiB, checkpoint %d MiB, peak %d MiB" % (how, LIMIT // MIB, CHECKPOINT_MIB, peak // MIB),
              file=sys.stderr)
        self.assertTrue(alive, self.log())
        self.assertEqual(kills, 0, self.log())
        self.assertEqual(r.returncode, 0, loader)
        check_end(self, self.process, "fusermount3 -u", log=self.log)
        self.assertIn("of the cgroup memory limit %d MiB" % (LIMIT // MIB), self.log())

    def test_a_cache_size_over_the_limit_is_refused_at_start_not_killed_later(self):
        self.start_limited(",cache_size=2G")
        check_end(self, self.process, "a cache_size the limit cannot hold", expected=2, log=self.log)
        log = self.log()
        self.assertIn("cache_size=2048M does not fit the memory limit of this cgroup (%d MiB" % (LIMIT // MIB), log)
        self.assertIn("set cache_size to at most %dM" % (LIMIT // MIB - 128), log)
        self.assertEqual(self.cgroup.oom_kills(), 0, log)
        with open("/proc/self/mountinfo") as f:
            self.assertFalse(any(line.split()[4] == self.mountpoint for line in f), "nothing was mounted")


if __name__ == "__main__":
    if sys.argv[1:] == ["--cleanup"]:
        cleanup()
        sys.exit(0)
    if os.geteuid() != 0 or not TENSORFS or not TESTDATA:
        print("needs root, TENSORFS_BINARY and TENSORFS_TESTDATA", file=sys.stderr)
        sys.exit(1)
    if not has_cgroup_controller("memory"):
        not_run("cgroup_memory_test", "CONFIG_MEMCG", "no enabled memory controller in /proc/cgroups")
    run_tests()
