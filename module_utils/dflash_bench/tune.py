"""tune.yml: the sweep as bench configurations, the load points, the rounds, their records and verdicts.

tune.yml runs on the bench stage's machinery (roles/dflash_bench: plan, waves of temporary servers from
the deployed release, stop): this file turns the tune variables into the bench matrix, orders a round
(every load point, the wave's configurations interleaved and their order rotated each round, so that a
slow spell of the host falls on all of them), writes one record per cell and round, and evaluates a
wave after each round (the deciding figures and the stopping rule, modules goodput and ci). Pure
functions plus small file helpers; no Ansible import.
"""

from __future__ import annotations

import json
import math
import os

from ansible.module_utils.dflash_bench import ci
from ansible.module_utils.dflash_bench import goodput as gp
from ansible.module_utils.dflash_bench import matrix as mx
from ansible.module_utils.dflash_bench.results import config_view, write_text

KIND = "tune"
RATE_FRACTIONS = (0.25, 0.5, 0.75, 1.0, 1.25)


class TuneError(ValueError):
    def __init__(self, errors):
        super().__init__("; ".join(errors))
        self.errors = list(errors)


# ------------------------------------------------------------------ the sweep as bench configurations


def with_backends(configurations, sweep, backends):
    """(configurations, sweep) with the attention backends crossed in: [] keeps each configuration on the
    release's own backend; [a, b] measures each one on a and on b (sweep axis attention_backend)."""
    configurations = [dict(c) for c in configurations or []]
    sweep = dict(sweep or {})
    if not backends:
        return configurations, sweep
    out = []
    for c in configurations:
        if c.get("running") or c.get("attention_backend"):
            out.append(c)
            continue
        out += [dict(c, attention_backend=b) for b in backends]
    if sweep:
        sweep["attention_backend"] = list(backends)
    return out, sweep


def with_env(configurations, env):
    """Every configuration gets ``env`` (dflash_bench_tune_server_env) under its own env."""
    if not env:
        return configurations
    return [dict(c, env={**{str(k): str(v) for k, v in env.items()}, **(c.get("env") or {})})
            if not c.get("running") else dict(c) for c in configurations]


def check(opts, host="host") -> list:
    """Errors of the tune variables that the bench plan does not check (every one, at once)."""
    errors = gp.check_objective(opts.get("objective"), host)
    rates = opts.get("rates")
    if rates != "auto" and (not isinstance(rates, list) or any(
            isinstance(r, bool) or not isinstance(r, (int, float)) or r <= 0 for r in rates)):
        errors.append(f"{host}: dflash_bench_tune_rates: {rates!r} must be 'auto' or a list of request rates > 0 "
                          "(requests/s; [] for closed loop only)")
    fr = opts.get("rate_fractions", list(RATE_FRACTIONS))
    if not isinstance(fr, list) or not fr or any(isinstance(f, bool) or not isinstance(f, (int, float)) or f <= 0
                                                 for f in fr):
        errors.append(f"{host}: dflash_bench_tune_rate_fractions: {fr!r} must be a non-empty list of fractions > 0")
    conc = opts.get("concurrency")
    if not isinstance(conc, list) or any(isinstance(c, bool) or not isinstance(c, int) or not 1 <= c <= 256
                                         for c in conc):
        errors.append(f"{host}: dflash_bench_tune_concurrency: {conc!r} must be a list of integers 1..256")
    elif rates == "auto" and not conc:
        errors.append(f"{host}: dflash_bench_tune_rates: 'auto' takes its rates from the closed-loop cells: give "
                      "dflash_bench_tune_concurrency at least one level")
    elif not conc and not rates:
        errors.append(f"{host}: dflash_bench_tune_rates and dflash_bench_tune_concurrency are both empty: nothing to measure")
    for key, low, high in (("requests", 4, 100000), ("min_rounds", 2, mx.MAX_REPEATS),
                           ("max_rounds", 2, mx.MAX_REPEATS), ("budget", 60, 7 * 86400), ("cell_seconds", 1, 3600),
                           ("cell_timeout", 5, 3600)):
        v = opts.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
            errors.append(f"{host}: dflash_bench_tune_{key}: {v!r} must be a whole number from {low} to {high}")
    if isinstance(opts.get("min_rounds"), int) and isinstance(opts.get("max_rounds"), int) \
            and opts["min_rounds"] > opts["max_rounds"]:
        errors.append(f"{host}: dflash_bench_tune_min_rounds: {opts['min_rounds']} is above dflash_bench_tune_max_rounds "
                      f"{opts['max_rounds']}")
    t = opts.get("ci_target")
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t < 1:
        errors.append(f"{host}: dflash_bench_tune_ci_target: {t!r} must be a fraction in (0, 1), e.g. 0.05")
    env = opts.get("server_env")
    if not isinstance(env, dict):
        errors.append(f"{host}: dflash_bench_tune_server_env: must be a mapping NAME: value")
    backends = opts.get("attention_backends")
    if not isinstance(backends, list) or any(not isinstance(b, str) or not b for b in backends):
        errors.append(f"{host}: dflash_bench_tune_attention_backends: {backends!r} must be a list of backend names")
    return errors


# ------------------------------------------------------------------ load points and rounds


def load_key(load) -> str:
    """c4 (closed loop, 4 clients) | r2.5 (open loop, 2.5 requests/s)."""
    if load["kind"] == "concurrency":
        return f"c{int(load['value'])}"
    return f"r{float(load['value']):g}"


def describe_load(load) -> str:
    if load["kind"] == "concurrency":
        return f"closed loop, {int(load['value'])} clients"
    return f"open loop, {float(load['value']):g} req/s"


def load_points(rates, concurrency, requests, cell_seconds) -> list:
    """The cells' loads in measuring order: closed-loop levels, then rates low to high. An open-loop cell
    sends ``requests``, but no more than its rate fills in ``cell_seconds`` (at least 8)."""
    out = [{"kind": "concurrency", "value": int(c), "requests": int(requests)} for c in sorted(set(concurrency or []))]
    for r in sorted({float(r) for r in (rates if isinstance(rates, list) else [])}):
        n = max(8, min(int(requests), math.ceil(r * float(cell_seconds))))
        out.append({"kind": "rate", "value": r, "requests": n})
    return out


def _sig(x, digits=3):
    if x <= 0:
        return x
    return round(x, -math.floor(math.log10(abs(x))) + digits - 1)


def auto_rates(closed_cells, fractions=RATE_FRACTIONS) -> list:
    """Rates for 'auto' from the first round's closed-loop cells: the best completed requests/s any
    configuration reached (its capacity, near enough) times each fraction, three significant digits."""
    best = 0.0
    for c in closed_cells:
        reqs = [r for r in c.get("requests") or [] if r.get("ok")]
        if reqs and c.get("wall_s"):
            best = max(best, len(reqs) / float(c["wall_s"]))
    if best <= 0:
        return []
    return sorted({_sig(best * f) for f in fractions if best * f > 0})


def round_order(names, loads, round_no) -> list:
    """[(configuration, load)] of one round: load by load, the configurations interleaved, their order
    rotated by the round number."""
    names = list(names)
    if not names:
        return []
    k = (int(round_no) - 1) % len(names)
    rotated = names[k:] + names[:k]
    return [(n, load) for load in loads for n in rotated]


def cell_id(config, load, round_no) -> str:
    return f"{config}__{load_key(load)}__r{int(round_no)}"


# ------------------------------------------------------------------ records


def record(meta, entry, measured, round_no) -> dict:
    """One cell of one round, as written to cells/<id>.json."""
    info = (measured.get("server_after") or {}).get("server_info") or \
        (measured.get("server_before") or {}).get("server_info") or {}
    load = {k: measured["load"][k] for k in ("kind", "value", "requests")}
    return {"kind": KIND, "run": meta.get("run"), "host": meta.get("host"), "release_id": meta.get("release_id"),
            "fingerprint_digest": meta.get("fingerprint_digest"), "stand_in": info.get("stand_in") or None,
            "cell": cell_id(entry["name"], load, round_no), "config": config_view(entry), "load": load,
            "load_key": load_key(load), "round": int(round_no), "status": measured.get("status", "failed"),
            "wall_s": measured.get("wall_s"), "offered_s": measured.get("offered_s"),
            "requests": measured.get("requests") or [], "server_before": measured.get("server_before"),
            "server_after": measured.get("server_after"), "seconds": measured.get("seconds"),
            "errors": measured.get("errors") or []}


def failure_record(meta, entry, failure) -> dict:
    """A configuration whose server did not come up (or that the rules refuse): one record, its cause."""
    diag = failure.get("diagnosis") or {}
    return {"kind": KIND, "run": meta.get("run"), "host": meta.get("host"), "release_id": meta.get("release_id"),
            "fingerprint_digest": meta.get("fingerprint_digest"), "stand_in": None,
            "cell": f"{entry['name']}__{failure.get('stage', 'start')}", "config": config_view(entry), "load": None,
            "round": 0, "status": failure.get("status", "failed"), "stage": failure.get("stage"),
            "error": failure.get("msg"),
            "diagnosis": {k: diag.get(k) for k in ("cause", "summary", "remedy", "evidence") if diag.get(k)}}


def write_records(run_dir, records) -> list:
    paths = []
    for rec in records:
        paths.append(write_text(os.path.join(run_dir, "cells", rec["cell"] + ".json"), json.dumps(rec, indent=1) + "\n"))
    return paths


def append_round(run_dir, entry) -> None:
    """One line of rounds.jsonl: a wave's round, its deciding figures and the stopping verdict."""
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "rounds.jsonl"), "a", encoding="utf-8") as fh:
        fh.write(json.dumps(entry, sort_keys=True, default=str) + "\n")


def read_records(run_dir, names=None) -> list:
    """The tune records of a run folder (optionally of some configurations only), in file order."""
    folder = os.path.join(run_dir, "cells")
    out = []
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if not name.endswith(".json"):
            continue
        with open(os.path.join(folder, name), encoding="utf-8") as fh:
            rec = json.load(fh)
        if rec.get("kind") != KIND:
            continue
        if names is not None and (rec.get("config") or {}).get("name") not in names:
            continue
        out.append(rec)
    return out


def grouped(records) -> dict:
    """{configuration: {load key: {load, rounds: [{round, requests, wall_s, load}]}}} of the measured records."""
    out = {}
    for rec in records:
        if not rec.get("load") or rec.get("status") == "skipped":
            continue
        cfg = rec["config"]["name"]
        cell = out.setdefault(cfg, {}).setdefault(rec["load_key"], {"load": rec["load"], "rounds": []})
        cell["rounds"].append({"round": rec["round"], "requests": rec.get("requests") or [],
                               "wall_s": rec.get("wall_s"), "load": rec["load"]})
    for cells in out.values():
        for cell in cells.values():
            cell["rounds"].sort(key=lambda r: r["round"])
    return out


def deciding_light(cells, obj) -> dict | None:
    """The deciding figure of one configuration from its cells, goodput only (what the stopping rule needs
    after every round; the report computes every figure)."""
    light = []
    for cell in cells.values():
        per = {r["round"]: gp.round_figures(r["requests"], r["wall_s"], r["load"], obj)["goodput_rps"]
               for r in cell["rounds"]}
        light.append({"load": cell["load"], "stats": {"goodput_rps": ci.mean_ci(list(per.values())), "by_round": per}})
    return gp.deciding(light)


def evaluate(run_dir, names, obj, rounds_done, rule) -> dict:
    """After a round: every configuration's deciding figure and the stopping verdict. ``rule``: {min_rounds,
    max_rounds, ci_target, time_left_s, last_round_s}."""
    cells = grouped(read_records(run_dir, set(names)))
    deciding = {}
    for name in names:
        d = deciding_light(cells.get(name) or {}, obj)
        if d is not None:
            deciding[name] = d
    verdict = ci.stop_verdict({k: v["ci"] for k, v in deciding.items()}, rounds_done, rule.get("min_rounds", 3),
                              rule.get("max_rounds", 10), rule.get("ci_target", 0.05), rule.get("time_left_s"),
                              rule.get("last_round_s"))
    lines = []
    for name in names:
        d = deciding.get(name)
        if d is None:
            lines.append(f"{name}: no goodput measured")
            continue
        c = d["ci"]
        band = (f" [{c['low']:.3g}, {c['high']:.3g}] (+-{100 * c['rel']:.1f}%)" if c.get("rel") is not None
                else f" ({c.get('note')})")
        lines.append(f"{name}: goodput {c['mean']:.3g} req/s at {describe_load(d['load'])}{band}, n={c['n']}")
    why = ci.STOP_REASONS[verdict["reason"]]
    lines.append(f"round {rounds_done}: " + (f"stop: {why}" if verdict["stop"] else
                                             f"one more round (widest interval: {verdict['widest']}, "
                                             f"+-{100 * (verdict['widest_rel'] or 0):.1f}%; target "
                                             f"+-{100 * float(rule.get('ci_target', 0.05)):.1f}%)"))
    return {"stop": verdict["stop"], "reason": verdict["reason"], "verdict": verdict, "lines": lines,
            "deciding": {k: {"load": v["load"], "mean": v["ci"]["mean"], "low": v["ci"]["low"], "high": v["ci"]["high"],
                             "n": v["ci"]["n"]} for k, v in deciding.items()}}
