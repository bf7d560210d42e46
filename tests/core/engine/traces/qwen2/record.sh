#!/bin/bash
# Records the kernel's reads of bench/loader.py on the qwen2 trace checkpoint
# (its q/k/v_proj biases and layer norms, one row each, lie on either side of
# the attention weights) through a mount at its defaults: the readahead policy
# in force, so the first shard is read at 64 KiB and a process's next file at
# what its readers were seen to do (readahead_policy.h). A local directory:
# the engine's decisions do not depend on the source.
#
#   tests/core/engine/traces/qwen2/record.sh BUILD_DIR [NAME...]   # NAMEs: only those traces
#
# Then write the expected requests (../README.md says how).
set -euo pipefail
build=$(realpath "$1")
shift
only=" $* "
here=$(cd "$(dirname "$0")" && pwd)
loader=$(cd "$here/../../../../.." && pwd)/bench/loader.py
work=$(mktemp -d /tmp/tensorfs-traces-XXXXXX)
trap 'fusermount3 -u "$work/mnt" 2>/dev/null || true; rm -rf "$work"' EXIT
"$build/tests/support/tensorfs-testdata" --arch qwen2 --layers 2 --hidden 512 --intermediate 1536 --vocab 1024 \
  --dtype f32 --shards 2 --out "$work/src" > /dev/null
mkdir -p "$work/mnt"
files="$work/mnt/model-00001-of-00002.safetensors $work/mnt/model-00002-of-00002.safetensors"

# record NAME LOADER_ARGS...: mounts, runs the loader on both shards, unmounts.
record() {
  local name=$1; shift
  if [[ "$only" != "  " && "$only" != *" $name "* ]]; then return; fi
  TENSORFS_TRACE_READS="$here/$name.trace" "$build/fs/tensorfs" "$work/src" "$work/mnt" -f > "$work/log" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do mountpoint -q "$work/mnt" && break; sleep 0.1; done
  # shellcheck disable=SC2086
  "$loader" "$@" $files > /dev/null
  fusermount3 -u "$work/mnt"
  wait $pid
  echo "$name: $(grep -vc '^#' "$here/$name.trace") reads"
}

record load load
record load_shuffled load --order random --seed 1
record slice_shuffled_seed2_r7of8 slice --rank 7 --world 8 --order random --seed 2
record slice_shuffled_seed3_r7of8 slice --rank 7 --world 8 --order random --seed 3
