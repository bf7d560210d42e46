#!/bin/bash
# Packs a built tensorfs binary and the shared libraries it loads into one
# folder, to be carried to a machine that has none of them:
#
#   tests/gpu/pack.sh [BINARY] [DEST]     (defaults: build/release/fs/tensorfs, .device)
#
# Everything `ldd` lists is copied except glibc's own libraries (libc, libm,
# libpthread, libdl, librt, the dynamic loader): those must come from the
# machine, in a version at least the one printed at the end. The copies are
# stripped of debug info, to travel light.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$root/build/release/fs/tensorfs}
dest=${2:-$root/.device}
if [[ ! -x $bin ]]; then
  echo "pack.sh: no tensorfs binary at $bin; build it (ninja -C build/NAME tensorfs) or name it" >&2
  exit 1
fi
rm -rf "$dest"
mkdir -p "$dest"
cp "$bin" "$dest/tensorfs"
missing=$(ldd "$bin" | awk '/not found/ {print $1}')
if [[ -n $missing ]]; then
  echo "pack.sh: $bin needs libraries this machine lacks: $missing" >&2
  exit 1
fi
ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | while read -r lib; do
  case $(basename "$lib") in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*) continue ;;
  esac
  cp -L "$lib" "$dest/"
done
# Debug info is most of the binary's size; the copies go without it.
if command -v strip > /dev/null; then
  strip --strip-debug "$dest"/*
fi
glibc=$(objdump -T "$dest"/* 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
echo "packed $(ls "$dest" | wc -l) files, $(du -sh "$dest" | cut -f1), into $dest; needs ${glibc:-GLIBC (unknown)} or later"
