"""A test double of the node plugin of Google's Cloud Storage FUSE CSI driver
(gcsfuse.csi.storage.gke.io), doing for one pod what the driver's
NodePublishVolume does before the pod's containers start, in the same order
and with the same bytes (GoogleCloudPlatform/gcs-fuse-csi-driver at 5fcdc04a:
pkg/csi_driver/node.go and utils.go, pkg/csi_mounter/csi_mounter.go,
pkg/util/util.go and fdchannel.go):

  - the volume's options: the mount flags (ro, rw) taken out, the rest
    deduplicated and sorted (util.PrepareSidecarMountOptions);
  - /dev/fuse opened read-write, mount(2) on the target with type "fuse",
    source the bucket, flags MS_NODEV|MS_NOSUID (|MS_RDONLY for a read-only
    volume) and data
    "allow_other,default_permissions,rootmode=40000,user_id=0,group_id=0,fd=N"
    (what mount(8) passes on of the driver's -o list);
  - TMP/.volumes/VOL created, a stale socket, error and config.yaml removed,
    the socket listening, and .volumes, .volumes/VOL and the socket chowned to
    65534 (the sidecar's user);
  - on the sidecar's connection, one sendmsg of the JSON
    {"bucketName": "...", "options": [...]} (Go's encoding of MountConfig:
    "options" left out when empty) with the descriptor as SCM_RIGHTS; then the
    connection, the listener and the plugin's descriptor are closed;
  - the volume's metrics scraped from TMP/.volumes/VOL/metrics.sock (GET /);
  - at republish, the error file read and mapped to a gRPC code as
    extractErrorFromGcsFuseErrorFile does; the exit file written for a regular
    sidecar (putExitFile); at unpublish, the target unmounted.

TMP is the pod's emptyDir gke-gcsfuse-tmp (the sidecar's /gcsfuse-tmp).
Python standard library only; needs root (mount(2), chown).
"""
import ctypes
import ctypes.util
import json
import os
import socket
import threading

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MNT_DETACH = 2
NOBODY = 65534

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]

# The driver's default mount options, less nodev and nosuid (flags for mount(8)).
MOUNT_DATA = "allow_other,default_permissions,rootmode=40000,user_id=0,group_id=0"


def grpc_code(error_text):
    """The code NodePublishVolume answers for an error file's text
    (pkg/csi_driver/utils.go, extractErrorFromGcsFuseErrorFile)."""
    if not error_text:
        return "OK"
    code = "Internal"
    if "Incorrect Usage" in error_text or "unknown flag" in error_text:
        code = "InvalidArgument"
    if "signal: killed" in error_text:
        code = "ResourceExhausted"
    if "signal: terminated" in error_text:
        code = "Canceled"
    for phrase in ("googleapi: Error 403", "IAM returned 403 Forbidden: Permission",
                   "google: could not find default credentials", "not have storage.objects.list access"):
        if phrase in error_text:
            code = "PermissionDenied"
    if "bucket doesn't exist" in error_text:
        code = "NotFound"
    return code


class Volume:
    """One published volume: its kernel mount and its socket's listener."""

    def __init__(self, plugin, name, target):
        self.plugin = plugin
        self.name = name
        self.target = target
        self.dir = os.path.join(plugin.volumes_dir, name)
        self.socket_path = os.path.join(self.dir, "socket")
        self.sent = threading.Event()  # the message went out
        self.send_error = None
        self._listener = None
        self._fd = -1
        self._thread = None

    @property
    def error_file(self):
        return os.path.join(self.dir, "error")

    def error_text(self):
        """The error file's text, "" when there is none."""
        try:
            with open(self.error_file) as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def _accept_and_send(self, message):
        try:
            conn, _ = self._listener.accept()
            with conn:
                conn.sendmsg([message], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, bytes(ctypes.c_int(self._fd)))])
            self.sent.set()
        except OSError as e:
            self.send_error = e
        finally:
            self._listener.close()
            os.close(self._fd)

    def unpublish(self):
        """NodeUnpublishVolume: unmounts the target (the sidecar's mount ends)."""
        _libc.umount2(self.target.encode(), MNT_DETACH)
        if self._thread is not None:
            self._listener.close()  # a listener nobody connected to
            self._thread.join(5)


class GkeNodePlugin:
    """The node plugin for one pod whose gke-gcsfuse-tmp emptyDir is `tmp_dir`."""

    def __init__(self, tmp_dir):
        self.tmp_dir = tmp_dir
        self.volumes_dir = os.path.join(tmp_dir, ".volumes")
        self.volumes = []

    def publish(self, name, bucket, target, options=(), read_only=False, legacy_key=False):
        """NodePublishVolume of volume `name` of bucket `bucket` on `target`;
        legacy_key: the message names the bucket "bucket_name", as drivers
        before 2023 did. Returns the Volume; the message goes out when the
        sidecar connects."""
        options = set(options)
        read_only = read_only or "ro" in options
        options -= {"ro", "rw"}
        sidecar_options = sorted(options)
        config = {("bucket_name" if legacy_key else "bucketName"): bucket}
        if sidecar_options:
            config["options"] = sidecar_options
        message = json.dumps(config, separators=(",", ":")).encode()

        os.makedirs(target, mode=0o750, exist_ok=True)
        volume = Volume(self, name, target)
        fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
        flags = MS_NODEV | MS_NOSUID | (MS_RDONLY if read_only else 0)
        data = "%s,fd=%d" % (MOUNT_DATA, fd)
        if _libc.mount(bucket.encode(), target.encode(), b"fuse", flags, data.encode()) != 0:
            err = ctypes.get_errno()
            os.close(fd)
            raise OSError(err, "mount(2) of %s: %s" % (target, os.strerror(err)))
        volume._fd = fd
        os.makedirs(volume.dir, mode=0o750, exist_ok=True)
        for stale in ("socket", "error", "config.yaml"):
            try:
                os.unlink(os.path.join(volume.dir, stale))
            except FileNotFoundError:
                pass
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(volume.socket_path)
        listener.listen(128)
        for path in (self.volumes_dir, volume.dir, volume.socket_path):
            os.lchown(path, NOBODY, NOBODY)
        volume._listener = listener
        volume._thread = threading.Thread(target=volume._accept_and_send, args=(message,), daemon=True)
        volume._thread.start()
        self.volumes.append(volume)
        return volume

    def scrape_metrics(self, volume):
        """What the plugin's metrics collector asks of TMP/.volumes/VOL/metrics.sock
        (pkg/metrics/metrics.go): GET http://unix/ over the socket; returns the raw reply."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(os.path.join(volume.dir, "metrics.sock"))
            s.sendall(b"GET / HTTP/1.1\r\nHost: unix\r\nUser-Agent: Go-http-client/1.1\r\n"
                      b"Accept-Encoding: gzip\r\n\r\n")
            reply = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    return reply.decode()
                reply += chunk

    def put_exit_file(self):
        """What the plugin does for a regular sidecar once the pod's other containers have ended."""
        path = os.path.join(self.volumes_dir, "exit")
        with open(path, "w"):
            pass
        os.chown(path, NOBODY, NOBODY)
        return path

    def unpublish_all(self):
        for volume in self.volumes:
            volume.unpublish()
        self.volumes = []
