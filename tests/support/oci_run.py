#!/usr/bin/python3
"""Runs the process of an OCI runtime bundle (what `umoci unpack` makes: rootfs/
and config.json) as a Kubernetes container runtime runs a pod's container with
a restricted security context, without a container engine:

    oci_run.py BUNDLE [--bind HOST_DIR:CONTAINER_DIR]... [--hide HOST_PATH]...
               [--env NAME=VALUE]... [--env-only] [-- EXTRA_ARGS...]

In a new mount namespace: the rootfs read-only; /proc; a /dev tmpfs with
null, zero, full, random, urandom and /dev/fd, and no fuse node; each --bind
directory writable at its place (a pod's emptyDirs); each --hide mount
detached (the mounts a node plugin made on the host, which a container does
not see). Then chroot, every capability dropped (bounding set included),
no_new_privs, the config's user and groups, its cwd, and exec of its
process.args plus EXTRA_ARGS (the pod's args after the image's entrypoint),
with its env plus each --env (--env-only: each --env alone, as a runner that
sets the whole environment does). The network is the host's. Needs root; Python
standard library only.
"""
import ctypes
import ctypes.util
import json
import os
import sys

CLONE_NEWNS = 0x00020000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
CAP_LAST_CAP = 40

libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
libc.unshare.argtypes = [ctypes.c_int]
libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


def check(rc, what):
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, "%s: %s" % (what, os.strerror(err)))


def mount(source, target, fstype, flags, data=None):
    check(libc.mount(source.encode() if source else None, target.encode(), fstype.encode() if fstype else None,
                     flags, data.encode() if data else None), "mount %s" % target)


def main(argv):
    extra = []
    if "--" in argv:
        extra = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    bundle, binds, hides, env_extra = argv[0], [], [], []
    env_only = "--env-only" in argv
    argv = [a for a in argv if a != "--env-only"]
    i = 1
    while i < len(argv):
        flag, value = argv[i], argv[i + 1]
        if flag == "--bind":
            binds.append(value.split(":", 1))
        elif flag == "--hide":
            hides.append(value)
        elif flag == "--env":
            env_extra.append(value)
        else:
            sys.exit("oci_run: unknown option " + flag)
        i += 2
    with open(os.path.join(bundle, "config.json")) as f:
        config = json.load(f)
    process = config["process"]
    rootfs = os.path.realpath(os.path.join(bundle, config.get("root", {}).get("path", "rootfs")))

    check(libc.unshare(CLONE_NEWNS), "unshare")
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    for path in hides:
        libc.umount2(path.encode(), MNT_DETACH)
    mount(rootfs, rootfs, None, MS_BIND | MS_REC)
    mount("proc", rootfs + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    dev = rootfs + "/dev"
    mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=755")
    for name in ("null", "zero", "full", "random", "urandom"):
        with open(os.path.join(dev, name), "w"):
            pass
        mount("/dev/" + name, os.path.join(dev, name), None, MS_BIND)
    os.symlink("/proc/self/fd", os.path.join(dev, "fd"))
    for host, inside in binds:
        os.makedirs(rootfs + inside, exist_ok=True)  # as a runtime makes a volume's mount point
        mount(host, rootfs + inside, None, MS_BIND)
    mount(None, rootfs, None, MS_REMOUNT | MS_BIND | MS_RDONLY)  # the read-only root filesystem

    os.chroot(rootfs)
    os.chdir(process.get("cwd", "/"))
    assert not os.path.exists("/dev/fuse")
    for cap in range(CAP_LAST_CAP + 1):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # capabilities this kernel lacks fail: fine
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    user = process.get("user", {})
    os.setgroups(user.get("additionalGids", []))
    os.setresgid(user.get("gid", 0), user.get("gid", 0), user.get("gid", 0))
    os.setresuid(user.get("uid", 0), user.get("uid", 0), user.get("uid", 0))  # drops what capabilities are left
    env = dict(e.split("=", 1) for e in ([] if env_only else process.get("env", [])) + env_extra)
    args = process["args"] + extra
    os.execvpe(args[0], args, env)


if __name__ == "__main__":
    main(sys.argv[1:])
