"""Real tokenizer files for the GGUF end-to-end test's checkpoints, made here.

  training_text(seed)              a deterministic corpus: English prose, code, numbers,
                                   whitespace runs, CJK and emoji, one sentence a line
  train_byte_level_bpe(text, n)    byte-level BPE merges learnt from that text (GPT-2's byte
                                   to unicode map, merges by pair frequency)
  llama3_tokenizer_files(...)      tokenizer.json + tokenizer_config.json as Llama 3 ships
                                   them: its Split regex, ignore_merges, <|begin_of_text|>...
  qwen2_tokenizer_files(...)       the same as Qwen2 / Qwen3 ship them: their Split regex, NFC,
                                   <|endoftext|>, <|im_start|>, <|im_end|>
  train_sentencepiece(text, n)     a tokenizer.model trained by python3-sentencepiece with the
                                   trainer settings of Llama 2 / Mistral (BPE, byte fallback,
                                   identity normalizer, dummy prefix, split digits)

The pre-tokenizer regexes are the models' own, byte for byte: GGUF converters tell the
pre-tokenizer by them (a hash of the Split patterns), and llama.cpp then applies its own copy.
The vocabulary is small (about 1,500 tokens) so the test's models stay small; the merges are
learnt with an approximation of the regex (Python's re has no \\p{L}), which only changes which
merges are learnt, never how a tokenizer applies them.
"""
import heapq
import io
import json
import os
import random
import re
import tempfile

# The Split patterns of meta-llama/Meta-Llama-3-8B and Qwen/Qwen2-7B's tokenizer.json.
LLAMA3_SPLIT_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                      r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPLIT_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                     r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# For learning merges only: the same shape with Python's classes ([^\W\d_] for \p{L}).
_TRAIN_SPLIT = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d|[^\r\n\w]?[^\W\d_]+|\d{1,3}|"
                          r" ?[^\s\w]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+", re.IGNORECASE)

_WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at which "
    "but have an they you were her she there been one all we their has would when if so no more "
    "model tensor file mount read write cache bucket shard layer weight bias norm head token "
    "vocabulary merge quantize block scale offset header metadata llama qwen phi mistral gemma "
    "attention rotary embedding position sequence batch context sample probability logit greedy "
    "network storage object request response latency throughput memory thread kernel page "
    "checkpoint format version architecture transformer decoder encoder hidden intermediate "
    "configuration directory server client stream chunk range byte float integer string array "
    "running quickly slowly happily carefully isn't don't won't we'll they're I'm you've she'd "
    "Python JavaScript Rust C++ Linux Debian GPU CPU RAM SSD HTTP JSON YAML README"
).split()
_CODE = (
    "def forward(self, x):\n    return self.norm(x) * self.weight\n",
    "for (int i = 0; i < n; ++i) {\n  sum += a[i] * b[i];\n}\n",
    "if err != nil {\n\treturn fmt.Errorf(\"read %s: %w\", path, err)\n}\n",
    "const logits = await model.evaluate(tokens);  // every position\n",
    "    x = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d)\n",
    "std::vector<uint8_t> buf(4096, 0);\nauto st = store->Read(key, range, &buf);\n",
    "SELECT name, COUNT(*) FROM tensors WHERE dtype = 'bf16' GROUP BY name;\n",
    "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 4096}\n",
)
_OTHER = (
    "你好，世界。今天的天气很好，我们去公园散步吧。",
    "模型的权重存储在云端，读取时按需下载。",
    "日本語のテキストも少し含めます。東京は大きな都市です。",
    "한국어 문장도 있습니다. 감사합니다.",
    "Привет, как дела? Всё хорошо.",
    "Ελληνικά γράμματα: αβγδε.",
    "emoji: 🙂 😀 👍 🚀 ✨ 🎉 ❤️ 👍🏽 👨‍👩‍👧",
    "café naïve résumé façade déjà vu",
    "numbers 0 1 12 123 1234 12345 3.14159 2025-01-31 0x7fff 1e-5",
    "tabs\tand\t\ttabs, spaces     runs, and\n\nblank lines",
)


def training_text(seed=7, sentences=3000):
    """One sentence or snippet a line; deterministic for a seed."""
    rnd = random.Random(seed)
    lines = []
    for i in range(sentences):
        kind = rnd.random()
        if kind < 0.70:
            n = rnd.randint(4, 16)
            words = [rnd.choice(_WORDS) for _ in range(n)]
            if rnd.random() < 0.3:
                words[0] = words[0].capitalize()
            if rnd.random() < 0.2:
                words.insert(rnd.randint(0, n), str(rnd.randint(0, 99999)))
            lines.append(" ".join(words) + rnd.choice((".", ".", ",", "!", "?", ":", ";")))
        elif kind < 0.85:
            lines.append(rnd.choice(_CODE).replace("\n", " ").strip())
        else:
            lines.append(rnd.choice(_OTHER))
    return "\n".join(lines) + "\n"


def bytes_to_unicode():
    """GPT-2's map from byte values to printable characters (byte-level BPE's alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def train_byte_level_bpe(text, merges_wanted):
    """(vocab list in id order, merges list of (a, b)): the 256 byte symbols in GPT-2's order,
    then each merge's result in the order learnt. Ties in pair frequency go to the smaller pair,
    so the result depends on the text alone."""
    b2u = bytes_to_unicode()
    counts = {}
    for piece in _TRAIN_SPLIT.findall(text):
        word = tuple(b2u[b] for b in piece.encode("utf-8"))
        if len(word) > 1:
            counts[word] = counts.get(word, 0) + 1
    words = [list(w) for w in counts]
    freqs = list(counts.values())
    pair_count = {}
    pair_words = {}
    for wi, w in enumerate(words):
        for p in zip(w, w[1:]):
            pair_count[p] = pair_count.get(p, 0) + freqs[wi]
            pair_words.setdefault(p, set()).add(wi)
    heap = [(-c, p) for p, c in pair_count.items()]
    heapq.heapify(heap)
    vocab = list(b2u.values())
    known = set(vocab)
    merges = []
    while len(merges) < merges_wanted and heap:
        negc, pair = heapq.heappop(heap)
        if pair_count.get(pair, 0) != -negc or negc == 0:
            continue  # a stale entry
        merges.append(pair)
        merged = pair[0] + pair[1]
        if merged not in known:
            known.add(merged)
            vocab.append(merged)
        touched = set()
        for wi in list(pair_words.get(pair, ())):
            w = words[wi]
            f = freqs[wi]
            for p in zip(w, w[1:]):
                pair_count[p] -= f
                touched.add(p)
            out = []
            i = 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == pair[0] and w[i + 1] == pair[1]:
                    out.append(merged)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            words[wi] = out
            for p in zip(out, out[1:]):
                pair_count[p] = pair_count.get(p, 0) + f
                pair_words.setdefault(p, set()).add(wi)
                touched.add(p)
        for p in touched:
            if pair_count.get(p, 0) > 0:
                heapq.heappush(heap, (-pair_count[p], p))
    return vocab, merges


def _added_token(id_, content, special=True, lstrip=False, rstrip=False):
    return {"id": id_, "content": content, "single_word": False, "lstrip": lstrip, "rstrip": rstrip,
            "normalized": False, "special": special}


def _bpe_tokenizer_json(vocab, merges, added, split_regex, normalizer, ignore_merges, trim_offsets,
                        post_processor):
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": normalizer,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": split_regex}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": trim_offsets,
                 "use_regex": False},
            ],
        },
        "post_processor": post_processor,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
            "ignore_merges": ignore_merges,
            "vocab": {t: i for i, t in enumerate(vocab)},
            "merges": ["%s %s" % m for m in merges],
        },
    }


def _decoder_entries(added):
    return {str(t["id"]): {k: t[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word",
                                              "special")} for t in added}


LLAMA3_CHAT_TEMPLATE = (
    "{{- bos_token }}{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}")
QWEN2_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
LLAMA2_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
    "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% else %}{{ message['content'] + eos_token }}"
    "{% endif %}{% endfor %}")
PHI3_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'system' %}"
    "{{'<|system|>\\n' + message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'user' %}"
    "{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'assistant' %}"
    "{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}")


def llama3_tokenizer_files(vocab, merges):
    """{file name: text} of a Llama 3.1-style byte-level BPE tokenizer; and the special ids.
    Its specials follow the base vocabulary, as Llama 3's 128000.. do."""
    base = len(vocab)
    names = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
             "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
             "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
    added = [_added_token(base + i, n) for i, n in enumerate(names)]
    bos, eos = base, base + 1
    post = {"type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        {"type": "TemplateProcessing",
         "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                    {"Sequence": {"id": "A", "type_id": 0}}],
         "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                  {"Sequence": {"id": "A", "type_id": 0}},
                  {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}},
                  {"Sequence": {"id": "B", "type_id": 1}}],
         "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [bos],
                                                  "tokens": ["<|begin_of_text|>"]}}}]}
    tok = _bpe_tokenizer_json(vocab, merges, added, LLAMA3_SPLIT_REGEX, None, True, True, post)
    config = {
        "added_tokens_decoder": _decoder_entries(added),
        "bos_token": "<|begin_of_text|>",
        "chat_template": LLAMA3_CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": True,
        "eos_token": "<|eot_id|>",
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": 131072,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    files = {"tokenizer.json": json.dumps(tok, ensure_ascii=False, indent=2),
             "tokenizer_config.json": json.dumps(config, ensure_ascii=False, indent=2)}
    ids = {"bos": bos, "eos": base + 9, "add_bos": True, "tokens": base + len(names),
           "eos_ids": [base + 1, base + 8, base + 9]}
    return files, ids


def qwen2_tokenizer_files(vocab, merges):
    """{file name: text} of a Qwen2-style byte-level BPE tokenizer (no BOS); and the ids."""
    base = len(vocab)
    names = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    added = [_added_token(base + i, n) for i, n in enumerate(names)]
    post = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    tok = _bpe_tokenizer_json(vocab, merges, added, QWEN2_SPLIT_REGEX, {"type": "NFC"}, False, False, post)
    config = {
        "add_prefix_space": False,
        "added_tokens_decoder": _decoder_entries(added),
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "chat_template": QWEN2_CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 32768,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    files = {"tokenizer.json": json.dumps(tok, ensure_ascii=False, indent=2),
             "tokenizer_config.json": json.dumps(config, ensure_ascii=False, indent=2)}
    # Qwen2's config.json names <|endoftext|> its bos_token_id, though its tokenizer adds no BOS.
    ids = {"bos": None, "config_bos": base, "eos": base + 2, "add_bos": False, "tokens": base + len(names),
           "eos_ids": [base + 2]}
    return files, ids


def train_sentencepiece(text, vocab_size):
    """The bytes of a tokenizer.model trained on `text` with Llama 2's trainer settings."""
    import sentencepiece as spm
    with tempfile.TemporaryDirectory() as d:
        corpus = os.path.join(d, "corpus.txt")
        with open(corpus, "w", encoding="utf-8") as f:
            f.write(text)
        prefix = os.path.join(d, "m")
        spm.SentencePieceTrainer.train(
            input=corpus, model_prefix=prefix, model_type="bpe", vocab_size=vocab_size,
            character_coverage=0.99995, byte_fallback=True, split_digits=True,
            split_by_whitespace=True, split_by_unicode_script=True, split_by_number=True,
            allow_whitespace_only_pieces=True, remove_extra_whitespaces=False,
            normalization_rule_name="identity", add_dummy_prefix=True, max_sentencepiece_length=16,
            unk_id=0, bos_id=1, eos_id=2, pad_id=-1, num_threads=1, minloglevel=2,
            train_extremely_large_corpus=False, shuffle_input_sentence=False)
        with open(prefix + ".model", "rb") as f:
            return f.read()


def llama2_tokenizer_config():
    """tokenizer_config.json and special_tokens_map.json beside a Llama 2 / Mistral v0.1 tokenizer.model."""
    def tok(content):
        return {"content": content, "lstrip": False, "normalized": False, "rstrip": False,
                "single_word": False, "special": True}
    config = {
        "add_bos_token": True, "add_eos_token": False,
        "added_tokens_decoder": {"0": tok("<unk>"), "1": tok("<s>"), "2": tok("</s>")},
        "bos_token": "<s>", "chat_template": LLAMA2_CHAT_TEMPLATE, "clean_up_tokenization_spaces": False,
        "eos_token": "</s>", "legacy": True, "model_max_length": 1000000000000000019884624838656,
        "pad_token": None, "sp_model_kwargs": {}, "spaces_between_special_tokens": False,
        "tokenizer_class": "LlamaTokenizer", "unk_token": "<unk>", "use_default_system_prompt": False,
    }
    special = {"bos_token": tok("<s>"), "eos_token": tok("</s>"), "unk_token": tok("<unk>")}
    return {"tokenizer_config.json": json.dumps(config, indent=2),
            "special_tokens_map.json": json.dumps(special, indent=2)}


PHI3_ADDED = ["<|endoftext|>", "<|assistant|>", "<|placeholder1|>", "<|placeholder2|>", "<|placeholder3|>",
              "<|placeholder4|>", "<|system|>", "<|end|>", "<|placeholder5|>", "<|placeholder6|>", "<|user|>"]


def phi3_tokenizer_config(spm_size):
    """tokenizer_config.json, added_tokens.json and special_tokens_map.json as Phi-3-mini ships them
    beside its tokenizer.model: eleven added tokens after the SentencePiece pieces, every one but
    <|endoftext|> stripping the whitespace on its right; <|endoftext|> is also the EOS."""
    def tok(content, special=True, rstrip=False):
        return {"content": content, "lstrip": False, "normalized": False, "rstrip": rstrip,
                "single_word": False, "special": special}
    decoder = {"0": tok("<unk>"), "1": tok("<s>"), "2": tok("</s>", special=False, rstrip=True)}
    added = {}
    for i, name in enumerate(PHI3_ADDED):
        decoder[str(spm_size + i)] = tok(name, rstrip=(name != "<|endoftext|>"))
        added[name] = spm_size + i
    config = {
        "add_bos_token": False, "add_eos_token": False, "added_tokens_decoder": decoder,
        "bos_token": "<s>", "chat_template": PHI3_CHAT_TEMPLATE, "clean_up_tokenization_spaces": False,
        "eos_token": "<|endoftext|>", "legacy": False, "model_max_length": 4096, "pad_token": "<|endoftext|>",
        "padding_side": "left", "sp_model_kwargs": {}, "tokenizer_class": "LlamaTokenizer",
        "unk_token": "<unk>", "use_default_system_prompt": False,
    }
    special = {"bos_token": tok("<s>"), "eos_token": tok("<|endoftext|>"), "pad_token": tok("<|endoftext|>"),
               "unk_token": tok("<unk>")}
    return {"tokenizer_config.json": json.dumps(config, indent=2),
            "added_tokens.json": json.dumps(added, indent=2),
            "special_tokens_map.json": json.dumps(special, indent=2)}
