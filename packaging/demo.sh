#!/usr/bin/env bash
# The tensorfs demo: installs what is needed, builds tensorfs, generates a
# 4-shard Llama-shaped checkpoint, serves it from the project's GCS-compatible
# test server on 127.0.0.1, mounts gs://demo-bucket/llama-demo through the GCS
# backend, lists it, loads every tensor through the mount by mmap (checking the
# bytes against the source), reads the per-layer and quantized views (checking
# them against a numpy reference), and unmounts. Run as root on Debian 12.
#
# Its exit status never depends on timing: no command's output is piped into
# a reader that may stop early (under pipefail its writer's SIGPIPE would end
# the demo), and every wait has a generous limit and says what it waited for.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

echo "== installing build dependencies (if missing)"
bash packaging/install-deps.sh
echo "== building tensorfs"
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
# pipefail: the build's status is ninja's, whatever the filter does.
if ! ninja -C build/release -j2 tensorfs tensorfs-testdata | { grep -vE '^\[[0-9]+/[0-9]+\] ' || true; }; then
  echo "demo: the build failed (the compiler's message is above)" >&2
  exit 1
fi
tensorfs=$repo/build/release/fs/tensorfs

work=$(mktemp -d /tmp/tensorfs-demo.XXXXXX)
data=$work/gcs          # each subdirectory is a bucket
src=$data/demo-bucket   # the objects, as files
mnt=$work/mnt
mkdir -p "$src" "$mnt"
server_pid=
cleanup() {
  if grep -qs " $mnt " /proc/mounts; then fusermount3 -u "$mnt" || umount -l "$mnt"; fi
  [[ -z "$server_pid" ]] || kill "$server_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

echo "== generating a checkpoint: gs://demo-bucket/llama-demo"
build/release/tests/support/tensorfs-testdata --arch llama --layers 8 --hidden 512 --intermediate 1408 \
  --vocab 8192 --dtype bf16 --shards 4 --out "$src/llama-demo"

echo "== starting the GCS-compatible test server"
/usr/bin/python3 tests/support/gcs_test_server.py --data "$data" --port 0 --port-file "$work/port" --quiet &
server_pid=$!
for _ in $(seq 600); do  # 60 s: the server answers in well under a second unless something is wrong
  [[ -s "$work/port" ]] && break
  kill -0 "$server_pid" 2>/dev/null || { echo "demo: the test server exited" >&2; exit 1; }
  sleep 0.1
done
[[ -s "$work/port" ]] || { echo "demo: the test server did not start within 60 s" >&2; exit 1; }
export STORAGE_EMULATOR_HOST=127.0.0.1:$(cat "$work/port")
echo "   STORAGE_EMULATOR_HOST=$STORAGE_EMULATOR_HOST"

echo "== mounting: tensorfs gs://demo-bucket $mnt"
"$tensorfs" gs://demo-bucket "$mnt"
echo "== ls -l $mnt/llama-demo"
ls -l "$mnt/llama-demo"
echo "== tensorfs inspect $mnt/llama-demo (first lines)"
# The whole output is taken first, then its first lines shown: no pipe into head.
inspect=$("$tensorfs" inspect "$mnt/llama-demo")
sed -n 1,25p <<<"$inspect"
echo "== loading every tensor through the mount by mmap"
/usr/bin/python3 tests/support/mmap_loader.py "$mnt/llama-demo" --compare "$src/llama-demo"
echo "== virtual views: ls -l $mnt/llama-demo/splitted_model.4bit (first lines)"
listing=$(ls -l "$mnt/llama-demo/splitted_model.4bit")
sed -n 1,7p <<<"$listing"
echo "== checking the per-layer, NF4 and bitsandbytes views against a numpy reference"
/usr/bin/python3 tests/support/check_views.py --mount "$mnt/llama-demo" --source "$src/llama-demo" \
  --views splitted_model,splitted_model.4bit,@bnb-nf4
echo "== unmounting"
fusermount3 -u "$mnt"
echo "demo finished: every tensor read through tensorfs matched the source, and the views their reference"
