#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang, ASan and UBSan in
# build/fuzz and runs each fuzz_* target for FUZZ_SECONDS (default 20) over its
# seed corpus, tests/fuzz/corpus/<target without fuzz_>/. Fails on the first
# crash, sanitizer report, leak, timeout or out-of-memory; libFuzzer's report
# is printed and the input that caused it is kept in build/fuzz/artifacts/.
#
#   packaging/run-fuzz.sh                     every target, 20 s each
#   FUZZ_SECONDS=1800 packaging/run-fuzz.sh fuzz_safetensors_header
#
# New inputs a run finds go to build/fuzz/corpus/<target>/ (kept between runs
# and read back next time), never into the checked-in seeds.
set -euo pipefail
cd "$(dirname "$0")/.."

FUZZ_SECONDS=${FUZZ_SECONDS:-20}
JOBS=${JOBS:-2}
dir=build/fuzz

echo "== build $dir"
mkdir -p build
CXX=${FUZZ_CXX:-clang++} cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTENSORFS_FUZZ=ON \
  -DTENSORFS_BUILD_TESTS=OFF -DTENSORFS_BUILD_BENCH=OFF -DTENSORFS_WERROR=ON \
  >"$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; exit 1; }
mapfile -t all_targets < <(ninja -C "$dir" -t targets all | sed -nE 's/^(fuzz_[a-z0-9_]+): .*/\1/p' | sort -u)
targets=("$@")
((${#targets[@]} > 0)) || targets=("${all_targets[@]}")
((${#targets[@]} > 0)) || { echo "run-fuzz: no fuzz_* targets in $dir" >&2; exit 1; }
ninja -C "$dir" -j"$JOBS" "${targets[@]}" | grep -vE '^\[[0-9]+/[0-9]+\] ' || true
test "${PIPESTATUS[0]}" -eq 0

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
for target in "${targets[@]}"; do
  name=${target#fuzz_}
  seeds=tests/fuzz/corpus/$name
  [[ -d "$seeds" ]] || { echo "run-fuzz: $target has no seed corpus $seeds" >&2; exit 1; }
  work=$dir/corpus/$name
  mkdir -p "$work" "$dir/artifacts"
  dict=()
  [[ -f tests/fuzz/$name.dict ]] && dict=(-dict="tests/fuzz/$name.dict")
  echo "== fuzz $target for ${FUZZ_SECONDS}s"
  log=$dir/$target.log
  if ! "$dir/tests/fuzz/$target" -max_total_time="$FUZZ_SECONDS" -timeout=25 -rss_limit_mb=2560 \
      -print_final_stats=1 -artifact_prefix="$dir/artifacts/$target-" "${dict[@]}" "$work" "$seeds" >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "run-fuzz: $target failed; the input is in $dir/artifacts/" >&2
    exit 1
  fi
  grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb' "$log" | tr '\n' ' ' | sed "s/^/$target: /"
  echo
done
