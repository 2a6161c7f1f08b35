#!/usr/bin/python
"""Ansible module: tune.yml's configurations checked against the rules of the instances stage (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dflash_bench_tune_rules
short_description: Which tune configurations the instance rules allow on this host's target (changes nothing)
description:
  - Expands tune.yml's configurations and sweep (the bench matrix's checks - every error at once) and picks
    the base instance of the deployed release (C(<prefix>/current/manifest.json)) as bench.yml does.
  - Each configuration becomes the base instance of the inventory with that configuration's algorithm,
    DDTree mode and attention backend, and is checked with the instances stage's own rules over the target's
    C(config.json) - hybrid (linear-attention) targets, attention backends sglang refuses on an
    architecture. A configuration they refuse is left out, with the rule's message; deploy.yml would refuse
    it too.
  - Says whether the base instance runs dummy weights (C(--load-format dummy) in its flags).
  - Logic in C(module_utils/dflash_bench/tune_rules.py) and C(module_utils/dflash_instances/model.py).
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
configurations: {description: The configurations the rules allow (normalized)., type: list, returned: success}
refused: {description: "{configuration: message} of those they refuse.", type: dict, returned: success}
base: {description: "{name, args, inventory (the instance as the inventory has it)}", type: dict, returned: success}
dummy_weights: {description: Whether the base instance loads dummy weights., type: bool, returned: success}
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.dflash_bench.matrix import MatrixError, normalize
from ansible.module_utils.dflash_bench.plan import pick_base
from ansible.module_utils.dflash_bench.tune_rules import check_configurations, load_format
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
    allowed, refused = check_configurations(configs, inv, facts, host)
    args = [str(a) for a in base.get("args") or []]
    module.exit_json(changed=False, configurations=allowed, refused=refused,
                     base={"name": base_name, "args": args, "inventory": inv},
                     dummy_weights=load_format(args, inv) == "dummy", target=facts)


if __name__ == "__main__":
    main()
