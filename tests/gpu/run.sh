#!/bin/bash
# Runs the real-loader checks (tests/gpu/real_loaders.py) against a tensorfs
# carried in a folder made by tests/gpu/pack.sh:
#
#   tests/gpu/run.sh [--carried DIR] [real_loaders.py options...]
#
# DIR (default .device) holds `tensorfs` and its libraries; LD_LIBRARY_PATH is
# set for tensorfs alone. Needs root (it mounts with /dev/fuse and unmounts
# with umount), python3 with torch, and for the full run transformers and
# safetensors. Prints one line per check and closes with "N passed, N failed".
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
carried=$root/.device
if [[ ${1:-} == --carried ]]; then
  carried=$(cd "$2" && pwd)
  shift 2
fi
if [[ ! -x $carried/tensorfs ]]; then
  echo "run.sh: no tensorfs in $carried: make it with tests/gpu/pack.sh BINARY $carried" >&2
  exit 2
fi
if [[ $(id -u) != 0 ]]; then
  echo "run.sh: run as root (it mounts and unmounts)" >&2
  exit 2
fi
if ! env LD_LIBRARY_PATH="$carried" "$carried/tensorfs" --help > /dev/null; then
  echo "run.sh: $carried/tensorfs does not start here (see above: a library missing, or an older glibc)" >&2
  exit 2
fi
exec "${PYTHON:-python3}" "$here/real_loaders.py" --tensorfs "$carried/tensorfs" --libdir "$carried" "$@"
