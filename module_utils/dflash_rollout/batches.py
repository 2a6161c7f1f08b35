"""Rolling deploys: how a run is cut into batches and what each host ended up with.

Pure functions, no Ansible import. `batches` is Ansible's own rule for `serial` (a list of host
counts or percentages of the run, the last one repeating), so the validation play can check,
before anything changes, that the ranks of a multi-node instance share a batch. `summary` builds
the table printed at the end of deploy.yml (callback_plugins/dflash_rollout.py) from what each host
reported: its release before the run, after it, and its verdict.
"""

from __future__ import annotations

import re


def _count(value, total):
    """Ansible's pct_to_int: '50%' of total (at least 1), or the integer itself."""
    if isinstance(value, str) and value.strip().endswith("%"):
        pct = float(value.strip()[:-1])
        return int(pct / 100.0 * total) or 1
    return int(value)


def check_serial(serial) -> list:
    """Errors in a serial setting (list of positive ints or 'N%')."""
    errors = []
    items = serial if isinstance(serial, list) else [serial]
    for i, v in enumerate(items):
        ok = (isinstance(v, int) and not isinstance(v, bool) and v > 0) or (
            isinstance(v, str) and re.fullmatch(r"\s*(\d+(\.\d+)?%|\d+)\s*", v) and _count(v, 100) > 0)
        if not ok:
            errors.append(f"dflash_rollout_serial[{i}]: {v!r} is not a positive host count or percentage ('25%')")
    return errors


def batches(hosts, serial) -> list:
    """The batches Ansible runs for play hosts `hosts` (in order) with `serial` (list, int, str or empty)."""
    hosts = list(hosts or [])
    items = serial if isinstance(serial, list) else ([serial] if serial not in (None, "") else [])
    if not items:
        return [hosts] if hosts else []
    total, out, i = len(hosts), [], 0
    while hosts:
        size = _count(items[i], total)
        if size <= 0:
            out.append(hosts)
            break
        out.append(hosts[:size])
        hosts = hosts[size:]
        i = min(i + 1, len(items) - 1)
    return out


def later_hosts(batch_list, host) -> list:
    """The hosts of the batches after ``host``'s (those a rollout that stops at ``host`` never reaches)."""
    out, seen = [], False
    for batch in batch_list or []:
        if seen:
            out += list(batch)
        elif host in batch:
            seen = True
    return out


# what the rescue says became of the host: "put back: current -> R; ..." (roles/dflash_release/tasks/
# revert.yml), or "rolled back to R" (rollback.yml); "none" when a first deploy had nothing to put back
ROLLED_BACK_RE = re.compile(r"(?:put back: current ->|rolled back to) (\S+?)(?:[;,] | \(|\s|$)")


def summary(hosts, before, after, failures, batch_list=None, started=None) -> list:
    """One row per host of the run: {host, batch, before, after, verdict}.

    before: {host: release id or None}; after: {host: {id, smoked}} of hosts that finished;
    failures: {host: message of the task that failed it}; batch_list: the batches (for the column);
    started: hosts whose batch began (a host stopped by the strategy has no failed task of its own)."""
    where = {h: n for n, hs in enumerate(batch_list or [], 1) for h in hs}
    rows = []
    for h in hosts:
        prev = (before or {}).get(h)
        row = {"host": h, "batch": where.get(h), "before": prev}
        if h in (failures or {}):
            msg = " ".join(str(failures[h]).split())
            m = ROLLED_BACK_RE.search(msg)
            if m and m.group(1) != "none":
                row["after"] = m.group(1)
            elif "no previous release" in msg:
                row["after"] = None  # a first deploy that failed: its instances were stopped
            else:
                row["after"] = prev  # failed before its release changed
            # the head says what failed, the tail what became of the host (put back: current -> ...)
            row["verdict"] = "FAILED: " + (msg if len(msg) <= 400 else f"{msg[:240]} ... {msg[-160:]}")
        elif h in (after or {}):
            row.update(_finished(after[h] or {}, prev))
        elif h in (started or ()):
            row["after"] = None
            row["verdict"] = ("STOPPED during its batch: another host of the batch failed past max_fail_percentage "
                              "(its release is what it had reached; a switched one was rolled back by its rescue)")
        else:
            row["after"] = prev
            row["verdict"] = "not deployed: the rollout stopped before this host's batch"
        rows.append(row)
    return rows


def _finished(a: dict, prev) -> dict:
    """The after and verdict columns of a host that went through its batch: a check-mode run changed nothing
    (what it would do), a release without a passed smoke test is never called healthy, what recovery did first
    is said."""
    smoked = a.get("smoked") or []
    restarted = ", ".join(smoked)
    rec = a.get("recovered") or {}
    note = f"; first {rec['msg']}" if rec.get("msg") else ""
    if a.get("repairs"):
        note += "; REPAIRED: " + "; ".join(a["repairs"])
    if a.get("check"):
        if a.get("id") == prev:
            what = f"would restart {restarted} of release {a.get('id')}" if smoked else "nothing would change"
        else:
            what = (f"would {'create' if a.get('created') else 'switch to'} release {a.get('id')}"
                    + (f", restart {restarted}" if smoked else ""))
        return {"after": prev, "verdict": f"check mode, nothing changed: {what}{note}"}
    if a.get("status") not in (None, "healthy"):
        return {"after": a.get("id"), "verdict": (
            f"NOT PROVEN: release {a.get('id')} has no passed smoke test (status {a.get('status')})"
            + (f"; restarted {restarted}" if smoked else "") + note)}
    if a.get("id") == prev:
        verdict = f"healthy (restarted {restarted})" if smoked else "healthy (unchanged)"
    else:
        verdict = "healthy (new release" + (f", restarted {restarted})" if smoked else ")")
    if rec.get("msg") and not smoked and a.get("id") == prev:
        verdict = f"healthy (smoke-tested on recovery: {rec['msg']})" + note[len(f"; first {rec['msg']}"):]
    elif note:
        verdict += note
    return {"after": a.get("id"), "verdict": verdict}


def summary_lines(rows) -> list:
    """The table as text lines."""
    if not rows:
        return []
    w = max(len(r["host"]) for r in rows)
    lines = [f"{'host':<{w}}  batch  {'release before':<24}  {'release after':<24}  verdict"]
    for r in rows:
        lines.append(f"{r['host']:<{w}}  {(r['batch'] or '-')!s:<5}  {(r['before'] or '-')!s:<24}  "
                     f"{(r['after'] or '-')!s:<24}  {r['verdict']}")
    return lines
