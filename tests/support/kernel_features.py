"""Kernel features the script tests check for (docs/design/testing.md).

A test that needs a feature of the kernel (not a package) which this machine's
kernel lacks calls not_run(): it prints the one line the suite's summary lists
apart ("NOT RUN: TEST: needs FEATURE (EVIDENCE)") and exits with NOT_RUN_EXIT,
which ctest takes for a skip (SKIP_RETURN_CODE in tests/CMakeLists.txt). A skip
without that line fails the suite, as every other skip does.
"""
import sys

NOT_RUN_EXIT = 77


def not_run(test, feature, evidence):
    print("NOT RUN: %s: needs %s (%s)" % (test, feature, evidence), flush=True)
    sys.exit(NOT_RUN_EXIT)


def has_cgroup_controller(name):
    """Whether the kernel was built with cgroup controller NAME (/proc/cgroups)."""
    try:
        with open("/proc/cgroups") as f:
            rows = [line.split() for line in f if not line.startswith("#")]
    except OSError:
        return False
    return any(row[0] == name and row[-1] == "1" for row in rows if len(row) >= 4)
