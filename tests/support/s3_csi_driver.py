"""A test double of the node side of the Mountpoint for Amazon S3 CSI driver v2
(awslabs/mountpoint-s3-csi-driver at 57c6bedb, v2.7.0), doing for one volume
what its NodePublishVolume does with a Mountpoint Pod, in the same order and
with the same bytes:

  - the arguments (pkg/driver/node/node.go, pkg/mountpoint/args.go): the
    volume's mountOptions normalised as ParseArgs does ("prefix models/" and
    "--prefix=models/" are --prefix=models/; --foreground, -f, --help, -h,
    --version, -v dropped), --read-only for a read-only volume; with an
    fsGroup --gid=G, --allow-other, --dir-mode=770, --file-mode=660 unless
    given; --allow-root unless --allow-other; -o and --ca-bundle refused;
  - the environment (pkg/driver/node/envprovider, credentialprovider/): what
    the test gives, as the credential provider builds it (the credentials'
    variables; the region; files under COMM/credentials written as it writes
    them, write_credential_file, long_term_profile); --aws-max-attempts moved
    to AWS_MAX_ATTEMPTS; --user-agent-prefix set to the driver's user agent
    (one value, with spaces);
  - the mount (pkg/mountpoint/mounter/mount_linux.go): /dev/fuse opened
    read-write, mount(2) of "mountpoint-s3" on the source directory with type
    "fuse", data "fd=N,rootmode=40000,user_id=0,group_id=0,default_permissions"
    (",allow_other" with --allow-other or --allow-root), flags
    MS_NODEV|MS_NOSUID|MS_NOATIME (|MS_RDONLY with --read-only); then
    --read-only taken out of the arguments;
  - the message (pkg/mountpoint/mountoptions): COMM/mount.err removed, a dial
    of COMM/mount.sock retried while it is absent or refused, one sendmsg of
    {"bucketName", "args" (sorted), "env" (sorted "K=V")} with the descriptor
    as SCM_RIGHTS, then the connection and the plugin's descriptor closed;
  - readiness (pod_mounter.go waitForMount, mounter.go CheckMountpoint):
    statx(AT_STATX_FORCE_SYNC) of the source (an error is a broken mount: the
    publish fails), until /proc/self/mountinfo shows the source as a mount of
    device "mountpoint-s3"; COMM/mount.err, once it appears, fails the publish
    with "Mountpoint Pod ... failed: <its text>"; then the bind mount of the
    source on the workload's target. The driver's statx asks for no field
    (mask 0), which kernels before 6.6 (those of EKS's Amazon Linux 2023
    nodes, 6.1) send to the daemon as a GETATTR of the root, waiting for its
    INIT; later kernels answer a mask of 0 from their cache. The double asks
    for STATX_BASIC_STATS, which every kernel sends to the daemon, so the
    check is the one the driver makes on its nodes;
  - unpublish of the pod's last workload (pod_unmounter.go): COMM/mount.exit
    written, the target and the source unmounted.

It polls every 20 ms where the driver polls every second, to keep tests short.
COMM is the Mountpoint Pod's emptyDir `comm` (its /comm). Needs root; Python
standard library only.
"""
import ctypes
import ctypes.util
import errno
import json
import os
import queue
import socket
import threading
import time

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOATIME = 1024
MS_BIND = 4096
MNT_DETACH = 2
AT_FDCWD = -100
AT_STATX_FORCE_SYNC = 0x2000
STATX_BASIC_STATS = 0x7FF
POLL_S = 0.02
HANG_GUARD_S = 60

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.statx.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p]

DRIVER_VERSION = "v2.7.0"


def user_agent(authentication_source="driver", kubernetes_version="v1.31.4-eks-2d5f260", install="helm"):
    """mounter.UserAgent: s3-csi-driver/VERSION credential-source#SOURCE k8s/VERSION md/install#METHOD."""
    return "s3-csi-driver/%s credential-source#%s k8s/%s md/install#%s" % (
        DRIVER_VERSION, authentication_source, kubernetes_version, install)


def parse_args(passed):
    """mountpoint.ParseArgs: [(key, value)] without duplicates, in first-seen order."""
    out = []
    for a in passed:
        trimmed = a.strip(" ")
        space, equals = trimmed.find(" "), trimmed.find("=")
        if space != -1 and (equals == -1 or space < equals):
            key, value = trimmed.split(" ", 1)
            value = value.strip(" ")
        elif equals != -1:
            key, value = trimmed.split("=", 1)
            value = value.strip(" ")
        else:
            key, value = trimmed, ""
        if not key.startswith("-"):
            key = "--" + key
        if key in ("--foreground", "-f", "--help", "-h", "--version", "-v"):
            continue
        if (key, value) not in out:
            out.append((key, value))
    return out


def sorted_list(args):
    """Args.SortedList."""
    return sorted(k if v == "" else "%s=%s" % (k, v) for k, v in args)


def _has(args, key):
    return any(k == key for k, _ in args)


def _set(args, key, value):
    return [(k, v) for k, v in args if k != key] + [(key, value)]


def statx(path):
    """statx(AT_FDCWD, path, AT_STATX_FORCE_SYNC, STATX_BASIC_STATS): None, or the errno."""
    buf = ctypes.create_string_buffer(256)
    if _libc.statx(AT_FDCWD, path.encode(), AT_STATX_FORCE_SYNC, STATX_BASIC_STATS, buf) != 0:
        return ctypes.get_errno()
    return None


def mount_device(path):
    """The mount source ("device") of the newest mount on `path`, or None."""
    device = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            sep = fields.index("-")
            if fields[4] == path:
                device = fields[sep + 2]
    return device


class PublishError(Exception):
    """NodePublishVolume failed; the message is what the pod's event would say."""


class Volume:
    """One volume served by one Mountpoint Pod: its source mount and the workload's bind mount."""

    def __init__(self, plugin, source, target, comm):
        self.plugin = plugin
        self.source = source
        self.target = target
        self.comm = comm
        self.message = None  # the JSON sent
        self.mount_args = []  # the arguments mount(2) was decided on

    @property
    def mount_err(self):
        return os.path.join(self.comm, "mount.err")

    def error_text(self):
        try:
            with open(self.mount_err) as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def unpublish(self):
        """The Mountpoint Pod's last workload is gone: mount.exit, then unmount."""
        exit_file = os.path.join(self.comm, "mount.exit")
        with open(exit_file, "w"):
            pass
        for path in (self.target, self.source):
            _libc.umount2(path.encode(), MNT_DETACH)


class S3CsiNodePlugin:
    """The node plugin for volumes under `kubelet_dir` (a test's stand-in for /var/lib/kubelet)."""

    def __init__(self, kubelet_dir):
        self.kubelet_dir = kubelet_dir
        self.volumes = []

    def paths(self, name):
        """(source, target) of PersistentVolume `name`: the Mountpoint Pod's mount, and the
        workload's bind mount of it."""
        return (os.path.join(self.kubelet_dir, "plugins", "s3.csi.aws.com", "mnt", name),
                os.path.join(self.kubelet_dir, "pods", "workload", "volumes", "kubernetes.io~csi", name, "mount"))

    def build(self, mount_options=(), read_only=True, fs_group=None):
        """The arguments NodePublishVolume builds: [(key, value)]."""
        passed = ["--read-only"] if read_only else []
        args = parse_args(passed + list(mount_options))
        if _has(args, "-o"):
            raise PublishError("Running mount-s3 with mount flag -o is not supported in CSI Driver.")
        if _has(args, "--ca-bundle"):
            raise PublishError("Running mount-s3 with --ca-bundle is not supported in CSI Driver.")
        if fs_group is not None:
            for key, value in (("--gid", str(fs_group)), ("--allow-other", ""), ("--dir-mode", "770"),
                               ("--file-mode", "660")):
                if not _has(args, key):
                    args.append((key, value))
        if not _has(args, "--allow-other") and not _has(args, "--allow-root"):
            args.append(("--allow-root", ""))
        return args

    def publish(self, name, bucket, comm, mount_options=(), env=None, read_only=True, fs_group=None,
                authentication_source="driver", wait=True):
        """NodePublishVolume of PersistentVolume `name` of `bucket`, served by the Mountpoint Pod
        whose emptyDir `comm` is `comm`; `env` is the credentials' (and any other) environment.
        Returns the Volume once it serves (or at once with wait=False); raises PublishError."""
        args = self.build(mount_options, read_only, fs_group)
        environment = dict(env or {})
        for key, value in list(args):
            if key == "--aws-max-attempts":
                environment["AWS_MAX_ATTEMPTS"] = value
        args = [(k, v) for k, v in args if k != "--aws-max-attempts"]
        args = _set(args, "--user-agent-prefix", user_agent(authentication_source))

        source, target = self.paths(name)
        for d in (source, target):
            os.makedirs(d, mode=0o755, exist_ok=True)
        volume = Volume(self, source, target, comm)
        volume.mount_args = list(args)
        fd = self._mount(source, args)
        args = [(k, v) for k, v in args if k != "--read-only"]
        # The plugin keeps its descriptor until the wait is over (mountS3AtSource's
        # deferred close): the connection outlives a mount-s3 that exits before
        # INIT, so statx blocks rather than failing, and mount.err tells why.
        try:
            try:
                os.unlink(volume.mount_err)
            except FileNotFoundError:
                pass
            message = {"bucketName": bucket, "args": sorted_list(args),
                       "env": sorted("%s=%s" % kv for kv in environment.items())}
            volume.message = message
            self._send(os.path.join(comm, "mount.sock"), json.dumps(message, separators=(",", ":")).encode(), fd)
            self.volumes.append(volume)
            if wait:
                self.wait_for_mount(volume)
        except BaseException:
            _libc.umount2(source.encode(), MNT_DETACH)
            raise
        finally:
            os.close(fd)
        return volume

    @staticmethod
    def _mount(source, args):
        fd = os.open("/dev/fuse", os.O_RDWR)
        st = os.stat(source)
        data = "fd=%d,rootmode=%o,user_id=%d,group_id=%d,default_permissions" % (
            fd, st.st_mode & 0o170000, os.geteuid(), os.getegid())
        flags = MS_NODEV | MS_NOSUID | MS_NOATIME
        if _has(args, "--read-only"):
            flags |= MS_RDONLY
        if _has(args, "--allow-other") or _has(args, "--allow-root"):
            data += ",allow_other"
        if _libc.mount(b"mountpoint-s3", source.encode(), b"fuse", flags, data.encode()) != 0:
            err = ctypes.get_errno()
            os.close(fd)
            raise OSError(err, "mount(2) of %s: %s" % (source, os.strerror(err)))
        return fd

    @staticmethod
    def _send(sock_path, message, fd):
        deadline = time.monotonic() + HANG_GUARD_S
        while True:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(sock_path)
                break
            except OSError as e:
                s.close()
                if e.errno not in (errno.ENOENT, errno.ECONNREFUSED) or time.monotonic() > deadline:
                    raise PublishError("Failed to send mount options to Mountpoint Pod: failed to dial to unix "
                                       "socket %s: %s" % (sock_path, e)) from None
                time.sleep(0.005)  # unixSocketDialRetryInterval
        with s:
            s.sendmsg([message], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, bytes(ctypes.c_int(fd)))])

    def wait_for_mount(self, volume):
        """waitForMount: the first of the mount serving (polled with statx on a thread of its
        own, which may block until the mount answers INIT) and mount.err appearing."""
        outcome = queue.Queue()

        def poll_mount():
            while True:
                err = statx(volume.source)
                if err is not None:
                    outcome.put(PublishError("Failed to check if Mountpoint Pod mounted: statx %s: %s"
                                             % (volume.source, os.strerror(err))))
                    return
                if mount_device(volume.source) == "mountpoint-s3":
                    outcome.put(None)
                    return
                time.sleep(POLL_S)
        threading.Thread(target=poll_mount, daemon=True).start()
        deadline = time.monotonic() + HANG_GUARD_S
        while time.monotonic() < deadline:
            text = volume.error_text()
            if text:
                raise PublishError("Mountpoint Pod failed: %s" % text)
            try:
                result = outcome.get(timeout=POLL_S)
            except queue.Empty:
                continue
            if result is not None:
                raise result
            if _libc.mount(volume.source.encode(), volume.target.encode(), None, MS_BIND, None) != 0:
                err = ctypes.get_errno()
                raise PublishError("Failed to bind mount %s to target %s: %s"
                                   % (volume.source, volume.target, os.strerror(err)))
            return
        raise PublishError("neither did %s serve nor %s appear within %d s (statx may hang: the mount does "
                           "not answer the kernel)" % (volume.source, volume.mount_err, HANG_GUARD_S))

    def unpublish_all(self):
        for volume in self.volumes:
            volume.unpublish()
        self.volumes = []


def write_credential_file(comm, name, text, pod_comm=None):
    """What the credential provider writes under COMM/credentials (renameio: a new file renamed
    over the old one); returns its path as the Mountpoint Pod sees it, with `comm` at
    `pod_comm` (its /comm; by default the same path: the Pod shares the node's view)."""
    directory = os.path.join(comm, "credentials")
    os.makedirs(directory, mode=0o750, exist_ok=True)
    path = os.path.join(directory, name)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o640)
    os.rename(tmp, path)
    return os.path.join(pod_comm or comm, "credentials", name)


def long_term_profile(comm, prefix, access_key_id, secret_access_key, pod_comm=None):
    """provideLongTermCredentialsFromDriver: a profile of its own in two files, and its env."""
    profile = prefix + "s3-csi"
    config = write_credential_file(comm, prefix + "s3-csi-config", "[profile %s]\n" % profile, pod_comm)
    credentials = write_credential_file(comm, prefix + "s3-csi-credentials",
                                        "[%s]\naws_access_key_id=%s\naws_secret_access_key=%s\n"
                                        % (profile, access_key_id, secret_access_key), pod_comm)
    return {"AWS_PROFILE": profile, "AWS_CONFIG_FILE": config, "AWS_SHARED_CREDENTIALS_FILE": credentials}
