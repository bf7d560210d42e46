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
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SUPPORT = os.path.join(HERE, "..", "support")
TENSORFS = os.environ.get("TENSORFS_BINARY", "")
TESTDATA = os.environ.get("TENSORFS_TESTDATA", "")

sys.path.insert(0, SUPPORT)
from daemon_check import check_end, run_tests  # noqa: E402
from fuse_fd_parent import GCSFUSE_DATA, kernel_mount, mount_device, mounted, unmount  # noqa: E402
from container import HANG_GUARD_S, Output, sandboxed, sha256_of, start_gcs_server, wait_serving  # noqa: E402


def print_mount_params(*options):
    out = subprocess.run([TENSORFS, "--print-mount-params"] + list(options), check=True, capture_output=True,
                         text=True, timeout=HANG_GUARD_S).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if line and not line.startswith("#"))


def source_files(root):
    for dirpath, _, names in os.walk(root):
        for name in names:
            yield os.path.relpath(os.path.join(dirpath, name), root)


def fuse_descriptors(pid):
    """How many of process `pid`'s open files are /dev/fuse (character device 10:229)."""
    n = 0
    for fd in os.listdir("/proc/%d/fd" % pid):
        path = "/proc/%d/fd/%s" % (pid, fd)
        try:
            st = os.stat(path)
        except OSError:
            continue
        if not os.path.isdir(path) and os.major(st.st_rdev) == 10 and os.minor(st.st_rdev) == 229:
            n += 1
    return n


class DescriptorMountTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="tensorfs_descriptor.")
        os.chmod(cls.work, 0o755)
        cls.data = os.path.join(cls.work, "data")
        cls.model = os.path.join(cls.data, "bucket", "llama")
        subprocess.run([TESTDATA, "--arch", "llama", "--size-mib", "48", "--shards", "3", "--out", cls.model],
                       check=True, capture_output=True, timeout=HANG_GUARD_S)
        cls.server, cls.endpoint = start_gcs_server(cls.data, cls.work)
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
        return p, Output(p.stdout)

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
        # With no /dev/fuse to open, its workers cannot clone the descriptor:
        # every one of them serves the one the parent handed over.
        threads = len(os.listdir("/proc/%d/task" % process.pid))
        self.assertGreater(threads, 2, "several worker threads have served the reads")
        self.assertEqual(fuse_descriptors(process.pid), 1, "one /dev/fuse descriptor, shared by %d threads" % threads)
        unmount(self.mountpoint)
        check_end(self, process, "the parent's unmount", log=output.wait)

    def test_the_readahead_the_parent_set_is_kept(self):
        # README: in descriptor mode the parent owns the kernel-side settings;
        # tensorfs writes nothing to sysfs, so the parent's 512 KiB stays.
        process, output = self.serve_unprivileged(GCSFUSE_DATA, read_ahead_kb=512)
        wait_serving(self.mountpoint, process)
        self.assert_same_as_source(self.mountpoint)
        with open("/sys/class/bdi/%s/read_ahead_kb" % mount_device(self.mountpoint)) as f:
            self.assertEqual(f.read().strip(), "512", output.text)
        unmount(self.mountpoint)
        check_end(self, process, "the parent's unmount", log=output.wait)

    def test_any_max_read_in_the_mount_data_works(self):
        # gcsfuse's data has no max_read (the kernel's is then unlimited); a
        # parent may also choose a smaller one. INIT must not fail either way.
        for data in (GCSFUSE_DATA, GCSFUSE_DATA + ",max_read=131072"):
            with self.subTest(data=data):
                process, output = self.serve_unprivileged(data)
                wait_serving(self.mountpoint, process)
                self.assert_same_as_source(self.mountpoint)
                unmount(self.mountpoint)
                check_end(self, process, "the parent's unmount", log=output.wait)

    def test_kernel_side_options_are_left_to_the_parent_with_one_message(self):
        process, output = self.serve_unprivileged(GCSFUSE_DATA, extra_options="allow_other,read_ahead=4M")
        wait_serving(self.mountpoint, process)
        with open(os.path.join(self.mountpoint, "config.json"), "rb") as f:
            self.assertTrue(f.read())
        unmount(self.mountpoint)
        check_end(self, process, "the parent's unmount", log=output.wait)
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
        check_end(self, process, "the unmount", log=output.wait)

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
            while not os.path.exists(os.path.join(sockets, "bad.error")):
                self.assertLess(time.monotonic(), deadline, "no bad.error within %d s" % HANG_GUARD_S)
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
            check_end(self, process, "its mounts ended, one of them failed", expected=1, log=output.wait)
            self.assertIn("[bad]", output.text)
        finally:
            for s in listeners.values():
                s.close()
            unmount(bad_mnt)
            os.rmdir(bad_mnt)

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
            check_end(self, process, "SIGTERM", log=output.wait)
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
            check_end(self, process, "a message without a descriptor", expected=1, log=output.wait)
            with open(path + ".error") as f:
                self.assertIn("send exactly one, the /dev/fuse descriptor", f.read())
        finally:
            s.close()


if __name__ == "__main__":
    if os.geteuid() != 0 or not TENSORFS or not TESTDATA:
        print("needs root, TENSORFS_BINARY and TENSORFS_TESTDATA", file=sys.stderr)
        sys.exit(1)
    run_tests()
