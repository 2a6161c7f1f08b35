"""sglang's GDN verify kernel on the GPU: the wheel's against the series' (patches 0108, 0109), by shape.

Recorded runs (raw.tar.xz of each record): gpu-harness/records/2026-12-03-ddtree-build-kernel, call8-gdn-chain-check/
(`run` at 35291e1, whose
series had a first 0108: the parent reload skipped on a chain step; no gain, reverted; that run timed an eager
loop of launches, which measures the Python launcher more than the kernel) and
gpu-harness/records/2026-12-03-ddtree-width, call9-gdn-sweep-graphs/ (`sweep`: the value block of today's 0108).
Both now time launches replayed from a CUDA graph.

  prepare (here, no GPU): the pinned wheel's fla/fused_sigmoid_gating_recurrent.py as it ships
           (upstream.py) and after the committed series (patched.py), written to --out (carry it):
             python3 gpu-harness/gdn_chain_check.py prepare --out .gpu/gdn
  run (the GPU machine: torch and Triton only, no sglang install, no server):
             python gpu-harness/gdn_chain_check.py run --src .gpu/gdn --out "$OUT/gdn.json"
           at the bench hybrid's shapes (16 value heads, K = V = 128, float32 state cache, batch 1):
           the linear verify (no parents), a chain given as a tree, and DDTREE-like trees (half the
           tokens' parents the previous token), at 16 and 32 tokens; upstream and patched (the series'
           launcher, its opt-in switches off): outputs and cached states compared bit for bit with
           upstream, and the median us per launch. One layer's cost: the hybrid target has 18 such layers
           a verify step.
  sweep (the GPU machine, after prepare): the wheel's kernel by value-block size (patch 0108's measurement)
           and, in the tree rows, the series' node-by-node tree verify (patch 0109, switched on),
             python gpu-harness/gdn_chain_check.py sweep --src .gpu/gdn --out "$OUT/gdn/sweep.json"
           at the bench hybrid's heads and Qwen3.6-27B's, batch 1 and 4, 16 and 32 tokens, linear and tree;
           each launch timed inside a CUDA graph. Recorded: gpu-harness/records/2026-12-03-ddtree-width/.
           CPU dry run (Triton's interpreter; numpy < 2.4, which the interpreter's runtime loops need):
             TRITON_INTERPRET=1 python gpu-harness/gdn_chain_check.py sweep --device cpu --dim 16 --shapes 2:1 ...
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REL = "sglang/srt/layers/attention/fla/fused_sigmoid_gating_recurrent.py"


def wheel_and_series(rel):
    """(the pinned wheel's bytes of `rel`, its bytes after the committed series or None where the series leaves
    it alone, the number of patches applied)."""
    import ansible.module_utils  # the toolkit's code by its one name (docs/design.md, "Import path")
    ansible.module_utils.__path__.append(os.path.join(REPO, "module_utils"))
    sys.path.insert(0, os.path.join(REPO, "tests"))
    import sglang_wheel
    from ansible.module_utils.dflash_tree import diff, series
    from ansible.module_utils.dflash_tree import wheel as tree_wheel

    wheel = tree_wheel.Wheel(str(sglang_wheel.sglang_wheel()), sglang_wheel.pinned_sha256())
    try:
        patches = series.read_series_dir(str(sglang_wheel.PATCH_DIR))
        contents, _, _ = diff.apply_series(wheel.read, patches)
        return wheel.read(rel), contents.get(rel), len(patches)
    finally:
        wheel.close()


def prepare(out):
    upstream, patched, count = wheel_and_series(REL)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "upstream.py"), "wb") as fh:
        fh.write(upstream)
    with open(os.path.join(out, "patched.py"), "wb") as fh:
        fh.write(patched or upstream)  # the wheel's own text where the series leaves it alone
    print(f"wrote {out}/upstream.py and {out}/patched.py ({count} patches applied)")


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def parents_of(kind, steps, rng):
    if kind == "linear":
        return None
    if kind == "chain":
        return [max(j - 1, 0) for j in range(steps)]
    return [0] + [j - 1 if rng.random() < 0.5 else rng.randrange(j) for j in range(1, steps)]


def inputs(torch, steps, parents, heads=16, dim=128, seed=0, device="cuda", key_heads=None):
    """heads: value heads (HV); key_heads: query/key heads (H, HV a multiple of it; default HV)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    kh = key_heads or heads
    dev = {"device": device}

    def rnd(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape, generator=gen, **dev).to(dtype)

    out = {
        "A_log": -torch.rand(heads, generator=gen, **dev), "a": rnd(steps, heads), "dt_bias": rnd(heads, dtype=torch.float32),
        "softplus_beta": 1.0, "softplus_threshold": 20.0,
        "q": rnd(1, steps, kh, dim), "k": rnd(1, steps, kh, dim), "v": rnd(1, steps, heads, dim),
        "b": rnd(1, steps, heads), "initial_state_source": rnd(2, heads, dim, dim, dtype=torch.float32),
        "initial_state_indices": torch.tensor([1], dtype=torch.int32, **dev), "use_qk_l2norm_in_kernel": True,
        "disable_state_update": True,
        "intermediate_states_buffer": torch.zeros(1, steps, heads, dim, dim, dtype=torch.float32, **dev),
        "intermediate_state_indices": torch.tensor([0], dtype=torch.int32, **dev), "cache_steps": steps,
    }  # fmt: skip
    if parents is not None:
        out["retrieve_parent_token"] = torch.tensor([parents], dtype=torch.int64, **dev)
    return out


def run(src, out_path, repeats, iters, device="cuda", heads=16, dim=128):
    """device cpu (with TRITON_INTERPRET=1): the comparison only, at small shapes (a dry run)."""
    import torch

    up = load(os.path.join(src, "upstream.py"), "gdn_upstream")
    pa = load(os.path.join(src, "patched.py"), "gdn_patched")
    if hasattr(pa, "_TREE_PATHS"):  # the serial kernel (0108's launch): 0109's tree kernel is `sweep`'s
        pa._TREE_PATHS = "0"
    rng = random.Random(0)
    rows = []
    for steps in (16, 32):
        for kind in ("linear", "chain", "tree", "tree2"):
            parents = parents_of(kind, steps, rng)
            base = inputs(torch, steps, parents, heads=heads, dim=dim, device=device)
            row = {"tokens": steps, "kind": kind,
                   "chain_steps": None if parents is None else sum(p == j - 1 for j, p in enumerate(parents) if j)}  # fmt: skip
            want = call_and_time(torch, up, base, row, "upstream", device, repeats, iters)
            o, cache = call_and_time(torch, pa, base, row, "patched", device, repeats, iters)
            row["patched_identical"] = bool(torch.equal(o, want[0]) and torch.equal(cache, want[1]))
            rows.append(row)
            print(json.dumps(row), flush=True)
    result = {"device": torch.cuda.get_device_name() if device == "cuda" else device, "torch": torch.__version__, "rows": rows,
              "verdict": "PASS" if all(r["patched_identical"] for r in rows) else "FAIL"}  # fmt: skip
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w") as fh:
        json.dump(result, fh, indent=1)
    print("verdict", result["verdict"])
    return 0 if result["verdict"] == "PASS" else 1


CAP = "BV = triton.next_power_of_2(K), min(triton.next_power_of_2(V), 32)"


def with_bv_cap(text, cap):
    """The kernel module's text with its value-block cap (32 in the wheel) set to `cap`."""
    if CAP not in text:
        raise SystemExit("the value-block line is not the wheel's: " + CAP)
    return text.replace(CAP, CAP.replace("32)", f"{int(cap)})"))


def sweep(src, out_path, caps, repeats, iters, device="cuda", shapes=((16, 16), (48, 16)), dim=128):
    """The verify kernel by value-block size (BV): grid (1, V / BV, batch x value heads), one warp each, so
    at batch 1 a smaller BV means more, shorter programs. shapes: (value heads, key heads): the bench
    hybrid's (16, 16) and Qwen3.6-27B's (48, 16). Outputs and cached states are compared with BV 32 (the
    wheel's): max abs difference (a column of the state is computed alone, so only the reduction's
    layout can differ)."""
    import torch

    with open(os.path.join(src, "upstream.py")) as fh:
        text = fh.read()
    mods = {}
    for cap in caps:
        path = os.path.join(src, f"bv{cap}.py")
        with open(path, "w") as fh:
            fh.write(with_bv_cap(text, cap))
        mods[f"bv{cap}"] = load(path, f"gdn_bv{cap}")
    patched = load(os.path.join(src, "patched.py"), "gdn_paths")
    if hasattr(patched, "_TREE_PATHS"):  # patch 0109: the tree verify node by node (tree rows only), forced on
        patched._TREE_PATHS = "1"
        mods["paths"] = patched
    rng = random.Random(0)
    rows = []
    for hv, hk in shapes:
        for batch in (1, 4):
            for steps in (16, 32):
                for kind in ("linear", "tree"):
                    parents = parents_of(kind, steps, rng)
                    base = inputs(torch, steps, parents, heads=hv, dim=dim, device=device, key_heads=hk)
                    if batch > 1:
                        base = batched(torch, base, batch, parents)
                    row = {"value_heads": hv, "key_heads": hk, "batch": batch, "tokens": steps, "kind": kind}
                    want = None
                    for label, mod in mods.items():
                        if label == "paths" and parents is None:
                            continue
                        o, cache = call_and_time(torch, mod, base, row, label, device, repeats, iters)
                        if want is None:
                            want = (o, cache)
                        else:
                            row[f"{label}_max_diff"] = float(max((o - want[0]).abs().max(), (cache - want[1]).abs().max()))
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    result = {"device": torch.cuda.get_device_name() if device == "cuda" else device, "torch": torch.__version__,
              "variants": list(mods), "rows": rows}  # fmt: skip
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w") as fh:
        json.dump(result, fh, indent=1)
    return 0


def call_and_time(torch, mod, base, row, label, device, repeats, iters):
    """One call of the module's launcher on a copy of `base` -> (output, cached states); on the GPU also its
    time per launch inside a CUDA graph into row[label_us] (median) and row[label_us_range]."""
    args = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in base.items()}
    o = mod.fused_sigmoid_gating_delta_rule_update(**args)
    if device == "cuda":
        torch.cuda.synchronize()
        times = graph_times(torch, mod.fused_sigmoid_gating_delta_rule_update, args, repeats, iters)
        row[f"{label}_us"] = round(statistics.median(times), 2)
        row[f"{label}_us_range"] = [round(min(times), 2), round(max(times), 2)]
    return o.clone(), args["intermediate_states_buffer"].clone()


def graph_times(torch, fn, args, repeats, iters, per_graph=20):
    """us per launch of fn(**args) on the GPU alone: `per_graph` launches captured in one CUDA graph (as a
    server replays its verify), the graph replayed iters / per_graph times, `repeats` such timings. An eager
    loop measures the Python launcher instead (~50-100 us a call, more than the kernel)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn(**args)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(per_graph):
            fn(**args)
    replays = max(1, iters // per_graph)
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / (replays * per_graph))
    return times


def batched(torch, one, batch, parents):
    """`batch` requests of the same tokens (the verify's layout: tokens of request i at i x steps...)."""
    out = dict(one)
    for key in ("a",):
        out[key] = one[key].repeat(batch, 1)
    for key in ("q", "k", "v", "b"):
        out[key] = one[key].repeat(batch, *([1] * (one[key].dim() - 1)))
    out["initial_state_source"] = one["initial_state_source"].repeat(batch, 1, 1, 1)
    out["initial_state_indices"] = torch.arange(batch, dtype=torch.int32, device=one["q"].device)
    out["intermediate_states_buffer"] = one["intermediate_states_buffer"].repeat(batch, 1, 1, 1, 1)
    out["intermediate_state_indices"] = torch.arange(batch, dtype=torch.int32, device=one["q"].device)
    if parents is not None:
        out["retrieve_parent_token"] = one["retrieve_parent_token"].repeat(batch, 1)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--out", default=".gpu/gdn")
    r = sub.add_parser("run")
    r.add_argument("--src", default=".gpu/gdn")
    r.add_argument("--out", required=True)
    r.add_argument("--repeats", type=int, default=5)
    r.add_argument("--iters", type=int, default=200)
    r.add_argument("--device", default="cuda")
    r.add_argument("--heads", type=int, default=16)
    r.add_argument("--dim", type=int, default=128)
    w = sub.add_parser("sweep", help="the wheel's kernel by value-block size (BV)")
    w.add_argument("--src", default=".gpu/gdn")
    w.add_argument("--out", required=True)
    w.add_argument("--caps", default="32,16,8,4")
    w.add_argument("--repeats", type=int, default=5)
    w.add_argument("--iters", type=int, default=200)
    w.add_argument("--device", default="cuda")
    w.add_argument("--dim", type=int, default=128)
    w.add_argument("--shapes", default="16:16,48:16", help="value heads:key heads, comma separated")
    args = ap.parse_args(argv)
    t0 = time.time()
    if args.cmd == "prepare":
        rc = prepare(args.out)
    elif args.cmd == "sweep":
        rc = sweep(args.src, args.out, [int(c) for c in args.caps.split(",")], args.repeats, args.iters, args.device,
                   shapes=[tuple(int(x) for x in sh.split(":")) for sh in args.shapes.split(",")], dim=args.dim)
    else:
        rc = run(args.src, args.out, args.repeats, args.iters, args.device, args.heads, args.dim)
    print(f"done in {time.time() - t0:.1f} s")
    return rc or 0


if __name__ == "__main__":
    sys.exit(main())
