#!/usr/bin/python
"""Ansible module: start/stop/restart/inspect a rendered unit on a host without systemd."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dflash_runner
short_description: Run rendered dflash units on hosts without systemd
description:
  - The minimal service backend for hosts without systemd (GPU containers often lack it), chosen by
    C(dflash_service_manager=runner). It reads the rendered unit (EnvironmentFile=, Environment=,
    WorkingDirectory=, ExecStart= with systemd's C($VAR)/C(${VAR}) expansion) and runs its command in a
    new session, output appended to C(<log_dir>/<unit>.log), pid in C(<run_dir>/<unit>.pid).
  - NOT emulated, said loudly in the result: User= (the command runs as the connecting user), the
    sandboxing directives, Restart=. Logic in C(module_utils/dflash_service/runner.py).
options:
  name: {description: Unit file name (e.g. C(dflash-main.service))., type: str, required: true}
  state:
    description: What to do.
    type: str
    choices: [started, stopped, restarted, status]
    default: status
  unit_dir: {description: Where the unit file is., type: path, default: /etc/systemd/system}
  log_dir: {description: Where the logs go., type: path, default: /var/log/dflash}
  run_dir: {description: Where the pidfiles go., type: path, default: /run/dflash}
author: dflash-deploy
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.dflash_service.runner import show, start, stop

NOT_EMULATED = "dflash runner: User=, sandboxing and Restart= of the unit are not applied (no systemd on this host)"


def main():
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "state": {"type": "str", "default": "status", "choices": ["started", "stopped", "restarted", "status"]},
            "unit_dir": {"type": "path", "default": "/etc/systemd/system"},
            "log_dir": {"type": "path", "default": "/var/log/dflash"},
            "run_dir": {"type": "path", "default": "/run/dflash"},
        },
        supports_check_mode=True,
    )
    p = module.params
    unit = os.path.join(p["unit_dir"], p["name"])
    pidfile = os.path.join(p["run_dir"], p["name"] + ".pid")
    log = os.path.join(p["log_dir"], p["name"] + ".log")
    before = show(pidfile)
    running = before["ActiveState"] == "active"
    changed = (p["state"] == "started" and not running) or (p["state"] == "stopped" and running) \
        or p["state"] == "restarted"
    module.warn(NOT_EMULATED)
    result = {"changed": changed, "unit": unit, "log": log, "pidfile": pidfile, "before": before}
    if module.check_mode or not changed:
        module.exit_json(show=before, **result)
    if p["state"] in ("stopped", "restarted"):
        stop(pidfile)
    if p["state"] in ("started", "restarted"):
        if not os.path.exists(unit):
            module.fail_json(msg=f"{unit}: no such unit file", **result)
        try:
            result["pid"] = start(unit, log, pidfile)
        except (OSError, ValueError, KeyError) as exc:
            module.fail_json(msg=f"{p['name']}: cannot start: {exc}", **result)
    module.exit_json(show=show(pidfile), **result)


if __name__ == "__main__":
    main()
