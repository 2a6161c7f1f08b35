"""Firing alerts -> the guard's commands (scripts/guard_alert.py).

Two shapes are read: Alertmanager's webhook body (``{"version": "4", "alerts": [{"status": "firing", "labels",
"annotations", "startsAt"}]}``) and Prometheus's own ``GET /api/v1/alerts`` answer (``{"status": "success",
"data": {"alerts": [{"state": "firing", "labels", "annotations", "activeAt", "value"}]}}``). Of the alerts that say
acceptance collapsed (guard.ALERTS) and fire, one per host and instance (the labels dflash_host and
dflash_instance the targets carry) becomes one ``ansible-playbook playbooks/guard.yml -l HOST -e instance=NAME
-e guard_alert=... -e guard_alert_value=...`` command. Pure functions; no Ansible import.
"""

from __future__ import annotations

import json

from ansible.module_utils.dflash_status.guard import ALERTS


def alerts_of(payload) -> list:
    """The alerts of either shape, as [{alertname, host, instance, firing, value, since, summary}]."""
    if isinstance(payload, (bytes, str)):
        payload = json.loads(payload)
    if not isinstance(payload, dict):
        raise ValueError(  # noqa: TRY004 (bad input, said in words: the script reports ValueError)
            "an alert payload is a JSON object (Alertmanager's webhook or Prometheus's /api/v1/alerts)")
    if isinstance(payload.get("data"), dict):  # Prometheus's API
        raw, prom = payload["data"].get("alerts") or [], True
    else:
        raw, prom = payload.get("alerts") or [], False
    out = []
    for a in raw:
        if not isinstance(a, dict):
            continue
        labels, notes = a.get("labels") or {}, a.get("annotations") or {}
        firing = (a.get("state") == "firing") if prom else (a.get("status") == "firing")
        value = notes.get("value") if notes.get("value") not in (None, "") else a.get("value")
        out.append({"alertname": labels.get("alertname"), "host": labels.get("dflash_host"),
                    "instance": labels.get("dflash_instance"), "firing": firing,
                    "value": _short(value), "since": a.get("activeAt") if prom else a.get("startsAt"),
                    "summary": " ".join(str(notes.get("summary") or "").split())})
    return out


def _short(value):
    """'2.0312500e+00' -> '2.031' (Prometheus's API gives the value in exponent form)."""
    try:
        return f"{float(value):.4g}"
    except (TypeError, ValueError):
        return None if value in (None, "") else str(value)


def collapsed(payload) -> list:
    """The firing acceptance alerts, one per host and instance (the first of each), in order."""
    seen, out = set(), []
    for a in alerts_of(payload):
        if not (a["firing"] and a["alertname"] in ALERTS and a["host"] and a["instance"]):
            continue
        key = (a["host"], a["instance"])
        if key not in seen:
            seen.add(key)
            out.append(a)
    return out


def command(alert: dict, inventory=(), playbook="playbooks/guard.yml", ansible_playbook="ansible-playbook") -> list:
    """The guard's argv for one alert (``inventory``: the -i sources to pass)."""
    argv = [ansible_playbook] + [x for inv in inventory or () for x in ("-i", inv)]
    argv += [playbook, "-l", alert["host"], "-e", f"instance={alert['instance']}",
             "-e", f"guard_alert={alert['alertname']}"]
    if alert.get("value") not in (None, ""):
        argv += ["-e", f"guard_alert_value={alert['value']}"]
    return argv
