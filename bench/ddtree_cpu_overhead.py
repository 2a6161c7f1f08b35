"""Host-side cost of one DDTree step (tree construction, mask, acceptance walk, compaction indexes).

Every DDTREE decode step runs these on the CPU (the mask on the GPU in production; here on the CPU
too) besides the draft and target forwards, so they bound what the tree can add to a step. Runs the
ddtree_utils.py that files/patches/sglang/0.5.11/0101-ddtree-utils.patch installs, with random
draft distributions over a Qwen3-sized vocabulary.

usage: .venv/bin/python bench/ddtree_cpu_overhead.py [--repeat 50]
"""

from __future__ import annotations

import argparse
import importlib.util
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "unit"))


def load():
    from test_ddtree_utils import PATCH, TARGET, new_file_from_patch

    path = Path("/tmp/ddtree_utils_bench.py")
    path.write_text(new_file_from_patch(PATCH, TARGET), encoding="utf-8")
    spec = importlib.util.spec_from_file_location("ddtree_utils_bench", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=50)
    args = ap.parse_args()
    du = load()
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    depth = 15
    print(
        f"# {platform.processor() or platform.machine()}, torch {torch.__version__}, 1 thread, median of {args.repeat}"
    )
    print("| bs | budget | top-k | tree build ms | mask ms | accept walk ms | compaction ms | total ms |")
    print("|---|---|---|---|---|---|---|---|")
    for bs in (1, 4):
        for budget in (7, 15, 31):
            for topk in (1, 4, 8):
                lp = torch.log_softmax(torch.randn(bs, depth, 64, generator=g) * 2, -1)
                lp, idx = torch.topk(lp, topk, dim=-1)
                tk = idx + 1000
                prefix = torch.full((bs,), 700)
                times = {"build": [], "mask": [], "walk": [], "compact": []}
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    tree = du.build_tree_batch(list(range(bs)), lp, tk, budget, topk)
                    t1 = time.perf_counter()
                    du.build_tree_attention_mask(
                        tree.parents, prefix, prefix.tolist(), ancestors=tree.ancestors
                    )
                    du.tree_positions(tree.depths, prefix)
                    t2 = time.perf_counter()
                    res = du.greedy_accept(tree, tree.tokens.roll(-1, dims=1))
                    t3 = time.perf_counter()
                    du.compaction_indices(res.paths, [len(p) for p in res.paths], tree.width)
                    t4 = time.perf_counter()
                    for k, v in zip(times, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
                        times[k].append(v * 1e3)
                med = {k: statistics.median(v) for k, v in times.items()}
                print(
                    f"| {bs} | {budget} | {topk} | {med['build']:.3f} | {med['mask']:.3f} | {med['walk']:.3f} | "
                    f"{med['compact']:.3f} | {sum(med.values()):.3f} |"
                )


if __name__ == "__main__":
    main()
