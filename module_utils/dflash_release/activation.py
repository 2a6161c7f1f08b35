#!/usr/bin/env python3
"""Activation as a transaction: nothing that serves changes until the new release passed its smoke
test, or the state from before is put back exactly (unit files, ``current``, what was running).

``<prefix>/activation.json`` (root, 0600, written and fsync'd before anything that serves is
touched) records the transaction; the unit files it replaces are copied to ``<prefix>/activation/``.
The steps, each one call of ``library/dflash_activation.py`` (so that an interrupted run stops
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
            passed its smoke test after the journal was written, else revert.
  boot-guard  run as ``dflash-guard.service`` before the instance units at boot: a journal of an
            earlier boot whose release was not proven is reverted (files only; the units then start
            the old release) and left in state ``reverted-at-boot`` for the next run to report.

Stdlib only and no Ansible import: the module imports it, and the guard runs this very file
(installed to ``<prefix>/libexec/``) as ``python3 dflash_activation.py boot-guard --prefix P``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

SCHEMA = 1
JOURNAL = "activation.json"
BACKUPS = "activation"
BOOT_ID = "/proc/sys/kernel/random/boot_id"
STATES = ("begun", "units", "current", "committing", "reverting", "reverted-at-boot")
GUARD_UNIT = "dflash-guard.service"


class ActivationError(Exception):
    """A step cannot run; the message says what and what to do."""


# ----------------------------------------------------------------------------- small helpers


def now_iso(now=None) -> str:
    now = now or _dt.datetime.now(_dt.UTC)
    return now.astimezone(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _init_start(stat="/proc/1/stat") -> str | None:
    """PID 1's start time (clock ticks after the kernel booted, field 22 of /proc/1/stat)."""
    try:
        with open(stat, encoding="utf-8") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return fields[19]
    except (OSError, IndexError):
        return None


def boot_id(path=BOOT_ID, init_stat="/proc/1/stat") -> str | None:
    """This boot: the kernel's boot id, plus PID 1's start time. A container shares its host's kernel
    boot id, so a restarted container (a lab host's reboot) is told apart by its new init; on a real
    host the kernel's id changes at each boot."""
    try:
        with open(path, encoding="utf-8") as fh:
            kernel = fh.read().strip() or None
    except OSError:
        return None
    init = _init_start(init_stat)
    return f"{kernel}/{init}" if kernel and init else kernel


def same_boot(recorded: str | None, boot: str | None) -> bool:
    """Whether a journal's boot id is this boot's (one recorded as the kernel's id alone, by an older
    version, is compared on that part)."""
    if not recorded or not boot:
        return False
    if "/" not in recorded:
        return recorded == boot.split("/", 1)[0]
    return recorded == boot


def _fsync_dir(path):
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str, data: bytes, mode: int) -> None:
    """Write through a temporary name, fsync, rename: a crash leaves the old file or the new one."""
    d = os.path.dirname(path) or "."
    tmp = os.path.join(d, f".tmp-{os.path.basename(path)}-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(d)


def read_bytes(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def journal_path(prefix: str) -> str:
    return os.path.join(prefix, JOURNAL)


def read_journal(prefix: str) -> dict | None:
    data = read_bytes(journal_path(prefix))
    if data is None:
        return None
    try:
        j = json.loads(data)
    except ValueError as exc:
        raise ActivationError(f"{journal_path(prefix)} is not readable JSON ({exc}): an activation was "
                              "interrupted while writing it; compare current with the releases and delete "
                              "the file by hand") from None
    if not isinstance(j, dict) or j.get("state") not in STATES:
        raise ActivationError(f"{journal_path(prefix)}: unknown state {j.get('state') if isinstance(j, dict) else j!r}")
    return j


def write_journal(prefix: str, journal: dict, state: str | None = None, now=None) -> dict:
    if state:
        journal["state"] = state
        journal.setdefault("history", []).append({"state": state, "at": now_iso(now)})
    write_atomic(journal_path(prefix), (json.dumps(journal, indent=2, sort_keys=True) + "\n").encode(), 0o600)
    return journal


def current_target(prefix: str) -> str | None:
    link = os.path.join(prefix, "current")
    if not os.path.islink(link):
        return None
    return os.path.basename(os.path.normpath(os.readlink(link)))


def point_current(prefix: str, release_id: str | None) -> bool:
    """``current`` -> releases/<id> (atomic rename), or removed for None. True when it changed."""
    link = os.path.join(prefix, "current")
    if release_id is None:
        if os.path.islink(link):
            os.unlink(link)
            _fsync_dir(prefix)
            return True
        return False
    target = os.path.join("releases", release_id)
    if not os.path.isfile(os.path.join(prefix, target, "manifest.json")):
        raise ActivationError(f"{prefix}/{target}/manifest.json not found")
    if os.path.islink(link) and os.readlink(link) == target:
        return False
    if os.path.exists(link) and not os.path.islink(link):
        raise ActivationError(f"{link} exists and is not a symlink; refusing to replace it")
    tmp = os.path.join(prefix, f".tmp-current-{os.getpid()}")
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, link)
    _fsync_dir(prefix)
    return True


def read_manifest(prefix: str, release_id: str | None) -> dict:
    if not release_id:
        return {}
    try:
        with open(os.path.join(prefix, "releases", release_id, "manifest.json"), encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {}


def _smoke():
    """module_utils/dflash_release/smoke.py (arguments, endpoints), imported when needed: the boot guard runs this
    file on its own and never needs it."""
    from ansible.module_utils.dflash_release import smoke as dflash_smoke
    return dflash_smoke


def instance_port(entry: dict):
    try:
        return int(_smoke().arg_value(entry.get("args"), "--port") or 0) or None
    except ValueError:
        return None


def unit_of(name: str, entry: dict | None = None) -> str:
    return (entry or {}).get("unit") or f"dflash-{name}.service"


# ----------------------------------------------------------------------------- service backends


class Systemd:
    """systemctl through ``run(argv) -> (rc, stdout, stderr)``."""

    name = "systemd"

    def __init__(self, run, no_block=False):
        self.run, self.no_block = run, no_block

    def _ctl(self, *argv):
        return self.run(["systemctl", *argv])

    def reload(self):
        self._ctl("daemon-reload")

    def enable(self, units):
        if units:
            self._ctl("enable", "--", *units)

    def disable(self, units):
        if units:
            self._ctl("disable", "--", *units)

    def stop(self, units):
        if units:
            # at boot (the guard) a stop must not wait for jobs queued behind the guard itself
            self._ctl("stop", *(["--no-block"] if self.no_block else []), "--", *units)

    def is_active(self, unit) -> bool:
        _rc, out, _ = self._ctl("is-active", "--", unit)
        return out.strip() == "active"

    def is_enabled(self, unit) -> bool:
        _rc, out, _ = self._ctl("is-enabled", "--", unit)
        return out.strip() == "enabled"


class Runner:
    """Hosts without systemd (module_utils/dflash_service/runner.py): nothing to reload or enable."""

    name = "runner"

    def __init__(self, run_dir="/run/dflash", stop=None, show=None):
        if stop is None or show is None:
            from ansible.module_utils.dflash_service.runner import show as _show
            from ansible.module_utils.dflash_service.runner import stop as _stop
            stop, show = stop or _stop, show or _show
        self.run_dir, self._stop, self._show = run_dir, stop, show

    def _pid(self, unit):
        return os.path.join(self.run_dir, unit + ".pid")

    def reload(self):
        pass

    def enable(self, units):
        pass

    def disable(self, units):
        pass

    def stop(self, units):
        for unit in units or []:
            self._stop(self._pid(unit))

    def is_active(self, unit) -> bool:
        return self._show(self._pid(unit)).get("ActiveState") == "active"

    def is_enabled(self, unit) -> bool:
        return False


def subprocess_run(argv):
    p = subprocess.run(argv, capture_output=True, text=True, check=False)
    return p.returncode, p.stdout, p.stderr


# ----------------------------------------------------------------------------- plan


def plan(prefix, release_id, names, units, changed, not_running, restart_all=False, remove=(),
         previous=None):
    """What an activation of ``release_id`` does, from facts only (pure).

    names: instances of the new release; units: [{dest, src, instance}] the staged unit files;
    changed: instances whose release content differs from current; not_running: instances not
    active now; remove: [{instance, unit, stage_unit}] removals asked for (done at commit);
    previous: the current release's manifest ({} on a first deploy).
    -> {restart, stop_first, units: [{dest, src, instance, change}], remove}"""
    names = sorted(names)
    staged = []
    unit_changed = set()
    for u in units or []:
        new = read_bytes(u["src"])
        if new is None:
            raise ActivationError(f"staged unit {u['src']} is missing (the instances stage did not run?)")
        old = read_bytes(u["dest"])
        change = "same" if old == new else ("new" if old is None else "update")
        staged.append(dict(u, change=change))
        if change != "same" and u.get("instance"):
            unit_changed.add(u["instance"])
    base = set(names) if restart_all else (set(changed) | unit_changed | set(not_running))
    restart = sorted(base & set(names))
    # an instance of the current release that leaves (removed, or renamed) and whose port an instance
    # being started takes must stop before that one starts; it is started again on revert
    prev = (previous or {}).get("instances") or {}
    new_ports = {}
    new_manifest = read_manifest(prefix, release_id).get("instances") or {}
    for n in restart:
        port = instance_port(new_manifest.get(n) or {})
        if port:
            new_ports[port] = n
    stop_first = []
    for n, entry in sorted(prev.items()):
        if n in new_manifest:
            continue
        port = instance_port(entry)
        if port in new_ports:
            stop_first.append({"instance": n, "unit": unit_of(n, entry), "port": port, "for": new_ports[port]})
    return {"restart": restart, "stop_first": stop_first, "units": staged, "remove": list(remove or [])}


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
    if check_mode or journal["noop"]:
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


def _remove_instance(item, unit_dir, backend, cache_root="/var/cache/dflash", staged_dir=None):
    units = [item["unit"]] + ([f"dflash-stage-{item['instance']}.service"] if item.get("stage_unit") else [])
    backend.stop(units)
    backend.disable(units)
    for u in units:
        for d in (unit_dir, staged_dir):
            if d and os.path.lexists(os.path.join(d, u)):
                os.unlink(os.path.join(d, u))
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
    for item in j["remove"]:
        _remove_instance(item, unit_dir, backend, cache_root, os.path.join(prefix, "units"))
    if j["remove"]:
        backend.reload()
    _drop(prefix)
    return {"changed": True, "removed": removed}


def _drop(prefix):
    shutil.rmtree(os.path.join(prefix, BACKUPS), ignore_errors=True)
    if os.path.lexists(journal_path(prefix)):
        os.unlink(journal_path(prefix))
    _fsync_dir(prefix)


def restore_files(prefix, j, backend):
    """Unit files and ``current`` as they were before the journal's activation. -> the units it
    changed back. Idempotent: a second run (interrupted revert) finds nothing left to do."""
    restored = []
    new = [u for u in j["units"] if not u["existed"]]
    if new:
        backend.stop([os.path.basename(u["dest"]) for u in new])
        backend.disable([os.path.basename(u["dest"]) for u in new if os.path.exists(u["dest"])])
    for u in j["units"]:
        if u["existed"]:
            data = read_bytes(u["backup"]) if u["backup"] else None
            if data is not None and read_bytes(u["dest"]) != data:
                write_atomic(u["dest"], data, 0o644)
                restored.append(u["dest"])
        elif os.path.lexists(u["dest"]):
            os.unlink(u["dest"])
            restored.append(u["dest"])
    if j["units"]:
        backend.reload()
        backend.enable([os.path.basename(u["dest"]) for u in j["units"] if u["existed"] and u["enabled"]])
    prev = j.get("previous")
    if prev and not os.path.isfile(os.path.join(prefix, "releases", prev, "manifest.json")):
        prev = None  # pruned or broken: nothing to point at
    point_current(prefix, prev)
    return restored


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


def release_status(prefix, release_id) -> dict:
    try:
        with open(os.path.join(prefix, "releases", release_id, "status.json"), encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError, TypeError):
        return {}


def decide(journal, status) -> str:
    """What an unfinished activation needs: none | commit (its release passed a smoke test after the
    journal was written) | revert."""
    if journal is None:
        return "none"
    if journal["state"] in ("reverting", "reverted-at-boot"):
        return "revert"
    if journal["state"] == "committing":
        return "commit"
    if (journal["state"] == "current" and (status or {}).get("status") == "healthy"
            and str((status or {}).get("at") or "") >= str(journal.get("started") or "~")):
        return "commit"
    return "revert"


def describe(journal) -> str:
    return (f"an activation of release {journal.get('release')} (previous: {journal.get('previous') or 'none'}), "
            f"started {journal.get('started')} by {journal.get('controller') or 'a controller'}, "
            f"stopped in state '{journal.get('state')}'")


# ----------------------------------------------------------------------------- what serves, checked


def health(url, timeout=5.0):
    # sglang answers /health only after its one-token probe and a 1 s sleep (see dflash_smoke.HEALTH_TIMEOUT)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (OSError, urllib.error.URLError, ValueError):
        return None


def serving(prefix, backend, check=health):
    """What serves now, checked: ``current``'s target and, for each of its instances, the unit state
    and whether /health answers on its port. -> {current, instances: {name: {...}}, lines}"""
    cur = current_target(prefix)
    manifest = read_manifest(prefix, cur)
    out, lines = {}, []
    for name, entry in sorted((manifest.get("instances") or {}).items()):
        url = _smoke().endpoint(entry.get("args"))
        unit = unit_of(name, entry)
        active = backend.is_active(unit)
        code = check(url + "/health")
        ok = active and code == 200
        out[name] = {"unit": unit, "active": active, "health": code, "url": url, "serving": ok}
        lines.append(f"{name}: {'serving' if ok else 'NOT serving'} on {url} (unit {unit} "
                     f"{'active' if active else 'not active'}, /health {code if code is not None else 'no answer'})")
    head = f"current -> {cur}" if cur else "no current release"
    return {"current": cur, "instances": out, "lines": [head] + lines,
            "summary": head + ("; " + "; ".join(lines) if lines else "; no instance of ours")}


# ----------------------------------------------------------------------------- leftovers of a lost host


def boot_time(stat="/proc/stat") -> float | None:
    try:
        with open(stat, encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def sweep_before_boot(tmp_root: str, booted: float | None) -> list:
    """Ansible's remote temporary directories (ansible-tmp-*, ansible-moduletmp-*) made before this boot:
    the host went away while a module ran, nothing can still use them."""
    gone = []
    if booted is None or not os.path.isdir(tmp_root):
        return gone
    for name in sorted(os.listdir(tmp_root)):
        path = os.path.join(tmp_root, name)
        if not name.startswith(("ansible-tmp-", "ansible-moduletmp-")) or os.path.islink(path):
            continue
        try:
            if os.lstat(path).st_mtime < booted:
                shutil.rmtree(path, ignore_errors=True)
                gone.append(path)
        except OSError:
            continue
    return gone


# ----------------------------------------------------------------------------- boot guard


def boot_guard(prefix, backend, boot=None, now=None) -> str:
    """At boot, before the instance units: revert an activation of an earlier boot that was not
    proven by its smoke test (files only). Returns what it did, for the journal (stdout)."""
    j = read_journal(prefix)
    if j is None:
        return "no unfinished activation"
    boot = boot if boot is not None else boot_id()
    if same_boot(j.get("boot_id"), boot):
        return f"{describe(j)}: same boot, left to the run that owns it"
    if j.get("state") == "reverted-at-boot":
        return f"{describe(j)}: already reverted at an earlier boot; the next deploy run finishes it"
    if decide(j, release_status(prefix, j["release"])) == "commit":
        return f"{describe(j)}: its release passed the smoke test; left current, the next deploy run commits it"
    restored = restore_files(prefix, j, backend)
    write_journal(prefix, j, "reverted-at-boot", now)
    return (f"{describe(j)}: reverted at boot: current -> {current_target(prefix) or 'none'}; unit files put back: "
            f"{', '.join(restored) or 'none'}; the next deploy run restarts, checks and finishes it")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="dflash activation journal (boot guard)")
    ap.add_argument("command", choices=["boot-guard", "show"])
    ap.add_argument("--prefix", default="/opt/dflash")
    args = ap.parse_args(argv)
    try:
        if args.command == "show":
            print(json.dumps(read_journal(args.prefix), indent=2))
            return 0
        print("dflash-guard: " + boot_guard(args.prefix, Systemd(subprocess_run, no_block=True)), flush=True)
    except (ActivationError, OSError) as exc:
        print(f"dflash-guard: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
