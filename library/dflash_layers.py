#!/usr/bin/python
"""Ansible module: build/reuse the dflash venv layers on a host (logic: module_utils/dflash_layers)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: dflash_layers
short_description: Content-addressed venv layers (base + overlays) built with uv
description:
  - Validates the layer list, hashes each layer (spec + parent's hash + interpreter, + wheel sha256s
    in wheelhouse mode), reuses a layer whose directory holds a marker with that hash (nothing is
    written then), builds a changed one in C(<prefix>/layers/.tmp-*) and renames it into place.
  - C(action=inspect) only validates and reports each layer's interpreter (python version, libc,
    machine); it never writes.
options:
  prefix: {description: dflash prefix on the host (layers live in prefix/layers)., type: path, required: true}
  layers: {description: The dflash_venv_layers list., type: list, elements: dict, required: true}
  action: {description: "ensure (build/reuse), inspect (validate + interpreter facts), prune (remove
            layers that the kept releases do not use) or missing_wheels (which locked wheels the host
            wheelhouse lacks; reads only).", type: str, choices: [ensure, inspect, prune, missing_wheels],
           default: ensure}
  manifests: {description: "prune: the kept release manifests (each with layers: [{path}] and/or venv).",
              type: list, elements: dict, default: []}
  keep: {description: "prune: how many of the newest manifests count (< 1: all given).", type: int, default: 0}
  protect: {description: "prune: layer paths always kept (this run's dflash_layers).", type: list,
            elements: path, default: []}
  uv: {description: uv executable on the host (needed for ensure)., type: path}
  wheel_locks: {description: "Per layer name, the locked wheels [{filename, sha256, ...}] (wheelhouse mode).",
                type: dict}
  wheelhouse: {description: Host directory holding the locked wheels., type: path}
  cache_dir: {description: UV_CACHE_DIR for builds (a warm cache makes rebuilds fast)., type: path}
  compile_bytecode: {description: Compile .pyc at build time., type: bool, default: true}
  build_timeout: {description: Seconds allowed for one uv command., type: int, default: 3600}
author: dflash-deploy
"""

RETURN = r"""
layers: {description: "The dflash_layers fact: [{name, path, hash, parent, python, changed, ...}], final last.",
         returned: always, type: list}
interpreters: {description: Per layer, the interpreter facts (action=inspect)., returned: inspect, type: dict}
missing: {description: Wheel filenames to push (action=missing_wheels)., returned: missing_wheels, type: list}
removed: {description: Layer directories removed (action=prune)., returned: prune, type: list}
removed_tmp: {description: Leftover .tmp build directories removed., returned: ensure, type: list}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.dflash_layers import (
    LayerBuilder,
    LayerError,
    inspect_interpreter,
    layers_fact,
    missing_wheels,
    normalise_layer,
    prune_layers,
    validate_layers,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "prefix": {"type": "path", "required": True},
            "layers": {"type": "list", "elements": "dict", "default": []},
            "action": {"type": "str", "choices": ["ensure", "inspect", "prune", "missing_wheels"],
                       "default": "ensure"},
            "manifests": {"type": "list", "elements": "dict", "default": []},
            "keep": {"type": "int", "default": 0},
            "protect": {"type": "list", "elements": "path", "default": []},
            "uv": {"type": "path"},
            "wheel_locks": {"type": "dict"},
            "wheelhouse": {"type": "path"},
            "cache_dir": {"type": "path"},
            "compile_bytecode": {"type": "bool", "default": True},
            "build_timeout": {"type": "int", "default": 3600},
        },
        required_if=[("action", "ensure", ["uv"])],
        supports_check_mode=True,
    )
    p = module.params
    if p["action"] == "missing_wheels":
        wanted = [w for entries in (p["wheel_locks"] or {}).values() for w in entries]
        missing = missing_wheels(p["wheelhouse"], wanted)
        module.exit_json(changed=False, missing=missing, layers=[])
    if p["action"] == "prune":
        removed = prune_layers(p["prefix"], p["manifests"], p["keep"], p["protect"], module.check_mode)
        module.exit_json(changed=bool(removed), removed=removed, layers=[])
    errors = validate_layers(p["layers"])
    if errors:
        module.fail_json(msg="invalid dflash_venv_layers: " + "; ".join(errors), errors=errors)

    if p["action"] == "inspect":
        interpreters, problems = {}, []
        for layer in p["layers"]:
            spec = normalise_layer(layer)
            python = spec["python"] or f"{spec['existing_path']}/bin/python"
            try:
                interpreters[spec["name"]] = inspect_interpreter(python)
            except (LayerError, ValueError) as exc:
                field = "existing_path" if spec["existing_path"] else "python"
                problems.append(f"layer {spec['name']}: {field}: {exc}")
        if problems:
            module.fail_json(msg="; ".join(problems), errors=problems)
        module.exit_json(changed=False, interpreters=interpreters, layers=[])

    builder = LayerBuilder(p["prefix"], p["uv"], check_mode=module.check_mode, cache_dir=p["cache_dir"],
                           compile_bytecode=p["compile_bytecode"], build_timeout=p["build_timeout"])
    try:
        items, changed, stale = builder.ensure(p["layers"], p["wheel_locks"], p["wheelhouse"])
    except LayerError as exc:
        module.fail_json(msg=str(exc), commands=builder.log)
    module.exit_json(changed=changed, layers=layers_fact(items), removed_tmp=stale, commands=builder.log,
                     built=[i["name"] for i in items if i.get("changed")])


if __name__ == "__main__":
    main()
