#!/usr/bin/env bash
# Installs what is needed, builds tensorfs three ways and runs the whole suite:
#   release   g++, warnings as errors: unit tests, real mounts, test-server self-test
#   asan      g++ with AddressSanitizer + UndefinedBehaviorSanitizer: the same tests
#   tsa       clang++ with -Wthread-safety as errors: builds everything, runs the unit tests
# Fails on the first failure. Run as root (mount tests need /dev/fuse). Counts
# passed, failed and skipped tests apart; a skipped test fails the run too: here,
# as root after install-deps.sh, a skip means a missing dependency or a machine
# that the suite must not run on (an installed tensorfs package), never a pass.
set -euo pipefail
cd "$(dirname "$0")/.."
bash packaging/install-deps.sh

JOBS=${JOBS:-2}
passed=0
failed=0
skipped=0

summary() {
  echo "summary: $passed passed, $failed failed, $skipped skipped"
}

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
  local total=0 fail=0 skip
  if [[ -n $line ]]; then
    total=$(sed -E 's/.*out of ([0-9]+).*/\1/' <<<"$line")
    fail=$(sed -E 's/.* ([0-9]+) tests failed.*/\1/' <<<"$line")
  fi
  # ctest counts a skipped test as passed; its "did not run" list names them.
  skip=$(grep -cE '^[[:space:]]*[0-9]+ - .* \((Skipped|Disabled)\)$' "$log" || true)
  passed=$((passed + total - fail - skip))
  failed=$((failed + fail))
  skipped=$((skipped + skip))
  echo "$dir: $((total - fail - skip)) passed, $fail failed, $skip skipped"
  if [[ $rc -ne 0 || -z $line ]]; then
    echo "tests failed in $dir"
    summary
    exit 1
  fi
  if [[ $skip -ne 0 ]]; then
    echo "tests skipped in $dir, which the suite does not allow (why: $dir/Testing/Temporary/LastTest.log):"
    grep -E '^[[:space:]]*[0-9]+ - .* \((Skipped|Disabled)\)$' "$log"
    summary
    exit 1
  fi
}

run_script() {  # NAME COMMAND...: one test counted like ctest's; its skip (exit 77) fails the run too
  local name=$1 rc=0
  shift
  echo "== test $name"
  "$@" || rc=$?
  case $rc in
    0) passed=$((passed + 1)) ;;
    77) skipped=$((skipped + 1)); echo "$name skipped, which the suite does not allow"; summary; exit 1 ;;
    *) failed=$((failed + 1)); echo "$name failed"; summary; exit 1 ;;
  esac
}

mkdir -p build
configure_and_build build/release -DCMAKE_BUILD_TYPE=RelWithDebInfo
run_ctest build/release
run_script boot_test bash tests/systemd/boot_test.sh build/release  # tensorfs under a booted systemd

configure_and_build build/asan -DCMAKE_BUILD_TYPE=Debug -DTENSORFS_SANITIZE=ON -DTENSORFS_BUILD_BENCH=OFF
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  run_ctest build/asan

CXX=clang++ configure_and_build build/tsa -DCMAKE_BUILD_TYPE=Debug -DTENSORFS_THREAD_SAFETY=ON \
  -DTENSORFS_BUILD_BENCH=OFF
run_ctest build/tsa -LE mount
run_script fuzz env JOBS="$JOBS" bash packaging/run-fuzz.sh  # every fuzz target for FUZZ_SECONDS (20) each; fails on a crash

echo
summary
