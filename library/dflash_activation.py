#!/usr/bin/python
"""Ansible module: one step of the activation transaction (logic: module_utils/dflash_release/activation.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dflash_activation
short_description: Activate a release as a transaction (journal, unit files, current, revert)
description:
  - C(begin) plans the activation of O(release_id) (unit files that change, instances to restart,
    instances of the current release that must stop first because another instance takes their port,
    removals for the commit) and writes the journal C(<prefix>/activation.json) with backups of the unit
    files it will replace. Nothing that serves changes.
  - C(install) puts the staged unit files live (daemon-reload, new units enabled); C(switch) stops the
    instances giving up their port and points C(<prefix>/current) at the release; C(commit) (after the
    smoke test) does the removals and deletes the journal.
  - C(revert) puts unit files and C(current) back and stops the instances new in the release; it returns
    the instances to restart and smoke-test; C(finish) then deletes the journal.
  - C(recover) says what an unfinished journal needs (C(none), C(commit) or C(revert)); C(inspect) reads the
    host against C(current) (its smoke verdict, which release each instance's process runs, a manifest that
    cannot be read) and says what to restart and smoke-test; C(serving) checks what serves now (unit state and
    C(/health) of every instance of the current release).
  - Logic lives in C(module_utils/dflash_release/activation.py).
options:
  action:
    description: The step.
    type: str
    required: true
    choices: [begin, install, switch, commit, revert, finish, recover, inspect, serving]
  prefix: {description: Install prefix., type: path, default: /opt/dflash}
  release_id: {description: The release being activated (begin, install, switch, commit)., type: str}
  manifest:
    description: The release's manifest when it is not on disk (begin in check mode, from dflash_release prepare).
    type: dict
  units:
    description: >-
      Staged unit files ({dest, src, instance}) the release needs live (begin); in check mode with C(content),
      what would be staged.
    type: list
    elements: dict
    default: []
  changed: {description: Instances whose release content differs from current (begin)., type: list, elements: str,
            default: []}
  restart_all: {description: Restart every instance of the release (begin)., type: bool, default: false}
  remove:
    description: Removals asked for ({instance, unit, stage_unit}), done at commit (begin).
    type: list
    elements: dict
    default: []
  service_manager: {description: systemd or runner., type: str, choices: [systemd, runner], default: systemd}
  unit_dir: {description: Where the unit files live., type: path, default: /etc/systemd/system}
  run_dir: {description: Pidfiles of runner-managed units., type: path, default: /run/dflash}
  host: {description: Host name used in messages., type: str, default: ''}
  controller: {description: Who runs the activation (recorded in the journal)., type: str, default: ''}
author: dflash-deploy
"""

EXAMPLES = r"""
- name: What serves now
  dflash_activation:
    action: serving
"""

RETURN = r"""
journal: {description: The journal written by begin., type: dict, returned: begin}
restart: {description: Instances to restart and smoke-test (begin, revert)., type: list, returned: begin, revert}
decision: {description: "none, commit or revert (recover); none or smoke (inspect).", type: str,
           returned: recover, inspect}
lines: {description: What serves, one line per instance, checked (serving)., type: list, returned: serving}
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.dflash_common.disk import os_error_message
from ansible.module_utils.dflash_common.hostlock import LockError, fence
from ansible.module_utils.dflash_release.activation import (
    begin,
    commit,
    finish,
    install,
    plan,
    revert,
    serving,
    switch,
    unit_of,
)
from ansible.module_utils.dflash_release.hoststate import inspect
from ansible.module_utils.dflash_release.journal import (
    ActivationError,
    boot_time,
    current_target,
    decide,
    describe,
    read_journal,
    read_manifest,
    release_status,
    sweep_before_boot,
)
from ansible.module_utils.dflash_service.backend import NAMES, backend


def main():
    module = AnsibleModule(
        argument_spec={
            "action": {"type": "str", "required": True,
                       "choices": ["begin", "install", "switch", "commit", "revert", "finish", "recover", "inspect",
                                   "serving"]},
            "prefix": {"type": "path", "default": "/opt/dflash"},
            "release_id": {"type": "str"},
            "units": {"type": "list", "elements": "dict", "default": []},
            "manifest": {"type": "dict"},
            "changed": {"type": "list", "elements": "str", "default": []},
            "restart_all": {"type": "bool", "default": False},
            "remove": {"type": "list", "elements": "dict", "default": []},
            "service_manager": {"type": "str", "default": "systemd", "choices": list(NAMES)},
            "unit_dir": {"type": "path", "default": "/etc/systemd/system"},
            "run_dir": {"type": "path", "default": "/run/dflash"},
            "host": {"type": "str", "default": ""},
            "controller": {"type": "str", "default": ""},
        },
        required_if=[("action", "begin", ["release_id"]), ("action", "install", ["release_id"]),
                     ("action", "switch", ["release_id"]), ("action", "commit", ["release_id"])],
        supports_check_mode=True,
    )
    p = module.params
    prefix, check = p["prefix"], module.check_mode
    where = (p["host"] + ": ") if p["host"] else ""
    service = backend(p["service_manager"], run=module.run_command, unit_dir=p["unit_dir"], run_dir=p["run_dir"])
    try:
        action = p["action"]
        if not check and action in ("begin", "install", "switch", "commit", "revert", "finish"):
            fence()  # this run's host lock: refreshed, or the step refused when another run holds the host
        if action == "begin":
            rid = p["release_id"]
            manifest = read_manifest(prefix, rid)
            if not manifest and check:
                manifest = p["manifest"] or {}  # a release a check-mode run would create is not on disk
            if not manifest and not check:
                module.fail_json(msg=f"{where}release {rid}: {prefix}/releases/{rid}/manifest.json not found")
            names = sorted(manifest.get("instances") or {})
            not_running = [n for n in names if not service.is_active(unit_of(n, manifest["instances"][n]))]
            the_plan = plan(prefix, rid, names, p["units"], p["changed"], not_running, p["restart_all"],
                            p["remove"], read_manifest(prefix, current_target(prefix)), manifest=manifest)
            journal = begin(prefix, rid, the_plan, service, host=p["host"], controller=p["controller"],
                            check_mode=check)
            module.exit_json(changed=not journal["noop"], journal=journal, restart=the_plan["restart"],
                             stop_first=the_plan["stop_first"], not_running=not_running,
                             units_changed=[u["dest"] for u in journal["units"]], diff=the_plan["diff"],
                             drifted=the_plan["drifted"])
        if action == "install":
            module.exit_json(**install(prefix, p["release_id"], service, check_mode=check))
        if action == "switch":
            module.exit_json(**switch(prefix, p["release_id"], service, check_mode=check))
        if action == "commit":
            module.exit_json(**commit(prefix, p["release_id"], service, p["unit_dir"], check_mode=check))
        if action == "revert":
            module.exit_json(**revert(prefix, service, check_mode=check, release_id=p["release_id"]))
        if action == "finish":
            module.exit_json(**finish(prefix, check_mode=check))
        if action == "recover":
            journal = read_journal(prefix)
            status = release_status(prefix, journal["release"]) if journal else {}
            decision = decide(journal, status)
            swept = [] if check else sweep_before_boot(os.path.expanduser("~/.ansible/tmp"), boot_time())
            module.exit_json(changed=bool(swept), decision=decision, journal=journal,
                             description=describe(journal) if journal else "",
                             release_status=status.get("status"), swept=swept)
        if action == "inspect":
            module.exit_json(changed=False, **inspect(prefix, service))
        if action == "serving":
            module.exit_json(changed=False, **serving(prefix, service))
    except (ActivationError, LockError) as exc:
        module.fail_json(msg=f"{where}{exc}")
    except OSError as exc:
        module.fail_json(msg=f"{where}{os_error_message(exc, prefix)}")


if __name__ == "__main__":
    main()
