#!/usr/bin/env bash
# deb_package_test.sh BUILD_DIR
#
# Builds the Debian package with cpack, installs it with dpkg, checks that
# `man tensorfs` and `man mount.tensorfs` render the generated page, mounts a
# local directory with `mount -t tensorfs` (through the installed
# /sbin/mount.tensorfs), reads a file, unmounts, removes the package and checks
# that every file it installed is gone. Whatever happens, the package is not
# left installed.
#
# Skipped (exit 77) when not root, or when a tensorfs package or an unpackaged
# /usr/bin/tensorfs or /sbin/mount.tensorfs is already there: the test does not
# touch what it did not install.
set -euo pipefail
build=$(cd "$1" && pwd)

if [[ $(id -u) -ne 0 ]]; then
  echo "skipped: installing a package needs root"
  exit 77
fi
# One test at a time per machine may own /sbin/mount.tensorfs, whatever the
# build directory (tests/fs/mount_command_test.cc takes the same lock).
exec 9>/run/lock/tensorfs-mount-helper-test.lock
flock -w 240 9 || { echo "FAIL: another test holds /run/lock/tensorfs-mount-helper-test.lock" >&2; exit 1; }
if [[ "$(dpkg-query -W -f='${db:Status-Status}' tensorfs 2>/dev/null || true)" != "" &&
      "$(dpkg-query -W -f='${db:Status-Status}' tensorfs 2>/dev/null)" != "not-installed" ]]; then
  echo "skipped: a tensorfs package is already installed on this machine"
  exit 77
fi
for path in /usr/bin/tensorfs /sbin/mount.tensorfs /lib/systemd/system/tensorfs@.service; do
  if [[ -e $path || -L $path ]]; then
    echo "skipped: $path exists and belongs to no package; remove it to run this test"
    exit 77
  fi
done

work=$(mktemp -d)
installed=0
cleanup() {
  if mountpoint -q "$work/mnt" 2>/dev/null; then umount -l "$work/mnt" || true; fi
  if [[ $installed -eq 1 ]]; then dpkg --purge tensorfs >/dev/null 2>&1 || dpkg --purge --force-all tensorfs || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

echo "== cpack -G DEB"
(cd "$build" && cpack -G DEB -B "$work/pkg" >"$work/cpack.log" 2>&1) || { cat "$work/cpack.log"; fail "cpack"; }
debs=("$work"/pkg/tensorfs_*.deb)
[[ ${#debs[@]} -eq 1 && -f ${debs[0]} ]] || fail "expected one tensorfs_*.deb in $work/pkg, found: ${debs[*]}"
deb=${debs[0]}
echo "built $(basename "$deb")"

echo "== contents and dependencies"
dpkg-deb -c "$deb" >"$work/contents"
for want in ./usr/bin/tensorfs "./sbin/mount.tensorfs -> /usr/bin/tensorfs" ./lib/systemd/system/tensorfs@.service \
  ./usr/share/doc/tensorfs/README.md ./usr/share/doc/tensorfs/copyright \
  ./usr/share/doc/tensorfs/examples/tensorfs.conf.example ./etc/tensorfs/ \
  ./usr/share/doc/tensorfs/CONFIGURATION.md ./usr/share/doc/tensorfs/TROUBLESHOOTING.md \
  ./usr/share/man/man8/tensorfs.8.gz ./usr/share/man/man8/mount.tensorfs.8.gz; do
  grep -qF -- "$want" "$work/contents" || { cat "$work/contents"; fail "the package lacks $want"; }
done
depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
names=" $(sed -E 's/ \([^)]*\)//g; s/,//g' <<<"$depends") "  # " fuse3 libc6 libcurl4 ... "
for dep in fuse3 libfuse3-3 libcurl4 libc6 libstdc++6 libssl3 libsystemd0 libfmt9; do
  [[ $names == *" $dep "* ]] || fail "Depends lacks $dep"
done
[[ $names == *" libspdlog1"* ]] || fail "Depends lacks libspdlog"

echo "== dpkg -i"
installed=1
dpkg -i "$deb" >"$work/dpkg-i.log" 2>&1 || { cat "$work/dpkg-i.log"; fail "dpkg -i"; }
dpkg -L tensorfs >"$work/files"
while read -r path; do
  [[ -e $path || -L $path ]] || fail "dpkg -L lists $path but it is not there"
done <"$work/files"
[[ "$(readlink /sbin/mount.tensorfs)" == /usr/bin/tensorfs ]] || fail "/sbin/mount.tensorfs does not point at /usr/bin/tensorfs"
/usr/bin/tensorfs --help >/dev/null || fail "/usr/bin/tensorfs --help"

echo "== man tensorfs"
[[ "$(man -w tensorfs)" == /usr/share/man/man8/tensorfs.8.gz ]] || fail "man -w tensorfs: $(man -w tensorfs 2>&1)"
warnings=$(MANWIDTH=100 man --warnings -l /usr/share/man/man8/tensorfs.8.gz 2>&1 >/dev/null)
[[ -z $warnings ]] || fail "man -l tensorfs.8.gz warns: $warnings"
MANWIDTH=100 man tensorfs 2>/dev/null | col -b >"$work/man.txt"
for want in "mount -t tensorfs SOURCE MOUNTPOINT" "--cache-size SIZE, -o cache_size=SIZE" "EXIT STATUS" "CONFIGURATION.md"; do
  grep -qF -- "$want" "$work/man.txt" || { head -40 "$work/man.txt"; fail "man tensorfs lacks '$want'"; }
done
MANWIDTH=100 man mount.tensorfs 2>/dev/null | col -b >"$work/man-helper.txt"
cmp -s "$work/man.txt" "$work/man-helper.txt" || fail "man mount.tensorfs does not show tensorfs(8)"

echo "== mount -t tensorfs"
mkdir -p "$work/src/llama" "$work/mnt"
head -c 3000000 /dev/urandom >"$work/src/llama/model.safetensors"
echo "hello" >"$work/src/README.txt"
mount -t tensorfs "$work/src" "$work/mnt" -o ro,_netdev,nofail >"$work/mount.log" 2>&1 ||
  { cat "$work/mount.log"; fail "mount -t tensorfs"; }
grep -q " $work/mnt fuse.tensorfs ro," /proc/mounts || fail "not a read-only fuse.tensorfs mount: $(grep " $work/mnt " /proc/mounts)"
cmp "$work/src/llama/model.safetensors" "$work/mnt/llama/model.safetensors" || fail "bytes through the mount differ"
[[ "$(cat "$work/mnt/README.txt")" == hello ]] || fail "README.txt through the mount"
umount "$work/mnt" || fail "umount"
mountpoint -q "$work/mnt" && fail "still mounted after umount"
for _ in $(seq 50); do
  pgrep -f "mount[.]tensorfs $work/src" >/dev/null || break
  sleep 0.1
done
pgrep -f "mount[.]tensorfs $work/src" >/dev/null && fail "the tensorfs process did not exit after umount"

echo "== dpkg -r"
dpkg -r tensorfs >"$work/dpkg-r.log" 2>&1 || { cat "$work/dpkg-r.log"; fail "dpkg -r"; }
# With maintainer scripts the package stays known as "config-files" until purged.
status=$(dpkg-query -W -f='${db:Status-Status}' tensorfs 2>/dev/null || true)
[[ -z $status || $status == not-installed || $status == config-files ]] ||
  fail "after dpkg -r the package is '$status'"
left=0
while read -r path; do
  # /usr, /usr/bin, /lib/systemd/system ... belong to every package; ours all say tensorfs.
  [[ $path == *tensorfs* ]] || continue
  if [[ -e $path || -L $path ]]; then
    echo "left behind: $path" >&2
    left=1
  fi
done <"$work/files"
[[ $left -eq 0 ]] || fail "dpkg -r left files behind"
dpkg --purge tensorfs >"$work/dpkg-purge.log" 2>&1 || { cat "$work/dpkg-purge.log"; fail "dpkg --purge"; }
installed=0
status=$(dpkg-query -W -f='${db:Status-Status}' tensorfs 2>/dev/null || true)
[[ -z $status || $status == not-installed ]] || fail "after dpkg --purge the package is '$status'"
echo "PASS"
