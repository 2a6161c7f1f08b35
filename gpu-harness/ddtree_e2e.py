"""DDTree speed on the GPU machine (gpu-harness/ddtree_e2e.sh): DDTREE vs DFLASH, each side in one run.

  prepare: copy the site's sglang, apply files/patches/sglang/<version>/series with module_utils/dflash_tree/,
           write the model folders (gpu-harness/make_models.py) and, for the lossless check
           (gpu-harness/ddtree_lossless.sh), random weights (gpu-harness/make_weights.py).
  run:     the speed bench, on config-only models in bfloat16 (--load-format dummy: the numbers are
           step costs, not answers; acceptance is set by the test-only oracle):
           dense (Qwen3-0.6B shape) and hybrid (Qwen3.5 class, 24 layers: Gated DeltaNet + full
           attention every 4th, --mamba-scheduler-strategy extra_buffer), per model the servers
             dflash  DFLASH block 16        t15  DDTREE budget 15 top-k 8       t31  DDTREE budget 31 on a
                                                                                     32-block draft
           all with CUDA graphs, --attention-backend triton, started staggered on the one GPU. The
           oracle's reference ids are DFLASH's own with the oracle off (losslessness is
           gpu-harness/ddtree_lossless.sh's business; here "ids identical" guards the measurement).
           Phases: (1) verify-step time at 16 tokens, no acceptance: target forward of the tree vs the
           linear block, and each phase of the step (SGLANG_DFLASH_STEP_TIMING), then the same phases
           at matched acceptance (what grows with the tokens committed a step); (2) tok/s at matched
           acceptance (oracle ranks all 0: every config accepts the same drafts per step), DFLASH vs
           DDTREE b15 and b31, REPEATS rounds, each interleaving the servers prompt by prompt (their order
           rotated every round), so the spread is visible; (3) the right token
           on a non-first branch (ranks [0, 1, 0, ...]): DFLASH vs b15 and b31. Greedy ids are compared
           with the reference in every measurement. summary.json / summary.md are written after each
           phase, so a cut-short run still reports.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_memory
from ddtree_servers import (
    HTTP_ERRORS,
    Server,
    passed_env,
    read_text,
    size_for_gpu,
    start_staggered,
    stop_all,
    wait_healthy,
    write_json,
    write_oracle,
)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPTS = [
    [151643] + [(i * 7919 + 13) % 150000 for i in range(31)],
    [(i * 104729 + 5) % 150000 for i in range(100)],
    [1, 2, 3, 4, 5, 6, 7, 8] * 4,
]
RANKS_BRANCH = [0, 1, 0, 0, 0, 0, 0, 0]  # depth 2 through the 2nd child: DFLASH 1, DDTREE b15/b31 3/6 drafts per step
RANKS_MATCH = [0, 0, 0, 0, 0, 0]  # every config accepts 6 drafts per step: matched acceptance
REPEATS = int(os.environ.get("DDTREE_REPEATS", "5"))  # 3 rounds showed ratio spreads of 0.18-0.38 (2026-12-03)
# tokens per request in the tok/s rounds (and the oracle's reference): one round of 3 x 256 tokens lasts
# under a second per server at batch 1, and its tok/s varied by up to 30% between rounds (2026-12-03)
NEW_TOKENS = int(os.environ.get("DDTREE_E2E_TOKENS", "256"))
MAX_TOTAL_TOKENS = 40000  # each server's KV cap at 8 running requests (gpu_memory steps it down with them)
# the phases that make one decode step (SGLANG_DFLASH_STEP_TIMING): their sum per step is the step's time
STEP_PHASES = ("prepare_ms", "target_ms", "verify_ms", "draft_append_ms")


# ------------------------------------------------------------------ prepare


def prepare(args):
    import ansible.module_utils  # the toolkit's code by its one name (docs/design.md, "Import path")
    ansible.module_utils.__path__.append(os.path.join(REPO, "module_utils"))
    from ansible.module_utils.dflash_tree import common, diff, series

    tree = os.path.join(args.work, "tree")
    shutil.rmtree(tree, ignore_errors=True)
    os.makedirs(tree)
    shutil.copytree(os.path.join(args.site, "sglang"), os.path.join(tree, "sglang"), symlinks=True)
    series_dir = os.path.join(REPO, args.series)
    patches = series.read_series_dir(series_dir)
    for name in ("0101-ddtree-utils.patch", "0102-ddtree-worker.patch"):  # if the series lacks them yet
        if name not in {p["name"] for p in patches} and os.path.isfile(os.path.join(series_dir, name)):
            with open(os.path.join(series_dir, name), "rb") as fh:
                content = fh.read()
            patches.append({"name": name, "content": content, "sha256": common.sha256_bytes(content)})

    def read_file(rel):
        path = os.path.join(tree, rel)
        return open(path, "rb").read() if os.path.isfile(path) else None

    contents, _pristine, touched = diff.apply_series(read_file, patches)
    for rel, data in contents.items():
        path = os.path.join(tree, rel)
        if data is None:
            os.unlink(path)
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(data)
        shutil.rmtree(os.path.join(os.path.dirname(path), "__pycache__"), ignore_errors=True)
    info = {
        "patches": [{"name": p["name"], "sha256": p["sha256"]} for p in patches],
        "touched": touched,
        "files": {rel: common.sha256_bytes(data) for rel, data in contents.items() if data is not None},
    }
    write_json(os.path.join(args.out, "tree.json"), info)
    print(f"[prepare] applied {len(patches)} patches to {tree}: {sorted(touched)}", flush=True)

    # config-only models for --load-format dummy (gpu-harness/make_models.py). Budget + 1 must not exceed
    # the draft's block (the patched server refuses it otherwise): budget 31 needs a draft trained with a
    # 32-token block; config-only, so `draft32` has the same shapes and layer ids with block_size 32.
    import make_models  # beside this file (on sys.path above)

    families = tuple(f for f in args.families.split(",") if f)
    paths = make_models.write_configs(os.path.join(args.work, "models"), draft_blocks=(16, 32), families=families)
    print(f"[prepare] model folders: {sorted(paths)}", flush=True)
    if args.weights:
        # real random weights for the lossless check (gpu-harness/make_weights.py), checked against
        # transformers' own parameter list first
        import make_weights

        info["weights"] = {}
        for name in args.weights.split(","):
            check = make_weights.check_against_transformers(paths[name])
            if check and (check["missing"] or check["extra"] or check["shape_mismatch"]):
                raise SystemExit(f"[prepare] {name}: weight table differs from transformers: {check}")
            info["weights"][name] = {"check": check, **make_weights.write_weights(paths[name], base_seed=0)}
            print(f"[prepare] weights: {info['weights'][name]}", flush=True)
        write_json(os.path.join(args.out, "tree.json"), info)


# ------------------------------------------------------------------ run (speed)


def load_ddtree_utils(tree):
    import importlib.util

    path = os.path.join(tree, "sglang", "srt", "speculative", "ddtree_utils.py")
    spec = importlib.util.spec_from_file_location("ddtree_utils_e2e", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def linear_expected(ranks):
    """Accepted drafts per step of a linear (DFlash) draft under the oracle: leading rank-0 depths."""
    n = 0
    for r in ranks:
        if r != 0:
            break
        n += 1
    return n


# DDTREE_E2E_OVERLAP=both: each DDTREE / DFLASH server twice, with sglang's overlap scheduler (its default from
# 0.5.17, where DDTREE and DFLASH run on the spec-v2 worker) and without it (--disable-overlap-schedule, the same
# worker run synchronously: "-sync"); each DDTREE server is then compared with the DFLASH server of its own mode.
OVERLAP_BOTH = os.environ.get("DDTREE_E2E_OVERLAP") == "both"
# DDTREE_E2E_B31=0: no budget-31 server (its 32-block draft); DDTREE_E2E_PHASES: which of steps (the verify-step
# phases), matched (tok/s at matched acceptance) and branch (a non-first branch) run, in that order
B31 = os.environ.get("DDTREE_E2E_B31", "1") != "0"
PHASES = tuple(os.environ.get("DDTREE_E2E_PHASES", "steps,matched,branch").split(","))


def bench_servers(model, port, work, out, walk_ab=False, dflash32=False, overlap_both=None, b31=None):
    """t15, dflash, t31 (and with walk_ab a fourth, t15w: t15 with the walk's CUDA graph, patch 0105; with
    dflash32 one more, dflash32: DFLASH on t31's 32-block draft, which verifies 32 tokens a step as t31
    does: the control that tells the verify width's cost from the tree's; with overlap_both each of them again
    with --disable-overlap-schedule, named <name>-sync; b31 False leaves t31 out).
    DDTREE_WALK_GRAPH=1 in this script's environment turns the walk graph on for every DDTREE server."""
    overlap_both = OVERLAP_BOTH if overlap_both is None else overlap_both
    b31 = B31 if b31 is None else b31
    models = os.path.join(work, "models")
    target, draft = ("target", "draft") if model == "dense" else ("hybrid", "hybrid-draft")
    # --mem-fraction-static and the request/KV knobs: sized for the GPU at run time (size_for_gpu, gpu_memory)
    base = ["--model-path", os.path.join(models, target), "--load-format", "dummy", "--skip-tokenizer-init",
            "--attention-backend", "triton", "--context-length", "4096",
            "--max-total-tokens", str(MAX_TOTAL_TOKENS), "--max-running-requests", "8", "--cuda-graph-max-bs", "4",
            "--log-level", "info", "--disable-piecewise-cuda-graph"]  # fmt: skip
    spec = ["--mamba-scheduler-strategy", "extra_buffer"] if model == "hybrid" else []
    oracle = os.path.join(work, f"oracle-{model}.json")

    # DDTREE_WALK_GRAPH (0 or 1) for every DDTREE server; unset, their default (on since patch 0106). The
    # walk A/B (walk_ab: DDTREE_PROFILE_WALK_AB=1 in the profile) runs t15 without the walk graph, t15w with it.
    walk_all = os.environ.get("DDTREE_WALK_GRAPH")

    def env(name, walk=None):
        e = {"SGLANG_DDTREE_ORACLE": oracle, "SGLANG_DFLASH_STEP_TIMING": os.path.join(work, f"timing-{name}.jsonl")}
        e.update(passed_env(skip=("DDTREE_WALK_GRAPH",)))  # build kernel, GDN block and tree paths: every server
        return dict(e, SGLANG_DDTREE_WALK_GRAPH=walk) if walk else e

    d16 = ["--speculative-draft-model-path", os.path.join(models, draft)]
    d32 = ["--speculative-draft-model-path", os.path.join(models, draft + "32")]
    tree = ["--speculative-algorithm", "DDTREE", "--speculative-ddtree-topk", "8"]
    servers = [
        Server(f"{model}-t15", port + 20, [*base, *spec, *d16, *tree, "--speculative-ddtree-budget", "15"], out, work,
               env(f"{model}-t15", "0" if walk_ab else walk_all), budget=15, family=model),
        Server(f"{model}-dflash", port + 40, [*base, *spec, *d16, "--speculative-algorithm", "DFLASH"], out, work,
               env(f"{model}-dflash"), family=model),
        *([Server(f"{model}-t31", port + 60, [*base, *spec, *d32, *tree, "--speculative-ddtree-budget", "31"], out,
                  work, env(f"{model}-t31", walk_all), budget=31, block=32, family=model)] if b31 else []),
        *([Server(f"{model}-t15w", port + 80, [*base, *spec, *d16, *tree, "--speculative-ddtree-budget", "15"], out,
                  work, env(f"{model}-t15w", walk="1"), budget=15, family=model)] if walk_ab else []),
        *([Server(f"{model}-dflash32", port + 100, [*base, *spec, *d32, "--speculative-algorithm", "DFLASH"], out,
                  work, env(f"{model}-dflash32"), block=32, family=model)] if dflash32 else []),
    ]  # fmt: skip
    for s in servers:
        s.baseline = f"{model}-dflash32" if s.name.endswith("-dflash32") else f"{model}-dflash"
    if overlap_both:  # the same servers without the overlap scheduler, 10 ports above each
        sync = []
        for s in servers:
            twin = Server(f"{s.name}-sync", s.port + 10, [*s.cmd[5:], "--disable-overlap-schedule"], out, work,
                          env(f"{s.name}-sync", s.env.get("SGLANG_DDTREE_WALK_GRAPH")), budget=s.budget, block=s.block,
                          family=model)  # fmt: skip
            twin.baseline = s.baseline + "-sync"
            sync.append(twin)
        servers += sync
    return servers


def step_timing(srv, since_line):
    try:
        lines = read_text(srv.env["SGLANG_DFLASH_STEP_TIMING"]).splitlines()[since_line:]
    except OSError:
        return {}
    recs = [json.loads(x) for x in lines if x.strip()]
    if not recs:
        return {}
    keys = [k for k in recs[0] if k.endswith("_ms")]
    med = {k: round(statistics.median(v), 4) for k in keys
           if (v := [r[k] for r in recs if r.get(k) is not None])}  # fmt: skip
    med.update(steps=len(recs), width=recs[0]["width"], cuda_graph=all(r["cuda_graph"] for r in recs))
    totals = [sum(r[k] for k in STEP_PHASES) for r in recs if all(r.get(k) is not None for k in STEP_PHASES)]
    if totals:
        med["step_ms"] = round(statistics.median(totals), 4)  # the median of whole steps (prepare .. draft append)
    return med


def step_speed_vs_dflash(timing, baselines):
    """At matched acceptance every server commits the same tokens a step, so DFLASH's step time over a
    server's is that server's tok/s over DFLASH's without the host and HTTP time around the steps:
    the low-noise estimate beside the tok/s rounds (medians of a few dozen steps, not of 3 requests).
    ``baselines``: {server name: the DFLASH server it is compared with} (a DFLASH name alone: every server)."""
    if isinstance(baselines, str):
        baselines = {name: baselines for name in timing}
    out = {}
    for name, r in timing.items():
        base = baselines.get(name)
        d = (timing.get(base) or {}).get("step_ms") if base else None
        if d and name != base and isinstance(r, dict) and r.get("step_ms"):
            out[name] = round(d / r["step_ms"], 3)
    return out


def timing_lines(srv):
    try:
        return len(read_text(srv.env["SGLANG_DFLASH_STEP_TIMING"]).splitlines())
    except OSError:
        return 0


START_NEEDS_S = 150  # a server's start on a fresh H200 machine, graphs captured (records: 40-150 s)


def interleaved_rounds(servers, n_prompts, rounds, one, ok):
    """rows[server name]: one entry per round, {tok_s, accept_length, identical} over the round's prompts, or
    {error}. A round runs prompt 0 on every server, then prompt 1, and so on, the servers in an order rotated by
    one each round: the two sides of a ratio are measured seconds apart, not a whole server's turn apart (the
    H200's rounds swing by up to 30% between slow and fast spells, 2026-12-03-ddtree-paths). one(srv, k) ->
    {tokens, secs, accept_length, identical} measures prompt k; ok(srv) says whether to go on with a server (up,
    time left). A server's round that did not finish all prompts is left out."""
    rows = {}
    for r in range(rounds):
        live = [s for s in servers if ok(s)]
        if not live:
            break
        live = live[r % len(live) :] + live[: r % len(live)]
        parts, errors = {s.name: [] for s in live}, {}
        for k in range(n_prompts):
            for srv in live:
                if srv.name in errors or not ok(srv):
                    continue
                try:
                    parts[srv.name].append(one(srv, k))
                except HTTP_ERRORS as e:
                    errors[srv.name] = f"{type(e).__name__}: {e}"
        for srv in sorted(live, key=servers.index):
            got = parts[srv.name]
            if srv.name in errors:
                rows.setdefault(srv.name, []).append({"round": r, "error": errors[srv.name]})
            elif len(got) == n_prompts:
                secs = sum(p["secs"] for p in got)
                acc = [p["accept_length"] for p in got if p["accept_length"]]
                rows.setdefault(srv.name, []).append(
                    {"round": r, "tok_s": round(sum(p["tokens"] for p in got) / secs, 1) if secs else None,
                     "accept_length": round(statistics.mean(acc), 3) if acc else None,
                     "identical": all(p["identical"] for p in got)})  # fmt: skip
    return rows


def run(args):
    t_begin = time.time()
    deadline = t_begin + args.deadline_s
    out, work = args.out, args.work
    du = load_ddtree_utils(os.path.join(work, "tree"))  # the patched tree's own module (torch only)
    models = [m for m in args.models.split(",") if m]
    # ports 20 apart: sglang opens more sockets above --port (H200 run 2: EADDRINUSE at a neighbour's port)
    # DDTREE_E2E_DFLASH32=1: the width control (bench_servers' dflash32) in the phases and the rounds
    dflash32 = os.environ.get("DDTREE_E2E_DFLASH32") == "1"
    per = {m: bench_servers(m, 35000 + 200 * i, work, out, dflash32=dflash32) for i, m in enumerate(models)}
    servers = [s for m in models for s in per[m]]
    order = [per[m][k] for k in range(len(per[models[0]])) for m in models]
    for m in models:
        write_oracle(os.path.join(work, f"oracle-{m}.json"), [], [])
    summary = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t_begin)), "repeats": REPEATS, "new_tokens": NEW_TOKENS,
               "servers": {}, "models": {m: {} for m in models}}  # fmt: skip

    def save():
        for s in servers:
            summary["servers"][s.name] = {"cmd": s.cmd[3:], "healthy_after_s": s.healthy_after, "error": s.error}
        summary["elapsed_s"] = round(time.time() - t_begin, 1)
        write_json(os.path.join(out, "summary.json"), summary)
        write_markdown(summary, os.path.join(out, "summary.md"))

    def up(s):
        return s.healthy_after is not None and s.alive()

    # every server's memory from the GPU's now (gpu_memory): a layout that cannot fit stops here, nothing started
    try:
        summary["gpu_memory"] = vars(size_for_gpu(servers, MAX_TOTAL_TOKENS))
    except gpu_memory.MemoryPlanError as exc:
        summary["error"] = str(exc)
        save()
        raise SystemExit(f"[run] {exc}") from None

    # servers must be healthy by deadline - 120; on a fresh machine the first take 90-150 s (record
    # 2026-12-03-ddtree-width, call 8: a 285 s budget left 85 s and measured nothing)
    summary["start_window_s"] = window = round(deadline - 120 - time.time(), 1)
    if window < START_NEEDS_S:
        print(f"[run] WARNING: {window} s for the servers to start; a fresh machine's first ones need up to "
              f"{START_NEEDS_S} s (raise BUDGET_S)", flush=True)  # fmt: skip
    try:
        start_staggered(order, deadline - 150, per_server_s=40)
        wait_healthy(servers, deadline - 120)
        save()
        go = os.environ.get("DDTREE_BENCH_GO")  # gpu-harness/ddtree_all.sh: measure once the GPU is ours alone
        if go:
            t = time.time()
            while not os.path.exists(go) and time.time() < deadline - 90:
                time.sleep(1)
            summary["waited_for_go_s"] = round(time.time() - t, 1)
            summary["go_seen"] = os.path.exists(go)
        for m in models:
            group = per[m]
            by_name = {s.name: s for s in group}
            dflash, t15 = by_name[f"{m}-dflash"], by_name[f"{m}-t15"]
            # DFLASH first, then the rest in their order (the -sync twins after their originals)
            others = [s for s in group if s is not dflash]
            baselines = {s.name: s.baseline for s in group if s.baseline and s.baseline in by_name}
            if not up(dflash):
                summary["models"][m]["error"] = f"DFLASH server not up (start window {window} s)"
                continue
            oracle = os.path.join(work, f"oracle-{m}.json")
            write_oracle(oracle, [], [])
            ref_ids = {k: dflash.generate(PROMPTS[k], NEW_TOKENS)[0]["output_ids"] for k in range(len(PROMPTS))}
            reference = [{"input_ids": PROMPTS[k], "output_ids": ref_ids[k]} for k in ref_ids]
            res = summary["models"][m]

            # (1) verify-step phases at 16 tokens: no acceptance, then (1b) at matched acceptance (oracle
            # ranks all 0: every config commits 7 tokens a step, so the phases that grow with acceptance
            # -- draft KV append, commit -- show; b31's 32-token block and verify too)
            def time_steps(srv, ranks, oracle=oracle, reference=reference, dflash=dflash):
                write_oracle(oracle, reference, ranks, None if srv.budget is None or not ranks else 8)
                srv.generate(PROMPTS[2], 16)
                mark = timing_lines(srv)
                flag = srv.env["SGLANG_DFLASH_STEP_TIMING"] + ".on"
                open(flag, "w").close()
                try:
                    for k in (0, 1):
                        srv.generate(PROMPTS[k], 128)
                finally:
                    os.unlink(flag)
                return step_timing(srv, mark)

            for key, ranks in (("verify_step_timing", []), ("verify_step_timing_matched", RANKS_MATCH)):
                if "steps" not in PHASES:
                    break
                timing = {}
                for srv in (dflash, *others):
                    if up(srv) and time.time() <= deadline - 60:
                        timing[srv.name] = time_steps(srv, ranks)
                d, t = timing.get(dflash.name) or {}, timing.get(t15.name) or {}
                if not ranks and d.get("target_ms") and t.get("target_ms"):
                    timing["tree_over_linear_target_ms_at_16"] = round(t["target_ms"] / d["target_ms"], 3)
                if ranks:
                    timing["step_speed_vs_dflash"] = step_speed_vs_dflash(timing, baselines)
                res[key] = timing
                save()

            # (2) matched acceptance, (3) non-first branch: rounds interleaved prompt by prompt, both sides in
            # one run
            def measure_one(srv, k, ranks, oracle=oracle, reference=reference, ref_ids=ref_ids):
                write_oracle(oracle, reference, ranks, None if srv.budget is None else 8)
                srv.generate(PROMPTS[2], 16)  # the servers re-read the oracle file once it changed: not timed
                o, dt = srv.generate(PROMPTS[k], NEW_TOKENS)
                return {"tokens": len(o.get("output_ids") or []), "secs": dt,
                        "accept_length": (o.get("meta_info") or {}).get("spec_accept_length"),
                        "identical": o.get("output_ids") == ref_ids[k]}  # fmt: skip

            for label, ranks, rounds in (("matched", RANKS_MATCH, REPEATS), ("branch", RANKS_BRANCH, max(1, REPEATS - 1))):
                if label not in PHASES:
                    continue
                rows = interleaved_rounds([dflash, *others], len(PROMPTS), rounds,
                                          lambda srv, k, ranks=ranks: measure_one(srv, k, ranks),
                                          lambda srv: up(srv) and time.time() <= deadline - 25)  # fmt: skip
                table = {}
                for name, runs in rows.items():
                    srv = next(s for s in per[m] if s.name == name)
                    vals = [x["tok_s"] for x in runs if x.get("tok_s")]
                    table[name] = {"budget": srv.budget, "runs": runs, "tok_s_median": round(statistics.median(vals), 1) if vals else None,
                                   "tok_s_min": min(vals) if vals else None, "tok_s_max": max(vals) if vals else None,
                                   "identical": all(x.get("identical") for x in runs),
                                   "expected_accept_drafts": du.expected_accept_len(ranks, du.DEFAULT_ORACLE_PROFILE,
                                                                                    srv.budget, 8, srv.depth_count)
                                   if srv.budget else linear_expected(ranks)}  # fmt: skip
                # per round (both sides interleaved prompt by prompt): the ratio to the DFLASH server of the same
                # mode (overlap scheduler on or off: baselines), and its spread
                for name, row in table.items():
                    base = baselines.get(name)
                    if not base or name == base:
                        continue
                    dv = {x["round"]: x.get("tok_s") for x in rows.get(base, [])}
                    ratios = [round(t["tok_s"] / dv[t["round"]], 3) for t in rows[name]
                              if t.get("tok_s") and dv.get(t["round"])]  # fmt: skip
                    if ratios:
                        row["over"] = base
                        row["over_dflash_per_round"] = ratios
                        row["over_dflash"] = round(statistics.median(ratios), 3)
                        row["over_dflash_range"] = [min(ratios), max(ratios)]
                res[label] = {"ranks": ranks, "table": table}
                save()
            write_oracle(oracle, [], [])
    finally:
        stop_all(servers)
        save()
        print(f"[run] done in {round(time.time() - t_begin, 1)} s -> {out}/summary.md", flush=True)


def write_markdown(summary, path):
    lines = [f"# DDTree speed on the GPU machine ({summary['started']})", "",
             f"elapsed {summary.get('elapsed_s')} s, {summary['repeats']} rounds", "", "## Servers", "",
             "| server | healthy after (s) | error | args |", "|---|---|---|---|"]  # fmt: skip
    for name, s in summary["servers"].items():
        args = " ".join(a for a in s["cmd"] if not a.startswith("/"))
        lines.append(f"| {name} | {s['healthy_after_s']} | {s['error'] or ''} | `{args}` |")
    for m, res in summary["models"].items():
        lines += ["", f"## {m}"]
        if res.get("error"):
            lines.append(res["error"])
        for key, when in (("verify_step_timing", "no acceptance"),
                          ("verify_step_timing_matched", "matched acceptance, oracle ranks all 0")):  # fmt: skip
            t = res.get(key)
            if not t:
                continue
            phases = sorted({k for r in t.values() if isinstance(r, dict) for k in r if k.endswith("_ms")})
            lines += ["", f"Verify step, median ms per decode step (batch 1, {when}):", "",
                      "| server | width | cuda graph | steps | " + " | ".join(phases) + " |",
                      "|---|---|---|---|" + "---|" * len(phases)]  # fmt: skip
            for name, r in t.items():
                if isinstance(r, dict) and "width" in r:  # a server's row (not step_speed_vs_dflash)
                    lines.append(f"| {name} | {r['width']} | {r['cuda_graph']} | {r['steps']} | "
                                 + " | ".join(str(r.get(k, "")) for k in phases) + " |")  # fmt: skip
            if "tree_over_linear_target_ms_at_16" in t:
                lines.append(f"\ntree/linear target forward at 16 tokens: {t['tree_over_linear_target_ms_at_16']} (goal <= 1.10)")
            if t.get("step_speed_vs_dflash"):
                lines.append("\nstep speed vs DFLASH (DFLASH's median step ms over the server's, same tokens a step): "
                             + ", ".join(f"{k} {v}" for k, v in t["step_speed_vs_dflash"].items()))  # fmt: skip
        for label, title in (("matched", "matched acceptance (oracle ranks all 0)"),
                             ("branch", "the right token on a non-first branch (oracle ranks [0, 1, 0, ...])")):  # fmt: skip
            ph = res.get(label)
            if not ph:
                continue
            lines += ["", f"tok/s, {title}; batch 1, 3 prompts x {summary.get('new_tokens', 256)} tokens per round:", "",
                      "| server | budget | tok/s median [min, max] | x DFLASH [range] (of) | accept length | expected drafts | ids identical |",
                      "|---|---|---|---|---|---|---|"]  # fmt: skip
            for name, r in ph["table"].items():
                acc = [x.get("accept_length") for x in r["runs"] if x.get("accept_length")]
                lines.append(f"| {name} | {r['budget']} | {r['tok_s_median']} [{r['tok_s_min']}, {r['tok_s_max']}] | "
                             f"{r.get('over_dflash', '')} {r.get('over_dflash_range', '')} {('(' + r['over'] + ')') if r.get('over') else ''} | "
                             f"{acc[0] if acc else ''} | {r['expected_accept_drafts']} | {r['identical']} |")  # fmt: skip
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--site", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--series", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--families", default="dense,hybrid", help="make_models families to write")
    p.add_argument("--weights", default="", help="folders that get random weights, e.g. dense-rw,hybrid-rw")
    r = sub.add_parser("run")
    r.add_argument("--work", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--deadline-s", type=float, default=520)
    r.add_argument("--models", default="dense,hybrid")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    prepare(args) if args.cmd == "prepare" else run(args)


if __name__ == "__main__":
    main()
