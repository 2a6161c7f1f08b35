#!/usr/bin/env python3
"""The performance gate against a real server on the GPU machine (issue #15).

After gpu-harness/e2e.sh's deploy stage (release R1 healthy, its tok/s and accept length measured and
kept in R1's smoke record), deploy.yml runs again with the instance's extra_args plus a flag that
makes decoding slower (default --disable-cuda-graph). The release it makes (R2) must be refused by
the performance gate (tok/s below 0.85 x R1's) and rolled back: the play fails with a message naming
perf.tokens_per_s, the figure, the threshold and both releases; current is R1 again and serving.

    python3 gpu-harness/e2e_gates.py --out DIR [--flag --disable-cuda-graph]

A CPU dry run (no deploy, the vars file and the checks only): --dry-run.
"""
import argparse
import http.client
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARS = os.path.join(ROOT, "inventory", "gpu", "group_vars", "all", "main.yml")


def slow_vars(flag):
    """The GPU inventory's instances with ``flag`` appended to each instance's extra_args."""
    with open(VARS, encoding="utf-8") as fh:
        insts = yaml.safe_load(fh)["dflash_instances"]
    for inst in insts:
        inst["extra_args"] = list(inst.get("extra_args") or []) + [flag]
    return {"dflash_instances": insts}


def current(prefix="/opt/dflash"):
    link = os.path.join(prefix, "current")
    return os.path.basename(os.readlink(link)) if os.path.islink(link) else None


def smoke_record(rid, name, prefix="/opt/dflash"):
    try:
        with open(os.path.join(prefix, "releases", rid, "smoke", name + ".json"), encoding="utf-8") as fh:
            return json.load(fh).get("smoke") or {}
    except (OSError, ValueError):
        return {}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--flag", default="--disable-cuda-graph")
    ap.add_argument("--timeout", type=int, default=560)
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    extra = os.path.join(a.out, "gates-slow-vars.yml")
    with open(extra, "w", encoding="utf-8") as fh:
        yaml.safe_dump(slow_vars(a.flag), fh, sort_keys=False)
    name = slow_vars(a.flag)["dflash_instances"][0]["name"]
    r1 = current()
    before = smoke_record(r1, name) if r1 else {}
    print(f"gates: R1={r1} measured tok/s median {(before.get('perf') or {}).get('tokens_per_s_median')}, "
          f"accept {(before.get('perf') or {}).get('accept_length_median')}; deploying with {a.flag}")
    if a.dry_run:
        with open(extra, encoding="utf-8") as fh:
            print(fh.read())
        return 0
    if not r1 or not (before.get("perf") or {}).get("tokens_per_s_median"):
        # a cold machine (the deploy stage ran in a call whose machine went back): nothing to compare with
        print("gates: no deployed release with a measured tok/s on this machine: run STAGES='deploy gates' "
              "or the deploy stage first on the same warm machine")
        return 2
    t0 = time.time()
    cmd = [sys.executable, "-m", "ansible.cli.playbook", "-i", "inventory/gpu", "deploy.yml", "-e", "@" + extra]
    with open(os.path.join(a.out, "gates-deploy.log"), "w", encoding="utf-8") as log:
        rc = subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, timeout=a.timeout, check=False).returncode
    with open(os.path.join(a.out, "gates-deploy.log"), encoding="utf-8", errors="replace") as fh:
        text = fh.read()
    flat = " ".join(text.split())  # the callback wraps long messages
    # the gate's own message: "release <R2> (previous <R1>): gate perf.tokens_per_s failed: ..."
    m = re.search(r"release (\d{8}T\d{6}-[0-9a-f]{8}) \(previous " + re.escape(str(r1)) + r"\): (gate .{0,1500})", flat)
    after = current()
    try:
        health = urllib.request.urlopen("http://127.0.0.1:30001/health", timeout=5).status
    except (OSError, http.client.HTTPException) as exc:
        health = f"{exc}"
    res = {"rc": rc, "seconds": round(time.time() - t0, 1), "r1": r1, "current_after": after,
           "refused": m.group(1) if m else None, "message": m.group(2)[:2000] if m else None,
           "health_after": health, "r1_before": before.get("perf"), "r1_after": smoke_record(r1, name).get("perf")}
    ok = (rc != 0 and m is not None and "gate perf.tokens_per_s failed" in m.group(2) and after == r1
          and health == 200 and f"put back: current -> {r1}" in flat)  # the rescue's words (revert.yml)
    res["verdict"] = "as expected: refused by the perf gate and rolled back" if ok else "NOT as expected"
    with open(os.path.join(a.out, "gates.json"), "w", encoding="utf-8") as fh:
        json.dump(res, fh, indent=1)
    print(json.dumps(res, indent=1)[:4000])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
