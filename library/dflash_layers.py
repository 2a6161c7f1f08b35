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
  - A layer with a parent installs only what its requirements' closure needs beyond what the parent
    already provides (module_utils/dflash_layers/overlay.py); its marker records what it took from the parent.
  - C(action=inspect) only validates and reports each layer's interpreter (python version, libc,
    machine) and, for an existing venv, the distributions it provides; it never writes.
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
  progress_file: {description: "ensure: a file on the host kept current with what the build does (step,
                  distributions installed, bytes written), read by the action plugin's progress lines; removed
                  at the end.", type: path}
author: dflash-deploy
"""

RETURN = r"""
layers: {description: "The dflash_layers fact: [{name, path, hash, parent, python, changed, ...}], final last.",
         returned: always, type: list}
interpreters: {description: Per layer, the interpreter facts (action=inspect)., returned: inspect, type: dict}
distributions: {description: "Per existing layer, what it provides: [{name, key, version, requires, ...}]
                (action=inspect).", returned: inspect, type: dict}
disk: {description: "Free space where the prefix is (action=inspect): {path, mount, free_mib, total_mib}.",
       returned: inspect, type: dict}
existing_names: {description: "Layer names with a directory under <prefix>/layers (action=inspect).",
                 returned: inspect, type: list}
built: {description: "Per layer built now: {installed, from_parent, bytes, build_seconds}.", returned: ensure, type: dict}
missing: {description: Wheel filenames to push (action=missing_wheels)., returned: missing_wheels, type: list}
removed: {description: Layer directories removed (action=prune)., returned: prune, type: list}
removed_tmp: {description: Leftover .tmp build directories removed., returned: ensure, type: list}
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.dflash_common.disk import free_space
from ansible.module_utils.dflash_common.hostlock import Heartbeat, LockError, fence
from ansible.module_utils.dflash_layers.build import (
    LayerBuilder,
    LayerError,
    default_runner,
    inspect_interpreter,
    layers_fact,
    normalise_layers,
    prune_layers,
    validate_layers,
)
from ansible.module_utils.dflash_layers.overlay import describe, view_paths
from ansible.module_utils.dflash_layers.wheelhouse import missing_wheels


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
            "progress_file": {"type": "path"},
        },
        required_if=[("action", "ensure", ["uv"])],
        supports_check_mode=True,
    )
    p = module.params
    if p["action"] == "missing_wheels":
        wanted = [w for entries in (p["wheel_locks"] or {}).values() for w in entries
                  if w.get("source", "layer") == "layer"]
        missing = missing_wheels(p["wheelhouse"], wanted)
        module.exit_json(changed=False, missing=missing, layers=[])
    if p["action"] == "prune":
        removed = prune_layers(p["prefix"], p["manifests"], p["keep"], p["protect"], module.check_mode)
        module.exit_json(changed=bool(removed), removed=removed, layers=[])
    errors = validate_layers(p["layers"])
    if errors:
        module.fail_json(msg="invalid dflash_venv_layers: " + "; ".join(errors), errors=errors)

    if p["action"] == "inspect":
        interpreters, distributions, problems = {}, {}, []
        for spec in normalise_layers(p["layers"]):
            python = spec["python"] or f"{spec['existing_path']}/bin/python"
            field = "existing_path" if spec["existing_path"] else "python"
            try:
                interp = inspect_interpreter(python, default_runner)
                if spec["existing_path"]:
                    distributions[spec["name"]] = describe(view_paths(python, interp["site"], default_runner))
            except (LayerError, ValueError) as exc:
                problems.append(f"layer {spec['name']}: {field}: {exc}")
                continue
            interpreters[spec["name"]] = interp
            parent = interpreters.get(spec["parent"]) if spec["parent"] else None
            if parent and parent["version"].split(".")[:2] != interp["version"].split(".")[:2]:
                problems.append(f"layer {spec['name']}: python: {python} is Python {interp['version']} but its parent "
                                f"{spec['parent']} runs Python {parent['version']}: a layer must use its parent's "
                                "Python version (leave python out to inherit it)")
        layers_dir = os.path.join(p["prefix"], "layers")
        existing = sorted({d.rsplit("-", 1)[0] for d in (os.listdir(layers_dir) if os.path.isdir(layers_dir) else [])
                           if not d.startswith(".")})
        facts = {"disk": free_space(p["prefix"]), "existing_names": existing}
        if problems:
            module.fail_json(msg="; ".join(problems), errors=problems, **facts)
        module.exit_json(changed=False, interpreters=interpreters, distributions=distributions, layers=[], **facts)

    builder = LayerBuilder(p["prefix"], p["uv"], check_mode=module.check_mode, cache_dir=p["cache_dir"],
                           compile_bytecode=p["compile_bytecode"], build_timeout=p["build_timeout"],
                           progress_file=None if module.check_mode else p["progress_file"])
    try:
        if not module.check_mode:
            fence()  # this run's host lock: refreshed, or the build refused when another run holds the host
        with Heartbeat():  # a build takes minutes: the lock stays fresh meanwhile
            items, changed, stale = builder.ensure(p["layers"], p["wheel_locks"], p["wheelhouse"])
    except (LayerError, LockError) as exc:
        module.fail_json(msg=str(exc), commands=builder.log)
    finally:
        if p["progress_file"] and os.path.exists(p["progress_file"]):
            os.unlink(p["progress_file"])
    built = {i["name"]: {k: i.get(k) for k in ("installed", "from_parent", "bytes", "build_seconds")}
             for i in items if i.get("changed")}
    module.exit_json(changed=changed, layers=layers_fact(items), removed_tmp=stale, commands=builder.log,
                     built=built)


if __name__ == "__main__":
    main()
