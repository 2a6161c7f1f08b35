#!/usr/bin/python
"""Ansible module: read-only host facts for instance validation (logic: module_utils/dflash_instances)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: dflash_instances_facts
short_description: Read-only host facts the instances stage validates against
description:
  - Listening TCP ports with their process and systemd unit (from /proc, like C(ss -ltnp)), so
    ports held by something that is not one of our dflash-* units are refused.
  - For each model / draft / model_source path of the inventory, whether it exists, is a directory
    and is on tmpfs; the draft's block size from its config.json.
  - The dflash-*.service units installed in C(unit_dir).
  - With C(layer_path), the CUDA pieces shipped as pip packages in that layer (nvidia/*/lib
    directories, an nvcc and its version).
  - Changes nothing; check mode works.
options:
  instances: {description: The dflash_instances list of the host., type: list, elements: raw, default: []}
  layer_path: {description: The final layer's venv (dflash_layers[-1].path)., type: path}
  unit_dir: {description: Where the units are., type: path, default: /etc/systemd/system}
  sgl_kernel_file: {description: "sgl_kernel's __init__.py as the probe imported it (dflash_probe.sgl_kernel.file):
                     whether FA3 (flash_ops*.so) ships beside it.", type: path}
  runtimes: {description: "Per sglang version the host's instances run, its final layer's venv and the sgl_kernel
              the probe imported: {version: {layer_path, sgl_kernel_file}} (their CUDA pieces and FA3 per version).",
             type: dict, default: {}}
  prefix: {description: "The toolkit prefix: the instances of its current release (port, GPUs) and the free
            space there, in /var/cache and in Ansible's remote temporary directory.", type: path}
  space:
    description: "More directories a deploy writes, [{path, what}] (unit files, layers, trees, ...): their free space."
    type: list
    elements: dict
    default: []
  uv_cache_dir:
    description: "The uv cache directory the layer builds pass (empty: uv's own, found as uv finds it: UV_CACHE_DIR,
      XDG_CACHE_HOME/uv, ~/.cache/uv of the user that runs it): its free space."
    type: str
    default: ''
  check_uv_cache: {description: Whether a layer build runs uv on this host (its cache's free space)., type: bool,
                   default: false}
author: dflash-deploy
"""

RETURN = r"""
host_facts: {description: "{listeners, paths, drafts, units, overlay, runtimes}", returned: always, type: dict}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.dflash_common.disk import uv_cache_dir
from ansible.module_utils.dflash_instances.host import gather_host_facts


def main():
    module = AnsibleModule(
        argument_spec={
            "instances": {"type": "list", "elements": "raw", "default": []},
            "layer_path": {"type": "path"},
            "unit_dir": {"type": "path", "default": "/etc/systemd/system"},
            "sgl_kernel_file": {"type": "path"},
            "prefix": {"type": "path"},
            "space": {"type": "list", "elements": "dict", "default": []},
            "uv_cache_dir": {"type": "str", "default": ""},
            "check_uv_cache": {"type": "bool", "default": False},
            "runtimes": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    p = module.params
    space = []
    if p["prefix"]:
        space = [(p["prefix"], "releases and the toolkit's files"), ("/var/cache/dflash", "the instances' caches"),
                 (module.tmpdir, "Ansible's temporary files")]
        space += [(str(s["path"]), str(s.get("what") or "")) for s in p["space"] if s.get("path")]
        if p["check_uv_cache"]:
            space.append((uv_cache_dir(p["uv_cache_dir"]), "uv's cache (the layer builds)"))
    facts = gather_host_facts(p["instances"], p["layer_path"], p["unit_dir"], sgl_kernel_file=p["sgl_kernel_file"],
                              prefix=p["prefix"], space_paths=space, runtimes=p["runtimes"])
    module.exit_json(changed=False, host_facts=facts)


if __name__ == "__main__":
    main()
