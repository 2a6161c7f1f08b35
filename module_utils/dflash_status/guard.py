"""The guard's decision: when acceptance collapsed on an instance, which fallback it gets and why.

An instance's fallback is its inventory field ``fallback`` (DFLASH, DDTREE or NONE: no speculation; ``false``:
the guard never moves it), else DFLASH for DDTREE and no speculation for DFLASH; an instance without speculation
has none. The evidence is the alert that fired (Alertmanager's webhook or Prometheus's API, scripts/guard_alert.py:
DflashAcceptLengthLow, DflashSpeculationInactive) or, run by hand, status's live figure below the release's own
(report.speculation). playbooks/guard.yml deploys the fallback as any release (deploy.yml: checks, flags, the
release transaction, every smoke gate, rollback on failure); its performance gate compares with the newest healthy
release on the host that ran the instance with the fallback's algorithm, none when there is none (a DFLASH
fallback is not held to the DDTREE release's tok/s). Pure functions; no Ansible import.
"""

from __future__ import annotations

from ansible.module_utils.dflash_instances.fields import ALGORITHMS

DEFAULT_FALLBACK = {"DDTREE": "DFLASH", "DFLASH": "NONE"}
# the alerts of roles/dflash_metrics that say acceptance collapsed
ALERTS = ("DflashAcceptLengthLow", "DflashSpeculationInactive")


def fallback_of(inst: dict) -> str | None:
    """The algorithm the guard moves the instance to; None when it has none."""
    algo = str((inst or {}).get("algorithm") or "DFLASH").upper()
    fb = (inst or {}).get("fallback")
    if fb is False:
        return None
    if fb is None:
        return DEFAULT_FALLBACK.get(algo)
    fb = str(fb).upper()
    return fb if fb in ALGORITHMS and fb != algo else None


def fallback_instance(inst: dict, to: str) -> dict:
    """The inventory instance with the fallback's algorithm (DDTREE's settings dropped when it leaves DDTREE)."""
    out = dict(inst, algorithm=to)
    if to != "DDTREE":
        out.pop("ddtree", None)
    return out


def baseline(releases: list, instance: str, algorithm: str) -> str | None:
    """The newest healthy release (``releases``: oldest first, as collect.algorithms) that ran ``instance`` with
    ``algorithm``: what the fallback's performance gate compares with."""
    for r in reversed(releases or []):
        if r.get("status") == "healthy" and (r.get("algorithms") or {}).get(instance) == algorithm:
            return r["id"]
    return None


def decide(host: str, report: dict, instance: str, inventory_inst: dict | None, alert: str | None = None,
           alert_value=None, force: bool = False) -> dict:
    """{act, message, from, to, cause, override, baseline, evidence} for one instance of one host (``report``:
    report.host_report of the host)."""
    where = f"{host}/{instance}"
    out = {"act": False, "host": host, "instance": instance, "alert": alert or None, "alert_value": alert_value,
           "from": None, "to": None, "cause": None, "override": None, "baseline": None, "evidence": {}}

    def no(msg):
        return dict(out, message=f"{where}: {msg}; nothing deployed")

    if report.get("verdict") == "unreachable":
        return no("the host did not answer")
    inst = (report.get("instances") or {}).get(instance)
    if inventory_inst is None:
        return no("the inventory has no such instance on this host")
    if inst is None:
        return no(f"not in the current release {(report.get('release') or {}).get('id')}")
    spec = inst.get("speculation") or {}
    live, rel = spec.get("live") or {}, spec.get("release") or {}
    out["evidence"] = {"live_accept_length": live.get("accept_length"), "floor": spec.get("floor"),
                       "release_accept_length": rel.get("accept_length"), "idle": live.get("idle"),
                       "release": (report.get("release") or {}).get("id")}
    now, want = inst.get("algorithm"), str(inventory_inst.get("algorithm") or "DFLASH").upper()
    out["from"] = now
    if now != want:
        return no(f"already runs {now} while the inventory says {want} (a guard moved it, or a deploy is pending): "
                  f"deploy.yml puts {want} back once the cause is fixed")
    to = fallback_of(inventory_inst)
    if to is None:
        return no(f"{now} has no fallback (" + ("fallback: false in the inventory" if inventory_inst.get("fallback")
                                                is False else "no speculation to fall back from") + ")")
    if alert and alert not in ALERTS:
        return no(f"alert {alert} is not about acceptance (the guard acts on {', '.join(ALERTS)})")
    if alert:
        value = f" at {alert_value}" if alert_value not in (None, "") else ""
        cause = f"alert {alert}{value}" + (f"; status now: {spec['why']}" if spec.get("why") else
                                          f"; status now: live accept length {live.get('accept_length')}")
    elif spec.get("collapsed"):
        cause = f"status: {spec['why']}"
    elif force:
        cause = "asked for (guard_force=true); status now: live accept length " + str(live.get("accept_length"))
    else:
        figure = live.get("accept_length")
        if spec.get("why"):
            return no(spec["why"])
        if figure is None or spec.get("floor") is None:
            return no("no live accept length or no release figure to compare it with "
                      f"({live.get('error') or 'the release measured no accept length'})")
        return no(f"acceptance holds: live accept length {figure:.2f} >= floor {spec['floor']:.2f}")
    base = baseline(report.get("releases") or [], instance, to)
    out.update(act=True, to=to, cause=cause, override=fallback_instance(inventory_inst, to), baseline=base)
    perf = (f"its performance gate compares with release {base}, the last that ran {to}" if base else
            f"no earlier release here ran it with {to}: its performance gate has no comparable measurement")
    out["message"] = (f"{where}: {cause} -> deploying its fallback {to} (was {now}) as a new release with every "
                      f"gate; {perf}")
    return out
