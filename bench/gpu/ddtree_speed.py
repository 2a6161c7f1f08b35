"""DDTREE vs DFLASH step cost on the GPU machine, every side in one run, repeated (bench/gpu/ddtree_speed.sh).

Run by bench/gpu/ddtree_e2e.sh (DDTREE_DRIVER=bench/gpu/ddtree_speed.py), which prepares the patched
tree and the config-only dummy models with ddtree_e2e.py's `prepare`. Servers (triton, dummy weights):
  ref       no speculation (the reference ids the oracle steers towards)
  dflash    DFLASH, block 16                 dflash32  DFLASH on the block-32 draft (linear at 32)
  t15       DDTREE budget 15 top-k 8, the device tree build (CUDA graphs)
  t15cpu    the same with SGLANG_DDTREE_TREE_BUILDER=cpu: the host reference build (before)
  t31       DDTREE budget 31 top-k 8 on the block-32 draft
Rounds (ROUNDS, default 5; the order of servers turns every round so drift does not favour one):
  matched   oracle ranks [0]*6: every server accepts 6 drafts + bonus per step; tok/s over 3 prompts x
            256 tokens at batch 1 and 4 prompts x 256 at batch 4, timing off; ids == no speculation
  phases    SGLANG_DFLASH_STEP_TIMING on: per decode step draft / tree (build, mask, slots) / target
            verify forward / accept+commit / draft KV append, median ms (1 prompt x 128, batch 1)
  branch    oracle ranks [0,1,0,...] (the right token is the 2nd choice at depth 2): dflash vs t15
First, before any server starts: the device build on the GPU against the host reference (random and
tied distributions, eager and CUDA-graph) and its cost alone (ms per build, eager vs graph replay).
Summary ($OUT/ddtree-speed/summary.{md,json}): per round and median [min, max] over rounds of tok/s,
DDTREE/DFLASH (paired within a round), tree/linear target forward at 16 (t15/dflash) and 32
(t31/dflash32) tokens, the phase table, and the goals of issue #13 beside them.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ddtree_e2e as e2e  # Server, oracle file, prompts, prepare

RANKS_MATCH = e2e.RANKS_MATCH
RANKS_BRANCH = e2e.RANKS_BRANCH
PHASES = ("draft_ms", "tree_ms", "target_ms", "verify_ms", "draft_append_ms")
GOALS = {"t15": 1.0, "t31": 1.0, "target16": 1.10, "branch15": 1.7}


def servers(work, out):
    S = e2e.Server
    dd = ["--speculative-algorithm", "DDTREE", "--speculative-ddtree-topk", "8"]
    return [
        S("ref", 32000, ["--disable-cuda-graph"], work, out, spec=False),
        S("dflash", 32010, ["--speculative-algorithm", "DFLASH"], work, out),
        S("t15", 32020, [*dd, "--speculative-ddtree-budget", "15"], work, out, budget=15),
        S("t15cpu", 32030, [*dd, "--speculative-ddtree-budget", "15"], work, out, budget=15),
        S("t31", 32040, [*dd, "--speculative-ddtree-budget", "31"], work, out, budget=31, draft="draft32", block=32),
        S("dflash32", 32050, ["--speculative-algorithm", "DFLASH"], work, out, draft="draft32", block=32),
    ]  # fmt: skip


EXTRA_ENV = {"t15cpu": {"SGLANG_DDTREE_TREE_BUILDER": "cpu"}}


def start(srv, oracle_path):
    saved = {k: os.environ.get(k) for k in EXTRA_ENV.get(srv.name, {})}
    os.environ.update(EXTRA_ENV.get(srv.name, {}))
    try:
        srv.start(oracle_path)
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)


def spread(values):
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    return {"median": round(statistics.median(vals), 4), "min": round(min(vals), 4),
            "max": round(max(vals), 4), "n": len(vals)}  # fmt: skip


def tok_s(srv, ref, prompts, batch):
    """tok/s of one batch-1 request per prompt (batch=False) or one request with every prompt."""
    tokens, secs, acc, bad = 0, 0.0, [], 0
    cases = [("bs4", prompts)] if batch else [("bs1", [k]) for k in prompts]
    for kind, idx in cases:
        recs = e2e.run_case(srv, kind, idx, 256)
        tokens += sum(len(r["output_ids"] or []) for r in recs)
        secs += recs[0]["latency_s"]
        acc += [r["accept_length"] for r in recs if r["accept_length"] is not None]
        bad += len(e2e.compare(recs, ref))
    return {"tok_s": round(tokens / secs, 1) if secs else None,
            "accept_length": round(statistics.mean(acc), 3) if acc else None, "mismatches": bad}  # fmt: skip


def phases(srv):
    mark = e2e.timing_lines(srv)
    open(srv.timing_path + ".on", "w").close()
    try:
        srv.generate(e2e.PROMPTS[1], 128)
    finally:
        os.unlink(srv.timing_path + ".on")
    lines = e2e.read_text(srv.timing_path).splitlines()[mark:]
    recs = [json.loads(x) for x in lines if x.strip()]
    out = {"steps": len(recs)}
    for key in PHASES:
        vals = [r.get(key) for r in recs if r.get(key) is not None]
        out[key] = round(statistics.median(vals), 4) if vals else None
    return out


def _mask_walk_commit(dd, tree, prefix, commit):
    dd.tree_mask_flat(tree.ancestors, prefix, [700] * len(commit))
    path = dd.accept_walk(tree, tree.tokens)[0]
    return dd.commit_indexes(path, commit, [1] * len(commit))


def _median_ms(fn, dev, n=50):
    import torch

    for _ in range(3):
        fn()
    ms = []
    for _ in range(n):
        if dev == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            ms.append(a.elapsed_time(b))
        else:
            t = time.perf_counter()
            fn()
            ms.append((time.perf_counter() - t) * 1e3)
    return round(statistics.median(ms), 4)


def device_check(tree_dir):
    """The device build on this machine's GPU against the host reference, and its cost alone.

    Random and tied draft distributions (the oracle's profile, flat rows), eager and through
    TreeBuilder's CUDA graph; then ms per build (eager vs graph replay, inputs copied in) and per
    mask + walk + commit, median of 50, CUDA events. Seconds of device time."""
    import importlib.util

    import torch

    mods = {}
    for name in ("ddtree_utils", "ddtree_device"):
        path = os.path.join(tree_dir, "sglang", "srt", "speculative", f"{name}.py")
        spec = importlib.util.spec_from_file_location(f"{name}_speed", path)
        mods[name] = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mods[name]
        spec.loader.exec_module(mods[name])
    du, dd = mods["ddtree_utils"], mods["ddtree_device"]
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator().manual_seed(0)
    bad, cases = [], 0
    builder = dd.TreeBuilder(15)
    for trial in range(60):
        bs, depth, k = 1 + trial % 4, 15, 8
        if trial % 3 == 0:
            lp = torch.tensor(du.DEFAULT_ORACLE_PROFILE[:k]).expand(bs, depth, k).clone()
        elif trial % 3 == 1:
            lp = torch.full((bs, depth, k), -2.0794)
        else:
            lp = torch.log_softmax(torch.randn(bs, depth, 500, generator=g) * 2, -1).topk(k, -1).values
        tk = torch.stack([torch.randperm(1000, generator=g)[:k] for _ in range(bs * depth)]).view(bs, depth, k)
        ref = du.build_tree_batch(list(range(bs)), lp, tk, 15, k)
        args = (lp.to(dev), tk.to(dev), torch.arange(bs, device=dev))
        for label, tree in (("eager", dd.build_tree_device(*args, 15, k)),
                            ("graph", builder.build(*args, torch.zeros(bs, dtype=torch.int64, device=dev), k))):
            cases += 1
            if not all(torch.equal(getattr(tree, f).cpu(), getattr(ref, f)) for f in ("tokens", "parents", "depths", "ancestors")):
                bad.append({"trial": trial, "path": label})
    timing = {}
    for bs, budget in ((1, 15), (4, 15), (1, 31), (4, 31)):
        lp, tk = torch.log_softmax(torch.randn(bs, budget, 500, generator=g), -1).topk(8, -1)
        lp, tk, roots, pre = lp.to(dev), tk.to(dev), torch.arange(bs, device=dev), torch.full((bs,), 700, device=dev)
        tree = dd.build_tree_device(lp, tk, roots, budget, 8, pre)
        ones = torch.ones(bs, dtype=torch.int64, device=dev)
        runs = {
            "eager_build": functools.partial(dd.build_tree_device, lp, tk, roots, budget, 8, pre),
            "graph_build": functools.partial(dd.TreeBuilder(budget).build, lp, tk, roots, pre, 8),
            "mask_walk_commit": functools.partial(_mask_walk_commit, dd, tree, pre, ones),
        }
        for name, fn in runs.items():
            timing[f"bs{bs} b{budget} {name}"] = _median_ms(fn, dev)
    return {"device": dev, "cases": cases, "mismatches": bad, "ms": timing}


def ratio(a, b):
    return round(a / b, 4) if a and b else None


def run(args):
    t_begin = time.time()
    deadline = t_begin + args.deadline_s
    du = e2e.load_ddtree_utils(os.path.join(args.work, "tree"))
    oracle_path = os.path.join(args.work, "oracle-speed.json")
    e2e.write_oracle(oracle_path, [], [])
    srvs = servers(args.work, args.out)
    only = [n for n in os.environ.get("SPEED_SERVERS", "").split(",") if n]
    if only:
        srvs = [s for s in srvs if s.name in only or s.name == "ref"]
    by = {s.name: s for s in srvs}
    summary = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t_begin)), "rounds": [],
               "servers": {}, "expected_accept_drafts": {}}  # fmt: skip

    def save():
        for s in srvs:
            summary["servers"][s.name] = {"cmd": s.cmd[3:], "healthy_after_s": s.healthy_after, "error": s.error,
                                          "env": EXTRA_ENV.get(s.name, {})}  # fmt: skip
        summary["elapsed_s"] = round(time.time() - t_begin, 1)
        summary["summary"] = summarise(summary["rounds"])
        e2e.write_json(os.path.join(args.out, "summary.json"), summary)
        write_markdown(summary, os.path.join(args.out, "summary.md"))

    try:
        try:  # before any server holds the GPU
            summary["device_check"] = device_check(os.path.join(args.work, "tree"))
        except Exception as err:  # noqa: BLE001 - a result too; the servers still run
            summary["device_check"] = {"error": f"{type(err).__name__}: {err}"}
        save()
        for s in srvs:  # staggered: the next starts once this one has sized its KV pool
            start(s, oracle_path)
            t = time.time()
            while time.time() - t < 75 and s.alive() and not s.log_has("Memory pool end"):
                for o in srvs:
                    o.check_health()
                time.sleep(0.5)
        while time.time() < deadline - 150 and not all(s.check_health() or not s.alive() for s in srvs):
            time.sleep(1)
        for s in srvs:
            if not s.check_health():
                s.error = s.error or "not healthy in time"
        if by["ref"].healthy_after is None:
            save()
            raise SystemExit("reference server did not come up")
        ref, reference = {}, []
        for k in range(len(e2e.PROMPTS)):
            for r in e2e.run_case(by["ref"], "bs1", [k], 256):
                ref[("bs1", k, 256)] = ref[("bs4", k, 256)] = r["output_ids"]
            reference.append({"input_ids": e2e.PROMPTS[k], "output_ids": ref[("bs1", k, 256)]})
        spec = [s for s in srvs if s.spec and s.healthy_after is not None]
        for s in spec:
            summary["expected_accept_drafts"][s.name] = {
                "matched": du.expected_accept_len(RANKS_MATCH, du.DEFAULT_ORACLE_PROFILE, s.budget, s.topk,
                                                  s.depth_count) if s.budget else e2e.linear_expected(RANKS_MATCH),
                "branch": du.expected_accept_len(RANKS_BRANCH, du.DEFAULT_ORACLE_PROFILE, s.budget, s.topk,
                                                 s.depth_count) if s.budget else e2e.linear_expected(RANKS_BRANCH),
            }  # fmt: skip
        for rnd in range(args.rounds):
            if time.time() > deadline - 45:
                break
            order = spec[rnd % len(spec) :] + spec[: rnd % len(spec)] if spec else []
            row = {"round": rnd + 1, "matched": {}, "matched_bs4": {}, "phases": {}, "branch": {}}
            e2e.write_oracle(oracle_path, reference, RANKS_MATCH)
            for s in order:
                if not s.alive() or time.time() > deadline - 25:
                    continue
                try:
                    s.generate(e2e.PROMPTS[2], 16)  # warm-up after the oracle change
                    row["matched"][s.name] = tok_s(s, ref, [0, 1, 2], batch=False)
                    row["matched_bs4"][s.name] = tok_s(s, ref, e2e.BATCH4, batch=True)
                    row["phases"][s.name] = phases(s)
                except (OSError, ValueError) as err:
                    row["matched"][s.name] = {"error": f"{type(err).__name__}: {err}"}
            e2e.write_oracle(oracle_path, reference, RANKS_BRANCH)
            for name in ("dflash", "t15"):
                s = by.get(name)
                if s in spec and s.alive() and time.time() < deadline - 15:
                    try:
                        s.generate(e2e.PROMPTS[2], 16)
                        row["branch"][name] = tok_s(s, ref, [0, 1, 2], batch=False)
                    except (OSError, ValueError) as err:
                        row["branch"][name] = {"error": f"{type(err).__name__}: {err}"}
            summary["rounds"].append(row)
            save()
        e2e.write_oracle(oracle_path, reference, [])
    finally:
        e2e.stop_all(srvs)
        save()
        print(f"[speed] done in {round(time.time() - t_begin, 1)} s -> {args.out}/summary.md", flush=True)


def _get(row, part, name, key="tok_s"):
    return (row.get(part, {}).get(name) or {}).get(key)


def summarise(rounds):
    names = sorted({n for r in rounds for n in r.get("matched", {})})
    out = {"tok_s": {}, "tok_s_bs4": {}, "accept_length": {}, "phases": {}, "ratios": {}}
    for n in names:
        out["tok_s"][n] = spread([_get(r, "matched", n) for r in rounds])
        out["tok_s_bs4"][n] = spread([_get(r, "matched_bs4", n) for r in rounds])
        out["accept_length"][n] = spread([_get(r, "matched", n, "accept_length") for r in rounds])
        out["phases"][n] = {k: spread([_get(r, "phases", n, k) for r in rounds]) for k in PHASES}
    pairs = {
        "t15/dflash tok/s": ("matched", "t15", "dflash", "tok_s"),
        "t31/dflash tok/s": ("matched", "t31", "dflash", "tok_s"),
        "t15cpu/dflash tok/s": ("matched", "t15cpu", "dflash", "tok_s"),
        "t15/t15cpu tok/s": ("matched", "t15", "t15cpu", "tok_s"),
        "t15/dflash tok/s batch 4": ("matched_bs4", "t15", "dflash", "tok_s"),
        "t31/dflash tok/s batch 4": ("matched_bs4", "t31", "dflash", "tok_s"),
        "t15/dflash tok/s non-first branch": ("branch", "t15", "dflash", "tok_s"),
        "tree/linear target forward at 16 (t15/dflash)": ("phases", "t15", "dflash", "target_ms"),
        "tree/linear target forward at 32 (t31/dflash32)": ("phases", "t31", "dflash32", "target_ms"),
        "t15/dflash tree phase ms": ("phases", "t15", "dflash", "tree_ms"),
    }
    for label, (part, a, b, key) in pairs.items():
        vals = [ratio(_get(r, part, a, key), _get(r, part, b, key)) for r in rounds]
        out["ratios"][label] = {"per_round": vals, **(spread(vals) or {})}
    return out


def _fmt(s):
    return "" if not s else f"{s['median']} [{s['min']}, {s['max']}]"


def write_markdown(summary, path):
    sm = summary.get("summary") or {}
    head = f"elapsed {summary.get('elapsed_s')} s, {len(summary['rounds'])} rounds; values: median [min, max]"
    lines = [f"# DDTREE vs DFLASH step cost on the GPU machine ({summary['started']})", "", head, "", "## Servers", "",
             "| server | healthy after (s) | error | env | args |", "|---|---|---|---|---|"]  # fmt: skip
    for name, s in summary["servers"].items():
        args = " ".join(a for a in s["cmd"] if not a.startswith("/"))
        lines.append(f"| {name} | {s['healthy_after_s']} | {s['error'] or ''} | {s['env'] or ''} | `{args}` |")
    chk = summary.get("device_check") or {}
    lines += ["", "## Device tree build on this machine (against the host reference; ms median of 50)", "",
              f"device {chk.get('device')}, {chk.get('cases')} cases, mismatches {chk.get('mismatches')} {chk.get('error', '')}",
              ""]  # fmt: skip
    lines += [f"- {k}: {v} ms" for k, v in (chk.get("ms") or {}).items()]
    lines += ["", "## Ratios (paired within each round)", "", "| ratio | median [min, max] | per round | goal |",
              "|---|---|---|---|"]  # fmt: skip
    goals = {"t15/dflash tok/s": ">= 1.0", "t31/dflash tok/s": ">= 1.0",
             "tree/linear target forward at 16 (t15/dflash)": "<= 1.10",
             "t15/dflash tok/s non-first branch": ">= 1.7"}  # fmt: skip
    for label, r in (sm.get("ratios") or {}).items():
        lines.append(f"| {label} | {_fmt(r if 'median' in r else None)} | {r.get('per_round')} | {goals.get(label, '')} |")
    lines += ["", "## tok/s at matched acceptance (oracle ranks [0]*6)", "",
              "| server | batch 1 (3 x 256) | batch 4 (4 x 256) | accept length | expected accepted drafts |",
              "|---|---|---|---|---|"]  # fmt: skip
    for n, s in (sm.get("tok_s") or {}).items():
        exp = summary["expected_accept_drafts"].get(n, {})
        lines.append(f"| {n} | {_fmt(s)} | {_fmt(sm['tok_s_bs4'].get(n))} | {_fmt(sm['accept_length'].get(n))} | "
                     f"{exp.get('matched', '')} |")  # fmt: skip
    lines += ["", "## Phases per decode step (ms, batch 1; each phase synchronised)", "",
              "| server | draft | tree (build, mask, slots) | target verify | accept + commit | draft KV append |",
              "|---|---|---|---|---|---|"]  # fmt: skip
    for n, ph in (sm.get("phases") or {}).items():
        lines.append(f"| {n} | " + " | ".join(_fmt(ph.get(k)) for k in PHASES) + " |")
    lines += ["", "## Per round", "", "| round | server | tok/s bs1 | tok/s bs4 | accept | mismatches | branch tok/s |",
              "|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in summary["rounds"]:
        for n, m in r["matched"].items():
            lines.append(f"| {r['round']} | {n} | {m.get('tok_s', m.get('error'))} | {_get(r, 'matched_bs4', n)} | "
                         f"{m.get('accept_length')} | {m.get('mismatches')} | {_get(r, 'branch', n) or ''} |")  # fmt: skip
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--work", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--deadline-s", type=float, default=540)
    r.add_argument("--rounds", type=int, default=int(os.environ.get("ROUNDS", "5")))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    run(args)


if __name__ == "__main__":
    main()
