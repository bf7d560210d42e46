#!/usr/bin/python3
"""tensorfs serving a /dev/fuse descriptor that a privileged parent mounted, as a
Kubernetes node plugin hands it to a pod: `tensorfs SOURCE /dev/fd/N`, run as
uid 65534 without any capability, in a mount namespace whose /dev has no fuse
node. Parents: this script (ctypes mount(2) with the mount data gcsfuse's CSI
driver uses), mount.fuse3 -o drop_privileges, and a fake node plugin speaking
`tensorfs handoff`'s protocol (socket.send_fds). What a user would check: every
file's sha256 and an mmap loader's tensors equal the source.

  TENSORFS_BINARY=build/release/fs/tensorfs \
  TENSORFS_TESTDATA=build/release/tests/support/tensorfs-testdata \
      tests/fs/descriptor_mount_test.py [-k NAME]

Every wait has a 60 s limit that only catches hangs; nothing asserts on time.
"""
import hashlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SUPPORT = os.path.join(HERE, "..", "support")
TENSORFS = os.environ.get("TENSORFS_BINARY", "")
TESTDATA = os.environ.get("TENSORFS_TESTDATA", "")
HANG_GUARD_S = 60

sys.path.insert(0, SUPPORT)
from fuse_fd_parent import GCSFUSE_DATA, kernel_mount, mount_device, mounted, unmount  # noqa: E402

# uid 65534, no capability at all, no way to gain one.
UNPRIVILEGED = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
                "--bounding-set=-all", "--no-new-privs"]


def sandboxed(argv, hide=()):
    """argv run unprivileged in a new mount namespace whose /dev is a fresh
    tmpfs (no fuse node) and in which the mounts in `hide` are detached, as a
    sidecar's namespace does not hold the workload's mount (a copy of it
    would keep the FUSE connection alive after the parent unmounts)."""
    script = "set -e; mount -t tmpfs -o mode=755 tmpfs /dev; ln -s /proc/self/fd /dev/fd; "
    script += "".join("umount -l -c %s; " % shlex.quote(m) for m in hide)  # -c: no stat of the mount
    script += "test ! -e /dev/fuse; exec \"$@\""
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh"] + UNPRIVILEGED + argv


def print_mount_params(*options):
    out = subprocess.run([TENSORFS, "--print-mount-params"] + list(options), check=True, capture_output=True,
                         text=True, timeout=HANG_GUARD_S).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if line and not line.startswith("#"))


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            block = f.read(1 << 20)
            if not block:
                return h.hexdigest()
            h.update(block)


def source_files(root):
    for dirpath, _, names in os.walk(root):
        for name in names:
            yield os.path.relpath(os.path.join(dirpath, name), root)


def wait_serving(path, process):
    """Waits until `path` answers a stat (the mount serves), or fails."""
    deadline = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise AssertionError("tensorfs exited with %s before serving" % process.returncode)
        r = subprocess.run(["stat", "-c", "%i", path], capture_output=True, timeout=HANG_GUARD_S)
        if r.returncode == 0 and r.stdout.strip() == b"1":
            return
        time.sleep(0.1)
    raise AssertionError("%s did not serve within %d s" % (path, HANG_GUARD_S))


class Output:
    """Collects a process's output on a thread, so a full pipe never stalls it."""

    def __init__(self, process):
        self.text = ""
        self._thread = threading.Thread(target=self._read, args=(process,), daemon=True)
        self._thread.start()

    def _read(self, process):
        for line in process.stdout:
            self.text += line

    def wait(self):
        self._thread.join(HANG_GUARD_S)
        return self.text


class DescriptorMountTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="tensorfs_descriptor.")
        os.chmod(cls.work, 0o755)
        cls.data = os.path.join(cls.work, "data")
        cls.model = os.path.join(cls.data, "bucket", "llama")
        subprocess.run([TESTDATA, "--arch", "llama", "--size-mib", "48", "--shards", "3", "--out", cls.model],
                       check=True, capture_output=True, timeout=HANG_GUARD_S)
        port_file = os.path.join(cls.work, "port")
        cls.server = subprocess.Popen([sys.executable, os.path.join(SUPPORT, "gcs_test_server.py"), "--data",
                                       cls.data, "--port", "0", "--port-file", port_file, "--quiet"])
        deadline = time.monotonic() + HANG_GUARD_S
        while not os.path.exists(port_file):
            if time.monotonic() > deadline or cls.server.poll() is not None:
                raise RuntimeError("the GCS test server did not start")
            time.sleep(0.05)
        with open(port_file) as f:
            cls.endpoint = "http://127.0.0.1:" + f.read().strip()
        cls.source = "gs://bucket/llama"
        cls.options = "endpoint=%s,anonymous" % cls.endpoint

    @classmethod
    def tearDownClass(cls):
        cls.server.terminate()
        cls.server.wait(HANG_GUARD_S)
        shutil.rmtree(cls.work, ignore_errors=True)

    def setUp(self):
        self.mountpoint = tempfile.mkdtemp(prefix="mnt.", dir=self.work)
        os.chmod(self.mountpoint, 0o755)
        self.processes = []

    def tearDown(self):
        unmount(self.mountpoint)
        for p in self.processes:
            if p.poll() is None:
                p.kill()
            p.wait(HANG_GUARD_S)
            p.stdout.close()
        os.rmdir(self.mountpoint)

    def start(self, argv, **kwargs):
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs)
        self.processes.append(p)
        return p, Output(p)

    def assert_same_as_source(self, mounted):
        """Every source file's sha256, then every tensor as an mmap loader reads it."""
        files = sorted(source_files(self.model))
        self.assertTrue(files)
        for rel in files:
            self.assertEqual(sha256_of(os.path.join(mounted, rel)), sha256_of(os.path.join(self.model, rel)), rel)
        r = subprocess.run([sys.executable, os.path.join(SUPPORT, "mmap_loader.py"), mounted, "--compare",
                            self.model], capture_output=True, text=True, timeout=HANG_GUARD_S * 5)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def serve_unprivileged(self, data, read_ahead_kb=None, extra_options=""):
        """The parent mounts with `data`, then tensorfs serves the descriptor,
        unprivileged, with no /dev/fuse; returns (process, output)."""
        fd = kernel_mount(self.mountpoint, self.source, data)
        try:
            if read_ahead_kb is not None:
                with open("/sys/class/bdi/%s/read_ahead_kb" % mount_device(self.mountpoint), "w") as f:
                    f.write(str(read_ahead_kb))
            options = self.options + ("," + extra_options if extra_options else "")
            return self.start(sandboxed([TENSORFS, self.source, "/dev/fd/%d" % fd, "-f", "-o", options],
                                        hide=[self.mountpoint]), pass_fds=[fd])
        finally:
            os.close(fd)  # the child holds it now

    def test_print_mount_params_names_what_the_parent_applies(self):
        params = print_mount_params()
        self.assertEqual(params["fstype"], "fuse.tensorfs")
        self.assertEqual(params["flags"], "MS_NOSUID|MS_NODEV|MS_RDONLY")
        self.assertIn("max_read=1048576", params["data"])
        self.assertIn("rootmode=40000", params["data"])
        self.assertNotIn("allow_other", params["data"])
        self.assertEqual(params["read_ahead_kb"], "128")
        params = print_mount_params("-o", "allow_other,read_ahead=4M")
        self.assertIn(",allow_other", params["data"])
        self.assertEqual(params["read_ahead_kb"], "4096")

    def test_unprivileged_serves_what_a_python_parent_mounted(self):
        params = print_mount_params()
        process, output = self.serve_unprivileged(params["data"] + ",allow_other", params["read_ahead_kb"])
        wait_serving(self.mountpoint, process)
        self.assert_same_as_source(self.mountpoint)
        log = output.text
        self.assertNotIn("clone", log.lower(), "no line about clone_fd: " + log)
        unmount(self.mountpoint)
        self.assertEqual(process.wait(HANG_GUARD_S), 0, output.wait())

    def test_any_max_read_in_the_mount_data_works(self):
        # gcsfuse's data has no max_read (the kernel's is then unlimited); a
        # parent may also choose a smaller one. INIT must not fail either way.
        for data in (GCSFUSE_DATA, GCSFUSE_DATA + ",max_read=131072"):
            with self.subTest(data=data):
                process, output = self.serve_unprivileged(data)
                wait_serving(self.mountpoint, process)
                self.assert_same_as_source(self.mountpoint)
                unmount(self.mountpoint)
                self.assertEqual(process.wait(HANG_GUARD_S), 0, output.wait())

    def test_kernel_side_options_are_left_to_the_parent_with_one_message(self):
        process, output = self.serve_unprivileged(GCSFUSE_DATA, extra_options="allow_other,read_ahead=4M")
        wait_serving(self.mountpoint, process)
        with open(os.path.join(self.mountpoint, "config.json"), "rb") as f:
            self.assertTrue(f.read())
        unmount(self.mountpoint)
        self.assertEqual(process.wait(HANG_GUARD_S), 0)
        log = output.wait()
        notes = [line for line in log.splitlines() if "the parent that mounted sets these" in line]
        self.assertEqual(len(notes), 1, log)
        self.assertIn("allow_other (put allow_other in the mount data)", notes[0])
        self.assertIn("read_ahead (write 4096 to the mount's /sys/class/bdi/MAJOR:MINOR/read_ahead_kb)", notes[0])
        self.assertNotIn("read_ahead:", log, "nothing tried to write sysfs")

    def test_mount_fuse3_drop_privileges_runs_tensorfs_on_a_descriptor(self):
        bindir = os.path.join(self.work, "bin")
        os.makedirs(bindir, exist_ok=True)
        if not os.path.exists(os.path.join(bindir, "tensorfs")):
            os.symlink(os.path.abspath(TENSORFS), os.path.join(bindir, "tensorfs"))
        env = dict(os.environ, PATH=bindir + ":" + os.environ.get("PATH", "/usr/bin:/bin"))
        # mount.fuse3 stays in the foreground as the file system (-f in its options).
        process, output = self.start(["mount.fuse3", "tensorfs#" + self.source, self.mountpoint, "-o",
                                      "drop_privileges,foreground," + self.options], env=env)
        wait_serving(self.mountpoint, process)
        self.assert_same_as_source(self.mountpoint)
        unmount(self.mountpoint)
        self.assertEqual(process.wait(HANG_GUARD_S), 0, output.wait())

    def test_handoff_serves_each_socket_and_reports_failures_beside_it(self):
        sockets = os.path.join(self.work, "sockets")
        os.makedirs(sockets, exist_ok=True)
        os.chmod(sockets, 0o777)  # tensorfs, as uid 65534, connects and writes SOCKET.error here
        good_mnt, bad_mnt = self.mountpoint, tempfile.mkdtemp(prefix="mnt.", dir=self.work)
        os.chmod(bad_mnt, 0o755)
        listeners = {}
        for name in ("good", "bad"):
            path = os.path.join(sockets, name)
            if os.path.exists(path):
                os.unlink(path)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(path)
            os.chmod(path, 0o777)
            s.listen(1)
            s.settimeout(HANG_GUARD_S)
            listeners[name] = s
        try:
            process, output = self.start(sandboxed([TENSORFS, "handoff", sockets]))
            messages = {
                "good": {"source": self.source, "options": self.options.split(",")},
                "bad": {"source": "gs://no-such-bucket/x", "options": self.options},
            }
            targets = {"good": good_mnt, "bad": bad_mnt}
            for name in ("bad", "good"):  # in the order handoff connects (sorted names)
                conn, _ = listeners[name].accept()
                with conn:
                    # The plugin mounts once the pod's side has connected: its
                    # namespace then holds no copy of the mount.
                    fd = kernel_mount(targets[name], messages[name]["source"], GCSFUSE_DATA)
                    socket.send_fds(conn, [json.dumps(messages[name]).encode()], [fd])
                    os.close(fd)
            wait_serving(good_mnt, process)
            self.assert_same_as_source(good_mnt)
            # The failed mount does not take the other down; its reason is beside its socket.
            deadline = time.monotonic() + HANG_GUARD_S
            while not os.path.exists(os.path.join(sockets, "bad.error")) and time.monotonic() < deadline:
                time.sleep(0.1)
            with open(os.path.join(sockets, "bad.error")) as f:
                error = f.read()
            self.assertIn("no-such-bucket", error)
            self.assertFalse(os.path.exists(os.path.join(sockets, "good.error")))
            with open(os.path.join(good_mnt, "config.json"), "rb") as f:
                self.assertTrue(f.read())
            self.assertIsNone(process.poll(), "handoff keeps running while a mount is served")
            unmount(good_mnt)
            # Every mount has ended: handoff exits, 1 since one of them failed.
            self.assertEqual(process.wait(HANG_GUARD_S), 1, output.wait())
            self.assertIn("[bad]", output.text)
        finally:
            for s in listeners.values():
                s.close()
            unmount(bad_mnt)
            os.rmdir(bad_mnt)

    def test_s3_source_on_a_descriptor(self):
        # The same checkpoint through the server's S3 dialect: s3:// takes the
        # descriptor path as gs:// does.
        params = print_mount_params()
        fd = kernel_mount(self.mountpoint, "s3://bucket/llama", params["data"])
        try:
            process, output = self.start(sandboxed([TENSORFS, "s3://bucket/llama", "/dev/fd/%d" % fd, "-f", "-o",
                                                    "endpoint=%s,no_sign_request" % self.endpoint],
                                                   hide=[self.mountpoint]), pass_fds=[fd])
        finally:
            os.close(fd)
        wait_serving(self.mountpoint, process)
        self.assert_same_as_source(self.mountpoint)
        unmount(self.mountpoint)
        self.assertEqual(process.wait(HANG_GUARD_S), 0, output.wait())

    def test_handoff_passes_sigterm_to_its_mounts_and_exits_cleanly(self):
        sockets = os.path.join(self.work, "sockets_term")
        os.makedirs(sockets, exist_ok=True)
        os.chmod(sockets, 0o777)
        path = os.path.join(sockets, "vol")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(path)
        os.chmod(path, 0o777)
        s.listen(1)
        s.settimeout(HANG_GUARD_S)
        try:
            process, output = self.start(sandboxed([TENSORFS, "handoff", sockets]))
            conn, _ = s.accept()
            with conn:
                fd = kernel_mount(self.mountpoint, self.source, GCSFUSE_DATA)
                socket.send_fds(conn, [json.dumps({"source": self.source, "options": self.options}).encode()], [fd])
                os.close(fd)
            wait_serving(self.mountpoint, process)
            process.send_signal(signal.SIGTERM)
            self.assertEqual(process.wait(HANG_GUARD_S), 0, output.wait())
            self.assertFalse(os.path.exists(path + ".error"))
        finally:
            s.close()
            os.unlink(path)

    def test_handoff_rejects_a_message_without_a_descriptor(self):
        sockets = os.path.join(self.work, "sockets_nofd")
        os.makedirs(sockets, exist_ok=True)
        os.chmod(sockets, 0o777)
        path = os.path.join(sockets, "vol")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(path)
        os.chmod(path, 0o777)
        s.listen(1)
        s.settimeout(HANG_GUARD_S)
        try:
            process, output = self.start(sandboxed([TENSORFS, "handoff", sockets]))
            conn, _ = s.accept()
            with conn:
                conn.sendall(json.dumps({"source": self.source}).encode())
            self.assertEqual(process.wait(HANG_GUARD_S), 1, output.wait())
            with open(path + ".error") as f:
                self.assertIn("send exactly one, the /dev/fuse descriptor", f.read())
        finally:
            s.close()


if __name__ == "__main__":
    if os.geteuid() != 0 or not TENSORFS or not TESTDATA:
        print("needs root, TENSORFS_BINARY and TENSORFS_TESTDATA", file=sys.stderr)
        sys.exit(1)
    unittest.main()
