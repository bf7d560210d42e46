#!/usr/bin/env python3
"""Runs the quick start of README.md, so that it cannot rot.

Every fenced block that follows a `<!-- quickstart -->` line is taken from README.md
itself and run in order, against the project's GCS test server (gs://my-bucket is a
bucket of it, reached through STORAGE_EMULATOR_HOST) and a local directory:

  - shell blocks run with bash (-euo pipefail), `tensorfs` being the build's binary;
  - Python blocks run with /usr/bin/python3 when every module they import is
    importable there; a `vllm serve` block runs when vllm is;
  - a loader block that cannot run here is reported as NOT RUN, naming the missing
    module. It is still compiled, and each file it names is read through the mount
    and compared with its source: the path it would load exists and serves the
    right bytes. That check is reported as what it is, not as the loader's run.

The README's paths are mapped into a temporary directory: /mnt/ -> TMP/mnt/,
/data/checkpoints -> TMP/data/checkpoints. The checkpoint the blocks name
(llama-3-8b, 4 shards) is a small one written by tensorfs-testdata under that name.

Environment: TENSORFS_BINARY, TENSORFS_TESTDATA (paths of the built binaries).
Exit status 0 when every block that ran succeeded and every check held.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
PYTHON = "/usr/bin/python3"
MARKER = "<!-- quickstart -->"
CHECKPOINT = "llama-3-8b"
SHARDS = 4
HANG_TIMEOUT = 300  # seconds: only catches a hang


def fail(message):
    print("FAIL: " + message, flush=True)
    sys.exit(1)


def quickstart_blocks(readme_path):
    """[(language, text, line number)] of the blocks after a marker, in order."""
    lines = open(readme_path, encoding="utf-8").read().split("\n")
    blocks = []
    i = 0
    while i < len(lines):
        if lines[i].strip() != MARKER:
            i += 1
            continue
        fence = lines[i + 1] if i + 1 < len(lines) else ""
        if not fence.startswith("```"):
            fail("README.md:%d: %s is not followed by a fenced block" % (i + 1, MARKER))
        language = fence[3:].strip()
        end = i + 2
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        if end == len(lines):
            fail("README.md:%d: the quick start block is not closed" % (i + 2))
        blocks.append((language, "\n".join(lines[i + 2:end]) + "\n", i + 2))
        i = end + 1
    return blocks


def imported_modules(code):
    """The top-level modules a Python block imports."""
    modules = []
    for line in code.split("\n"):
        m = re.match(r"\s*(?:from|import)\s+([A-Za-z_][A-Za-z0-9_]*)", line)
        if m and m.group(1) not in modules:
            modules.append(m.group(1))
    return modules


def importable(module):
    return subprocess.run([PYTHON, "-c", "import " + module], capture_output=True).returncode == 0


def mounted(path):
    real = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == real for line in f)


class QuickStart:
    def __init__(self, tmp):
        self.tmp = tmp
        self.results = []  # (what, outcome)
        self.server = None
        self.env = None
        self.gcs_source = os.path.join(tmp, "gcs", "my-bucket", "models", CHECKPOINT)
        self.local_source = os.path.join(tmp, "data", "checkpoints", CHECKPOINT)

    def map_paths(self, text):
        text = text.replace("/mnt/", self.tmp + "/mnt/")
        return text.replace("/data/checkpoints", self.tmp + "/data/checkpoints")

    def source_of(self, mounted_path):
        """The source file a path on one of the README's mounts serves."""
        for mnt, source_root in (("/mnt/models/", os.path.join(self.tmp, "gcs", "my-bucket", "models")),
                                 ("/mnt/local/", os.path.join(self.tmp, "data", "checkpoints"))):
            prefix = self.tmp + mnt
            if mounted_path.startswith(prefix):
                return os.path.join(source_root, mounted_path[len(prefix):])
        return None

    def set_up(self):
        testdata = os.environ["TENSORFS_TESTDATA"]
        for out in (self.gcs_source, self.local_source):
            subprocess.run([testdata, "--arch", "llama", "--layers", "2", "--hidden", "64", "--intermediate", "128",
                            "--vocab", "256", "--dtype", "bf16", "--shards", str(SHARDS), "--out", out],
                           check=True, capture_output=True, timeout=HANG_TIMEOUT)
        bin_dir = os.path.join(self.tmp, "bin")
        os.makedirs(bin_dir)
        os.symlink(os.environ["TENSORFS_BINARY"], os.path.join(bin_dir, "tensorfs"))
        port_file = os.path.join(self.tmp, "port")
        self.server = subprocess.Popen(
            [PYTHON, os.path.join(ROOT, "tests", "support", "gcs_test_server.py"), "--data",
             os.path.join(self.tmp, "gcs"), "--port", "0", "--port-file", port_file, "--quiet"])
        deadline = time.monotonic() + HANG_TIMEOUT
        while not (os.path.exists(port_file) and open(port_file).read().strip()):
            if time.monotonic() > deadline or self.server.poll() is not None:
                fail("the GCS test server did not start")
            time.sleep(0.05)
        self.env = dict(os.environ)
        self.env["PATH"] = bin_dir + ":" + self.env.get("PATH", "/usr/bin:/bin")
        self.env["STORAGE_EMULATOR_HOST"] = "127.0.0.1:" + open(port_file).read().strip()
        # One host of one: what jax.process_index() and process_count() say on one machine.
        self.env["RANK"] = "0"
        self.env["WORLD"] = "1"

    def tear_down(self):
        mnt = os.path.join(self.tmp, "mnt")
        if os.path.isdir(mnt):
            for name in os.listdir(mnt):
                path = os.path.join(mnt, name)
                if mounted(path):
                    if subprocess.run(["fusermount3", "-u", path], capture_output=True).returncode != 0:
                        subprocess.run(["umount", "-l", path], capture_output=True)
        if self.server is not None:
            self.server.terminate()
            self.server.wait(timeout=HANG_TIMEOUT)

    def run_shell(self, text, line):
        result = subprocess.run(["bash", "-euo", "pipefail", "-c", self.map_paths(text)], env=self.env,
                                capture_output=True, text=True, timeout=HANG_TIMEOUT)
        if result.returncode != 0:
            fail("README.md:%d: exit status %d from\n%s%s%s" % (line, result.returncode, text, result.stdout,
                                                                 result.stderr))
        return result.stdout

    def check_named_files(self, text, line):
        """Each README path a block names is on the mount and reads as its source: a file byte
        for byte, a directory every file of its source."""
        checked = []
        for path in re.findall(r"[\"'](/mnt/[^\"']+)[\"']|\s(/mnt/\S+)", text):
            path = self.map_paths(path[0] or path[1])
            source = self.source_of(path)
            if not os.path.exists(path) or source is None:
                fail("README.md:%d names %s, which the mount does not show" % (line, path))
            pairs = [(path, source)]
            if os.path.isdir(path):
                pairs = [(os.path.join(path, name), os.path.join(source, name)) for name in sorted(os.listdir(source))]
            for got_path, want_path in pairs:
                with open(got_path, "rb") as got, open(want_path, "rb") as want:
                    if got.read() != want.read():
                        fail("README.md:%d: %s does not read as its source" % (line, got_path))
            checked.append("%s (%d files)" % (path[len(self.tmp):], len(pairs)))
        return checked

    def not_run(self, what, missing, text, line):
        checked = self.check_named_files(text, line)
        self.results.append((what, "NOT RUN: %s not importable by %s; checked instead that %s read through the "
                                   "mount as their source" % (", ".join(missing), PYTHON, ", ".join(checked))))

    def run_python(self, text, line):
        compile(text, "README.md:%d" % line, "exec")
        modules = imported_modules(text)
        missing = [m for m in modules if not importable(m)]
        what = "README.md:%d (python: %s)" % (line, ", ".join(modules))
        if missing:
            return self.not_run(what, missing, text, line)
        result = subprocess.run([PYTHON, "-c", self.map_paths(text)], env=self.env, capture_output=True, text=True,
                                timeout=HANG_TIMEOUT)
        if result.returncode != 0:
            fail("README.md:%d: the Python block failed (exit %d):\n%s" % (line, result.returncode, result.stderr))
        self.results.append((what, "ran"))

    def run_vllm(self, text, line):
        what = "README.md:%d (vllm serve)" % line
        if not importable("vllm"):
            return self.not_run(what, ["vllm"], text, line)
        server = subprocess.Popen(["bash", "-c", "exec " + self.map_paths(text)], env=self.env)
        try:
            deadline = time.monotonic() + 600
            while True:
                if server.poll() is not None:
                    fail("README.md:%d: vllm serve exited with status %d" % (line, server.returncode))
                try:
                    if urllib.request.urlopen("http://127.0.0.1:8000/health", timeout=5).status == 200:
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    fail("README.md:%d: vllm serve did not answer /health within 600 s" % line)
                time.sleep(1)
        finally:
            server.terminate()
            server.wait(timeout=HANG_TIMEOUT)
        self.results.append((what, "ran: /health answered"))

    def run(self, blocks):
        for language, text, line in blocks:
            first = text.strip().split()[0] if text.strip() else ""
            if language == "python":
                self.run_python(text, line)
            elif language in ("sh", "bash") and first == "vllm":
                self.run_vllm(text, line)
            elif language in ("sh", "bash"):
                output = self.run_shell(text, line)
                self.check_shell_effects(text, output, line)
                self.results.append(("README.md:%d (%s)" % (line, text.strip().split("\n")[-1]), "ran"))
            else:
                fail("README.md:%d: a quick start block in %r, which this test cannot run" % (line, language))

    def check_shell_effects(self, text, output, line):
        """What a user would check after each command of a shell block."""
        for command in text.strip().split("\n"):
            words = command.split()
            if words[:1] == ["tensorfs"] and len(words) >= 3:
                if not mounted(self.map_paths(words[2])):
                    fail("README.md:%d: %s is not mounted after `%s`" % (line, words[2], command))
            if words[:2] == ["fusermount3", "-u"]:
                if mounted(self.map_paths(words[2])):
                    fail("README.md:%d: %s is still mounted after `%s`" % (line, words[2], command))
            if words[:1] == ["ls"]:
                for want in ["model-%05d-of-%05d.safetensors" % (1, SHARDS), "config.json", CHECKPOINT]:
                    if want not in output:
                        fail("README.md:%d: `%s` does not list %s:\n%s" % (line, command, want, output))


def check_coverage(blocks):
    """The quick start still shows what a user comes for."""
    text = "\n".join(b[1] for b in blocks)
    for want, what in [(r"tensorfs gs://\S+ /mnt/", "a gs:// mount"), (r"tensorfs /\S+ /mnt/", "a local mount"),
                       (r"(?m)^ls ", "ls"), (r"AutoModelForCausalLM\.from_pretrained\(\"/mnt/", "transformers"),
                       (r"vllm serve /mnt/", "vLLM"), (r"from safetensors\.torch import load_file", "safetensors"),
                       (r"-o shard=", "a multi-host slice read"), (r"fusermount3 -u /mnt/", "an unmount")]:
        if not re.search(want, text):
            fail("the quick start in README.md lacks %s (%s)" % (what, want))


def main():
    blocks = quickstart_blocks(os.path.join(ROOT, "README.md"))
    if not blocks:
        fail("README.md has no %s blocks" % MARKER)
    check_coverage(blocks)
    tmp = tempfile.mkdtemp(prefix="tensorfs-quickstart.")
    quick = QuickStart(tmp)
    try:
        quick.set_up()
        quick.run(blocks)
    finally:
        quick.tear_down()
        shutil.rmtree(tmp, ignore_errors=True)
    for what, outcome in quick.results:
        print("%s: %s" % (what, outcome))
    ran = sum(1 for _, outcome in quick.results if outcome.startswith("ran"))
    print("%d blocks ran, %d not run (a loader this machine lacks), 0 failed" % (ran, len(quick.results) - ran))


if __name__ == "__main__":
    main()
