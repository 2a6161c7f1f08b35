"""Driver for bench/gpu/ddtree_e2e.sh (run on the GPU machine; standard library + torch only).

  prepare: copy the bundle's sglang, apply files/patches/sglang/0.5.11/series with
           module_utils/dflash_patch.py, write config-only dummy models (scripts/gpu/make_models.py:
           a Qwen3-0.6B-shaped target and a 5-layer DFlash draft with block_size 16, plus `draft32`:
           the same draft, same layer ids, block_size 32).
  run:     start every server on the one GPU (staggered until each has allocated its KV pool, so the
           free-memory based sizing of the next one is not disturbed), then the phases below, writing
           summary.json / summary.md after each phase so a cut-short run still reports.

Servers (all --attention-backend triton, --load-format dummy, --skip-tokenizer-init):
  ref     no speculation (reference ids)             dflash  DFLASH block 16, CUDA graphs
  t15     DDTREE budget 15 top-k 8, CUDA graphs      t7      DDTREE budget 7, CUDA graphs
  t31     DDTREE budget 31 on draft32 (block 32: budget + 1 must fit the draft's block), CUDA graphs
  t15ng   DDTREE budget 15, --disable-cuda-graph     sl15    DDTREE shadow-linear, no CUDA graphs
Every speculative server runs with SGLANG_DDTREE_ORACLE=<one shared file> (re-read when it changes;
"ranks": [] means no steering) and SGLANG_DFLASH_STEP_TIMING=<its own file> (active only while
<file>.on exists).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROMPTS = [
    [151643] + [(i * 7919 + 13) % 150000 for i in range(31)],
    [(i * 104729 + 5) % 150000 for i in range(100)],
    [1, 2, 3, 4, 5, 6, 7, 8] * 4,
    [(i * 31337 + 7) % 150000 for i in range(57)],
]
BATCH4 = [0, 1, 2, 3]
# Oracle settings (ranks[d-1]: where the true token sits among depth d's top-k; deeper depths are the
# dummy draft's own guesses, which never match). With the default profile (ddtree_utils):
RANKS_BRANCH = [0, 1, 0, 0, 0, 0, 0, 0]  # depth 2 through the 2nd child: DFLASH 1, DDTREE b7/b15/b31 1/3/6
RANKS_MATCH = [0, 0, 0, 0, 0, 0]  # every config accepts 6 drafts per step: matched acceptance


def write_json(path, obj, indent=1):
    with open(path, "w") as fh:
        json.dump(obj, fh, indent=indent)


def read_text(path):
    with open(path, errors="replace") as fh:
        return fh.read()


# ------------------------------------------------------------------ prepare


def prepare(args):
    sys.path.insert(0, os.path.join(REPO, "module_utils"))
    import dflash_patch as dp

    tree = os.path.join(args.work, "tree")
    shutil.rmtree(tree, ignore_errors=True)
    os.makedirs(tree)
    shutil.copytree(os.path.join(args.site, "sglang"), os.path.join(tree, "sglang"), symlinks=True)
    series_dir = os.path.join(REPO, args.series)
    patches = dp.read_series_dir(series_dir)
    for name in ("0101-ddtree-utils.patch", "0102-ddtree-worker.patch"):  # if the series lacks them yet
        if name not in {p["name"] for p in patches}:
            with open(os.path.join(series_dir, name), "rb") as fh:
                content = fh.read()
            patches.append({"name": name, "content": content, "sha256": dp.sha256_bytes(content)})

    def read_file(rel):
        path = os.path.join(tree, rel)
        return open(path, "rb").read() if os.path.isfile(path) else None

    contents, _pristine, touched = dp.apply_series(read_file, patches)
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
        "files": {rel: dp.sha256_bytes(data) for rel, data in contents.items() if data is not None},
    }
    write_json(os.path.join(args.out, "tree.json"), info)
    print(f"[prepare] applied {len(patches)} patches to {tree}: {sorted(touched)}", flush=True)

    # config-only models for --load-format dummy (scripts/gpu/make_models.py). Budget + 1 must not exceed
    # the draft's block (the patched server refuses it otherwise): budget 31 needs a draft trained with a
    # 32-token block; config-only, so `draft32` has the same shapes and layer ids with block_size 32.
    sys.path.insert(0, os.path.join(REPO, "scripts", "gpu"))
    import make_models

    make_models.write_configs(os.path.join(args.work, "models"), draft_blocks=(16, 32))


# ------------------------------------------------------------------ servers


class Server:
    def __init__(self, name, port, extra, work, out, spec=True, level="full", budget=None, topk=8, draft="draft", block=16):  # fmt: skip
        self.name, self.port, self.extra, self.spec, self.level = name, port, extra, spec, level
        self.budget, self.topk, self.block = budget, topk, block
        # tree depth: the worker's min(draft block - 1, budget)
        self.depth_count = min(block - 1, budget) if budget else block - 1
        self.base = f"http://127.0.0.1:{port}"
        self.log_path = os.path.join(out, f"{name}.server.log")
        self.timing_path = os.path.join(work, f"timing-{name}.jsonl")
        self.proc = None
        self.t0 = None
        self.healthy_after = None
        self.error = None
        models = os.path.join(work, "models")
        self.cmd = [
            sys.executable, "-m", "sglang.launch_server", "--port", str(port),
            "--model-path", os.path.join(models, "target"), "--load-format", "dummy",
            "--skip-tokenizer-init", "--attention-backend", "triton", "--context-length", "4096",
            "--mem-fraction-static", "0.1", "--max-total-tokens", "40000",
            "--max-running-requests", "8", "--cuda-graph-max-bs", "4", "--log-level", "info",
        ] + (["--speculative-draft-model-path", os.path.join(models, draft)] if spec else []) + extra  # fmt: skip

    def start(self, oracle_path):
        env = dict(os.environ)
        if self.spec:
            env["SGLANG_DDTREE_ORACLE"] = oracle_path
            env["SGLANG_DFLASH_STEP_TIMING"] = self.timing_path
        self.t0 = time.time()
        with open(self.log_path, "w") as log:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)  # fmt: skip
        print(f"[{self.name}] start: {' '.join(self.cmd[3:])}", flush=True)

    def log_has(self, text):
        try:
            return text in read_text(self.log_path)
        except OSError:
            return False

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def check_health(self):
        if self.healthy_after is not None:
            return True
        if self.proc is None:
            return False  # not started yet
        if not self.alive():
            self.error = self.error or f"exited rc={self.proc.returncode if self.proc else None}"
            return False
        try:
            ok = urllib.request.urlopen(self.base + "/health", timeout=3).status == 200
        except (OSError, ValueError):
            ok = False  # not listening yet
        if ok:
            self.healthy_after = round(time.time() - self.t0, 1)
            print(f"[{self.name}] healthy after {self.healthy_after} s", flush=True)
        return ok

    def generate(self, ids, n_new, timeout=90):
        body = {"input_ids": ids, "sampling_params": {"temperature": 0, "max_new_tokens": n_new,
                                                      "ignore_eos": True}}  # fmt: skip
        req = urllib.request.Request(self.base + "/generate", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})  # fmt: skip
        t = time.time()
        out = json.loads(urllib.request.urlopen(req, timeout=timeout).read())
        return out, time.time() - t


def stop_all(servers, grace_s=15):
    """SIGTERM every server at once, SIGKILL what is still there after grace_s (bounded total time)."""
    live = [s for s in servers if s.proc is not None and s.proc.poll() is None]
    for s in live:
        try:
            os.killpg(s.proc.pid, signal.SIGTERM)
        except OSError as e:
            print(f"[{s.name}] term: {e}", flush=True)
    end = time.time() + grace_s
    while time.time() < end and any(s.proc.poll() is None for s in live):
        time.sleep(0.5)
    for s in live:
        if s.proc.poll() is None:
            try:
                os.killpg(s.proc.pid, signal.SIGKILL)
            except OSError as e:
                print(f"[{s.name}] kill: {e}", flush=True)


def write_oracle(path, reference, ranks, topk=None):
    data = {"reference": reference, "ranks": ranks}
    if topk is not None:
        data["topk"] = topk
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)
    time.sleep(0.05)


# ------------------------------------------------------------------ workloads


def matrix(level):
    """(kind, prompt indexes, new tokens): 3 prompts x 64/256 at batch 1, 4 prompts at batch 4."""
    if level == "full":
        return [("bs1", [k], n) for n in (64, 256) for k in (0, 1, 2)] + [
            ("bs4", BATCH4, n) for n in (64, 256)
        ]
    if level == "light":
        return [("bs1", [k], 64) for k in (0, 1, 2)] + [
            ("bs1", [1], 256),
            ("bs4", BATCH4, 64),
            ("bs4", BATCH4, 256),
        ]
    return [("bs1", [0], 64), ("bs1", [1], 256), ("bs4", BATCH4, 64)]


def run_case(srv, kind, idx, n_new):
    """One request (batch 1) or one batched request of 4 prompts; returns per-prompt records."""
    ids = [PROMPTS[k] for k in idx]
    out, dt = srv.generate(ids[0] if kind == "bs1" else ids, n_new)
    outs = [out] if kind == "bs1" else out
    recs = []
    for k, o in zip(idx, outs, strict=True):
        mi = o.get("meta_info", {})
        recs.append({"kind": kind, "prompt": k, "n": n_new, "latency_s": round(dt, 4),
                     "output_ids": o.get("output_ids"), "verify_ct": mi.get("spec_verify_ct"),
                     "accept_length": mi.get("spec_accept_length"),
                     "accepted_drafts": mi.get("spec_accepted_drafts")})  # fmt: skip
    return recs


def compare(recs, ref):
    bad = []
    for r in recs:
        want = ref.get((r["kind"], r["prompt"], r["n"]))
        if want is None or r["output_ids"] != want:
            first = None
            if want is not None and r["output_ids"] is not None:
                first = next((i for i, (a, b) in enumerate(zip(r["output_ids"], want)) if a != b), None)
            bad.append({"kind": r["kind"], "prompt": r["prompt"], "n": r["n"], "first_diff": first})
    return bad


def step_timing(srv, since_line):
    try:
        lines = read_text(srv.timing_path).splitlines()[since_line:]
    except OSError:
        return {}
    recs = [json.loads(x) for x in lines if x.strip()]
    if not recs:
        return {}
    med = {k: round(statistics.median(r[k] for r in recs), 4)
           for k in ("prepare_ms", "target_ms", "verify_ms", "draft_append_ms")}  # fmt: skip
    med.update(steps=len(recs), width=recs[0]["width"], cuda_graph=all(r["cuda_graph"] for r in recs))
    return med


def timing_lines(srv):
    try:
        return len(read_text(srv.timing_path).splitlines())
    except OSError:
        return 0


# ------------------------------------------------------------------ run


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


def run(args):
    t_begin = time.time()
    deadline = t_begin + args.deadline_s
    out = args.out
    du = load_ddtree_utils(os.path.join(args.work, "tree"))  # the patched tree's own module (torch only)

    oracle_path = os.path.join(args.work, "oracle.json")
    write_oracle(oracle_path, [], [])
    S = Server
    # start order: the reference first (phase 1 runs while the others start), then the servers
    # with CUDA graphs (their capture is the long pole), then the quick ones without
    servers = [
        S("ref", 31000, ["--disable-cuda-graph"], args.work, out, spec=False),
        S("dflash", 31010, ["--speculative-algorithm", "DFLASH"], args.work, out),
        S("t15", 31020, ["--speculative-algorithm", "DDTREE", "--speculative-ddtree-budget", "15",
                         "--speculative-ddtree-topk", "8"], args.work, out, budget=15),
        S("t7", 31030, ["--speculative-algorithm", "DDTREE", "--speculative-ddtree-budget", "7"],
          args.work, out, level="light", budget=7),
        S("t31", 31040, ["--speculative-algorithm", "DDTREE", "--speculative-ddtree-budget", "31"],
          args.work, out, level="light", budget=31, draft="draft32", block=32),
        S("t15ng", 31050, ["--speculative-algorithm", "DDTREE", "--speculative-ddtree-budget", "15",
                           "--disable-cuda-graph"], args.work, out, level="min", budget=15),
        S("sl15", 31060, ["--speculative-algorithm", "DDTREE", "--speculative-ddtree-budget", "15",
                          "--speculative-ddtree-mode", "shadow-linear", "--disable-cuda-graph"],
          args.work, out, level="min", budget=15),
    ]  # fmt: skip
    # DDTREE_SERVERS=ref,t15ng,sl15 runs a subset (a short device call: correctness and the oracle
    # before the timing grid); DDTREE_QUICK=1 shortens the start-up allowances to fit it
    only = [n for n in os.environ.get("DDTREE_SERVERS", "").split(",") if n]
    if only:
        servers = [s for s in servers if s.name in only or s.name == "ref"]
    quick = os.environ.get("DDTREE_QUICK") == "1"
    w_stagger, w_ref, w_all = (200, 170, 100) if quick else (330, 300, 200)
    by = {s.name: s for s in servers}
    summary = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t_begin)), "phases": {},
               "servers": {}, "oracle_profile": du.DEFAULT_ORACLE_PROFILE[:8]}  # fmt: skip

    def save():
        for s in servers:
            summary["servers"][s.name] = {
                "cmd": s.cmd[3:],
                "healthy_after_s": s.healthy_after,
                "error": s.error,
            }
        summary["elapsed_s"] = round(time.time() - t_begin, 1)
        write_json(os.path.join(out, "summary.json"), summary)
        write_markdown(summary, os.path.join(out, "summary.md"))

    try:
        # staggered start: next server once this one has sized and allocated its KV pool
        for s in servers:
            s.start(oracle_path)
            t = time.time()
            while (
                time.time() - t < 75
                and time.time() < deadline - w_stagger
                and s.alive()
                and not s.log_has("Memory pool end")
            ):
                for o in servers:
                    o.check_health()
                time.sleep(0.5)
            if not s.alive():
                s.error = f"exited during start, see {os.path.basename(s.log_path)}"
                print(f"[{s.name}] {s.error}", flush=True)
        ref_srv = by["ref"]
        while time.time() < deadline - w_ref and ref_srv.alive() and not ref_srv.check_health():
            time.sleep(1)
        if not ref_srv.check_health():
            save()
            raise SystemExit("reference server did not come up")

        # phase 1: reference ids (the other servers finish starting meanwhile)
        ref = {}
        ref_srv.generate(PROMPTS[0], 8)
        for kind, idx, n in matrix("full"):
            for r in run_case(ref_srv, kind, idx, n):
                ref[(r["kind"], r["prompt"], r["n"])] = r["output_ids"]
        reference = []
        for k in range(len(PROMPTS)):
            ids = ref.get(("bs1", k, 256)) or ref.get(("bs4", k, 256))
            reference.append({"input_ids": PROMPTS[k], "output_ids": ids})
        summary["phases"]["reference"] = {"cases": len(ref)}
        while time.time() < deadline - w_all and not all(s.healthy_after or not s.alive() for s in servers):
            for s in servers:
                s.check_health()
            time.sleep(1)
        for s in servers:
            if not s.check_health() and s.error is None:
                s.error = "not healthy in time"
        save()
        spec_up = [s for s in servers if s.spec and s.healthy_after is not None]

        # phases 2 and 3: correctness, all speculative servers in parallel
        def correctness(srv, label):
            recs = []
            try:
                srv.generate(PROMPTS[0], 8)
                for kind, idx, n in matrix(srv.level):
                    recs += run_case(srv, kind, idx, n)
            except (OSError, ValueError) as e:  # a crash is a result too
                return {"error": f"{type(e).__name__}: {e}", "alive": srv.alive()}
            acc = [r["accept_length"] for r in recs if r["accept_length"] is not None]
            res = {"cases": len(recs), "mismatches": compare(recs, ref),
                   "accept_length_mean": round(statistics.mean(acc), 3) if acc else None,
                   "accept_length_min": min(acc) if acc else None,
                   "per_case": [{k: v for k, v in r.items() if k != "output_ids"} for r in recs]}  # fmt: skip
            if label == "oracle_branch":
                res["expected_accept_drafts"] = (
                    du.expected_accept_len(RANKS_BRANCH, du.DEFAULT_ORACLE_PROFILE, srv.budget,
                                           1 if srv.name == "sl15" else srv.topk, srv.depth_count)
                    if srv.budget else linear_expected(RANKS_BRANCH))  # fmt: skip
            return res

        for label, ranks in (("plain", []), ("oracle_branch", RANKS_BRANCH)):
            if time.time() > deadline - 120:
                summary["phases"][label] = {"skipped": "deadline"}
                break
            write_oracle(oracle_path, reference, ranks)
            with ThreadPoolExecutor(len(spec_up) or 1) as pool:
                results = dict(zip([s.name for s in spec_up],
                                   pool.map(lambda s, lb=label: correctness(s, lb), spec_up), strict=True))  # fmt: skip
            summary["phases"][label] = {"ranks": ranks, "servers": results}
            save()

        # phase 4: verify-step time, one server at a time, no acceptance (ranks [])
        write_oracle(oracle_path, reference, [])
        timing = {}
        for name in ("dflash", "t15", "t7", "t31"):
            srv = by.get(name)
            if srv is None or srv not in spec_up or not srv.alive() or time.time() > deadline - 60:
                continue
            mark = timing_lines(srv)
            open(srv.timing_path + ".on", "w").close()
            try:
                for k in (0, 1):
                    srv.generate(PROMPTS[k], 128)
            finally:
                os.unlink(srv.timing_path + ".on")
            timing[name] = step_timing(srv, mark)
        if "dflash" in timing and "t15" in timing and timing["dflash"].get("target_ms"):
            timing["tree_over_linear_target_ms_at_16"] = round(
                timing["t15"]["target_ms"] / timing["dflash"]["target_ms"], 3)  # fmt: skip
        summary["phases"]["verify_step_timing"] = timing
        save()

        # phase 5: tok/s with the oracle at matched acceptance, budget x top-k
        grid = []

        def measure(srv, ranks, topk):
            write_oracle(oracle_path, reference, ranks, topk)
            srv.generate(PROMPTS[2], 16)
            tokens, secs, acc, bad = 0, 0.0, [], []
            for k in (0, 1, 2):
                recs = run_case(srv, "bs1", [k], 256)
                tokens += len(recs[0]["output_ids"] or [])
                secs += recs[0]["latency_s"]
                acc.append(recs[0]["accept_length"])
                bad += compare(recs, ref)
            return {"server": srv.name, "budget": srv.budget, "topk": topk, "ranks": ranks,
                    "tok_s": round(tokens / secs, 1) if secs else None,
                    "accept_length": round(statistics.mean(a for a in acc if a is not None), 3)
                    if any(a is not None for a in acc) else None,
                    "identical": not bad,
                    "expected_accept_drafts": du.expected_accept_len(
                        ranks, du.DEFAULT_ORACLE_PROFILE, srv.budget, topk, srv.depth_count) if srv.budget
                    else linear_expected(ranks)}  # fmt: skip

        plan = [(by.get("dflash"), RANKS_MATCH, None)]
        for name in ("t7", "t15", "t31"):
            for k in (1, 4, 8):
                plan.append((by.get(name), RANKS_MATCH, k))
        plan += [(by.get("dflash"), RANKS_BRANCH, None)] + [
            (by.get(n), RANKS_BRANCH, 8) for n in ("t7", "t15", "t31")
        ]
        plan = [x for x in plan if x[0] is not None]
        broken = set()
        for srv, ranks, k in plan:
            if srv not in spec_up or srv.name in broken or not srv.alive() or time.time() > deadline - 20:
                continue
            try:
                grid.append(measure(srv, ranks, k))
            except (OSError, ValueError) as e:
                broken.add(srv.name)  # a hung or dead server: do not wait on it again
                grid.append(
                    {"server": srv.name, "topk": k, "ranks": ranks, "error": f"{type(e).__name__}: {e}"}
                )
            summary["phases"]["tok_s_grid"] = grid
            save()
        write_oracle(oracle_path, reference, [])
    finally:
        stop_all(servers)
        save()
        print(f"[run] done in {round(time.time() - t_begin, 1)} s -> {out}/summary.md", flush=True)


def write_markdown(summary, path):
    lines = [f"# DDTree end to end on the GPU machine ({summary['started']})", "",
             f"elapsed {summary.get('elapsed_s')} s", "", "## Servers", "",
             "| server | healthy after (s) | error | args |", "|---|---|---|---|"]  # fmt: skip
    for name, s in summary["servers"].items():
        args = " ".join(a for a in s["cmd"] if not a.startswith("/"))
        lines.append(f"| {name} | {s['healthy_after_s']} | {s['error'] or ''} | `{args}` |")
    for label in ("plain", "oracle_branch"):
        ph = summary["phases"].get(label)
        if not ph or "servers" not in ph:
            continue
        lines += ["", f"## Correctness: {label} (oracle ranks {ph['ranks']})", "",
                  "| server | cases | mismatching cases | mean accept length | min | expected accepted drafts/step |",
                  "|---|---|---|---|---|---|"]  # fmt: skip
        for name, r in ph["servers"].items():
            if "error" in r:
                lines.append(f"| {name} | ERROR {r['error']} | | | | |")
                continue
            lines.append(f"| {name} | {r['cases']} | {len(r['mismatches'])} {r['mismatches'] or ''} | "
                         f"{r['accept_length_mean']} | {r['accept_length_min']} | "
                         f"{r.get('expected_accept_drafts', '')} |")  # fmt: skip
    t = summary["phases"].get("verify_step_timing")
    if t:
        lines += ["", "## Verify step (median ms per decode step, batch 1, no acceptance)", "",
                  "| server | verify width | cuda graph | target forward | draft+tree+mask | accept+commit | draft KV append |",
                  "|---|---|---|---|---|---|---|"]  # fmt: skip
        for name, r in t.items():
            if isinstance(r, dict) and r:
                lines.append(f"| {name} | {r['width']} | {r['cuda_graph']} | {r['target_ms']} | {r['prepare_ms']} | "
                             f"{r['verify_ms']} | {r['draft_append_ms']} |")  # fmt: skip
        if "tree_over_linear_target_ms_at_16" in t:
            lines.append(
                f"\ntree/linear target forward at 16 tokens: {t['tree_over_linear_target_ms_at_16']} (goal <= 1.15)"
            )
    g = summary["phases"].get("tok_s_grid")
    if g:
        lines += ["", "## tok/s with the oracle (batch 1, 3 prompts x 256 new tokens)", "",
                  "| server | budget | top-k | oracle ranks | tok/s | accept length | expected accepted drafts | ids identical |",
                  "|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for r in g:
            lines.append(f"| {r['server']} | {r.get('budget')} | {r.get('topk')} | {r.get('ranks')} | "
                         f"{r.get('tok_s', r.get('error'))} | {r.get('accept_length')} | "
                         f"{r.get('expected_accept_drafts')} | {r.get('identical')} |")  # fmt: skip
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
    r = sub.add_parser("run")
    r.add_argument("--work", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--deadline-s", type=float, default=520)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    prepare(args) if args.cmd == "prepare" else run(args)


if __name__ == "__main__":
    main()
