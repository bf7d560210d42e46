"""Running tensorfs as a container runs it, for the tests of descriptor mode:
uid 65534 without any capability, in a mount namespace without /dev/fuse and
without the mounts the privileged parent made; optionally on a read-only root
with only a few directories writable (a pod's emptyDirs). Also what those
tests share around it: collecting a process's output, waiting for a mount to
serve, the GCS test server. Python standard library only; needs root.
"""
import hashlib
import os
import shlex
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
HANG_GUARD_S = 60

# uid 65534, no capability at all, no way to gain one.
UNPRIVILEGED = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
                "--bounding-set=-all", "--no-new-privs"]


def sandboxed(argv, hide=(), read_only_root=False, writable=()):
    """argv run unprivileged in a new mount namespace whose /dev is a fresh
    tmpfs (no fuse node) and in which the mounts in `hide` are detached, as a
    container's namespace does not hold the workload's mount (a copy of it
    would keep the FUSE connection alive after the parent unmounts). With
    read_only_root, / is read-only there but for the directories in `writable`."""
    script = "set -e; mount -t tmpfs -o mode=755 tmpfs /dev; ln -s /proc/self/fd /dev/fd; "
    script += "".join("umount -l -c %s; " % shlex.quote(m) for m in hide)  # -c: no stat of the mount
    if read_only_root:
        script += "".join("mount --bind %s %s; " % (shlex.quote(d), shlex.quote(d)) for d in writable)
        script += "mount -o remount,bind,ro /; "
    script += "test ! -e /dev/fuse; exec \"$@\""
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh"] + UNPRIVILEGED + argv


def fail(message):
    """Ends a test script that is no unittest module (the image tests): FAIL line, exit 1."""
    print("FAIL: " + message, file=sys.stderr)
    sys.exit(1)


def run_or_fail(argv, what, **kwargs):
    """argv's stdout, or fail() with the end of its output."""
    r = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    if r.returncode != 0:
        fail("%s: exit %d\n%s%s" % (what, r.returncode, r.stdout[-3000:], r.stderr[-3000:]))
    return r.stdout


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            block = f.read(1 << 20)
            if not block:
                return h.hexdigest()
            h.update(block)


def wait_until(predicate, what, process=None, timeout=HANG_GUARD_S):
    """Waits until predicate() is true, or fails naming `what`; fails at once if
    `process` exits meanwhile. The timeout only catches hangs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if process is not None and process.poll() is not None:
            raise AssertionError("the process exited with %s while waiting for %s" % (process.returncode, what))
        time.sleep(0.05)
    raise AssertionError("%s: not within %d s" % (what, timeout))


def wait_serving(path, process):
    """Waits until `path` answers a stat as a FUSE root (the mount serves), or fails."""
    def serving():
        r = subprocess.run(["stat", "-c", "%i", path], capture_output=True, timeout=HANG_GUARD_S)
        return r.returncode == 0 and r.stdout.strip() == b"1"
    wait_until(serving, "%s to serve" % path, process)


class Output:
    """Collects a process's output (one pipe) on a thread, so a full pipe never stalls it."""

    def __init__(self, stream):
        self._lines = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream):
        for line in stream:
            with self._lock:
                self._lines.append(line)

    @property
    def text(self):
        with self._lock:
            return "".join(self._lines)

    def wait(self):
        """The whole output, once the stream has ended."""
        self._thread.join(HANG_GUARD_S)
        return self.text


def start_gcs_server(data_dir, work_dir, extra_args=()):
    """The GCS test server over `data_dir` (each subdirectory a bucket), with
    `extra_args` (its S3 dialect's flags, say); returns (process, endpoint URL)."""
    port_file = os.path.join(work_dir, "gcs_port")
    server = subprocess.Popen([sys.executable, os.path.join(HERE, "gcs_test_server.py"), "--data", data_dir,
                               "--port", "0", "--port-file", port_file, "--quiet", *extra_args])
    try:
        wait_until(lambda: os.path.exists(port_file), "the GCS test server to listen", server)
    except AssertionError:
        server.kill()
        server.wait(HANG_GUARD_S)
        raise
    with open(port_file) as f:
        return server, "http://127.0.0.1:" + f.read().strip()
