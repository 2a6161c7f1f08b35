"""Activation as a transaction: nothing that serves changes until the new release passed its smoke
test, or the state from before is put back exactly (unit files, ``current``, what was running).

The journal (``journal.py``: ``<prefix>/activation.json`` and the backups of the unit files it replaces) records the
transaction. The steps, each one call of ``library/dflash_activation.py`` (so that an interrupted run stops
between two recorded states):

  begin     plan: which unit files change, which instances restart, which instances of the current
            release must stop first (another instance takes their port), what is removed at commit;
            the journal is written (state ``begun``). Nothing that serves changes.
  install   the staged unit files go live, daemon-reload, new units enabled (state ``units``).
  switch    the instances that give up their port stop; ``current`` -> the release (``current``).
            The smoke test follows (``library/dflash_wait``: it marks the release healthy).
  commit    the removals asked for; journal and backups deleted.
  revert    unit files back (new ones stopped, disabled, deleted), ``current`` back, the instances
            new in the release stopped (state ``reverting``); the caller restarts and smoke-tests the
            instances it names, checks what serves (``serving``), then ``finish`` deletes the journal.
  recover   at the start of a run, for a journal an interrupted run left: commit when its release
            passed its smoke test after the journal was written, else revert (``journal.decide``).

The service backend (``dflash_service``: systemd or the runner) is passed in. No Ansible import.
"""

from __future__ import annotations

import json
import os
import shutil

from ansible.module_utils.dflash_common.net import instance_address
from ansible.module_utils.dflash_release.journal import (
    BACKUPS,
    SCHEMA,
    ActivationError,
    _drop,
    boot_id,
    current_target,
    journal_path,
    now_iso,
    point_current,
    read_bytes,
    read_journal,
    read_manifest,
    read_unit_record,
    record_units,
    restore_files,
    unit_drifted,
    write_atomic,
    write_journal,
)
from ansible.module_utils.dflash_release.store import record_live_units
from ansible.module_utils.dflash_release.wait import health_status


def unit_of(name: str, entry: dict | None = None) -> str:
    return (entry or {}).get("unit") or f"dflash-{name}.service"


# ----------------------------------------------------------------------------- plan


def plan(prefix, release_id, names, units, changed, not_running, restart_all=False, remove=(),
         previous=None, manifest=None):
    """What an activation of ``release_id`` does, from facts only (pure).

    names: instances of the new release; units: [{dest, src, instance, content?}] the staged unit files
    (``content``: what would be staged, in check mode, where nothing is written); changed: instances whose
    release content differs from current; not_running: instances not active now; remove: [{instance, unit,
    stage_unit}] removals asked for (done at commit); previous: the current release's manifest ({} on a first
    deploy); manifest: the new release's (a check-mode run's release is not on disk).
    -> {restart, stop_first, units: [{dest, src, instance, change}], remove, diff: [unit file diffs]}"""
    names = sorted(names)
    staged = []
    unit_changed = set()
    diff = []
    record = read_unit_record(prefix)
    for u in units or []:
        new = u["content"].encode("utf-8") if u.get("content") is not None else read_bytes(u["src"])
        if new is None:
            raise ActivationError(f"staged unit {u['src']} is missing (the instances stage did not run?)")
        old = read_bytes(u["dest"])
        change = "same" if old == new else ("new" if old is None else "update")
        # edited on the host since the toolkit put it there: said, put back, its instance restarted
        drifted = change == "update" and unit_drifted(prefix, u["dest"], record)
        staged.append({k: v for k, v in u.items() if k != "content"} | {"change": change, "drifted": drifted})
        if change != "same" and u.get("instance"):
            unit_changed.add(u["instance"])
        if change != "same":
            diff.append({"before_header": u["dest"], "after_header": f"{u['dest']} (this release's unit)",
                         "before": (old or b"").decode("utf-8", "replace"), "after": new.decode("utf-8", "replace")})
    base = set(names) if restart_all else (set(changed) | unit_changed | set(not_running))
    restart = sorted(base & set(names))
    # an instance of the current release that leaves (removed, or renamed) and whose port an instance
    # being started takes must stop before that one starts; it is started again on revert
    prev = (previous or {}).get("instances") or {}
    new_ports = {}
    new_manifest = (manifest or read_manifest(prefix, release_id)).get("instances") or {}
    for n in restart:
        port = instance_address(new_manifest.get(n) or {})[0]
        if port:
            new_ports[port] = n
    stop_first = []
    for n, entry in sorted(prev.items()):
        if n in new_manifest:
            continue
        port = instance_address(entry)[0]
        if port in new_ports:
            stop_first.append({"instance": n, "unit": unit_of(n, entry), "port": port, "for": new_ports[port]})
    drifted = [{"dest": u["dest"], "instance": u.get("instance")} for u in staged if u["drifted"]]
    return {"restart": restart, "stop_first": stop_first, "units": staged, "remove": list(remove or []), "diff": diff,
            "drifted": drifted}


def begin(prefix, release_id, the_plan, backend, host="", controller="", check_mode=False, now=None, boot=None):
    """Write the journal and back up the unit files the plan replaces. Nothing that serves changes."""
    if read_journal(prefix) is not None:
        raise ActivationError(f"{journal_path(prefix)}: an earlier activation is unfinished (the recover step "
                              "should have finished or reverted it)")
    previous = current_target(prefix)
    prev_manifest = read_manifest(prefix, previous)
    prev_names = sorted(prev_manifest.get("instances") or {})
    touched = set(the_plan["restart"]) | {s["instance"] for s in the_plan["stop_first"]} | {
        u["instance"] for u in the_plan["units"] if u.get("instance") and u["change"] != "same"}
    units_active = {}
    for n in sorted(touched | set(prev_names)):
        unit = unit_of(n, (prev_manifest.get("instances") or {}).get(n))
        units_active[n] = backend.is_active(unit)
    journal = {
        "schema": SCHEMA, "release": release_id, "previous": previous, "previous_instances": prev_names,
        "started": now_iso(now), "boot_id": boot if boot is not None else boot_id(), "host": host,
        "controller": controller, "backend": backend.name, "restart": the_plan["restart"],
        "stop_first": the_plan["stop_first"], "remove": the_plan["remove"], "active_before": units_active,
        "units": [],
    }
    bdir = os.path.join(prefix, BACKUPS)
    for u in the_plan["units"]:
        if u["change"] == "same":
            continue
        rec = {"dest": u["dest"], "src": u["src"], "instance": u.get("instance"), "existed": u["change"] == "update",
               "backup": None, "enabled": False}
        if rec["existed"]:
            rec["backup"] = os.path.join(bdir, os.path.basename(u["dest"]))
            rec["enabled"] = backend.is_enabled(os.path.basename(u["dest"]))
        journal["units"].append(rec)
    journal["noop"] = not (journal["units"] or journal["restart"] or journal["stop_first"] or journal["remove"]
                           or previous != release_id)
    if check_mode:
        return journal
    # the unit files that stay as they are: what the toolkit wants there (a later hand edit is told apart)
    same = [u["dest"] for u in the_plan["units"] if u["change"] == "same"]
    if any(unit_drifted(prefix, d) or d not in read_unit_record(prefix) for d in same):
        record_units(prefix, same)
    if journal["noop"]:
        return journal  # nothing will change: no journal on the host (an unchanged re-run stays unchanged)
    if journal["units"]:
        os.makedirs(bdir, mode=0o700, exist_ok=True)
        for rec in journal["units"]:
            if rec["backup"]:
                data = read_bytes(rec["dest"])
                write_atomic(rec["backup"], data, 0o600)
    write_journal(prefix, journal, "begun", now)
    return journal


def _need(prefix, release_id, states):
    j = read_journal(prefix)
    if j is None or j.get("release") != release_id:
        raise ActivationError(f"no activation of {release_id} in progress ({journal_path(prefix)} "
                              f"{'is missing' if j is None else 'names ' + str(j.get('release'))})")
    if j["state"] not in states:
        raise ActivationError(f"activation of {release_id} is in state {j['state']}, expected {' or '.join(states)}")
    return j


def install(prefix, release_id, backend, check_mode=False, now=None):
    """The staged unit files go live (each atomically), daemon-reload, the new ones enabled."""
    j = _need(prefix, release_id, ("begun", "units"))
    changed = [u for u in j["units"] if read_bytes(u["dest"]) != read_bytes(u["src"])]
    if check_mode:
        return {"changed": bool(changed), "units": [u["dest"] for u in changed]}
    for u in changed:
        data = read_bytes(u["src"])
        if data is None:
            raise ActivationError(f"staged unit {u['src']} disappeared")
        os.makedirs(os.path.dirname(u["dest"]), mode=0o755, exist_ok=True)
        write_atomic(u["dest"], data, 0o644)
    if j["units"]:
        backend.reload()
        backend.enable([os.path.basename(u["dest"]) for u in j["units"]])
        record_units(prefix, [u["dest"] for u in j["units"]])
    write_journal(prefix, j, "units", now)
    return {"changed": bool(changed), "units": [u["dest"] for u in changed]}


def switch(prefix, release_id, backend, check_mode=False, now=None):
    """Stop the instances giving up their port, then ``current`` -> the release."""
    j = _need(prefix, release_id, ("units", "current"))
    moved = current_target(prefix) != release_id
    if check_mode:
        return {"changed": moved or bool(j["stop_first"]), "stopped": [s["unit"] for s in j["stop_first"]]}
    backend.stop([s["unit"] for s in j["stop_first"]])
    point_current(prefix, release_id)
    write_journal(prefix, j, "current", now)
    return {"changed": True, "stopped": [s["unit"] for s in j["stop_first"]], "current": release_id,
            "previous": j["previous"]}


def _remove_instance(item, unit_dir, backend, cache_root="/var/cache/dflash", staged_dir=None, prefix=None):
    units = [item["unit"]] + ([f"dflash-stage-{item['instance']}.service"] if item.get("stage_unit") else [])
    backend.stop(units)
    backend.disable(units)
    for u in units:
        for d in (unit_dir, staged_dir):
            if d and os.path.lexists(os.path.join(d, u)):
                os.unlink(os.path.join(d, u))
    if unit_dir and prefix:
        record_units(prefix, [os.path.join(unit_dir, u) for u in units])
    shutil.rmtree(os.path.join(cache_root, item["instance"]), ignore_errors=True)
    return units


def commit(prefix, release_id, backend, unit_dir, check_mode=False, cache_root="/var/cache/dflash", now=None):
    """The smoke test passed: do the removals asked for, delete journal and backups. The journal says
    'committing' first: from there on the activation is only ever finished, never reverted."""
    j = _need(prefix, release_id, ("current", "committing"))
    removed = [item["instance"] for item in j["remove"]]
    if check_mode:
        return {"changed": True, "removed": removed}
    write_journal(prefix, j, "committing", now)
    gone = []
    for item in j["remove"]:
        gone += _remove_instance(item, unit_dir, backend, cache_root, os.path.join(prefix, "units"), prefix)
    if j["remove"]:
        backend.reload()
        # the instances taken off (not a staging unit an instance that stays no longer needs)
        remember_removed(prefix, [item["instance"] for item in j["remove"]
                                  if item["unit"] == f"dflash-{item['instance']}.service"])
    # the unit files as this activation left them live: what the release says they are (status's drift check)
    record_live_units(prefix, release_id, j["units"], gone)
    _drop(prefix)
    return {"changed": True, "removed": removed}


REMOVED = "removed-instances.json"


def remember_removed(prefix, names) -> None:
    """The instances removed from this host (``<prefix>/removed-instances.json``): a name still listed in
    ``dflash_remove_instances`` after its releases were pruned is known, not a typo."""
    names = sorted(set(names or ()))
    if not names:
        return
    path = os.path.join(prefix, REMOVED)
    try:
        with open(path, encoding="utf-8") as fh:
            known = set(json.load(fh))
    except (OSError, ValueError, TypeError):
        known = set()
    if set(names) - known:
        write_atomic(path, (json.dumps(sorted(known | set(names))) + "\n").encode(), 0o644)


def revert(prefix, backend, check_mode=False, now=None, release_id=None):
    """Put back what the journal's activation changed. -> {restart: instances of the previous release
    to restart and smoke-test (those that ran before and were touched), stop: [the rest touched]}."""
    j = read_journal(prefix)
    if j is None:
        return {"changed": False, "restart": [], "stopped": [], "previous": current_target(prefix)}
    if release_id and j.get("release") != release_id:
        raise ActivationError(f"the unfinished activation is of {j.get('release')}, not {release_id}")
    if j["state"] == "committing":
        raise ActivationError(f"the activation of {j['release']} passed its smoke test and was being committed "
                              "(removals): it is not reverted; run the play again to finish it")
    prev_names = set(j.get("previous_instances") or [])
    active = j.get("active_before") or {}
    touched = set(j["restart"]) | {s["instance"] for s in j["stop_first"]} | {
        u["instance"] for u in j["units"] if u.get("instance")}
    new_only = sorted(n for n in set(j["restart"]) if n not in prev_names)
    restart = sorted(n for n in touched & prev_names if active.get(n))
    leave_stopped = sorted(n for n in touched & prev_names if not active.get(n))
    out = {"changed": True, "restart": restart, "stopped": new_only + leave_stopped,
           "previous": j.get("previous"), "release": j.get("release")}
    if check_mode:
        return out
    write_journal(prefix, j, "reverting", now)
    prev_manifest = read_manifest(prefix, j.get("previous"))
    units = [f"dflash-{n}.service" for n in new_only] + [
        unit_of(n, (prev_manifest.get("instances") or {}).get(n)) for n in leave_stopped]
    backend.stop(units)
    out["restored_units"] = restore_files(prefix, j, backend)
    out["current"] = current_target(prefix)
    return out


def finish(prefix, check_mode=False):
    """Delete the journal after a revert (and its smoke test) or a commit."""
    if read_journal(prefix) is None:
        return {"changed": False}
    if not check_mode:
        _drop(prefix)
    return {"changed": True}


# ----------------------------------------------------------------------------- what serves, checked


def serving(prefix, backend, check=health_status):
    """What serves now, checked: ``current``'s target and, for each of its instances, the unit state
    and whether /health answers on its port. -> {current, instances: {name: {...}}, lines}"""
    cur = current_target(prefix)
    manifest = read_manifest(prefix, cur)
    out, lines = {}, []
    for name, entry in sorted((manifest.get("instances") or {}).items()):
        url = instance_address(entry)[1]
        unit = unit_of(name, entry)
        active = backend.is_active(unit)
        code = check(url + "/health") if url else None
        ok = active and code == 200
        out[name] = {"unit": unit, "active": active, "health": code, "url": url, "serving": ok}
        lines.append(f"{name}: {'serving' if ok else 'NOT serving'} on {url} (unit {unit} "
                     f"{'active' if active else 'not active'}, /health {code if code is not None else 'no answer'})")
    head = f"current -> {cur}" if cur else "no current release"
    return {"current": cur, "instances": out, "lines": [head] + lines,
            "summary": head + ("; " + "; ".join(lines) if lines else "; no instance of ours")}
