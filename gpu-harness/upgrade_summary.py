#!/usr/bin/env python3
"""The verdicts of gpu-harness/upgrade.sh: one row per step (deploy 0.5.11, upgrade to 0.5.17, the unchanged re-run,
rollback.yml back, rollback.yml -e rollback_to forward), from each step's playbook log and the state read after it
(gpu-harness/upgrade_state.yml: releases, current manifest, smoke records, what each server says it is).

  upgrade_summary.py OUT_DIR FROM TO     reads OUT_DIR/steps.jsonl, writes OUT_DIR/summary.json and summary.md

steps.jsonl holds one line per step run: {step, rc, seconds, log, state} (log and state: files in OUT_DIR).
Standard library only (the GPU machine's torch venv runs it).
"""

from __future__ import annotations

import json
import os
import re
import sys

RECAP = re.compile(r"^(?P<host>\S+)\s*:\s*ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+unreachable=(?P<unreachable>\d+)"
                   r"\s+failed=(?P<failed>\d+)")


def recap(log_text: str) -> dict | None:
    """The PLAY RECAP figures of the last play of a playbook log (summed over its hosts), or None."""
    text = log_text.rsplit("PLAY RECAP", 1)[-1] if "PLAY RECAP" in log_text else ""
    rows = [m.groupdict() for line in text.splitlines() if (m := RECAP.match(line.strip()))]
    if not rows:
        return None
    return {k: sum(int(r[k]) for r in rows) for k in ("ok", "changed", "unreachable", "failed")}


def served_versions(state: dict) -> dict:
    """{instance: the version its server reports} (sglang's /get_server_info "version")."""
    return {name: (info or {}).get("version") for name, info in (state.get("served") or {}).items()}


def manifest_versions(state: dict) -> dict:
    m = state.get("manifest") or {}
    return {name: inst.get("sglang_version") or (m.get("tree") or {}).get("sglang_version")
            for name, inst in (m.get("instances") or {}).items()}


def status_of(state: dict, rid: str | None) -> str | None:
    return next((r.get("status") for r in state.get("releases") or [] if r.get("id") == rid), None)


def perf_gate(state: dict) -> dict:
    """{instance: the perf.tokens_per_s gate of its smoke record} (ran, passed, baseline_release, figure, ...)."""
    out = {}
    for name, rec in (state.get("smoke") or {}).items():
        gates = ((rec or {}).get("smoke") or {}).get("gates") or []
        out[name] = next((g for g in gates if g.get("gate") == "perf.tokens_per_s"), None)
    return out


def judge(steps: list, version_from: str, version_to: str) -> list:
    """Each step's row with its checks: what the step must show, and whether it does."""
    rows, ids = [], {}
    for s in steps:
        st, rc, log = s.get("state") or {}, s.get("rc"), s.get("log_text") or ""
        cur = st.get("current")
        served = served_versions(st)
        row = {"step": s["step"], "rc": rc, "seconds": s.get("seconds"), "current": cur,
               "status": status_of(st, cur), "served": served, "manifest": manifest_versions(st),
               "recap": recap(log), "perf": perf_gate(st), "checks": {}}
        c = row["checks"]
        want = version_from if s["step"] in ("deploy511", "rollback") else version_to
        c["rc 0"] = rc == 0
        c[f"serves {want}"] = bool(served) and all(v == want for v in served.values())
        c[f"manifest says {want}"] = bool(row["manifest"]) and all(v == want for v in row["manifest"].values())
        c["current healthy"] = row["status"] == "healthy"
        if s["step"] == "deploy511":
            ids["from"] = cur
        elif s["step"] == "upgrade":
            ids["to"] = cur
            # a run without the deploy511 step (the 0.5.11 release deployed by an earlier call): the one it replaced
            ids.setdefault("from", (st.get("manifest") or {}).get("previous"))
            c["a new release over the first"] = cur is not None and cur != ids.get("from")
            gate = next(iter(row["perf"].values()), None) or {}
            c["perf gate against the first release"] = bool(gate.get("ran")) and gate.get("baseline_release") == ids.get(
                "from")
        elif s["step"] == "again":
            c["changed=0"] = (row["recap"] or {}).get("changed") == 0
            c["same release"] = cur == ids.get("to")
        elif s["step"] == "rollback":
            c["back on the first release"] = cur == ids.get("from")
        elif s["step"] == "forward":
            c["on the upgrade's release again"] = cur == ids.get("to")
        row["passed"] = all(c.values())
        rows.append(row)
    return rows


def markdown(rows: list, version_from: str, version_to: str) -> str:
    lines = [f"# sglang {version_from} -> {version_to} as releases (gpu-harness/upgrade.sh)", "",
             "| step | rc | s | current release | status | served | recap | perf gate | verdict |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        gate = next(iter(r["perf"].values()), None) or {}
        perf = (f"{'passed' if gate.get('passed') else 'FAILED'} {gate.get('figure')} vs {gate.get('baseline')} "
                f"({gate.get('baseline_release')})" if gate.get("ran") else (gate.get("reason") or "-"))
        rc = r["recap"] or {}
        lines.append(f"| {r['step']} | {r['rc']} | {r['seconds']} | {r['current']} | {r['status']} | "
                     f"{', '.join(f'{k} {v}' for k, v in r['served'].items()) or '-'} | "
                     f"ok={rc.get('ok')} changed={rc.get('changed')} failed={rc.get('failed')} | {perf} | "
                     f"{'PASS' if r['passed'] else 'FAIL: ' + ', '.join(k for k, v in r['checks'].items() if not v)} |")
    lines += ["", f"all steps passed: {all(r['passed'] for r in rows) and bool(rows)}"]
    return "\n".join(lines) + "\n"


def main(argv):
    out, version_from, version_to = argv[1], argv[2], argv[3]
    steps = []
    with open(os.path.join(out, "steps.jsonl"), encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                s = json.loads(line)
                for key, field in (("log", "log_text"), ("state", "state")):
                    path = os.path.join(out, s.get(key) or "")
                    try:
                        with open(path, encoding="utf-8", errors="replace") as f2:
                            s[field] = f2.read() if field == "log_text" else json.load(f2)
                    except (OSError, ValueError):
                        s[field] = "" if field == "log_text" else {}
                steps.append(s)
    rows = judge(steps, version_from, version_to)
    with open(os.path.join(out, "summary.json"), "w", encoding="utf-8") as fh:
        json.dump({"from": version_from, "to": version_to, "steps": rows}, fh, indent=1, default=str)
    text = markdown(rows, version_from, version_to)
    with open(os.path.join(out, "summary.md"), "w", encoding="utf-8") as fh:
        fh.write(text)
    print(text)
    return 0 if rows and all(r["passed"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
