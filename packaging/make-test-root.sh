#!/usr/bin/env bash
# make-test-root.sh DIR
#
# Makes DIR a minimal Debian 12 root (debootstrap --variant=minbase from the
# mirror apt uses) holding what tensorfs' package depends on, so that
# installing the .deb in it needs no download. The package tests boot it with
# systemd-nspawn -b (tests/systemd/boot_test.sh) on an overlay, never changing
# it. Built once: a DIR that exists is left as it is. Concurrent callers wait
# for the one building it (flock on DIR.lock), so packaging/run-tests.sh starts
# it in the background while it compiles and the tests that need it wait.
set -euo pipefail
dir=${1:?usage: make-test-root.sh DIR}
mkdir -p "$(dirname "$dir")"
exec 8>"$dir.lock"
flock -w 1800 8 || { echo "make-test-root: another build of $dir held its lock for 30 minutes" >&2; exit 1; }
# What tensorfs' package depends on, and what the boot test uses in the root
# (man-db and groff-base: the package test reads `man tensorfs` there).
include=systemd,systemd-sysv,dbus,fuse3,libcurl4,libssl3,libspdlog1.10,libfmt9,ca-certificates,procps,util-linux
include+=,man-db,groff-base
# A root made before a package joined the list is made again.
if [[ -d $dir ]]; then
  complete=1
  for p in ${include//,/ }; do
    [[ -e $dir/var/lib/dpkg/info/$p.list || -e $dir/var/lib/dpkg/info/$p:amd64.list ||
       -n $(compgen -G "$dir/var/lib/dpkg/info/$p:*.list") ]] || complete=0
  done
  ((complete)) && exit 0
  echo "make-test-root: $dir lacks packages of the list; making it again" >&2
  rm -rf "$dir"
fi
command -v debootstrap >/dev/null || { echo "make-test-root: debootstrap is missing (packaging/install-deps.sh)" >&2; exit 1; }
mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
[[ -n $mirror ]] || mirror=$(awk '$1 == "deb" && $3 == "bookworm" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
mirror=${mirror:-http://deb.debian.org/debian}
rm -rf "$dir.partial"
if ! debootstrap --variant=minbase --include="$include" bookworm "$dir.partial" "$mirror" >"$dir.log" 2>&1; then
  tail -20 "$dir.log" >&2
  rm -rf "$dir.partial"
  echo "make-test-root: debootstrap from $mirror failed (log: $dir.log)" >&2
  exit 1
fi
mv "$dir.partial" "$dir"
