"""The benchmark matrix: configurations x workloads x concurrency levels -> waves of cells.

A configuration is one server (algorithm, DDTree budget/top-k, attention backend, TP width, ...);
a cell is one (configuration, workload, concurrency) measurement against it. This file expands
and checks what the user declared (every error at once, each naming the host, the configuration
and the field in the user's words), names configurations, groups them into waves (configurations
started together) and estimates the time left. Pure functions; no Ansible import.
"""

from __future__ import annotations

import itertools
import re

from ansible.module_utils.dflash_instances.fields import ALGORITHMS as _INSTANCE_ALGORITHMS
from ansible.module_utils.dflash_instances.fields import DDTREE_MODES

ALGORITHMS = tuple(sorted(_INSTANCE_ALGORITHMS, key=("NONE", "DFLASH", "DDTREE").index))  # report order
WORKLOADS = ("seeds", "random", "agent")
CONFIG_KEYS = {
    "name", "algorithm", "budget", "topk", "mode", "attention_backend", "tp", "gpus", "draft_model_path",
    "mem_fraction_static", "extra_args", "env", "running",
}
SWEEP_KEYS = ("algorithm", "budget", "topk", "mode", "attention_backend", "tp")
SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,47}$")
VAR = "dflash_bench_configurations"


class MatrixError(Exception):
    """The declared matrix is wrong; ``errors`` lists every problem."""

    def __init__(self, errors):
        super().__init__("; ".join(errors))
        self.errors = list(errors)


def _int(value):
    if isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def config_name(cfg: dict) -> str:
    """none | dflash | ddtree-b15-k8 [-<backend>] [-tp2]; the user's name wins."""
    if cfg.get("name"):
        return str(cfg["name"])
    algo = str(cfg.get("algorithm") or "DFLASH").upper()
    if cfg.get("running"):
        base = f"running-{cfg['running']}"
    elif algo == "DDTREE":
        base = f"ddtree-b{cfg.get('budget', 15)}-k{cfg.get('topk', 8)}"
        if cfg.get("mode") and cfg["mode"] != "tree":
            base += f"-{cfg['mode']}"
    else:
        base = algo.lower()
    if cfg.get("attention_backend"):
        base += f"-{cfg['attention_backend']}"
    if _int(cfg.get("tp")) and _int(cfg.get("tp")) > 1:
        base += f"-tp{cfg['tp']}"
    return base.lower()


def sweep_configs(sweep) -> list:
    """{algorithm: [DDTREE], budget: [7, 15], topk: [1, 8]} -> the cross product as configurations."""
    if not sweep:
        return []
    keys = [k for k in SWEEP_KEYS if k in sweep]
    if not keys:
        return []
    values = [sweep[k] if isinstance(sweep[k], list) else [sweep[k]] for k in keys]
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*values)]


def normalize(configurations, sweep=None, host="host", lenient=False):
    """Configurations (declared + swept) with defaults applied and names given; raises MatrixError
    listing every problem. ``lenient``: return (the configurations without a problem, the errors), so that
    the caller can check those further and report everything at once."""
    errors = []
    raw = list(configurations or []) + sweep_configs(sweep)
    if isinstance(sweep, dict):
        for key in sorted(set(sweep) - set(SWEEP_KEYS)):
            errors.append(f"{host}: dflash_bench_sweep: field '{key}': not a sweep axis "
                          f"(axes: {', '.join(SWEEP_KEYS)})")
    out, seen, bad = [], {}, set()
    for i, cfg in enumerate(raw):
        n_errors = len(errors)
        where = f"{host}: {VAR}[{i}]"
        if not isinstance(cfg, dict):
            errors.append(f"{where}: must be a mapping, got {cfg!r}")
            continue
        name = config_name(cfg)
        where = f"{where} ({name})"
        for key in sorted(set(cfg) - CONFIG_KEYS):
            errors.append(f"{where}: field '{key}': unknown (known: {', '.join(sorted(CONFIG_KEYS))})")
        c = {"name": name, "algorithm": str(cfg.get("algorithm") or "DFLASH").upper()}
        if c["algorithm"] not in ALGORITHMS:
            errors.append(f"{where}: field 'algorithm': {cfg.get('algorithm')!r} is not one of {', '.join(ALGORITHMS)}")
        if not SLUG_RE.match(name):
            errors.append(f"{where}: field 'name': {name!r} must match {SLUG_RE.pattern} (it names files and a unit)")
        if name in seen:
            errors.append(f"{where}: field 'name': {name!r} is also configuration #{seen[name]}; names must differ")
        seen.setdefault(name, i)
        if c["algorithm"] == "DDTREE":
            for key, default, low, high in (("budget", 15, 1, 64), ("topk", 8, 1, 64)):
                v = _int(cfg.get(key, default))
                if v is None or not low <= v <= high:
                    errors.append(f"{where}: field '{key}': {cfg.get(key)!r} must be an integer {low}..{high}")
                c[key] = v
            c["mode"] = cfg.get("mode") or "tree"
            if c["mode"] not in DDTREE_MODES:
                errors.append(f"{where}: field 'mode': {c['mode']!r} is not one of {', '.join(DDTREE_MODES)}")
        else:
            for key in ("budget", "topk", "mode"):
                if cfg.get(key) is not None:
                    errors.append(f"{where}: field '{key}': only DDTREE has a {key} (algorithm is {c['algorithm']})")
        if cfg.get("tp") is not None:
            tp = _int(cfg["tp"])
            if tp is None or tp < 1:
                errors.append(f"{where}: field 'tp': {cfg['tp']!r} must be a positive integer")
            c["tp"] = tp
        if cfg.get("gpus") is not None:
            gpus = cfg["gpus"] if isinstance(cfg["gpus"], list) else None
            if gpus is None or any(_int(g) is None for g in gpus):
                errors.append(f"{where}: field 'gpus': {cfg['gpus']!r} must be a list of GPU indexes")
            else:
                c["gpus"] = [_int(g) for g in gpus]
                if c.get("tp") is not None and c["tp"] != len(c["gpus"]):
                    errors.append(f"{where}: field 'tp': {c['tp']} but {len(c['gpus'])} GPU(s) in 'gpus'")
        if cfg.get("mem_fraction_static") is not None:
            try:
                frac = float(cfg["mem_fraction_static"])
            except (TypeError, ValueError):
                frac = -1.0
            if not 0 < frac < 1:
                errors.append(f"{where}: field 'mem_fraction_static': {cfg['mem_fraction_static']!r} must be in (0, 1)")
            c["mem_fraction_static"] = frac
        for key in ("attention_backend", "draft_model_path", "running"):
            if cfg.get(key) is not None:
                c[key] = str(cfg[key])
        extra = cfg.get("extra_args") or []
        if not isinstance(extra, list) or any(isinstance(a, dict | list) for a in extra):
            errors.append(f"{where}: field 'extra_args': must be a list of arguments, one per item")
            extra = []
        c["extra_args"] = [str(a) for a in extra]
        env = cfg.get("env") or {}
        if not isinstance(env, dict):
            errors.append(f"{where}: field 'env': must be a mapping NAME: value")
            env = {}
        c["env"] = {str(k): str(v) for k, v in env.items()}
        if c.get("running") and any(c.get(k) is not None for k in ("budget", "attention_backend", "tp", "gpus")):
            errors.append(f"{where}: field 'running': a running instance is measured as it is; "
                          "budget/top-k/attention_backend/tp/gpus cannot be set with it")
        if len(errors) > n_errors:
            bad.add(len(out))
        out.append(c)
    if not out and not errors:
        errors.append(f"{host}: {VAR}: no configuration to benchmark")
    if lenient:
        return [c for k, c in enumerate(out) if k not in bad], errors
    if errors:
        raise MatrixError(errors)
    return out


def check_workloads(workloads, concurrency, host="host") -> list:
    """Errors in the workload names and concurrency levels (empty when fine)."""
    errors = []
    if not workloads:
        errors.append(f"{host}: dflash_bench_workloads: empty (choose from {', '.join(WORKLOADS)})")
    for w in workloads or []:
        if w not in WORKLOADS:
            errors.append(f"{host}: dflash_bench_workloads: {w!r} is not one of {', '.join(WORKLOADS)}")
    if not concurrency:
        errors.append(f"{host}: dflash_bench_concurrency: empty (e.g. [1, 4])")
    for c in concurrency or []:
        if _int(c) is None or _int(c) < 1 or _int(c) > 256:
            errors.append(f"{host}: dflash_bench_concurrency: {c!r} must be an integer 1..256")
    return errors


def cell_id(config: str, workload: str, concurrency: int) -> str:
    return f"{config}__{workload}__c{int(concurrency)}"


def waves(configs, parallel=1) -> list:
    """Configurations started together, ``parallel`` at a time; measured running instances first,
    on their own (nothing to start)."""
    parallel = max(1, int(parallel or 1))
    running = [c for c in configs if c.get("running")]
    started = [c for c in configs if not c.get("running")]
    out = [[c] for c in running]
    out += [started[i:i + parallel] for i in range(0, len(started), parallel)]
    return out


def cells(wave_list, workloads, concurrency, repeats=1) -> list:
    """Every cell in run order, numbered from 1: [{n, id, config, workload, concurrency, wave, repeat}].
    With repeats > 1 every cell of a configuration is measured that many times, one pass over its
    workloads and concurrency levels after the other (ids end in __r1, __r2, ...)."""
    repeats = max(1, int(repeats or 1))
    out = []
    for w, wave in enumerate(wave_list):
        for cfg in wave:
            for rep in range(1, repeats + 1):
                for workload in workloads:
                    for conc in concurrency:
                        cid = cell_id(cfg["name"], workload, conc) + (f"__r{rep}" if repeats > 1 else "")
                        out.append({"n": len(out) + 1, "id": cid, "config": cfg["name"], "workload": workload,
                                    "concurrency": int(conc), "wave": w, "repeat": rep})
    return out


MAX_REPEATS = 20


def check_repeats(repeats, host="host") -> list:
    r = None if isinstance(repeats, float) and not repeats.is_integer() else _int(repeats)
    if r is None or not 1 <= r <= MAX_REPEATS:
        return [f"{host}: dflash_bench_repeats: {repeats!r} is not a whole number from 1 to {MAX_REPEATS}"]
    return []


def fmt_seconds(seconds) -> str:
    s = max(0, round(float(seconds or 0)))
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def progress(n, total, elapsed, done_cells=None) -> str:
    """'cell 5 of 24, 1m10s elapsed, about 4m12s left' (the estimate: mean time of the cells done so
    far, start-ups included, times the cells left)."""
    done = (n - 1) if done_cells is None else done_cells
    line = f"cell {n} of {total}, {fmt_seconds(elapsed)} elapsed"
    if done > 0:
        line += f", about {fmt_seconds(float(elapsed) / done * (total - done))} left"
    return line
