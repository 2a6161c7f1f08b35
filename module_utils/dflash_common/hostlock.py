"""The host lock: one controller run at a time changes or reads a host's releases.

``<prefix>/lock`` (JSON, 0644, no secret in it) names its holder: the run id, the controller (host name,
machine id, boot), the user, the ansible-playbook pid and its start time, the playbook and play, the purpose
(deploy, rollback, bench, check, ...), when it was taken and its last heartbeat. Whoever reads or replaces
the record holds ``flock`` on ``<prefix>/.lock.guard`` meanwhile, so two runs that start in the same second
cannot both win: the second reads the first one's record.

A run that ends releases its lock (roles/dflash_release/tasks/lock.yml, unlock.yml and the handler). A run
that does not (controller killed, a laptop closed, a stopped rollout's hosts never reached) leaves it behind:
its lock is **stale**, and the next run takes it over, naming the holder, when

- the holder's controller is this run's controller (same machine id and boot) and the holder's
  ansible-playbook process is gone (no such pid, or a pid with another start time): exact, at once; the
  action plugin checks that on the controller (``action_plugins/dflash_lock.py``);
- the holder's heartbeat is older than ``stale_after`` seconds (a controller elsewhere cannot be asked).
  The holder refreshes the heartbeat itself, on the host, while it runs: every fenced step (``touch``: the
  activation's steps, the release's prepare/mark/prune, each chunk of the smoke test's wait) and, inside
  the long host-side steps (a layer build, a tree build, a benchmark), a thread every ``HEARTBEAT_EVERY``
  seconds (``Heartbeat``). A host waiting for its rollout batch longer than ``stale_after`` gets no
  heartbeat; another controller may then take it over, and this run stops on that host in words at its
  next fenced step (``touch`` refuses: the lock is no longer its own);
- the user says so: ``takeover=<run id>`` (``-e dflash_lock_takeover=<run id>``).

Fencing: the modules learn their run's id and the lock's prefix from the environment variables
``DFLASH_LOCK_RUN`` and ``DFLASH_LOCK_PREFIX`` (set by the plays from the lock task's fact); ``fence``
refuses a step when the lock names another run.

Stdlib only, no Ansible import.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import json
import os
import threading
import time

LOCK = "lock"
GUARD = ".lock.guard"
SCHEMA = 1
ENV_RUN = "DFLASH_LOCK_RUN"
ENV_PREFIX = "DFLASH_LOCK_PREFIX"
HEARTBEAT_EVERY = 30.0
# the holder's fields (all strings or numbers; what describe() says)
FIELDS = ("run_id", "controller", "controller_id", "controller_boot", "user", "pid", "pid_start", "playbook",
          "play", "purpose", "host", "started", "heartbeat")


class LockError(Exception):
    """The lock is another run's (fencing), or the lock file cannot be written; the message says whose."""


def lock_path(prefix: str) -> str:
    return os.path.join(prefix, LOCK)


def _now(now=None) -> float:
    return time.time() if now is None else float(now)


def _iso(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts, _dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@contextlib.contextmanager
def guarded(prefix: str):
    """flock on ``<prefix>/.lock.guard`` while the record is read and replaced."""
    os.makedirs(prefix, mode=0o755, exist_ok=True)
    fd = os.open(os.path.join(prefix, GUARD), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the flock


def read_holder(prefix: str) -> dict | None:
    """The record, None without one; ``{"corrupt": why}`` when it cannot be read."""
    try:
        with open(lock_path(prefix), encoding="utf-8") as fh:
            data = fh.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        return {"corrupt": f"{exc.__class__.__name__}: {exc.strerror or exc}"}
    try:
        holder = json.loads(data)
    except ValueError as exc:
        return {"corrupt": f"not JSON ({exc})"}
    if not isinstance(holder, dict) or not holder.get("run_id"):
        return {"corrupt": "no run id in it"}
    return holder


def _write(prefix: str, holder: dict) -> None:
    """The record through a temporary name and a rename (a reader sees the old record or the new one)."""
    path = lock_path(prefix)
    tmp = f"{path}.tmp-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(holder, fh, indent=1, sort_keys=True)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def heartbeat_age(holder: dict | None, now=None) -> float | None:
    try:
        return max(0.0, _now(now) - float((holder or {}).get("heartbeat")))
    except (TypeError, ValueError):
        return None


def describe(holder: dict | None, now=None) -> str:
    """'run R of user@controller (pid P, deploy.yml play 'X', purpose deploy, since T, last heartbeat N s ago)'."""
    if not holder:
        return "nobody"
    if holder.get("corrupt"):
        return f"an unreadable lock record ({holder['corrupt']})"
    age = heartbeat_age(holder, now)
    parts = [f"pid {holder.get('pid')}" if holder.get("pid") else "",
             (f"{holder.get('playbook')}" + (f" play '{holder['play']}'" if holder.get("play") else ""))
             if holder.get("playbook") else "",
             f"purpose {holder['purpose']}" if holder.get("purpose") else "",
             f"since {_iso(float(holder['started']))}" if isinstance(holder.get("started"), (int, float)) else "",
             f"last heartbeat {age:.0f} s ago" if age is not None else ""]
    return (f"run {holder.get('run_id')} of {holder.get('user') or '?'}@{holder.get('controller') or '?'} "
            f"({', '.join(p for p in parts if p)})")


def acquire(prefix: str, me: dict, stale_after: float, takeover: str | None = None, takeover_why: str = "",
            now=None) -> dict:
    """Take the lock for ``me`` (its fields: FIELDS less started/heartbeat) or say who holds it.

    -> {acquired, holder (the record now on the host), reentered (this run held it already), took_over:
    {holder, why} | None, age (the other holder's heartbeat age)}. A stale record is replaced here, under the
    guard: one whose heartbeat is older than ``stale_after``, an unreadable one, or the one of run
    ``takeover`` (the controller found its process gone, or the user asked)."""
    t = _now(now)
    with guarded(prefix):
        cur = read_holder(prefix)
        if cur and not cur.get("corrupt") and cur.get("run_id") == me["run_id"]:
            cur["heartbeat"] = t
            _write(prefix, cur)
            return {"acquired": True, "holder": cur, "reentered": True, "took_over": None, "age": None}
        why = None
        age = heartbeat_age(cur, t) if cur else None
        if cur and cur.get("corrupt"):
            why = f"the lock record could not be read ({cur['corrupt']})"
        elif cur and takeover and cur.get("run_id") == takeover:
            why = takeover_why or f"takeover of run {takeover} asked for"
        elif cur and (age is None or age > float(stale_after)):
            why = (f"no heartbeat for {age:.0f} s (more than dflash_lock_stale_after, {float(stale_after):.0f} s)"
                   if age is not None else "its record has no heartbeat")
        if cur and why is None:
            return {"acquired": False, "holder": cur, "reentered": False, "took_over": None, "age": age}
        holder = {k: me.get(k) for k in FIELDS if k not in ("started", "heartbeat")}
        holder.update(schema=SCHEMA, started=t, heartbeat=t)
        _write(prefix, holder)
        return {"acquired": True, "holder": holder, "reentered": False,
                "took_over": {"holder": cur, "why": why} if cur else None, "age": None}


def touch(prefix: str, run_id: str, now=None, recreate=True) -> dict:
    """Refresh the heartbeat of run ``run_id``'s lock (fencing: LockError when another run holds it).
    A record that went missing is written again for this run (nobody else holds the host) and said;
    with ``recreate`` false it is left missing ({held: False})."""
    t = _now(now)
    with guarded(prefix):
        cur = read_holder(prefix)
        if cur and not cur.get("corrupt") and cur.get("run_id") == run_id:
            cur["heartbeat"] = t
            _write(prefix, cur)
            return {"held": True, "rewritten": False, "holder": cur}
        if cur is None and not recreate:
            return {"held": False, "rewritten": False, "holder": None}
        if cur is None:
            holder = {"run_id": run_id, "schema": SCHEMA, "started": t, "heartbeat": t,
                      "purpose": "(record rewritten: it had gone missing)"}
            _write(prefix, holder)
            return {"held": True, "rewritten": True, "holder": holder}
        raise LockError(f"the host lock ({lock_path(prefix)}) is no longer this run's ({run_id}): it is held by "
                        f"{describe(cur, t)}; this run stops here, before changing anything more")


def release(prefix: str, run_id: str) -> dict:
    """Remove run ``run_id``'s lock. -> {released, holder (another run's record, left alone)}."""
    if not os.path.isdir(prefix):
        return {"released": False, "holder": None}
    with guarded(prefix):
        cur = read_holder(prefix)
        if cur and not cur.get("corrupt") and cur.get("run_id") == run_id:
            os.unlink(lock_path(prefix))
            return {"released": True, "holder": None}
        return {"released": False, "holder": cur}


def _from_env(environ=None) -> tuple[str, str]:
    env = environ if environ is not None else os.environ
    return env.get(ENV_RUN) or "", env.get(ENV_PREFIX) or ""


def fence(environ=None) -> dict | None:
    """For a module that changes the host: when the play set ``DFLASH_LOCK_RUN`` and ``DFLASH_LOCK_PREFIX``,
    refresh that run's lock or raise LockError (another run holds the host). Without them (a role used on
    its own, a play without the lock) None."""
    run, prefix = _from_env(environ)
    if not run or not prefix or not os.path.isdir(prefix):
        return None
    return touch(prefix, run)


class Heartbeat:
    """``with Heartbeat():`` refreshes this run's lock every ``every`` seconds from a thread while a long
    step runs (a layer build, a tree build, a benchmark, a long wait). Nothing without the environment of
    ``fence``; a lock that went missing or became another run's is left alone (the next fenced step says so)."""

    def __init__(self, every=HEARTBEAT_EVERY, environ=None):
        self.run, self.prefix = _from_env(environ)
        self.every = every
        self._stop = threading.Event()
        self._thread = None
        self.beats = 0

    def _loop(self):
        while not self._stop.wait(self.every):
            try:
                if not touch(self.prefix, self.run, recreate=False)["held"]:
                    return
                self.beats += 1
            except (LockError, OSError):
                return

    def __enter__(self):
        if self.run and self.prefix and os.path.isdir(self.prefix):
            self._thread = threading.Thread(target=self._loop, name="dflash-lock-heartbeat", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        return False


# ----------------------------------------------------------------------------- the controller's side


def proc_start(pid: int, proc="/proc") -> str | None:
    """A process's start time (clock ticks after boot, field 22 of /proc/<pid>/stat), None when it is gone."""
    try:
        with open(os.path.join(proc, str(int(pid)), "stat"), encoding="utf-8") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError, ValueError):
        return None


def holder_gone(holder: dict, me: dict, proc="/proc") -> str | None:
    """Why the holder's run is over, seen from this controller (``me``: this run's fields), else None.
    Only a holder of this same controller (machine id) can be judged this way."""
    if not holder or holder.get("corrupt") or not holder.get("controller_id"):
        return None
    if holder.get("controller_id") != me.get("controller_id"):
        return None
    where = f"{holder.get('controller') or 'this controller'}"
    if holder.get("controller_boot") and me.get("controller_boot") and holder["controller_boot"] != me["controller_boot"]:
        return f"{where} has restarted since that run began"
    if not holder.get("pid"):
        return None
    start = proc_start(holder["pid"], proc)
    if start is None:
        return f"its ansible-playbook process {holder['pid']} on {where} is gone"
    if holder.get("pid_start") and str(start) != str(holder["pid_start"]):
        return f"its ansible-playbook process {holder['pid']} on {where} is gone (the pid is another process now)"
    return None
