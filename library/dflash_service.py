#!/usr/bin/python
"""Ansible module: start, stop, restart, enable, reload or read units through the host's service backend."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dflash_service
short_description: One task for a unit whatever the host's service backend (systemd or the runner)
description:
  - The same task for systemd hosts and hosts without systemd (GPU containers), chosen by O(service_manager)
    (C(dflash_service_manager)); the backend's interface is C(module_utils/dflash_service/) (systemctl and
    journalctl, or the runner, which runs the rendered unit's command in its own session with a log file and a
    pidfile).
  - With the runner, User=, the sandboxing directives and Restart= are not applied (said in a warning), and there
    is nothing to reload or enable (no boot starts units there).
  - Order of work is O(daemon_reload), O(enabled), O(state), O(reset_failed), then O(logs) lines of each unit's log.
options:
  name:
    description: Unit names (e.g. C(sglang-router.service)).
    type: list
    elements: str
    required: true
  state:
    description: C(started) starts the units not running, C(restarted) restarts them all, C(stopped) stops those
      running; left out, the units' state is only read.
    type: str
    choices: [started, stopped, restarted]
  enabled:
    description: Enable (or disable) the units at boot (systemd; nothing with the runner).
    type: bool
  daemon_reload:
    description: systemctl daemon-reload first (systemd; nothing with the runner).
    type: bool
    default: false
  reset_failed:
    description: Forget the units' failed state after the O(state) change (systemd; nothing with the runner).
    type: bool
    default: false
  logs:
    description: Return this many of the newest lines of each unit's log (its journal, or the runner's log file).
    type: int
    default: 0
  service_manager:
    description: The host's backend (C(dflash_service_manager)).
    type: str
    choices: [systemd, runner]
    default: systemd
  unit_dir: {description: Where the runner finds unit files., type: path, default: /etc/systemd/system}
  log_dir: {description: Where the runner writes each unit's log., type: path, default: /var/log/dflash}
  run_dir: {description: Where the runner keeps pidfiles., type: path, default: /run/dflash}
author: dflash-deploy
"""

EXAMPLES = r"""
- name: Start the router, restarted when its unit changed
  dflash_service:
    name: [sglang-router.service]
    state: "{{ 'restarted' if unit is changed else 'started' }}"
    enabled: true
    daemon_reload: "{{ unit is changed }}"
    service_manager: "{{ dflash_service_manager }}"
"""

RETURN = r"""
units: {description: Per unit its state before and after (systemctl show keys, or the runner's)., type: dict,
  returned: always}
logs: {description: Per unit the newest O(logs) lines of its log., type: dict, returned: with logs}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.dflash_service.backend import NAMES, NOT_EMULATED, backend


def _running(st):
    return st.get("ActiveState") in ("active", "activating", "reloading")


def main():
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "list", "elements": "str", "required": True},
            "state": {"type": "str", "choices": ["started", "stopped", "restarted"]},
            "enabled": {"type": "bool"},
            "daemon_reload": {"type": "bool", "default": False},
            "reset_failed": {"type": "bool", "default": False},
            "logs": {"type": "int", "default": 0},
            "service_manager": {"type": "str", "choices": list(NAMES), "default": "systemd"},
            "unit_dir": {"type": "path", "default": "/etc/systemd/system"},
            "log_dir": {"type": "path", "default": "/var/log/dflash"},
            "run_dir": {"type": "path", "default": "/run/dflash"},
        },
        supports_check_mode=True,
    )
    p = module.params
    systemd = p["service_manager"] == "systemd"
    service = backend(p["service_manager"], run=module.run_command, unit_dir=p["unit_dir"], log_dir=p["log_dir"],
                      run_dir=p["run_dir"], systemctl=module.get_bin_path("systemctl", required=systemd),
                      journalctl=module.get_bin_path("journalctl"))
    if not systemd and p["state"] in ("started", "restarted"):
        module.warn(NOT_EMULATED)
    units = p["name"]
    before = {u: service.state(u) for u in units}
    to_enable = []
    if systemd and p["enabled"] is not None:
        to_enable = [u for u in units if service.is_enabled(u) != p["enabled"]]
    if p["state"] == "started":
        to_change = [u for u in units if not _running(before[u])]
    elif p["state"] == "stopped":
        to_change = [u for u in units if _running(before[u])]
    else:
        to_change = list(units) if p["state"] == "restarted" else []
    changed = bool(to_change or to_enable)  # a daemon-reload alone changes nothing (as ansible.builtin.systemd_service)
    result = {"changed": changed, "units": {u: {"before": before[u]} for u in units}}
    if module.check_mode:
        module.exit_json(**result)
    if p["daemon_reload"]:
        service.reload()
    if to_enable:
        (service.enable if p["enabled"] else service.disable)(to_enable)
    out = None
    if p["state"] == "started" and to_change:
        out = service.start(to_change)
    elif p["state"] == "restarted":
        out = service.restart(to_change)
    elif p["state"] == "stopped" and to_change:
        service.stop(to_change)
    if p["reset_failed"]:
        service.reset_failed(units)
    for u in units:
        result["units"][u]["after"] = service.state(u)
        if p["logs"] > 0:
            result.setdefault("logs", {})[u] = service.logs(u, lines=p["logs"])
    if out and out["rc"] != 0:
        module.fail_json(msg=f"{', '.join(to_change)}: cannot {p['state'][:-2]}: {out['stderr'] or 'rc ' + str(out['rc'])}",
                         **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
