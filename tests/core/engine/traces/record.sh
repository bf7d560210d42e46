#!/bin/bash
# Records the kernel's reads of the benchmark's loaders (bench/loader.py) as
# read traces: each workload on a fresh mount of the trace checkpoint (a local
# directory; the engine's decisions do not depend on the source), with
# TENSORFS_TRACE_READS set.
#
#   tests/core/engine/traces/record.sh BUILD_DIR [NAME...]   # NAMEs: only those traces
#   tests/core/engine/traces/record.sh --qwen2 BUILD_DIR [NAME...]
#
# --qwen2 records the traces of qwen2/ instead, on the qwen2 trace checkpoint
# (its q/k/v_proj biases and layer norms, one row each, lie on either side of
# the attention weights). Both mount at the defaults: the readahead policy in
# force, so the first shard is read at 64 KiB and a process's next file at
# what its readers were seen to do (readahead_policy.h).
#
# --shared records the traces of shared/ instead, on the trace checkpoint
# mounted at its defaults: readers that share one mount (8 processes each
# copying its rows r/8 of every tensor, started together; 32 threads of one
# process copying tensors out of one mapping per shard, shuffled), and one
# whole loader to compare them with.
#
# Then write the expected requests (README.md says how).
set -euo pipefail
qwen2=false
shared=false
if [[ ${1:-} == --qwen2 ]]; then qwen2=true; shift; fi
if [[ ${1:-} == --shared ]]; then shared=true; shift; fi
build=$(realpath "$1")
shift
only=" $* "
here=$(cd "$(dirname "$0")" && pwd)
loader=$(cd "$here/../../../.." && pwd)/bench/loader.py
work=$(mktemp -d /tmp/tensorfs-traces-XXXXXX)
trap 'fusermount3 -u "$work/mnt" 2>/dev/null || true; rm -rf "$work"' EXIT
if $qwen2; then
  here=$here/qwen2
  checkpoint=(--arch qwen2 --layers 2 --hidden 512 --intermediate 1536 --vocab 1024)
else
  checkpoint=(--arch llama --layers 4 --hidden 512 --intermediate 1536 --vocab 4096)
fi
"$build/tests/support/tensorfs-testdata" "${checkpoint[@]}" --dtype f32 --shards 2 --out "$work/src" > /dev/null
mkdir -p "$work/mnt"
shards=(model-00001-of-00002.safetensors model-00002-of-00002.safetensors)

# record NAME COMMAND...: mounts, runs COMMAND (with $M the mount point), unmounts.
record() {
  local name=$1; shift
  if [[ "$only" != "  " && "$only" != *" $name "* ]]; then return; fi
  TENSORFS_TRACE_READS="$here/$name.trace" "$build/fs/tensorfs" "$work/src" "$work/mnt" -f > "$work/log" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do mountpoint -q "$work/mnt" && break; sleep 0.1; done
  M="$work/mnt" bash -c "$*" > /dev/null
  fusermount3 -u "$work/mnt"
  wait $pid
  echo "$name: $(grep -vc '^#' "$here/$name.trace") reads"
}
files() { local out=""; for s in "$@"; do out+=" \$M/$s"; done; echo "$out"; }

if $shared; then
  here=$here/shared
  mkdir -p "$here"
  record load "$loader load $(files "${shards[@]}")"
  ranks=""
  for rank in 0 1 2 3 4 5 6 7; do
    ranks+="$loader slice --rank $rank --world 8 --start-at \$at $(files "${shards[@]}") & "
  done
  record procs8_slices "at=\$(python3 -c 'import time; print(time.monotonic() + 1)'); $ranks wait"
  record threads32 "$loader threads --threads 32 --order random --seed 1 $(files "${shards[@]}")"
  exit 0
fi

if $qwen2; then
  record load "$loader load $(files "${shards[@]}")"
  record load_shuffled "$loader load --order random --seed 1 $(files "${shards[@]}")"
  for seed in 2 3; do
    record "slice_shuffled_seed${seed}_r7of8" \
      "$loader slice --rank 7 --world 8 --order random --seed $seed $(files "${shards[@]}")"
  done
  exit 0
fi

record w1_load "$loader load $(files "${shards[@]}")"
record w2_load_shuffled "$loader load --order random --seed 1 $(files "${shards[@]}")"
record w3_two_processes "$loader load $(files "${shards[0]}") & $loader load $(files "${shards[1]}"); wait"
record w5_headers "$loader headers \$M"
for rank in 0 1 2 3; do
  record "w8_slice_storage_r${rank}of4" "$loader slice --rank $rank --world 4 $(files "${shards[@]}")"
done
record w8_slice_shuffled_r1of4 "$loader slice --rank 1 --world 4 --order random --seed 1 $(files "${shards[@]}")"
record w9_columns_r1of4 "$loader slice --rank 1 --world 4 --dim 1 $(files "${shards[@]}")"
# The view files: their reads of the shards name the view file's source range
# (`within`), and the prefetches they ask for are recorded too. The layer files
# are read in forward order, as AirLLM reads them.
cat > "$work/layers.py" <<'PY'
import os, re, sys
d = sys.argv[1]
def key(n):
    m = re.search(r'layers\.(\d+)\.', n)
    return (1, int(m.group(1))) if m else (0, 0) if 'embed' in n else (2, 0) if 'norm' in n else (3, 0)
print(' '.join(os.path.join(d, n) for n in sorted(os.listdir(d), key=key) if n.endswith('.safetensors')))
PY
layers() { echo "\$(python3 $work/layers.py \$M/$1)"; }
record w6_splitted_model "$loader layers $(layers splitted_model)"
record w7_splitted_model_4bit "$loader layers $(layers splitted_model.4bit)"
record w10_stacked "$loader load \$(ls \$M/@stacked/*.safetensors)"
