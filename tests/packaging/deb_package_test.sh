#!/bin/sh
# deb_package_test.sh DEB
#
# The Debian package, checked inside a booted Debian 12 system where it is
# installed (tests/systemd/boot_test.sh copies this script and the .deb into
# its container and runs it there; nothing here touches the machine that runs
# the suite): its contents and dependencies; `apt remove` makes systemd reload
# (postrm) and leaves no file behind but configuration; `apt purge` forgets it;
# `apt install ./tensorfs_*.deb` makes systemd reload (postinst) and puts every
# file in place; `man tensorfs` and `man mount.tensorfs` render the generated
# tensorfs(8) without a warning; `mount -t tensorfs` runs the installed helper
# and the mount reads right; after `umount` the daemon exits.
set -eu
deb=${1:?usage: deb_package_test.sh DEB}
work=$(mktemp -d)
trap 'mountpoint -q "$work/mnt" 2>/dev/null && umount -l "$work/mnt"; rm -rf "$work"' EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
# Polls COMMAND... every 0.1 s; fails naming WHAT after 120 s (only a hang takes that).
wait_for() {  # WHAT COMMAND...
  what=$1
  shift
  i=0
  while ! "$@"; do
    i=$((i + 1))
    [ $i -le 1200 ] || fail "timed out after 120 s waiting for $what"
    sleep 0.1
  done
}
status() { dpkg-query -W -f='${db:Status-Status}' tensorfs 2>/dev/null || true; }
# How many times systemd has reloaded its units since boot (daemon-reload).
reloads() { journalctl -q --no-pager -o cat _PID=1 | grep -c '^Reloading\.$' || true; }
reloaded_since() { [ "$(reloads)" -gt "$1" ]; }

echo "== contents and dependencies of $(basename "$deb")"
dpkg-deb -c "$deb" >"$work/contents"
for want in ./usr/bin/tensorfs "./sbin/mount.tensorfs -> /usr/bin/tensorfs" \
  "./usr/lib/tensorfs/bin/mount-s3 -> /usr/bin/tensorfs" ./lib/systemd/system/tensorfs@.service \
  ./usr/share/doc/tensorfs/README.md ./usr/share/doc/tensorfs/copyright \
  ./usr/share/doc/tensorfs/examples/tensorfs.conf.example ./etc/tensorfs/ \
  ./usr/share/doc/tensorfs/CONFIGURATION.md ./usr/share/doc/tensorfs/TROUBLESHOOTING.md \
  ./usr/share/man/man8/tensorfs.8.gz ./usr/share/man/man8/mount.tensorfs.8.gz; do
  grep -qF -- "$want" "$work/contents" || { cat "$work/contents"; fail "the package lacks $want"; }
done
depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
names=" $(echo "$depends" | sed -E 's/ \([^)]*\)//g; s/,//g') "  # " fuse3 libc6 libcurl4 ... "
for dep in fuse3 libfuse3-3 libcurl4 libc6 libstdc++6 libssl3 libsystemd0 libfmt9 libspdlog1; do
  case $names in *" $dep"*) ;; *) fail "Depends lacks $dep" ;; esac
done

echo "== installed: every file in place"
[ "$(status)" = installed ] || fail "the package is '$(status)', not installed"
dpkg -L tensorfs >"$work/files"
while read -r path; do
  [ -e "$path" ] || [ -L "$path" ] || fail "dpkg -L lists $path but it is not there"
done <"$work/files"

echo "== apt remove: systemd reloads, no file is left but configuration"
before=$(reloads)
apt-get remove -y -qq tensorfs >"$work/remove.log" 2>&1 || { cat "$work/remove.log"; fail "apt-get remove"; }
wait_for "systemd to reload after the removal (postrm)" reloaded_since "$before"
case $(status) in not-installed | config-files | "") ;; *) fail "after apt remove the package is '$(status)'" ;; esac
while read -r path; do
  case $path in *tensorfs*) ;; *) continue ;; esac  # /usr, /usr/bin ... belong to every package
  [ -d "$path" ] && [ ! -L "$path" ] && continue   # /etc/tensorfs may hold the user's configurations
  if [ -e "$path" ] || [ -L "$path" ]; then fail "apt remove left $path behind"; fi
done <"$work/files"

echo "== apt purge: the package is forgotten"
apt-get purge -y -qq tensorfs >"$work/purge.log" 2>&1 || { cat "$work/purge.log"; fail "apt-get purge"; }
case $(status) in not-installed | "") ;; *) fail "after apt purge the package is '$(status)'" ;; esac

echo "== apt install ./$(basename "$deb"): systemd reloads, every file in place"
before=$(reloads)
(cd "$(dirname "$deb")" && apt-get install -y -qq "./$(basename "$deb")") >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; fail "apt-get install ./$(basename "$deb")"; }
wait_for "systemd to reload after the installation (postinst)" reloaded_since "$before"
[ "$(status)" = installed ] || fail "after apt install the package is '$(status)'"
while read -r path; do
  [ -e "$path" ] || [ -L "$path" ] || fail "$path is missing after apt install"
done <"$work/files"
[ "$(readlink /sbin/mount.tensorfs)" = /usr/bin/tensorfs ] || fail "/sbin/mount.tensorfs does not point at /usr/bin/tensorfs"
/usr/bin/tensorfs --help >/dev/null || fail "/usr/bin/tensorfs --help"
/usr/lib/tensorfs/bin/mount-s3 --help | grep -q "^Usage: mount-s3 " || fail "/usr/lib/tensorfs/bin/mount-s3 --help"
systemctl cat tensorfs@mnt-x.service >/dev/null || fail "systemd does not know tensorfs@.service"

echo "== man tensorfs"
[ "$(man -w tensorfs)" = /usr/share/man/man8/tensorfs.8.gz ] || fail "man -w tensorfs: $(man -w tensorfs 2>&1)"
warnings=$(MANWIDTH=100 man --warnings -l /usr/share/man/man8/tensorfs.8.gz 2>&1 >/dev/null)
[ -z "$warnings" ] || fail "man --warnings -l tensorfs.8.gz: $warnings"
plain() { sed "s/.$(printf '\b')//g"; }  # the overstrikes of bold and underline
MANWIDTH=100 man tensorfs 2>/dev/null | plain >"$work/man.txt"
for want in "mount -t tensorfs SOURCE MOUNTPOINT" "--cache-size SIZE, -o cache_size=SIZE" "EXIT STATUS" \
  "CONFIGURATION.md"; do
  grep -qF -- "$want" "$work/man.txt" || { head -40 "$work/man.txt"; fail "man tensorfs lacks '$want'"; }
done
MANWIDTH=100 man mount.tensorfs 2>/dev/null | plain >"$work/man-helper.txt"
cmp -s "$work/man.txt" "$work/man-helper.txt" || fail "man mount.tensorfs does not show tensorfs(8)"

echo "== mount -t tensorfs"
mkdir -p "$work/src/llama" "$work/mnt"
head -c 3000000 /dev/urandom >"$work/src/llama/model.safetensors"
echo "hello" >"$work/src/README.txt"
mount -t tensorfs "$work/src" "$work/mnt" -o ro,_netdev,nofail >"$work/mount.log" 2>&1 ||
  { cat "$work/mount.log"; fail "mount -t tensorfs"; }
grep -q " $work/mnt fuse.tensorfs ro," /proc/mounts || fail "not a read-only fuse.tensorfs mount: $(grep " $work/mnt " /proc/mounts)"
cmp "$work/src/llama/model.safetensors" "$work/mnt/llama/model.safetensors" || fail "bytes through the mount differ"
[ "$(cat "$work/mnt/README.txt")" = hello ] || fail "README.txt through the mount"
daemon=$(pgrep -f "mount[.]tensorfs $work/src") || fail "no tensorfs serves the mount"
umount "$work/mnt" || fail "umount"
mountpoint -q "$work/mnt" && fail "still mounted after umount"
gone() { ! kill -0 "$daemon" 2>/dev/null; }
wait_for "the tensorfs process to exit after umount" gone
echo "PASS"
