#!/usr/bin/env bash
# Runs the libFuzzer targets (tests/fuzz) for FUZZ_SECONDS (default 20) each
# over their seed corpora, tests/fuzz/corpus/<target without fuzz_>/, JOBS
# (default 2) at a time. Fails on the first crash, sanitizer report, leak,
# timeout or out-of-memory; libFuzzer's report is printed and the input that
# caused it is kept in BUILD/artifacts/.
#
#   packaging/run-fuzz.sh                     every target, 20 s each
#   FUZZ_SECONDS=1800 packaging/run-fuzz.sh fuzz_safetensors_header
#
# The targets are built in FUZZ_BUILD_DIR when it is given (a clang build
# configured with -DTENSORFS_FUZZ=ON, as packaging/run-tests.sh's is), else in
# build/fuzz, configured here with clang, ASan and UBSan. New inputs a run
# finds go to BUILD/corpus/<target>/ (kept between runs and read back next
# time), never into the checked-in seeds.
set -euo pipefail
cd "$(dirname "$0")/.."

FUZZ_SECONDS=${FUZZ_SECONDS:-20}
JOBS=${JOBS:-2}
dir=${FUZZ_BUILD_DIR:-build/fuzz}

if [[ -z ${FUZZ_BUILD_DIR:-} ]]; then
  mkdir -p build
  CXX=${FUZZ_CXX:-clang++} cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTENSORFS_FUZZ=ON \
    -DTENSORFS_BUILD_TESTS=OFF -DTENSORFS_BUILD_BENCH=OFF -DTENSORFS_WERROR=ON \
    >"$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; echo "run-fuzz: configure of $dir failed" >&2; exit 1; }
fi
mapfile -t all_targets < <(ninja -C "$dir" -t targets all | sed -nE 's/^(fuzz_[a-z0-9_]+): .*/\1/p' | sort -u)
targets=("$@")
((${#targets[@]} > 0)) || targets=("${all_targets[@]}")
((${#targets[@]} > 0)) || { echo "run-fuzz: no fuzz_* targets in $dir" >&2; exit 1; }
# pipefail: the build's status is ninja's, whatever the filter does.
if ! ninja -C "$dir" -j"$JOBS" "${targets[@]}" 2>&1 | { grep -vE '^\[[0-9]+/[0-9]+\] ' || true; }; then
  echo "run-fuzz: building the fuzz targets in $dir failed" >&2
  exit 1
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
mkdir -p "$dir/artifacts"

# Runs one target; its log is BUILD/TARGET.log.
fuzz() {  # TARGET
  local target=$1 name=${1#fuzz_}
  local seeds=tests/fuzz/corpus/$name work=$dir/corpus/$name
  [[ -d "$seeds" ]] || { echo "run-fuzz: $target has no seed corpus $seeds" >&2; return 1; }
  mkdir -p "$work"
  local dict=()
  [[ -f tests/fuzz/$name.dict ]] && dict=(-dict="tests/fuzz/$name.dict")
  "$dir/tests/fuzz/$target" -max_total_time="$FUZZ_SECONDS" -timeout=25 -rss_limit_mb=2560 \
    -print_final_stats=1 -artifact_prefix="$dir/artifacts/$target-" "${dict[@]}" "$work" "$seeds" \
    >"$dir/$target.log" 2>&1
}

# JOBS targets at a time; each result is reported as it ends.
declare -A running=()
status=0
report() {  # PID
  local pid=$1 target=${running[$1]} rc=0
  wait "$pid" || rc=$?
  unset "running[$pid]"
  if [[ $rc -ne 0 ]]; then
    tail -n 60 "$dir/$target.log"
    echo "run-fuzz: $target failed; the input is in $dir/artifacts/" >&2
    status=1
  else
    echo "$target: $(grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb' "$dir/$target.log" | tr '\n' ' ')"
  fi
}
for target in "${targets[@]}"; do
  while ((${#running[@]} >= JOBS)); do
    wait -n -p done_pid || true
    report "$done_pid"
  done
  echo "== fuzz $target for ${FUZZ_SECONDS}s"
  fuzz "$target" &
  running[$!]=$target
done
while ((${#running[@]} > 0)); do
  wait -n -p done_pid || true
  report "$done_pid"
done
exit $status
