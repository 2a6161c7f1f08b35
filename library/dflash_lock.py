#!/usr/bin/python
"""Ansible module: the host lock, one step (logic: module_utils/dflash_common/hostlock.py). Its action plugin
(action_plugins/dflash_lock.py) fills in who the controller is, waits and takes over stale locks."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dflash_lock
short_description: One run at a time on a host's releases (<prefix>/lock)
description:
  - C(acquire) takes C(<prefix>/lock) for O(holder) or returns who holds it; a record whose heartbeat is older
    than O(stale_after) seconds, an unreadable one, or the one of run O(takeover) is replaced (the holder is
    returned in C(took_over)). Read and replaced under C(flock) of C(<prefix>/.lock.guard).
  - C(touch) refreshes this run's heartbeat and fails when another run holds the lock (fencing);
    C(release) removes this run's lock and leaves another run's alone; C(read) returns the record (nothing
    written; through the action plugin also C(msg), the holder in words, and C(stale), why it is stale).
  - Run through the action plugin of the same name, which sets O(holder) from the controller and waits.
  - Logic lives in C(module_utils/dflash_common/hostlock.py).
options:
  action: {description: The step., type: str, required: true, choices: [acquire, touch, release, read]}
  prefix: {description: Install prefix., type: path, default: /opt/dflash}
  holder: {description: This run's record (acquire; the action plugin fills it in)., type: dict}
  run_id: {description: This run's id (touch, release)., type: str}
  stale_after: {description: Seconds without a heartbeat after which a lock is stale (acquire)., type: float,
                default: 1800}
  takeover: {description: Run id whose lock to take over (acquire)., type: str}
  takeover_why: {description: Why (said in the play output)., type: str, default: ''}
  create: {description: "Create the prefix when it does not exist (acquire); false: nothing to lock, nothing
           is written (a check-mode run on a host never deployed).", type: bool, default: true}
author: dflash-deploy
"""

EXAMPLES = r"""
- name: Who holds the host
  dflash_lock:
    action: read
"""

RETURN = r"""
acquired: {description: Whether this run holds the lock now (acquire)., type: bool, returned: acquire}
holder: {description: The record on the host (whoever holds it)., type: dict, returned: always}
took_over: {description: "{holder, why} of a stale lock replaced (acquire).", type: dict, returned: acquire}
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.dflash_common.disk import os_error_message
from ansible.module_utils.dflash_common.hostlock import LockError, acquire, read_holder, release, touch


def main():
    module = AnsibleModule(
        argument_spec={
            "action": {"type": "str", "required": True, "choices": ["acquire", "touch", "release", "read"]},
            "prefix": {"type": "path", "default": "/opt/dflash"},
            "holder": {"type": "dict"},
            "run_id": {"type": "str"},
            "stale_after": {"type": "float", "default": 1800},
            "takeover": {"type": "str"},
            "takeover_why": {"type": "str", "default": ""},
            "create": {"type": "bool", "default": True},
        },
        required_if=[("action", "acquire", ["holder"]), ("action", "touch", ["run_id"]),
                     ("action", "release", ["run_id"])],
        supports_check_mode=True,
    )
    p = module.params
    prefix = p["prefix"]
    try:
        if p["action"] == "read":
            module.exit_json(changed=False, holder=read_holder(prefix) if os.path.isdir(prefix) else None)
        if p["action"] == "acquire":
            if not os.path.isdir(prefix) and not p["create"]:
                module.exit_json(changed=False, acquired=True, holder=None, took_over=None, reentered=False,
                                 skipped=f"{prefix} does not exist: nothing to read, no lock written")
            res = acquire(prefix, p["holder"], p["stale_after"], p["takeover"], p["takeover_why"])
            module.exit_json(changed=False, **res)
        if p["action"] == "touch":
            module.exit_json(changed=False, **touch(prefix, p["run_id"]))
        if p["action"] == "release":
            module.exit_json(changed=False, **release(prefix, p["run_id"]))
    except LockError as exc:
        module.fail_json(msg=str(exc))
    except OSError as exc:
        module.fail_json(msg=f"host lock: {os_error_message(exc, prefix)}")


if __name__ == "__main__":
    main()
