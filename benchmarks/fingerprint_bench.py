#!/usr/bin/env python3
"""Fingerprint bench: one dflash_fingerprint call per host, and the parse cost of an 8-GPU host.

    .venv/bin/python benchmarks/fingerprint_bench.py [--lab INVENTORY] [--parse-runs N]

1. Runs `ansible-playbook playbooks/fingerprint.yml` with a counting callback
   (benchmarks/fingerprint_callbacks/) and reports, per host, how many dflash_fingerprint results (module
   calls) it produced. Default hosts: 4 local hosts replaying lab/captures/{ct129,ct200} and two
   public fixtures; --lab runs against the lab containers instead (live stand-in nvidia-smi),
   e.g. --lab "inventory/lab -i lab/.inv/<prefix>.yml".
2. Times fingerprint_from_raw on the ct200 capture (8 GPUs, every source) and on each source
   alone, and the live collect+parse path with a stand-in nvidia-smi (subprocess cost included).
Prints a JSON result; benchmarks/fingerprint_bench.md records a run.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
import ansible.module_utils  # the toolkit's code by its one name (docs/design.md, "Import path")

ansible.module_utils.__path__.append(str(ROOT / "module_utils"))
from ansible.module_utils.dflash_fingerprint import collect, merge

REPLAY_HOSTS = {
    "ct129": ROOT / "lab/captures/ct129",
    "ct200": ROOT / "lab/captures/ct200",
    "a40-host": ROOT / "tests/fixtures/captures/a40-err-old-layout",
    "p100-host": ROOT / "tests/fixtures/captures/p100-440-premig",
}


def count_calls(inventory_args: list[str], limit: str | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        counts_file = Path(tmp) / "counts.json"
        env = dict(os.environ, ANSIBLE_CALLBACK_PLUGINS=str(ROOT / "benchmarks/fingerprint_callbacks"),
                   ANSIBLE_CALLBACKS_ENABLED="fingerprint_count_calls", FINGERPRINT_COUNT_FILE=str(counts_file))
        cmd = [str(ROOT / ".venv/bin/ansible-playbook"), *inventory_args, "playbooks/fingerprint.yml",
               "-e", f"fingerprint_report_dir={tmp}/reports"]
        if limit:
            cmd += ["-l", limit]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-2000:])
            raise SystemExit(f"playbook failed: rc {proc.returncode}")
        counts = json.loads(counts_file.read_text())
        report = json.loads((Path(tmp) / "reports/fingerprint.json").read_text())
    per_host = {h: c.get("dflash_fingerprint", 0) for h, c in counts.items() if h in report["hosts"]}
    return {"command": " ".join(shlex.quote(c) for c in cmd[1:]), "wall_s": round(wall, 2),
            "dflash_fingerprint_calls_per_host": per_host, "all_results_per_host": counts,
            "hosts_in_report": sorted(report["hosts"])}


def timeit(fn, runs: int) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(runs):
        fn()
    return (time.perf_counter() - t0) / runs * 1000.0


def parse_cost(runs: int) -> dict:
    raw = collect.read_capture(ROOT / "lab/captures/ct200")
    out = {"host": "ct200 (8 GPUs)", "runs": runs,
           "all_sources_ms": round(timeit(lambda: merge.fingerprint_from_raw(raw), runs), 3)}
    for only in ("nvidia-smi-query.csv", "nvidia-smi-q.xml", "nvidia-smi.txt"):
        sub = {only: raw[only]}
        out[f"{only}_only_ms"] = round(timeit(lambda sub=sub: merge.fingerprint_from_raw(sub), runs), 3)
    out["bytes"] = {k: len(v) for k, v in raw.items() if k.startswith("nvidia-smi")}
    return out


def collect_cost(runs: int) -> dict:
    """collect_raw + parse with a stand-in nvidia-smi replaying ct200 (4 nvidia-smi processes per call)."""
    with tempfile.TemporaryDirectory() as tmp:
        smi = Path(tmp) / "nvidia-smi"
        smi.write_text(f"#!/bin/sh\nDFLASH_LAB_CAPTURE={ROOT}/lab/captures/ct200 exec {sys.executable} "
                       f"{ROOT}/lab/standin-tools/nvidia-smi \"$@\"\n")
        smi.chmod(0o755)
        cap = ROOT / "lab/captures/ct200"

        def once():
            return merge.fingerprint_from_raw(collect.collect_raw(
                nvidia_smi=str(smi), proc_version_path=str(cap / "proc-driver-nvidia-version.txt"),
                toolkit_roots=(tmp,)))

        assert once()["gpu_count"] == 8
        return {"runs": runs, "collect_and_parse_ms": round(timeit(once, runs), 1),
                "note": "stand-in nvidia-smi is a Python script: most of this is 4 interpreter starts"}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lab", help="inventory argument(s) for the lab containers instead of local replay hosts")
    ap.add_argument("--limit", default=None)
    ap.add_argument("--parse-runs", type=int, default=200)
    ap.add_argument("--collect-runs", type=int, default=5)
    args = ap.parse_args()
    result = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "python": sys.version.split()[0], "cpus": os.cpu_count()}
    if args.lab:
        result["calls"] = count_calls(["-i", *shlex.split(args.lab)], args.limit or "lab")
    else:
        with tempfile.TemporaryDirectory() as tmp:
            inv = Path(tmp) / "hosts.yml"
            hosts = {h: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                         "dflash_fingerprint_replay_dir": str(d)} for h, d in REPLAY_HOSTS.items()}
            inv.write_text(json.dumps({"all": {"hosts": hosts}}))
            result["calls"] = count_calls(["-i", str(inv)], args.limit)
    result["parse"] = parse_cost(args.parse_runs)
    if (ROOT / "lab/standin-tools/nvidia-smi").exists():
        result["collect"] = collect_cost(args.collect_runs)
    print(json.dumps(result, indent=2))
    calls = result["calls"]["dflash_fingerprint_calls_per_host"]
    return 0 if calls and set(calls.values()) == {1} else 1


if __name__ == "__main__":
    sys.exit(main())
