#!/usr/bin/env bash
# Installs what is needed, builds tensorfs two ways and runs the whole suite:
#   release  g++, warnings as errors: the unit tests, the real mounts, the
#            package and booted-systemd tests, the test server's and the
#            views reference's self-tests; then README's first command (the
#            demo) as README writes it, three times in a row on that build;
#   clang    clang++ with AddressSanitizer, UndefinedBehaviorSanitizer and
#            -Wthread-safety, warnings as errors: every source and test
#            compiled under the thread-safety analysis; the unit tests and
#            real mounts run again (a sanitizer report from a test or from a
#            tensorfs it started fails that test); then the fuzz targets, built
#            from the parsers with libFuzzer's instrumentation, run
#            FUZZ_SECONDS (20) each.
# Fails at the first failure: a configure or compile error shows the
# compiler's message, a failing test its output. Run as root (the tests mount,
# and run in namespaces of their own). Every test runs under the test sandbox
# (tests/support/sandbox_main.cc), which leaves the machine as it found it.
# A skipped test fails the run: here, as root after install-deps.sh, a skip
# means a missing dependency, never a pass. The one exception is a test, or a
# case of one, that needs a feature this machine's kernel lacks (autofs, the
# memory cgroup, ...): it prints one "NOT RUN: TEST: needs FEATURE (...)" line,
# and the summary lists those apart, as neither a pass nor a failure
# (docs/design/testing.md). Prints each stage's wall time and the total at the
# end.
set -euo pipefail
cd "$(dirname "$0")/.."

JOBS=${JOBS:-2}
passed=0
failed=0
skipped=0
not_run=()  # "NOT RUN:" lines: what this machine's kernel cannot run
stages=()
run_start=$SECONDS
stage_start=$SECONDS

summary() {
  echo
  echo "summary: $passed passed, $failed failed, $skipped skipped"
  if ((${#not_run[@]})); then
    echo "not run, for a kernel feature this machine lacks (neither passed nor failed): ${#not_run[@]}"
    printf '  %s\n' "${not_run[@]}"
  fi
  printf '%s\n' "${stages[@]}"
  echo "total: $((SECONDS - run_start)) s"
}
begin() {  # STAGE
  stage_start=$SECONDS
  echo "== $1"
}
end() {  # STAGE
  stages+=("$(printf '%-34s %5d s' "$1" $((SECONDS - stage_start)))")
}
die() {
  echo "$*" >&2
  summary
  exit 1
}

configure_and_build() {  # DIR CMAKE_ARGS...
  local dir=$1
  shift
  mkdir -p "$dir"
  cmake -S . -B "$dir" -G Ninja -DTENSORFS_WERROR=ON "$@" >"$dir.configure.log" 2>&1 ||
    { cat "$dir.configure.log"; die "configure of $dir failed"; }
  # ninja prints the failing command and the compiler's message; the progress
  # lines go. pipefail: the build's status is ninja's, whatever the filter does.
  if ! ninja -C "$dir" -j"$JOBS" 2>&1 | { grep -vE '^\[[0-9]+/[0-9]+\] ' || true; }; then
    die "build of $dir failed"
  fi
}

run_ctest() {  # DIR [CTEST_ARGS...]
  local dir=$1
  shift
  local log="$dir.ctest.log"
  set +e
  (cd "$dir" && ctest -j"$JOBS" --output-on-failure --timeout 600 "$@") | tee "$log" |
    grep -vE '^ +Start |Test +#[0-9]+: .* Passed'
  local rc=${PIPESTATUS[0]}
  set -e
  local line total=0 fail=0 kernel=0
  line=$(grep -E 'tests passed, [0-9]+ tests failed out of [0-9]+' "$log" | tail -1 || true)
  if [[ -n $line ]]; then
    total=$(sed -E 's/.*out of ([0-9]+).*/\1/' <<<"$line")
    fail=$(sed -E 's/.* ([0-9]+) tests failed.*/\1/' <<<"$line")
  fi
  # The "NOT RUN:" lines of every test's output, as "TEST<tab>LINE".
  local lines
  lines=$(awk '/^[0-9]+\/[0-9]+ Test: / { sub(/^[0-9]+\/[0-9]+ Test: /, ""); test = $0 }
               /^NOT RUN: / { print test "\t" $0 }' "$dir/Testing/Temporary/LastTest.log" 2>/dev/null || true)
  # ctest counts a skipped test as passed; its "did not run" list names them.
  # A skip that printed a "NOT RUN:" line is a test the kernel cannot run.
  local name skip=0 unexplained=() explained
  explained=$(cut -f1 <<<"$lines")
  while read -r name; do
    if grep -qxF "$name" <<<"$explained"; then
      kernel=$((kernel + 1))
    else
      unexplained+=("$name")
    fi
  done < <(sed -nE 's/^[[:space:]]*[0-9]+ - (.*) \((Skipped|Disabled)\)$/\1/p' "$log")
  skip=${#unexplained[@]}
  passed=$((passed + total - fail - skip - kernel))
  failed=$((failed + fail))
  skipped=$((skipped + skip))
  [[ -z $lines ]] || mapfile -t -O "${#not_run[@]}" not_run < <(cut -f2- <<<"$lines" | sed "s|^NOT RUN: |$dir: |")
  echo "$dir: $((total - fail - skip - kernel)) passed, $fail failed, $skip skipped, $kernel not run for the kernel"
  [[ $rc -eq 0 && -n $line ]] || die "tests failed in $dir"
  if [[ $skip -ne 0 ]]; then
    printf '%s (Skipped)\n' "${unexplained[@]}"
    die "tests skipped in $dir, which the suite does not allow (why: $dir/Testing/Temporary/LastTest.log)"
  fi
}

begin "install dependencies"
bash packaging/install-deps.sh
end "install dependencies"

mkdir -p build
# The Debian root the package tests boot: made in the background while the
# code compiles (the test "test_root" waits for it).
test_root=$PWD/build/release/testroot/bookworm
mkdir -p build/release/testroot
bash packaging/make-test-root.sh "$test_root" >build/test-root.log 2>&1 &

# Debug information is line tables only, in both builds: what backtraces, gdb's
# stacks of a hung tensorfs and sanitizer reports show (function, file, line),
# for a third less compile time than full -g. The code is the same.
begin "build release (g++)"
configure_and_build build/release -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
  -DTENSORFS_TEST_ROOT="$test_root"
end "build release (g++)"
begin "test release"
run_ctest build/release
end "test release"
# README's first command, taken from README.md and run as it is written, three
# times and once through a pipe that closes early; it reuses the release build.
begin "README's first command (demo)"
if /usr/bin/python3 tests/docs/readme_first_command_test.py 3; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  die "README's first command failed"
fi
end "README's first command (demo)"

begin "build clang (asan, ubsan, tsa, fuzz)"
CXX=clang++ configure_and_build build/clang -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-gline-tables-only \
  -DTENSORFS_SANITIZE=ON \
  -DTENSORFS_THREAD_SAFETY=ON -DTENSORFS_FUZZ=ON -DTENSORFS_BUILD_BENCH=OFF
end "build clang (asan, ubsan, tsa, fuzz)"
begin "test clang (asan, ubsan)"
# The package, the booted system and the self-tests of what the build does not
# change ran once, in the release build.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  run_ctest build/clang -LE 'package|independent'
end "test clang (asan, ubsan)"

begin "fuzz"
if FUZZ_BUILD_DIR=build/clang JOBS="$JOBS" bash packaging/run-fuzz.sh; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  die "fuzzing found a failure"
fi
end "fuzz"

summary
