#!/usr/bin/python3
"""Trains small SentencePiece models for the tokenizer tests and writes what
sentencepiece's own Python API reports about each, for the test to compare its
parse of the protobuf with, field by field.

  make_spm_model.py OUT_DIR

writes, for each model NAME below, OUT_DIR/NAME.model and OUT_DIR/NAME.json:
{"pieces": [{"piece", "score", "unknown", "control", "unused", "byte"}, ...],
 "vocab_size": N}. Deterministic: one thread, a fixed corpus.
"""
import json
import os
import sys

import sentencepiece as spm

# Text with words, digits, punctuation, CJK and emoji, so that merges, byte
# fallback and the dummy prefix all matter.
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Tokenizers split text into pieces; merges join frequent pairs.",
    "Numbers like 1234 and 56.78 appear too, with symbols: #, $, %, &.",
    "def main():\n    return 42  # code has indentation",
    "\u4eca\u65e5\u306f\u826f\u3044\u5929\u6c17\u3067\u3059\u3002 \u4f60\u597d\uff0c\u4e16\u754c\u3002",
    "Emoji \U0001f600 and \U0001f680 are rare.",
    "A llama, a tokenizer and a file system walk into a bar.",
    "she sells sea shells by the sea shore",
]

MODELS = {
    # Llama-2-like: BPE, byte fallback, no normalization, whitespace kept,
    # dummy prefix, control pieces <s> and </s> at 1 and 2.
    "llama": dict(add_dummy_prefix=True),
    # Gemma-like: the same without the dummy prefix, and a user-defined piece.
    "gemma": dict(add_dummy_prefix=False, user_defined_symbols=["<start_of_turn>"]),
    # BPE without byte fallback (unknown characters become <unk>).
    "nobytes": dict(byte_fallback=False, vocab_size=150),
    # Default trainer settings: a unigram model with NFKC normalization.
    "unigram": dict(model_type="unigram", byte_fallback=False, normalization_rule_name="nmt_nfkc",
                    remove_extra_whitespaces=True, vocab_size=100),
}


def train(out_dir, name, options):
    corpus = os.path.join(out_dir, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        for _ in range(20):
            for line in CORPUS:
                f.write(line.replace("\n", " ") + "\n")
    args = dict(
        input=corpus,
        model_prefix=os.path.join(out_dir, name),
        vocab_size=400,
        model_type="bpe",
        byte_fallback=True,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        character_coverage=1.0,
        num_threads=1,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        minloglevel=2,
    )
    args.update(options)
    spm.SentencePieceTrainer.train(**args)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(out_dir, name + ".model"))
    pieces = []
    for i in range(sp.get_piece_size()):
        pieces.append({
            "piece": sp.id_to_piece(i),
            "score": sp.get_score(i),
            "unknown": sp.is_unknown(i),
            "control": sp.is_control(i),
            "unused": sp.is_unused(i),
            "byte": sp.is_byte(i),
        })
    with open(os.path.join(out_dir, name + ".json"), "w", encoding="utf-8") as f:
        json.dump({"pieces": pieces, "vocab_size": sp.get_piece_size()}, f, ensure_ascii=False)


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    for name, options in MODELS.items():
        train(out_dir, name, options)


if __name__ == "__main__":
    main()
