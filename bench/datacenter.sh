#!/usr/bin/env bash
# The datacenter profile of the benchmark (bench/datacenter.py; bench/README.md
# has the figures): tensorfs with no link emulation, over a local directory
# and over the test server (HTTP and HTTPS), against the test server's own
# ceiling, memfs_ceiling (the FUSE ceiling, given the readahead and queue
# limits a tensorfs mount has in force) and the local page cache (the loader's
# ceiling), with CPU-seconds per GB and the FUSE read sizes per reader.
#
#   SIZE=1024M PYTHON=/usr/bin/python3 bash bench/datacenter.sh run --device cpu --no-https
#                                             # the loopback profile on a small VM
#
#   bash bench/datacenter.sh package          # here: build, then bundle tensorfs, memfs_ceiling and
#                                             # their shared libraries (glibc's excepted) in build/device,
#                                             # with a throwaway CA and server certificate (build/device/tls)
#   bash bench/datacenter.sh run [ARGS...]    # anywhere, as root: run it (datacenter.py ARGS, e.g.
#                                             # --size 512M --device cpu); SIZE=512M works too;
#                                             # PYTHON=/usr/bin/python3 picks the interpreter
#   bash bench/datacenter.sh sweep read_ahead=128K,1M,16M [ARGS...]
#                                             # a `run` per value of one tensorfs option, then one
#                                             # table of them (SWEEP_OUT=DIR for the JSON files)
#
# `run` takes the binaries from --build-dir (default build/release) when it
# holds them, else from build/device (with LD_LIBRARY_PATH set for those two
# processes only), and says which: a bundle made earlier never stands in for
# the build under test. The bundle is what a machine without the build
# dependencies needs: copy the working tree with build/device (and without
# the build) and run `bash bench/datacenter.sh run` there.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-run}
(($#)) && shift
build_dir=build/release
bundle=build/device

case "$mode" in
  package)
    while (($#)); do
      case "$1" in
        --build-dir) build_dir=$2; shift 2 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
      esac
    done
    if [[ ! -f "$build_dir/build.ninja" ]]; then
      cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$build_dir.configure.log" 2>&1 ||
        { cat "$build_dir.configure.log"; exit 1; }
    fi
    ninja -C "$build_dir" -j"${JOBS:-2}" tensorfs memfs_ceiling
    rm -rf "$bundle"
    mkdir -p "$bundle/bin" "$bundle/lib"
    for bin in "$build_dir/fs/tensorfs" "$build_dir/bench/memfs_ceiling"; do
      objcopy --strip-debug "$bin" "$bundle/bin/$(basename "$bin")"
      # Every library the loader resolves, except glibc's own (the target's must be used).
      ldd "$bin" | awk '/=> \// {print $3}' | while read -r lib; do
        case "$(basename "$lib")" in
          libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*|libresolv.so.*) ;;
          *) cp -L "$lib" "$bundle/lib/" ;;
        esac
      done
    done
    strip --strip-unneeded "$bundle"/lib/*.so* 2>/dev/null || true
    # A throwaway CA and server certificate (valid two days), for a target without the openssl CLI.
    python3 -c 'import sys; sys.path.insert(0, "bench"); import datacenter; sys.exit(datacenter.make_certs(sys.argv[1]) is None)' "$bundle"
    du -sh "$bundle"
    echo "bundle ready: $bundle (carry it with the tree; run: bash bench/datacenter.sh run)"
    ;;
  run)
    args=("$@")
    if [[ -n "${SIZE:-}" ]]; then args=(--size "$SIZE" "${args[@]}"); fi
    for ((i = 0; i < ${#args[@]}; i++)); do
      if [[ "${args[i]}" == --build-dir ]]; then
        build_dir=${args[i + 1]}
        args=("${args[@]:0:i}" "${args[@]:i+2}")
        break
      fi
    done
    if [[ -x "$build_dir/fs/tensorfs" ]]; then
      bins=(--tensorfs "$build_dir/fs/tensorfs" --memfs "$build_dir/bench/memfs_ceiling")
    elif [[ -x "$bundle/bin/tensorfs" ]]; then
      bins=(--tensorfs "$bundle/bin/tensorfs" --memfs "$bundle/bin/memfs_ceiling" --lib-dir "$bundle/lib")
      if [[ -f "$bundle/tls/ca.pem" ]]; then bins+=(--certs "$bundle/tls"); fi
    else
      echo "no tensorfs in $build_dir/fs or $bundle/bin: build it, or bash bench/datacenter.sh package" >&2
      exit 2
    fi
    echo "[datacenter] tensorfs: ${bins[1]}, memfs_ceiling: ${bins[3]}" >&2
    exec "${PYTHON:-python3}" bench/datacenter.py "${bins[@]}" "${args[@]}"
    ;;
  sweep)
    # One option over several values, a whole `run` per value (the same loaders and sources),
    # then one table of them all: bash bench/datacenter.sh sweep read_ahead=128K,1M,16M [run options]
    spec=${1:?usage: bash bench/datacenter.sh sweep OPTION=V1,V2,... [run options]}
    shift
    [[ "$spec" == *=* ]] || { echo "sweep: give OPTION=V1,V2,... (e.g. read_ahead=128K,1M)" >&2; exit 2; }
    name=${spec%%=*}
    before=()  # an earlier build given is run at each value too
    for a in "$@"; do
      case "$a" in
        --tensorfs-opts|--tensorfs-before-opts|--out) echo "sweep: $a is set per value; leave it out" >&2; exit 2 ;;
        --tensorfs-before) before=(--tensorfs-before-opts) ;;
      esac
    done
    outs=()
    IFS=, read -r -a values <<<"${spec#*=}"
    for i in "${!values[@]}"; do
      value=${values[i]}
      out="${SWEEP_OUT:-bench/out}/sweep-$i-$name-$value.json"
      rm -f "$out"
      echo "=== sweep: -o $name=$value" >&2
      bash bench/datacenter.sh run --tensorfs-opts "$name=$value" ${before[@]+"${before[@]}" "$name=$value"} \
        --out "$out" "$@" || echo "=== sweep: $name=$value failed" >&2
      outs+=("$out")
    done
    exec "${PYTHON:-python3}" bench/datacenter.py --sweep-report "${outs[@]}"
    ;;
  *)
    echo "usage: bash bench/datacenter.sh package [--build-dir DIR] | run [datacenter.py options] |" \
         "sweep OPTION=V1,V2,... [datacenter.py options]" >&2
    exit 2
    ;;
esac
