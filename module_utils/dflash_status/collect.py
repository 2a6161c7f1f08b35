"""What runs on one host, read from the host alone (library/dflash_status.py's work): the current release and its
verdict, each instance's unit state, health and the server's own /metrics text, the release's smoke figures,
drift of its files, the host now against the fingerprint the release was made for, disk use, and every
release's algorithm per instance (the guard's perf baseline).

Nothing here writes, starts or stops anything: unit states come from the service backend's ``state`` (systemctl
show, or the runner's pidfile), the servers are asked GET /health and GET /metrics (both open without an API key
in sglang), files are read. The /metrics text is returned as it is (the lines of the metrics status reads): the
controller parses it with prometheus_client (module_utils/dflash_status/figures.py). No Ansible import.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request

from ansible.module_utils.dflash_common.argv import arg_value, has_flag
from ansible.module_utils.dflash_common.net import instance_address
from ansible.module_utils.dflash_release.journal import ActivationError, current_target, read_journal
from ansible.module_utils.dflash_release.order import order_releases
from ansible.module_utils.dflash_release.smoke import expected_algorithm
from ansible.module_utils.dflash_release.store import load_releases, load_statuses, read_json, releases_dir
from ansible.module_utils.dflash_release.wait import health_status
from ansible.module_utils.dflash_status.disk import disk_use
from ansible.module_utils.dflash_status.drift import drift
from ansible.module_utils.dflash_status.host import compare

# the series of the server's /metrics that status reads (figures.py): sglang 0.5.11's names
# (roles/dflash_metrics/files/exported-metrics.yml)
METRICS = ("sglang:spec_accept_length", "sglang:spec_accept_rate", "sglang:gen_throughput", "sglang:num_running_reqs",
           "sglang:num_queue_reqs", "sglang:token_usage", "sglang:generation_tokens_total")
METRICS_MAX_BYTES = 4 * 1024 * 1024
SHOW_KEYS = ("LoadState", "ActiveState", "SubState", "Result", "NRestarts", "ExecMainPID", "ActiveEnterTimestamp",
             "ActiveEnterTimestampMonotonic", "error")


def metrics_text(base_url: str, timeout: float = 5.0) -> tuple:
    """(the /metrics lines of METRICS with their HELP/TYPE lines, None) or (None, why not)."""
    try:
        with urllib.request.urlopen(base_url + "/metrics", timeout=timeout) as resp:
            raw = resp.read(METRICS_MAX_BYTES).decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return None, f"/metrics answered HTTP {exc.code}"
    except (OSError, urllib.error.URLError, ValueError) as exc:
        return None, f"/metrics: {getattr(exc, 'reason', exc)}"
    keep = []
    for line in raw.splitlines():
        words = line.split()
        if line.startswith("#") and len(words) > 2 and words[1] in ("HELP", "TYPE"):
            name = words[2]
        else:
            name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in METRICS:
            keep.append(line)
    return "\n".join(keep) + "\n", None


def release_figures(release_dir: str, name: str) -> dict | None:
    """The figures the release measured for an instance in its smoke test (smoke.perf medians): what the alert
    rules and the guard compare the live ones with."""
    try:
        rec = read_json(os.path.join(release_dir, "smoke", name + ".json"))
    except (OSError, ValueError):
        return None
    smoke = (rec or {}).get("smoke") or {}
    perf = smoke.get("perf") or {}
    if not perf:
        return None
    return {"accept_length": perf.get("accept_length_median"), "tokens_per_s": perf.get("tokens_per_s_median"),
            "passed": smoke.get("passed"), "timing": perf.get("timing")}


def algorithms(prefix: str) -> list:
    """Every release, oldest first: {id, status, algorithms: {instance: DFLASH | DDTREE | NONE}}."""
    manifests, _problems = load_releases(prefix)
    ordered = order_releases(manifests)
    statuses = load_statuses(prefix, [m["id"] for m in ordered])
    return [{"id": m["id"], "status": (statuses.get(m["id"]) or {}).get("status", "unknown"),
             "algorithms": {n: expected_algorithm((e or {}).get("args") or []) or "NONE"
                            for n, e in sorted((m.get("instances") or {}).items())}} for m in ordered]


def instance_state(name: str, entry: dict, backend, release_dir: str, fetch_metrics=True, health=health_status,
                   metrics=metrics_text) -> dict:
    entry = entry or {}
    args = entry.get("args") or []
    unit = entry.get("unit") or f"dflash-{name}.service"
    port, url = instance_address(entry)
    state = backend.state(unit)
    out = {"unit": unit, "port": port, "base_url": url, "algorithm": expected_algorithm(args) or "NONE",
           # an instance on an sglang version other than the host's records its own (and its venv and tree)
           "sglang_version": entry.get("sglang_version"), "tree": entry.get("tree_path"),
           "unit_state": {k: state[k] for k in SHOW_KEYS if k in state},
           "health": health(url + "/health") if url else None,
           "args": args, "rules": [a.get("rule") for a in entry.get("applied") or [] if isinstance(a, dict)],
           "skipped": entry.get("skipped") or [], "carried": bool(entry.get("carried")),
           "node_rank": arg_value(args, "--node-rank"), "nnodes": arg_value(args, "--nnodes"),
           "metrics_enabled": has_flag(args, "--enable-metrics"),
           "release_figures": release_figures(release_dir, name)}
    if out["metrics_enabled"] and fetch_metrics and url:
        out["metrics_text"], out["metrics_error"] = metrics(url)
    return out


def models_of(manifest: dict) -> list:
    out = []
    for entry in (manifest.get("instances") or {}).values():
        args = (entry or {}).get("args") or []
        for flag in ("--model-path", "--model", "--speculative-draft-model-path", "--speculative-draft-model"):
            value = arg_value(args, flag)
            if value and value.startswith("/"):
                out.append(value)
    return sorted(set(out))


def collect(prefix: str, backend, unit_dir: str, fingerprint=None, check_tree=True, fetch_metrics=True,
            disk=True, health=health_status, metrics=metrics_text) -> dict:
    """Everything status reports about one host (see the module's RETURN)."""
    out = {"prefix": prefix, "current": current_target(prefix), "problems": []}
    try:
        j = read_journal(prefix)
    except ActivationError as exc:
        j = {"state": "unreadable", "release": None}
        out["problems"].append(str(exc))
    out["activation"] = {"state": j.get("state"), "release": j.get("release"), "started": j.get("started"),
                         "controller": j.get("controller")} if j else None
    manifests, problems = load_releases(prefix)
    out["problems"] += problems
    by_id = {m["id"]: m for m in manifests}
    out["releases"] = algorithms(prefix)
    cur = out["current"]
    m = by_id.get(cur) if cur else None
    if cur and m is None:
        out["problems"].append(f"current -> {cur}, which has no readable manifest")
    out["release"] = None
    out["instances"] = {}
    out["drift"] = []
    out["fingerprint"] = {"checked": False, "note": "no current release"}
    if m:
        rdir = os.path.join(releases_dir(prefix), cur)
        status = (load_statuses(prefix, [cur]).get(cur) or {})
        tree = m.get("tree") or {}
        out["release"] = {
            "id": cur, "sequence": m.get("sequence"), "created": m.get("created"), "previous": m.get("previous"),
            "status": status.get("status", "unknown"), "status_at": status.get("at"),
            "toolkit": m.get("toolkit"), "sglang_version": tree.get("sglang_version"),
            "series": [p.get("name") for p in tree.get("patches") or [] if isinstance(p, dict)],
            "tree": m.get("tree_path"), "venv": m.get("venv"),
            "recorded": [k for k in ("files", "fingerprint") if k in m],
        }
        out["instances"] = {n: instance_state(n, e, backend, rdir, fetch_metrics, health, metrics)
                            for n, e in sorted((m.get("instances") or {}).items())}
        out["drift"] = drift(prefix, m, unit_dir, check_tree)
        out["fingerprint"] = compare(m, fingerprint)
    if disk:
        used = {"layers": sorted({la.get("path") for mm in manifests for la in mm.get("layers") or []}),
                "trees": sorted({t for mm in manifests for t in [mm.get("tree_path")] + [
                    (e or {}).get("tree_path") for e in (mm.get("instances") or {}).values()] if t}),
                "releases": [cur] if cur else []}
        out["disk"] = disk_use(prefix, models_of(m or {}), used)
    return out
