#!/usr/bin/python
"""Ansible module: what tune.yml's rule check needs of the host - its deployed release and target (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dflash_bench_tune_rules
short_description: The deployed release's base instance and target for tune's rule check (changes nothing)
description:
  - Expands tune.yml's configurations and sweep (the bench matrix's checks - every error at once) and picks
    the base instance of the deployed release (C(<prefix>/current/manifest.json)) as bench.yml does, with the
    sglang version it runs (its manifest entry's, else the release tree's).
  - Reads the target's C(config.json) on the host. The rules themselves run on the controller (the filter
    C(dflash_bench_tune_allowed)): they need the sglang version's facts, which only the controller has
    (files/patches/sglang/versions.yml; module_utils/dflash_common/sglang.py).
  - Says whether the base instance runs dummy weights (C(--load-format dummy) in its flags).
options:
  prefix: {description: Install prefix., type: path, default: /opt/dflash}
  configurations: {description: Declared configurations., type: list, elements: raw, default: []}
  sweep: {description: Cross product of axes., type: dict, default: {}}
  base_instance: {description: Release instance whose flags are the base (default the first speculative)., type: str}
  instances: {description: The host's dflash_instances (the inventory's words)., type: list, elements: raw, default: []}
  host: {description: Host name for messages., type: str, default: ''}
author: dflash-deploy
"""

RETURN = r"""
configurations: {description: The configurations (normalized)., type: list, returned: success}
base: {description: "{name, args, inventory (the instance as the inventory has it), sglang_version}", type: dict,
       returned: success}
target: {description: The target's facts from its config.json ({} when unreadable)., type: dict, returned: success}
dummy_weights: {description: Whether the base instance loads dummy weights., type: bool, returned: success}
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.dflash_bench.matrix import MatrixError, normalize
from ansible.module_utils.dflash_bench.plan import pick_base
from ansible.module_utils.dflash_bench.tune_rules import load_format
from ansible.module_utils.dflash_instances.model import target_facts


def main():
    module = AnsibleModule(
        argument_spec={
            "prefix": {"type": "path", "default": "/opt/dflash"},
            "configurations": {"type": "list", "elements": "raw", "default": []},
            "sweep": {"type": "dict", "default": {}},
            "base_instance": {"type": "str"},
            "instances": {"type": "list", "elements": "raw", "default": []},
            "host": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    p = module.params
    host = p["host"] or "host"
    path = os.path.join(p["prefix"], "current", "manifest.json")
    try:
        with open(path, encoding="utf-8") as fh:
            manifest = json.load(fh)
    except (OSError, ValueError) as exc:
        module.fail_json(msg=f"{host}: no deployed release to tune ({path}: {exc}): run deploy.yml first")
    try:
        configs = normalize(p["configurations"], p["sweep"], host)
        base_name, base = pick_base(manifest, p["base_instance"], host)
    except MatrixError as exc:
        module.fail_json(msg="; ".join(exc.errors), errors=exc.errors)
    inv = next((i for i in p["instances"] if isinstance(i, dict) and i.get("name") == base_name), None)
    facts = {}
    model = (inv or {}).get("model_path")
    if isinstance(model, str):
        try:
            with open(os.path.join(model, "config.json"), encoding="utf-8") as fh:
                facts = target_facts(fh.read())
        except OSError:
            facts = {}
    args = [str(a) for a in base.get("args") or []]
    version = base.get("sglang_version") or (manifest.get("tree") or {}).get("sglang_version")
    module.exit_json(changed=False, configurations=configs,
                     base={"name": base_name, "args": args, "inventory": inv, "sglang_version": version},
                     dummy_weights=load_format(args, inv) == "dummy", target=facts)


if __name__ == "__main__":
    main()
