#!/usr/bin/env python3
"""Model folders for a GPU run with `--load-format dummy` (random weights; no weights can be fetched).

  target/  Qwen3ForCausalLM, Qwen3-0.6B shape (28 layers, hidden 1024, vocab 151936)
  draft/   DFlashDraftModel, 5 layers reading target layers 1,7,13,19,25, block size 16

Both get the same small tokenizer built here, offline: a word-level vocabulary covering every id
of the 151936-entry embedding (a few hundred real words first, then filler words), the ChatML
special tokens at Qwen's ids and a ChatML chat template. With it, /v1/chat/completions runs
through sglang's real chat path (template -> tokenize -> generate -> detokenize); the words that
come back are nonsense, since the weights are random.

usage: make_models.py DIR   ->  DIR/target, DIR/draft

The bench scripts that need config-only folders without the tokenizer (argument parsing, the DDTree run
with its block-32 draft) import this file and call write_configs().
"""

import json
import os
import re
import sys

VOCAB = 151936
SPECIAL = {
    "<|endoftext|>": 151643,
    "<|im_start|>": 151644,
    "<|im_end|>": 151645,
    "<think>": 151667,
    "</think>": 151668,
    "<|mask|>": 151669,
}
WORDS_TEXT = [
    "def",
    "return",
    "for",
    "in",
    "range",
    "if",
    "else",
    "while",
    "n",
    "a",
    "b",
    "fibonacci",
    "function",
    "python",
    "iteration",
    "code",
    "only",
    "user",
    "assistant",
    "system",
    "write",
    "the",
    "of",
    "and",
    "to",
    "is",
    "it",
    "that",
    "this",
    "with",
    "as",
    "be",
    "on",
    "by",
    "at",
    "or",
    "from",
    "an",
    "are",
    "was",
    "not",
    "but",
    "all",
    "can",
    "has",
    "import",
    "print",
    "int",
    "list",
    "value",
    "result",
    "loop",
    "sum",
    "one",
    "two",
    "zero",
    "first",
    "next",
    "previous",
    "number",
    "sequence",
    "(",
    ")",
    ":",
    ",",
    ".",
    "=",
    "+",
    "-",
    "*",
    "/",
    "[",
    "]",
    "{",
    "}",
    "0",
    "1",
    "2",
    "3",
    "4",
    "5",
    "6",
    "7",
    "8",
    "9",
    "#",
    "`",
    "'",
    '"',
    "<",
    ">",
    "!",
    "?",
]
WORDS = WORDS_TEXT
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
COMMON = {
    "model_type": "qwen3",
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": VOCAB,
    "max_position_embeddings": 40960,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000,
    "rope_scaling": None,
    "hidden_act": "silu",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "initializer_range": 0.02,
    "torch_dtype": "bfloat16",
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "use_sliding_window": False,
    "sliding_window": None,
    "use_cache": True,
}


def tokenizer_json():
    vocab, nxt = {"<unk>": 0}, 1
    for w in dict.fromkeys(WORDS):
        vocab[w] = nxt
        nxt += 1
    ids = set(SPECIAL.values())
    for i in range(nxt, VOCAB):
        if i not in ids:
            vocab[f"w{i}"] = i
    added = [
        {
            "id": i,
            "content": t,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for t, i in sorted(SPECIAL.items(), key=lambda x: x[1])
    ]
    for t, i in SPECIAL.items():
        vocab[t] = i
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
    }


def write(d, name, obj):
    with open(os.path.join(d, name), "w") as fh:
        json.dump(obj, fh, indent=1 if name != "tokenizer.json" else None)


def model_configs(draft_blocks=(16,)):
    """{folder name: config.json}: the target, and a DFlash draft per block size ("draft" for 16,
    "draft<B>" otherwise: same shapes and target layer ids; a DDTree budget b needs b + 1 <= B)."""
    cfgs = {"target": dict(COMMON, architectures=["Qwen3ForCausalLM"], num_hidden_layers=28,
                           max_window_layers=28, tie_word_embeddings=True)}  # fmt: skip
    for block in draft_blocks:
        cfgs["draft" if block == 16 else f"draft{block}"] = dict(
            COMMON,
            architectures=["DFlashDraftModel"],
            num_hidden_layers=5,
            max_window_layers=5,
            tie_word_embeddings=False,
            block_size=block,
            num_target_layers=28,
            dflash_config={
                "target_layer_ids": [1, 7, 13, 19, 25],
                "mask_token_id": SPECIAL["<|mask|>"],
                "block_size": block,
            },
        )
    return cfgs


def write_configs(root, draft_blocks=(16,)):
    """Config-only folders (config.json + generation_config.json) under root; returns their paths."""
    paths = {}
    for name, cfg in model_configs(draft_blocks).items():
        d = paths[name] = os.path.join(root, name)
        os.makedirs(d, exist_ok=True)
        write(d, "config.json", cfg)
        write(d, "generation_config.json", {"bos_token_id": 151643, "eos_token_id": 151645, "do_sample": False})
    return paths


def main(root):
    paths = write_configs(root)
    tok = tokenizer_json()
    tok_cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 40960,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": "<unk>",
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
    }
    for d in paths.values():
        write(d, "tokenizer.json", tok)
        write(d, "tokenizer_config.json", tok_cfg)
        write(
            d,
            "special_tokens_map.json",
            {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": "<unk>"},
        )
    assert re.fullmatch(r"[0-9]+", str(len(tok["model"]["vocab"])))
    print(paths["target"])
    print(paths["draft"])


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/root/models")
