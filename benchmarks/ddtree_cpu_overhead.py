"""Host-side cost of one DDTree step: the host reference (before) and the device code run on the CPU (after).

Before (ddtree_utils.py, what every DDTREE step ran on the host until the device build): best-first tree
construction (Python heap), the mask, the acceptance walk, the compaction indexes, with the draft's top-k
copied to the host first. After (ddtree_device.py, what a step now runs on the GPU): the same build, mask,
walk and commit indexes as tensor operations with fixed shapes; on a GPU the build is one CUDA graph
replay. Run here on the CPU, "after" shows two things: its CPU time (an eager CPU run of GPU-shaped
code, not a GPU figure) and the work a GPU step enqueues: dispatched operators (kernels) per step and
host reads (0 for the build: nothing waits for the GPU before the target forward). Both patches are
loaded from files/patches/sglang/0.5.11/0101-ddtree-utils.patch; random draft distributions.

usage: .venv/bin/python benchmarks/ddtree_cpu_overhead.py [--repeat 50] [--quick]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "unit"))
VIEWS = {"view", "slice", "select", "expand", "alias", "unsqueeze", "squeeze", "t", "transpose",
         "permute", "lift_fresh", "_unsafe_view", "as_strided", "detach", "scalar_tensor"}  # fmt: skip
HOST_READS = {"_local_scalar_dense", "nonzero", "masked_select"}


def load(rel, name):
    from test_ddtree_utils import load_from_patch

    return load_from_patch(rel, name, tempfile.mkdtemp(prefix="ddtree-bench-"))


class Kernels(TorchDispatchMode):
    """Counts dispatched operators that do work (views excluded) and host reads."""

    def __init__(self):
        super().__init__()
        self.ops = 0
        self.reads = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        base = func.__name__.split(".")[0]
        if base in HOST_READS:
            self.reads += 1
        elif base not in VIEWS:
            self.ops += 1
        return func(*args, **(kwargs or {}))


def before(du, lp, tk, bs, budget, topk, prefix):
    t0 = time.perf_counter()
    tree = du.build_tree_batch(list(range(bs)), lp, tk, budget, topk)
    t1 = time.perf_counter()
    du.build_tree_attention_mask(tree.parents, prefix, prefix.tolist(), ancestors=tree.ancestors)
    du.tree_positions(tree.depths, prefix)
    t2 = time.perf_counter()
    res = du.greedy_accept(tree, tree.tokens.roll(-1, dims=1))
    t3 = time.perf_counter()
    du.compaction_indices(res.paths, [len(p) for p in res.paths], tree.width)
    t4 = time.perf_counter()
    return t1 - t0, t2 - t1, t3 - t2, t4 - t3


def after(dd, lp, tk, bs, budget, topk, prefix, count=None):
    t0 = time.perf_counter()
    tree = dd.build_tree_device(lp, tk, torch.arange(bs), budget, topk, prefix)
    t1 = time.perf_counter()
    dd.tree_mask_flat(tree.ancestors, prefix, prefix.tolist())
    t2 = time.perf_counter()
    res = dd.accept_and_fetch(tree, tree.tokens.roll(-1, dims=1))
    t3 = time.perf_counter()
    dd.commit_indexes(res.path_dev, torch.tensor([len(p) for p in res.paths]), [len(p) for p in res.paths])
    t4 = time.perf_counter()
    return t1 - t0, t2 - t1, t3 - t2, t4 - t3


def count_work(dd, lp, tk, bs, budget, topk, prefix):
    """(operators, host reads) of the build alone and of the whole step (build, mask, walk, commit).

    Steady state: the first build of a shape makes its constant templates, so one runs first."""
    dd.build_tree_device(lp, tk, torch.arange(bs), budget, topk, prefix)
    with Kernels() as build:
        tree = dd.build_tree_device(lp, tk, torch.arange(bs), budget, topk, prefix)
    with Kernels() as rest:
        dd.tree_mask_flat(tree.ancestors, prefix, [int(p) for p in prefix])
        path, _, _ = dd.accept_walk(tree, tree.tokens.roll(-1, dims=1))
        dd.commit_indexes(path, torch.ones(bs, dtype=torch.int64), [1] * bs)
    return build.ops, build.reads, build.ops + rest.ops


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--quick", action="store_true", help="top-k 8 only")
    args = ap.parse_args()
    du = load("sglang/srt/speculative/ddtree_utils.py", "ddtree_utils_bench")
    dd = load("sglang/srt/speculative/ddtree_device.py", "ddtree_device_bench")
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    print(f"# {platform.processor() or platform.machine()}, torch {torch.__version__}, 1 thread, median of {args.repeat}")
    print("| bs | budget | top-k | before: build / mask / walk / compaction / total ms | "
          "after (CPU run): build / mask / walk / commit / total ms | after: build ops, host reads | step ops |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for bs in (1, 4):
        for budget in (7, 15, 31):
            for topk in (8,) if args.quick else (1, 4, 8):
                depth = min(budget, 15 if budget < 31 else 31)
                lp = torch.log_softmax(torch.randn(bs, depth, 64, generator=g) * 2, -1)
                lp, idx = torch.topk(lp, topk, dim=-1)
                tk = idx + 1000
                prefix = torch.full((bs,), 700)
                res = {}
                for name, fn, mod in (("before", before, du), ("after", after, dd)):
                    times = [fn(mod, lp, tk, bs, budget, topk, prefix) for _ in range(args.repeat)]
                    med = [statistics.median(t[i] for t in times) * 1e3 for i in range(4)]
                    res[name] = " / ".join(f"{m:.3f}" for m in med) + f" / **{sum(med):.3f}**"
                ops, reads, step_ops = count_work(dd, lp, tk, bs, budget, topk, prefix)
                print(f"| {bs} | {budget} | {topk} | {res['before']} | {res['after']} | {ops}, {reads} | {step_ops} |")


if __name__ == "__main__":
    main()
