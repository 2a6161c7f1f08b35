#!/usr/bin/python
"""Ansible module dflash_fingerprint: thin wrapper over module_utils/dflash_fingerprint/."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: dflash_fingerprint
short_description: Fingerprint a GPU host in one call (GPUs, SM, driver, CUDA, toolkits, torch)
description:
  - Runs C(nvidia-smi) (plain table, C(--query-gpu) CSV, C(--query-compute-apps) CSV, C(-q -x) XML),
    reads C(/proc/driver/nvidia/version), C(nvcc --version), C(/usr/local/cuda*), C(/etc/os-release),
    glibc, and optionally probes the torch of a base venv python.
  - Sets the fact C(dflash_fingerprint) (layout in docs/design.md).
  - With I(replay_dir) it reads a capture folder instead of running anything; with I(capture_dir) it
    also writes the raw outputs there.
  - With I(layers) and/or I(requests) it evaluates the compatibility gate and returns C(refusals);
    it never fails on them itself (the dflash_fingerprint role does).
  - Read-only unless I(capture_dir) is given; supports check mode.
options:
  replay_dir:
    description: Capture folder to read instead of running the tools.
    type: path
  capture_dir:
    description: Folder to write this host's raw outputs to (skipped in check mode).
    type: path
  return_raw:
    description: Return the raw outputs as C(raw) ({file name, text}) so the controller can store them.
    type: bool
    default: false
  venv_python:
    description: Python of the base venv whose torch is probed (version, CUDA, GPUs visible).
    type: path
  proc_version_path:
    description: Where the kernel module version is read (the lab points it into its capture folder).
    type: path
    default: /proc/driver/nvidia/version
  layers:
    description: The host's C(dflash_venv_layers); each layer's C(cuda) (or C(+cuXYZ) pins) is gated.
    type: list
    elements: dict
    default: []
  requests:
    description: GPUs the instances ask for, C([{instance, gpus, allow_busy}]).
    type: list
    elements: dict
    default: []
  instances:
    description: The host's C(dflash_instances); turned into I(requests) (name, gpus, allow_busy_gpus).
    type: list
    elements: dict
    default: []
  host:
    description: Host name used in refusals.
    type: str
  allow_minor_version_compat:
    description: Accept wheels of a newer CUDA minor on a driver of the same major (CUDA minor version compatibility).
    type: bool
    default: false
author: dflash-deploy
"""

EXAMPLES = r"""
- name: Fingerprint and gate
  dflash_fingerprint:
    venv_python: /root/venv/bin/python3
    layers: "{{ dflash_venv_layers }}"
    requests: [{instance: main, gpus: [1], allow_busy: false}]
    host: "{{ inventory_hostname }}"
  register: fp

- name: Replay a capture folder
  dflash_fingerprint:
    replay_dir: /tmp/ct200-capture
"""

RETURN = r"""
ansible_facts:
  description: C(dflash_fingerprint), the host's fingerprint.
  returned: always
  type: dict
refusals:
  description: Gate refusals, each naming host, GPU and versions. Empty when the host passes.
  returned: always
  type: list
  elements: str
raw:
  description: Raw outputs in the capture-folder format.
  returned: when return_raw
  type: dict
captured:
  description: Files written to capture_dir.
  returned: when capture_dir
  type: list
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.dflash_fingerprint.collect import collect_raw, read_capture, write_capture
from ansible.module_utils.dflash_fingerprint.gate import gate, requests_from_instances
from ansible.module_utils.dflash_fingerprint.merge import fingerprint_from_raw


def main():
    module = AnsibleModule(
        argument_spec={
            "replay_dir": {"type": "path"},
            "capture_dir": {"type": "path"},
            "return_raw": {"type": "bool", "default": False},
            "venv_python": {"type": "path"},
            "proc_version_path": {"type": "path", "default": "/proc/driver/nvidia/version"},
            "layers": {"type": "list", "elements": "dict", "default": []},
            "requests": {"type": "list", "elements": "dict", "default": []},
            "instances": {"type": "list", "elements": "dict", "default": []},
            "host": {"type": "str"},
            "allow_minor_version_compat": {"type": "bool", "default": False},
        },
        mutually_exclusive=[("replay_dir", "capture_dir")],
        supports_check_mode=True,
    )
    p = module.params
    if p["replay_dir"]:
        try:
            raw = read_capture(p["replay_dir"])
        except OSError as exc:
            module.fail_json(msg=f"dflash_fingerprint: {exc}")
    else:
        raw = collect_raw(venv_python=p["venv_python"], proc_version_path=p["proc_version_path"])
    fingerprint = fingerprint_from_raw(raw)
    for i, req in enumerate(p["requests"]):
        if not isinstance(req.get("gpus", []), list) or not all(isinstance(g, int) for g in req.get("gpus", [])):
            module.fail_json(msg=f"dflash_fingerprint: requests[{i}] (instance {req.get('instance')!r}): "
                                 f"gpus must be a list of GPU indexes, got {req.get('gpus')!r}")
    requests = p["requests"] + requests_from_instances(p["instances"])
    refusals = gate(fingerprint, p["layers"], requests, host=p["host"] or "host",
                    allow_minor_version_compat=p["allow_minor_version_compat"])
    result = {"changed": False, "ansible_facts": {"dflash_fingerprint": fingerprint}, "refusals": refusals}
    if p["capture_dir"]:
        result["captured"] = [] if module.check_mode else write_capture(raw, p["capture_dir"])
        result["changed"] = True
    if p["return_raw"]:
        result["raw"] = raw
    module.exit_json(**result)


if __name__ == "__main__":
    main()
