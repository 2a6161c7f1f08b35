#!/usr/bin/python
"""Ansible module: generation smoke test + speculative-decoding proof for SGLang instances."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dflash_smoke
short_description: Prove that SGLang instances generate and that speculative decoding is active
description:
  - For each instance, a real chat completion (temperature 0, max_tokens 128, the seeds' fibonacci
    prompt by default) must return C(content) or C(reasoning_content); tokens/s is recorded.
    With C(--skip-tokenizer-init) in the args (no tokenizer, no chat) it generates from token ids.
  - For DFLASH/DDTREE instances, C(/get_server_info) must name the algorithm and a C(/generate)
    must show verify steps (C(spec_verify_ct) > 0) and an accept length in C(meta_info).
  - Every instance is tried; the module fails naming each instance that did not pass.
  - Logic lives in C(module_utils/dflash_release/smoke.py).
options:
  instances:
    description: Instances to test (or O(release_dir)).
    type: list
    elements: dict
    suboptions:
      name: {description: Instance name., type: str, required: true}
      args: {description: The launch_server args., type: list, elements: str}
      port: {description: Port (overrides args)., type: int}
      algorithm: {description: Speculative algorithm (default from args)., type: str}
      base_url: {description: Base URL (overrides args/port)., type: str}
  prompt: {description: Chat prompt., type: str, default: "Write a Python function fibonacci(n) using iteration. Return only code."}
  max_tokens: {description: max_tokens of the chat completion., type: int, default: 128}
  temperature: {description: Sampling temperature., type: float, default: 0}
  timeout: {description: Seconds per HTTP request., type: float, default: 120}
  spec_max_new_tokens: {description: max_new_tokens of the /generate proof request., type: int, default: 64}
  record_dir: {description: Directory where C(<name>.json) gets the C(smoke) record., type: path}
  host: {description: Host name used in messages., type: str, default: ''}
  gates:
    description:
      - Per instance name, its C(smoke_gates) settings (output, speculative and performance gates;
        C(module_utils/dflash_release/gates_config.py) lists them). Missing settings take O(gate_defaults), then
        the built-in defaults.
    type: dict
    default: {}
  gate_defaults: {description: The host's C(dflash_smoke_gates) settings., type: dict, default: {}}
  use_gates: {description: Run the gates (false = only the generation and speculative proof)., type: bool,
              default: true}
  baseline_release:
    description:
      - The release the performance gates compare with (the one this release replaces); with
        O(release_dir) its measurement is read from C(<releases>/<id>/smoke/<name>.json).
    type: str
extends_documentation_fragment: [dflash_release_target]
author: dflash-deploy
"""

EXAMPLES = r"""
- name: Smoke-test
  dflash_smoke:
    instances:
      - name: main
        args: [--port, "30001", --speculative-algorithm, DFLASH]
"""

RETURN = r"""
instances: {description: Per instance record (generation, speculative, perf, gates, gates_summary, stand_in,
  error)., type: dict, returned: always}
failed_instances: {description: Names that failed., type: list, returned: always}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.dflash_release.smoke import SmokeError, instance_secret_values, smoke_all
from ansible.module_utils.dflash_release.target import (
    check_named,
    gate_argument_spec,
    gate_options,
    smoke_argument_spec,
    smoke_options,
    target_argument_spec,
    target_constraints,
    target_instances,
)


def main():
    module = AnsibleModule(
        argument_spec={**target_argument_spec(), **smoke_argument_spec("timeout"), **gate_argument_spec()},
        supports_check_mode=True,
        **target_constraints(),
    )
    p = module.params
    where = (p["host"] + ": ") if p["host"] else ""
    if p["release_dir"] and module.check_mode:
        module.exit_json(changed=False, msg="check mode: the instances are not restarted nor tested",
                         failed_instances=[], instances={})
    try:
        instances = target_instances(p)
        module.no_log_values.update(instance_secret_values(instances))
        if module.check_mode:
            module.exit_json(changed=False, instances={}, failed_instances=[], msg="not run in check mode")
        check_named(instances)
        gates, context = gate_options(p, instances)
    except SmokeError as exc:
        module.fail_json(msg=f"{where}{exc}")
    results, failed, msgs = smoke_all(instances, smoke_options(p, "timeout"), p["record_dir"], where, gates, context)
    out = {"changed": bool(p["record_dir"]), "instances": results, "failed_instances": failed}
    if failed:
        module.fail_json(msg="; ".join(msgs), **out)
    module.exit_json(**out)


if __name__ == "__main__":
    main()
