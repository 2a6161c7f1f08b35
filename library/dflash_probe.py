#!/usr/bin/python
"""Ansible module: import/ABI probe of a layer's python (logic: module_utils/dflash_layers/probe.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: dflash_probe
short_description: Probe torch, sgl_kernel, flashinfer, xgrammar, soundfile and sglang in one call
description:
  - Runs each import in its own subprocess of C(python) (timeout each, bytecode writing off), so a
    crash in one does not hide the others. Each component reports its facts or the exception text.
  - With C(consistency) (the default) it also checks the combined environment, every layer at once
    (the probed python's whole sys.path, read with importlib.metadata): every requirement of every
    distribution that wins must be met; each unmet one is reported with its owner.
  - Returns the facts as C(dflash_probe) and the gate's problems (torch CUDA newer than the driver's,
    required components that failed, unmet requirements of the closure's distributions); it never
    fails by itself and never changes anything.
options:
  python: {description: The interpreter to probe (the final layer's bin/python)., type: path, required: true}
  pythonpath: {description: Directories put first on PYTHONPATH (the patched tree)., type: list, elements: path,
               default: []}
  components: {description: Components to probe., type: list, elements: str,
               default: [python, torch, sgl_kernel, flashinfer, xgrammar, soundfile, sglang]}
  required: {description: Components that must import for the gate to pass., type: list, elements: str, default: []}
  driver_cuda_version: {description: The driver's CUDA version (dflash_fingerprint.driver_cuda_version)., type: str}
  timeout: {description: Seconds per component., type: int, default: 300}
  workers: {description: Components probed at once., type: int, default: 3}
  env: {description: Extra environment for the probed python., type: dict, default: {}}
  consistency: {description: Check every requirement across the layers (pip check-like)., type: bool, default: true}
  closure: {description: "The final layer's closure (name==version): unmet requirements of these owners fail the
            gate, others are reported as outside it. Empty: every owner counts.", type: list, elements: str,
            default: []}
  excluded: {description: Projects the layers leave out on purpose (reported as excluded, never failing)., type: list,
             elements: str, default: []}
  gpus:
    description:
      - GPU indexes (nvidia-smi order) to open with the probed python's torch, each in its own process that
        sees only that GPU (a small kernel runs there). A GPU that nvidia-smi lists but CUDA cannot use is a
        problem naming its index and the CUDA error. Skipped when torch does not import.
    type: list
    elements: int
    default: []
  gpu_timeout: {description: Seconds per GPU., type: int, default: 120}
  algorithms: {description: "Speculative algorithms the instances run (DFLASH, DDTREE): each must be one the probed
               sglang resolves (its enum, or from 0.5.17 its registry: DDTREE), else a problem.", type: list,
               elements: str, default: []}
author: dflash-deploy
"""

RETURN = r"""
ansible_facts: {description: "dflash_probe: {component: {ok, ...facts} | {ok: false, error}}", returned: always,
                type: dict}
problems: {description: What the gate found (empty = pass)., returned: always, type: list}
gpu_warnings: {description: GPUs CUDA opened but could not allocate on (memory in use)., returned: always, type: list}
summary: {description: One line per component., returned: always, type: list}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.dflash_layers.probe import (
    COMPONENTS,
    gate,
    gpu_gate,
    gpu_summary,
    probe_consistency,
    run_gpu_probe,
    run_probe,
    summary,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "python": {"type": "path", "required": True},
            "pythonpath": {"type": "list", "elements": "path", "default": []},
            "components": {"type": "list", "elements": "str", "default": list(COMPONENTS)},
            "required": {"type": "list", "elements": "str", "default": []},
            "driver_cuda_version": {"type": "str"},
            "timeout": {"type": "int", "default": 300},
            "workers": {"type": "int", "default": 3},
            "env": {"type": "dict", "default": {}},
            "consistency": {"type": "bool", "default": True},
            "closure": {"type": "list", "elements": "str", "default": []},
            "excluded": {"type": "list", "elements": "str", "default": []},
            "gpus": {"type": "list", "elements": "int", "default": []},
            "gpu_timeout": {"type": "int", "default": 120},
            "algorithms": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    unknown = sorted((set(p["components"]) | set(p["required"])) - set(COMPONENTS))
    if unknown:
        module.fail_json(msg=f"unknown probe components: {', '.join(unknown)} (known: {', '.join(COMPONENTS)})")
    probe = run_probe(p["python"], p["pythonpath"] or None, p["components"], p["timeout"], p["env"], p["workers"])
    if p["consistency"]:
        probe["consistency"] = probe_consistency(p["python"], p["pythonpath"] or None, p["env"], p["closure"] or None,
                                                 p["excluded"])
    problems = gate(probe, p["driver_cuda_version"], p["required"], p["algorithms"])
    lines = summary(probe)
    warnings = []
    if p["gpus"]:
        torch = probe.get("torch") or {}
        if torch.get("ok") and not torch.get("cuda"):
            lines.append(f"GPUs {', '.join(str(g) for g in p['gpus'])}: per-GPU CUDA probe skipped: torch "
                         f"{torch.get('version')} is a CPU build (torch.version.cuda is None)")
        elif torch.get("ok"):
            # every requested GPU opened by this layer's torch, before any service starts
            probe["gpus"] = run_gpu_probe(p["python"], p["gpus"], p["pythonpath"] or None, p["gpu_timeout"], p["env"])
            gproblems, warnings = gpu_gate(probe["gpus"])
            problems += gproblems
            lines += gpu_summary(probe["gpus"])
        else:
            lines.append(f"GPUs {', '.join(str(g) for g in p['gpus'])}: per-GPU CUDA probe skipped: torch does not "
                         f"import in this layer ({torch.get('error') or 'not probed'})")
    module.exit_json(changed=False, ansible_facts={"dflash_probe": probe}, problems=problems,
                     summary=lines, gpu_warnings=warnings)


if __name__ == "__main__":
    main()
