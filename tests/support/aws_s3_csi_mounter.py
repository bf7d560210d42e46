#!/usr/bin/python3
"""A test double of aws-s3-csi-mounter, the process of a Mountpoint Pod of the
Mountpoint for Amazon S3 CSI driver v2, doing what the driver's does
(awslabs/mountpoint-s3-csi-driver at 57c6bedb, v2.7.0:
cmd/aws-s3-csi-mounter/main.go and csimounter/csimounter.go,
pkg/mountpoint/mountoptions/mount_options.go, pkg/mountpoint/runner/,
pkg/mountpoint/args.go):

  aws_s3_csi_mounter.py [--comm DIR] [--bin-dir DIR] [--local-cache DIR]
                        [--oci-bundle BUNDLE] [--recv-timeout S]

  - listens on COMM/mount.sock and receives one message, the JSON
    {"bucketName", "args", "env"} with the /dev/fuse descriptor attached by
    SCM_RIGHTS, read to EOF (Recv/RecvOnConn); a failure, with COMM/mount.exit
    present, exits 0, else 255 (klog.Fatalf);
  - then ignores SIGTERM, as the driver's does once it has the message;
  - takes --cache out of the arguments and adds --cache=LOCAL_CACHE when that
    directory exists (an error when asked for and absent), adds --foreground,
    and runs BIN_DIR/mount-s3 BUCKET /dev/fd/3 ARGS... (ARGS sorted) with the
    descriptor as fd 3, stdin /dev/null, no other descriptor, exactly the
    message's env as its environment, its stdout this process's stdout and its
    stderr both copied to this process's stderr and kept;
  - if mount-s3 fails, writes all it wrote on stderr to COMM/mount.err (mode
    0600) and exits 255; if it ends with 0, exits 0 when COMM/mount.exit
    exists, else 1 (the pod is restarted).

BIN_DIR is --bin-dir, else $MOUNTPOINT_BIN_DIR (the driver image sets it).
With --oci-bundle, mount-s3 runs inside that OCI runtime bundle (an unpacked
image: tests/support/oci_run.py, needing root) with its config's process
(entrypoint BIN_DIR/mount-s3) and the message's env alone; COMM is bound at
/comm there, and each --hide mount (the node plugin's, which the container's
namespace, made only now, would copy) is detached there. Without it, this process is expected to run as the Mountpoint
Pod's container does (uid 1000, no capabilities, no /dev/fuse), and mount-s3
with it. Python standard library only.
"""
import argparse
import array
import json
import os
import signal
import socket
import subprocess
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from s3_csi_driver import parse_args, sorted_list  # noqa: E402
MESSAGE_RECV_SIZE = 1024  # messageRecvSize


def log(message):
    print("aws-s3-csi-mounter: " + message, file=sys.stderr, flush=True)


def receive(sock_path, timeout):
    """(options dict, fd): one message from the node plugin, as RecvOnConn reads it."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(sock_path)
    listener.listen(1)
    listener.settimeout(timeout)
    try:
        conn, _ = listener.accept()
    finally:
        listener.close()
    fds = []
    data = b""
    with conn:
        conn.settimeout(timeout)
        while True:
            fd_size = array.array("i").itemsize
            msg, ancdata, _, _ = conn.recvmsg(MESSAGE_RECV_SIZE, socket.CMSG_SPACE(fd_size))
            for level, kind, payload in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    received = array.array("i")
                    received.frombytes(payload[:len(payload) - len(payload) % fd_size])
                    fds.extend(received)
            if not msg:
                break
            data += msg
    options = json.loads(data)
    if len(fds) != 1:
        for fd in fds:
            os.close(fd)
        raise ValueError("expected one file descriptor from connection, but got %d" % len(fds))
    return options, fds[0]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--comm", default="/comm")
    p.add_argument("--bin-dir", default=os.environ.get("MOUNTPOINT_BIN_DIR", ""))
    p.add_argument("--local-cache", default="/local-cache")
    p.add_argument("--oci-bundle")
    p.add_argument("--hide", action="append", default=[],
                   help="with --oci-bundle: a mount of the node the container's namespace must not hold")
    p.add_argument("--recv-timeout", type=float, default=120)
    a = p.parse_args()
    sock_path = os.path.join(a.comm, "mount.sock")
    exit_path = os.path.join(a.comm, "mount.exit")
    err_path = os.path.join(a.comm, "mount.err")

    log("Trying to receive mount options from %s" % sock_path)
    try:
        options, fd = receive(sock_path, a.recv_timeout)
    except Exception as e:  # noqa: BLE001 - any failure is the driver's "Failed to receive"
        if os.path.exists(exit_path):
            log("Failed to receive mount options and detected `mount.exit` file, exiting with zero code")
            sys.exit(0)
        log("Failed to receive mount options from %s: %s" % (sock_path, e))
        sys.exit(255)
    log("Mount options has been received from %s" % sock_path)
    signal.signal(signal.SIGTERM, lambda *_: log("Received SIGTERM signal, ignoring"))

    args = parse_args(options.get("args") or [])
    cache_asked = any(k == "--cache" for k, _ in args)
    args = [(k, v) for k, v in args if k != "--cache"]
    cache_mounted = os.path.isdir(a.local_cache)
    if cache_asked and not cache_mounted:
        log("Failed to run Mountpoint: local cache enabled via mount options but cache folder is not mounted at %r"
            % a.local_cache)
        sys.exit(255)
    if cache_mounted:
        args.append(("--cache", a.local_cache))
    args = [(k, v) for k, v in args if k != "--foreground"] + [("--foreground", "")]
    bucket = options.get("bucketName", "")
    if not bucket:
        log("Failed to run Mountpoint: runner: missing S3 Bucket name")
        sys.exit(255)
    env = list(options.get("env") or [])
    argv_tail = [bucket, "/dev/fd/3"] + sorted_list(args)

    # The descriptor becomes the child's fd 3 (Go's ExtraFiles[0]).
    if fd != 3:
        os.dup2(fd, 3, inheritable=True)
        os.close(fd)
    else:
        os.set_inheritable(3, True)
    if a.oci_bundle:
        command = [sys.executable, os.path.join(HERE, "oci_run.py"), a.oci_bundle, "--env-only",
                   "--bind", "%s:/comm" % a.comm]
        for path in a.hide:
            command += ["--hide", path]
        for e in env:
            command += ["--env", e]
        command += ["--"] + argv_tail
        child_env = {}
    else:
        command = [os.path.join(a.bin_dir, "mount-s3")] + argv_tail
        child_env = dict(e.split("=", 1) for e in env)
    stdin = open(os.devnull, "rb")
    child = subprocess.Popen(command, env=child_env, stdin=stdin, stdout=sys.stdout, stderr=subprocess.PIPE,
                             pass_fds=(3,), close_fds=True, executable=command[0])
    stdin.close()
    kept = []

    def copy():
        for chunk in iter(lambda: child.stderr.read1(65536), b""):
            kept.append(chunk)
            sys.stderr.buffer.write(chunk)
            sys.stderr.buffer.flush()
    copier = threading.Thread(target=copy, daemon=True)
    copier.start()
    code = child.wait()
    copier.join()
    os.close(3)  # RunInForeground's deferred close of the descriptor
    if code != 0:
        with open(err_path, "wb") as f:
            f.write(b"".join(kept))
        os.chmod(err_path, 0o600)
        log("Failed to run Mountpoint: exit status %d" % code)
        sys.exit(255)
    log("Mountpoint exited with 0 exit code")
    sys.exit(0 if os.path.exists(exit_path) else 1)


if __name__ == "__main__":
    main()
