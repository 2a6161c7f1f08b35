"""Action plugin of dflash_lock: who this run is, the bounded wait, and stale locks of this controller.

The module (library/dflash_lock.py) runs on the host and knows only the lock record; this plugin runs in
ansible-playbook on the controller and adds what only the controller knows:

- this run's record: the controller's host name, machine id and boot, the user, the ansible-playbook
  process (its pid and start time), the playbook and play, the purpose; the run id is derived from the
  controller and that process, so every task of one run (every play, every host) has the same id;
- whether a holder that names this same controller is still running (its ansible-playbook process):
  a lock of a run that is gone (killed, crashed) is taken over at once, naming it;
- the wait: ``wait`` seconds at most (``dflash_lock_wait``), asking every ``poll`` seconds and saying
  whom it waits for; then a failure in words naming the holder and what to do;
- ``read`` (a play that only reports, e.g. a status play: it never takes the lock): ``msg`` names the
  holder in the words a waiting run uses, ``stale`` says why its lock is stale (gone run of this controller,
  or no heartbeat for more than ``stale_after`` seconds), else None.
"""

from __future__ import annotations

import getpass
import hashlib
import os
import socket
import time

import ansible.module_utils
from ansible import context
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

# the repository's module_utils/ under the name the modules import it by (this file is loaded by path; docs/design.md,
# "Import path")
_MODULE_UTILS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _MODULE_UTILS not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(_MODULE_UTILS)

from ansible.module_utils.dflash_common.hostlock import describe, heartbeat_age, holder_gone, proc_start

display = Display()
WAIT_LINE_EVERY = 60.0


def _read(path) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def controller_self(purpose="", play="", host="") -> dict:
    """This run's record (the fields of hostlock.FIELDS less started/heartbeat). The ansible-playbook process
    is this worker's parent (workers are forked from it)."""
    pid = os.getppid()
    start = proc_start(pid)
    name = socket.gethostname()
    machine = _read("/etc/machine-id") or _read("/var/lib/dbus/machine-id") or name
    boot = _read("/proc/sys/kernel/random/boot_id")
    args = list((context.CLIARGS or {}).get("args") or [])
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    run_id = hashlib.sha256(f"{machine}|{boot}|{pid}|{start}".encode()).hexdigest()[:12]
    return {"run_id": run_id, "controller": name, "controller_id": machine, "controller_boot": boot, "user": user,
            "pid": pid, "pid_start": start, "playbook": os.path.basename(args[0]) if args else "",
            "play": play, "purpose": purpose, "host": host}


class ActionModule(ActionBase):
    _supports_check_mode = True

    def _call(self, args, task_vars):
        return self._execute_module(module_name="dflash_lock", module_args=args, task_vars=task_vars)

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        a = dict(self._task.args)
        action = a.get("action", "acquire")
        host = str(a.get("host") or task_vars.get("inventory_hostname") or "")
        me = controller_self(str(a.get("purpose") or ""), str(task_vars.get("ansible_play_name") or ""), host)
        base = {"prefix": a.get("prefix", "/opt/dflash")}
        try:
            if action != "acquire":
                out = self._call(dict(base, action=action, run_id=me["run_id"]), task_vars)
                out["run_id"] = me["run_id"]
                if action == "read" and not out.get("failed"):
                    out.update(self._said(out.get("holder"), me, host, a))
                return dict(result, **out)
            return dict(result, **self._acquire(a, me, base, host, task_vars))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)

    @staticmethod
    def _said(holder, me, host, a):
        """read (e.g. a status play, which reads without taking the lock): who holds the host, in the words a
        waiting run uses, and whether that lock is stale (``stale``: why, else None)."""
        if not holder:
            return {"stale": None, "msg": f"{host}: host lock: free"}
        gone = holder_gone(holder, me)
        if not gone and not holder.get("corrupt"):
            try:
                age, limit = heartbeat_age(holder), float(a.get("stale_after") or 1800)
            except (TypeError, ValueError):
                age, limit = None, 1800.0
            if age is not None and age > limit:
                gone = f"no heartbeat for {age:.0f} s (dflash_lock_stale_after {limit:.0f} s)"
        return {"stale": gone,
                "msg": f"{host}: host lock held by {describe(holder)}" + (f"; stale: {gone}" if gone else "")}

    def _acquire(self, a, me, base, host, task_vars):
        try:
            wait = max(0.0, float(a.get("wait") or 0))
            poll = max(0.5, float(a.get("poll") or 5))
            stale_after = float(a.get("stale_after") or 1800)
        except (TypeError, ValueError):
            return {"failed": True, "msg": f"{host}: dflash_lock_wait, dflash_lock_stale_after: numbers of seconds, "
                                           f"got {a.get('wait')!r}, {a.get('stale_after')!r}"}
        call = dict(base, action="acquire", holder=me, stale_after=stale_after,
                    create=a.get("create", True))
        if a.get("takeover"):
            call.update(takeover=str(a["takeover"]),
                        takeover_why=f"the user asked for it (dflash_lock_takeover={a['takeover']})")
        deadline = time.monotonic() + wait
        said = None
        waited = 0.0
        started = time.monotonic()
        while True:
            out = self._call(call, task_vars)
            if out.get("failed") or out.get("acquired"):
                break
            holder = out.get("holder") or {}
            gone = holder_gone(holder, me)
            if gone:
                out = self._call(dict(call, takeover=holder.get("run_id"), takeover_why=f"stale: {gone}"), task_vars)
                if out.get("failed") or out.get("acquired"):
                    break
                holder = out.get("holder") or {}
            left = deadline - time.monotonic()
            if left <= 0:
                waited = time.monotonic() - started
                out = dict(out, failed=True, msg=(
                    f"{host}: the host is locked by {describe(holder)}: another run changes or reads its releases"
                    f"{f'; waited {waited:.0f} s' if waited >= 1 else ''}. This run stops before changing anything. "
                    f"Wait for it with -e dflash_lock_wait=<seconds>; if that run is over and was started from another "
                    f"controller (its lock goes stale after dflash_lock_stale_after, {stale_after:.0f} s without a "
                    f"heartbeat), take the lock over now with -e dflash_lock_takeover={holder.get('run_id')}"))
                break
            if said is None or time.monotonic() - said >= WAIT_LINE_EVERY:
                display.display(f"{host}: waiting for the host lock held by {describe(holder)} "
                                f"({wait - left:.0f} s of dflash_lock_wait {wait:.0f} s)")
                said = time.monotonic()
            time.sleep(min(poll, left))
        out["run_id"] = me["run_id"]
        out["waited"] = round(time.monotonic() - started, 1)
        if out.get("acquired") and out.get("took_over"):
            prev = out["took_over"]
            out["msg"] = (f"{host}: took over the host lock of {describe(prev.get('holder'))}: "
                          f"{prev.get('why')}")
            display.warning(out["msg"])
        elif out.get("acquired") and out.get("holder"):
            out["msg"] = (f"{host}: host lock {'kept' if out.get('reentered') else 'taken'}: run {me['run_id']}"
                          f" ({me['purpose'] or me['playbook']})")
        return out
