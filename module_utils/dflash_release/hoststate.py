"""What the host serves, against what ``current`` says: recovery decides from the host's state, not only from
the activation journal (roles/dflash_release/tasks/recover.yml, ``dflash_activation action=inspect``).

A journal can be gone (deleted by hand after a kill, as its own message once told) while ``current`` points at a
release that no smoke test ever passed; a process can still run the release before ``current`` moved (a kill
between the switch and the restart). A restart or a reboot would then start what nobody tested. So, for the
release ``current`` names:

- its verdict (``status.json``): none means never smoke-tested: every instance of it is restarted and tested;
- each instance's process (the unit's main pid): the release that was current when it started, read from
  ``<prefix>/current.history`` (every move of ``current``, journal.py ``record_switch``) and the process's start
  time, and its command line against the release's flags. A process that runs another release's content
  (venv, tree or env file differ: the manifests' instance digests) is restarted and tested.
- ``current`` whose manifest cannot be read: said as such (a corrupt or truncated manifest.json), never
  treated as "no release".

Pure functions over the filesystem and an injected service backend; no Ansible import.
"""

from __future__ import annotations

import json
import os
import time

from ansible.module_utils.dflash_release.journal import HISTORY, current_target, release_status

MANIFEST = "manifest.json"


def read_history(prefix: str) -> list:
    """The moves of ``current``, oldest first ({at, from, to, by}); unreadable lines are skipped."""
    out = []
    try:
        with open(os.path.join(prefix, HISTORY), encoding="utf-8") as fh:
            for line in fh:
                try:
                    rec = json.loads(line)
                    out.append({"at": float(rec["at"]), "from": rec.get("from"), "to": rec.get("to"),
                                "by": rec.get("by")})
                except (ValueError, KeyError, TypeError):
                    continue
    except OSError:
        return []
    return sorted(out, key=lambda r: r["at"])


def release_at(history: list, t: float):
    """The release ``current`` named at time ``t``: (id or None, known). Unknown when the history starts later
    (a host deployed before the history existed)."""
    before = [r for r in history if r["at"] <= t]
    if before:
        return before[-1]["to"], True
    if history:
        return history[0]["from"], history[0]["from"] is not None
    return None, False


def _boot_epoch(proc="/proc", now=None):
    """When the kernel booted, to 10 ms (now - /proc/uptime)."""
    try:
        with open(os.path.join(proc, "uptime"), encoding="utf-8") as fh:
            up = float(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return (time.time() if now is None else now) - up


def process_start(pid, proc="/proc", now=None):
    """Epoch seconds when process ``pid`` started (field 22 of /proc/<pid>/stat, clock ticks after boot)."""
    try:
        with open(os.path.join(proc, str(int(pid)), "stat"), encoding="utf-8") as fh:
            ticks = int(fh.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError, TypeError):
        return None
    boot = _boot_epoch(proc, now)
    return None if boot is None else boot + ticks / os.sysconf("SC_CLK_TCK")


def process_args(pid, proc="/proc"):
    """The process's command line as a list (world-readable), None when it cannot be read."""
    try:
        with open(os.path.join(proc, str(int(pid)), "cmdline"), "rb") as fh:
            raw = fh.read()
    except (OSError, ValueError, TypeError):
        return None
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a] or None


def read_manifest_strict(prefix: str, release_id: str | None):
    """(manifest, problem): problem says why a release's manifest.json cannot be used (missing, cut short,
    not JSON, another id)."""
    if not release_id:
        return {}, None
    path = os.path.join(prefix, "releases", release_id, MANIFEST)
    try:
        with open(path, encoding="utf-8") as fh:
            data = fh.read()
    except FileNotFoundError:
        return {}, f"{path} is missing"
    except OSError as exc:
        return {}, f"{path} cannot be read ({exc.strerror or exc})"
    try:
        m = json.loads(data)
    except ValueError as exc:
        size = len(data.encode("utf-8"))
        return {}, f"{path} is corrupt or truncated ({size} bytes, not JSON: {exc})"
    if not isinstance(m, dict) or m.get("id") != release_id:
        return {}, f"{path} does not describe release {release_id} (id {m.get('id') if isinstance(m, dict) else m!r})"
    return m, None


def _digest(manifests: dict, rid, name):
    return ((manifests.get(rid) or {}).get("instances") or {}).get(name, {}).get("digest")


def _ts(t) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)) if t is not None else "?"


def instance_view(name, entry, state, cur, manifests, history, proc="/proc", now=None) -> dict:
    """One instance of ``current``: {unit, active, pid, started, runs, why}. ``runs``: 'current' (its
    process runs current's content), 'other' (another release's: restart it), 'unknown' (cannot tell: no
    history from before it started), 'stopped' (not running)."""
    unit = entry.get("unit") or f"dflash-{name}.service"
    active = state.get("ActiveState") == "active"
    pid = state.get("ExecMainPID") or None
    view = {"unit": unit, "active": active, "pid": pid, "started": None, "runs": "stopped", "why": ""}
    if not active or not pid:
        view["why"] = f"{name}: not running (unit {unit} {state.get('ActiveState') or 'unknown'})"
        return view
    started = process_start(pid, proc, now)
    view["started"] = started
    args = process_args(pid, proc)
    want = [str(a) for a in entry.get("args") or []]
    if args is not None and want and args[-len(want):] != want:
        view.update(runs="other", why=f"{name}: its process (pid {pid}) runs other flags than release {cur}'s: "
                                      f"{' '.join(args[-len(want):])[:300]}")
        return view
    if started is None:
        view.update(runs="unknown", why=f"{name}: the start of its process (pid {pid}) cannot be read")
        return view
    rel, known = release_at(history, started)
    if not known:
        view.update(runs="unknown", why=f"{name}: its process (pid {pid}) started {_ts(started)}, before this host "
                                        "recorded which release was current")
        return view
    if rel == cur:
        view["runs"] = "current"
        return view
    if rel is not None and rel in manifests and _digest(manifests, rel, name) == _digest(manifests, cur, name):
        view.update(runs="current", why=f"{name}: started under release {rel}, whose content for it is current's")
        return view
    moved = [r for r in history if r["to"] == cur and r["at"] > started]
    when = f" (current moved to it at {_ts(moved[0]['at'])}, by {moved[0]['by']})" if moved else ""
    differ = "" if rel is None or rel not in manifests else ": venv, tree or env file differ"
    view.update(runs="other", release=rel, why=f"{name}: its process (pid {pid}, started {_ts(started)}) runs release "
                                               f"{rel or 'none'}, not current {cur}{when}{differ}")
    return view


def inspect(prefix: str, backend, proc="/proc", now=None) -> dict:
    """The host against ``current``. -> {current, verdict ('healthy', 'failed' or None), manifest_problem,
    instances: {name: view}, untested (bool), other: [instances running another release], decision ('none' |
    'smoke'), smoke: [instances to restart and test], lines: [what was found, in words]}."""
    cur = current_target(prefix)
    out = {"current": cur, "verdict": None, "manifest_problem": None, "instances": {}, "untested": False,
           "other": [], "decision": "none", "smoke": [], "lines": []}
    if not cur:
        return out
    manifest, problem = read_manifest_strict(prefix, cur)
    if problem:
        out["manifest_problem"] = problem
        out["lines"].append(f"current release {cur}: {problem}: what it runs cannot be read; the deploy makes a "
                            "new release from the inventory and replaces it")
        return out
    status = release_status(prefix, cur)
    out["verdict"] = status.get("status") if isinstance(status, dict) else None
    manifests = {cur: manifest}
    history = read_history(prefix)
    for rid in {r["to"] for r in history} | {r["from"] for r in history}:
        if rid and rid not in manifests:
            m, p = read_manifest_strict(prefix, rid)
            if not p:
                manifests[rid] = m
    for name, entry in sorted((manifest.get("instances") or {}).items()):
        unit = entry.get("unit") or f"dflash-{name}.service"
        view = instance_view(name, entry, backend.state(unit), cur, manifests, history, proc, now)
        out["instances"][name] = view
        if view["runs"] == "other":
            out["other"].append(name)
    names = sorted(out["instances"])
    if out["verdict"] is None:
        out["untested"] = True
        out["decision"], out["smoke"] = "smoke", names
        out["lines"].append(f"current release {cur} was never smoke-tested (no verdict in its status.json: a run was "
                            f"interrupted after it switched current): restarting and smoke-testing "
                            f"{', '.join(names) or 'its instances'} now; a failure puts back the newest earlier "
                            "healthy release")
    elif out["other"]:
        out["decision"], out["smoke"] = "smoke", sorted(out["other"])
        out["lines"].append(f"current release {cur} is {out['verdict']}, but what serves is not all of it: "
                            + "; ".join(out["instances"][n]["why"] for n in out["other"])
                            + f" -- restarting and smoke-testing {', '.join(out['other'])} now")
    for n in names:
        if out["instances"][n]["runs"] == "unknown":
            out["lines"].append(out["instances"][n]["why"] + " (left as it is)")
    return out
