"""Render a benchmark run's folder: tables (CSV/JSON), charts, report.md, report.tex (+ PDF).

Works on any run folder with run.json and cells/*.json, finished or not (an interrupted run is
rendered with what it has). Charts need matplotlib; without it the report says so and the rest is
written. No Ansible import.
"""

from __future__ import annotations

import json
import os

from ansible.module_utils.dflash_bench import latex, markdown
from ansible.module_utils.dflash_bench import results as res
from ansible.module_utils.dflash_bench.charts import draw_all
from ansible.module_utils.dflash_bench.workloads import describe


def render_run(run_dir, compare_to=None, results_dir=None, pdf=True, charts=True) -> dict:
    """-> {files, charts, rows, cells, failed, standin, compare, warnings}."""
    data = res.load_run(run_dir)
    run, cells = data["run"], data["cells"]
    if not cells:  # the cells are the source: without them the tables would be rewritten empty
        try:
            had = len(res.read_json(os.path.join(run_dir, "results.json")).get("rows") or [])
        except (OSError, ValueError):
            had = 0
        if had:
            raise ValueError(f"no cells/*.json in {run_dir}, but its results.json has {had} rows: "
                             "restore the cells folder (e.g. unpack cells.tar.xz there) before rendering again")
    rows = [res.row(c) for c in cells]
    standin = next((r["stand_in"] for r in rows if r.get("stand_in")), None) or run.get("stand_in")
    files, warnings = [], []
    for c in cells:
        if c.get("requests"):
            path = os.path.join(run_dir, "cells", c["cell"] + ".csv")
            files.append(res.write_text(path, res.to_csv(c["requests"], res.REQUEST_FIELDS)))
    files.append(res.write_text(os.path.join(run_dir, "results.csv"), res.to_csv(rows, ("cell",) + res.ROW_FIELDS)))
    # repeats: charts and the comparison use each cell's medians; the spread gets its own table
    med, spread = res.medians(rows)
    compare, compare_name = None, None
    if compare_to:
        other = res.find_run(results_dir or os.path.dirname(os.path.abspath(run_dir)), compare_to,
                             host=run.get("host"), exclude=run_dir)
        if other is None:
            warnings.append(f"compare_to={compare_to}: no run folder and no run of that release found")
        else:
            odata = res.load_run(other)
            compare = res.compare(med, res.medians([res.row(c) for c in odata["cells"]])[0])
            compare_name = f"{os.path.basename(other)} (release {odata['run'].get('release', {}).get('id')})"
    drawn = {}
    try:  # matplotlib is imported when drawing: a controller without it still gets the tables
        if rows and charts:
            drawn = draw_all(med, os.path.join(run_dir, "charts"), standin,
                             markdown.dummy_weights((run.get("plan") or {}).get("configurations")))
    except ImportError as exc:
        warnings.append(f"no charts: {exc} (matplotlib is in pyproject.toml: uv sync)")
    files += [c["path"] for c in drawn.values()]
    configs = (run.get("plan") or {}).get("configurations") or []
    opts = run.get("options") or {}
    wtext = {w: describe(w, opts) for w in run.get("workloads") or []}
    md = markdown.render(run, rows, configs, drawn, compare, compare_name, wtext, spread)
    files.append(res.write_text(os.path.join(run_dir, "report.md"), md))
    tex = res.write_text(os.path.join(run_dir, "report.tex"),
                         latex.render(run, rows, configs, drawn, compare, compare_name, spread))
    files.append(tex)
    pdf_res = latex.compile_pdf(tex) if pdf else {"pdf": None, "error": "PDF not asked for"}
    if pdf_res.get("pdf"):
        files.append(pdf_res["pdf"])
    elif pdf:
        warnings.append(f"no PDF: {pdf_res.get('error')}" + (f"; {pdf_res['hint']}" if pdf_res.get("hint") else ""))
    summary = {"run": run.get("run"), "dir": os.path.abspath(run_dir), "rows": rows, "cells": len(rows),
               "failed": [r["cell"] for r in rows if r["status"] == "failed"], "standin": standin,
               "charts": {k: {"title": v["title"], "series": v["series"]} for k, v in drawn.items()},
               "compare": compare, "compare_name": compare_name, "spread": spread, "pdf": pdf_res.get("pdf"),
               "files": sorted(files),
               "warnings": warnings}
    res.write_text(os.path.join(run_dir, "results.json"), json.dumps(
        {"run": run, "rows": rows, "spread": spread, "compare": compare, "charts": summary["charts"]}, indent=1,
        default=str) + "\n")
    return summary


def lines(summary) -> list:
    """What the play prints at the end."""
    out = [f"report: {summary['dir']}/report.md" + (f" and {summary['pdf']}" if summary.get("pdf") else "")]
    if summary.get("standin"):
        out.append(f"STAND-IN figures, not SGLang (the server says: {summary['standin']})")
    for r in summary["rows"]:
        acc = r.get("accept_length")
        fig = (f"{r['output_tok_s']} tok/s, accept {acc if acc is not None else '-'}" if r.get("output_tok_s")
               else (r.get("cause") or r["status"]))
        rep = f" / r{r['repeat']}" if summary.get("spread") else ""
        out.append(f"{r['config']} / {r['workload']} / c{r['concurrency']}{rep}: {r['status']}: {fig}")
    for s in summary.get("spread") or []:
        out.append(f"{s['config']} / {s['workload']} / c{s['concurrency']}: median {s['tok_s_median']} tok/s over "
                   f"{s['measured']} of {s['repeats']} repeats, {s['tok_s_min']}-{s['tok_s_max']} (x{s['spread']})")
    for c in summary.get("compare") or []:
        if c.get("tok_s_ratio") is not None:
            out.append(f"vs {summary['compare_name']}: {c['config']} / {c['workload']} / c{c['concurrency']}: "
                       f"x{c['tok_s_ratio']}")
    return out + [f"warning: {w}" for w in summary.get("warnings") or []]
