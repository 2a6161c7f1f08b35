"""What gpu-harness/tune_gpu.sh brings back of its passes: summary.md and summary.json beside its run.log.

  python3 gpu-harness/tune_summary.py WORK_DIR OUT_DIR   (WORK_DIR: steps.jsonl and runs/<run>/; OUT_DIR: $OUT/tune)

For each pass (steps.jsonl: name, rc, seconds, its budget, or why it was skipped) the tune run's choice from its
results.json (verdict, best and runner-up with their deciding figure's interval and n, the ranking, the choice
among the speculative configurations), the rounds and why they stopped (rounds.jsonl), the release it measured
(run.json), the accepted-tokens and goodput tables, and whether the pass says what the issue expects of it:
  dummy   dummy weights (every draft wrong): "speculation does not pay here";
  oracle  the draft steered to the right token on a non-first branch: a DDTREE configuration chosen over DFLASH
          (the winner, or the best among the speculative configurations when no speculation ran too).
Standard library only.
"""

from __future__ import annotations

import json
import os
import sys


def _read_json(path, default=None):
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return default


def _read_lines(path):
    try:
        with open(path, encoding="utf-8") as fh:
            return [json.loads(line) for line in fh if line.strip()]
    except (OSError, ValueError):
        return []


def expectation(name, choice) -> dict:
    """{expected, met (True/False/None when the pass has no choice)} of a pass's choice."""
    if name == "dummy":
        want = "speculation does not pay here (no speculation the best, every draft wrong)"
        if not choice:
            return {"expected": want, "met": None}
        return {"expected": want, "met": choice.get("verdict") == "speculation_does_not_pay"}
    if name == "oracle":
        want = "a DDTREE configuration chosen over DFLASH"
        if not choice:
            return {"expected": want, "met": None}
        best, verdict = choice.get("best") or {}, choice.get("verdict")
        if best.get("algorithm") == "NONE":  # no speculation in the run as well: the speculative choice decides
            sp = choice.get("speculative") or {}
            best, verdict = sp.get("best") or {}, sp.get("verdict")
        return {"expected": want, "met": verdict == "winner" and best.get("algorithm") == "DDTREE"}
    return {"expected": None, "met": None}


def _figure(entry):
    if not entry:
        return "-"
    ci = entry.get("ci") or {}
    load = entry.get("load") or {}
    where = f" at {load.get('key') or load.get('kind')}={load.get('value')}" if load else ""
    if ci.get("low") is None:
        return f"{entry.get('name')}{where}: {ci.get('mean')} (n={ci.get('n')}, no interval)"
    return (f"{entry.get('name')}{where}: {ci.get('mean'):.3g} [{ci.get('low'):.3g}, {ci.get('high'):.3g}] "
            f"(n={ci.get('n')})")


def _table(t):
    cols = t.get("columns") or []
    out = ["| " + " | ".join(str(c) for c in cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(str(v) for v in row) + " |" for row in t.get("rows") or []]
    return out


def summarise(work_dir) -> dict:
    lines = _read_lines(os.path.join(work_dir, "steps.jsonl"))
    meta = next((x["meta"] for x in lines if "meta" in x), {})
    steps = [x for x in lines if "pass" in x]
    passes = []
    for st in steps:
        run_dir = os.path.join(work_dir, "runs", st.get("run") or "")
        res = _read_json(os.path.join(run_dir, "results.json")) if st.get("run") else None
        run = _read_json(os.path.join(run_dir, "run.json"), {}) if st.get("run") else {}
        rounds = _read_lines(os.path.join(run_dir, "rounds.jsonl")) if st.get("run") else []
        choice = (res or {}).get("choice")
        tables = {t.get("id"): t for t in (res or {}).get("tables") or []}
        release = (run or {}).get("release") or {}
        passes.append({
            **st, "choice": choice, "dummy_weights": (res or {}).get("dummy"), "standin": (res or {}).get("standin"),
            "release": release.get("id"), "rounds": len(rounds),
            "stop": (rounds[-1].get("reason") if rounds else None), "accept": tables.get("accept"),
            "goodput": tables.get("goodput"), "refused": (res or {}).get("refused"),
            "failed": (res or {}).get("failed"), **expectation(st.get("pass"), choice)})
    return {"meta": meta, "passes": passes}


def markdown(summary) -> str:
    m = summary.get("meta") or {}
    lines = ["# tune.yml on the GPU machine (gpu-harness/tune_gpu.sh)", "",
             (f"Oracle reference: {m.get('reference')}. GPU {m.get('gpu')}; base instance {m.get('release_manifest_base')}, "
             f"sglang {m.get('sglang')}; budget {m.get('budget_s')} s for passes '{m.get('passes')}'."), ""]
    for p in summary["passes"]:
        lines += [f"## Pass {p.get('pass')}", ""]
        if p.get("skipped"):
            lines += [f"Skipped: {p['skipped']}", ""]
            continue
        met = {True: "MET", False: "NOT MET", None: "no choice"}[p.get("met")]
        lines += [(f"- run `{p.get('run')}`: rc {p.get('rc')} in {p.get('seconds')} s (hard stop {p.get('limit_s')} s, "
                  f"tune budget {p.get('budget_s')} s); release {p.get('release')}, sglang {p.get('sglang')}; "
                  f"{p.get('rounds')} rounds, stopped by {p.get('stop')}"),
                  f"- expected: {p.get('expected')}: **{met}**"]
        ch = p.get("choice")
        if ch:
            sp = ch.get("speculative") or {}
            lines += [f"- verdict `{ch.get('verdict')}`: {ch.get('text')}",
                      (f"- best {_figure(ch.get('best'))}; runner-up {_figure(ch.get('runner_up'))}; "
                      f"ratio {ch.get('ratio')}; ranking {', '.join(ch.get('ranking') or [])}"),
                      (f"- among the speculative: `{sp.get('verdict')}`, best {_figure(sp.get('best'))}, "
                      f"runner-up {_figure(sp.get('runner_up'))}")]
        for key in ("refused", "failed"):
            if p.get(key):
                lines.append(f"- {key}: {json.dumps(p[key])[:600]}")
        for key in ("accept", "goodput"):
            if p.get(key):
                lines += ["", f"{(p[key].get('title') or key)}:", ""] + _table(p[key])
        lines.append("")
    return "\n".join(lines) + "\n"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    work_dir, out_dir = argv
    summary = summarise(work_dir)
    with open(os.path.join(out_dir, "summary.json"), "w", encoding="utf-8") as fh:
        json.dump(summary, fh, indent=1, default=str)
    text = markdown(summary)
    with open(os.path.join(out_dir, "summary.md"), "w", encoding="utf-8") as fh:
        fh.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
