#!/usr/bin/env python3
"""sglang's own prepare_server_args (ServerArgs.__post_init__) on a patched tree, on a CPU (--device cpu).

The CPU twin of gpu-harness/tree_check.sh's server_args cases, for a controller with sglang's Python
dependencies in some venv (torch, transformers==5.6.0, ...; see benchmarks/tree_server_args_cpu.md):

    PYTHONPATH=<tree> HF_HUB_OFFLINE=1 <venv>/bin/python benchmarks/tree_server_args_cpu.py [WORKDIR]

Config-only models (a Qwen3-0.6B-shaped target, a DFlash draft with block_size 16, and `draft32`:
the same draft with block_size 32, for DDTREE budget 31) are written to WORKDIR (default /tmp/tree-server-args-models). Prints one line per case: OK/ERR, the flags, and
the resolved values or the error.
"""

import os
import sys

from sglang.srt.server_args import prepare_server_args

work = sys.argv[1] if len(sys.argv) > 1 else "/tmp/tree-server-args-models"
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpu-harness"))
import make_models  # the repo's one writer of config-only model folders

paths = make_models.write_configs(work, draft_blocks=(16, 32))
target, draft, draft32 = paths["target"], paths["draft"], paths["draft32"]

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
