"""Molecule faults scenario only: kill ansible-playbook itself at a chosen task (the controller dies).

DFLASH_FAULT_KILL_AT=<substring of a task name>[#N]: when the (N-th, default first) task whose name
holds it starts, the ansible-playbook process sends itself SIGKILL (after DFLASH_FAULT_KILL_DELAY seconds, from a thread,
so that the task's worker is already running on the host: a kill in the middle of the task). Nothing
of the playbook runs after it, as with a controller that dies. Never used outside molecule/faults.
"""

from __future__ import annotations

DOCUMENTATION = """
name: dflash_kill_at
type: aggregate
short_description: Kill ansible-playbook at a task (fault injection for molecule/faults)
description:
  - Reads DFLASH_FAULT_KILL_AT and DFLASH_FAULT_KILL_DELAY; does nothing when they are unset.
"""

import os
import signal
import sys
import threading
import time

from ansible.plugins.callback import CallbackBase


def _kill(delay: float) -> None:
    if delay > 0:
        time.sleep(delay)
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "dflash_kill_at"
    CALLBACK_NEEDS_ENABLED = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        at = os.environ.get("DFLASH_FAULT_KILL_AT") or ""
        self.at, _, nth = at.partition("#")
        self.nth = int(nth or 1)
        self.delay = float(os.environ.get("DFLASH_FAULT_KILL_DELAY") or 0)
        self.seen = 0
        self.done = False

    def v2_playbook_on_task_start(self, task, is_conditional):
        if self.at and not self.done and self.at in task.get_name():
            self.seen += 1
            if self.seen < self.nth:
                return
            self.done = True
            print(f"DFLASH FAULT: killing ansible-playbook (pid {os.getpid()}) at task '{task.get_name()}'"
                  f"{f' after {self.delay:g} s' if self.delay else ''}", flush=True)
            if self.delay > 0:
                threading.Thread(target=_kill, args=(self.delay,), daemon=True).start()
            else:
                _kill(0)

    v2_playbook_on_handler_task_start = v2_playbook_on_task_start
