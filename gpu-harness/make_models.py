#!/usr/bin/env python3
"""Model folders for GPU runs, and the lab's config-only models: the one writer of their configs.

Families (folder names under the root; a draft per block size B: <draft>, or <draft><B> if B != 16):
  dense       target/  Qwen3ForCausalLM, Qwen3-0.6B shape (28 layers, hidden 1024)       draft/
  hybrid      hybrid/  Qwen3_5ForConditionalGeneration, the seeds' model class (Qwen3.6-27B is one):
              Gated DeltaNet (linear attention) layers with full attention every 4th layer, head_dim
              256, attn_output_gate, linear key/value heads of dim 128, conv kernel 4, float32
              recurrent state; scaled down (24 layers, hidden 1024)                      hybrid-draft/
  dense-rw    the dense shape with 8 layers and an untied LM head, for real random weights
  hybrid-rw   the hybrid shape with 8 layers (2 x linear-linear-linear-full), likewise
Drafts: DFlashDraftModel (5 layers, 2 for the -rw families) reading target layers spread over the
target, block size 16 (mask token 151669).

Every folder of the hybrid families also gets the processor files and the tokenizer: sglang loads
the multimodal wrapper's processor even with --skip-tokenizer-init. The tokenizer (built here,
offline) is word-level over every id of the 151936-entry embedding (a few hundred real words, then
filler words), with the ChatML and vision special tokens at Qwen's ids and a ChatML chat template:
/v1/chat/completions runs through sglang's real chat path; the words are nonsense (random weights).

usage: make_models.py DIR            ->  DIR/target, DIR/draft, DIR/hybrid, DIR/hybrid-draft (+ tokenizers)
       make_models.py --lab DIR      ->  the lab's config-only models (lab/models)
Scripts that need folders import this file and call write_configs(); the -rw families get their
weights from gpu-harness/make_weights.py.
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
    "<|vision_start|>": 151652,
    "<|vision_end|>": 151653,
    "<|image_pad|>": 151655,
    "<|video_pad|>": 151656,
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


def dense_config(layers=28, hidden=1024, heads=16, kv_heads=8, intermediate=3072, tied=True):
    return dict(COMMON, architectures=["Qwen3ForCausalLM"], num_hidden_layers=layers, max_window_layers=layers,
                hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv_heads,
                intermediate_size=intermediate, tie_word_embeddings=tied)  # fmt: skip


def hybrid_text_config(layers=24, hidden=1024, heads=8, kv_heads=2, linear_k_heads=16, linear_v_heads=16,
                       intermediate=3584, vocab=VOCAB):  # fmt: skip
    """Qwen3.5 text backbone: 3 Gated DeltaNet layers to 1 full attention (layers must be a multiple of 4)."""
    if layers % 4:
        raise ValueError(f"Qwen3.5 hybrids have full attention every 4th layer: {layers} layers")
    return {
        "model_type": "qwen3_5_text",
        "architectures": ["Qwen3_5ForCausalLM"],
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": layers,
        "layer_types": ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)],
        "full_attention_interval": 4,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": 256,
        "attn_output_gate": True,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_num_key_heads": linear_k_heads,
        "linear_num_value_heads": linear_v_heads,
        "mamba_ssm_dtype": "float32",
        "vocab_size": vocab,
        "max_position_embeddings": 262144,
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "tie_word_embeddings": False,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25,
                            "mrope_interleaved": True, "mrope_section": [11, 11, 10]},
        "torch_dtype": "bfloat16",
        "bos_token_id": SPECIAL["<|endoftext|>"],
        "eos_token_id": SPECIAL["<|im_end|>"],
        "use_cache": True,
    }


def hybrid_config(vision_hidden=64, **text):
    """Qwen3_5ForConditionalGeneration (the multimodal wrapper the Qwen3.5/3.6 checkpoints use)."""
    tc = hybrid_text_config(**text)
    return {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "text_config": tc,
        "vision_config": {"model_type": "qwen3_5", "depth": 1, "hidden_size": vision_hidden,
                          "intermediate_size": 2 * vision_hidden, "num_heads": 2, "in_channels": 3,
                          "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
                          "out_hidden_size": tc["hidden_size"], "num_position_embeddings": 2304,
                          "hidden_act": "gelu_pytorch_tanh", "deepstack_visual_indexes": [],
                          "initializer_range": 0.02},
        "image_token_id": SPECIAL["<|image_pad|>"],
        "video_token_id": SPECIAL["<|video_pad|>"],
        "vision_start_token_id": SPECIAL["<|vision_start|>"],
        "vision_end_token_id": SPECIAL["<|vision_end|>"],
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def text_of(cfg):
    """The text backbone's config (the wrapper's text_config, or the config itself)."""
    return cfg.get("text_config") or cfg


def draft_config(target, block=16, layers=5):
    """A DFlash draft for target: its hidden size, reading target layers spread over its depth."""
    t = text_of(target)
    n = t["num_hidden_layers"]
    count, step = 5, max(1, (n - 3) // 4)  # 28 layers: 1, 7, 13, 19, 25
    ids = [1 + step * i for i in range(count)]
    return dict(COMMON, architectures=["DFlashDraftModel"], num_hidden_layers=layers, max_window_layers=layers,
                hidden_size=t["hidden_size"], tie_word_embeddings=False, block_size=block, num_target_layers=n,
                dflash_config={"target_layer_ids": ids, "mask_token_id": SPECIAL["<|mask|>"],
                               "block_size": block})  # fmt: skip


# family -> (target folder, draft folder prefix, target config, draft layers)
FAMILIES = {
    "dense": ("target", "draft", lambda: dense_config(), 5),
    "hybrid": ("hybrid", "hybrid-draft", lambda: hybrid_config(), 5),
    "dense-rw": ("dense-rw", "dense-rw-draft", lambda: dense_config(layers=8, tied=False), 2),
    "hybrid-rw": ("hybrid-rw", "hybrid-rw-draft", lambda: hybrid_config(layers=8, heads=8, kv_heads=2,
                                                                     linear_k_heads=4, linear_v_heads=8,
                                                                     intermediate=3072), 2),
}


def model_configs(draft_blocks=(16,), families=("dense",)):
    """{folder name: config.json}: per family its target and a DFlash draft per block size (<draft> for
    16, <draft><B> otherwise: same shapes and target layer ids; a DDTree budget b needs b + 1 <= B)."""
    cfgs = {}
    for fam in families:
        target_name, draft_name, make, draft_layers = FAMILIES[fam]
        target = cfgs[target_name] = make()
        for block in draft_blocks:
            cfgs[draft_name if block == 16 else f"{draft_name}{block}"] = draft_config(target, block, draft_layers)
    return cfgs


def is_multimodal(cfg):
    return "vision_config" in cfg


def processor_files():
    """The Qwen3-VL processor the Qwen3.5 wrapper loads (image + video processor settings)."""
    common = {"patch_size": 16, "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5, 0.5, 0.5],
              "image_std": [0.5, 0.5, 0.5], "processor_class": "Qwen3VLProcessor"}  # fmt: skip
    return {
        "preprocessor_config.json": dict(common, image_processor_type="Qwen2VLImageProcessorFast",
                                         size={"shortest_edge": 65536, "longest_edge": 16777216}),
        "video_preprocessor_config.json": dict(common, video_processor_type="Qwen3VLVideoProcessor",
                                               size={"shortest_edge": 4096, "longest_edge": 25165824}),
    }  # fmt: skip


def write_tokenizer(d):
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
    write(d, "tokenizer.json", tokenizer_json())
    write(d, "tokenizer_config.json", tok_cfg)
    write(d, "special_tokens_map.json", {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": "<unk>"})
    write(d, "chat_template.json", {"chat_template": CHAT_TEMPLATE})


def write_configs(root, draft_blocks=(16,), families=("dense",)):
    """Folders (config.json + generation_config.json) under root; returns their paths.

    A multimodal target (the hybrid wrapper) also gets its processor files and the tokenizer, which
    sglang loads even with --skip-tokenizer-init; everything else stays config-only."""
    paths = {}
    for name, cfg in model_configs(draft_blocks, families).items():
        d = paths[name] = os.path.join(root, name)
        os.makedirs(d, exist_ok=True)
        write(d, "config.json", cfg)
        write(d, "generation_config.json", {"bos_token_id": 151643, "eos_token_id": 151645, "do_sample": False})
        if is_multimodal(cfg):
            for fname, obj in processor_files().items():
                write(d, fname, obj)
            write_tokenizer(d)
    return paths


LAB_NOTE = "config-only lab stand-in: no weights; shape from the seeds (hidden 5120)"


def lab_configs():
    """lab/models: the seeds' Qwen3.6-27B (a Qwen3.5-family hybrid: 64 layers, hidden 5120, 24 heads of 256,
    48 linear value heads), its DFlash draft, and a dense model of the same size beside them (Qwen3-32B
    shape) for comparisons. Config-only: the lab's stand-in server never loads weights."""
    hybrid = hybrid_config(vision_hidden=1152, layers=64, hidden=5120, heads=24, kv_heads=4, linear_k_heads=16,
                           linear_v_heads=48, intermediate=17408, vocab=248320)  # fmt: skip
    hybrid["vision_config"].update(depth=27, intermediate_size=4304, num_heads=16)
    hybrid.update(image_token_id=248056, video_token_id=248057, vision_start_token_id=248053,
                  vision_end_token_id=248054)  # fmt: skip
    hybrid["text_config"].update(bos_token_id=248044, eos_token_id=248044)
    dense = dense_config(layers=64, hidden=5120, heads=64, kv_heads=8, intermediate=25600, tied=False)
    dense.update(max_position_embeddings=262144)
    draft = dict(COMMON, architectures=["DFlashDraftModel"], num_hidden_layers=5, hidden_size=5120,
                 intermediate_size=25600, num_attention_heads=64, max_position_embeddings=262144,
                 tie_word_embeddings=False, block_size=16, num_target_layers=64,
                 # the target's vocabulary (a draft shares its target's tokenizer; the models stage checks the
                 # pair: module_utils/dflash_models/pair.py); its mask token as in the Qwen3.5-family drafts
                 vocab_size=248320, bos_token_id=248044, eos_token_id=248044,
                 dflash_config={"target_layer_ids": [1, 16, 31, 46, 61], "mask_token_id": 248077,
                                "block_size": 16})  # fmt: skip
    for c in (hybrid, dense, draft):
        c["_dflash_lab"] = LAB_NOTE
        c.pop("max_window_layers", None)
        c.pop("use_sliding_window", None)
        c.pop("sliding_window", None)
    return {"Qwen3.6-27B": hybrid, "Qwen3.6-27B-DFlash": draft, "Qwen3-32B": dense}


def main(argv):
    if argv[:1] == ["--lab"]:
        for name, cfg in lab_configs().items():
            d = os.path.join(argv[1], name)
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "config.json"), "w") as fh:
                json.dump(cfg, fh, indent=2)
                fh.write("\n")
            print(d)
        return
    root = argv[0] if argv else "/root/models"
    paths = write_configs(root, families=("dense", "hybrid"))
    for d in paths.values():
        write_tokenizer(d)
    assert re.fullmatch(r"[0-9]+", str(len(tokenizer_json()["model"]["vocab"])))
    for p in paths.values():
        print(p)


if __name__ == "__main__":
    main(sys.argv[1:])
