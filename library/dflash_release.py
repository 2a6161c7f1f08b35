#!/usr/bin/python
"""Ansible module: create, activate, list, mark, roll back and prune dflash releases."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dflash_release
short_description: Releases under <prefix>/releases and the current link
description:
  - C(prepare) finds the release for the given facts (content hash) or creates
    C(<prefix>/releases/<id>/) with C(manifest.json), C(venv) and C(tree) links and
    C(instances/<name>.env) (0600). It does not activate.
  - C(activate) points C(<prefix>/current) at a release (atomic); C(deactivate) removes it.
  - C(mark) records the smoke verdict (C(status.json)); C(list) lists releases oldest first
    (order from the manifests); C(rollback_plan) says which release a rollback goes to and what
    changes; C(rollback) does both and switches current to the target; C(prune) keeps the newest O(keep)
    (and current and O(protect)) releases and returns what the kept ones use; the tree and layers stages
    prune their own directories from that (roles/dflash_tree, roles/dflash_layers: tasks_from prune).
  - C(sweep) removes what an interrupted run left (staging directories, temporary files) under the prefix, in
    O(dirs) and in O(unit_dir); it returns them with their sizes.
  - Logic lives in C(module_utils/dflash_release/).
options:
  action:
    description: What to do.
    type: str
    required: true
    choices: [prepare, activate, deactivate, mark, list, rollback_plan, rollback, prune, sweep]
  prefix: {description: Install prefix., type: path, default: /opt/dflash}
  layers: {description: The dflash_layers fact (final layer last)., type: list, elements: dict}
  extra_layers: {description: "The layers of the other sglang versions the instances run (dflash_runtimes): listed in
                 the manifest so that pruning keeps them.", type: list, elements: dict, default: []}
  tree: {description: The dflash_tree fact., type: dict}
  flags: {description: The dflash_flags fact., type: dict}
  fingerprint: {description: The dflash_fingerprint fact., type: dict}
  revision: {description: Toolkit git revision., type: str}
  dirty: {description: Toolkit work tree has uncommitted changes., type: bool, default: false}
  release_id: {description: Release for activate/mark., type: str}
  status: {description: Verdict for mark., type: str, choices: [healthy, failed]}
  detail: {description: Detail for mark., type: dict}
  keep: {description: Releases to keep for prune., type: int, default: 5}
  protect: {description: Release ids prune must keep., type: list, elements: str}
  rollback_to: {description: Release id for rollback_plan (default the previous healthy one)., type: str}
  healthy_only: {description: "rollback_plan: only a release whose smoke test passed (not one never tested).",
                 type: bool, default: false}
  host: {description: Host name used in messages., type: str, default: ''}
  secrets:
    description: "{instance: {VAR: value}}: API keys and credential variables, written to the instance's
      env file (0600) only; never returned, never in the manifest (prepare)."
    type: dict
  remove_absent: {description: Remove every instance the inventory no longer lists (prepare)., type: bool,
                  default: false}
  remove: {description: Instances to remove (prepare)., type: list, elements: str, default: []}
  unit_dir: {description: Where the instance units are installed (prepare, sweep)., type: path}
  units:
    description:
      - "The staged unit files the activation puts live (C(dflash_units): [{instance, src, dest}]); prepare records
        their sha256 in the manifest (C(files.units)) with the env files' digests and the host's fingerprint, which
        playbooks/status.yml checks the host against. A reused release made before these were recorded gets them."
    type: list
    elements: dict
  dirs:
    description: "Directories whose .tmp-* entries are an interrupted run's staging (sweep: the layers, the trees)."
    type: list
    elements: path
    default: []
author: dflash-deploy
"""

EXAMPLES = r"""
- name: List releases
  dflash_release:
    action: list
"""

RETURN = r"""
id: {description: Release id (prepare)., type: str, returned: prepare}
previous: {description: Release current pointed at before., type: str, returned: prepare, activate}
changed_instances: {description: Instances whose venv, tree or env file differ from current., type: list,
  returned: prepare, rollback_plan}
releases: {description: Releases oldest first., type: list, returned: list}
"""


from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.dflash_common.disk import os_error_message
from ansible.module_utils.dflash_common.hostlock import LockError, fence
from ansible.module_utils.dflash_release.manifest import ReleaseError
from ansible.module_utils.dflash_release.ops import (
    activate,
    deactivate,
    listing,
    mark,
    plan_rollback,
    prepare,
    prune,
    rollback,
    sweep_leftovers,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "action": {"type": "str", "required": True,
                       "choices": ["prepare", "activate", "deactivate", "mark", "list", "rollback_plan",
                                   "rollback", "prune", "sweep"]},
            "prefix": {"type": "path", "default": "/opt/dflash"},
            "layers": {"type": "list", "elements": "dict"},
            "extra_layers": {"type": "list", "elements": "dict", "default": []},
            "tree": {"type": "dict"},
            "flags": {"type": "dict"},
            "fingerprint": {"type": "dict"},
            "revision": {"type": "str"},
            "dirty": {"type": "bool", "default": False},
            "release_id": {"type": "str"},
            "status": {"type": "str", "choices": ["healthy", "failed"]},
            "detail": {"type": "dict"},
            "keep": {"type": "int", "default": 5},
            "protect": {"type": "list", "elements": "str", "default": []},
            "rollback_to": {"type": "str"},
            "healthy_only": {"type": "bool", "default": False},
            "host": {"type": "str", "default": ""},
            "secrets": {"type": "dict", "no_log": True},
            "remove_absent": {"type": "bool", "default": False},
            "remove": {"type": "list", "elements": "str", "default": []},
            "unit_dir": {"type": "path"},
            "units": {"type": "list", "elements": "dict"},
            "dirs": {"type": "list", "elements": "path", "default": []},
        },
        required_if=[("action", "activate", ["release_id"]), ("action", "mark", ["release_id", "status"])],
        supports_check_mode=True,
    )
    p = module.params
    prefix, check = p["prefix"], module.check_mode
    where = (p["host"] + ": ") if p["host"] else ""
    try:
        if not check and p["action"] in ("prepare", "activate", "deactivate", "mark", "rollback", "prune", "sweep"):
            fence()  # this run's host lock: refreshed, or the step refused when another run holds the host
        if p["action"] == "prepare":
            res = prepare(prefix, p["layers"], p["tree"], p["flags"], p["fingerprint"], p["revision"], p["dirty"],
                          host=p["host"] or "host", check_mode=check, secrets=p["secrets"],
                          remove_absent=p["remove_absent"], remove=p["remove"], unit_dir=p["unit_dir"],
                          units=p["units"], extra_layers=p["extra_layers"])
            module.exit_json(changed=res["created"] or bool(res["repaired"]) or bool(res["recorded"]), **res)
        if p["action"] == "activate":
            module.exit_json(**activate(prefix, p["release_id"], check_mode=check))
        if p["action"] == "deactivate":
            module.exit_json(**deactivate(prefix, check_mode=check))
        if p["action"] == "mark":
            module.exit_json(**mark(prefix, p["release_id"], p["status"], p["detail"] or {}, check_mode=check))
        if p["action"] == "list":
            module.exit_json(changed=False, **listing(prefix))
        if p["action"] == "rollback":
            module.exit_json(**rollback(prefix, p["rollback_to"], check_mode=check))
        if p["action"] == "rollback_plan":
            module.exit_json(changed=False, **plan_rollback(prefix, p["rollback_to"], p["healthy_only"]))
        if p["action"] == "sweep":
            res = sweep_leftovers(prefix, p["dirs"], p["unit_dir"], check_mode=check)
            module.exit_json(changed=bool(res["removed"]), **res)
        if p["action"] == "prune":
            res = prune(prefix, p["keep"], p["protect"], check_mode=check)
            module.exit_json(**res)
    except (ReleaseError, LockError) as exc:
        module.fail_json(msg=f"{where}{exc}")
    except OSError as exc:
        module.fail_json(msg=f"{where}{os_error_message(exc, prefix)}")


if __name__ == "__main__":
    main()
