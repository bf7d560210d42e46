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
[[ -d $dir ]] && exit 0
command -v debootstrap >/dev/null || { echo "make-test-root: debootstrap is missing (packaging/install-deps.sh)" >&2; exit 1; }
mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
[[ -n $mirror ]] || mirror=$(awk '$1 == "deb" && $3 == "bookworm" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
mirror=${mirror:-http://deb.debian.org/debian}
# What tensorfs' package depends on, and what the boot test uses in the root.
include=systemd,systemd-sysv,dbus,fuse3,libcurl4,libssl3,libspdlog1.10,libfmt9,ca-certificates,procps,util-linux
rm -rf "$dir.partial"
if ! debootstrap --variant=minbase --include="$include" bookworm "$dir.partial" "$mirror" >"$dir.log" 2>&1; then
  tail -20 "$dir.log" >&2
  rm -rf "$dir.partial"
  echo "make-test-root: debootstrap from $mirror failed (log: $dir.log)" >&2
  exit 1
fi
mv "$dir.partial" "$dir"
