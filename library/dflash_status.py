#!/usr/bin/python
"""Ansible module: what runs on a dflash host, read-only (playbooks/status.yml)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dflash_status
short_description: Read a dflash host's release, instances, health, live figures, drift and disk use
description:
  - Reads only; changes nothing and runs the same in check mode. The current release (id, verdict, sglang version,
    patch series, toolkit revision), per instance its unit state (ActiveState, SubState, NRestarts,
    ActiveEnterTimestamp through the service backend), C(/health), the server's own C(/metrics) lines that status
    reads (parsed on the controller), the figures its release measured in its smoke test, the rules that fired
    and its flags; the unit files, env files, links and the tree against what the release recorded (which file,
    what changed); the host now (O(fingerprint)) against the fingerprint the release was made for; disk use of
    layers, trees, releases, the router's layers and the models; every release's algorithm per instance.
  - Logic lives in C(module_utils/dflash_status/) (C(collect), C(drift), C(host), C(disk)).
options:
  prefix: {description: Install prefix (C(dflash_prefix))., type: path, default: /opt/dflash}
  fingerprint: {description: The C(dflash_fingerprint) fact taken now (left out, the host is not compared)., type: dict}
  service_manager:
    description: systemd, or C(runner) for hosts without systemd.
    type: str
    choices: [systemd, runner]
    default: systemd
  unit_dir: {description: Where the instance units are installed., type: path, default: /etc/systemd/system}
  log_dir: {description: Logs of runner-managed units., type: path, default: /var/log/dflash}
  run_dir: {description: Pidfiles of runner-managed units., type: path, default: /run/dflash}
  check_tree: {description: Hash the patched tree's files against its manifest., type: bool, default: true}
  metrics: {description: Read each instance's /metrics (instances with C(--enable-metrics))., type: bool, default: true}
  disk: {description: Measure disk use., type: bool, default: true}
author: dflash-deploy
"""

EXAMPLES = r"""
- name: Read the host
  dflash_status:
    prefix: /opt/dflash
    fingerprint: "{{ dflash_fingerprint }}"
"""

RETURN = r"""
current: {description: The current release id (null when none)., type: str, returned: always}
release: {description: The current release (id, status, sglang_version, series, toolkit, recorded)., type: dict,
  returned: always}
instances: {description: Per instance unit, unit_state, health, base_url, algorithm, args, rules, metrics_text,
  release_figures., type: dict, returned: always}
drift: {description: "Findings [{kind, instance, path, state, detail, diff}].", type: list, returned: always}
fingerprint: {description: The host now against the release's fingerprint (same, changes, busy)., type: dict,
  returned: always}
disk: {description: Disk use (layers, trees, releases, router_layers, models, totals, free)., type: dict,
  returned: with disk}
releases: {description: "Every release, oldest first: {id, status, algorithms}.", type: list, returned: always}
activation: {description: An unfinished activation's journal (state, release, started, controller)., type: dict,
  returned: always}
problems: {description: Unreadable releases or journal., type: list, returned: always}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.dflash_service.backend import NAMES, backend
from ansible.module_utils.dflash_status.collect import collect


def main():
    module = AnsibleModule(
        argument_spec={
            "prefix": {"type": "path", "default": "/opt/dflash"},
            "fingerprint": {"type": "dict"},
            "service_manager": {"type": "str", "default": "systemd", "choices": list(NAMES)},
            "unit_dir": {"type": "path", "default": "/etc/systemd/system"},
            "log_dir": {"type": "path", "default": "/var/log/dflash"},
            "run_dir": {"type": "path", "default": "/run/dflash"},
            "check_tree": {"type": "bool", "default": True},
            "metrics": {"type": "bool", "default": True},
            "disk": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    systemd = p["service_manager"] == "systemd"
    units = backend(p["service_manager"], run=module.run_command, unit_dir=p["unit_dir"], log_dir=p["log_dir"],
                    run_dir=p["run_dir"], systemctl=module.get_bin_path("systemctl", required=systemd),
                    journalctl=module.get_bin_path("journalctl"))
    out = collect(p["prefix"], units, p["unit_dir"], p["fingerprint"], p["check_tree"], p["metrics"], p["disk"])
    module.exit_json(changed=False, **out)


if __name__ == "__main__":
    main()
