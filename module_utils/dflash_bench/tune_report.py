"""Render a tune run's folder: the analysis (every cell's figures with n and interval, the deciding figures,
the choice), the proposal, charts, and the report from Jinja2 templates (report.md, report.tex -> PDF).

The tables are built once here ({title, columns, rows}) and the Markdown and LaTeX templates both print
every column of every table: the PDF has what the Markdown has. LaTeX tables get column widths from
their content (p columns that wrap, break points after '-', '_' and '/'), command lines are wrapped as
shell continuation lines to a width that fits the page; tests check both (tests/unit/bench/
test_tune_report.py, with pdflatex and pdftotext where installed). No Ansible import.
"""

from __future__ import annotations

import json
import os

from ansible.module_utils.dflash_bench import ci, tune
from ansible.module_utils.dflash_bench import goodput as gp
from ansible.module_utils.dflash_bench.charts import STANDIN_STAMP
from ansible.module_utils.dflash_bench.latex import compile_pdf
from ansible.module_utils.dflash_bench.layout import (
    col_spec,
    tex_escape,
    wrap_command,
    wrap_text,
)
from ansible.module_utils.dflash_bench.results import read_json, redact_args, write_text
from ansible.module_utils.dflash_bench.tune_charts import DUMMY_STAMP, draw_all

MD_WIDTH = 100  # command lines in report.md
TEX_WIDTH = 130  # command lines in the PDF (\footnotesize typewriter on landscape A4 holds about 170)
CHARTS_ORDER = ("deciding", "curves", "closed", "accept", "heatmap")


# ------------------------------------------------------------------ formatting


def num(v, digits=3):
    if v is None:
        return "-"
    v = float(v)
    if v == 0:
        return "0"
    if abs(v) >= 10 ** digits:
        return f"{v:.0f}"
    return f"{v:.{digits}g}"


def fmt_ci(c, digits=3):
    """'412 [398, 426]'; a figure without an interval says why ('n=1: no interval', 'n too small ...')."""
    if not c:
        return "-"
    m = c.get("mean") if "mean" in c else c.get("value")
    if m is None:
        return "-"
    if c.get("low") is not None and c.get("high") is not None:
        return f"{num(m, digits)} [{num(c['low'], digits)}, {num(c['high'], digits)}]"
    note = c.get("note") or "no interval"
    if note.startswith("n too small"):
        return f"{num(m, digits)} (n < {c.get('needs')})"
    return f"{num(m, digits)} ({note})"


# ------------------------------------------------------------------ analysis


def _server_accept(records, cfg, key):
    recs = [r for r in records if r.get("load") and r["config"]["name"] == cfg and r["load_key"] == key]
    if not recs:
        return None
    last = max(recs, key=lambda r: r["round"])
    return ((last.get("server_after") or {}).get("metrics") or {}).get("spec_accept_length")


def analyse(run_dir) -> dict:
    run = read_json(os.path.join(run_dir, "run.json"))
    records = tune.read_records(run_dir)
    t = run.get("tune") or {}
    obj = gp.objective(t.get("objective"))
    conf = float(t.get("confidence") or ci.CONFIDENCE)
    configs = {c["name"]: c for c in (run.get("plan") or {}).get("configurations") or []}
    groups = tune.grouped(records)
    cells, entries, accept = {}, [], {}
    for name in [c for c in configs if c in groups] + sorted(set(groups) - set(configs)):
        cfg = configs.get(name) or {"name": name}
        cells[name] = []
        hist, chunks, lengths = [], [], []
        for key, cell in sorted(groups[name].items(), key=lambda kv: (kv[1]["load"]["kind"] != "concurrency",
                                                                      float(kv[1]["load"]["value"]))):
            st = gp.cell_stats(cell["rounds"], obj, conf)
            st["metrics_accept"] = None if cfg.get("algorithm") == "NONE" else _server_accept(records, name, key)
            st["saturated"] = gp.saturated(st, cell["load"])
            cells[name].append({"load": cell["load"], "key": key, "stats": st})
            hist = _add(hist, st["accept_histogram"])
            lengths += st["accept_lengths"]
            for r in cell["rounds"]:
                for q in r["requests"]:
                    if q.get("ok") and q.get("spec_verify_ct"):
                        chunks = _add(chunks, q.get("chunk_tokens") or [])
        d = gp.deciding(cells[name])
        if d is not None:
            entries.append({"name": name, "algorithm": cfg.get("algorithm"), "budget": cfg.get("budget"),
                            "topk": cfg.get("topk"), "mode": cfg.get("mode"),
                            "attention_backend": cfg.get("attention_backend"), **d})
        if cfg.get("algorithm") != "NONE" and lengths:
            accept[name] = {"histogram": hist, "chunks": chunks, "lengths": lengths,
                            "ci": ci.mean_ci(lengths, conf)}
    choice = gp.choose(entries)
    failures = [r for r in records if not r.get("load")]
    standin = next((r["stand_in"] for r in records if r.get("stand_in")), None) or run.get("stand_in")
    dummy = bool(t.get("dummy_weights")) or any(
        "dummy" in _flag_values(c.get("args"), "--load-format") for c in configs.values())
    rounds = []
    path = os.path.join(run_dir, "rounds.jsonl")
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as fh:
            rounds = [json.loads(line) for line in fh if line.strip()]
    return {"run": run, "objective": obj, "confidence": conf, "configs": configs, "cells": cells, "entries": entries,
            "accept": accept, "choice": choice, "failures": failures, "refused": t.get("refused") or {},
            "standin": standin, "dummy": dummy, "rounds": rounds, "records": len(records)}


def _add(a, b):
    a, b = list(a or []), list(b or [])
    n = max(len(a), len(b))
    return [(a[i] if i < len(a) else 0) + (b[i] if i < len(b) else 0) for i in range(n)]


def _flag_values(args, flag):
    args = [str(a) for a in args or []]
    out = [args[i + 1] for i, a in enumerate(args[:-1]) if a == flag]
    return out + [a.split("=", 1)[1] for a in args if a.startswith(flag + "=")]


# ------------------------------------------------------------------ tables (one definition for both templates)


def tables(model) -> list:
    goodput_rows, thr_rows, lat_rows = [], [], []
    for name, cells in model["cells"].items():
        for c in cells:
            s, load = c["stats"], tune.describe_load(c["load"])
            sat = {True: "yes", False: "no", None: "-"}[s["saturated"]]
            goodput_rows.append([name, load, str(s["n_rounds"]), fmt_ci(s["goodput_rps"]), fmt_ci(s["attainment"], 2),
                                 fmt_ci(s["goodput_tok_s"]), sat])
            acc = s["accept_per_request"]
            thr_rows.append([name, load, str(s["n_rounds"]), str(s["completed"]), fmt_ci(s["output_tok_s"]),
                             fmt_ci(s["request_s"]), fmt_ci(acc, 3) if acc["n"] else "-",
                             num(s["metrics_accept"]), "-" if s["cached_ratio"] is None else f"{s['cached_ratio']:.0%}"])
            lat_rows.append([name, load, str(s["completed"]), *(fmt_ci(s[f"ttft_p{q}_ms"]) for q in (50, 95, 99)),
                             *(fmt_ci(s[f"itl_p{q}_ms"]) for q in (50, 95, 99)), fmt_ci(s["e2e_p50_ms"]),
                             fmt_ci(s["e2e_p99_ms"])])
    acc_rows = []
    for name, a in model["accept"].items():
        ls = sorted(a["lengths"])
        hist = a["histogram"]
        src = (f"server histogram, {sum(hist)} steps" if hist else
               f"streamed chunks, {sum(a['chunks'])} chunks (sglang may merge steps)")
        dist = _dist_text(hist, 1) if hist else _dist_text(a["chunks"], 0)
        acc_rows.append([name, str(len(ls)), fmt_ci(a["ci"]), (f"{num(ci.percentile(ls, 10))} / {num(ci.percentile(ls, 50))}"
                         f" / {num(ci.percentile(ls, 90))}"), src, dist])
    out = [
        {"id": "goodput", "title": "Goodput under the objective",
         "note": ("goodput: open loop, the offered rate x the share of requests within the objective; closed loop, "
                  "requests within the objective / wall time. Mean over the rounds [95% t interval]; n = rounds. "
                  "saturated (open loop): under 90% of the requests met the objective, or the queue grew through "
                  "the cell (the TTFT of its last quarter of requests over twice its first quarter's)."),
         "columns": ["configuration", "load", "rounds", "goodput req/s", "share within objective",
                     "token goodput tok/s", "saturated"], "rows": goodput_rows},
        {"id": "throughput", "title": "Throughput and acceptance",
         "note": ("mean over the rounds [95% t interval], n = rounds; accept length: per request (completion tokens / "
                  "verify steps from the server's meta_info), mean [95% t interval] over the requests; /metrics "
                  "accept: the server's sglang:spec_accept_length gauge after the last round; prefix reuse: cached "
                  "prompt tokens / prompt tokens."),
         "columns": ["configuration", "load", "rounds", "requests", "output tok/s", "requests/s",
                     "accept length", "/metrics accept", "prefix reuse"], "rows": thr_rows},
        {"id": "latency", "title": "Latency (ms)",
         "note": ("TTFT and end-to-end: quantile of the cell's requests (all rounds) [95% order-statistic interval]; "
                  "n = requests; '(n < N)': the requests cannot bound this quantile at 95%, N would. ITL: each round's quantile of "
                  "its tokens, mean [95% t interval] over the rounds (a round with too few tokens for the "
                  "quantile gives none)."),
         "columns": ["configuration", "load", "requests", "TTFT p50", "TTFT p95", "TTFT p99", "ITL p50", "ITL p95",
                     "ITL p99", "E2E p50", "E2E p99"], "rows": lat_rows},
    ]
    if acc_rows:
        out.append({"id": "accept", "title": "Accepted tokens per verify step",
                    "note": ("per-request accept length: mean [95% t interval] over the requests, and its 10th / 50th "
                             "/ 90th percentiles; distribution: share of the steps that committed k tokens (drafts "
                             "accepted + the bonus token)."),
                    "columns": ["configuration", "requests", "accept length", "p10 / p50 / p90", "source",
                                "distribution (tokens: share)"], "rows": acc_rows})
    return out


def _cell_of(model, name, load):
    return next(c for c in model["cells"][name] if c["load"] == load)


def _dist_text(counts, offset):
    total = sum(counts)
    if not total:
        return "-"
    return ", ".join(f"{k + offset}: {c / total:.0%}" for k, c in enumerate(counts) if c and c / total >= 0.005)


def choice_lines(model) -> list:
    ch = model["choice"]
    out = [ch["text"] + "."]
    b, r = ch.get("best"), ch.get("runner_up")
    if b:
        out.append(f"best: {b['name']}, goodput {fmt_ci(b['ci'])} req/s at {tune.describe_load(b['load'])} "
                   f"(n={b['ci']['n']} rounds)")
    if r:
        out.append(f"runner-up: {r['name']}, goodput {fmt_ci(r['ci'])} req/s at {tune.describe_load(r['load'])} "
                   f"(n={r['ci']['n']} rounds)")
    if ch.get("ratio") and ch["ratio"].get("n"):
        out.append(f"best / runner-up, round by round: {fmt_ci(ch['ratio'])} (n={ch['ratio']['n']} rounds)")
    if ch.get("tied"):
        out.append("within the best's interval: " + ", ".join(ch["tied"]))
    top = max((float(c["load"]["value"]) for cells in model["cells"].values() for c in cells
               if c["load"]["kind"] == "rate"), default=None)
    capped = [e["name"] for e in ([b, r] if b and r else []) if e["load"]["kind"] == "rate"
              and float(e["load"]["value"]) == top and not _cell_of(model, e["name"], e["load"])["stats"]["saturated"]]
    if capped and ch["verdict"] != "winner":
        out.append(f"{' and '.join(capped)} kept up with the highest rate ({top:g} req/s): "
                   "its goodput there is the offered rate, not its limit; add higher rates to separate them")
    sp = ch.get("speculative") or {}
    if sp.get("best") and sp.get("runner_up") and (not b or b["algorithm"] == "NONE" or sp["best"]["name"] != b["name"]
                                                   or sp["runner_up"]["name"] != (r or {}).get("name")):
        word = {"winner": "clear of", "no_winner": "not clear of", "too_few_rounds": "(no interval) vs"}.get(
            sp["verdict"], "vs")
        out.append(f"among the speculative configurations: {sp['best']['name']} {fmt_ci(sp['best']['ci'])} {word} "
                   f"{sp['runner_up']['name']} {fmt_ci(sp['runner_up']['ci'])}")
    return out


# ------------------------------------------------------------------ templates


def _env(templates_dir, latex=False):
    import jinja2

    kw = {"loader": jinja2.FileSystemLoader(templates_dir), "undefined": jinja2.StrictUndefined,
          "keep_trailing_newline": True, "trim_blocks": True, "lstrip_blocks": True, "autoescape": False}
    if latex:
        kw.update(block_start_string=r"\BLOCK{", block_end_string="}", variable_start_string=r"\VAR{",
                  variable_end_string="}", comment_start_string=r"\#{", comment_end_string="}",
                  line_comment_prefix="%#")
    env = jinja2.Environment(**kw)
    env.filters["tex"] = tex_escape
    env.filters["texb"] = lambda v: tex_escape(v, breaks=True)
    env.filters["md"] = lambda v: str(v).replace("|", "\\|").replace("\n", " ")
    return env


def context(model, charts, proposal) -> dict:
    run = model["run"]
    rel = dict({"id": None, "sglang": None}, **(run.get("release") or {}))
    t = dict({"loads_text": "", "prompts_text": "", "ci_target": 0.05, "min_rounds": "?",
              "max_rounds": "?", "budget": "?"}, **(run.get("tune") or {}))
    run = dict({"run": "?", "host": "?", "base_instance": "?", "started": "?", "finished": None}, **run)
    configs = []
    for c in model["configs"].values():
        words = ["python", "-m", "sglang.launch_server", *redact_args(c.get("args"))]
        configs.append({"name": c["name"], "algorithm": c.get("algorithm"),
                        "where": (f"running instance {c.get('running')}" if c.get("running") else
                                  f"GPU {','.join(str(g) for g in c.get('gpus') or [])}, port {c.get('port')}"),
                        "md_lines": wrap_command(words, MD_WIDTH), "tex_lines": wrap_command(words, TEX_WIDTH),
                        "changes": c.get("changes") or []})
    failed = []
    for r in model["failures"]:
        d = r.get("diagnosis") or {}
        failed.append({"name": r["config"]["name"], "stage": r.get("stage"),
                       "cause": (f"{d['cause']}: {d.get('summary') or ''}".strip() if d.get("cause") else r.get("error"))
                       or "unknown cause", "remedy": d.get("remedy")})
    command = run.get("command") or "ansible-playbook playbooks/tune.yml"
    loads = sorted({(c["load"]["kind"] != "concurrency", float(c["load"]["value"])) for cells in model["cells"].values()
                    for c in cells})
    t["loads_text"] = "; ".join(tune.describe_load({"kind": "rate" if k else "concurrency", "value": v})
                                for k, v in loads) or "nothing measured"
    if t.get("rates") == "auto":
        fr = ", ".join(f"{f:g}" for f in t.get("rate_fractions") or tune.RATE_FRACTIONS)
        t["loads_text"] += f" (the rates: auto, {fr} x the best closed-loop request rate of the first round)"
    return {
        "run": run, "release": rel, "tune": t, "standin": model["standin"], "dummy": model["dummy"],
        "standin_stamp": STANDIN_STAMP, "dummy_stamp": DUMMY_STAMP,
        "objective": gp.describe_objective(model["objective"]), "confidence": round(100 * model["confidence"]),
        "choice": model["choice"], "choice_lines": choice_lines(model), "tables": tables(model),
        "col_spec": col_spec, "charts": [dict(charts[k], name=k) for k in CHARTS_ORDER if k in charts],
        "configs": configs, "failed": failed, "refused": model["refused"], "rounds": model["rounds"],
        "proposal": dict({"changed": False, "diff": "", "snippet": "", "note": "", "file": None}, **(proposal or {})),
        "proposal_tex": wrap_text(((proposal or {}).get("diff") or (proposal or {}).get("snippet") or ""), TEX_WIDTH),
        "command_md": wrap_command(command.split(), MD_WIDTH),
        "command_tex": wrap_command(command.split(), TEX_WIDTH),
        "stop_reasons": ci.STOP_REASONS, "prompts": t.get("prompts_text") or "",
    }


def apply_command(host, run_dir) -> str:
    """The step that deploys a run's choice (playbooks/tune-apply.yml)."""
    return f"ansible-playbook playbooks/tune-apply.yml -l {host} -e tune_run={os.path.normpath(run_dir)}"


def render(run_dir, templates_dir, proposal=None, pdf=True, charts=True) -> dict:
    """-> {files, model, choice, charts, pdf, warnings}."""
    model = analyse(run_dir)
    files, warnings, drawn = [], [], {}
    try:
        drawn = draw_all(model, os.path.join(run_dir, "charts")) if charts else {}
    except ImportError as exc:
        warnings.append(f"no charts: {exc} (matplotlib is in pyproject.toml: uv sync)")
    files += [c["path"] for c in drawn.values()]
    ctx = context(model, drawn, proposal)
    ctx["apply_command"] = apply_command(ctx["run"]["host"], run_dir)
    md = _env(templates_dir).get_template("report.md.j2").render(**ctx)
    files.append(write_text(os.path.join(run_dir, "report.md"), md))
    tex_path = write_text(os.path.join(run_dir, "report.tex"),
                          _env(templates_dir, latex=True).get_template("report.tex.j2").render(**ctx))
    files.append(tex_path)
    pdf_res = compile_pdf(tex_path) if pdf else {"pdf": None, "error": "PDF not asked for"}
    if pdf_res.get("pdf"):
        files.append(pdf_res["pdf"])
    elif pdf:
        warnings.append(f"no PDF: {pdf_res.get('error')}" + (f"; {pdf_res['hint']}" if pdf_res.get("hint") else ""))
    summary = {"choice": _plain_choice(model["choice"]), "standin": model["standin"], "dummy": model["dummy"],
               "entries": [_plain_entry(e) for e in model["entries"]], "tables": ctx["tables"],
               "charts": {k: {"title": v["title"], "series": v["series"]} for k, v in drawn.items()},
               "failed": ctx["failed"], "refused": model["refused"], "rounds": model["rounds"],
               "proposal": {k: (proposal or {}).get(k) for k in ("changed", "file", "diff", "note", "snippet")}}
    files.append(write_text(os.path.join(run_dir, "results.json"), json.dumps(summary, indent=1, default=str) + "\n"))
    if proposal and proposal.get("diff"):
        files.append(write_text(os.path.join(run_dir, "inventory.diff"), proposal["diff"]))
    return {"files": sorted(files), "model": model, "summary": summary, "charts": drawn, "pdf": pdf_res.get("pdf"),
            "warnings": warnings, "lines": choice_lines(model)}


def _plain_entry(e):
    if not e:
        return None
    return {k: e.get(k) for k in ("name", "algorithm", "budget", "topk", "mode", "attention_backend", "load", "ci",
                                  "by_round")}


def _plain_choice(ch):
    sp = ch.get("speculative") or {}
    return {"verdict": ch["verdict"], "text": ch["text"], "best": _plain_entry(ch.get("best")),
            "runner_up": _plain_entry(ch.get("runner_up")), "ratio": ch.get("ratio"), "tied": ch.get("tied"),
            "ranking": ch.get("ranking"),
            "speculative": {"verdict": sp.get("verdict"), "best": _plain_entry(sp.get("best")),
                            "runner_up": _plain_entry(sp.get("runner_up")), "ratio": sp.get("ratio")}}
