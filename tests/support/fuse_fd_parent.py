#!/usr/bin/python3
"""A parent that mounts /dev/fuse itself and hands the descriptor to tensorfs.

    fuse_fd_parent.py MOUNTPOINT [--read-ahead-kb KB] [--pid-file F] -- COMMAND...

As a Kubernetes CSI node plugin does (gcsfuse's, Mountpoint's): opens /dev/fuse
read-write, calls mount(2) on MOUNTPOINT with the data
"fd=N,rootmode=40000,user_id=0,group_id=0,default_permissions,allow_other" and
MS_NOSUID|MS_NODEV|MS_RDONLY, optionally writes the mount's read_ahead_kb, then
runs COMMAND with the descriptor open, each "{fd}" in it replaced by N (e.g.
`tensorfs SOURCE /dev/fd/{fd} -f`), and closes its own copy. It writes the
child's pid to F, waits for it, unmounts MOUNTPOINT if it is still mounted
(the parent owns the mount), and exits with the child's exit status (128+SIG if
a signal ended it). Needs root (mount(2)); Python standard library only.
"""
import ctypes
import ctypes.util
import os
import subprocess
import sys

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MNT_DETACH = 2

libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


# gcsfuse's CSI node plugin mounts with this data (after fd=N), MS_NOSUID|MS_NODEV, plus read-only.
GCSFUSE_DATA = "rootmode=40000,user_id=0,group_id=0,default_permissions,allow_other"


def kernel_mount(target, source, data=GCSFUSE_DATA, flags=MS_NOSUID | MS_NODEV | MS_RDONLY):
    """Opens /dev/fuse and mounts it on target as a node plugin does; returns the
    descriptor (not inheritable: pass it with pass_fds)."""
    fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
    full = ("fd=%d," % fd) + data
    if libc.mount(source.encode(), target.encode(), b"fuse.tensorfs", flags, full.encode()) != 0:
        err = ctypes.get_errno()
        os.close(fd)
        raise OSError(err, "mount(2) of %s: %s" % (target, os.strerror(err)))
    return fd


def unmount(target):
    libc.umount2(target.encode(), MNT_DETACH)


def mount_device(path):
    """MAJOR:MINOR of the newest mount on `path`, or None. (A stat() of the new
    mount would wait for its INIT, which nobody answers yet.)"""
    dev = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == path:
                dev = fields[2]
    return dev


def mounted(path):
    return mount_device(path) is not None


def main(argv):
    if "--" not in argv:
        sys.exit(__doc__)
    sep = argv.index("--")
    opts, command = argv[:sep], argv[sep + 1:]
    mountpoint = os.path.realpath(opts[0])
    read_ahead_kb = None
    pid_file = None
    i = 1
    while i < len(opts):
        if opts[i] == "--read-ahead-kb":
            read_ahead_kb = int(opts[i + 1])
        elif opts[i] == "--pid-file":
            pid_file = opts[i + 1]
        else:
            sys.exit("unknown option " + opts[i])
        i += 2

    try:
        fd = kernel_mount(mountpoint, "test-parent")
    except OSError as e:
        sys.exit("fuse_fd_parent: %s" % e.strerror)
    try:
        if read_ahead_kb is not None:
            with open("/sys/class/bdi/%s/read_ahead_kb" % mount_device(mountpoint), "w") as f:
                f.write("%d\n" % read_ahead_kb)
        command = [arg.replace("{fd}", str(fd)) for arg in command]
        child = subprocess.Popen(command, pass_fds=(fd,))
        os.close(fd)
        if pid_file:
            with open(pid_file + ".tmp", "w") as f:
                f.write("%d\n" % child.pid)
            os.rename(pid_file + ".tmp", pid_file)
        rc = child.wait()
    finally:
        if mounted(mountpoint):
            unmount(mountpoint)
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
