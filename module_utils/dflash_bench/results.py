"""A benchmark run's folder on the controller: cell records, tables, the run to compare with.

    <results_dir>/<run>/run.json          what ran: host, release, fingerprint digest, matrix, plan
                        cells/<cell>.json one record per cell: configuration, full flags, workload,
                                          concurrency, status, figures, every request, diagnosis
                        cells/<cell>.csv  the cell's requests, one row each
                        results.csv       one row per cell (results.json: the same with run.json)
                        charts/*.png, report.md, report.tex, report.pdf

Secrets never reach these files: the value of --api-key and env values whose name says TOKEN, KEY,
SECRET or PASSWORD are replaced. Pure functions plus small file helpers; no Ansible import.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re

from ansible.module_utils.dflash_bench.stats import ratio
from ansible.module_utils.dflash_common.argv import arg_value

SECRET_ENV_RE = re.compile(r"TOKEN|KEY|SECRET|PASSWORD", re.IGNORECASE)
SECRET_FLAGS = ("--api-key", "--admin-api-key")
REDACTED = "<redacted>"
ROW_FIELDS = ("config", "algorithm", "budget", "topk", "attention_backend", "tp", "workload", "concurrency", "repeat",
              "status",
              "output_tok_s", "accept_length", "spec_verify_ct", "accept_length_metrics", "accept_length_server",
              "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms", "e2e_p50_ms", "requests", "completed",
              "output_tokens", "cached_ratio", "wall_s", "cause")
REQUEST_FIELDS = ("label", "worker", "turn", "ok", "skipped", "ttft", "latency", "completion_tokens", "prompt_tokens",
                  "cached_tokens", "spec_verify_ct", "spec_accept_length", "chunks", "finish_reason", "error")


def redact_args(args) -> list:
    out, hide = [], False
    for a in args or []:
        a = str(a)
        if hide:
            out.append(REDACTED)
            hide = False
        elif a in SECRET_FLAGS:
            out.append(a)
            hide = True
        elif a.split("=", 1)[0] in SECRET_FLAGS and "=" in a:
            out.append(a.split("=", 1)[0] + "=" + REDACTED)
        else:
            out.append(a)
    return out


def redact_env(env) -> dict:
    return {k: (REDACTED if SECRET_ENV_RE.search(k) else v) for k, v in (env or {}).items()}


def api_key(args):
    """The --api-key of a command line (what the benchmark client must send), or None."""
    args = [str(a) for a in args or []]
    for i, a in enumerate(args):
        if a == "--api-key" and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("--api-key="):
            return a.split("=", 1)[1]
    return None


def config_view(entry) -> dict:
    """A planned configuration as the results show it (flags redacted, no env file text)."""
    keep = ("name", "algorithm", "budget", "topk", "mode", "attention_backend", "tp", "gpus", "port", "unit", "running",
            "wave", "block_size", "changes", "overrides", "draft_model_path")
    out = {k: entry.get(k) for k in keep if entry.get(k) is not None}
    out["args"] = redact_args(entry.get("args"))
    out["env"] = redact_env(entry.get("env"))
    return out


def cell_record(run, entry, cell, measured=None, failure=None) -> dict:
    """One cell's record. ``measured``: dflash_bench_cell's result; ``failure``: {stage, msg, diagnosis}
    when the configuration never served (the cell then carries the cause)."""
    rec = {"run": run.get("run"), "host": run.get("host"), "release_id": run.get("release_id"),
           "fingerprint_digest": run.get("fingerprint_digest"), "stand_in": None,
           "cell": cell["id"], "n": cell.get("n"), "config": config_view(entry), "workload": cell["workload"],
           "concurrency": int(cell["concurrency"]), "repeat": int(cell.get("repeat") or 1)}
    if failure:
        diag = failure.get("diagnosis") or {}
        rec.update(status=failure.get("status", "failed"), stage=failure.get("stage"), error=failure.get("msg"),
                   diagnosis={k: diag.get(k) for k in ("cause", "summary", "remedy", "evidence") if diag.get(k)})
        return rec
    m = measured or {}
    after = m.get("server_after") or {}
    rec.update(status=m.get("status", "failed"), summary=m.get("summary") or {}, requests=m.get("requests") or [],
               server_before=m.get("server_before"), server_after=after, warmup=m.get("warmup"),
               seconds=m.get("seconds"), errors=m.get("errors") or [])
    # a server that is not sglang says so itself (/get_server_info "stand_in"); no inventory flag
    info = after.get("server_info") or (m.get("server_before") or {}).get("server_info") or {}
    rec["stand_in"] = info.get("stand_in") or None
    if m.get("status") == "failed":
        rec["error"] = "; ".join(m.get("errors") or []) or "no request completed"
    return rec


def start_failures(results, late=False, wave=()) -> dict:
    """{configuration: {stage, status, msg, diagnosis}} of a wave's servers that did not come up, from the
    async_status results of their dflash_wait calls (a server that passed is absent)."""
    if late:
        return {c["name"]: {"stage": "deadline", "status": "skipped",
                            "msg": f"{c['name']}: not started: the run's deadline (dflash_bench_deadline) was reached"}
                for c in wave}
    out = {}
    for r in results or []:
        name = ((r.get("__dflash_bench_job") or {}).get("__dflash_bench_cfg") or {}).get("name")
        if not name:
            continue
        if not r.get("finished"):
            out[name] = {"stage": "start", "msg": f"{name}: no verdict before the start timeout"}
            continue
        if r.get("verdict") == "healthy" and not r.get("failed_instances") and not r.get("msg"):
            continue
        smoke = (r.get("smoke") or {}).get(name) or {}
        inst = (r.get("instances") or {}).get(name) or {}
        out[name] = {"stage": "smoke" if smoke and not smoke.get("passed") else "start",
                     "msg": r.get("msg") or r.get("module_stderr") or f"{name}: {r.get('verdict')}",
                     "diagnosis": inst.get("diagnosis")}
    return out


def wave_records(meta, configs, cells, measured, failures) -> list:
    """The records of a wave's cells: measured (dflash_bench_measure loop results, one per configuration,
    ``item`` = the configuration), or the configuration's failure, or skipped when nothing says more."""
    by_cell = {}
    for result in measured or []:
        cfg = (result.get("__dflash_bench_cfg") or result.get("item") or {}).get("name")
        got = result.get("cells") if isinstance(result.get("cells"), dict) else None
        for cell in cells:
            if cell["config"] != cfg:
                continue
            if got is not None and cell["id"] in got:
                by_cell[cell["id"]] = ("measured", got[cell["id"]])
            else:
                why = result.get("msg") or result.get("module_stderr") or "the measurement returned nothing"
                by_cell[cell["id"]] = ("failed", {"stage": "measure", "msg": str(why)[:2000]})
    out = []
    for cell in cells:
        entry = configs.get(cell["config"]) or {"name": cell["config"]}
        kind, value = by_cell.get(cell["id"], (None, None))
        if cell["config"] in (failures or {}):
            out.append(cell_record(meta, entry, cell, failure=failures[cell["config"]]))
        elif kind == "measured" and value.get("status") == "skipped":
            out.append(cell_record(meta, entry, cell, failure={"stage": "deadline", "status": "skipped",
                                                              "msg": "; ".join(value.get("errors") or [])}))
        elif kind == "measured":
            out.append(cell_record(meta, entry, cell, measured=value))
        elif kind == "failed":
            out.append(cell_record(meta, entry, cell, failure=value))
        else:
            out.append(cell_record(meta, entry, cell, failure={"stage": "deadline", "status": "skipped",
                                                              "msg": "not measured (the run's deadline)"}))
    return out


def row(rec) -> dict:
    """The flat table row of a cell record."""
    cfg, s = rec.get("config") or {}, rec.get("summary") or {}
    after = rec.get("server_after") or {}
    diag = rec.get("diagnosis") or {}
    cause = None
    if rec.get("status") == "failed":
        cause = diag.get("cause") and f"{diag['cause']}: {diag.get('summary') or ''}".strip()
        cause = cause or rec.get("error")
    return {
        "cell": rec.get("cell"), "config": cfg.get("name"), "algorithm": cfg.get("algorithm"), "budget": cfg.get("budget"),
        "topk": cfg.get("topk"), "attention_backend": cfg.get("attention_backend") or arg_value(cfg.get("args"),
                                                                                              "--attention-backend"),
        "tp": cfg.get("tp") or (len(cfg["gpus"]) if cfg.get("gpus") else None), "workload": rec.get("workload"),
        "concurrency": rec.get("concurrency"), "repeat": rec.get("repeat") or 1, "status": rec.get("status"),
        "output_tok_s": s.get("output_tok_s"), "accept_length": s.get("accept_length"),
        "spec_verify_ct": s.get("spec_verify_ct"),
        "accept_length_metrics": None if cfg.get("algorithm") == "NONE"
        else (after.get("metrics") or {}).get("spec_accept_length"),
        "accept_length_server": (after.get("server_info") or {}).get("avg_spec_accept_length"),
        "ttft_p50_ms": s.get("ttft_p50_ms"), "ttft_p99_ms": s.get("ttft_p99_ms"), "itl_p50_ms": s.get("itl_p50_ms"),
        "itl_p99_ms": s.get("itl_p99_ms"), "e2e_p50_ms": s.get("e2e_p50_ms"), "requests": s.get("requests"),
        "completed": s.get("completed"), "output_tokens": s.get("output_tokens"), "cached_ratio": s.get("cached_ratio"),
        "wall_s": s.get("wall_s"), "cause": cause, "stand_in": rec.get("stand_in"),
        "remedy": diag.get("remedy"),
    }


def to_csv(rows, fields) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(fields), extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in fields})
    return buf.getvalue()


def read_json(path):
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def write_text(path, text) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)
    return path


def load_run(run_dir) -> dict:
    """{run, cells: [records in run order]} of a run folder."""
    run = read_json(os.path.join(run_dir, "run.json"))
    cdir = os.path.join(run_dir, "cells")
    cells = [read_json(os.path.join(cdir, f)) for f in sorted(os.listdir(cdir)) if f.endswith(".json")] \
        if os.path.isdir(cdir) else []
    cells.sort(key=lambda r: (r.get("n") or 0, r.get("cell") or ""))
    return {"run": run, "cells": cells, "dir": run_dir}


def find_run(results_dir, ref, host=None, exclude=None):
    """The run folder ``ref`` names: a path, a run name under results_dir, or a release id (the newest
    run of that release, on ``host`` when given). None when nothing matches."""
    if not ref:
        return None
    for cand in (ref, os.path.join(results_dir, ref)):
        if os.path.isfile(os.path.join(cand, "run.json")):
            return os.path.abspath(cand)
    found = []
    for name in sorted(os.listdir(results_dir)) if os.path.isdir(results_dir) else []:
        path = os.path.join(results_dir, name)
        if exclude and os.path.abspath(path) == os.path.abspath(exclude):
            continue
        try:
            run = read_json(os.path.join(path, "run.json"))
        except (OSError, ValueError):
            continue
        if run.get("release_id") == ref and (host is None or run.get("host") == host):
            found.append((run.get("started") or "", path))
    return os.path.abspath(max(found)[1]) if found else None


def compare(rows_new, rows_old) -> list:
    """Cells of both runs side by side, matched by (configuration, workload, concurrency), with the
    ratio new/old of tok/s and of the accept length."""
    old = {(r["config"], r["workload"], r["concurrency"]): r for r in rows_old}
    out = []
    for r in rows_new:
        o = old.get((r["config"], r["workload"], r["concurrency"])) or {}
        out.append({"config": r["config"], "workload": r["workload"], "concurrency": r["concurrency"],
                    "tok_s": r.get("output_tok_s"), "tok_s_other": o.get("output_tok_s"),
                    "tok_s_ratio": ratio(r.get("output_tok_s"), o.get("output_tok_s")),
                    "accept": r.get("accept_length"), "accept_other": o.get("accept_length"),
                    "accept_ratio": ratio(r.get("accept_length"), o.get("accept_length")),
                    "status": r.get("status"), "status_other": o.get("status", "absent")})
    return out


# the figures of a row that are medians over a cell's repeats
MEDIAN_FIELDS = ("output_tok_s", "accept_length", "spec_verify_ct", "accept_length_metrics", "accept_length_server",
                 "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms", "e2e_p50_ms", "cached_ratio", "wall_s")


def _median(values):
    vals = sorted(v for v in values if isinstance(v, (int, float)))
    if not vals:
        return None
    mid = len(vals) // 2
    return vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2


def medians(rows):
    """Rows measured several times (repeats) -> (one row per configuration, workload and concurrency with
    the medians of its measured repeats, the spread of each: [{config, workload, concurrency, repeats,
    measured, tok_s_median, tok_s_min, tok_s_max, spread (max/min), accept_median}]). Without repeats
    the rows come back as they are and the spread is empty."""
    groups = {}
    for r in rows:
        groups.setdefault((r["config"], r["workload"], r["concurrency"]), []).append(r)
    if all(len(g) == 1 for g in groups.values()):
        return list(rows), []
    out, spread = [], []
    for (cfg, workload, conc), group in groups.items():
        ok = [r for r in group if r.get("status") in ("ok", "partial") and r.get("output_tok_s") is not None]
        row = dict(group[0], cell=cell_key(cfg, workload, conc), repeat=None, repeats=len(group))
        for field in MEDIAN_FIELDS:
            row[field] = _median(r.get(field) for r in ok)
        tok = [r["output_tok_s"] for r in ok]
        row["output_tok_s_min"], row["output_tok_s_max"] = (min(tok), max(tok)) if tok else (None, None)
        row["status"] = ("ok" if len(ok) == len(group) and all(r["status"] == "ok" for r in ok)
                         else "partial" if ok else group[0].get("status"))
        if not ok:
            row["cause"] = next((r.get("cause") for r in group if r.get("cause")), None)
        out.append(row)
        spread.append({"config": cfg, "workload": workload, "concurrency": conc, "repeats": len(group),
                       "measured": len(ok), "tok_s_median": row["output_tok_s"],
                       "tok_s_min": min(tok) if tok else None, "tok_s_max": max(tok) if tok else None,
                       "spread": ratio(max(tok), min(tok)) if tok else None, "accept_median": row["accept_length"]})
    return out, spread


def cell_key(config, workload, concurrency) -> str:
    return f"{config}__{workload}__c{int(concurrency)}"
