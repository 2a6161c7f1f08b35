#!/usr/bin/env python3
"""GPU-machine check of the patched sglang tree (driven by gpu-harness/tree_check.sh).

1. Builds two trees from the pinned wheel with module_utils/dflash_tree/ under this Python
   (3.12 on the GPU machine): the registration prefix of the series (0001-0002: DDTREE registered,
   refusal hook in place) and the whole series; builds each twice (the second must change nothing)
   and compiles every patched file.
2. With `PYTHONPATH=<tree>:<sglang bundle>`, each case runs in its own subprocess against sglang's
   real code: `import sglang` must come from the tree; SpeculativeAlgorithm.DDTREE.is_dflash();
   sglang's own argparse (ServerArgs.add_cli_args) and prepare_server_args (ServerArgs.__post_init__)
   on config-only models must accept the DDTREE flags and reject bad values with our messages;
   on the whole series, budget + 1 above the draft's block is rejected (16 and 31 on the 16-block
   draft) and budget 31 on a 32-block draft (`draft32`, same layer ids) is accepted with a
   32-token verify width.

usage: tree_check.py --wheel W --site SITE --work DIR --out DIR
Writes DIR/results.json and DIR/results.md; exit status 1 when a case is not as expected.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
import ansible.module_utils  # the toolkit's code by its one name (docs/design.md, "Import path")

ansible.module_utils.__path__.append(str(REPO / "module_utils"))

from ansible.module_utils.dflash_tree import disk
from ansible.module_utils.dflash_tree import series as tree_series
from ansible.module_utils.dflash_tree import wheel as tree_wheel

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_models

PATCH_DIR = REPO / "files" / "patches" / "sglang" / "0.5.11"
REGISTRATION = ["0001-ddtree-register-algorithm.patch", "0002-ddtree-server-args.patch"]
REFUSAL = "DDTREE tree verification is not in this patch series yet"


# runs in a child: argv in, one JSON line out
CHILD = r"""
import json, sys, traceback
out = {}
try:
    import sglang
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    out["sglang_file"] = sglang.__file__
    d = SpeculativeAlgorithm.DDTREE
    out["ddtree"] = {"is_dflash": d.is_dflash(), "is_ddtree": d.is_ddtree(),
                     "from_string": SpeculativeAlgorithm.from_string("ddtree").name,
                     "dflash_is_ddtree": SpeculativeAlgorithm.DFLASH.is_ddtree()}
    mode, argv = sys.argv[1], json.loads(sys.argv[2])
    import argparse
    from sglang.srt.server_args import ServerArgs, prepare_server_args
    if mode == "argparse":
        p = argparse.ArgumentParser(prog="sglang serve")
        ServerArgs.add_cli_args(p)
        ns = p.parse_args(argv)
        out["parsed"] = {k: getattr(ns, k) for k in ("speculative_algorithm", "speculative_ddtree_budget",
                                                      "speculative_ddtree_topk", "speculative_ddtree_mode")}
    else:
        sa = prepare_server_args(argv)
        out["parsed"] = {k: getattr(sa, k) for k in ("speculative_algorithm", "speculative_ddtree_budget",
                                                      "speculative_ddtree_topk", "speculative_ddtree_mode",
                                                      "speculative_num_draft_tokens")}
    out["ok"] = True
except SystemExit as e:
    out.update(ok=False, error=f"SystemExit({e.code})")
except BaseException as e:
    out.update(ok=False, error=f"{type(e).__name__}: {e}", where=traceback.format_exc().splitlines()[-3:])
print("RESULT " + json.dumps(out, default=str))
"""


def build(wheel, patches, trees):
    plan = tree_wheel.plan_wheel(wheel, None, patches)
    try:
        first = disk.ensure_tree(plan, trees)
        second = disk.ensure_tree(plan, trees)
    finally:
        disk.close_plan(plan)
    tree = first["tree"]["path"]
    compiled = []
    for rel, entry in sorted(first["manifest"]["files"].items()):
        if rel.endswith(".py") and entry["sha256"]:
            compile(Path(tree, rel).read_bytes(), rel, "exec", dont_inherit=True)
            compiled.append(rel)
    return {
        "path": tree,
        "first_run_changed": first["changed"],
        "second_run_changed": second["changed"],
        "second_run_reason": second["reason"],
        "compiled_under": sys.version.split()[0],
        "compiled": compiled,
        "manifest": first["manifest"],
    }


def run_case(python, pythonpath, mode, argv):
    env = dict(os.environ, PYTHONPATH=":".join(pythonpath), HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    t0 = time.monotonic()
    proc = subprocess.run(
        [python, "-c", CHILD, mode, json.dumps(argv)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    res = next((json.loads(ln[7:]) for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if res is None:
        res = {"ok": False, "error": f"no result (rc {proc.returncode})"}
    res["seconds"] = round(time.monotonic() - t0, 1)
    res["stderr_tail"] = proc.stderr.strip().splitlines()[-4:]
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wheel", required=True)
    ap.add_argument("--site", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    work, out = Path(args.work), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    # config-only models (gpu-harness/make_models.py); draft32: the same draft trained with a 32-token block
    # (budget 31)
    paths = make_models.write_configs(str(work / "models"), draft_blocks=(16, 32))
    target, draft, draft32 = (Path(paths[n]) for n in ("target", "draft", "draft32"))

    shutil.rmtree(work / "trees", ignore_errors=True)  # so the first build really builds
    series = tree_series.read_series_dir(str(PATCH_DIR))
    assert [p["name"] for p in series[:2]] == REGISTRATION, [p["name"] for p in series]
    trees = {
        "registration": build(args.wheel, series[:2], str(work / "trees")),
        "full": build(args.wheel, series, str(work / "trees")),
    }
    failures = 0
    for name, t in trees.items():
        (out / f"manifest-{name}.json").write_text(json.dumps(t.pop("manifest"), indent=2, sort_keys=True))
        ok = t["first_run_changed"] and not t["second_run_changed"]
        failures += not ok
        print(
            f"[tree_check] {'ok  ' if ok else 'FAIL'} tree {name}: {os.path.basename(t['path'])} built "
            f"(changed={t['first_run_changed']}), second run changed={t['second_run_changed']}, "
            f"{len(t['compiled'])} patched files compile under {t['compiled_under']}",
            flush=True,
        )

    base = [
        "--model-path",
        str(target),
        "--load-format",
        "dummy",
        "--skip-tokenizer-init",
        "--attention-backend",
        "triton",
        "--mem-fraction-static",
        "0.5",
        "--context-length",
        "4096",
        "--speculative-draft-model-path",
        str(draft),
    ]
    dd = [*base, "--speculative-algorithm", "DDTREE"]
    # (tree, mode, name, argv, expectation): ok | error substring
    cases = [
        ("registration", "argparse", "defaults", dd, {"parsed": ["DDTREE", 15, 8, "tree"]}),
        (
            "registration",
            "argparse",
            "explicit",
            [
                *dd,
                "--speculative-ddtree-budget",
                "7",
                "--speculative-ddtree-topk",
                "4",
                "--speculative-ddtree-mode",
                "shadow-linear",
            ],
            {"parsed": ["DDTREE", 7, 4, "shadow-linear"]},
        ),
        (
            "registration",
            "argparse",
            "bad-mode",
            [*dd, "--speculative-ddtree-mode", "bushy"],
            {"error": "SystemExit(2)", "stderr": "invalid choice: 'bushy'"},
        ),
        (
            "registration",
            "argparse",
            "bad-budget-type",
            [*dd, "--speculative-ddtree-budget", "x"],
            {"error": "SystemExit(2)", "stderr": "invalid int value: 'x'"},
        ),
        (
            "registration",
            "server_args",
            "good-values-reach-the-refusal",
            [*dd, "--speculative-ddtree-budget", "15"],
            {"error": REFUSAL},
        ),
        (
            "registration",
            "server_args",
            "budget-too-big",
            [*dd, "--speculative-ddtree-budget", "16"],
            {
                "error": "budget + 1 must not exceed the block size. Use --speculative-ddtree-budget 15 or less, "
                "or a DFlash draft trained with a block_size of at least 17."
            },
        ),
        (
            "registration",
            "server_args",
            "budget-vs-explicit-block",
            [*dd, "--speculative-num-draft-tokens", "8", "--speculative-ddtree-budget", "8"],
            {"error": "--speculative-ddtree-budget=8 does not fit the DFlash block size 8"},
        ),
        (
            "registration",
            "server_args",
            "budget-zero",
            [*dd, "--speculative-ddtree-budget", "0"],
            {"error": "DDTREE requires --speculative-ddtree-budget >= 1, got 0."},
        ),
        (
            "registration",
            "server_args",
            "topk-zero",
            [*dd, "--speculative-ddtree-topk", "0"],
            {"error": "DDTREE requires --speculative-ddtree-topk >= 1, got 0."},
        ),
        (
            "registration",
            "server_args",
            "dflash-unchanged",
            [*base, "--speculative-algorithm", "DFLASH"],
            {"ok": True},
        ),
        # the whole series: the refusal is gone, the budget rule stays (budget + 1 <= the draft's
        # block); parsed = algorithm, budget, top-k, mode, verify width (speculative_num_draft_tokens)
        ("full", "server_args", "full-series-ddtree", dd, {"parsed": ["DDTREE", 15, 8, "tree", 16]}),
        (
            "full",
            "server_args",
            "full-budget-7-block-16",
            [*dd, "--speculative-ddtree-budget", "7", "--speculative-ddtree-mode", "shadow-linear"],
            {"parsed": ["DDTREE", 7, 8, "shadow-linear", 8]},
        ),
        (
            "full",
            "server_args",
            "full-budget-16-over-block-16",
            [*dd, "--speculative-ddtree-budget", "16"],
            {
                "error": "--speculative-ddtree-budget=16 does not fit the DFlash block size 16",
                "also": "or a DFlash draft trained with a block_size of at least 17.",
            },
        ),
        (
            "full",
            "server_args",
            "full-budget-31-over-block-16",
            [*dd, "--speculative-ddtree-budget", "31"],
            {
                "error": "--speculative-ddtree-budget=31 does not fit the DFlash block size 16",
                "also": "Use --speculative-ddtree-budget 15 or less, or a DFlash draft trained with a "
                "block_size of at least 32.",
            },
        ),
        (
            "full",
            "server_args",
            "full-budget-31-block-32",
            [
                *base[:-1],
                str(draft32),
                "--speculative-algorithm",
                "DDTREE",
                "--speculative-ddtree-budget",
                "31",
            ],
            {"parsed": ["DDTREE", 31, 8, "tree", 32]},
        ),
        (
            "full",
            "server_args",
            "full-budget-vs-explicit-block",
            [*dd, "--speculative-num-draft-tokens", "8", "--speculative-ddtree-budget", "8"],
            {"error": "--speculative-ddtree-budget=8 does not fit the DFlash block size 8"},
        ),
        (
            "full",
            "server_args",
            "full-series-dflash",
            [*base, "--speculative-algorithm", "DFLASH"],
            {"ok": True},
        ),
    ]
    results = []
    for tree_name, mode, name, argv, expect in cases:
        tree = trees[tree_name]["path"]
        res = run_case(sys.executable, [tree, args.site], mode, argv)
        problems = []
        if not str(res.get("sglang_file", "")).startswith(tree):
            problems.append(f"sglang imported from {res.get('sglang_file')}, not the tree")
        dd_info = res.get("ddtree") or {}
        if not (
            dd_info.get("is_dflash") and dd_info.get("is_ddtree") and not dd_info.get("dflash_is_ddtree")
        ):
            problems.append(f"DDTREE flags wrong: {dd_info}")
        if "parsed" in expect:
            got = list((res.get("parsed") or {}).values())[: len(expect["parsed"])]
            if not res.get("ok") or got != expect["parsed"]:
                problems.append(f"expected parsed {expect['parsed']}, got {got} / {res.get('error')}")
        if "error" in expect:
            if res.get("ok") or expect["error"] not in (res.get("error") or ""):
                problems.append(f"expected error containing {expect['error']!r}, got {res.get('error')!r}")
            elif expect.get("also") and expect["also"] not in (res.get("error") or ""):
                problems.append(f"error lacks {expect['also']!r}: {res.get('error')!r}")
            if "stderr" in expect and not any(expect["stderr"] in ln for ln in res["stderr_tail"]):
                problems.append(f"stderr lacks {expect['stderr']!r}")
        if expect.get("ok") and not res.get("ok"):
            problems.append(f"expected success, got {res.get('error')}")
        failures += bool(problems)
        results.append(
            {
                "tree": tree_name,
                "mode": mode,
                "case": name,
                "argv_tail": argv[len(base) :],
                "expect": expect,
                "result": res,
                "problems": problems,
            }
        )
        print(
            f"[tree_check] {'FAIL' if problems else 'ok  '} {tree_name:12} {mode:11} {name}: "
            f"{res.get('error') or res.get('parsed')} ({res['seconds']} s) {'; '.join(problems)}",
            flush=True,
        )

    summary = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": sys.version.split()[0],
        "wheel": os.path.basename(args.wheel),
        "trees": trees,
        "cases": results,
        "failures": failures,
    }
    (out / "results.json").write_text(json.dumps(summary, indent=2, default=str))
    lines = [f"# tree_check {summary['date']} (python {summary['python']}, {summary['wheel']})", ""]
    for name, t in trees.items():
        lines.append(
            f"- tree `{name}`: {os.path.basename(t['path'])}, first run changed={t['first_run_changed']}, "
            f"second run changed={t['second_run_changed']}, compiled {len(t['compiled'])} patched "
            f"files under {t['compiled_under']}"
        )
    lines += ["", "| tree | parser | case | result | as expected |", "|---|---|---|---|---|"]
    for r in results:
        res = r["result"]
        shown = res.get("error") or json.dumps(res.get("parsed"))
        lines.append(
            f"| {r['tree']} | {r['mode']} | {r['case']} | {shown.replace('|', '/')[:160]} | "
            f"{'no: ' + '; '.join(r['problems']) if r['problems'] else 'yes'} |"
        )
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print(
        f"[tree_check] {failures} failure(s); cases: {sum(not r['problems'] for r in results)}/{len(results)} as expected"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
