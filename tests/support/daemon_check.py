"""How a Python test checks that a tensorfs it started ended as README
promises: the twin of tests/support/daemon_check.h, with the same rules.

  - It ends with exit status 0 after an unmount, SIGINT or SIGTERM; any other
    end fails the test unless the test expects it.
  - It ends within HANG_S of being asked to; otherwise it hangs, and the
    failure shows its threads' stacks and its log.
  - It writes no sanitizer report: under the test sandbox
    (tests/support/sandbox_main.cc) every process's reports land in
    $TENSORFS_TEST_SANDBOX/sanitizer.PID.

run_tests() runs a module's unittest cases and fails on a skip: on a machine
that runs the suite, a skip means a missing dependency, never a pass.
"""
import glob
import os
import shutil
import signal
import subprocess
import sys
import unittest

HANG_S = 60


def sandbox_dir():
    return os.environ.get("TENSORFS_TEST_SANDBOX", "")


def sanitizer_reports(pid=None):
    """The sanitizer reports written in the sandbox (all, or process `pid`'s)."""
    d = sandbox_dir()
    if not d:
        return []
    pattern = "sanitizer.%d" % pid if pid is not None else "sanitizer.*"
    reports = []
    for path in sorted(glob.glob(os.path.join(d, pattern))):
        with open(path, errors="replace") as f:
            reports.append("%s:\n%s" % (path, f.read()))
    return reports


def stacks_of(pid):
    """Where each thread of `pid` waits (kernel stacks) and, with gdb, its backtraces."""
    out = []
    for task in sorted(glob.glob("/proc/%d/task/*" % pid)):
        def read(name):
            try:
                with open(os.path.join(task, name)) as f:
                    return f.read().strip()
            except OSError:
                return ""
        out.append("  %s %s: waits in %s" % (os.path.basename(task), read("comm"), read("wchan")))
        out.extend("      " + line for line in read("stack").splitlines())
    if shutil.which("gdb"):
        r = subprocess.run(["timeout", "60", "gdb", "-nx", "-batch", "-p", str(pid), "-ex", "thread apply all bt"],
                           capture_output=True, text=True, stdin=subprocess.DEVNULL)
        out.append(r.stdout + r.stderr)
    return "\n".join(out)


def describe(returncode):
    if returncode is None:
        return "still running"
    if returncode < 0:
        return "signal %d (%s)" % (-returncode, signal.Signals(-returncode).name)
    return "exit %d" % returncode


def check_end(test, process, why, expected=0, log=lambda: ""):
    """Waits for `process` (a subprocess.Popen running tensorfs) to end after
    `why` (what the test did to end it) and fails `test` unless it ended with
    `expected` (a Popen returncode: 0, N, or -SIGNAL) within HANG_S and wrote
    no sanitizer report. `log` gives its output for the failure message."""
    try:
        process.wait(HANG_S)
    except subprocess.TimeoutExpired:
        stacks = stacks_of(process.pid)
        process.kill()
        process.wait()
        test.fail("HANG: tensorfs (pid %d) had not ended %d s after %s; killed. Its threads:\n%s\nIts log:\n%s"
                  % (process.pid, HANG_S, why, stacks, log()))
    reports = sanitizer_reports(process.pid)
    if process.returncode != expected or reports:
        test.fail("tensorfs ended with %s after %s, expected %s\n%s\nIts log:\n%s"
                  % (describe(process.returncode), why, describe(expected),
                     "\n".join("SANITIZER REPORT " + r for r in reports), log()))


def declare_end(pid, returncode):
    """Tells the sandbox that tensorfs `pid`, which it will reap (a daemon the
    test does not wait for itself), is meant to end with `returncode` (a Popen
    returncode)."""
    d = sandbox_dir()
    if not d:
        return
    status = (-returncode & 0x7F) if returncode < 0 else (returncode & 0xFF) << 8
    with open(os.path.join(d, "declared-ends"), "a") as f:
        f.write("%d %d\n" % (pid, status))


def run_tests():
    """unittest.main() for a test module, where a skipped test fails the run."""
    program = unittest.main(exit=False, verbosity=2)
    result = program.result
    if result.skipped:
        for case, reason in result.skipped:
            print("SKIPPED (a skip fails the suite): %s: %s" % (case.id(), reason), file=sys.stderr)
        sys.exit(1)
    sys.exit(0 if result.wasSuccessful() else 1)
