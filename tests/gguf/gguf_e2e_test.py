#!/usr/bin/python3
"""llama.cpp runs tensorfs' @gguf/ files: through a real mount, against a numpy reference.

  gguf_e2e_test.py --data DIR --node-prefix DIR [--gguf-from DIR] [unittest args]

--data is what make_checkpoints.py wrote (one checkpoint per architecture and variant, and
manifest.json); --node-prefix is where install_node_deps.sh installed node-llama-cpp, the
reference tokenizer and the node binary. The test mounts --data with tensorfs (TENSORFS_BINARY)
and, for every checkpoint:

  - its @gguf/ holds NAME-F16.gguf (NAME-BF16.gguf for a bf16 source), NAME-Q8_0.gguf and
    NAME-Q4_K_M.gguf, and nothing else;
  - llama.cpp (node-llama-cpp, mmap on) loads each file from the mount, and its next-token
    log-probabilities at every position of each prompt match reference_forward.py's pass over
    the source safetensors, within the bounds below, with the same greedy next token wherever
    the reference's choice is clear;
  - llama.cpp's tokenization of a corpus (ASCII, code, whitespace runs, CJK, emoji, special
    tokens) from the GGUF file equals the reference tokenizer's: @huggingface/tokenizers over
    tokenizer.json, or python3-sentencepiece over tokenizer.model.

--gguf-from DIR takes the files from DIR/NAME-TYPE.gguf instead of a mount (to check this
harness against GGUF files made by another converter); --types F16,Q8_0 checks only those.

How close is close. The bounds (BOUNDS) were measured on these models with GGUF files from
llama.cpp's own converter (convert_hf_to_gguf.py) and llama-quantize, run by the same llama.cpp
build with its KV cache in F32, and set at about 3x the worst figure seen over all the models
(F16's: on a CPU with AVX-512, where llama.cpp's CPU kernels take other paths, worst err 0.016,
KL 2.3e-5 and mean KL 3.4e-6; on one without, the figures below):

  type     worst err  worst KL  worst mean KL  greedy the same   what remains
  F16      0.005      2e-6      5e-7           all positions     llama.cpp's f32 arithmetic (the
                                                                 reference rounds the matrices to
                                                                 f16 as the file holds them)
  BF16     0.09       3e-4      1e-4           all positions     activations rounded to bf16
                                                                 before each matmul (8 bits)
  Q8_0     0.61       0.019     0.005          92% and more      8-bit weights, and activations
                                                                 rounded to Q8_0 on the CPU
  Q4_K_M   5.7        1.7       0.38           58% and more;     4-bit weights (Q6_K output),
                                               wrong once at a   Q8_K activations
                                               2.1-nat lead

What the checks catch, from the same models in numpy: a missing Q/K permutation gives errors of
3 to 14 nats and a median KL of 0.09 to 3; a missing llama3 rope scaling, q/k norm, k bias, one
norm's weights, or a swap of Phi-3's gate and up halves, errors of 1.3 to 12 nats and median KLs
of 0.016 to 0.7; every 32-block of one tensor in the wrong place, a mean KL of 0.55 to 6. The F16
and BF16 files, whose bounds are tight, catch all of these; Q8_0's bounds catch most; Q4_K_M's are
loose, since 4-bit rounding moves these small random models nearly as much (their logits spread
~4 nats over a 256-wide hidden state): there the check is that the file loads, that it is not
garbage, and that the greedy tokens mostly agree and always do where the lead is over 3 nats.
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "support"))
import reference_forward  # noqa: E402
from daemon_check import check_end, run_tests  # noqa: E402

TENSORFS = os.environ.get("TENSORFS_BINARY", "")
HANG_GUARD_S = 60

# Per file type, at each position: err, the largest |log p_llama - log p_ref| over the tokens
# the reference gives log p > LOGP_FLOOR; kl, KL(reference || llama.cpp); over a file's
# positions: mean_kl, and min_agree, the least share of positions where llama.cpp's greedy token
# is the reference's. Where the reference's top token leads the next by more than greedy_margin
# nats, the greedy tokens must be the same; min_clear: the least share of such positions (a check
# on flat distributions would assert nothing). The module comment says where the numbers come from.
BOUNDS = {
    "F16": {"err": 0.05, "kl": 7e-5, "mean_kl": 1e-5, "greedy_margin": 0.02, "min_agree": 0.95, "min_clear": 0.5},
    "BF16": {"err": 0.25, "kl": 1e-3, "mean_kl": 3e-4, "greedy_margin": 0.1, "min_agree": 0.9, "min_clear": 0.5},
    "Q8_0": {"err": 1.5, "kl": 0.06, "mean_kl": 0.015, "greedy_margin": 0.5, "min_agree": 0.8, "min_clear": 0.5},
    "Q4_K_M": {"err": 15.0, "kl": 5.0, "mean_kl": 1.0, "greedy_margin": 3.0, "min_agree": 0.45, "min_clear": 0.03},
}
LOGP_FLOOR = -10.0

# The tokenization corpus: what tokenizers get wrong first.
CORPUS = [
    "Hello world! The quick brown fox jumps over the lazy dog.",
    "I'm sure you'll see they've DON'T isn't we'd",
    "    def forward(self, x):\n        return x @ self.w.T  # note\n\n",
    "for (int i = 0; i < 10; ++i) { sum += a[i]; }",
    "   leading spaces, trailing spaces   ",
    "tabs\t\tand\r\nwindows line ends\n\n\n   \n",
    "numbers: 7 42 123 1234 123456789 3.14159 -0.5 1e-5 0x7fff",
    "你好，世界。今天的天气很好。",
    "日本語のテキスト、カタカナとひらがな。",
    "한국어 문장입니다.",
    "emoji 🙂👍🏽🚀 family 👨‍👩‍👧 flags 🇫🇷 ❤️",
    "café naïve résumé Ελληνικά Привет",
    "a  b   c    d     e",
    "",
    " ",
    "\n",
]
# Special tokens inside text, per tokenizer kind.
SPECIAL_CORPUS = {
    "llama3": ["<|begin_of_text|>Hello<|eot_id|>",
               "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|><|start_header_id|>assistant"
               "<|end_header_id|>\n\n"],
    "qwen2": ["<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi 你好<|im_end|>\n",
              "text<|endoftext|>more text"],
    "llama2-spm": ["<s>[INST] Hello there [/INST] Hi!</s>", "a</s>b"],
    "phi3-spm": ["<|user|>\nHello there<|end|>\n<|assistant|>\nHi!<|end|>", "done<|endoftext|>  next"],
}


def gguf_types(dtype):
    types = ["BF16" if dtype == "bf16" else "F16", "Q8_0", "Q4_K_M"]
    only = GgufEndToEndTest.args.types if GgufEndToEndTest.args else None
    return [t for t in types if not only or t in only.split(",") or (t == "BF16" and "F16" in only.split(","))]


class SentencePieceReference:
    """python3-sentencepiece over tokenizer.model, with added tokens split out first as
    transformers' slow tokenizer does (each added token matched in the text, honouring its
    rstrip; the text between them encoded by sentencepiece, each piece with its dummy prefix)."""

    def __init__(self, d):
        import sentencepiece
        self.sp = sentencepiece.SentencePieceProcessor(model_file=os.path.join(d, "tokenizer.model"))
        self.added = {}
        path = os.path.join(d, "tokenizer_config.json")
        if os.path.exists(path):
            with open(path) as f:
                for id_, t in json.load(f).get("added_tokens_decoder", {}).items():
                    if t["content"] not in ("<unk>",):
                        self.added[t["content"]] = (int(id_), t.get("rstrip", False), t.get("lstrip", False))

    def encode(self, text):
        ids = []
        i = 0
        piece_start = 0
        pieces = []  # (kind, value)
        while i < len(text):
            match = None
            for content in self.added:
                if text.startswith(content, i) and (match is None or len(content) > len(match)):
                    match = content
            if match is None:
                i += 1
                continue
            pieces.append(("text", text[piece_start:i]))
            pieces.append(("token", match))
            i += len(match)
            piece_start = i
        pieces.append(("text", text[piece_start:]))
        for n, (kind, value) in enumerate(pieces):
            if kind == "token":
                id_, rstrip, _ = self.added[value]
                ids.append(id_)
                if rstrip and n + 1 < len(pieces):
                    pieces[n + 1] = ("text", pieces[n + 1][1].lstrip())
            else:
                if n + 1 < len(pieces) and self.added[pieces[n + 1][1]][2]:
                    value = value.rstrip()
                if value:
                    ids += self.sp.encode(value)
        return ids


class GgufEndToEndTest(unittest.TestCase):
    args = None

    @classmethod
    def setUpClass(cls):
        a = cls.args
        with open(os.path.join(a.data, "manifest.json")) as f:
            cls.manifest = json.load(f)
        cls.work = tempfile.mkdtemp(prefix="gguf-e2e-")
        cls.process = None
        cls.log_path = os.path.join(cls.work, "tensorfs.log")
        if a.gguf_from:
            cls.root = None
        else:
            cls.root = os.path.join(cls.work, "mnt")
            os.makedirs(cls.root)
            cls.log_file = open(cls.log_path, "w")
            cls.process = subprocess.Popen([TENSORFS, a.data, cls.root, "-f", "-o", "views=gguf"],
                                           stdout=cls.log_file, stderr=subprocess.STDOUT)
            try:
                cls.wait_mounted()
            except Exception:  # tearDownClass is not called after a setUpClass that raised
                if cls.process.poll() is None:
                    cls.process.terminate()
                    cls.process.wait(HANG_GUARD_S)
                cls.log_file.close()
                shutil.rmtree(cls.work, ignore_errors=True)
                raise
        cls.files = {}  # (model, type) -> path
        for m in cls.manifest["models"]:
            for t in gguf_types(m["dtype"]):
                name = "%s-%s.gguf" % (m["name"], t)
                cls.files[(m["name"], t)] = (os.path.join(a.gguf_from, name) if a.gguf_from
                                             else os.path.join(cls.root, m["name"], "@gguf", name))
        cls.answer = None
        cls.harness_error = None
        try:
            cls.answer = cls.run_harness()
        except Exception as e:  # reported by each test, with the mount's log
            cls.harness_error = str(e)

    @classmethod
    def wait_mounted(cls):
        deadline = time.monotonic() + HANG_GUARD_S
        while time.monotonic() < deadline:
            if cls.process.poll() is not None:
                raise RuntimeError("tensorfs exited: " + cls.log())
            with open("/proc/self/mountinfo") as f:
                if any(line.split()[4] == cls.root for line in f):
                    return
            time.sleep(0.05)
        raise RuntimeError("not mounted within %d s: %s" % (HANG_GUARD_S, cls.log()))

    @classmethod
    def log(cls):
        try:
            with open(cls.log_path, errors="replace") as f:
                return f.read()[-6000:]
        except OSError:
            return ""

    @classmethod
    def prompt_ids(cls, m):
        return cls.reference_tokens_of(m, cls.manifest["prompts"], with_bos=True)

    @classmethod
    def reference_tokens_of(cls, m, texts, with_bos=False):
        d = os.path.join(cls.args.data, m["name"])
        if m["tokenizer"].endswith("-spm"):
            ref = SentencePieceReference(d)
            out = [ref.encode(t) for t in texts]
        else:
            out = cls.hf_tokens[m["name"]]
            out = [out[cls.hf_texts[m["name"]].index(t)] for t in texts]
        if with_bos and m["add_bos"]:
            out = [[m["bos"]] + ids for ids in out]
        return out

    @classmethod
    def corpus_of(cls, m):
        return CORPUS + SPECIAL_CORPUS[m["tokenizer"]]

    @classmethod
    def node(cls, request):
        req_path = os.path.join(cls.work, "request-%d.json" % len(os.listdir(cls.work)))
        ans_path = req_path.replace("request", "answer")
        with open(req_path, "w") as f:
            json.dump(request, f)
        prefix = cls.args.node_prefix
        node = os.path.join(prefix, "node_modules", ".bin", "node")
        r = subprocess.run([node, os.path.join(HERE, "llama_harness.mjs"), prefix, req_path, ans_path],
                           capture_output=True, text=True, cwd=cls.work, timeout=900)
        if r.returncode != 0:
            raise RuntimeError("llama_harness.mjs failed (exit %d):\n%s\n%s" % (r.returncode, r.stdout[-4000:],
                                                                              r.stderr[-8000:]))
        with open(ans_path) as f:
            return json.load(f)

    @classmethod
    def run_harness(cls):
        # The reference tokenizer first: the prompts' ids come from it.
        bpe = [m for m in cls.manifest["models"] if not m["tokenizer"].endswith("-spm")]
        cls.hf_texts = {m["name"]: cls.manifest["prompts"] + cls.corpus_of(m) for m in bpe}
        answer = cls.node({"hf_tokenizers": [{"dir": os.path.join(cls.args.data, m["name"]),
                                              "texts": cls.hf_texts[m["name"]]} for m in bpe]})
        cls.hf_tokens = {m["name"]: a["tokens"] for m, a in zip(bpe, answer["hf_tokenizers"])}
        request = {"gguf": []}
        for m in cls.manifest["models"]:
            for t in gguf_types(m["dtype"]):
                request["gguf"].append({"path": cls.files[(m["name"], t)], "vocab": m["vocab_size"],
                                        "sequences": cls.prompt_ids(m), "texts": cls.corpus_of(m)})
        answer = cls.node(request)
        return {a["path"]: a for a in answer["gguf"]}

    @classmethod
    def tearDownClass(cls):
        if cls.process is not None:
            subprocess.run(["fusermount3", "-u", cls.root], capture_output=True, timeout=HANG_GUARD_S)
            check_end(unittest.TestCase(), cls.process, "fusermount3 -u", log=cls.log)
            cls.log_file.close()
        shutil.rmtree(cls.work, ignore_errors=True)

    def require_answer(self):
        if self.harness_error:
            self.fail("%s\ntensorfs log:\n%s" % (self.harness_error, self.log()))

    def run_of(self, path, failures):
        """The harness's answer for one file, or None with the reason appended to failures."""
        got = self.answer[path]
        if "error" in got:
            failures.append("%s: llama.cpp could not run it: %s" % (path, got["error"][:1500]))
            return None
        return got

    def test_every_checkpoint_has_its_three_gguf_files(self):
        if self.args.gguf_from:
            return
        for m in self.manifest["models"]:
            with self.subTest(model=m["name"]):
                d = os.path.join(self.root, m["name"], "@gguf")
                want = sorted("%s-%s.gguf" % (m["name"], t) for t in gguf_types(m["dtype"]))
                got = sorted(os.listdir(d)) if os.path.isdir(d) else "no @gguf/ directory"
                self.assertEqual(got, want, "%s: the @gguf/ files (tensorfs inspect %s says why)"
                                 % (d, os.path.join(self.args.data, m["name"])))

    def test_llama_cpp_logprobs_match_the_numpy_forward_pass(self):
        self.require_answer()
        failures = []
        for m in self.manifest["models"]:
            src = os.path.join(self.args.data, m["name"])
            references = {}
            seqs = self.prompt_ids(m)
            for t in gguf_types(m["dtype"]):
                # F16 from an f32 source: the reference rounds the matrices as the file does.
                key = "f16" if (t == "F16" and m["dtype"] == "f32") else None
                if key not in references:
                    model = reference_forward.ReferenceModel(src, round_weights=key)
                    references[key] = [model.logprobs(ids) for ids in seqs]
                path = self.files[(m["name"], t)]
                run = self.run_of(path, failures)
                if run is None:
                    continue
                got = [np.fromfile(f, dtype=np.float32).reshape(len(ids), m["vocab_size"]).astype(np.float64)
                       for f, ids in zip(run["logprobs"], seqs)]
                failures += self.compare_logprobs(path, t, seqs, references[key], got)
        self.assertFalse(failures, "\n".join(failures[:40]) + ("\n... and %d more" % (len(failures) - 40)
                                                               if len(failures) > 40 else ""))

    def compare_logprobs(self, path, t, seqs, references, got):
        """The failures of one file (each naming the file, the prompt and the position), and a
        line of its figures on stderr."""
        b = BOUNDS[t]
        failures = []
        errs, kls, clear, agree = [], [], 0, 0
        for p, (ids, ref, lp) in enumerate(zip(seqs, references, got)):
            for pos in range(len(ids)):
                r, g = ref[pos], lp[pos]
                # llama.cpp's float32 probabilities sum to 1 within ~1e-6: renormalized, so that KL
                # measures the distributions' difference, not that rounding.
                g = g - np.log(np.sum(np.exp(g)))
                keep = r > LOGP_FLOOR
                err = float(np.max(np.abs(g[keep] - r[keep])))
                kl = float(np.sum(np.exp(r) * (r - np.maximum(g, -1e4))))  # -inf: a probability lost
                errs.append(err)
                kls.append(kl)
                top2 = np.argsort(r)[-2:]
                best, margin = int(top2[1]), float(r[top2[1]] - r[top2[0]])
                mine = int(np.argmax(g))
                agree += mine == best
                where = "%s, prompt %d (%r), position %d (after token %d)" % (
                    path, p, self.manifest["prompts"][p][:30], pos, ids[pos])
                if not (err <= b["err"] and kl <= b["kl"]):
                    failures.append("%s: max |delta log p| %.4f (bound %g), KL %.2e (bound %g); the reference's "
                                    "top token %d at log p %.3f, llama.cpp's %d at %.3f"
                                    % (where, err, b["err"], kl, b["kl"], best, r[best], mine, g[mine]))
                if margin > b["greedy_margin"]:
                    clear += 1
                    if mine != best:
                        failures.append("%s: greedy next token %d, the reference's is %d (by %.3f nats)"
                                        % (where, mine, best, margin))
        mean_kl = float(np.mean(kls))
        print("%s: %d positions: max |delta log p| %.4f (bound %g), max KL %.2e (bound %g), mean KL %.2e "
              "(bound %g), greedy token the same at %d (at least %d), clear at %d (at least %d)"
              % (os.path.basename(path), len(errs), max(errs), b["err"], max(kls), b["kl"], mean_kl, b["mean_kl"],
                 agree, math.ceil(b["min_agree"] * len(errs)), clear, math.ceil(b["min_clear"] * len(errs))),
              file=sys.stderr)
        if not mean_kl <= b["mean_kl"]:
            failures.append("%s: mean KL %.2e over %d positions, over the bound %g for %s"
                            % (path, mean_kl, len(kls), b["mean_kl"], t))
        if agree < b["min_agree"] * len(errs):
            failures.append("%s: llama.cpp's greedy token is the reference's at only %d of %d positions (at least "
                            "%d for %s)" % (path, agree, len(errs), math.ceil(b["min_agree"] * len(errs)), t))
        if clear < b["min_clear"] * len(errs):
            failures.append("%s: the reference's greedy choice is clear at only %d of %d positions: the model's "
                            "outputs are too flat for this check" % (path, clear, len(errs)))
        return failures

    def test_llama_cpp_tokenizes_the_corpus_as_the_reference_tokenizer(self):
        self.require_answer()
        failures = []
        for m in self.manifest["models"]:
            corpus = self.corpus_of(m)
            want = self.reference_tokens_of(m, corpus)
            reference = ("python3-sentencepiece over tokenizer.model" if m["tokenizer"].endswith("-spm")
                         else "@huggingface/tokenizers over tokenizer.json")
            for t in gguf_types(m["dtype"]):
                path = self.files[(m["name"], t)]
                run = self.run_of(path, failures)
                if run is None:
                    continue
                got = run["tokens"]
                for i, text in enumerate(corpus):
                    if got[i] != want[i]:
                        failures.append("%s: text %d %r: llama.cpp gives %s, %s gives %s"
                                        % (path, i, text, got[i], reference, want[i]))
        self.assertFalse(failures, "\n".join(failures) + ("\ntensorfs log:\n" + self.log() if failures else ""))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--node-prefix", required=True)
    ap.add_argument("--gguf-from")
    ap.add_argument("--types", help="only these file types, e.g. F16,Q8_0 (F16 stands for BF16 too)")
    args, rest = ap.parse_known_args()
    if not args.gguf_from and not TENSORFS:
        print("TENSORFS_BINARY is not set", file=sys.stderr)
        sys.exit(2)
    GgufEndToEndTest.args = args
    sys.argv = [sys.argv[0]] + rest
    run_tests()


if __name__ == "__main__":
    main()
