#!/usr/bin/env python3
"""sglang's own prepare_server_args (ServerArgs.__post_init__) on a patched tree, on a CPU (--device cpu).

The CPU twin of bench/gpu/tree_check.sh's server_args cases, for a controller with sglang's Python
dependencies in some venv (torch, transformers==5.6.0, ...; see bench/tree_server_args_cpu.md):

    PYTHONPATH=<tree> HF_HUB_OFFLINE=1 <venv>/bin/python bench/tree_server_args_cpu.py [WORKDIR]

Config-only models (a Qwen3-0.6B-shaped target, a DFlash draft with block_size 16, and `draft32`:
the same draft with block_size 32, for DDTREE budget 31) are written to WORKDIR (default /tmp/tree-server-args-models). Prints one line per case: OK/ERR, the flags, and
the resolved values or the error.
"""

import json
import os
import sys

from sglang.srt.server_args import prepare_server_args

work = sys.argv[1] if len(sys.argv) > 1 else "/tmp/tree-server-args-models"
common = {
    "model_type": "qwen3",
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000,
    "hidden_act": "silu",
    "torch_dtype": "bfloat16",
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "tie_word_embeddings": False,
}
target, draft = os.path.join(work, "target"), os.path.join(work, "draft")
draft32 = os.path.join(work, "draft32")
for d, cfg in (
    (target, dict(common, architectures=["Qwen3ForCausalLM"], num_hidden_layers=28)),
    (
        draft,
        dict(
            common,
            architectures=["DFlashDraftModel"],
            num_hidden_layers=5,
            block_size=16,
            num_target_layers=28,
            dflash_config={"target_layer_ids": [1, 7, 13, 19, 25], "mask_token_id": 151669, "block_size": 16},
        ),
    ),
    (
        draft32,
        dict(
            common,
            architectures=["DFlashDraftModel"],
            num_hidden_layers=5,
            block_size=32,
            num_target_layers=28,
            dflash_config={"target_layer_ids": [1, 7, 13, 19, 25], "mask_token_id": 151669, "block_size": 32},
        ),
    ),
):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)

base = [
    "--model-path",
    target,
    "--load-format",
    "dummy",
    "--skip-tokenizer-init",
    "--device",
    "cpu",
    "--attention-backend",
    "triton",
    "--context-length",
    "4096",
    "--speculative-draft-model-path",
    draft,
]
cases = [
    ["DDTREE"],
    ["DDTREE", "--speculative-ddtree-budget", "16"],
    ["DDTREE", "--speculative-ddtree-budget", "31"],
    ["DDTREE", "--speculative-ddtree-budget", "31", "--speculative-draft-model-path", draft32],
    ["DDTREE", "--speculative-ddtree-topk", "0"],
    ["DDTREE", "--speculative-ddtree-budget", "0"],
    ["DDTREE", "--speculative-num-draft-tokens", "8", "--speculative-ddtree-budget", "8"],
    ["DDTREE", "--speculative-ddtree-mode", "shadow-linear", "--speculative-ddtree-budget", "7"],
    ["DFLASH"],
]
for extra in cases:
    flags = " ".join(["--speculative-algorithm", *extra]).replace(work + "/", "")
    try:
        sa = prepare_server_args([*base, "--speculative-algorithm", *extra])
        print(
            f"OK  {flags}: num_draft_tokens={sa.speculative_num_draft_tokens} "
            f"budget={sa.speculative_ddtree_budget} topk={sa.speculative_ddtree_topk} mode={sa.speculative_ddtree_mode} "
            f"draft_block={getattr(sa, 'speculative_ddtree_draft_block_size', None)}"
        )
    except BaseException as e:  # noqa: BLE001 - every outcome is the result (SystemExit from argparse too)
        print(f"ERR {flags}: {type(e).__name__}: {e}")
