"""Callback plugin (always on): Ansible's workers die with ansible-playbook.

A worker is a forked process in its own process group that runs one task on one host (the connection
subprocess, ssh or podman exec, in the same group). When ansible-playbook is killed (SIGKILL, a lost
terminal), its workers are orphaned and keep running their task, for as long as a 15-minute smoke
wait takes. Loaded in the ansible-playbook process, this plugin registers an at-fork hook: every
worker starts a watcher thread that ends the worker's process group once its parent is gone. The
host's side is left to the activation journal (module_utils/dflash_activation.py): the next run, or
a reboot, finishes or reverts what the killed run left.
"""

from __future__ import annotations

DOCUMENTATION = """
name: dflash_orphans
type: aggregate
short_description: End Ansible's worker processes when ansible-playbook dies
description:
  - Registers an at-fork hook in ansible-playbook; each forked worker ends its process group (the worker
    and its ssh / podman exec child) once its parent process is gone.
"""

import os
import signal
import threading
import time

from ansible.plugins.callback import CallbackBase

POLL_SECONDS = 1.0
_registered = False


def _watch(parent: int) -> None:
    while True:
        time.sleep(POLL_SECONDS)
        if os.getppid() != parent:
            me = os.getpid()
            try:
                if os.getpgid(0) == me:
                    os.killpg(me, signal.SIGTERM)
                else:
                    os.kill(me, signal.SIGTERM)
            except OSError:
                os._exit(1)
            return


def _after_fork_in_child() -> None:
    threading.Thread(target=_watch, args=(os.getppid(),), name="dflash-orphan-watch", daemon=True).start()


def register() -> bool:
    global _registered
    if not _registered and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)
        _registered = True
    return _registered


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "dflash_orphans"
    CALLBACK_NEEDS_ENABLED = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        register()
