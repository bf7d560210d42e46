#!/usr/bin/env bash
# The tensorfs benchmark in one command: installs what is needed, builds
# tensorfs, the test-data generator, the in-memory FUSE ceiling and the
# micro-benchmarks (release), runs the micro-benchmarks, then bench/bench.py,
# which compares tensorfs with its peers on an emulated GCS link and prints a
# table, the targets and where it wrote results.json and results.png.
# Run as root on Debian 12 (FUSE mounts, dropping the page cache).
#
#   bash bench/run.sh                              # 2 GiB checkpoint, every workload and peer
#   bash bench/run.sh --size-mib 256 --quick       # a few minutes
#   bash bench/run.sh --workloads W1,W4 --peers memfs --link-mbit 2000
#   bash bench/run.sh --size-mib 256 --workloads W1,W2,W6 --peers none --sources gs,s3
#                                                  # gs:// and s3:// (the server's S3 dialect) side by side
#
# Options of this script (the others go to bench.py; bench.py --help lists them):
#   --build-dir DIR   build here (default build/release)
#   --no-build        use the binaries already in the build directory
#   --no-micro        skip the micro-benchmarks (and the quantization throughput)
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=build/release
build=1
micro=1
bench_args=()
while (($#)); do
  case "$1" in
    --build-dir) build_dir=$2; shift 2 ;;
    --build-dir=*) build_dir=${1#*=}; shift ;;
    --no-build) build=0; shift ;;
    --no-micro) micro=0; shift ;;
    *) bench_args+=("$1"); shift ;;
  esac
done

out=bench/out
for ((i = 0; i < ${#bench_args[@]}; i++)); do
  case "${bench_args[i]}" in
    --out) out=${bench_args[i + 1]} ;;
    --out=*) out=${bench_args[i]#*=} ;;
  esac
done

targets=(tensorfs tensorfs-testdata memfs_ceiling micro_bench)
if ((build)); then
  bash packaging/install-deps.sh
  bash packaging/install-bench-deps.sh
  echo "== building ${targets[*]} in $build_dir"
  mkdir -p "$(dirname "$build_dir")"
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$build_dir.configure.log" 2>&1 ||
    { cat "$build_dir.configure.log"; exit 1; }
  # pipefail: the build's status is ninja's, whatever the filter does.
  if ! ninja -C "$build_dir" -j"${JOBS:-2}" "${targets[@]}" | { grep -vE '^\[[0-9]+/[0-9]+\] ' || true; }; then
    echo "bench: the build failed (the compiler's message is above)" >&2
    exit 1
  fi
fi

mkdir -p "$out"
micro_args=()
if ((micro)); then
  # The quantization and cast cases run inside bench.py, which sets them beside the link rate.
  echo "== micro-benchmarks (header parser, layer grouper)"
  "$build_dir/bench/micro_bench" --benchmark_min_time=0.2 --benchmark_filter='ParseHeader|GroupLayers' \
    --benchmark_out="$out/micro_bench.json" --benchmark_out_format=json 2>&1 | { grep -v '^\*\*\*WARNING' || true; }
  micro_args=(--micro-bench "$build_dir/bench/micro_bench")
fi

echo "== end-to-end benchmark"
exec /usr/bin/python3 bench/bench.py \
  --tensorfs "$build_dir/fs/tensorfs" \
  --testdata "$build_dir/tests/support/tensorfs-testdata" \
  --memfs "$build_dir/bench/memfs_ceiling" \
  "${micro_args[@]}" "${bench_args[@]}"
