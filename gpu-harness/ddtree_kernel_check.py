"""The DDTree build kernel on the GPU (patch 0107): same trees as the torch build, and what a build costs.

Loads ddtree_device.py and ddtree_hybrid.py from a patched tree (gpu-harness/ddtree_setup.sh makes one in
$WORK/tree) and, on CUDA:
  1. compares build_tree_kernel with build_tree_device field by field (and the links with
     tree_retrieve_links) on random, flat (all-tie), quantised and -inf drafts, budgets 1..63, top-k
     1..8, batch 1..8: the unit tests do the same under Triton's CPU interpreter, this is the compiled
     kernel on the GPU's own argmax and bit operations;
  2. times TreeBuilder.build (CUDA graph replay, inputs copied in, as a decode step runs it) with the
     kernel and with the torch build, at the benchmarks' shapes (batch 1 and 4, budget 15 with a
     16-block draft and budget 31 with a 32-block draft, top-k 8; hybrid links on and off): median
     ms per build over REPEATS runs of ITERS replays each, with the runs' spread.
Usage (on the GPU machine, after a harness prepared the tree):
  python gpu-harness/ddtree_kernel_check.py --tree "$HOME/ddtree-e2e/tree" --out "$OUT/kernel-check.json"
CPU (Triton's interpreter; no timing): TRITON_INTERPRET=1 python gpu-harness/ddtree_kernel_check.py
  --tree <tree> --out /tmp/k.json --device cpu --cases 6
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import random
import statistics
import sys
import time

import torch

FIELDS = ("tokens", "parents", "depths", "valid", "ancestors", "ranks", "scores", "num_nodes", "max_depth",
          "positions")  # fmt: skip


def load(tree, name):
    path = os.path.join(tree, "sglang", "srt", "speculative", f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"check_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def draft(rng, bs, depth_count, kk, kind, device="cpu", lp_dtype=torch.float32, id_dtype=torch.int64):
    """``[bs, D, K]`` draft top-k log-probs sorted descending, and token ids, of one kind: random, flat
    (every node ties), quantised (many ties), or with -inf entries (a depth's best one too). ``lp_dtype``
    None keeps what each kind makes (float64; float32 for quantised). Also the unit tests' drafts."""
    gen = torch.Generator().manual_seed(rng.randrange(1 << 30))
    if kind == "random":
        lp = -torch.rand((bs, depth_count, kk), generator=gen, dtype=torch.float64) * 4
    elif kind == "flat":
        lp = torch.full((bs, depth_count, kk), math.log(0.5), dtype=torch.float64)
    elif kind == "quantised":
        lp = -(torch.rand((bs, depth_count, kk), generator=gen) * 4).round()
    else:
        lp = -torch.rand((bs, depth_count, kk), generator=gen, dtype=torch.float64) * 3
        lp[..., -1] = float("-inf")
        if depth_count > 2:
            lp[:, 2, 0] = float("-inf")  # nothing below depth 2
    lp = lp.sort(dim=-1, descending=True).values
    if lp_dtype is not None:
        lp = lp.to(lp_dtype)  # the head's top-k are float32
    ids = torch.randint(0, 151936, (bs, depth_count, kk), generator=gen)
    return lp.to(device), ids.to(device=device, dtype=id_dtype)


def compare(dd, hy, device, cases):
    rng = random.Random("kernel-check")
    shapes = [(15, 8, 15, 8), (31, 8, 31, 8), (1, 1, 1, 1), (63, 8, 15, 8), (7, 2, 3, 4), (31, 1, 15, 8),
              (15, 8, 4, 2)]  # fmt: skip
    done, bad = 0, []
    for i in range(cases):
        budget, topk, depth_count, kk = shapes[i % len(shapes)]
        kind = ("random", "flat", "quantised", "neginf")[(i // len(shapes)) % 4]
        bs = rng.choice([1, 2, 4, 8])
        lp, ids = draft(rng, bs, depth_count, kk, kind, device)
        roots = torch.randint(0, 151936, (bs,), device=device)
        prefix = torch.randint(1, 3000, (bs,), device=device)
        want = dd.build_tree_device(lp, ids, roots, budget, topk, prefix)
        got = dd.build_tree_kernel(lp, ids, roots, budget, topk, prefix, links=True)
        diff = [n for n in FIELDS if getattr(want, n).dtype != getattr(got, n).dtype
                or not torch.equal(getattr(want, n), getattr(got, n))]  # fmt: skip
        first, sib = hy.tree_retrieve_links(want.parents)
        if not (torch.equal(first, got.next_token) and torch.equal(sib, got.next_sibling)):
            diff.append("links")
        if diff:
            bad.append({"case": i, "kind": kind, "bs": bs, "budget": budget, "topk": topk, "fields": diff})
        done += 1
    return {"cases": done, "mismatches": bad}


def time_builds(dd, hy, device, repeats, iters):
    out = []
    rng = random.Random("kernel-timing")
    for budget, depth_count in ((15, 15), (31, 31)):
        for bs in (1, 4):
            for links in (False, True):
                lp, ids = draft(rng, bs, depth_count, 8, "random", device)
                roots = torch.randint(0, 151936, (bs,), device=device)
                prefix = torch.randint(1, 3000, (bs,), device=device)
                row = {"budget": budget, "bs": bs, "links": links}
                for kernel in (False, True):
                    builder = dd.TreeBuilder(budget, use_graphs=True, kernel=kernel,
                                             links=hy.tree_retrieve_links if links else None)  # fmt: skip
                    builder.build(lp, ids, roots, prefix, 8)  # capture
                    torch.cuda.synchronize()
                    runs = []
                    for _ in range(repeats):
                        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        start.record()
                        for _ in range(iters):
                            builder.build(lp, ids, roots, prefix, 8)
                        end.record()
                        end.synchronize()
                        runs.append(start.elapsed_time(end) / iters)
                    name = "kernel" if kernel else "torch"
                    row[f"{name}_ms"] = round(statistics.median(runs), 4)
                    row[f"{name}_ms_range"] = [round(min(runs), 4), round(max(runs), 4)]
                    row[f"{name}_graphs"] = len(builder._graphs)
                row["torch_over_kernel"] = round(row["torch_ms"] / row["kernel_ms"], 2)
                out.append(row)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", required=True, help="a patched sglang tree (the folder holding sglang/)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--cases", type=int, default=112)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--iters", type=int, default=200)
    args = ap.parse_args(argv)
    t0 = time.time()
    dd, hy = load(args.tree, "ddtree_device"), load(args.tree, "ddtree_hybrid")
    result = {"device": torch.cuda.get_device_name() if args.device == "cuda" else args.device,
              "torch": torch.__version__}  # fmt: skip
    try:
        import triton

        result["triton"] = triton.__version__
    except ImportError as e:
        result["triton"] = f"missing: {e}"
    result["compare"] = compare(dd, hy, args.device, args.cases)
    if args.device == "cuda":
        result["timing"] = time_builds(dd, hy, args.device, args.repeats, args.iters)
    result["seconds"] = round(time.time() - t0, 1)
    result["verdict"] = "PASS" if not result["compare"]["mismatches"] and result["compare"]["cases"] else "FAIL"
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({k: v for k, v in result.items() if k != "compare"} | {
        "cases": result["compare"]["cases"], "mismatches": len(result["compare"]["mismatches"])}, indent=1))
    return 0 if result["verdict"] == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
