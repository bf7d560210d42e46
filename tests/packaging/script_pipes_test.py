#!/usr/bin/env python3
"""No shell script of the project lets its exit status depend on when a reader exits.

Under `set -o pipefail` a pipeline's status is that of its last failing command. A
reader that stops early (`head`, `grep -q`, `grep -m N`, `grep -l`, `sed ...q`,
`awk ... exit`) leaves its writer to die of SIGPIPE if the writer still has output, and
whether it still has depends on how fast the two run: the script passes or fails by
chance (`packaging/demo.sh` once exited 141 two runs in three this way). This test reads
every shell script under packaging/, bench/, .ci/ and tests/ that sets pipefail and
fails, naming file and line, on any such pipe whose status counts (not followed by
`|| true`). The fix is to let the reader see all of the output: take it first
(`out=$(cmd)`, then `sed -n 1,25p <<<"$out"` or `grep -q PATTERN <<<"$out"`).

  python3 tests/packaging/script_pipes_test.py
"""
import glob
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
EARLY_READERS = [
    (re.compile(r"^head\b"), "head"),
    (re.compile(r"^grep\b.*\s(-[a-zA-Z]*[qlL][a-zA-Z]*\b|-m\s*\d|--quiet|--silent|--max-count|--files-with)"),
     "grep that stops at its first match"),
    (re.compile(r"^sed\b.*(^|[\s;'\"{/0-9$])q\b"), "sed that quits"),
    (re.compile(r"^awk\b.*\bexit\b"), "awk that exits"),
]


def scripts():
    found = set()
    for pattern in ("packaging/**/*.sh", "bench/**/*.sh", "tests/**/*.sh", ".ci/*"):
        found.update(glob.glob(os.path.join(ROOT, pattern), recursive=True))
    return sorted(p for p in found if os.path.isfile(p))


def logical_lines(text):
    """(first line number, line) with backslash continuations joined and comments dropped."""
    number, pending = 0, None
    for i, raw in enumerate(text.splitlines(), 1):
        line = re.sub(r"(^|\s)#.*$", "", raw) if not raw.lstrip().startswith("#!") else ""
        if pending is None:
            number, pending = i, line
        else:
            pending += " " + line.strip()
        if pending.endswith("\\"):
            pending = pending[:-1]
            continue
        yield number, pending
        pending = None
    if pending is not None:
        yield number, pending


def pipe_stages(line):
    """The commands after each '|' (not '||') that is code: outside quotes, or inside a $(...)
    within double quotes; each stage with the rest of the line, quotes kept."""
    starts, i = [], 0
    stack = [None]  # the quote in force at each level of $( ... ) nesting
    while i < len(line):
        c = line[i]
        quote = stack[-1]
        if quote == "'":
            if c == "'":
                stack[-1] = None
        elif quote == '"' and not line.startswith("$(", i):
            if c == '"':
                stack[-1] = None
            elif c == "\\":
                i += 1
        elif line.startswith("$(", i):
            stack.append(None)
            i += 2
            continue
        elif c == ")" and len(stack) > 1:
            stack.pop()
        elif c in "'\"":
            stack[-1] = c
        elif c == "\\":
            i += 1
        elif c == "|":
            if line[i + 1:i + 2] == "|" or line[i - 1:i] == "|":
                i += 2 if line[i + 1:i + 2] == "|" else 1
                continue
            starts.append(i + 1)
        i += 1
    stages = []
    for s in starts:
        rest = line[s:].lstrip()
        rest = rest.lstrip("{( ")
        stages.append((rest, line[s:]))
    return stages


def status_ignored(after):
    """Whether the pipeline is followed by '|| true' (its status does not count)."""
    return re.search(r"\|\|\s*(true|:)\b", after) is not None


def problems_in(path):
    with open(path, errors="replace") as f:
        text = f.read()
    if not re.search(r"set -[a-z]*o pipefail|set -o pipefail|pipefail", text):
        return []
    found = []
    for number, line in logical_lines(text):
        for stage, after in pipe_stages(line):
            for pattern, what in EARLY_READERS:
                if pattern.search(stage) and not status_ignored(after):
                    found.append("%s:%d: a pipe into %s under pipefail: %s" %
                                 (os.path.relpath(path, ROOT), number, what, line.strip()[:160]))
    return found


def main():
    paths = scripts()
    problems = [p for path in paths for p in problems_in(path)]
    for p in problems:
        print("FAIL: " + p)
    if problems:
        print("%d pipe(s) whose status depends on when the reader exits: take the output first "
              "(out=$(cmd); sed -n 1,25p <<<\"$out\")" % len(problems))
        sys.exit(1)
    print("PASS: %d scripts, no pipe into an early-exiting reader under pipefail" % len(paths))


if __name__ == "__main__":
    main()
