"""sglang's causal-conv update in a hybrid target's verify on the GPU: the wheel's tree path against patch 0110's.

  prepare (here, no GPU): the pinned wheel's mamba/causal_conv1d_triton.py after the committed series (it holds
           both the wheel's causal_conv1d_update and 0110's causal_conv1d_update_tree_parents), written to --out:
             python3 gpu-harness/conv_tree_check.py prepare --out .gpu/conv
  sweep (the GPU machine: torch and Triton only, no sglang install, no server):
             python gpu-harness/conv_tree_check.py sweep --src .gpu/conv --out "$OUT/conv/sweep.json"
           at the bench hybrid's conv channels (6144: 16 key heads x 128 x 2 + 16 value heads x 128) and
           Qwen3.6-27B's (10240: 48 value heads), conv width 4, batch 1 and 4, 16 and 32 tokens, bf16:
           the wheel's chain verify (DFLASH's and shadow-linear's call: no links), the wheel's tree path (links)
           and 0110's kernel at each --blocks channel block (and --warps), on DDTREE-like random trees. Every launch is timed
           inside a CUDA graph (gdn_chain_check.graph_times); 0110's outputs, cached windows and rolled conv
           state are compared bit for bit with the wheel's tree path. One layer's cost: the bench hybrid has 18
           such layers a verify step.
           CPU dry run (Triton's interpreter; numpy < 2.4):
             TRITON_INTERPRET=1 python gpu-harness/conv_tree_check.py sweep --device cpu --dims 24 --blocks 16 ...
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gdn_chain_check import graph_times, load, wheel_and_series

REL = "sglang/srt/layers/attention/mamba/causal_conv1d_triton.py"


def prepare(out):
    _, text, count = wheel_and_series(REL)
    if text is None or b"causal_conv1d_update_tree_parents" not in text:
        raise SystemExit(f"the series does not patch {REL} with causal_conv1d_update_tree_parents (patch 0110)")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "patched.py"), "wb") as fh:
        fh.write(text)
    print(f"wrote {out}/patched.py ({count} patches applied)")


def ddtree_like(steps, rng):
    """Parent slot per slot (-1 the root): about half the nodes continue the previous node, the rest branch."""
    return [-1] + [j - 1 if rng.random() < 0.5 else rng.randrange(j) for j in range(1, steps)]


def links(parents):
    """First child / next sibling per slot (-1 none): what DDTREE hands sglang's kernel (ddtree_hybrid)."""
    width = len(parents)
    nxt, sib = [-1] * width, [-1] * width
    for j, p in enumerate(parents):
        if p < 0:
            continue
        if nxt[p] < 0:
            nxt[p] = j
        later = [s for s in range(j + 1, width) if parents[s] == p]
        sib[j] = later[0] if later else -1
    return nxt, sib


def inputs(torch, batch, steps, dim, parents, device, width=4, seed=0):
    gen = torch.Generator(device=device).manual_seed(seed)
    dev = {"device": device}
    dtype = torch.bfloat16 if device == "cuda" else torch.float32

    def rnd(*shape):
        return torch.randn(*shape, generator=gen, **dev).to(dtype)

    lines = batch + 1
    nxt, sib = links(parents)
    return {
        "x": rnd(batch, steps, dim).transpose(1, 2),  # as the GDN backend passes it: [batch, dim, steps]
        "weight": rnd(dim, width),
        "bias": None,
        "activation": "silu",
        "conv_state": rnd(lines, width - 1, dim).transpose(1, 2),
        "conv_state_indices": torch.arange(1, lines, dtype=torch.int32, **dev),
        "intermediate_conv_window": torch.zeros(lines, steps, dim, width - 1, dtype=dtype, **dev),
        "intermediate_state_indices": torch.arange(batch, dtype=torch.int32, **dev),
        "next": torch.tensor([nxt] * batch, dtype=torch.int32, **dev),
        "sibling": torch.tensor([sib] * batch, dtype=torch.int32, **dev),
        "parents": torch.tensor([[max(p, 0) for p in parents]] * batch, dtype=torch.int32, **dev),
    }


COMMON = ("weight", "bias", "activation", "conv_state", "conv_state_indices", "intermediate_conv_window",
          "intermediate_state_indices")  # fmt: skip


def calls(mod, case, blocks, warps=(4,)):
    """label -> (function, kwargs) of each variant on its own copy of the inputs."""
    import torch

    def fresh(**extra):
        args = {k: (case[k].clone() if isinstance(case[k], torch.Tensor) else case[k]) for k in COMMON}
        args["x"] = case["x"]
        args.update(extra)
        return args

    out = {
        "chain": (mod.causal_conv1d_update, fresh()),
        "wheel_tree": (mod.causal_conv1d_update, fresh(retrieve_next_token=case["next"], retrieve_next_sibling=case["sibling"],
                                                       retrieve_parent_token=torch.empty_like(case["next"]))),
    }  # fmt: skip
    for block in blocks:
        for nw in warps:
            label = f"parents{block}" + ("" if nw == 4 else f"w{nw}")
            out[label] = (mod.causal_conv1d_update_tree_parents,
                          fresh(retrieve_parent_token=case["parents"], block_n=block, num_warps=nw))  # fmt: skip
    return out


def sweep(src, out_path, blocks, dims, repeats, iters, device="cuda", warps=(4,)):
    import torch

    mod = load(os.path.join(src, "patched.py"), "conv_patched")
    rng = random.Random(0)
    rows = []
    for dim in dims:
        for batch in (1, 4):
            for steps in (16, 32):
                parents = ddtree_like(steps, rng)
                case = inputs(torch, batch, steps, dim, parents, device)
                row = {"dim": dim, "batch": batch, "tokens": steps,
                       "depth": max(depth(parents, j) for j in range(steps))}  # fmt: skip
                results = {}
                variants = calls(mod, case, blocks, warps)
                for label, (fn, args) in variants.items():
                    o = fn(**args)
                    results[label] = (o.clone(), args["intermediate_conv_window"].clone(), args["conv_state"].clone())
                    if device == "cuda":
                        torch.cuda.synchronize()
                        times = graph_times(torch, fn, args, repeats, iters)
                        row[f"{label}_us"] = round(statistics.median(times), 2)
                        row[f"{label}_us_range"] = [round(min(times), 2), round(max(times), 2)]
                want = results["wheel_tree"]
                for label in variants:
                    if label.startswith("parents"):
                        got = results[label]
                        row[f"{label}_identical"] = {name: bool(torch.equal(a, b)) for name, a, b in zip(("out", "windows", "state"), got, want)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    ok = all(all(v.values()) for r in rows for k, v in r.items() if k.endswith("_identical"))
    result = {"device": torch.cuda.get_device_name() if device == "cuda" else device, "torch": torch.__version__,
              "blocks": list(blocks), "warps": list(warps), "rows": rows, "verdict": "PASS" if ok else "FAIL"}  # fmt: skip
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w") as fh:
        json.dump(result, fh, indent=1)
    print("verdict", result["verdict"])
    return 0 if ok else 1


def depth(parents, j):
    d = 0
    while parents[j] >= 0:
        j, d = parents[j], d + 1
    return d


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--out", default=".gpu/conv")
    w = sub.add_parser("sweep")
    w.add_argument("--src", default=".gpu/conv")
    w.add_argument("--out", required=True)
    w.add_argument("--blocks", default="32,64,128,256")
    w.add_argument("--dims", default="6144,10240")
    w.add_argument("--repeats", type=int, default=5)
    w.add_argument("--iters", type=int, default=200)
    w.add_argument("--device", default="cuda")
    w.add_argument("--warps", default="4", help="num_warps of 0110's kernel, comma separated")
    args = ap.parse_args(argv)
    start = time.time()
    if args.cmd == "prepare":
        prepare(args.out)
        rc = 0
    else:
        ints = lambda text: [int(v) for v in text.split(",") if v]
        rc = sweep(args.src, args.out, ints(args.blocks), ints(args.dims), args.repeats, args.iters, args.device,
                   ints(args.warps))
    print(f"done in {time.time() - start:.1f} s")
    return rc


if __name__ == "__main__":
    sys.exit(main())
