"""The activation's journal on the host, and the boot guard that reads it.

``<prefix>/activation.json`` (root, 0600, written and fsync'd before anything that serves is touched) records an
activation (``activation.py``: the transaction's steps); the unit files it replaces are copied to
``<prefix>/activation/``. Here: the journal read and written atomically, this boot's id, ``current``, the unit files
and ``current`` put back as they were (``restore_files``), what an interrupted activation needs (``decide``), and the
boot guard.

  boot-guard  run as ``dflash-guard.service`` before the instance units at boot: a journal of an
            earlier boot whose release was not proven is reverted (files only; the units then start
            the old release) and left in state ``reverted-at-boot`` for the next run to report.

Stdlib only, plus the systemd backend (``dflash_service/systemd.py``, stdlib only too): the guard ships these two
files to ``<prefix>/libexec/guard/`` (roles/dflash_instances/tasks/guard.yml) and runs this one there without
Ansible, as ``python3 <prefix>/libexec/guard/dflash-guard boot-guard --prefix P``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import os
import shutil
import sys
import time as _time

from ansible.module_utils.dflash_service.systemd import Systemd, subprocess_run

SCHEMA = 1
JOURNAL = "activation.json"
BACKUPS = "activation"
# every move of ``current`` (JSON lines {at, from, to, by}): which release was current when a process started
HISTORY = "current.history"
HISTORY_KEEP = 500
# {unit file path: sha256 of what the toolkit last put there}: a unit file that differs was edited on the host
UNIT_RECORD = "units.installed.json"
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
    boot id, so a restarted container (a podman host's restart) is told apart by its new init; on a real
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


def _sha256(data: bytes | None) -> str | None:
    return hashlib.sha256(data).hexdigest() if data is not None else None


def read_unit_record(prefix: str) -> dict:
    try:
        with open(os.path.join(prefix, UNIT_RECORD), encoding="utf-8") as fh:
            rec = json.load(fh)
        return rec if isinstance(rec, dict) else {}
    except (OSError, ValueError):
        return {}


def record_units(prefix: str, dests) -> None:
    """Remember what the unit files ``dests`` hold now (the toolkit just wrote or checked them); a file that is
    gone is forgotten."""
    dests = list(dests or [])
    if not dests or not os.path.isdir(prefix):
        return
    rec = read_unit_record(prefix)
    for d in dests:
        digest = _sha256(read_bytes(d))
        if digest is None:
            rec.pop(d, None)
        else:
            rec[d] = digest
    write_atomic(os.path.join(prefix, UNIT_RECORD), (json.dumps(rec, indent=1, sort_keys=True) + "\n").encode(), 0o644)


def unit_drifted(prefix: str, dest: str, record: dict | None = None) -> bool:
    """Whether the unit file ``dest`` differs from what the toolkit last put there (edited by hand). Unknown (no
    record yet, e.g. installed by an older version) counts as not."""
    rec = (record if record is not None else read_unit_record(prefix)).get(dest)
    live = read_bytes(dest)
    return rec is not None and live is not None and _sha256(live) != rec


def record_switch(prefix: str, old: str | None, new: str | None, by: str, now: float | None = None) -> None:
    """Append a move of ``current`` to ``<prefix>/current.history`` (the last HISTORY_KEEP kept): recovery reads
    from it which release was current when a running process started (dflash_release/hoststate.py)."""
    path = os.path.join(prefix, HISTORY)
    line = json.dumps({"at": now if now is not None else _time.time(), "from": old, "to": new, "by": by},
                      sort_keys=True)
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError:
        lines = []
    write_atomic(path, ("\n".join((lines + [line])[-HISTORY_KEEP:]) + "\n").encode(), 0o644)


def point_current(prefix: str, release_id: str | None, by: str = "switch") -> bool:
    """``current`` -> releases/<id> (atomic rename), or removed for None. True when it changed (and recorded in
    ``current.history``, ``by`` saying what moved it)."""
    link = os.path.join(prefix, "current")
    if release_id is None:
        if os.path.islink(link):
            old = current_target(prefix)
            os.unlink(link)
            _fsync_dir(prefix)
            record_switch(prefix, old, None, by)
            return True
        return False
    target = os.path.join("releases", release_id)
    if not os.path.isfile(os.path.join(prefix, target, "manifest.json")):
        raise ActivationError(f"{prefix}/{target}/manifest.json not found")
    if os.path.islink(link) and os.readlink(link) == target:
        return False
    if os.path.exists(link) and not os.path.islink(link):
        raise ActivationError(f"{link} exists and is not a symlink; refusing to replace it")
    old = current_target(prefix)
    tmp = os.path.join(prefix, f".tmp-current-{os.getpid()}")
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, link)
    _fsync_dir(prefix)
    record_switch(prefix, old, release_id, by)
    return True


def read_manifest(prefix: str, release_id: str | None) -> dict:
    if not release_id:
        return {}
    try:
        with open(os.path.join(prefix, "releases", release_id, "manifest.json"), encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {}


def _drop(prefix):
    shutil.rmtree(os.path.join(prefix, BACKUPS), ignore_errors=True)
    if os.path.lexists(journal_path(prefix)):
        os.unlink(journal_path(prefix))
    _fsync_dir(prefix)


def restore_files(prefix, j, backend, by="revert"):
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
        record_units(prefix, [u["dest"] for u in j["units"]])
    prev = j.get("previous")
    if prev and not os.path.isfile(os.path.join(prefix, "releases", prev, "manifest.json")):
        prev = None  # pruned or broken: nothing to point at
    point_current(prefix, prev, by)
    return restored


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
    restored = restore_files(prefix, j, backend, by="boot-guard")
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
