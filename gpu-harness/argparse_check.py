"""Feed dflash_instances' rendered launch_server argument lists to sglang 0.5.11's own parser.

Two steps (gpu-harness/argparse_check.sh runs both on the GPU machine):

  cases  --out DIR [--python PY --pythonpath P]   render the cases with module_utils/dflash_instances/
         and the rules table of roles/dflash_instances/vars/main.yml:
           h200-live-*  : this machine's live fingerprint (module_utils/dflash_fingerprint/) and the
                          live probe of PY + PYTHONPATH (module_utils/dflash_layers/probe.py)
           ct200-seed-* : lab/captures/ct200 (SM 12.0, nvcc 12.8) + the seeds' probe (xgrammar 0.1.10)
           ct129-*      : lab/captures/ct129 (SM 8.6) + a good probe (no fallbacks expected)
           neg-*        : must be REJECTED (proves the parser is the real one); the DDTree budget
                          controls (budget + 1 above the draft's block) must be rejected by
                          dflash_instances' validator too, and budget 31 on the 32-block draft
                          accepted by both
  parse  --cases FILE --out DIR   each case in its own subprocess: argparse (ServerArgs.add_cli_args)
         and then sglang's prepare_server_args (ServerArgs.__post_init__ validation); records
         accepted / rejected with the message.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
import ansible.module_utils  # the toolkit's code by its one name (docs/design.md, "Import path")

ansible.module_utils.__path__.append(str(ROOT / "module_utils"))

MODEL = "/dev/shm/Qwen3.6-27B"
DRAFT = "/dev/shm/Qwen3.6-27B-DFlash"  # DFlash draft, block_size 16 (the seeds')
DRAFT32 = "/dev/shm/Qwen3.6-27B-DFlash-b32"  # the same draft config with block_size 32 (budget 31)
BLOCKS = {DRAFT: 16, DRAFT32: 32}  # what argparse_check.sh writes into their config.json

PROBE_SEED_CT200 = {  # the seeds' CT200 venv after the cu130 overlay: xgrammar 0.1.10 (no StructuralTag)
    "torch": {"ok": True, "version": "2.11.0+cu130", "cuda": "13.0"},
    "flashinfer": {"ok": True, "version": "0.6.8.post1"},
    "xgrammar": {"ok": True, "version": "0.1.10", "structural_tag": False},
}
PROBE_GOOD = {
    "torch": {"ok": True, "version": "2.11.0+cu130", "cuda": "13.0"},
    "flashinfer": {"ok": True, "version": "0.6.8.post1"},
    "xgrammar": {"ok": True, "version": "0.1.32", "structural_tag": True},
}


def _instances(gpus):
    base = {"name": "dflash-gpu", "gpus": gpus, "port": 30001, "model_path": MODEL, "draft_model_path": DRAFT,
            "mem_fraction_static": 0.5, "context_length": 4096,
            "extra_args": ["--load-format", "dummy", "--skip-tokenizer-init", "--cuda-graph-max-bs", "4"]}
    return {
        "dflash": dict(base, algorithm="DFLASH"),
        "ddtree": dict(base, algorithm="DDTREE", ddtree={"budget": 15, "topk": 8, "mode": "tree"}),
        "ddtree-shadow": dict(base, algorithm="DDTREE", ddtree={"budget": 7, "topk": 4, "mode": "shadow-linear"}),
        "none": dict(base, algorithm="NONE", draft_model_path=None),
    }


def validator_errors(inst, fp, rules):
    """dflash_instances' own validation of one instance, with the drafts' block sizes read from their
    config.json as library/dflash_instances_facts.py does (BLOCKS when the folders are not there)."""
    from ansible.module_utils.dflash_instances.host import draft_block_size
    from ansible.module_utils.dflash_instances.validate import validate_instances

    drafts = {}
    for d, block in BLOCKS.items():
        cfg = Path(d, "config.json")
        if cfg.is_file():
            size, source, error = draft_block_size(cfg.read_text())
        else:
            size, source, error = block, f"{cfg} absent: block_size {block} as argparse_check.sh writes it", None
        drafts[d] = {"block_size": size, "block_size_source": source, "error": error}
    facts = {"listeners": [], "drafts": drafts,
             "paths": {p: {"exists": True, "isdir": True, "tmpfs": True} for p in (MODEL, DRAFT, DRAFT32)}}
    return validate_instances("h200", [inst], fp, facts, [r["name"] for r in rules])


def make_cases(python, pythonpath):
    import yaml
    from ansible.module_utils.dflash_fingerprint.collect import collect_raw, read_capture
    from ansible.module_utils.dflash_fingerprint.merge import fingerprint_from_raw
    from ansible.module_utils.dflash_instances.flags import plan_instance
    from ansible.module_utils.dflash_instances.host import sgl_kernel_facts

    rules = yaml.safe_load((ROOT / "roles/dflash_instances/vars/main.yml").read_text())["__dflash_instances_rules"]
    cases, notes = [], {}
    try:
        live_fp = fingerprint_from_raw(collect_raw(venv_python=python))
    except Exception as exc:  # noqa: BLE001 - recorded, the other cases still run
        live_fp, notes["live_fingerprint_error"] = None, f"{type(exc).__name__}: {exc}"
    live_probe = None
    try:
        from ansible.module_utils.dflash_layers.probe import run_probe
        live_probe = run_probe(python, pythonpath or None, timeout=240)
    except Exception as exc:  # noqa: BLE001 - recorded
        notes["live_probe_error"] = f"{type(exc).__name__}: {exc}"
    hosts = [("ct200-seed", fingerprint_from_raw(read_capture(str(ROOT / "lab/captures/ct200"))), PROBE_SEED_CT200, [1]),
             ("ct129", fingerprint_from_raw(read_capture(str(ROOT / "lab/captures/ct129"))), PROBE_GOOD, [0])]
    if live_fp:
        hosts.insert(0, ("h200-live", live_fp, live_probe, [0]))
    notes["fingerprints"] = {h: {"gpus": [(g.get("index"), g.get("name"), g.get("sm")) for g in fp.get("gpus", [])],
                                 "nvcc": fp.get("nvcc_version"), "driver_cuda": fp.get("driver_cuda_version")}
                             for h, fp, _, _ in hosts}
    notes["live_probe"] = live_probe
    live_sgl = ((live_probe or {}).get("sgl_kernel") or {}).get("file")
    notes["live_sgl_kernel"] = sgl_kernel_facts(live_sgl)
    for host, fp, probe, gpus in hosts:
        host_facts = {"sgl_kernel": notes["live_sgl_kernel"]} if host == "h200-live" else {}
        for kind, inst in _instances(gpus).items():
            p = plan_instance(inst, rules, fp, probe, host_facts, None)
            cases.append({"case": f"{host}-{kind}", "expect": "accept", "args": p["args"],
                          "applied": [{"rule": a["rule"], "flags": a["flags"]} for a in p["applied"]]})
    good = next(c for c in cases if c["case"].endswith("-dflash"))["args"]
    cases.append({"case": "neg-unknown-flag", "expect": "reject", "args": [*good, "--no-such-flag-dflash"]})
    cases.append({"case": "neg-bad-attention-choice", "expect": "reject",
                  "args": [*good, "--attention-backend", "not-a-backend"]})
    # DDTree budget controls: budget + 1 must not exceed the draft's block size; the patched server
    # (0002/0102) and dflash_instances' validator must agree. Rendered for the first host (the live
    # H200 when its fingerprint was read) with plan_instance; the validator runs on the same instance.
    host, fp, probe, gpus = hosts[0]
    host_facts = {"sgl_kernel": notes["live_sgl_kernel"]} if host == "h200-live" else {}
    base = _instances(gpus)["ddtree"]
    controls = [
        ("neg-ddtree-budget-16-over-block-16", "reject", dict(base, ddtree={"budget": 16, "topk": 8})),
        ("neg-ddtree-budget-31-over-block-16", "reject", dict(base, ddtree={"budget": 31, "topk": 8})),
        ("ddtree-budget-31-block-32", "accept", dict(base, ddtree={"budget": 31, "topk": 8},
                                                     draft_model_path=DRAFT32)),
        ("ddtree-budget-7-block-16", "accept", dict(base, ddtree={"budget": 7, "topk": 4})),
    ]
    for name, expect, inst in controls:
        p = plan_instance(inst, rules, fp, probe, host_facts, None)
        cases.append({"case": name, "expect": expect, "args": p["args"],
                      "applied": [{"rule": a["rule"], "flags": a["flags"]} for a in p["applied"]],
                      "validator": validator_errors(inst, fp, rules)})
    return cases, notes


PARSE_CHILD = r"""
import argparse, json, sys, traceback
argv = json.loads(sys.argv[1])
out = {}
try:
    from sglang.srt.server_args import ServerArgs, prepare_server_args
    p = argparse.ArgumentParser(prog="sglang serve", exit_on_error=False)
    ServerArgs.add_cli_args(p)
    try:
        p.parse_args(argv)
        out["argparse"] = "accepted"
    except SystemExit as e:
        out["argparse"] = f"rejected (exit {e.code})"
    except argparse.ArgumentError as e:
        out["argparse"] = f"rejected: {e}"
    if out["argparse"] == "accepted":
        sa = prepare_server_args(argv)
        out["server_args"] = "accepted"
        out["resolved"] = {k: getattr(sa, k, None) for k in (
            "attention_backend", "speculative_draft_attention_backend", "sampling_backend", "grammar_backend",
            "speculative_algorithm", "speculative_num_draft_tokens", "tp_size", "port",
            "speculative_ddtree_budget", "speculative_ddtree_topk", "speculative_ddtree_mode")}
except SystemExit as e:
    out["server_args"] = f"rejected (exit {e.code})"
except BaseException as e:
    out["server_args"] = f"rejected: {type(e).__name__}: {e}"
    out["traceback"] = traceback.format_exc().strip().splitlines()[-6:]
print("@@RESULT@@" + json.dumps(out, default=str))
"""


def parse_cases(cases, python, env, timeout=240):
    results = []
    for c in cases:
        t0 = time.monotonic()
        proc = subprocess.run([python, "-c", PARSE_CHILD, json.dumps(c["args"])], capture_output=True, text=True,
                              env=env, timeout=timeout, check=False)
        res = {"argparse": "no result", "server_args": f"crashed rc={proc.returncode}"}
        for line in proc.stdout.splitlines():
            if line.startswith("@@RESULT@@"):
                res = json.loads(line[len("@@RESULT@@"):])
        accepted = res.get("argparse") == "accepted" and res.get("server_args") == "accepted"
        ok = accepted == (c["expect"] == "accept")
        if "validator" in c:  # the DDTree budget controls: dflash_instances must agree with the server
            ok = ok and (not c["validator"]) == (c["expect"] == "accept")
        res.update(case=c["case"], expect=c["expect"], args=c["args"], applied=c.get("applied"),
                   ok=ok, seconds=round(time.monotonic() - t0, 1),
                   stderr_tail=proc.stderr.strip().splitlines()[-8:])
        if "validator" in c:
            res["validator"] = c["validator"]
        print(f"[argparse] {c['case']}: argparse={res.get('argparse')} server_args={res.get('server_args')} "
              f"validator={c.get('validator', '-')} -> {'OK' if res['ok'] else 'UNEXPECTED'}", flush=True)
        results.append(res)
    return results


def write_md(results, notes, path):
    lines = ["# sglang 0.5.11 argument parser vs dflash_instances' rendered arguments", "",
             f"Run {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} by gpu-harness/argparse_check.sh", "",
             "| case | expect | argparse | ServerArgs | dflash_instances validator | ok | fallback rules |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        rules = ", ".join(a["rule"] for a in r.get("applied") or []) or "-"
        sa = str(r.get("server_args", "-")).replace("|", "/")[:400]
        if "validator" not in r:
            val = "-"
        else:
            val = "; ".join(r["validator"]).replace("|", "/") or "accepted"
        lines.append(f"| {r['case']} | {r['expect']} | {r.get('argparse')} | {sa} | {val} "
                     f"| {'yes' if r['ok'] else 'NO'} | {rules} |")
    lines += ["", "## Argument lists", ""]
    for r in results:
        lines += [f"- `{r['case']}`: `{' '.join(r['args'])}`"]
    lines += ["", "## Facts used", "", "```json", json.dumps(notes, indent=1, default=str)[:6000], "```"]
    Path(path).write_text("\n".join(lines) + "\n")


def main(argv=None):
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("cases")
    c.add_argument("--out", required=True)
    c.add_argument("--python", default=sys.executable)
    c.add_argument("--pythonpath", action="append", default=[])
    p = sub.add_parser("parse")
    p.add_argument("--cases", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--python", default=sys.executable)
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.cmd == "cases":
        cases, notes = make_cases(a.python, a.pythonpath)
        (out / "cases.json").write_text(json.dumps({"cases": cases, "notes": notes}, indent=1, default=str))
        print(f"[argparse] {len(cases)} cases -> {out / 'cases.json'}")
        return 0
    data = json.loads(Path(a.cases).read_text())
    results = parse_cases(data["cases"], a.python, dict(os.environ))
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    write_md(results, data.get("notes") or {}, out / "results.md")
    bad = [r["case"] for r in results if not r["ok"]]
    print(f"[argparse] {len(results) - len(bad)}/{len(results)} as expected; unexpected: {bad or 'none'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
