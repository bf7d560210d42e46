#!/usr/bin/env bash
# Installs what is needed, builds tensorfs three ways and runs the whole suite:
#   release   g++, warnings as errors: unit tests, real mounts, test-server self-test
#   asan      g++ with AddressSanitizer + UndefinedBehaviorSanitizer: the same tests
#   tsa       clang++ with -Wthread-safety as errors: builds everything, runs the unit tests
# Fails on the first failure. Run as root (mount tests need /dev/fuse).
set -euo pipefail
cd "$(dirname "$0")/.."
bash packaging/install-deps.sh

JOBS=${JOBS:-2}
passed=0
failed=0

configure_and_build() {  # DIR CMAKE_ARGS...
  local dir=$1
  shift
  echo "== build $dir"
  cmake -S . -B "$dir" -G Ninja -DTENSORFS_WERROR=ON "$@" >"$dir.configure.log" 2>&1 ||
    { cat "$dir.configure.log"; exit 1; }
  ninja -C "$dir" -j"$JOBS" | grep -vE '^\[[0-9]+/[0-9]+\] ' || true
  test "${PIPESTATUS[0]}" -eq 0
}

run_ctest() {  # DIR [CTEST_ARGS...]
  local dir=$1
  shift
  echo "== test $dir"
  local log="$dir.ctest.log"
  set +e
  (cd "$dir" && ctest -j"$JOBS" --output-on-failure --timeout 600 "$@") | tee "$log" | grep -vE '^ +Start |Test +#[0-9]+: .* Passed'
  local rc=${PIPESTATUS[0]}
  set -e
  local line
  line=$(grep -E 'tests passed, [0-9]+ tests failed out of [0-9]+' "$log" | tail -1)
  local total fail
  total=$(sed -E 's/.*out of ([0-9]+).*/\1/' <<<"$line")
  fail=$(sed -E 's/.* ([0-9]+) tests failed.*/\1/' <<<"$line")
  passed=$((passed + total - fail))
  failed=$((failed + fail))
  [[ $rc -eq 0 ]] || { echo "tests failed in $dir"; echo "summary: $passed passed, $failed failed"; exit 1; }
}

mkdir -p build
configure_and_build build/release -DCMAKE_BUILD_TYPE=RelWithDebInfo
run_ctest build/release

configure_and_build build/asan -DCMAKE_BUILD_TYPE=Debug -DTENSORFS_SANITIZE=ON -DTENSORFS_BUILD_BENCH=OFF
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  run_ctest build/asan

CXX=clang++ configure_and_build build/tsa -DCMAKE_BUILD_TYPE=Debug -DTENSORFS_THREAD_SAFETY=ON \
  -DTENSORFS_BUILD_BENCH=OFF
run_ctest build/tsa -LE mount
JOBS="$JOBS" bash packaging/run-fuzz.sh  # every fuzz target for FUZZ_SECONDS (20) each; fails on a crash

echo
echo "$passed passed, $failed failed"
