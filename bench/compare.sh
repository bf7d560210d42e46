#!/usr/bin/env bash
# Two tensorfs binaries on the same data path, in one run, interleaved pass by
# pass (bench/compare.py says how): for a change to the data path, checked
# against main before it lands (docs/PERFORMANCE.md).
#
#   bash bench/compare.sh OLD_BIN NEW_BIN [--size 1024M] [--passes 5] [--sources gs,dir]
#                         [--loaders numpy,pages,cat,readers] [--out FILE]
#
# For example, main's binary against the working tree's:
#   git worktree add /tmp/main main && cmake -S /tmp/main -B /tmp/main/build -G Ninja -DTENSORFS_BUILD_TESTS=OFF \
#     && ninja -C /tmp/main/build tensorfs
#   bash bench/compare.sh /tmp/main/build/fs/tensorfs build/release/fs/tensorfs
# Run as root (FUSE mounts, dropping the page cache); about 4 minutes for 1 GiB
# and 5 passes on 2 CPUs.
set -euo pipefail
cd "$(dirname "$0")/.."
if (($# < 2)); then
  echo "usage: bash bench/compare.sh OLD_BIN NEW_BIN [bench/compare.py options]" >&2
  exit 2
fi
bash packaging/install-deps.sh
exec /usr/bin/python3 bench/compare.py "$@"
