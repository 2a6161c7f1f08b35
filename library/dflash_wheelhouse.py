#!/usr/bin/python
"""Ansible module (controller side): offline wheelhouse for the layers (logic: module_utils/dflash_layers)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: dflash_wheelhouse
short_description: Resolve, lock and download the layers' wheels for a host's platform, once
description:
  - Runs on the controller (delegate_to localhost). Layers are taken in order, parents first; each is
    resolved once for its host's target (python version, machine, glibc) with C(uv pip compile
    --format pylock.toml), with what its parent provides offered to the resolver (an existing venv's
    distributions as the host described them, a built parent's from its locked wheels). The lock
    (C(dir/locks/)) lists the whole closure, each member from the C(parent) or the C(layer) (name,
    version, filename, url, sha256); only the layer's wheels go to C(dir/files/), and every wheel's
    sha256 is checked on reuse (a corrupt one is downloaded again).
  - With C(uv_version) it also locks the uv wheel for the host and extracts its binary to
    C(dir/uv/<version>-<machine>/uv) for pushing.
options:
  dir: {description: Controller wheelhouse directory., type: path, required: true}
  layers: {description: The dflash_venv_layers list., type: list, elements: dict, default: []}
  interpreters: {description: "Per layer name, its host interpreter facts (dflash_layers action=inspect).",
                 type: dict, default: {}}
  distributions: {description: "Per existing layer name, the distributions it provides (dflash_layers
                  action=inspect).", type: dict, default: {}}
  uv_command: {description: The controller's uv command (argv list)., type: list, elements: str, default: [uv]}
  uv_version: {description: Pinned uv version to lock and extract for the host., type: str}
  uv_target: {description: "{arch, glibc} of the host for the uv binary.", type: dict}
  bundle: {description: "Wheel filenames (in dir/files) to pack into one tar under dir/push/ for a single
           push; returned as bundle_path.", type: list, elements: str}
author: dflash-deploy
"""

RETURN = r"""
locks: {description: "Per layer name its locked closure (source parent|layer; layer members with their wheel).",
        returned: always, type: dict}
files: {description: Sorted unique wheel filenames the host needs (the layers' own members)., returned: always,
        type: list}
downloaded: {description: Wheels downloaded by this run., returned: always, type: list}
bundle_path: {description: Controller path of the tar of the wheels to push., returned: with bundle, type: str}
uv_binary: {description: Controller path of the extracted uv binary., returned: with uv_version, type: str}
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.dflash_layers.build import normalise_layer, normalise_layers, validate_layers
from ansible.module_utils.dflash_layers.wheelhouse import (
    bundle_wheels,
    ensure_wheelhouse,
    extract_uv_binary,
)
from ansible.module_utils.dflash_layers.wheels import LayerError, target_from_interpreter


def main():
    module = AnsibleModule(
        argument_spec={
            "dir": {"type": "path", "required": True},
            "layers": {"type": "list", "elements": "dict", "default": []},
            "interpreters": {"type": "dict", "default": {}},
            "distributions": {"type": "dict", "default": {}},
            "uv_command": {"type": "list", "elements": "str", "default": ["uv"]},
            "uv_version": {"type": "str"},
            "uv_target": {"type": "dict"},
            "bundle": {"type": "list", "elements": "str"},
        },
        required_by={"uv_version": ["uv_target"]},
        supports_check_mode=True,
    )
    p = module.params
    if p["bundle"]:
        path = bundle_wheels(os.path.join(p["dir"], "files"), p["bundle"], os.path.join(p["dir"], "push"))
        module.exit_json(changed=False, bundle_path=path)
    if p["layers"]:
        errors = validate_layers(p["layers"])
        if errors:
            module.fail_json(msg="invalid dflash_venv_layers: " + "; ".join(errors), errors=errors)
    out = {"locks": {}, "downloaded": [], "resolved": [], "redownloaded": [], "lock_files": {}, "bytes": 0}
    changed = False
    try:
        specs = normalise_layers(p["layers"]) if p["layers"] else []
        targets = {}
        for spec in specs:
            if spec["existing_path"]:
                continue
            interp = p["interpreters"].get(spec["name"])
            if not interp:
                module.fail_json(msg=f"layer {spec['name']}: no interpreter facts given (run action=inspect first)")
            targets[spec["name"]] = target_from_interpreter(interp)
        if specs:
            res = ensure_wheelhouse(p["dir"], specs, targets, p["distributions"], p["uv_command"],
                                    check_mode=module.check_mode)
            changed |= res["changed"]
            for key in ("locks", "lock_files"):
                out[key].update(res[key])
            for key in ("downloaded", "resolved", "redownloaded"):
                out[key] += res[key]
            out["bytes"] += res["bytes"]
        if p["uv_version"]:
            t = p["uv_target"]
            uv_target = {"python_version": "3.12", "arch": t["arch"], "glibc": t.get("glibc", "2.17"),
                         "implementation": "cp"}
            uv_spec = normalise_layer({"name": "uv", "python": "python3", "no_deps": True,
                                       "requirements": [f"uv=={p['uv_version']}"]})
            res = ensure_wheelhouse(p["dir"], [uv_spec], {"uv": uv_target}, {}, p["uv_command"],
                                    check_mode=module.check_mode)
            changed |= res["changed"]
            out["downloaded"] += res["downloaded"]
            entries = res["locks"].get("uv")
            dest = os.path.join(p["dir"], "uv", f"{p['uv_version']}-{t['arch']}", "uv")
            if entries and not module.check_mode:
                changed |= extract_uv_binary(os.path.join(p["dir"], "files", entries[0]["filename"]), dest)
            elif not os.path.exists(dest):
                changed = True
            out["uv_binary"] = dest
    except LayerError as exc:
        module.fail_json(msg=str(exc), **out)
    out["files"] = sorted({e["filename"] for entries in out["locks"].values() for e in entries
                           if e.get("source", "layer") == "layer"})
    module.exit_json(changed=changed, **out)


if __name__ == "__main__":
    main()
