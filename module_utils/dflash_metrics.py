"""The metrics stage: Prometheus scrape targets (file_sd) for every instance and the router, and the alert
rules' per-instance figures.

Pure functions over plain data, no Ansible import (filter_plugins/dflash_metrics.py and dflash_rollout.py wrap
them).

Targets: `file_sd` renders the JSON a Prometheus `file_sd_configs` entry reads: one target group per scraped
endpoint, labelled with the host, the instance and its role, so a dashboard can tell ranks and routers apart.
Instances with `metrics: false` are left out (they serve no /metrics); a node rank > 0 of a multi-node
instance is kept (sglang 0.5.11's health server on those ranks serves /metrics too). `release_labels` adds
each host's release.

Alert figures: an instance's thresholds come from the smoke measurements of the release it runs
(`smoke.perf.accept_length_median`, `smoke.perf.tokens_per_s_median` of
`<prefix>/releases/<id>/smoke/<instance>.json`), handed to the role as `dflash_metrics_alert_figures`:

    - {host: gpu-node-01, instance: qwen, release: <id>, accept_length: 3.91, tokens_per_s: 123.5}

The figures are read from the hosts themselves by the metrics play, read-only (`figure_sources` names which
records: each rank-0 instance's `<prefix>/current/smoke/<instance>.json`; `record_figures` turns what was read
into entries; `merge_figures` lets the inventory's own entries win).

Each figure becomes recording rules (`dflash:release_accept_length`, `..._floor`, ...) that the alerts
compare the live metrics with (roles/dflash_metrics/templates/dflash.rules.yml.j2); the floors are figure x
margin (`dflash_metrics_alert_margins`, or the entry's own `accept_ratio` / `tokens_per_s_ratio` /
`itl_ratio`). `alert_errors` checks them all before anything is written.
"""

from __future__ import annotations

import base64
import json
import math
import os
import re

from ansible.module_utils.dflash_common.net import url_host
from ansible.module_utils.dflash_instances.tp import nnodes_of
from ansible.module_utils.dflash_router import listen_address


def targets(fleet, routers=None) -> list:
    """fleet: {host: {address, bind, instances}} (instances reached as the router reaches them); routers: {host: {address, prometheus_port}}.
    -> [{"targets": ["addr:port"], "labels": {...}}], sorted, one group per endpoint."""
    out = []
    for host in sorted(fleet or {}):
        entry = fleet[host] or {}
        for inst in entry.get("instances") or []:
            if not isinstance(inst, dict) or inst.get("metrics", True) is False or not inst.get("port"):
                continue
            addr = url_host(listen_address(inst, entry, host)[1])
            labels = {"dflash_host": host, "dflash_instance": str(inst.get("name")), "dflash_role": "instance",
                      "dflash_algorithm": str(inst.get("algorithm") or "DFLASH").upper()}
            if nnodes_of(inst) > 1:
                labels["dflash_node_rank"] = str(inst.get("node_rank", 0))
            out.append({"targets": [f"{addr}:{inst['port']}"], "labels": labels})
    for host in sorted(routers or {}):
        r = routers[host] or {}
        out.append({"targets": [f"{url_host(r.get('address') or host)}:{r['prometheus_port']}"],
                    "labels": {"dflash_host": host, "dflash_instance": "router", "dflash_role": "router"}})
    return sorted(out, key=lambda g: (g["labels"]["dflash_role"], g["targets"][0]))


def file_sd(fleet, routers=None) -> str:
    """The file_sd JSON text (stable: sorted keys, newline at the end)."""
    return json.dumps(targets(fleet, routers), indent=2, sort_keys=True) + "\n"


def release_labels(file_sd_text, release_ids) -> str:
    """The file_sd JSON with a `dflash_release` label on every instance target whose host's release is
    known (release_ids: {host: release id}; hosts without one keep their labels)."""
    groups = json.loads(file_sd_text)
    ids = {str(k): str(v) for k, v in (release_ids or {}).items() if v}
    for group in groups:
        labels = group.get("labels") or {}
        if labels.get("dflash_role") == "instance" and labels.get("dflash_host") in ids:
            labels["dflash_release"] = ids[labels["dflash_host"]]
    return json.dumps(groups, indent=2, sort_keys=True) + "\n"


# --- alert figures ---

RATIOS = ("accept_ratio", "tokens_per_s_ratio", "itl_ratio")
FIGURES = ("accept_length", "tokens_per_s")
KEYS = {"host", "instance", "release", *FIGURES, *RATIOS}
# Prometheus's duration syntax (units from the largest down, each at most once)
DURATION = re.compile(r"^(?=\d)(\d+y)?(\d+w)?(\d+d)?(\d+h)?(\d+m)?(\d+s)?(\d+ms)?$")
FOR_KEYS = ("instance_down", "router_down", "accept_length", "speculation_inactive", "tokens_per_s", "itl",
            "kv_cache", "queue", "router_no_workers", "router_worker_unhealthy", "router_errors", "figures")
WINDOW_KEYS = ("rate", "restart", "flapping")
LIMIT_KEYS = ("kv_usage", "queue", "flapping_changes", "router_error_ratio")
UNIT_LIMITS = ("kv_usage", "router_error_ratio")  # shares: in (0, 1]


def _number(value):
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _fmt(value: float) -> str:
    """A float to 6 significant digits, as Prometheus reads it (0.85 x 3.9 = 3.315, not 3.3149999...)."""
    return f"{float(value):.6g}"


def _where(entry, i):
    if isinstance(entry, dict) and entry.get("host") and entry.get("instance"):
        return f"dflash_metrics_alert_figures[{i}] ({entry['host']}/{entry['instance']})"
    return f"dflash_metrics_alert_figures[{i}]"


def _settings_errors(margins, for_, windows, limits) -> list:
    errors = []
    for key in RATIOS:
        if not (_number(margins.get(key)) and 0 < margins[key] <= 1):
            errors.append(f"dflash_metrics_alert_margins.{key}: {margins.get(key)!r} is not a number in (0, 1]")
    for name, value, keys in (("for", for_, FOR_KEYS), ("windows", windows, WINDOW_KEYS)):
        for key in keys:
            v = value.get(key)
            if not (isinstance(v, str) and DURATION.match(v)):
                errors.append(f"dflash_metrics_alert_{name}.{key}: {v!r} is not a Prometheus duration (e.g. 5m, 90s)")
    for key in LIMIT_KEYS:
        v = limits.get(key)
        if not (_number(v) and v >= 0 and (key not in UNIT_LIMITS or 0 < v <= 1)):
            errors.append(f"dflash_metrics_alert_limits.{key}: {v!r} is not "
                          + ("a number in (0, 1]" if key in UNIT_LIMITS else "a number >= 0"))
    return errors


def _entry_errors(entry, where, fleet, seen, i) -> list:
    """seen: {(host, instance): index of its first entry}, filled here."""
    errors = []
    unknown = sorted(set(entry) - KEYS)
    if unknown:
        errors.append(f"{where}: unknown field(s) {', '.join(unknown)} (known: {', '.join(sorted(KEYS))})")
    host, inst = entry.get("host"), entry.get("instance")
    if not (isinstance(host, str) and host):
        errors.append(f"{where}: host is missing (the inventory name of a dflash_hosts host)")
    elif host not in fleet:
        errors.append(f"{where}: host {host} is not in the group dflash_hosts")
    if not (isinstance(inst, str) and inst):
        errors.append(f"{where}: instance is missing (an instance name of that host)")
    elif host in fleet:
        names = [str(x.get("name")) for x in (fleet[host] or {}).get("instances") or [] if isinstance(x, dict)]
        if inst not in names:
            errors.append(f"{where}: host {host} has no instance {inst} (it has: {', '.join(names) or 'none'})")
    if (host, inst) in seen:
        errors.append(f"{where}: the same host and instance as dflash_metrics_alert_figures[{seen[(host, inst)]}]")
    seen.setdefault((host, inst), i)
    given = [k for k in FIGURES if entry.get(k) is not None]
    if not given:
        errors.append(f"{where}: neither accept_length nor tokens_per_s (the release's smoke figures)")
    for key in given:
        if not (_number(entry[key]) and entry[key] > 0):
            errors.append(f"{where}: {key} {entry[key]!r} is not a number > 0")
    for key in RATIOS:
        if entry.get(key) is not None and not (_number(entry[key]) and 0 < entry[key] <= 1):
            errors.append(f"{where}: {key} {entry[key]!r} is not a number in (0, 1]")
    if entry.get("release") is not None and not isinstance(entry["release"], str):
        errors.append(f"{where}: release {entry['release']!r} is not a release id")
    return errors


def alert_errors(figures, fleet, margins, for_, windows, limits) -> list:
    """Every problem of the alert settings, as sentences naming the entry (host/instance) and field.
    fleet: {host: {instances: [{name, ...}]}} (dflash_rollout_fleet over dflash_hosts)."""
    fleet = fleet or {}
    errors = _settings_errors(margins or {}, for_ or {}, windows or {}, limits or {})
    if not isinstance(figures, list):
        return errors + [f"dflash_metrics_alert_figures: a list of per-instance figures, not {type(figures).__name__}"]
    seen = {}
    for i, entry in enumerate(figures):
        where = _where(entry, i)
        if not isinstance(entry, dict):
            errors.append(f"{where}: a mapping (host, instance, accept_length, tokens_per_s), not {entry!r}")
            continue
        errors += _entry_errors(entry, where, fleet, seen, i)
    return errors


def alert_rows(figures, margins) -> list:
    """One row per figure entry (checked by alert_errors), the recording rules' values as strings:
    {labels, accept_length, accept_floor, tokens_per_s, tokens_per_s_floor, itl_ceiling} (absent ones None)."""
    rows = []
    for entry in figures or []:
        ratio = {k: float(entry.get(k) if entry.get(k) is not None else margins[k]) for k in RATIOS}
        labels = {"dflash_host": entry["host"], "dflash_instance": entry["instance"]}
        if entry.get("release"):
            labels["dflash_release"] = entry["release"]
        acc, tps = entry.get("accept_length"), entry.get("tokens_per_s")
        rows.append({
            "labels": labels,
            "accept_length": _fmt(acc) if acc is not None else None,
            "accept_floor": _fmt(acc * ratio["accept_ratio"]) if acc is not None else None,
            "tokens_per_s": _fmt(tps) if tps is not None else None,
            "tokens_per_s_floor": _fmt(tps * ratio["tokens_per_s_ratio"]) if tps is not None else None,
            # seconds per token of one request at the release's speed, over the margin
            "itl_ceiling": _fmt(1.0 / (tps * ratio["itl_ratio"])) if tps is not None else None,
        })
    return sorted(rows, key=lambda r: (r["labels"]["dflash_host"], r["labels"]["dflash_instance"]))


# --- figures from the releases' smoke records


def figure_sources(fleet) -> list:
    """[[host, instance]] whose release figures the rules want: every instance with a scrape target, rank 0 of a
    multi-node instance only (its other ranks measure nothing), sorted."""
    out = []
    for host in sorted(fleet or {}):
        for inst in (fleet[host] or {}).get("instances") or []:
            if not isinstance(inst, dict) or inst.get("metrics", True) is False or not inst.get("name"):
                continue
            if nnodes_of(inst) > 1 and inst.get("node_rank", 0) != 0:
                continue
            out.append([host, str(inst["name"])])
    return out


def _b64_json(content):
    try:
        return json.loads(base64.b64decode(content or ""))
    except (ValueError, TypeError):
        return None


def record_figures(records, currents=None) -> list:
    """Figure entries out of the smoke records a play read (``records``: the results of a slurp loop over
    figure_sources: {item: [host, instance], content (base64) | failed/msg}); ``currents``: the results of a stat
    of each host's ``current`` ({item: host, stat: {lnk_source}}), for the release id. A record that is missing,
    unreadable, did not pass, or measured nothing gives no entry (DflashAlertFiguresMissing says so)."""
    release = release_ids(currents)
    out = []
    for r in records or []:
        item = (r or {}).get("item") or []
        if len(item) != 2 or not r.get("content"):
            continue
        smoke = ((_b64_json(r["content"]) or {}).get("smoke") or {})
        perf = smoke.get("perf") or {}
        acc, tps = perf.get("accept_length_median"), perf.get("tokens_per_s_median")
        if not smoke.get("passed"):
            continue
        entry = {"host": str(item[0]), "instance": str(item[1])}
        if _number(acc) and acc > 0:
            entry["accept_length"] = float(acc)
        if _number(tps) and tps > 0:
            entry["tokens_per_s"] = float(tps)
        if len(entry) == 2:
            continue
        if release.get(entry["host"]):
            entry["release"] = release[entry["host"]]
        out.append(entry)
    return out


def merge_figures(from_records, explicit) -> list:
    """The releases' figures, with the inventory's own entries (dflash_metrics_alert_figures) in place of the
    same host and instance; anything that is not a mapping with host and instance is kept for alert_errors to
    name."""
    if not isinstance(explicit, list):
        return explicit
    named = {(e.get("host"), e.get("instance")) for e in explicit if isinstance(e, dict)}
    kept = [e for e in from_records or [] if (e["host"], e["instance"]) not in named]
    return kept + list(explicit)


def release_ids(currents) -> dict:
    """{host: release id} from the stat of each host's ``current`` (hosts whose link was not read are left out)."""
    out = {}
    for r in currents or []:
        src = ((r or {}).get("stat") or {}).get("lnk_source")
        if (r or {}).get("item") and src:
            out[str(r["item"])] = os.path.basename(src.rstrip("/"))
    return out
