#!/usr/bin/env python3
"""Runs README.md's first command exactly as README writes it, several times in a row.

The command is taken from README.md itself (its first fenced block, which must be one
line), so this test follows README when it changes. It runs from the repository's top
directory with bash, as a new user would paste it, RUNS times in a row (default 3):
every run must exit 0, print no warning, and show what the demo promises: the first
lines of `tensorfs inspect` and of the 4-bit view's listing, and its closing line.

Then once more with `head` replaced, first in PATH, by a reader that closes its input
at once: a pipe that closes early. A script under `set -o pipefail` that pipes a
command into `head` fails or passes by how fast the two run (the writer's SIGPIPE
becomes the pipeline's status); with this reader it fails every time, so the race is
caught here and not by a new user.

packaging/run-tests.sh runs it in the release stage, after the release build, which the
demo then reuses (its build step has nothing to do). Run by hand:

  python3 tests/docs/readme_first_command_test.py [RUNS]
"""
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
HANG_TIMEOUT = 900  # seconds a run may take: only catches a hang (a cold build takes minutes)
WARNING = re.compile(r"\bwarn(ing)?\b", re.IGNORECASE)


def first_command(readme):
    """The first fenced block of README.md, which must hold one command line."""
    match = re.search(r"^```[a-z]*\n(.*?)^```", readme, re.MULTILINE | re.DOTALL)
    if match is None:
        sys.exit("FAIL: README.md has no fenced block: its first command is missing")
    lines = [l for l in match.group(1).splitlines() if l.strip()]
    if len(lines) != 1:
        sys.exit("FAIL: README.md's first block should be one command, not %d lines: %r" % (len(lines), lines))
    return lines[0].strip()


def check_output(out):
    """What the demo promises to show; returns the problems found."""
    problems = []
    lines = out.splitlines()
    warnings = [l for l in lines if WARNING.search(l)]
    if warnings:
        problems.append("it printed warnings: %s" % warnings[:5])

    def section(title_start, count):
        starts = [i for i, l in enumerate(lines) if l.startswith(title_start)]
        if not starts:
            problems.append("no section %r" % title_start)
            return []
        return lines[starts[0] + 1:starts[0] + 1 + count]

    inspect = section("== tensorfs inspect", 25)
    if not (inspect and inspect[0].startswith("Checkpoint: ") and "Status: ok" in inspect):
        problems.append("the first lines of tensorfs inspect are missing: %s" % inspect[:6])
    listing = section("== virtual views: ls -l", 7)
    if not (len(listing) == 7 and listing[0].startswith("total ") and
            all(l.startswith("-r--r--r--") for l in listing[1:])):
        problems.append("the first lines of the 4-bit view's listing are missing: %s" % listing)
    if not lines or not lines[-1].startswith("demo finished:"):
        problems.append("it did not end with 'demo finished:' (last line: %r)" % (lines[-1] if lines else ""))
    return problems


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    with open(os.path.join(ROOT, "README.md")) as f:
        command = first_command(f.read())
    print("README's first command: %s" % command, flush=True)
    failed = 0
    with tempfile.TemporaryDirectory() as shim:
        with open(os.path.join(shim, "head"), "w") as f:
            f.write("#!/bin/sh\n# a reader that closes its input at once\nexit 0\n")
        os.chmod(os.path.join(shim, "head"), 0o755)
        closing = dict(os.environ, PATH=shim + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"))
        cases = [("run %d of %d" % (i, runs), None) for i in range(1, runs + 1)]
        cases.append(("with head closing its input at once", closing))
        for what, env in cases:
            try:
                r = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, timeout=HANG_TIMEOUT)
                rc, out = r.returncode, r.stdout
            except subprocess.TimeoutExpired as e:
                rc, out = "a hang (killed after %d s)" % HANG_TIMEOUT, (e.stdout or b"").decode(errors="replace")
            problems = ([] if rc == 0 else ["exit status %s" % rc]) + check_output(out)
            if problems:
                failed += 1
                print("FAIL: %s: %s\n--- its output (last 40 lines):\n%s" %
                      (what, "; ".join(problems), "\n".join(out.splitlines()[-40:])), flush=True)
            else:
                print("PASS: %s: exit 0, no warning, inspect's and the 4-bit view's first lines shown" % what,
                      flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
