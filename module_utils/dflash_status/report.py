"""Status on the controller: each host's findings and verdict from what library/dflash_status.py read there, a
table for people and a document for tools (playbooks/status.yml prints the one and writes the other with
``-e status_json=FILE``), and whether the run ends non-zero.

Verdicts, worst first: ``unreachable`` (the host did not answer), ``unhealthy`` (no current release, an
activation left unfinished, a release not marked healthy, an instance whose unit is not active, whose /health
does not answer 200, or whose live accept length fell below its release's figure x the margin), ``drifted``
(a unit file, env file, link or the tree differs from what the release says, or the host differs from the
fingerprint the release was made for), ``healthy``. Warnings (restarts by systemd, /metrics unreadable, processes
of others on the release's GPUs, little free disk) are shown, not failed. No Ansible import.
"""

from __future__ import annotations

from ansible.module_utils.dflash_status.figures import live_figures
from ansible.module_utils.dflash_status.guard import fallback_of

SPECULATIVE = ("DFLASH", "DDTREE")
ORDER = ("healthy", "drifted", "unhealthy", "unreachable")
DEFAULTS = {"accept_ratio": 0.85, "min_free_ratio": 0.05}


def size(n) -> str:
    n = float(n or 0)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _num(v, fmt="{:.2f}") -> str:
    return "-" if v is None else fmt.format(v)


def speculation(inst: dict, ratio: float) -> dict:
    """{live (figures.live_figures), release (the smoke figures), floor, collapsed, why}: the live accept length
    against the release's own smoke figure x ``ratio``."""
    live = live_figures(inst.get("metrics_text")) if inst.get("metrics_text") is not None else (
        {"error": inst.get("metrics_error") or ("metrics are off (--enable-metrics not in the flags)"
                                                if not inst.get("metrics_enabled") else "no /metrics read")})
    rel = inst.get("release_figures") or {}
    out = {"live": live, "release": rel, "floor": None, "collapsed": False, "why": ""}
    acc = rel.get("accept_length")
    if inst.get("algorithm") in SPECULATIVE and isinstance(acc, int | float) and acc > 0:
        out["floor"] = round(acc * ratio, 3)
        now = live.get("accept_length")
        if live.get("generation_tokens") == 0:
            # a server that has generated nothing since it started reads 0: nothing measured yet, not a collapse
            out["why"] = "no token generated since the server started: no accept length yet"
        elif isinstance(now, int | float) and now < out["floor"]:
            out["collapsed"] = True
            out["why"] = (f"live accept length {now:.2f} < floor {out['floor']:.2f} = {ratio:g} x {acc:.2f} "
                          f"measured by its release's smoke test")
    return out


def _finding(severity, what, instance=None, **extra) -> dict:
    return dict({"severity": severity, "instance": instance, "what": what}, **extra)


def host_findings(res: dict, inventory_instances=(), settings=None) -> list:
    """Every finding of one host's status (``res``: the module's result)."""
    st = dict(DEFAULTS, **(settings or {}))
    out = []
    for p in res.get("problems") or []:
        out.append(_finding("unhealthy", p))
    act = res.get("activation")
    if act:
        out.append(_finding("unhealthy", f"an activation of {act.get('release')} is unfinished (state "
                                         f"{act.get('state')}, started {act.get('started')} by "
                                         f"{act.get('controller')}): a deploy runs now, or the next one finishes or "
                                         "reverts it"))
    rel = res.get("release")
    if not res.get("current"):
        out.append(_finding("unhealthy", "no current release (nothing deployed here, or current was removed)"))
    elif rel and rel.get("status") != "healthy":
        out.append(_finding("unhealthy", f"release {rel['id']} is {rel.get('status')}: its smoke test never passed "
                                         "(a deploy or rollback.yml, with its smoke test, sets it)"))
    deployed = set(res.get("instances") or {})
    for name in sorted({i.get("name") for i in inventory_instances or [] if isinstance(i, dict)} - deployed - {None}):
        out.append(_finding("warning", "in the inventory, not in the current release (deploy.yml has not deployed "
                                       "it yet)", name))
    for name, inst in sorted((res.get("instances") or {}).items()):
        us = inst.get("unit_state") or {}
        if us.get("ActiveState") != "active":
            out.append(_finding("unhealthy", f"unit {inst.get('unit')} is {us.get('ActiveState') or 'unknown'}"
                                             f"/{us.get('SubState') or '?'}"
                                             + (f" ({us['error']})" if us.get("error") else ""), name))
        elif inst.get("health") != 200:
            code = inst.get("health")
            out.append(_finding("unhealthy", f"/health at {inst.get('base_url')} answers "
                                             f"{code if code is not None else 'nothing'}", name))
        if (us.get("NRestarts") or 0) > 0:
            out.append(_finding("warning", f"systemd restarted it {us['NRestarts']} time(s) since it was last "
                                           "started (a crash; see journalctl -u " + str(inst.get("unit")) + ")", name))
        spec = inst.get("speculation") or {}
        if spec.get("collapsed"):
            out.append(_finding("unhealthy", "speculation collapsed: " + spec["why"], name, guard=True))
        err = (spec.get("live") or {}).get("error")
        if err and inst.get("metrics_enabled"):
            out.append(_finding("warning", err, name))
    for d in res.get("drift") or []:
        if d.get("state") in ("changed", "missing"):
            out.append(_finding("drift", f"{d['kind']} {d['path']}: {d['detail']}", d.get("instance"),
                                diff=d.get("diff") or []))
        elif d.get("state") == "unrecorded":
            out.append(_finding("note", f"{d['kind']} {d['path']}: {d['detail']}", d.get("instance")))
    fp = res.get("fingerprint") or {}
    if fp.get("same") is False:
        out.append(_finding("drift", "the host differs from the fingerprint its release was made for: "
                                     + ("; ".join(fp.get("changes") or []) or fp.get("note") or "")))
    for b in fp.get("busy") or []:
        out.append(_finding("warning", f"GPU {b.get('gpu')}: pid {b.get('pid')} {b.get('name')} "
                                       f"({b.get('used_mib')} MiB) is not one of this release's servers"
                                       + (f" (unit {b['unit']})" if b.get("unit") else "")))
    for fs in (res.get("disk") or {}).get("free") or []:
        if fs.get("total_bytes") and fs["free_bytes"] < st["min_free_ratio"] * fs["total_bytes"]:
            out.append(_finding("warning", f"{fs['path']}: {size(fs['free_bytes'])} free of "
                                           f"{size(fs['total_bytes'])}"))
    return out


def verdict(findings: list) -> str:
    sev = {f["severity"] for f in findings}
    return "unhealthy" if "unhealthy" in sev else ("drifted" if "drift" in sev else "healthy")


def host_report(host: str, res: dict | None, inventory_instances=(), settings=None, unreachable=None) -> dict:
    """One host's part of the document: the module's result with each instance's speculation, the findings, the
    verdict; ``unreachable``: why the host did not answer (or its status task failed)."""
    st = dict(DEFAULTS, **(settings or {}))
    if unreachable is not None or res is None:
        why = unreachable or "no status was read"
        return {"host": host, "verdict": "unreachable", "findings": [_finding("unreachable", why)]}
    res = dict(res)
    insts = {}
    inv = {i.get("name"): i for i in inventory_instances or [] if isinstance(i, dict)}
    for name, inst in (res.get("instances") or {}).items():
        inst = dict(inst)
        inst["speculation"] = speculation(inst, float(st["accept_ratio"]))
        inst.pop("metrics_text", None)
        inst["fallback"] = fallback_of(inv.get(name) or {"algorithm": inst.get("algorithm")})
        insts[name] = inst
    res["instances"] = insts
    findings = host_findings(res, inventory_instances, st)
    return dict(res, host=host, verdict=verdict(findings), findings=findings)


def document(hosts: dict) -> dict:
    """{hosts, summary: {verdicts: {verdict: [hosts]}, instances, collapsed: [host/instance]}, ok}."""
    verdicts = {}
    for h, r in sorted(hosts.items()):
        verdicts.setdefault(r["verdict"], []).append(h)
    collapsed = [f"{h}/{f['instance']}" for h, r in sorted(hosts.items()) for f in r.get("findings") or []
                 if f.get("guard")]
    n = sum(len(r.get("instances") or {}) for r in hosts.values())
    return {"hosts": hosts, "summary": {"verdicts": verdicts, "instances": n, "collapsed": collapsed},
            "ok": all(r["verdict"] == "healthy" for r in hosts.values())}


def _since(us: dict) -> str:
    text = str(us.get("ActiveEnterTimestamp") or "")
    return " ".join(text.split()[1:3]) if text else "-"


def _table(rows: list) -> list:
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def text(doc: dict, guard_command: str = "ansible-playbook playbooks/guard.yml") -> str:
    """The table and each host's details, for people."""
    s = doc["summary"]
    head = (f"DFLASH STATUS: {len(doc['hosts'])} host(s), {s['instances']} instance(s); "
            + ", ".join(f"{v} {len(s['verdicts'].get(v, []))}" for v in ORDER if s["verdicts"].get(v)))
    rows = [("host", "instance", "release", "sglang", "algo", "unit", "restarts", "active since", "health",
             "tok/s", "accept now/release", "verdict")]
    for h, r in sorted(doc["hosts"].items()):
        rel = r.get("release") or {}
        rid = f"{rel.get('id')} ({rel.get('status')})" if rel else "-"
        insts = r.get("instances") or {}
        if not insts:
            rows.append((h, "-", rid, rel.get("sglang_version") or "-", "-", "-", "-", "-", "-", "-", "-",
                         r["verdict"]))
        bad = {f.get("instance") for f in r.get("findings") or [] if f["severity"] in ("unhealthy", "drift")}
        for name, inst in sorted(insts.items()):
            us = inst.get("unit_state") or {}
            spec = inst.get("speculation") or {}
            live = spec.get("live") or {}
            acc = f"{_num(live.get('accept_length'))}/{_num((spec.get('release') or {}).get('accept_length'))}"
            rows.append((h, name, rid, inst.get("sglang_version") or rel.get("sglang_version") or "-",
                         inst.get("algorithm"),
                         f"{us.get('ActiveState', '?')}/{us.get('SubState', '?')}", us.get("NRestarts", "-"),
                         _since(us), inst.get("health") if inst.get("health") is not None else "none",
                         _num(live.get("tokens_per_s"), "{:.1f}"), acc,
                         r["verdict"] if name in bad or r["verdict"] == "healthy" else f"({r['verdict']})"))
    lines = [head, *_table(rows)]
    for h, r in sorted(doc["hosts"].items()):
        lines.append("")
        lines.append(f"{h}: {r['verdict'].upper()}")
        rel = r.get("release") or {}
        if rel:
            tk = rel.get("toolkit") or {}
            lines.append(f"  release {rel['id']} ({rel.get('status')}{' at ' + rel['status_at'] if rel.get('status_at') else ''}), "
                         f"sglang {rel.get('sglang_version')}, series {', '.join(rel.get('series') or []) or 'none'}, "
                         f"toolkit {str(tk.get('revision'))[:12]}{'-dirty' if tk.get('dirty') else ''}")
        for name, inst in sorted((r.get("instances") or {}).items()):
            rules = ", ".join(x for x in inst.get("rules") or [] if x) or "none"
            lines.append(f"  {name}: {' '.join(str(a) for a in inst.get('args') or [])}")
            lines.append(f"    rules that fired: {rules}; fallback: {inst.get('fallback') or 'none'}")
        for f in r.get("findings") or []:
            who = f"{f['instance']}: " if f.get("instance") else ""
            lines.append(f"  {f['severity'].upper()}: {who}{f['what']}")
            lines += [f"      {d}" for d in f.get("diff") or [] if f["severity"] == "drift"]
            if f.get("guard"):
                lines.append(f"      guard: {guard_command} -l {h} -e instance={f['instance']}")
        fp = r.get("fingerprint") or {}
        if fp.get("checked"):
            lines.append("  fingerprint: " + ("as the release recorded it" if fp.get("same") else
                                               "differs from the release's" if fp.get("same") is False else
                                               fp.get("note") or "not compared"))
        disk = r.get("disk") or {}
        if disk:
            parts = []
            for kind in ("layers", "trees", "releases", "router_layers", "models"):
                items = disk.get(kind) or []
                if items:
                    unused = sum(1 for x in items if x.get("used") is False)
                    parts.append(f"{kind.replace('_', ' ')} {len(items)} ({size(disk['totals'][kind])}"
                                 + (f", {unused} unused" if unused and kind != "releases" else "") + ")")
            free = "; ".join(f"{fs['path']} {size(fs['free_bytes'])} free of {size(fs['total_bytes'])}"
                             for fs in disk.get("free") or [])
            lines.append("  disk: " + (", ".join(parts) or "nothing") + (f"; {free}" if free else ""))
    return "\n".join(lines)
